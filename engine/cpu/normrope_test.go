package cpu

import (
	"fmt"
	"slices"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/enginetest"
)

// composedDevice hides the CPU device's NormRoPE, so engine.RMSNormRoPE
// and engine.RMSNormRoPEBackward run their composition of RMSNorm,
// SwapAxes12 and RoPE on it.
type composedDevice struct{ engine.Device }

// TestRMSNormRoPEMatchesComposition checks that with f32 tensors the fused
// op is exactly RMSNorm, SwapAxes12 and RoPE (and its backward exactly
// RoPEBackward, SwapAxes12 and RMSNormBackward), for every worker count:
// the model's f32 results do not move when it uses the fused op.
func TestRMSNormRoPEMatchesComposition(t *testing.T) {
	const eps = 1e-6
	for ci, c := range []struct {
		b, l, h, d int
		perSeq     bool
	}{
		{1, 1, 1, 2, false}, {2, 5, 3, 16, false}, {2, 7, 4, 64, true}, {3, 1, 8, 128, true}, {1, 33, 2, 12, false},
	} {
		for _, d := range testDevices() {
			t.Run(fmt.Sprintf("%dx%dx%dx%d/perseq=%v/threads=%d", c.b, c.l, c.h, c.d, c.perSeq, d.threads), func(t *testing.T) {
				rng := newRng(uint64(ci))
				n := c.b * c.l * c.h * c.d
				np, pshape := c.l, []int{c.l}
				if c.perSeq {
					np, pshape = c.b*c.l, []int{c.b, c.l}
				}
				pos := make([]int, np)
				for i := range pos {
					pos[i] = rng.IntN(4096)
				}
				dt := engine.F32
				x := up(t, d, dt, enginetest.Normal(rng, dt, n, 2), c.b, c.l, c.h, c.d)
				w := up(t, d, dt, enginetest.Normal(rng, dt, c.d, 1), c.d)
				g := up(t, d, dt, enginetest.Normal(rng, dt, n, 1), c.b, c.h, c.l, c.d)
				dw0 := enginetest.Normal(rng, dt, c.d, 1)
				p := upInts(t, d, pos, pshape...)
				run := func(dev engine.Device) (out, rstd, dx, dw []float64) {
					o, rs := alloc(t, d, dt, c.b, c.h, c.l, c.d), alloc(t, d, engine.F32, c.b, c.l, c.h)
					dX, dW := alloc(t, d, dt, c.b, c.l, c.h, c.d), up(t, d, dt, dw0, c.d)
					if err := engine.RMSNormRoPE(dev, o, rs, x, w, p, eps, 1e4); err != nil {
						t.Fatal(err)
					}
					if err := engine.RMSNormRoPEBackward(dev, dX, dW, g, x, w, rs, p, 1e4); err != nil {
						t.Fatal(err)
					}
					return down(t, o), down(t, rs), down(t, dX), down(t, dW)
				}
				fo, fr, fdx, fdw := run(d)
				co, cr, cdx, cdw := run(composedDevice{d})
				for _, v := range []struct {
					name      string
					got, want []float64
				}{{"out", fo, co}, {"rstd", fr, cr}, {"dX", fdx, cdx}, {"dW", fdw, cdw}} {
					if !slices.Equal(v.got, v.want) {
						t.Errorf("%s differs from the composition (relative error %.3g)", v.name, enginetest.RelErr(v.got, v.want))
					}
				}
			})
		}
	}
}

// TestRMSNormRoPEArgs checks that bad operands are argument errors.
func TestRMSNormRoPEArgs(t *testing.T) {
	d := New()
	f := func(shape ...int) *engine.Tensor { return alloc(t, d, engine.F32, shape...) }
	pos := upInts(t, d, []int{0, 1, 2}, 3)
	x, w, out, rstd := f(2, 3, 4, 8), f(8), f(2, 4, 3, 8), f(2, 3, 4)
	for _, c := range []struct {
		name string
		err  error
		op   string
	}{
		{"odd D", d.RMSNormRoPE(f(2, 3, 4, 7), nil, f(2, 3, 4, 7), f(7), pos, 1e-6, 1e4), "rmsnorm rope"},
		{"out in x's layout", d.RMSNormRoPE(f(2, 3, 4, 8), rstd, x, w, pos, 1e-6, 1e4), "rmsnorm rope"},
		{"rstd in out's layout", d.RMSNormRoPE(out, f(2, 4, 3), x, w, pos, 1e-6, 1e4), "rmsnorm rope"},
		{"short pos", d.RMSNormRoPE(out, rstd, x, w, upInts(t, d, []int{0, 1}, 2), 1e-6, 1e4), "rmsnorm rope"},
		{"pos [B, L] of the wrong B", d.RMSNormRoPE(out, rstd, x, w, upInts(t, d, []int{0, 1, 2}, 1, 3), 1e-6, 1e4), "rmsnorm rope"},
		{"no rstd", d.RMSNormRoPEBackward(f(2, 3, 4, 8), f(8), out, x, w, nil, pos, 1e4), "rmsnorm rope backward"},
		{"dX in dOut's layout", d.RMSNormRoPEBackward(f(2, 4, 3, 8), f(8), out, x, w, rstd, pos, 1e4), "rmsnorm rope backward"},
		{"short dW", d.RMSNormRoPEBackward(f(2, 3, 4, 8), f(4), out, x, w, rstd, pos, 1e4), "rmsnorm rope backward"},
	} {
		wantArgError(t, c.name, c.err, c.op)
	}
}
