package engine_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/cpu"
	"github.com/parallax-engine/parallax/engine/enginetest"
	"github.com/parallax-engine/parallax/engine/ref"
)

// plainDevice hides every optional interface of the device it wraps, so
// the engine's helpers take their generic paths.
type plainDevice struct{ engine.Device }

// emulatedNS is the CPU device with engine.NewtonSchulzOps emulated from
// single ops (A = X X^T, B = b A + a I, B += c A A, X' = B X, swapping x
// and y each step), to check how NewtonSchulz drives the interface.
type emulatedNS struct {
	plainDevice
	steps int // iterations run through the interface
}

func (d *emulatedNS) NewtonSchulzIterate(x, y, a, b *engine.Tensor, steps int) error {
	k := a.Dim(-1)
	id := make([]float32, a.Numel())
	for i := range id {
		if r := i % (k * k); r/k == r%k {
			id[i] = 1
		}
	}
	eye, err := engine.FromFloat32(d, a.DType(), id, a.Shape()...)
	if err != nil {
		return err
	}
	defer d.Free(eye)
	aa, err := d.Alloc(a.DType(), a.Shape()...)
	if err != nil {
		return err
	}
	defer d.Free(aa)
	tall := x.Dim(-2) > x.Dim(-1)
	for range steps {
		if tall {
			err = d.MatMul(a, x, x, engine.MatMulOpts{TransA: true})
		} else {
			err = d.MatMul(a, x, x, engine.MatMulOpts{TransB: true})
		}
		if err == nil {
			err = d.AddScaled(b, a, eye, engine.NSB, engine.NSA)
		}
		if err == nil {
			err = d.MatMul(aa, a, a, engine.MatMulOpts{})
		}
		if err == nil {
			err = d.AddScaled(b, b, aa, 1, engine.NSC)
		}
		if err == nil {
			if tall {
				err = d.MatMul(y, x, b, engine.MatMulOpts{})
			} else {
				err = d.MatMul(y, b, x, engine.MatMulOpts{})
			}
		}
		if err != nil {
			return err
		}
		x, y = y, x
		d.steps++
	}
	return nil
}

// upload and download move float32 values to and from tensors, normal
// draws them.
var (
	upload   = enginetest.MustFromFloat32
	download = enginetest.MustFloat32s
	normal   = enginetest.Normal32
)

// TestNewtonSchulzIterateParity runs NewtonSchulz through an emulated
// NewtonSchulzOps for even and odd step counts, wide and tall batches, in
// place and not, against the float64 reference: the result must land in
// out whatever the parity, within f32 rounding of the reference (3e-5
// relative, the bound of the conformance suite; the folded polynomial
// rounds differently but no worse).
func TestNewtonSchulzIterateParity(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		batch, rows, cols, steps int
		inPlace                  bool
	}{
		{2, 16, 24, 5, false}, {2, 16, 24, 5, true}, {2, 16, 24, 4, false}, {2, 16, 24, 4, true},
		{3, 24, 16, 5, true}, {1, 24, 16, 2, false}, {1, 20, 20, 1, true},
	} {
		t.Run(fmt.Sprintf("%dx%dx%d/%d steps/in place %v", tc.batch, tc.rows, tc.cols, tc.steps, tc.inPlace), func(t *testing.T) {
			dev := &emulatedNS{plainDevice: plainDevice{cpu.New()}}
			per := tc.rows * tc.cols
			gv := normal(rng, tc.batch*per, 1)
			g := upload(t, dev, engine.F32, gv, tc.batch, tc.rows, tc.cols)
			out := g
			if !tc.inPlace {
				out = upload(t, dev, engine.F32, make([]float32, len(gv)), tc.batch, tc.rows, tc.cols)
			}
			if err := engine.NewtonSchulz(dev, out, g, tc.steps); err != nil {
				t.Fatal(err)
			}
			if dev.steps != tc.steps {
				t.Fatalf("%d steps through NewtonSchulzOps, want %d", dev.steps, tc.steps)
			}
			got := download(t, out)
			var num, den float64
			for b := range tc.batch {
				g64 := make([]float64, per)
				for i := range g64 {
					g64[i] = float64(gv[b*per+i])
				}
				for i, w := range ref.NewtonSchulz(g64, tc.rows, tc.cols, tc.steps) {
					e := float64(got[b*per+i]) - w
					num, den = num+e*e, den+w*w
				}
			}
			if e := math.Sqrt(num / den); e > 3e-5 {
				t.Errorf("relative error %.2e against the float64 reference, want <= 3e-5", e)
			}
		})
	}
}

