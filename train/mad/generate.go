package mad

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

// Dataset is a set of equally long examples stored flat: example i is
// Inputs[i*T : (i+1)*T] with Targets[i*T : (i+1)*T]; a target of
// IgnoreIndex is not counted.
type Dataset struct {
	N, T    int
	Vocab   int
	Inputs  []int32
	Targets []int32
}

// Example returns example i's inputs and targets (sharing the storage).
func (d *Dataset) Example(i int) (inputs, targets []int32) {
	return d.Inputs[i*d.T : (i+1)*d.T], d.Targets[i*d.T : (i+1)*d.T]
}

func (d *Dataset) add(inputs, targets []int32) {
	d.Inputs = append(d.Inputs, inputs...)
	d.Targets = append(d.Targets, targets...)
	d.N++
}

// Random streams. The reference draws everything from one numpy generator
// seeded with the setting's seed, the training set first and the test set
// continuing the same stream; selective copying draws its blank positions
// from numpy's global generator (seeded separately with the same seed), and
// the memorization fact table from a third generator of its own. We keep
// that structure with PCG streams, so the data are reproducible from the
// seed but are not the reference's bits (docs/MAD.md, "How ours differs from the reference").
const (
	streamData   = 0x6d61642d64617461 // "mad-data"
	streamBlanks = 0x6d61642d626c6e6b // "mad-blnk"
	streamFacts  = 0x6d61642d66616374 // "mad-fact"
)

// Generate makes a setting's training and test sets. The same setting
// always gives the same data.
func Generate(s Setting) (train, test *Dataset, err error) {
	if err := s.Validate(); err != nil {
		return nil, nil, err
	}
	g := newGenerator(s)
	T := s.ModelSeqLen()
	train = &Dataset{T: T, Vocab: s.Vocab}
	test = &Dataset{T: T, Vocab: s.Vocab}
	train.Inputs = make([]int32, 0, s.TrainExamples*T)
	train.Targets = make([]int32, 0, s.TrainExamples*T)
	for range s.TrainExamples {
		in, tg := g.example(true)
		if len(in) != T || len(tg) != T {
			return nil, nil, fmt.Errorf("mad: %s generator made %d/%d tokens, want %d (internal error)", s.Task, len(in), len(tg), T)
		}
		train.add(in, tg)
	}
	test.Inputs = make([]int32, 0, s.TestExamples*T)
	test.Targets = make([]int32, 0, s.TestExamples*T)
	for range s.TestExamples {
		in, tg := g.example(false)
		if len(in) != T || len(tg) != T {
			return nil, nil, fmt.Errorf("mad: %s generator made %d/%d tokens, want %d (internal error)", s.Task, len(in), len(tg), T)
		}
		test.add(in, tg)
	}
	return train, test, nil
}

// generator holds a setting's random streams and fixed tables.
type generator struct {
	s      Setting
	rng    *rand.Rand // the data stream, shared by the training and test sets
	blanks *rand.Rand // selective copying's blank positions
	facts  []Fact     // memorization's fixed key -> value table
}

// Fact is one entry of memorization's fixed table.
type Fact struct{ Key, Value int32 }

func newGenerator(s Setting) *generator {
	g := &generator{s: s,
		rng:    rand.New(rand.NewPCG(s.Seed, streamData)),
		blanks: rand.New(rand.NewPCG(s.Seed, streamBlanks)),
	}
	if s.Task == Memorization {
		g.facts = FactTable(s.Vocab, s.Seed)
	}
	return g
}

// example draws one example: training targets when train, else test
// targets.
func (g *generator) example(train bool) (inputs, targets []int32) {
	switch g.s.Task {
	case InContextRecall, NoisyInContextRecall:
		return g.recall(train)
	case FuzzyInContextRecall:
		return g.fuzzy(train)
	case SelectiveCopying:
		return g.selectiveCopy()
	case Compression:
		return g.compression()
	case Memorization:
		return g.memorization()
	}
	panic("mad: unknown task " + g.s.Task)
}

