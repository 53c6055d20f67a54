package model

import (
	"errors"
	"fmt"

	"github.com/parallax-engine/parallax/engine"
)

// BatchCache is a KV cache of Slots independent sequences of up to Cap
// positions each, for continuous batching: a sequence is prefilled into a
// free slot while the others wait (Prefill), every occupied slot advances
// by one token per decode step at its own position (StepSlots), and a
// finished sequence frees its slot (Release) for the next one.
//
// Layout: each layer's K and V are [Slots, Hkv, Cap+1, D]. Position Cap of
// every slot is scratch that no sequence ever reads: a decode step runs
// over all Slots rows (so its shapes, and with them its kernels and every
// row's arithmetic, do not depend on which slots are busy), and a slot
// left out of a step appends its dummy row there. Prefill runs the prompt
// through the model as a batch of one in a one-sequence cache and copies
// that cache into the slot (one copy per request, when the slot is first
// stepped or another prefill starts).
type BatchCache struct {
	Slots, Cap int

	lens []int    // valid positions of each slot
	kv   *KVCache // B = Slots, capacity Cap+1; ragged (seqPos set)
	pre  *KVCache // B = 1, capacity Cap+1: the prefill in progress

	preSlot int // the slot whose prefill lives in pre and is not yet copied; -1: none
	flatK   []*engine.Tensor
	flatV   []*engine.Tensor // kv's layers viewed as [1, 1, Slots*Hkv*(Cap+1), D]
	preK    []*engine.Tensor
	preV    []*engine.Tensor // pre's layers viewed as [1, 1, Hkv*(Cap+1), D]
}

// NewBatchCache allocates a cache for slots sequences of up to capacity
// positions each (at most the model's MaxSeq).
//
// Decode attention splits each sequence's keys into chunks; on the CPU,
// whose automatic choice depends on the lengths of all sequences in the
// batch, the cache fixes one chunk, so that a sequence's tokens do not
// depend on the other sequences it is batched with. Other backends choose
// from the shapes alone.
func (m *Model) NewBatchCache(slots, capacity int) (*BatchCache, error) {
	c := m.Config
	if slots <= 0 || capacity <= 0 {
		return nil, fmt.Errorf("batch cache: %d slots and capacity %d must be positive", slots, capacity)
	}
	if capacity > c.MaxSeq {
		return nil, fmt.Errorf("batch cache: capacity %d exceeds the model's max_seq %d", capacity, c.MaxSeq)
	}
	c1 := capacity + 1
	bc := &BatchCache{Slots: slots, Cap: capacity, lens: make([]int, slots), preSlot: -1}
	var err error
	if bc.kv, err = m.newCache(slots, c1); err != nil {
		return nil, fmt.Errorf("batch cache: %w", err)
	}
	if bc.pre, err = m.newCache(1, c1); err != nil {
		bc.kv.Free()
		return nil, fmt.Errorf("batch cache: %w", err)
	}
	if bc.kv.seqPos, err = bc.kv.starts.Reshape(slots, 1); err != nil {
		bc.Free()
		return nil, fmt.Errorf("batch cache: %w", err)
	}
	if m.Dev.Info().Backend == "cpu" {
		bc.kv.splits = 1
	}
	flat := func(t *engine.Tensor, rows int) *engine.Tensor {
		v, ferr := t.Reshape(1, 1, rows, c.HeadDim)
		if ferr != nil && err == nil {
			err = ferr
		}
		return v
	}
	for l := range c.Layers {
		bc.flatK = append(bc.flatK, flat(bc.kv.K[l], slots*c.KVHeads*c1))
		bc.flatV = append(bc.flatV, flat(bc.kv.V[l], slots*c.KVHeads*c1))
		bc.preK = append(bc.preK, flat(bc.pre.K[l], c.KVHeads*c1))
		bc.preV = append(bc.preV, flat(bc.pre.V[l], c.KVHeads*c1))
	}
	if err != nil {
		bc.Free()
		return nil, fmt.Errorf("batch cache: %w", err)
	}
	return bc, nil
}

// newCache allocates a KVCache of any capacity (the batch cache's carries
// one scratch position past the model's MaxSeq).
func (m *Model) newCache(B, capacity int) (*KVCache, error) {
	c := m.Config
	al := &alloc{dev: m.Dev}
	kv := &KVCache{B: B, Cap: capacity, dev: m.Dev}
	for range c.Layers {
		kv.K = append(kv.K, al.t(m.DType, B, c.KVHeads, capacity, c.HeadDim))
		kv.V = append(kv.V, al.t(m.DType, B, c.KVHeads, capacity, c.HeadDim))
	}
	kv.lens = al.t(engine.I32, B)
	kv.starts = al.t(engine.I32, B)
	if al.err != nil {
		al.fail()
		return nil, al.err
	}
	return kv, nil
}

