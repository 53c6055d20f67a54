package model

import (
	"slices"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/cpu"
)

// composedDevice is a CPU device without the fused head norm and rotation
// (engine.NormRoPE), so the model runs RMSNorm, the swap and RoPE instead.
type composedDevice struct{ engine.Device }

// TestNormRoPEMatchesComposition checks that the fused head norm and
// rotation leave the f32 model bit for bit where the composed ops put it:
// the training loss and every gradient, and the logits of a prefill and a
// decode step.
func TestNormRoPEMatchesComposition(t *testing.T) {
	const B, T = 2, 5
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			cfg := testConfig(v.attention, v.tied)
			cfg.ProbeGate = v.gate
			fused := newTestModel(t, cfg, 3)
			composed := copyModel(t, composedDevice{cpu.New()}, fused)
			if _, ok := composed.Dev.(engine.NormRoPE); ok {
				t.Fatal("the composed device offers the fused op")
			}
			tokens, targets := testBatch(cfg, B, T, 4)
			type result struct {
				loss   float64
				grads  [][]float32
				logits []float32
			}
			run := func(m *Model) result {
				var r result
				if err := m.ZeroGrads(); err != nil {
					t.Fatal(err)
				}
				st, err := m.ForwardBackward(tokens, targets, B, T, 1)
				if err != nil {
					t.Fatal(err)
				}
				r.loss = st.Sum
				for _, p := range m.Params() {
					g, err := engine.Float32s(p.G)
					if err != nil {
						t.Fatal(err)
					}
					r.grads = append(r.grads, g)
				}
				kv, err := m.NewKVCache(B, T+1)
				if err != nil {
					t.Fatal(err)
				}
				defer kv.Free()
				prompt := make([]int32, 0, B*(T-1))
				for b := range B {
					prompt = append(prompt, tokens[b*T:b*T+T-1]...)
				}
				pre, err := m.Step(kv, prompt, B, T-1, false)
				if err != nil {
					t.Fatal(err)
				}
				next, err := m.Step(kv, []int32{tokens[T-1], tokens[2*T-1]}, B, 1, false)
				if err != nil {
					t.Fatal(err)
				}
				r.logits = append(append([]float32(nil), pre...), next...)
				return r
			}
			f, c := run(fused), run(composed)
			if f.loss != c.loss {
				t.Errorf("loss %v, composed %v", f.loss, c.loss)
			}
			for i, p := range fused.Params() {
				if !slices.Equal(f.grads[i], c.grads[i]) {
					t.Errorf("gradient of %s differs from the composition", p.Name)
				}
			}
			if !slices.Equal(f.logits, c.logits) {
				t.Error("prefill and decode logits differ from the composition")
			}
		})
	}
}