// recall is (noisy) multi-query in-context recall (docs/MAD.md).
// With N = Vocab - NoiseVocab: keys are 0..N/2-1, values N/2..N-1, noise
// N..Vocab-1. SeqLen/2 two-token slots: all but the last are a key-value
// pair (or, with probability FracNoise and never in one protected slot,
// two noise tokens); a key keeps the value it first got in this sequence.
// The last slot repeats a uniformly chosen key seen so far with its value.
// Training targets are the inputs shifted by one; test targets score only
// a value whose key was seen before (and the final probe value).
func (g *generator) recall(train bool) (inputs, targets []int32) {
	s, rng := g.s, g.rng
	n := s.Vocab - s.NoiseVocab
	nKeys, nVals := n/2, n-n/2
	slots := s.SeqLen / 2
	for {
		seq := make([]int32, 0, s.SeqLen)
		test := make([]int32, 0, s.SeqLen)
		value := make([]int32, nKeys)
		seen := make([]bool, nKeys)
		var order []int32 // keys in order of first appearance
		for i := range value {
			value[i] = -1
		}
		protected := rng.IntN(slots)
		for i := range slots - 1 {
			if s.FracNoise > 0 && i != protected && rng.Float64() < s.FracNoise {
				seq = append(seq, int32(n+rng.IntN(s.NoiseVocab)), int32(n+rng.IntN(s.NoiseVocab)))
				test = append(test, IgnoreIndex, IgnoreIndex)
				continue
			}
			k := int32(rng.IntN(nKeys))
			if value[k] < 0 {
				value[k] = int32(nKeys + rng.IntN(nVals))
			}
			v := value[k]
			seq = append(seq, k, v)
			if seen[k] {
				test = append(test, IgnoreIndex, v)
			} else {
				test = append(test, IgnoreIndex, IgnoreIndex)
				seen[k] = true
				order = append(order, k)
			}
		}
		if len(order) == 0 {
			// Every slot was noise (possible only when the protected slot
			// is the final one, probability < 1e-6 at frac_noise 0.8): the
			// reference would fail to pick a probe; draw the example again.
			continue
		}
		k := order[rng.IntN(len(order))]
		seq = append(seq, k, value[k])
		test = append(test, IgnoreIndex, value[k])
		if train {
			return seq[:len(seq)-1], seq[1:]
		}
		return seq[:len(seq)-1], test[1:]
	}
}

// motif draws an ordered tuple of size distinct ids from [lo, lo+count):
// uniform over the permutations, as a draw from the reference's shuffled
// permutation list is.
func motif(rng *rand.Rand, lo, count, size int) []int32 {
	pool := make([]int32, count)
	for i := range pool {
		pool[i] = int32(lo + i)
	}
	for i := range size {
		j := i + rng.IntN(count-i)
		pool[i], pool[j] = pool[j], pool[i]
	}
	return pool[:size]
}

// motifKey packs a motif into a map key (ids below 2^16, motifs of at most 3
// tokens in the benchmark; longer motifs fall back to a string).
func motifKey(m []int32) string {
	b := make([]byte, 0, 2*len(m))
	for _, t := range m {
		b = append(b, byte(t>>8), byte(t))
	}
	return string(b)
}

// fuzzy is multi-query fuzzy in-context recall (docs/MAD.md): keys
// and values are motifs of 1..KMotif and 1..VMotif distinct tokens (test
// keys always KMotif long); a probe pair is planted at a random offset and
// repeated at the end; the sequence is left-padded with the pad token
// Vocab-1 to SeqLen+1 tokens and shifted.
func (g *generator) fuzzy(train bool) (inputs, targets []int32) {
	s, rng := g.s, g.rng
	pad := int32(s.Vocab - 1)
	n := s.Vocab - 1 - s.NoiseVocab
	nKeys, nVals := n/2, n-n/2
	keySize := func() int {
		if train {
			return 1 + rng.IntN(s.KMotif)
		}
		return s.KMotif
	}
	valSize := func() int { return 1 + rng.IntN(s.VMotif) }

	kps := keySize()
	vps := valSize()
	kProbe := motif(rng, 0, nKeys, kps)
	vProbe := motif(rng, nKeys, nVals, vps)
	probeLen := kps + vps
	probeAt := rng.IntN(s.SeqLen - 2*probeLen)
	probeAdded := false

	bound := map[string][]int32{} // key motif -> its value in this sequence
	seen := map[string]bool{}     // key motifs presented so far
	seq := make([]int32, 0, s.SeqLen+1)
	test := make([]int32, 0, s.SeqLen+1)
	ign := func(k int) {
		for range k {
			test = append(test, IgnoreIndex)
		}
	}
	for len(seq) < s.SeqLen-probeLen-(s.KMotif+s.VMotif) {
		ks, vs := keySize(), valSize()
		if !probeAdded && len(seq) >= probeAt {
			seq = append(append(seq, kProbe...), vProbe...)
			ign(probeLen)
			bound[motifKey(kProbe)] = vProbe
			seen[motifKey(kProbe)] = true
			probeAdded = true
			continue
		}
		if s.FracNoise > 0 && rng.Float64() < s.FracNoise {
			for range ks + vs {
				seq = append(seq, int32(n+rng.IntN(s.NoiseVocab)))
			}
			ign(ks + vs)
			continue
		}
		k := motif(rng, 0, nKeys, ks)
		key := motifKey(k)
		var v []int32
		switch {
		case slices.Equal(k, kProbe):
			v = vProbe
			probeAdded = true
		case bound[key] != nil:
			v = bound[key]
		default:
			v = motif(rng, nKeys, nVals, vs)
			bound[key] = v
		}
		seq = append(append(seq, k...), v...)
		ign(len(k))
		if seen[key] {
			test = append(test, v...)
		} else {
			ign(len(v))
		}
		seen[key] = true
	}
	seq = append(append(seq, kProbe...), vProbe...)
	ign(kps)
	test = append(test, vProbe...)

	// Left-pad to SeqLen+1 tokens (the loop bound leaves room for at least
	// one pad), then shift.
	padN := s.SeqLen + 1 - len(seq)
	full := make([]int32, 0, s.SeqLen+1)
	fullTest := make([]int32, 0, s.SeqLen+1)
	for range padN {
		full = append(full, pad)
		fullTest = append(fullTest, IgnoreIndex)
	}
	full = append(full, seq...)
	fullTest = append(fullTest, test...)
	if train {
		return full[:s.SeqLen], full[1:]
	}
	return full[:s.SeqLen], fullTest[1:]
}

