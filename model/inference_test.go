package model

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/cpu"
)

// TestAutoDType: bf16 (else f16) on GPUs that list it, f32 on the CPU and
// software devices.
func TestAutoDType(t *testing.T) {
	all := []engine.DType{engine.F32, engine.BF16, engine.F16}
	for _, c := range []struct {
		kind   engine.Kind
		dtypes []engine.DType
		want   engine.DType
	}{
		{engine.KindDiscreteGPU, all, engine.BF16},
		{engine.KindIntegratedGPU, []engine.DType{engine.F32, engine.F16}, engine.F16},
		{engine.KindDiscreteGPU, []engine.DType{engine.F32}, engine.F32},
		{engine.KindSoftware, all, engine.F32},
		{engine.KindCPU, all, engine.F32},
	} {
		if got := AutoDType(engine.DeviceInfo{Kind: c.kind, DTypes: c.dtypes}); got != c.want {
			t.Errorf("AutoDType(%v, %v) = %v, want %v", c.kind, c.dtypes, got, c.want)
		}
	}
}

// countingDevice tracks the bytes of the tensors alive on a device.
type countingDevice struct {
	engine.Device
	live  int64
	sizes map[*engine.Tensor]int64
}

func newCountingDevice() *countingDevice {
	return &countingDevice{Device: cpu.New(), sizes: map[*engine.Tensor]int64{}}
}

func (d *countingDevice) Alloc(dt engine.DType, shape ...int) (*engine.Tensor, error) {
	t, err := d.Device.Alloc(dt, shape...)
	if err == nil {
		d.sizes[t] = int64(t.Bytes())
		d.live += int64(t.Bytes())
	}
	return t, err
}

func (d *countingDevice) Free(t *engine.Tensor) {
	d.live -= d.sizes[t]
	delete(d.sizes, t)
	d.Device.Free(t)
}

// TestInferenceLoad: an Inference load keeps only the bf16 copies of the
// product weights (the device memory drops by exactly their f32 masters, to
// about half of an f32 load), runs with the same logits as a normal bf16
// load, and refuses what needs the masters.
func TestInferenceLoad(t *testing.T) {
	for _, v := range variants[:2] { // tied and untied
		t.Run(v.name, func(t *testing.T) {
			cfg := testConfig(v.attention, v.tied)
			cfg.Vocab = 128 // no padding: the memory ratio is the weights'
			dir := t.TempDir()
			src := newTestModel(t, cfg, 5)
			if err := src.Save(dir); err != nil {
				t.Fatal(err)
			}
			load := func(o LoadOptions) (*Model, int64) {
				t.Helper()
				dev := newCountingDevice()
				m, err := Load(dir, dev, o)
				if err != nil {
					t.Fatal(err)
				}
				return m, dev.live
			}
			f32, f32Bytes := load(LoadOptions{})
			full, fullBytes := load(LoadOptions{DType: engine.BF16})
			inf, infBytes := load(LoadOptions{DType: engine.BF16, Inference: true})
			var dropped int64
			for _, p := range full.Params() {
				if p.C != nil {
					dropped += int64(p.W.Bytes())
				}
			}
			t.Logf("device bytes: f32 %d, bf16 %d, bf16 inference %d", f32Bytes, fullBytes, infBytes)
			if infBytes != fullBytes-dropped {
				t.Errorf("inference load holds %d bytes, want %d (the bf16 load's %d less the %d of its copied masters)",
					infBytes, fullBytes-dropped, fullBytes, dropped)
			}
			// Against f32: every copied weight at half its size (no vocabulary
			// padding at 128); the rest (gains, an untied embedding) stays f32.
			if infBytes != f32Bytes-dropped/2 {
				t.Errorf("inference load holds %d bytes, want %d (the f32 load's %d less half of the %d copied)",
					infBytes, f32Bytes-dropped/2, f32Bytes, dropped)
			}
			if v.tied && float64(infBytes) > 0.55*float64(f32Bytes) {
				t.Errorf("tied inference load holds %d bytes, more than 0.55 of the f32 load's %d", infBytes, f32Bytes)
			}
			if !inf.InferenceOnly() || full.InferenceOnly() || f32.InferenceOnly() {
				t.Errorf("InferenceOnly: inference %v, bf16 %v, f32 %v", inf.InferenceOnly(), full.InferenceOnly(), f32.InferenceOnly())
			}
			for _, p := range inf.Params() {
				if (p.W == nil) != (p.C != nil) {
					t.Errorf("%s: master %v, copy %v: exactly the copied weights lose their master", p.Name, p.W, p.C)
				}
			}

			tokens, targets := testBatch(cfg, 2, 6, 6)
			logits := func(m *Model) []float32 {
				t.Helper()
				if _, err := m.Evaluate(tokens, targets, 2, 6); err != nil {
					t.Fatal(err)
				}
				l, err := m.Logits()
				if err != nil {
					t.Fatal(err)
				}
				return l
			}
			want := logits(full)
			if got := logits(inf); !slices.Equal(got, want) {
				t.Error("the inference load's logits differ from the bf16 load's")
			}
			inf.MarkWeightsChanged() // nothing to refresh from: must not run
			if got := logits(inf); !slices.Equal(got, want) {
				t.Error("MarkWeightsChanged changed an inference-only model's logits")
			}
			if err := inf.Save(t.TempDir()); !errors.Is(err, ErrInferenceOnly) {
				t.Errorf("Save: %v, want ErrInferenceOnly", err)
			}
			if _, err := inf.Forward(tokens, targets, 2, 6); err != nil {
				t.Fatal(err)
			}
			if err := inf.Backward(1); !errors.Is(err, ErrInferenceOnly) {
				t.Errorf("Backward: %v, want ErrInferenceOnly", err)
			}

			// f32: the masters are the compute weights; nothing is dropped.
			f32i, f32iBytes := load(LoadOptions{Inference: true})
			if f32i.InferenceOnly() || f32iBytes != f32Bytes {
				t.Errorf("f32 inference load: InferenceOnly %v, %d bytes (f32 load %d)", f32i.InferenceOnly(), f32iBytes, f32Bytes)
			}
			if err := f32i.Save(t.TempDir()); err != nil {
				t.Errorf("Save of an f32 inference load: %v", err)
			}
			for _, m := range []*Model{f32, full, inf, f32i} {
				m.Free()
			}
		})
	}
}

