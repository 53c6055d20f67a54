package model

import (
	"os"
	"slices"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	_ "github.com/parallax-engine/parallax/engine/cuda"
	_ "github.com/parallax-engine/parallax/engine/vulkan"
)

// raggedJob is one sequence of a continuous-batching run.
type raggedJob struct {
	prompt []int32
	n      int // tokens to generate
	seed   uint64
	temp   float64
}

// runRagged decodes jobs through a BatchCache of the given slots the way a
// server does: a job joins (is prefilled into a free slot) between decode
// steps, every busy slot advances by one token per step, and a finished job
// frees its slot for the next one. Each job samples with its own sampler.
func runRagged(t *testing.T, m *Model, slots, capacity int, jobs []raggedJob) [][]int {
	t.Helper()
	bc, err := m.NewBatchCache(slots, capacity)
	if err != nil {
		t.Fatal(err)
	}
	defer bc.Free()
	out := make([][]int, len(jobs))
	type run struct {
		job  int
		s    *Sampler
		next int32
	}
	busy := map[int]*run{} // slot -> run
	nextJob := 0
	for nextJob < len(jobs) || len(busy) > 0 {
		// Join: at most one prefill per step, into the lowest free slot.
		for s := range slots {
			if _, ok := busy[s]; ok || nextJob >= len(jobs) {
				continue
			}
			j := jobs[nextJob]
			smp, err := NewSampler(SampleOptions{Temperature: j.temp, Seed: j.seed})
			if err != nil {
				t.Fatal(err)
			}
			logits, err := m.Prefill(bc, s, j.prompt)
			if err != nil {
				t.Fatalf("prefill job %d: %v", nextJob, err)
			}
			tok := smp.Sample(logits)
			out[nextJob] = append(out[nextJob], tok)
			r := &run{job: nextJob, s: smp, next: int32(tok)}
			nextJob++
			if len(out[r.job]) >= j.n {
				bc.Release(s)
				continue
			}
			busy[s] = r
			break
		}
		if len(busy) == 0 {
			continue
		}
		var ss []int
		var toks []int32
		for s := range slots {
			if r, ok := busy[s]; ok {
				ss = append(ss, s)
				toks = append(toks, r.next)
			}
		}
		logits, err := m.StepSlots(bc, ss, toks)
		if err != nil {
			t.Fatalf("step: %v", err)
		}
		V := m.Config.Vocab
		for i, s := range ss {
			r := busy[s]
			tok := r.s.Sample(logits[i*V : (i+1)*V])
			out[r.job] = append(out[r.job], tok)
			r.next = int32(tok)
			if len(out[r.job]) >= jobs[r.job].n {
				delete(busy, s)
				bc.Release(s)
			}
		}
	}
	return out
}

// raggedJobs are prompts of different lengths with different budgets, so
// the batch's composition changes every few steps.
func raggedJobs(cfg Config) []raggedJob {
	var jobs []raggedJob
	for i := range 7 {
		p := make([]int32, 1+(i*5)%7)
		for k := range p {
			p[k] = int32((i*3 + k*7 + 1) % cfg.Vocab)
		}
		temp := 0.0
		if i%2 == 1 {
			temp = 1
		}
		jobs = append(jobs, raggedJob{prompt: p, n: 3 + (i*4)%9, seed: uint64(100 + i), temp: temp})
	}
	return jobs
}

// generateAlone runs each job through Generate, one sequence at a time.
func generateAlone(t *testing.T, m *Model, jobs []raggedJob) [][]int {
	t.Helper()
	var out [][]int
	for _, j := range jobs {
		p := make([]int, len(j.prompt))
		for i, v := range j.prompt {
			p[i] = int(v)
		}
		toks, err := m.Generate(p, j.n, GenerateOptions{Sample: SampleOptions{Temperature: j.temp, Seed: j.seed}, IgnoreEOS: true}, nil)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, toks)
	}
	return out
}