// selectiveCopy is selective copying (docs/MAD.md): CopyTokens
// content tokens from 0..Vocab-3 with SeqLen-2*CopyTokens-1 blanks (Vocab-2)
// inserted before uniformly chosen content tokens, then the copy token
// (Vocab-1) and CopyTokens blanks, at which the content is to be emitted in
// order. Training and test targets are the same.
func (g *generator) selectiveCopy() (inputs, targets []int32) {
	s := g.s
	c := s.CopyTokens
	blank, copyTok := int32(s.Vocab-2), int32(s.Vocab-1)
	nBlank := s.SeqLen - 2*c - 1
	content := make([]int32, c)
	for i := range content {
		content[i] = int32(g.rng.IntN(s.Vocab - 2))
	}
	// Blank j goes before content token idx[j] (numpy.insert semantics:
	// every blank precedes the indexed token, so the last content token is
	// always followed by the copy token).
	before := make([]int, c)
	for range nBlank {
		before[g.blanks.IntN(c)]++
	}
	inputs = make([]int32, 0, s.SeqLen)
	for i, t := range content {
		for range before[i] {
			inputs = append(inputs, blank)
		}
		inputs = append(inputs, t)
	}
	inputs = append(inputs, copyTok)
	for range c {
		inputs = append(inputs, blank)
	}
	targets = make([]int32, 0, s.SeqLen)
	for range c + nBlank + 1 {
		targets = append(targets, IgnoreIndex)
	}
	targets = append(targets, content...)
	return inputs, targets
}

// compression is the compression task (docs/MAD.md): SeqLen-1 content
// tokens from 0..Vocab-2, then the compression token Vocab-1; the target is
// the input itself at every position.
func (g *generator) compression() (inputs, targets []int32) {
	s := g.s
	inputs = make([]int32, s.SeqLen)
	for i := range s.SeqLen - 1 {
		inputs[i] = int32(g.rng.IntN(s.Vocab - 1))
	}
	inputs[s.SeqLen-1] = int32(s.Vocab - 1)
	return inputs, append([]int32(nil), inputs...)
}

// memorization is the memorization task (docs/MAD.md): SeqLen/2
// slots [key, insert] with targets [ignore, value], keys drawn uniformly
// from the fixed fact table.
func (g *generator) memorization() (inputs, targets []int32) {
	s := g.s
	insert := int32(s.Vocab - 1)
	inputs = make([]int32, 0, s.SeqLen)
	targets = make([]int32, 0, s.SeqLen)
	for range s.SeqLen / 2 {
		f := g.facts[g.rng.IntN(len(g.facts))]
		inputs = append(inputs, f.Key, insert)
		targets = append(targets, IgnoreIndex, f.Value)
	}
	return inputs, targets
}

// FactTable is memorization's fixed key -> value table for vocabulary size
// vocab: built from the vocab-1 ids below the insert token, keys
// 0..(vocab-1)/2-1 and values (vocab-1)/2..vocab-2, both shuffled by a
// generator of their own seeded with seed and paired up, giving (vocab-1)/2
// facts (one value id stays unused when vocab-1 is odd). It depends only on
// vocab and seed, so training and test sets share it.
func FactTable(vocab int, seed uint64) []Fact {
	rng := rand.New(rand.NewPCG(seed, streamFacts))
	m := vocab - 1
	keys := make([]int32, m/2)
	vals := make([]int32, m-m/2)
	for i := range keys {
		keys[i] = int32(i)
	}
	for i := range vals {
		vals[i] = int32(m/2 + i)
	}
	rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	rng.Shuffle(len(vals), func(i, j int) { vals[i], vals[j] = vals[j], vals[i] })
	out := make([]Fact, len(keys))
	for i := range keys {
		out[i] = Fact{keys[i], vals[i]}
	}
	return out
}