// bf16Unit is bf16's unit roundoff: 8 significant bits, so rounding to
// nearest moves a value by at most 2^-8 of itself.
const bf16Unit = 1.0 / 256

// TestBF16GenerationMatchesF32: greedy generation from a bf16 inference load
// follows the f32 model. Every step's logits, both models fed the f32
// model's tokens, agree within a bound derived from bf16's rounding, and the
// greedy tokens agree wherever the f32 logits' top-2 margin exceeds twice
// that bound (closer calls may flip). A batch of two sequences in one cache
// gives the same result per sequence.
func TestBF16GenerationMatchesF32(t *testing.T) {
	const P, n = 5, 12
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			cfg := testConfig(v.attention, v.tied)
			cfg.ProbeGate = v.gate
			dir := t.TempDir()
			f32 := newTestModel(t, cfg, 81)
			if err := f32.Save(dir); err != nil {
				t.Fatal(err)
			}
			b16, err := Load(dir, cpu.New(), LoadOptions{DType: engine.BF16, Inference: true})
			if err != nil {
				t.Fatal(err)
			}
			defer b16.Free()
			prompt := []int{3, 1, 4, 1, 5}
			want, err := f32.Generate(prompt, n, GenerateOptions{IgnoreEOS: true}, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := b16.Generate(prompt, n, GenerateOptions{IgnoreEOS: true}, nil)
			if err != nil {
				t.Fatal(err)
			}

			// Teacher-forced: both models step through prompt + want; two
			// copies of the sequence in one batch exercise the batched cache.
			const B = 2
			V := cfg.Vocab
			seq := append(append([]int(nil), prompt...), want...)
			caches := make([]*KVCache, 2)
			for i, m := range []*Model{f32, b16} {
				if caches[i], err = m.NewKVCache(B, len(seq)); err != nil {
					t.Fatal(err)
				}
				defer caches[i].Free()
			}
			ids := func(from, to int) []int32 {
				var out []int32
				for range B {
					for _, t := range seq[from:to] {
						out = append(out, int32(t))
					}
				}
				return out
			}
			agree := true // the greedy sequences must match up to the first close call
			checked := 0  // steps whose margin makes the token certain
			var worst float64
			for s := range n {
				from, to := 0, P
				if s > 0 {
					from, to = P+s-1, P+s
				}
				var rows [2][]float32
				for i, m := range []*Model{f32, b16} {
					if rows[i], err = m.Step(caches[i], ids(from, to), B, to-from, true); err != nil {
						t.Fatal(err)
					}
				}
				ref := rows[0][:V]
				bound := bf16LogitBound(ref, cfg)
				top, second := top2(ref)
				if top != want[s] {
					t.Fatalf("step %d: the batched f32 cache picks %d, Generate %d", s, top, want[s])
				}
				margin := float64(ref[top] - ref[second])
				if margin > 2*bound {
					checked++
				}
				for b := range B {
					row := rows[1][b*V : (b+1)*V]
					for j := range V {
						d := math.Abs(float64(row[j] - ref[j]))
						worst = max(worst, d/bound)
						if d > bound {
							t.Fatalf("step %d, sequence %d, logit %d: bf16 %v, f32 %v: |diff| %.3g exceeds the bf16 bound %.3g",
								s, b, j, row[j], ref[j], d, bound)
						}
					}
					if b > 0 && !slices.Equal(rows[0][b*V:(b+1)*V], ref) {
						t.Fatalf("step %d: the two identical sequences of the batch have different f32 logits", s)
					}
					if best, _ := top2(row); margin > 2*bound && best != top {
						t.Errorf("step %d, sequence %d: bf16 picks %d, f32 %d, although the f32 margin %.3g exceeds twice the bound %.3g",
							s, b, best, top, margin, bound)
					}
				}
				if agree && margin > 2*bound {
					if s >= len(got) || got[s] != want[s] {
						t.Errorf("greedy token %d: bf16 generated %v, f32 %v (margin %.3g, bound %.3g)", s, got, want, margin, bound)
					}
				} else {
					agree = false
				}
			}
			t.Logf("f32 %v, bf16 %v; largest logit difference %.2f of the bound; %d of %d tokens beyond doubt", want, got, worst, checked, n)
			if worst == 0 {
				t.Error("bf16 and f32 logits are identical: the bf16 path did not run")
			}
			if checked == 0 {
				t.Error("no step had a top-2 margin above twice the bound: nothing was compared")
			}
		})
	}
}