// Len returns the number of positions slot holds (0 for a free slot).
func (bc *BatchCache) Len(slot int) int {
	if slot < 0 || slot >= len(bc.lens) {
		return 0
	}
	return bc.lens[slot]
}

// Release empties slot so that a new sequence can be prefilled into it.
func (bc *BatchCache) Release(slot int) {
	if slot < 0 || slot >= len(bc.lens) {
		return
	}
	bc.lens[slot] = 0
	if bc.preSlot == slot {
		bc.preSlot = -1
	}
}

// Free releases the cache's memory (once; later calls do nothing).
func (bc *BatchCache) Free() {
	if bc.kv != nil {
		bc.kv.Free()
		bc.kv = nil
	}
	if bc.pre != nil {
		bc.pre.Free()
		bc.pre = nil
	}
}

func (bc *BatchCache) check(slot int) error {
	if bc.kv == nil {
		return errors.New("batch cache: freed")
	}
	if slot < 0 || slot >= bc.Slots {
		return fmt.Errorf("batch cache: slot %d is outside [0, %d)", slot, bc.Slots)
	}
	return nil
}

// flush copies a finished prefill from the one-sequence cache into its
// slot: every head's Cap+1 rows, one contiguous run of the flat views.
func (m *Model) flush(bc *BatchCache) error {
	s := bc.preSlot
	if s < 0 {
		return nil
	}
	bc.preSlot = -1
	rows := m.Config.KVHeads * (bc.Cap + 1)
	for l := range bc.flatK {
		if err := m.Dev.KVAppend(bc.flatK[l], bc.preK[l], s*rows); err != nil {
			return fmt.Errorf("batch cache: copy prefill of slot %d: %w", s, err)
		}
		if err := m.Dev.KVAppend(bc.flatV[l], bc.preV[l], s*rows); err != nil {
			return fmt.Errorf("batch cache: copy prefill of slot %d: %w", s, err)
		}
	}
	return nil
}

// Prefill appends tokens to the sequence of slot and returns the logits
// [V] of its last position. The first call for a slot (a free one) starts
// a new sequence; later calls continue it (chunked prefill) as long as no
// other slot was prefilled or stepped in between. A prompt prefilled in
// one call runs exactly as Step's first call over a one-sequence cache
// does, so its logits, and the tokens a decode continues with, are those
// of Generate.
func (m *Model) Prefill(bc *BatchCache, slot int, tokens []int32) ([]float32, error) {
	if err := bc.check(slot); err != nil {
		return nil, fmt.Errorf("prefill: %w", err)
	}
	if len(tokens) == 0 {
		return nil, errors.New("prefill: no tokens")
	}
	n := bc.lens[slot]
	if n+len(tokens) > bc.Cap {
		return nil, fmt.Errorf("prefill: slot %d: %d + %d positions exceed the capacity %d", slot, n, len(tokens), bc.Cap)
	}
	if n > 0 && bc.preSlot != slot {
		return nil, fmt.Errorf("prefill: slot %d holds a sequence that is no longer being prefilled (release it first)", slot)
	}
	if n == 0 {
		if err := m.flush(bc); err != nil {
			return nil, fmt.Errorf("prefill: %w", err)
		}
		bc.pre.Reset()
		bc.preSlot = slot
	}
	logits, err := m.Step(bc.pre, tokens, 1, len(tokens), true)
	m.last = nil
	if err != nil {
		bc.lens[slot], bc.preSlot = 0, -1
		return nil, fmt.Errorf("prefill: %w", err)
	}
	bc.lens[slot] = bc.pre.Len
	return logits, nil
}

// StepSlots is one decode step of a ragged batch: the sequence of each
// slots[i] (occupied and distinct) takes tokens[i] at its next position
// Len(slots[i]), appends its keys and values there and advances by one.
// It returns the logits [len(slots), V] (row i for slots[i]). Every slot
// runs, the others with a dummy token appended to their scratch position,
// so the result of each sequence is independent of the others in the step.
func (m *Model) StepSlots(bc *BatchCache, slots []int, tokens []int32) ([]float32, error) {
	logits, err := m.stepSlots(bc, slots, tokens)
	if err != nil {
		return nil, err
	}
	all, err := m.readLogits(logits)
	if err != nil {
		return nil, fmt.Errorf("step slots: %w", err)
	}
	for _, s := range slots {
		bc.lens[s]++
	}
	V := m.Config.Vocab
	out := make([]float32, 0, len(slots)*V)
	for _, s := range slots {
		out = append(out, all[s*V:(s+1)*V]...)
	}
	return out, nil
}

