package model

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/cpu"
)

// trainSpy is a CPU device that counts the training step's fused residual
// ops: it declines engine.LinearResidual (so the copy and accumulating
// product run, as on the CPU itself) and passes the accumulating RMSNorm
// backward on to the CPU's.
type trainSpy struct {
	engine.Device
	calls map[string]int
}

func (s *trainSpy) LinearResidual(y, r, x, w *engine.Tensor) (bool, error) {
	s.calls["linear residual"]++
	return false, nil
}

func (s *trainSpy) RMSNormBackwardAccumulate(dX, dW, dOut, x, w, rstd *engine.Tensor) (bool, error) {
	s.calls["rmsnorm backward accumulate"]++
	return s.Device.(engine.RMSNormBackwardAccumulator).RMSNormBackwardAccumulate(dX, dW, dOut, x, w, rstd)
}

// withTrainFusion runs fn with trainFusion set to on.
func withTrainFusion(on bool, fn func()) {
	old := trainFusion
	trainFusion = on
	defer func() { trainFusion = old }()
	fn()
}

// TestTrainFusionUnchanged: a few SGD steps through the fused residual ops
// (rec.linearResidual, rec.rmsnormBackwardAdd) give the losses and
// gradients of the copies, products and adds they replace. On the CPU the
// residual linear is the copy and accumulating product itself, and the
// accumulating RMSNorm backward adds the same f32 gradient into dX: bit for
// bit equal with f32 activations. With bf16 activations the fused backward
// rounds dX + gradient once where the old path rounds the gradient to bf16
// first, so the losses agree within bf16 rounding (1e-2 relative here).
func TestTrainFusionUnchanged(t *testing.T) {
	const B, T, steps = 2, 5, 3
	for _, dt := range []engine.DType{engine.F32, engine.BF16} {
		for _, v := range variants {
			t.Run(fmt.Sprintf("%v/%s", dt, v.name), func(t *testing.T) {
				cfg := testConfig(v.attention, v.tied)
				cfg.ProbeGate = v.gate
				tokens, targets := testBatch(cfg, B, T, 13)
				var losses [2][]float64
				var grads [2][][]float32
				for k, on := range []bool{false, true} {
					spy := &trainSpy{Device: cpu.New(), calls: map[string]int{}}
					m, err := New(spy, cfg, Options{Seed: 21, DType: dt})
					if err != nil {
						t.Fatal(err)
					}
					withTrainFusion(on, func() {
						for s := range steps {
							if err := m.ZeroGrads(); err != nil {
								t.Fatal(err)
							}
							st, err := m.ForwardBackward(tokens, targets, B, T, 1)
							if err != nil {
								t.Fatal(err)
							}
							losses[k] = append(losses[k], st.Mean)
							for _, p := range m.Params() {
								if s == steps-1 {
									g, err := engine.Float32s(p.G)
									if err != nil {
										t.Fatal(err)
									}
									grads[k] = append(grads[k], g)
								}
								if err := spy.AddScaled(p.W, p.W, p.G, 1, -0.05); err != nil {
									t.Fatal(err)
								}
							}
							m.MarkWeightsChanged()
						}
					})
					want := 0
					if on {
						want = 2 * cfg.Layers * steps
					}
					for _, op := range []string{"linear residual", "rmsnorm backward accumulate"} {
						if spy.calls[op] != want {
							t.Errorf("fusion %v: %d %s calls, want %d", on, spy.calls[op], op, want)
						}
					}
				}
				for s := range steps {
					a, b := losses[0][s], losses[1][s]
					t.Logf("step %d: loss %.9g, fused %.9g", s, a, b)
					if dt == engine.F32 && a != b || math.Abs(a-b) > 1e-2*math.Abs(a) {
						t.Errorf("step %d: loss %v, fused %v", s, a, b)
					}
				}
				if dt != engine.F32 {
					return
				}
				for i := range grads[0] {
					if !slices.Equal(grads[0][i], grads[1][i]) {
						t.Errorf("gradient %d differs between the fused and unfused steps", i)
					}
				}
			})
		}
	}
}