// bf16LogitBound bounds |bf16 - f32| for a row of logits. A logit is the
// last link of a chain of rounded tensors: each of a layer's roughly 12
// stored activations (norms, projections, head norms, RoPE, attention,
// residual, MLP) and its weights is rounded to bf16 once, a relative error
// of at most u = 2^-8 each, so a model of L layers accumulates about k =
// 12 L + 4 of them (the embedding, the final norm, the head and its
// weight). Norms keep relative errors relative, so to first order the
// logits move by at most k u of their scale, the row's largest magnitude;
// independent roundings add in quadrature, so sqrt(k) u is typical and k u
// the worst case. The bound is the worst case.
func bf16LogitBound(row []float32, cfg Config) float64 {
	var scale float64
	for _, x := range row {
		scale = max(scale, math.Abs(float64(x)))
	}
	k := float64(12*cfg.Layers + 4)
	return k * bf16Unit * scale
}

// top2 returns the indices of the largest and second largest values.
func top2(row []float32) (first, second int) {
	first, second = 0, -1
	for i := 1; i < len(row); i++ {
		switch {
		case row[i] > row[first]:
			first, second = i, first
		case second < 0 || row[i] > row[second]:
			second = i
		}
	}
	return first, second
}

// TestGenerateSuppress: suppressed ids are never sampled, even when they are
// the most likely; ids outside the vocabulary and suppressing everything
// are errors.
func TestGenerateSuppress(t *testing.T) {
	cfg := testConfig(AttentionSoftmax, true)
	m := newTestModel(t, cfg, 9)
	prompt := []int{2, 7, 1}
	free, err := m.Generate(prompt, 6, GenerateOptions{IgnoreEOS: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ban := []int{free[0]}
	for _, s := range []SampleOptions{{}, {Temperature: 1, Seed: 3}, {Temperature: 2, TopK: 3, TopP: 0.9, Seed: 4}} {
		got, err := m.Generate(prompt, 6, GenerateOptions{IgnoreEOS: true, Suppress: ban, Sample: s}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 6 || slices.Contains(got, ban[0]) {
			t.Errorf("sampling %+v with %d suppressed: %v", s, ban[0], got)
		}
	}
	if _, err := m.Generate(prompt, 2, GenerateOptions{Suppress: []int{cfg.Vocab}}, nil); err == nil {
		t.Error("suppressing an id outside the vocabulary succeeded")
	}
	all := make([]int, cfg.Vocab)
	for i := range all {
		all[i] = i
	}
	if _, err := m.Generate(prompt, 2, GenerateOptions{Suppress: all}, nil); err == nil {
		t.Error("suppressing every id succeeded")
	}
}
