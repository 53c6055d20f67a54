package model

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"

	"github.com/parallax-engine/parallax/engine"
)

// KVCache holds every layer's keys and values (after the head norm and RoPE)
// for B sequences that advance together: each layer's K and V are
// [B, Hkv, Cap, D] in the model's compute dtype. Len positions are filled,
// the same number for every sequence.
type KVCache struct {
	B, Cap int
	Len    int
	K, V   []*engine.Tensor
	lens   *engine.Tensor // I32 [B], Len as DecodeAttention reads it
	starts *engine.Tensor // I32 [B], where a decode step appends (KVAppendAt)
	next   *engine.Tensor // I32 [B], StepGreedy's ids (allocated on first use)
	seqPos *engine.Tensor // starts as I32 [B, 1] RoPE positions: set for a BatchCache's ragged steps, else nil
	splits int            // DecodeAttention's Splits (0: the backend's choice)
	dev    engine.Device

	graphs   map[*Activations]engine.Graph // recorded decode steps by activation set (graph.go)
	warm     map[*Activations]bool         // activation sets that ran a step eagerly
	noGraphs bool                          // recording failed: eager steps only
}

// NewKVCache allocates a cache for B sequences of up to capacity positions
// (at most the model's MaxSeq).
func (m *Model) NewKVCache(B, capacity int) (*KVCache, error) {
	c := m.Config
	if B <= 0 || capacity <= 0 {
		return nil, fmt.Errorf("kv cache: batch %d and capacity %d must be positive", B, capacity)
	}
	if capacity > c.MaxSeq {
		return nil, fmt.Errorf("kv cache: capacity %d exceeds the model's max_seq %d", capacity, c.MaxSeq)
	}
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
		return nil, fmt.Errorf("kv cache: %w", al.err)
	}
	return kv, nil
}

// Reset empties the cache (its memory and recorded steps are kept).
func (kv *KVCache) Reset() { kv.Len = 0 }

// Free releases the cache's memory (once; later calls do nothing).
func (kv *KVCache) Free() {
	if kv.K == nil {
		return
	}
	kv.freeGraphs()
	for i := range kv.K {
		kv.dev.Free(kv.K[i])
		kv.dev.Free(kv.V[i])
	}
	kv.dev.Free(kv.lens)
	kv.dev.Free(kv.starts)
	if kv.next != nil {
		kv.dev.Free(kv.next)
		kv.next = nil
	}
	kv.K, kv.V, kv.lens, kv.starts = nil, nil, nil, nil
}

// Step runs tokens [B, T] (row-major) at positions kv.Len..kv.Len+T-1 of
// every sequence, appends their keys and values to the cache and advances
// kv.Len by T. The first step over an empty cache (the prompt, "prefill") is
// a normal causal forward that also fills the cache; later steps (T = 1 to
// decode token by token, or more) attend over the cache with
// DecodeAttention. It returns the logits [B, T, V], or with lastOnly just the
// last position's [B, V] (the head then runs on B rows only).
//
// All B sequences have the same length: the op set's RoPE takes one position
// vector and KVAppend one start for the whole batch, so ragged batches would
// need per-sequence positions in both.
func (m *Model) Step(kv *KVCache, tokens []int32, B, T int, lastOnly bool) ([]float32, error) {
	logits, err := m.step(kv, tokens, B, T, lastOnly)
	if err != nil {
		return nil, err
	}
	return m.readLogits(logits)
}

// StepGreedy is Step followed by greedy sampling on the device: it returns
// each sequence's next token, the argmax of its last position's logits
// (the lowest id among equal maxima, as Sampler's greedy choice), and reads
// back only those B ids. Logits holding a NaN are an error.
func (m *Model) StepGreedy(kv *KVCache, tokens []int32, B, T int) ([]int32, error) {
	return m.stepGreedy(kv, tokens, B, T, m.Config.Vocab)
}

// stepGreedy is StepGreedy over the first classes ids only.
func (m *Model) stepGreedy(kv *KVCache, tokens []int32, B, T, classes int) ([]int32, error) {
	logits, err := m.step(kv, tokens, B, T, true)
	if err != nil {
		return nil, err
	}
	if logits.Dim(0) != B {
		// Only the last position's rows: the lastOnly head gives [B, W].
		return nil, fmt.Errorf("step greedy: logits %v are not one row per sequence", logits.Shape())
	}
	ids, err := m.argMax(kv, logits, classes)
	if err != nil {
		return nil, fmt.Errorf("step greedy: %w", err)
	}
	for b, id := range ids {
		if id < 0 {
			return nil, fmt.Errorf("step greedy: the logits of sequence %d are not finite", b)
		}
	}
	return ids, nil
}