// TestRaggedDecodeMatchesAlone: continuous batching over a BatchCache
// (sequences of different lengths joining and leaving between steps) gives
// every sequence exactly the tokens it gets alone: through Generate, and
// through the same cache with one sequence at a time. On the CPU both hold
// bit for bit; on a GPU the batched and the one-at-a-time runs must agree
// (same shapes, same kernels), and Generate's (a batch of one) is
// compared too.
func TestRaggedDecodeMatchesAlone(t *testing.T) {
	for _, v := range variants[:3] {
		cfg := testConfig(v.attention, v.tied)
		ref := newTestModel(t, cfg, 31)
		jobs := raggedJobs(cfg)
		t.Run(v.name+"/cpu", func(t *testing.T) {
			alone := generateAlone(t, ref, jobs)
			batched := runRagged(t, ref, 4, cfg.MaxSeq, jobs)
			single := runRagged(t, ref, 1, cfg.MaxSeq, jobs)
			for i := range jobs {
				if !slices.Equal(batched[i], alone[i]) || !slices.Equal(single[i], alone[i]) {
					t.Errorf("job %d: batched %v, one slot %v, Generate %v", i, batched[i], single[i], alone[i])
				}
			}
		})
		for _, backend := range []string{"vulkan", "cuda"} {
			t.Run(v.name+"/"+backend, func(t *testing.T) {
				env := map[string]string{"vulkan": "PARALLAX_REQUIRE_VULKAN", "cuda": "PARALLAX_REQUIRE_CUDA"}[backend]
				dev, err := engine.Open(backend + ":0")
				if err != nil {
					if os.Getenv(env) == "1" {
						t.Fatalf("%s=1 but %v", env, err)
					}
					t.Skipf("no %s device: %v", backend, err)
				}
				defer dev.Close()
				m := copyModel(t, dev, ref)
				defer m.Free()
				batched := runRagged(t, m, 4, cfg.MaxSeq, jobs)
				for i := range jobs {
					solo := runRagged(t, m, 4, cfg.MaxSeq, jobs[i:i+1])[0]
					if !slices.Equal(batched[i], solo) {
						t.Errorf("job %d: batched %v, alone in the cache %v", i, batched[i], solo)
					}
				}
				gen := generateAlone(t, m, jobs)
				for i := range jobs {
					if !slices.Equal(batched[i], gen[i]) {
						t.Logf("job %d: batched %v, Generate %v (rounding of a batch of one)", i, batched[i], gen[i])
					}
				}
			})
		}
	}
}

