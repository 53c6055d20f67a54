package data

import (
	"fmt"
)

// SamplerState is everything needed to continue a Sampler exactly: with the
// same shards and sequence length, a sampler restored from it yields the
// same windows the original would have yielded next.
type SamplerState struct {
	Seed  uint64 `json:"seed"`
	Epoch int    `json:"epoch"` // passes completed over the training stream
	Pos   int    `json:"pos"`   // windows served in the current epoch
}

// Sampler serves training windows of T+1 tokens (inputs and their shifted
// targets). Each epoch draws a random start offset in [0, T) and cuts every
// shard into consecutive windows with stride T from there, then visits them
// in a random order; both come from a generator seeded by (Seed, epoch), so
// the sampler's whole state is SamplerState and nothing drifts on resume.
//
// Shards with a document index (WriteDocShard) are packed instead: see
// packRows. Their windows are the same rows every epoch, visited in a new
// random order each epoch, and they carry ignored targets (Ignored).
type Sampler struct {
	shards []*Shard
	t      int
	st     SamplerState
	order  []window // the current epoch's windows in visiting order
	rows   []window // packed mode: every row, in packing order; nil otherwise
}

type window struct {
	shard int32
	start int64
	n     int32 // packed rows: tokens taken from the shard (the rest is padding)
}

// NewSampler returns a sampler of windows of t+1 tokens over shards.
func NewSampler(shards []*Shard, t int, seed uint64) (*Sampler, error) {
	if t < 1 {
		return nil, fmt.Errorf("sampler: sequence length %d must be >= 1", t)
	}
	longest := 0
	for _, s := range shards {
		longest = max(longest, s.Len())
	}
	s := &Sampler{shards: shards, t: t}
	if packed(shards) {
		s.rows = packRows(shards, t)
		if len(s.rows) == 0 {
			return nil, fmt.Errorf("sampler: the training data has no samples")
		}
	} else if longest < t+1 {
		return nil, fmt.Errorf("sampler: the training data (%d tokens in the longest shard) is shorter than one window of %d tokens; use a shorter --seq or more text", longest, t+1)
	}
	s.Restore(SamplerState{Seed: seed})
	return s, nil
}

// State returns the sampler's position.
func (s *Sampler) State() SamplerState { return s.st }

// Restore moves the sampler to a saved position.
func (s *Sampler) Restore(st SamplerState) error {
	if st.Epoch < 0 || st.Pos < 0 {
		return fmt.Errorf("sampler: invalid state %+v", st)
	}
	s.st = st
	s.plan()
	if st.Pos > len(s.order) {
		return fmt.Errorf("sampler: position %d is past the %d windows of epoch %d (different data or sequence length?)", st.Pos, len(s.order), st.Epoch)
	}
	return nil
}

// WindowsPerEpoch is the number of windows in the current epoch.
func (s *Sampler) WindowsPerEpoch() int { return len(s.order) }

// plan lays out the current epoch's windows.
func (s *Sampler) plan() {
	rng := newRNG(s.st.Seed, uint64(s.st.Epoch))
	s.order = s.order[:0]
	if s.rows != nil {
		s.order = append(s.order, s.rows...)
		shuffle(rng, s.order)
		return
	}
	off := int(rng.below(uint64(s.t)))
	for i, sh := range s.shards {
		o := off
		if sh.Len()-o < s.t+1 {
			o = 0 // a short shard still contributes from its start
		}
		for st := o; st+s.t+1 <= sh.Len(); st += s.t {
			s.order = append(s.order, window{shard: int32(i), start: int64(st)})
		}
	}
	shuffle(rng, s.order)
}

// shuffle permutes w uniformly (Fisher-Yates).
func shuffle(rng *rng, w []window) {
	for i := len(w) - 1; i > 0; i-- {
		j := int(rng.below(uint64(i + 1)))
		w[i], w[j] = w[j], w[i]
	}
}

// Next fills dst (length b*(T+1)) with b windows, row after row.
func (s *Sampler) Next(dst []int32, b int) error {
	w := s.t + 1
	if len(dst) != b*w {
		return fmt.Errorf("sampler: buffer holds %d tokens, want %d x %d", len(dst), b, w)
	}
	for r := range b {
		if s.st.Pos >= len(s.order) {
			s.st.Epoch++
			s.st.Pos = 0
			s.plan()
		}
		win := s.order[s.st.Pos]
		s.st.Pos++
		if s.rows != nil {
			fillRow(dst[r*w:(r+1)*w], s.shards[win.shard], win)
		} else {
			s.shards[win.shard].Copy(dst[r*w:(r+1)*w], int(win.start))
		}
	}
	return nil
}

// Skip advances the sampler past n windows without reading them (a
// data-parallel rank skips the rows of the other ranks).
func (s *Sampler) Skip(n int) {
	for range n {
		if s.st.Pos >= len(s.order) {
			s.st.Epoch++
			s.st.Pos = 0
			s.plan()
		}
		s.st.Pos++
	}
}

// EvalWindows returns up to limit consecutive, non-overlapping windows of t+1
// tokens (stride t) from the start of shards, for a deterministic
// validation loss; limit <= 0 means all of them.
//
// Packed shards (with a document index) give their packed rows in packing
// order instead, with ignored targets marked as the sampler's are.
func EvalWindows(shards []*Shard, t, limit int) [][]int32 {
	var out [][]int32
	if packed(shards) {
		for _, row := range packRows(shards, t) {
			if limit > 0 && len(out) >= limit {
				break
			}
			w := make([]int32, t+1)
			fillRow(w, shards[row.shard], row)
			out = append(out, w)
		}
		return out
	}
	for _, sh := range shards {
		for st := 0; st+t+1 <= sh.Len(); st += t {
			if limit > 0 && len(out) >= limit {
				return out
			}
			w := make([]int32, t+1)
			sh.Copy(w, st)
			out = append(out, w)
		}
	}
	return out
}

// rng is SplitMix64 (Steele, Lea, Flood 2014): a fixed, tiny generator whose
// sequence never changes with the Go release.
type rng struct{ x uint64 }

func newRNG(seed, stream uint64) *rng {
	r := &rng{x: seed ^ (stream+1)*0x9e3779b97f4a7c15}
	r.next()
	return r
}

func (r *rng) next() uint64 {
	r.x += 0x9e3779b97f4a7c15
	z := r.x
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// below returns a uniform integer in [0, n) by rejection (no modulo bias).
func (r *rng) below(n uint64) uint64 {
	if n == 0 {
		return 0
	}
	limit := -n % n // 2^64 mod n
	for {
		v := r.next()
		if v >= limit {
			return v % n
		}
	}
}
