package model

import (
	"math"
	"slices"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/cpu"
)

// decodeSteps prefills B prompts of P tokens into a fresh cache, decodes
// steps tokens one at a time and then one two-token chunk (the decode
// branch with more than one position), and returns every step's logits.
func decodeSteps(t *testing.T, m *Model, B, P, steps int) [][]float32 {
	t.Helper()
	kv, err := m.NewKVCache(B, P+steps+2)
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Free()
	prompt, _ := testBatch(m.Config, B, P, 32)
	logits, err := m.Step(kv, prompt, B, P, true)
	if err != nil {
		t.Fatal(err)
	}
	out := [][]float32{logits}
	next := make([]int32, 2*B)
	for i := range steps + 1 {
		T := 1
		if i == steps {
			T = 2
		}
		for j := range B * T {
			next[j] = int32((i*7 + j*3 + 1) % m.Config.Vocab)
		}
		if logits, err = m.Step(kv, next[:B*T], B, T, false); err != nil {
			t.Fatalf("decode step %d: %v", i+1, err)
		}
		out = append(out, logits)
	}
	return out
}

// withFusion runs fn with the decode fusion (decodeFusion) set to on.
func withFusion(on bool, fn func()) {
	old := decodeFusion
	decodeFusion = on
	defer func() { decodeFusion = old }()
	fn()
}

// fusedSpy is a CPU device that offers the fused decode ops' interfaces,
// counts the calls and declines each (so the engine's compositions run):
// it shows which fused ops a step reaches.
type fusedSpy struct {
	engine.Device
	calls map[string]int
}

func (s *fusedSpy) NormLinearMulti(outs, ws []*engine.Tensor, x, normW *engine.Tensor, eps float32) (bool, error) {
	s.calls["norm linear multi"]++
	return false, nil
}

func (s *fusedSpy) NormLinearDecodePrep(outs, ws []*engine.Tensor, x, normW *engine.Tensor, eps float32, a engine.DecodePrepArgs) (bool, error) {
	s.calls["norm linear decode prep"]++
	return false, nil
}

func (s *fusedSpy) NormLinearSwiGLU(act, x, normW, wGate, wUp *engine.Tensor, eps float32) (bool, error) {
	s.calls["norm linear swiglu"]++
	return false, nil
}

func (s *fusedSpy) DecodePrep(a engine.DecodePrepArgs) (bool, error) {
	s.calls["decode prep"]++
	if a.R != nil {
		s.calls["decode prep r"]++
	}
	if a.KeepKV {
		s.calls["decode prep keep"]++
	}
	return false, nil
}

// TestDecodeFusionUnchanged: on the CPU, which has none of the fused ops'
// kernels, the decode step through engine.NormLinearMulti, DecodePrep and
// NormLinearSwiGLU (their compositions) computes the very logits of the
// unfused step, bit for bit, for every attention variant (the probe gate
// keeping its own path for r and the input norm), one- and two-token
// steps, and ragged batches; the fused ops are reached by decode steps
// once per layer each, and DecodePrep by the prompt's prefill too (with
// KeepKV).
func TestDecodeFusionUnchanged(t *testing.T) {
	const B, P, steps = 2, 4, 4
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			cfg := testConfig(v.attention, v.tied)
			cfg.ProbeGate = v.gate
			ref := newTestModel(t, cfg, 41)
			spy := &fusedSpy{Device: cpu.New(), calls: map[string]int{}}
			m, err := New(spy, cfg, Options{Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Free()
			for i, p := range m.Params() {
				w, err := engine.Float32s(ref.Params()[i].W)
				if err != nil {
					t.Fatal(err)
				}
				if err := engine.WriteFloat32(p.W, w); err != nil {
					t.Fatal(err)
				}
			}
			m.MarkWeightsChanged()
			var plain, fused [][]float32
			withFusion(false, func() { plain = decodeSteps(t, m, B, P, steps) })
			if len(spy.calls) != 0 {
				t.Errorf("fusion off: the fused ops were called: %v", spy.calls)
			}
			withFusion(true, func() { fused = decodeSteps(t, m, B, P, steps) })
			for s := range plain {
				for j := range plain[s] {
					if math.Float32bits(plain[s][j]) != math.Float32bits(fused[s][j]) {
						t.Fatalf("step %d logit %d: %v fused, %v unfused", s, j, fused[s][j], plain[s][j])
					}
				}
			}
			// steps + 1 decode steps, each layer once; the prefill runs only
			// DecodePrep (keeping k and v).
			// The head of each decode step is one more norm linear multi
			// (the final norm in its kernel).
			n, l := (steps+1)*cfg.Layers, cfg.Layers
			want := map[string]int{"norm linear multi": n + steps + 1, "norm linear decode prep": n, "norm linear swiglu": n, "decode prep": n + l, "decode prep r": n + l,
				"decode prep keep": l}
			if v.gate {
				want["norm linear multi"] = steps + 1 // the gate reads the normed h: only the head
				want["norm linear decode prep"] = 0
				delete(want, "decode prep r")
			}
			if !cfg.Parallax() {
				delete(want, "decode prep r")
			}
			for k, c := range want {
				if spy.calls[k] != c {
					t.Errorf("fusion on: %s called %d times, want %d (all: %v)", k, spy.calls[k], c, spy.calls)
				}
			}
			jobs := raggedJobs(cfg)
			var rp, rf [][]int
			withFusion(false, func() { rp = runRagged(t, m, 3, 24, jobs) })
			withFusion(true, func() { rf = runRagged(t, m, 3, 24, jobs) })
			for i := range rp {
				if !slices.Equal(rp[i], rf[i]) {
					t.Errorf("ragged job %d: %v fused, %v unfused", i, rf[i], rp[i])
				}
			}
		})
	}
}
