package mad

import (
	"math"
	"slices"
	"testing"
)

// small returns a task's baseline with fewer examples (same distribution).
func small(t *testing.T, task string, n int) Setting {
	t.Helper()
	s, err := Baseline(task)
	if err != nil {
		t.Fatal(err)
	}
	s.TrainExamples, s.TestExamples = n, n
	return s
}

func gen(t *testing.T, s Setting) (train, test *Dataset) {
	t.Helper()
	train, test, err := Generate(s)
	if err != nil {
		t.Fatal(err)
	}
	if train.N != s.TrainExamples || test.N != s.TestExamples || train.T != s.ModelSeqLen() || test.T != s.ModelSeqLen() {
		t.Fatalf("%s: sets %dx%d and %dx%d, want %d and %d examples of %d", s.Task, train.N, train.T, test.N, test.T,
			s.TrainExamples, s.TestExamples, s.ModelSeqLen())
	}
	for _, ds := range []*Dataset{train, test} {
		for i, v := range ds.Inputs {
			if v < 0 || int(v) >= s.Vocab {
				t.Fatalf("%s: input %d at %d outside [0, %d)", s.Task, v, i, s.Vocab)
			}
		}
		for i, v := range ds.Targets {
			if v != IgnoreIndex && (v < 0 || int(v) >= s.Vocab) {
				t.Fatalf("%s: target %d at %d outside [0, %d)", s.Task, v, i, s.Vocab)
			}
		}
	}
	return train, test
}

func TestSweep(t *testing.T) {
	want := map[string]int{InContextRecall: 11, FuzzyInContextRecall: 11, NoisyInContextRecall: 14,
		SelectiveCopying: 13, Compression: 11, Memorization: 6}
	all := Benchmark()
	if len(all) != 66 {
		t.Fatalf("%d settings, want 66", len(all))
	}
	ids := map[string]bool{}
	for _, s := range all {
		want[s.Task]--
		if err := s.Validate(); err != nil {
			t.Error(err)
		}
		if ids[s.Task+s.ID()] {
			t.Errorf("duplicate setting %s %s", s.Task, s.ID())
		}
		ids[s.Task+s.ID()] = true
		if s.TestExamples != 1280 || s.Seed != DefaultSeed {
			t.Errorf("%s %s: %d test examples, seed %d", s.Task, s.ID(), s.TestExamples, s.Seed)
		}
	}
	for task, n := range want {
		if n != 0 {
			t.Errorf("%s: %d settings off", task, n)
		}
	}
	// Changes are applied one at a time to the baseline.
	sw, _ := Sweep(NoisyInContextRecall)
	last := sw[len(sw)-1]
	if last.FracNoise != 0.8 || last.Vocab != 32 || last.SeqLen != 128 || last.TrainExamples != 12800 || last.NoiseVocab != 16 {
		t.Errorf("last noisy setting %+v", last)
	}
	sc, _ := Sweep(SelectiveCopying)
	if sc[0].SeqLen != 256 || sc[0].CopyTokens != 16 || sc[len(sc)-1].CopyTokens != 96 || sc[len(sc)-1].SeqLen != 256 {
		t.Errorf("selective copying sweep %+v ... %+v", sc[0], sc[len(sc)-1])
	}
	if _, err := ParseTask("fuzzy"); err != nil {
		t.Error(err)
	}
	if _, err := ParseTask("nope"); err == nil {
		t.Error("unknown task accepted")
	}
}

func TestDeterministic(t *testing.T) {
	for _, task := range Tasks() {
		s := small(t, task, 20)
		a, at := gen(t, s)
		b, bt := gen(t, s)
		if !slices.Equal(a.Inputs, b.Inputs) || !slices.Equal(a.Targets, b.Targets) || !slices.Equal(at.Inputs, bt.Inputs) {
			t.Errorf("%s: the same setting gave different data", task)
		}
		s.Seed++
		c, _ := gen(t, s)
		if slices.Equal(a.Inputs, c.Inputs) {
			t.Errorf("%s: another seed gave the same data", task)
		}
		if task != Memorization && slices.Equal(a.Inputs[:a.T], at.Inputs[:at.T]) {
			t.Errorf("%s: the test set repeats the training set's first example", task)
		}
	}
}