// StepSlotsGreedy is StepSlots followed by greedy sampling on the device
// over the first classes ids (1 <= classes <= V; ids past them are never
// chosen): it returns the next token of each slots[i], the argmax of its
// logits (the lowest id among equal maxima, as Sampler's greedy choice),
// and reads back only the slots' ids rather than their logits. Logits
// holding a NaN are an error.
func (m *Model) StepSlotsGreedy(bc *BatchCache, slots []int, tokens []int32, classes int) ([]int32, error) {
	if classes < 1 || classes > m.Config.Vocab {
		return nil, fmt.Errorf("step slots greedy: %d classes outside [1, %d]", classes, m.Config.Vocab)
	}
	logits, err := m.stepSlots(bc, slots, tokens)
	if err != nil {
		return nil, err
	}
	all, err := m.argMax(bc.kv, logits, classes)
	if err != nil {
		return nil, fmt.Errorf("step slots greedy: %w", err)
	}
	out := make([]int32, len(slots))
	for i, s := range slots {
		if out[i] = all[s]; out[i] < 0 {
			return nil, fmt.Errorf("step slots greedy: the logits of slot %d are not finite", s)
		}
	}
	for _, s := range slots {
		bc.lens[s]++
	}
	return out, nil
}

// stepSlots runs StepSlots up to the logits of every slot on the device
// ([Slots, W], W the padded vocabulary); the caller advances the slots'
// lengths once it has read what it needs.
func (m *Model) stepSlots(bc *BatchCache, slots []int, tokens []int32) (*engine.Tensor, error) {
	if bc == nil || bc.kv == nil {
		return nil, errors.New("step slots: no batch cache")
	}
	if len(slots) == 0 || len(slots) != len(tokens) {
		return nil, fmt.Errorf("step slots: %d slots and %d tokens (want the same positive number)", len(slots), len(tokens))
	}
	S, V := bc.Slots, int32(m.Config.Vocab)
	ids := make([]int32, S)
	lens := make([]int32, S)
	starts := make([]int32, S)
	for s := range S {
		lens[s], starts[s] = 1, int32(bc.Cap) // idle: the scratch position
	}
	seen := make([]bool, S)
	for i, s := range slots {
		if err := bc.check(s); err != nil {
			return nil, fmt.Errorf("step slots: %w", err)
		}
		switch {
		case seen[s]:
			return nil, fmt.Errorf("step slots: slot %d appears twice", s)
		case bc.lens[s] == 0:
			return nil, fmt.Errorf("step slots: slot %d is empty (prefill it first)", s)
		case bc.lens[s] >= bc.Cap:
			return nil, fmt.Errorf("step slots: slot %d is full (%d positions)", s, bc.Cap)
		case tokens[i] < 0 || tokens[i] >= V:
			return nil, fmt.Errorf("step slots: token %d of slot %d is outside the vocabulary [0, %d)", tokens[i], s, V)
		}
		seen[s] = true
		ids[s], starts[s], lens[s] = tokens[i], int32(bc.lens[s]), int32(bc.lens[s]+1)
	}
	if err := m.flush(bc); err != nil {
		return nil, fmt.Errorf("step slots: %w", err)
	}
	a, err := m.activations(S, 1, false)
	if err != nil {
		return nil, err
	}
	m.last = nil
	if err := m.upload(a, ids, nil, a.posStart); err != nil {
		return nil, fmt.Errorf("step slots: %w", err)
	}
	if err := writeInt32s(m.Dev, bc.kv.lens, lens); err != nil {
		return nil, fmt.Errorf("step slots: upload lengths: %w", err)
	}
	if err := writeInt32s(m.Dev, bc.kv.starts, starts); err != nil {
		return nil, fmt.Errorf("step slots: upload starts: %w", err)
	}
	ran, err := m.replayDecode(bc.kv, a)
	if err != nil {
		return nil, fmt.Errorf("step slots: %w", err)
	}
	if !ran {
		if err := m.forward(a, bc.kv, false); err != nil {
			return nil, fmt.Errorf("step slots: %w", err)
		}
	}
	return a.logits, nil
}