// TestMuonStackPathsAgree runs a Muon batch (momentum into the stack,
// Newton-Schulz, apply) on the CPU device with its MuonMultiOps and
// through the generic path (per-matrix ops and stack copies), in f32 and
// bf16 stacks, full and partly filled: the two must agree bit for bit,
// as they compute the same per-element formulas.
func TestMuonStackPathsAgree(t *testing.T) {
	const rows, cols = 12, 20
	per := rows * cols
	for _, dt := range []engine.DType{engine.F32, engine.BF16} {
		for _, tc := range []struct{ slots, n int }{{1, 1}, {3, 3}, {4, 2}} {
			t.Run(fmt.Sprintf("%v/%d of %d", dt, tc.n, tc.slots), func(t *testing.T) {
				var results [2][][]float32
				for pass, dev := range []engine.Device{cpu.New(), plainDevice{cpu.New()}} {
					rng := rand.New(rand.NewPCG(7, uint64(tc.n)))
					st, err := engine.NewMuonStack(dev, dt, tc.slots, rows, cols)
					if err != nil {
						t.Fatal(err)
					}
					defer st.Free()
					var ps, gs, ms []*engine.Tensor
					scales, lrScales := make([]float32, tc.n), make([]float32, tc.n)
					for i := range tc.n {
						ps = append(ps, upload(t, dev, engine.F32, normal(rng, per, 0.1), rows, cols))
						gs = append(gs, upload(t, dev, engine.F32, normal(rng, per, 1), rows, cols))
						ms = append(ms, upload(t, dev, engine.F32, normal(rng, per, 0.1), rows, cols))
						scales[i], lrScales[i] = 1+float32(i)/3, 1/float32(i+1)
					}
					for range 2 {
						if err := engine.MuonMomentumAll(st, ms, gs, engine.MuonMomentumOpts{Beta: 0.95, Nesterov: true, GradScale: 0.61}); err != nil {
							t.Fatal(err)
						}
						if err := st.NewtonSchulz(5); err != nil {
							t.Fatal(err)
						}
						if err := engine.MuonApplyAll(st, ps, 0.02, 0.1, lrScales, scales); err != nil {
							t.Fatal(err)
						}
					}
					for i := range tc.n {
						results[pass] = append(results[pass], download(t, ps[i]), download(t, ms[i]))
					}
				}
				for i := range results[0] {
					for j, v := range results[0][i] {
						if w := results[1][i][j]; math.Float32bits(v) != math.Float32bits(w) {
							t.Fatalf("tensor %d element %d: %v with MuonMultiOps, %v through the generic path", i, j, v, w)
						}
					}
				}
			})
		}
	}
}

// TestMuonStackArgs checks the stack ops' validation.
func TestMuonStackArgs(t *testing.T) {
	dev := cpu.New()
	st, err := engine.NewMuonStack(dev, engine.F32, 2, 4, 6)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Free()
	m := upload(t, dev, engine.F32, make([]float32, 24), 4, 6)
	bad := upload(t, dev, engine.F32, make([]float32, 25), 25)
	bf := upload(t, dev, engine.BF16, make([]float32, 24), 4, 6)
	for name, err := range map[string]error{
		"too many matrices": engine.MuonMomentumAll(st, []*engine.Tensor{m, m, m}, []*engine.Tensor{m, m, m}, engine.MuonMomentumOpts{Beta: 0.9}),
		"lists differ":      engine.MuonMomentumAll(st, []*engine.Tensor{m}, nil, engine.MuonMomentumOpts{Beta: 0.9}),
		"wrong size":        engine.MuonMomentumAll(st, []*engine.Tensor{bad}, []*engine.Tensor{m}, engine.MuonMomentumOpts{Beta: 0.9}),
		"bf16 momentum":     engine.MuonMomentumAll(st, []*engine.Tensor{bf}, []*engine.Tensor{m}, engine.MuonMomentumOpts{Beta: 0.9}),
		"negative scale":    engine.MuonMomentumAll(st, []*engine.Tensor{m}, []*engine.Tensor{m}, engine.MuonMomentumOpts{Beta: 0.9, GradScale: -1}),
		"scales missing":    engine.MuonApplyAll(st, []*engine.Tensor{m}, 0.1, 0, nil, nil),
		"lr scales short":   engine.MuonApplyAll(st, []*engine.Tensor{m, m}, 0.1, 0, []float32{1}, []float32{1, 1}),
		"apply wrong size":  engine.MuonApplyAll(st, []*engine.Tensor{bad}, 0.1, 0, nil, []float32{1}),
	} {
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := engine.NewMuonStack(dev, engine.F32, 0, 4, 6); err == nil {
		t.Error("a stack of no slots was accepted")
	}
}