// checkRecall rebuilds the generator's full sequence (inputs plus the last
// shifted target) and checks the train/test target conventions.
func checkRecall(t *testing.T, s Setting, train, test *Dataset) {
	t.Helper()
	n := s.Vocab - s.NoiseVocab
	nKeys := n / 2
	noiseSlots, slots := 0, 0
	for e := range train.N {
		in, tg := train.Example(e)
		tin, ttg := test.Example(e)
		// Training targets are the inputs shifted by one.
		for i := 0; i+1 < len(in); i++ {
			if tg[i] != in[i+1] {
				t.Fatalf("train example %d: target[%d] = %d, input[%d] = %d", e, i, tg[i], i+1, in[i+1])
			}
		}
		full := append(slices.Clone(in), tg[len(tg)-1])
		value := map[int32]int32{}
		keyCount := 0
		for p := 0; p < len(full); p += 2 {
			k, v := full[p], full[p+1]
			slots++
			if k >= int32(n) {
				if v < int32(n) || p == len(full)-2 {
					t.Fatalf("example %d slot %d: noise token %d paired with %d", e, p/2, k, v)
				}
				noiseSlots++
				continue
			}
			if k >= int32(nKeys) || v < int32(nKeys) || v >= int32(n) {
				t.Fatalf("example %d slot %d: key %d value %d outside keys [0,%d) values [%d,%d)", e, p/2, k, v, nKeys, nKeys, n)
			}
			if old, ok := value[k]; ok && old != v {
				t.Fatalf("example %d: key %d has values %d and %d", e, k, old, v)
			}
			if p == len(full)-2 {
				if _, ok := value[k]; !ok {
					t.Fatalf("example %d: the probe key %d was not presented before", e, k)
				}
			}
			value[k] = v
			keyCount++
		}
		// Test targets: the value, at the key's position, for repeated
		// keys and the probe; nothing else.
		tfull := append(slices.Clone(tin), 0)
		seen := map[int32]bool{}
		for p := 0; p < len(tfull)-2; p += 2 {
			k := tfull[p]
			want := int32(IgnoreIndex)
			if k < int32(nKeys) && seen[k] {
				want = tfull[p+1]
			}
			if k < int32(nKeys) {
				seen[k] = true
			}
			if ttg[p] != want {
				t.Fatalf("test example %d: target at key position %d is %d, want %d", e, p, ttg[p], want)
			}
			if ttg[p+1] != IgnoreIndex {
				t.Fatalf("test example %d: value position %d is scored", e, p+1)
			}
		}
		last := ttg[len(ttg)-1]
		if last == IgnoreIndex || last < int32(nKeys) || last >= int32(n) {
			t.Fatalf("test example %d: the probe's value target is %d", e, last)
		}
	}
	if s.FracNoise > 0 {
		// P(noise) per slot: frac_noise, except the protected and final slots.
		got := float64(noiseSlots) / float64(slots)
		want := s.FracNoise * float64(s.SeqLen/2-2) / float64(s.SeqLen/2)
		if math.Abs(got-want) > 0.02 {
			t.Errorf("noise share %.3f, want about %.3f", got, want)
		}
	} else if noiseSlots > 0 {
		t.Errorf("%d noise slots without noise", noiseSlots)
	}
}

func TestInContextRecall(t *testing.T) {
	s := small(t, InContextRecall, 200)
	train, test := gen(t, s)
	if train.T != 127 {
		t.Fatalf("T = %d, want 127", train.T)
	}
	checkRecall(t, s, train, test)
}

func TestNoisyInContextRecall(t *testing.T) {
	for _, f := range []float64{0.2, 0.8} {
		s := small(t, NoisyInContextRecall, 300)
		s.FracNoise = f
		train, test := gen(t, s)
		checkRecall(t, s, train, test)
	}
}

// parseMotifs splits a fuzzy-recall sequence (after the pads) into
// alternating key and value runs: keys and values come from disjoint id
// ranges, so the motif boundaries are where the range changes.
func parseMotifs(seq []int32, nKeys int32) (keys, vals [][]int32, starts []int) {
	for i := 0; i < len(seq); {
		j := i
		for j < len(seq) && seq[j] < nKeys {
			j++
		}
		k := j
		for k < len(seq) && seq[k] >= nKeys {
			k++
		}
		keys, vals, starts = append(keys, seq[i:j]), append(vals, seq[j:k]), append(starts, i)
		i = k
	}
	return
}