// argMax picks each row's greedy token of logits [R, W] over its first
// classes ids on the device, into the cache's id buffer (allocated at R
// rows the first time), and reads back the R ids; a row whose logits hold
// a NaN gets -1.
func (m *Model) argMax(kv *KVCache, logits *engine.Tensor, classes int) ([]int32, error) {
	if kv.next == nil {
		var err error
		if kv.next, err = m.Dev.Alloc(engine.I32, logits.Dim(0)); err != nil {
			return nil, err
		}
	}
	if err := engine.ArgMaxRows(m.Dev, kv.next, logits, classes); err != nil {
		return nil, err
	}
	return engine.Int32s(kv.next)
}

// step runs Step up to the logits on the device: [B*T, W], or [B, W] for the
// last positions (lastOnly with T > 1), W the padded vocabulary.
func (m *Model) step(kv *KVCache, tokens []int32, B, T int, lastOnly bool) (*engine.Tensor, error) {
	if kv == nil || kv.K == nil {
		return nil, errors.New("step: no kv cache")
	}
	if B != kv.B {
		return nil, fmt.Errorf("step: batch %d differs from the cache's %d", B, kv.B)
	}
	if kv.Len+T > kv.Cap {
		return nil, fmt.Errorf("step: %d more positions do not fit the kv cache (%d of %d used)", T, kv.Len, kv.Cap)
	}
	if err := m.checkTokens(tokens, nil, B, T); err != nil {
		return nil, fmt.Errorf("step: %w", err)
	}
	a, err := m.activations(B, T, false)
	if err != nil {
		return nil, err
	}
	m.last = nil
	if err := m.upload(a, tokens, nil, kv.Len); err != nil {
		return nil, err
	}
	ran := false
	// The starts are read by the prefill's fused attention inputs as well.
	lens, starts := make([]int32, B), make([]int32, B)
	for i := range lens {
		lens[i], starts[i] = int32(kv.Len+T), int32(kv.Len)
	}
	if err := writeInt32s(m.Dev, kv.lens, lens); err != nil {
		return nil, fmt.Errorf("step: upload lengths: %w", err)
	}
	if err := writeInt32s(m.Dev, kv.starts, starts); err != nil {
		return nil, fmt.Errorf("step: upload starts: %w", err)
	}
	if kv.Len > 0 && T == 1 {
		if ran, err = m.replayDecode(kv, a); err != nil {
			return nil, err
		}
	}
	if !ran {
		if err := m.forward(a, kv, lastOnly && T > 1); err != nil {
			return nil, fmt.Errorf("step: %w", err)
		}
	}
	kv.Len += T
	if lastOnly && T > 1 {
		return a.lastLogits, nil
	}
	m.last = a
	return a.logits, nil
}

// SampleOptions configure a Sampler.
type SampleOptions struct {
	// Temperature divides the logits; 0 means greedy (argmax).
	Temperature float64
	// TopK keeps the K most likely tokens (0: all).
	TopK int
	// TopP keeps the smallest set of most likely tokens whose probability
	// reaches TopP (nucleus sampling; 0 or 1: all).
	TopP float64
	// Seed seeds the sampler's PCG generator.
	Seed uint64
}

// Sampler draws tokens from logits on the host, reproducibly for a seed.
type Sampler struct {
	opts SampleOptions
	rng  *rand.Rand
	idx  []int
	prob []float64
}

// NewSampler validates o and returns a sampler.
func NewSampler(o SampleOptions) (*Sampler, error) {
	if !(o.Temperature >= 0) || math.IsInf(o.Temperature, 0) {
		return nil, fmt.Errorf("sampler: temperature %v must be finite and >= 0", o.Temperature)
	}
	if o.TopK < 0 {
		return nil, fmt.Errorf("sampler: top-k %d is negative", o.TopK)
	}
	if !(o.TopP >= 0 && o.TopP <= 1) {
		return nil, fmt.Errorf("sampler: top-p %v is not in [0, 1]", o.TopP)
	}
	return &Sampler{opts: o, rng: rand.New(rand.NewPCG(o.Seed, 0x9e3779b97f4a7c15))}, nil
}

// Sample picks a token from one row of logits.
func (s *Sampler) Sample(logits []float32) int {
	if len(logits) == 0 {
		return -1
	}
	if s.opts.Temperature == 0 {
		best := 0
		for i, v := range logits {
			if v > logits[best] {
				best = i
			}
		}
		return best
	}
	// Candidates, sorted by logit (descending, ties by index) only when
	// top-k or top-p needs the order.
	s.idx = s.idx[:0]
	for i := range logits {
		s.idx = append(s.idx, i)
	}
	n := len(s.idx)
	k, p := s.opts.TopK, s.opts.TopP
	filter := (k > 0 && k < n) || (p > 0 && p < 1)
	if filter {
		sort.SliceStable(s.idx, func(a, b int) bool { return logits[s.idx[a]] > logits[s.idx[b]] })
		if k > 0 && k < n {
			n = k
		}
	}
	top := float64(logits[0])
	for _, v := range logits {
		top = math.Max(top, float64(v))
	}
	inv := 1 / s.opts.Temperature
	s.prob = slices.Grow(s.prob[:0], n)[:n]
	var sum float64
	for i := range n {
		e := math.Exp((float64(logits[s.idx[i]]) - top) * inv)
		s.prob[i] = e
		sum += e
	}
	if p > 0 && p < 1 {
		var cum float64
		for i := range n {
			cum += s.prob[i] / sum
			if cum >= p {
				n = i + 1
				break
			}
		}
		sum = 0
		for i := range n {
			sum += s.prob[i]
		}
	}
	u := s.rng.Float64() * sum
	for i := range n {
		u -= s.prob[i]
		if u < 0 {
			return s.idx[i]
		}
	}
	return s.idx[n-1]
}

