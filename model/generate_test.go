package model

import (
	"math"
	"slices"
	"strings"
	"testing"
)

// TestKVCacheMatchesFullForward: prefilling prompts into the cache and then
// decoding token by token (and a multi-token chunk) gives the logits of a
// full forward over the whole sequences.
func TestKVCacheMatchesFullForward(t *testing.T) {
	const B, P, steps = 2, 4, 5
	for _, v := range variants[:3] {
		t.Run(v.name, func(t *testing.T) {
			cfg := testConfig(v.attention, v.tied)
			m := newTestModel(t, cfg, 21)
			tokens, _ := testBatch(cfg, B, P+steps+2, 22)
			total := P + steps + 2
			kv, err := m.NewKVCache(B, total)
			if err != nil {
				t.Fatal(err)
			}
			defer kv.Free()
			seq := func(b, from, to int) []int32 { return tokens[b*total+from : b*total+to] }
			prompt := append(append([]int32(nil), seq(0, 0, P)...), seq(1, 0, P)...)
			got := make([][]float32, B*total) // per (b, position) logits row
			V := cfg.Vocab
			record := func(logits []float32, from, n int) {
				for b := range B {
					for i := range n {
						got[b*total+from+i] = logits[(b*n+i)*V : (b*n+i+1)*V]
					}
				}
			}
			logits, err := m.Step(kv, prompt, B, P, false)
			if err != nil {
				t.Fatal(err)
			}
			record(logits, 0, P)
			for s := range steps {
				pos := P + s
				step := []int32{seq(0, pos, pos+1)[0], seq(1, pos, pos+1)[0]}
				if logits, err = m.Step(kv, step, B, 1, true); err != nil {
					t.Fatal(err)
				}
				record(logits, pos, 1)
			}
			// A two-token chunk over a non-empty cache.
			pos := P + steps
			chunk := append(append([]int32(nil), seq(0, pos, pos+2)...), seq(1, pos, pos+2)...)
			if logits, err = m.Step(kv, chunk, B, 2, false); err != nil {
				t.Fatal(err)
			}
			record(logits, pos, 2)
			if kv.Len != total {
				t.Errorf("cache length %d, want %d", kv.Len, total)
			}

			if _, err := m.Evaluate(tokens, nil, B, total); err != nil {
				t.Fatal(err)
			}
			full, err := m.Logits()
			if err != nil {
				t.Fatal(err)
			}
			var worst float64
			for r, row := range got {
				for j, x := range row {
					worst = math.Max(worst, math.Abs(float64(x-full[r*V+j])))
				}
			}
			t.Logf("max |cached - full| logit difference %.2e", worst)
			if worst > 1e-4 {
				t.Errorf("cached generation logits differ from the full forward by %.2e", worst)
			}
			if _, err := m.Step(kv, []int32{1, 2}, B, 1, true); err == nil || !strings.Contains(err.Error(), "do not fit") {
				t.Errorf("step past the cache capacity: %v", err)
			}
		})
	}
}

// TestGenerateGreedy: greedy generation equals repeatedly running the full
// forward and taking the argmax of the last position, and the last-only
// head of Step gives the same row as the full head.
func TestGenerateGreedy(t *testing.T) {
	cfg := testConfig(AttentionParallax, true)
	m := newTestModel(t, cfg, 31)
	prompt := []int{3, 1, 4, 1, 5}
	var seen []int
	got, err := m.Generate(prompt, 6, GenerateOptions{}, func(tok int) bool { seen = append(seen, tok); return true })
	if err != nil {
		t.Fatal(err)
	}
	seq := append([]int(nil), prompt...)
	for range 6 {
		logits, err := m.SequenceLogits(seq)
		if err != nil {
			t.Fatal(err)
		}
		last := logits[(len(seq)-1)*cfg.Vocab:]
		best := 0
		for i, v := range last {
			if v > last[best] {
				best = i
			}
		}
		seq = append(seq, best)
	}
	want := seq[len(prompt):]
	if !slices.Equal(got, want) || !slices.Equal(seen, want) {
		t.Errorf("Generate %v (callback saw %v), full-forward greedy %v", got, seen, want)
	}
	// Stopping: the callback, and a stop token (not returned).
	n := 0
	short, err := m.Generate(prompt, 6, GenerateOptions{}, func(int) bool { n++; return n < 2 })
	if err != nil || len(short) != 2 {
		t.Errorf("callback stop after 2: %v, %v", short, err)
	}
	stop := want[2]
	upTo := 0
	for upTo < len(want) && want[upTo] != stop {
		upTo++
	}
	stopped, err := m.Generate(prompt, 6, GenerateOptions{Stop: []int{stop}}, nil)
	if err != nil || !slices.Equal(stopped, want[:upTo]) {
		t.Errorf("stop at token %d: %v, %v; want %v", stop, stopped, err, want[:upTo])
	}
	if _, err := m.Generate(prompt, 40, GenerateOptions{}, nil); err == nil || !strings.Contains(err.Error(), "max_seq") {
		t.Errorf("generation past max_seq: %v", err)
	}
}

func TestSampler(t *testing.T) {
	logits := []float32{0.1, 2.0, -1, 1.5, 0.7, 2.0}
	draw := func(o SampleOptions, n int) []int {
		s, err := NewSampler(o)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]int, n)
		for i := range out {
			out[i] = s.Sample(logits)
		}
		return out
	}
	counts := func(xs []int) map[int]int {
		c := map[int]int{}
		for _, x := range xs {
			c[x]++
		}
		return c
	}
	if g := draw(SampleOptions{}, 3); !slices.Equal(g, []int{1, 1, 1}) {
		t.Errorf("greedy %v, want the first maximum (1)", g)
	}
	if !slices.Equal(draw(SampleOptions{Temperature: 1, Seed: 4}, 50), draw(SampleOptions{Temperature: 1, Seed: 4}, 50)) {
		t.Error("the same seed gave different samples")
	}
	if slices.Equal(draw(SampleOptions{Temperature: 1, Seed: 4}, 50), draw(SampleOptions{Temperature: 1, Seed: 5}, 50)) {
		t.Error("different seeds gave the same 50 samples")
	}
	for tok := range counts(draw(SampleOptions{Temperature: 1, TopK: 2, Seed: 1}, 500)) {
		if tok != 1 && tok != 5 {
			t.Errorf("top-k 2 sampled token %d", tok)
		}
	}
	// Top-p 0.5: tokens 1 and 5 (p = 0.32 each) reach it together.
	for tok := range counts(draw(SampleOptions{Temperature: 1, TopP: 0.5, Seed: 2}, 500)) {
		if tok != 1 && tok != 5 {
			t.Errorf("top-p 0.5 sampled token %d", tok)
		}
	}
	// Temperature 1 follows softmax(logits).
	const n = 40000
	c := counts(draw(SampleOptions{Temperature: 1, Seed: 3}, n))
	var z float64
	for _, l := range logits {
		z += math.Exp(float64(l))
	}
	for i, l := range logits {
		p := math.Exp(float64(l)) / z
		got := float64(c[i]) / n
		if math.Abs(got-p) > 4*math.Sqrt(p*(1-p)/n)+1e-3 {
			t.Errorf("token %d: frequency %.4f, softmax probability %.4f", i, got, p)
		}
	}
	for _, o := range []SampleOptions{{Temperature: -1}, {TopK: -1}, {TopP: 1.5}, {Temperature: math.NaN()}} {
		if _, err := NewSampler(o); err == nil {
			t.Errorf("NewSampler(%+v) succeeded", o)
		}
	}
}