func TestFuzzyInContextRecall(t *testing.T) {
	s := small(t, FuzzyInContextRecall, 200)
	train, test := gen(t, s)
	pad := int32(s.Vocab - 1)
	nKeys := int32((s.Vocab - 1) / 2)
	for _, c := range []struct {
		name string
		ds   *Dataset
	}{{"train", train}, {"test", test}} {
		lengths := map[int]int{}
		for e := range c.ds.N {
			in, tg := c.ds.Example(e)
			// Reconstruct the sequence: for test examples, the train-style
			// next token is the input's successor; the last token is the
			// final value motif's last, known from the targets.
			full := append(slices.Clone(in), 0)
			full[len(full)-1] = tg[len(tg)-1]
			np := 0
			for np < len(full) && full[np] == pad {
				np++
			}
			if np < 2 {
				t.Fatalf("%s %d: %d pad tokens, want >= 2", c.name, e, np)
			}
			body := full[np:]
			for _, x := range body {
				if x == pad {
					t.Fatalf("%s %d: a pad token inside the sequence", c.name, e)
				}
			}
			if c.name == "train" {
				for i := 0; i+1 < len(in); i++ {
					if tg[i] != in[i+1] {
						t.Fatalf("train %d: target %d != next input %d", e, tg[i], in[i+1])
					}
				}
			}
			keys, vals, starts := parseMotifs(body, nKeys)
			bound := map[string]string{}
			for p := range keys {
				k, v := keys[p], vals[p]
				if len(k) < 1 || len(k) > s.KMotif || len(v) < 1 || len(v) > s.VMotif {
					t.Fatalf("%s %d pair %d: key %v value %v", c.name, e, p, k, v)
				}
				lengths[len(k)]++
				if c.name == "test" && len(k) != s.KMotif {
					t.Fatalf("test %d: key %v shorter than %d", e, k, s.KMotif)
				}
				for i := 1; i < len(k); i++ {
					if slices.Contains(k[:i], k[i]) {
						t.Fatalf("%s %d: key motif %v repeats a token", c.name, e, k)
					}
				}
				kk, vv := motifKey(k), motifKey(v)
				old, seen := bound[kk]
				if seen && old != vv {
					t.Fatalf("%s %d: key %v bound to two values", c.name, e, k)
				}
				if c.name == "test" {
					// Value tokens are scored (one position earlier, after
					// the shift) iff the key was seen before, or it is the
					// final probe.
					at := np + starts[p] + len(k) - 1
					for i := range v {
						got := tg[at+i]
						scored := seen || p == len(keys)-1
						if scored && got != v[i] || !scored && got != IgnoreIndex {
							t.Fatalf("test %d pair %d: target %d at %d (scored %v, value %v)", e, p, got, at+i, scored, v)
						}
					}
					for i := range len(k) {
						if pos := np + starts[p] - 1 + i; pos >= 0 && tg[pos] != IgnoreIndex {
							t.Fatalf("test %d: key position %d is scored", e, pos)
						}
					}
				}
				bound[kk] = vv
			}
		}
		if c.name == "train" && (lengths[1] == 0 || lengths[2] == 0 || lengths[3] == 0) {
			t.Errorf("train key lengths %v, want all of 1..3", lengths)
		}
	}
}

func TestSelectiveCopying(t *testing.T) {
	s := small(t, SelectiveCopying, 200)
	train, test := gen(t, s)
	blank, copyTok := int32(s.Vocab-2), int32(s.Vocab-1)
	C, L := s.CopyTokens, s.SeqLen
	firstBlank := 0
	for _, ds := range []*Dataset{train, test} {
		for e := range ds.N {
			in, tg := ds.Example(e)
			if in[L-C-1] != copyTok {
				t.Fatalf("example %d: copy token not at %d", e, L-C-1)
			}
			var content []int32
			nBlank := 0
			for i, x := range in[:L-C-1] {
				switch {
				case x == blank:
					nBlank++
					if i == 0 {
						firstBlank++
					}
				case x == copyTok:
					t.Fatalf("example %d: a second copy token", e)
				default:
					content = append(content, x)
				}
			}
			if len(content) != C || nBlank != L-2*C-1 {
				t.Fatalf("example %d: %d content and %d blank tokens, want %d and %d", e, len(content), nBlank, C, L-2*C-1)
			}
			if in[L-C-2] == blank {
				t.Fatalf("example %d: a blank right before the copy token", e)
			}
			for i, x := range in[L-C:] {
				if x != blank {
					t.Fatalf("example %d: token %d after the copy token is %d, want blank", e, i, x)
				}
			}
			for i, x := range tg {
				want := int32(IgnoreIndex)
				if i >= L-C {
					want = content[i-(L-C)]
				}
				if x != want {
					t.Fatalf("example %d: target %d at %d, want %d", e, x, i, want)
				}
			}
		}
	}
	if firstBlank == 0 {
		t.Error("no example starts with a blank")
	}
}