// GenerateOptions configure Generate.
type GenerateOptions struct {
	Sample SampleOptions
	// Stop lists token ids that end generation, besides the config's EOS ids
	// (unless IgnoreEOS). A stop token is neither returned nor passed to the
	// callback.
	Stop      []int
	IgnoreEOS bool
	// Suppress lists token ids that are never sampled: their logits are set
	// to -Inf first, e.g. the ids of a model vocabulary larger than its
	// tokenizer's, which could not be decoded. A suppressed stop token can
	// therefore never end generation.
	Suppress []int
}

// Generate continues prompt by up to n tokens: it prefills the prompt into a
// KV cache with one forward, then decodes token by token, sampling on the
// host. fn, if not nil, sees each token as it is produced and can stop
// generation by returning false. It returns the generated tokens.
func (m *Model) Generate(prompt []int, n int, o GenerateOptions, fn func(token int) bool) ([]int, error) {
	if len(prompt) == 0 {
		return nil, errors.New("generate: empty prompt")
	}
	if n <= 0 {
		return nil, nil
	}
	capacity := len(prompt) + n - 1
	if capacity > m.Config.MaxSeq {
		return nil, fmt.Errorf("generate: prompt %d + %d tokens exceed the model's max_seq %d", len(prompt), n, m.Config.MaxSeq)
	}
	s, err := NewSampler(o.Sample)
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	V := m.Config.Vocab
	banned := make([]bool, V)
	left := V
	for _, t := range o.Suppress {
		if t < 0 || t >= V {
			return nil, fmt.Errorf("generate: suppressed token %d is outside the vocabulary [0, %d)", t, V)
		}
		if !banned[t] {
			banned[t] = true
			left--
		}
	}
	if left == 0 {
		return nil, fmt.Errorf("generate: all %d tokens are suppressed", V)
	}
	stop := map[int]bool{}
	for _, t := range o.Stop {
		stop[t] = true
	}
	if !o.IgnoreEOS {
		for _, t := range m.Config.EOS {
			stop[t] = true
		}
	}
	kv, err := m.NewKVCache(1, capacity)
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	defer kv.Free()
	ids := make([]int32, len(prompt))
	for i, t := range prompt {
		ids[i] = int32(t)
	}
	if classes := GreedyClasses(o.Sample.Temperature, o.Suppress, V); classes > 0 {
		// Greedy over a contiguous range of ids: pick on the device and
		// read back one id a token, not the logits.
		var out []int
		next, err := m.stepGreedy(kv, ids, 1, len(ids), classes)
		for err == nil {
			tok := int(next[0])
			if stop[tok] {
				break
			}
			out = append(out, tok)
			if (fn != nil && !fn(tok)) || len(out) == n {
				break
			}
			next, err = m.stepGreedy(kv, next, 1, 1, classes)
		}
		if err != nil {
			return out, fmt.Errorf("generate: token %d: %w", len(out), err)
		}
		return out, nil
	}
	logits, err := m.Step(kv, ids, 1, len(ids), true)
	if err != nil {
		return nil, fmt.Errorf("generate: prompt: %w", err)
	}
	var out []int
	for len(out) < n {
		for _, t := range o.Suppress {
			logits[t] = float32(math.Inf(-1))
		}
		tok := s.Sample(logits)
		if stop[tok] {
			break
		}
		out = append(out, tok)
		if fn != nil && !fn(tok) {
			break
		}
		if len(out) == n {
			break
		}
		if logits, err = m.Step(kv, []int32{int32(tok)}, 1, 1, true); err != nil {
			return out, fmt.Errorf("generate: token %d: %w", len(out), err)
		}
	}
	return out, nil
}

// GreedyClasses returns how many leading ids a greedy pick on the device
// may range over: at temperature 0, with the suppressed ids (if any)
// forming the top of the vocabulary [classes, vocab) (the padding rows of
// a model larger than its tokenizer), an argmax over the first classes ids
// is the sampler's choice. It returns 0 (sample on the host) otherwise.
// Ids outside [0, vocab) are ignored.
func GreedyClasses(temperature float64, suppress []int, vocab int) int {
	if temperature != 0 {
		return 0
	}
	banned := make([]bool, vocab)
	for _, t := range suppress {
		if t >= 0 && t < vocab {
			banned[t] = true
		}
	}
	n := vocab
	for n > 0 && banned[n-1] {
		n--
	}
	for _, b := range banned[:n] {
		if b {
			return 0
		}
	}
	return n
}