// copyModel loads ref's weights into a model on dev (f32).
func copyModel(t *testing.T, dev engine.Device, ref *Model) *Model {
	t.Helper()
	m, err := New(dev, ref.Config, Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range m.Params() {
		v, err := engine.Float32s(ref.Params()[i].W)
		if err != nil {
			t.Fatal(err)
		}
		if err := engine.WriteFloat32(p.W, v); err != nil {
			t.Fatal(err)
		}
	}
	m.MarkWeightsChanged()
	return m
}

// TestBatchCacheErrors: misuse is an error, never a panic.
func TestBatchCacheErrors(t *testing.T) {
	cfg := testConfig(AttentionParallax, true)
	m := newTestModel(t, cfg, 3)
	if _, err := m.NewBatchCache(0, 4); err == nil {
		t.Error("zero slots accepted")
	}
	if _, err := m.NewBatchCache(2, cfg.MaxSeq+1); err == nil {
		t.Error("capacity past max_seq accepted")
	}
	bc, err := m.NewBatchCache(2, 6)
	if err != nil {
		t.Fatal(err)
	}
	defer bc.Free()
	if _, err := m.Prefill(bc, 0, []int32{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		run  func() error
	}{
		{"prefill bad slot", func() error { _, err := m.Prefill(bc, 2, []int32{1}); return err }},
		{"prefill empty", func() error { _, err := m.Prefill(bc, 1, nil); return err }},
		{"prefill past capacity", func() error { _, err := m.Prefill(bc, 1, make([]int32, 7)); return err }},
		{"prefill bad token", func() error { _, err := m.Prefill(bc, 1, []int32{int32(cfg.Vocab)}); return err }},
		{"step empty slot", func() error { _, err := m.StepSlots(bc, []int{1}, []int32{1}); return err }},
		{"step twice", func() error { _, err := m.StepSlots(bc, []int{0, 0}, []int32{1, 1}); return err }},
		{"step bad token", func() error { _, err := m.StepSlots(bc, []int{0}, []int32{-1}); return err }},
		{"step mismatched", func() error { _, err := m.StepSlots(bc, []int{0}, nil); return err }},
		{"step bad slot", func() error { _, err := m.StepSlots(bc, []int{5}, []int32{1}); return err }},
	} {
		if err := c.run(); err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
	// Fill slot 0 to capacity; the next step is an error.
	for range 3 {
		if _, err := m.StepSlots(bc, []int{0}, []int32{1}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.StepSlots(bc, []int{0}, []int32{1}); err == nil {
		t.Errorf("step of a full slot (%d positions): no error", bc.Len(0))
	}
}

// TestStepSlotsGreedy: the device's greedy pick of a ragged step is the
// argmax (lowest id among ties) of StepSlots' logits over the first
// classes ids, for every listed slot, step after step on two caches fed
// alike; classes outside [1, V] are an error.
func TestStepSlotsGreedy(t *testing.T) {
	cfg := testConfig("parallax", true)
	m := newTestModel(t, cfg, 33)
	V := cfg.Vocab
	for _, classes := range []int{V, V - 5} {
		a, err := m.NewBatchCache(3, 24)
		if err != nil {
			t.Fatal(err)
		}
		b, err := m.NewBatchCache(3, 24)
		if err != nil {
			t.Fatal(err)
		}
		prompts := map[int][]int32{0: {1, 2, 3}, 2: {4, 5, 6, 7, 8}}
		slots := []int{0, 2}
		next := make([]int32, len(slots))
		for i, s := range slots {
			if _, err := m.Prefill(a, s, prompts[s]); err != nil {
				t.Fatal(err)
			}
			if _, err := m.Prefill(b, s, prompts[s]); err != nil {
				t.Fatal(err)
			}
			next[i] = int32(i + 9)
		}
		for step := range 4 {
			logits, err := m.StepSlots(a, slots, next)
			if err != nil {
				t.Fatal(err)
			}
			got, err := m.StepSlotsGreedy(b, slots, next, classes)
			if err != nil {
				t.Fatal(err)
			}
			for i := range slots {
				row := logits[i*V : i*V+classes]
				want := 0
				for j, x := range row {
					if x > row[want] {
						want = j
					}
				}
				if int(got[i]) != want {
					t.Fatalf("classes %d, step %d, slot %d: greedy %d, argmax of the logits %d", classes, step, slots[i], got[i], want)
				}
				next[i] = got[i]
			}
			for _, s := range slots {
				if a.Len(s) != b.Len(s) {
					t.Fatalf("slot %d: length %d after StepSlots, %d after StepSlotsGreedy", s, a.Len(s), b.Len(s))
				}
			}
		}
		for _, bad := range []int{0, V + 1} {
			if _, err := m.StepSlotsGreedy(b, slots, next, bad); err == nil {
				t.Errorf("classes %d: no error", bad)
			}
		}
		a.Free()
		b.Free()
	}
}

// GreedyClasses takes the device's greedy pick only at temperature 0 and
// only where the suppressed ids are exactly a suffix of the vocabulary.
func TestGreedyClasses(t *testing.T) {
	for _, c := range []struct {
		name     string
		temp     float64
		suppress []int
		want     int
	}{
		{"nothing suppressed", 0, nil, 10},
		{"a suffix", 0, []int{9, 8, 7}, 7},
		{"a suffix, repeated ids", 0, []int{9, 9, 8}, 8},
		{"a hole", 0, []int{3, 9}, 0},
		{"sampled", 0.7, nil, 0},
		{"everything", 0, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 0},
	} {
		if got := GreedyClasses(c.temp, c.suppress, 10); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}