func TestCompression(t *testing.T) {
	s := small(t, Compression, 100)
	train, test := gen(t, s)
	for _, ds := range []*Dataset{train, test} {
		if !slices.Equal(ds.Inputs, ds.Targets) {
			t.Fatal("compression targets differ from the inputs")
		}
		for e := range ds.N {
			in, _ := ds.Example(e)
			if in[len(in)-1] != int32(s.Vocab-1) || slices.Contains(in[:len(in)-1], int32(s.Vocab-1)) {
				t.Fatalf("example %d: the compression token is not exactly the last token: %v", e, in)
			}
		}
	}
}

func TestMemorization(t *testing.T) {
	s := small(t, Memorization, 100)
	facts := FactTable(s.Vocab, s.Seed)
	if len(facts) != 127 {
		t.Fatalf("%d facts for vocab 256, want 127", len(facts))
	}
	value := map[int32]int32{}
	usedVals := map[int32]bool{}
	for _, f := range facts {
		if f.Key < 0 || f.Key >= 127 || f.Value < 127 || f.Value >= 255 || usedVals[f.Value] {
			t.Fatalf("bad fact %+v", f)
		}
		value[f.Key] = f.Value
		usedVals[f.Value] = true
	}
	if !slices.Equal(facts, FactTable(s.Vocab, s.Seed)) {
		t.Fatal("the fact table is not fixed")
	}
	train, test := gen(t, s)
	for _, ds := range []*Dataset{train, test} {
		for e := range ds.N {
			in, tg := ds.Example(e)
			for i := 0; i < len(in); i += 2 {
				if in[i+1] != int32(s.Vocab-1) || tg[i] != IgnoreIndex || tg[i+1] != value[in[i]] {
					t.Fatalf("example %d slot %d: inputs %d %d targets %d %d", e, i/2, in[i], in[i+1], tg[i], tg[i+1])
				}
			}
		}
	}
}

func TestOverlap(t *testing.T) {
	a := &Dataset{N: 2, T: 2, Inputs: []int32{1, 2, 3, 4}, Targets: make([]int32, 4)}
	b := &Dataset{N: 2, T: 2, Inputs: []int32{3, 4, 5, 6}, Targets: make([]int32, 4)}
	if got := Overlap(a, b); got != 0.5 {
		t.Errorf("overlap %v, want 0.5", got)
	}
}

func TestScores(t *testing.T) {
	// torchmetrics' MulticlassAccuracy docstring: targets [2,1,0,0], preds
	// [2,1,0,1] give 0.8333 (macro), 0.75 micro.
	s := NewScores(3)
	for i, p := range []int{2, 1, 0, 1} {
		s.Add(p, []int{2, 1, 0, 0}[i])
	}
	if math.Abs(s.Macro()-5.0/6) > 1e-12 || s.Micro() != 0.75 {
		t.Errorf("macro %v micro %v, want 0.8333 and 0.75", s.Macro(), s.Micro())
	}
	// A class predicted but never a target counts with recall 0; one
	// neither predicted nor present is left out.
	s = NewScores(4)
	s.Add(0, 0)
	s.Add(1, 0)
	if s.Macro() != 0.25 || s.Micro() != 0.5 {
		t.Errorf("macro %v micro %v, want 0.25 and 0.5", s.Macro(), s.Micro())
	}
	// AddLogits takes the argmax and skips ignored targets.
	s = NewScores(3)
	s.AddLogits([]float32{0, 5, 1, 9, 0, 0, 0, 0, 1}, []int32{1, IgnoreIndex, 2})
	if s.Micro() != 1 || s.Support[1] != 1 || s.Support[2] != 1 {
		t.Errorf("AddLogits: %+v", s)
	}
	s.AddLoss(LossStats{Sum: 2, Count: 2})
	if math.Abs(s.Perplexity()-math.E) > 1e-12 {
		t.Errorf("perplexity %v, want e", s.Perplexity())
	}
}
