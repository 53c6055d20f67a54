package cpu

import (
	"fmt"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/enginetest"
	"github.com/parallax-engine/parallax/engine/ref"
)

func TestRoPE(t *testing.T) {
	type rc struct {
		b, h, l, d int
		theta      float32
	}
	for ci, c := range []rc{{1, 1, 1, 2, 1e4}, {2, 3, 5, 16, 1e4}, {1, 4, 33, 64, 1e6}, {2, 2, 7, 128, 1e6}} {
		for _, dt := range []engine.DType{engine.F32, engine.BF16} {
			for _, d := range testDevices() {
				t.Run(fmt.Sprintf("%dx%dx%dx%d/theta=%g/%v/threads=%d", c.b, c.h, c.l, c.d, c.theta, dt, d.threads), func(t *testing.T) {
					rng := newRng(uint64(ci))
					n := c.b * c.h * c.l * c.d
					pos := make([]int, c.l)
					for i := range pos {
						pos[i] = rng.IntN(4096)
					}
					pos[0] = 0
					xv := enginetest.Normal(rng, dt, n, 1)
					x, p := up(t, d, dt, xv, c.b, c.h, c.l, c.d), upInts(t, d, pos, c.l)
					out := alloc(t, d, dt, c.b, c.h, c.l, c.d)
					if err := d.RoPE(out, x, p, c.theta); err != nil {
						t.Fatal(err)
					}
					tol := tolFor(dt, 2)
					near(t, "out", down(t, out), ref.RoPE(xv, c.b, c.h, c.l, c.d, pos, float64(c.theta), false), tol)
					dx := alloc(t, d, dt, c.b, c.h, c.l, c.d)
					if err := d.RoPEBackward(dx, x, p, c.theta); err != nil {
						t.Fatal(err)
					}
					near(t, "dX", down(t, dx), ref.RoPE(xv, c.b, c.h, c.l, c.d, pos, float64(c.theta), true), tol)
					// In place, forward then backward: back to x (up to rounding).
					if err := d.RoPE(x, x, p, c.theta); err != nil {
						t.Fatal(err)
					}
					near(t, "in place", down(t, x), ref.RoPE(xv, c.b, c.h, c.l, c.d, pos, float64(c.theta), false), tol)
					if err := d.RoPEBackward(x, x, p, c.theta); err != nil {
						t.Fatal(err)
					}
					near(t, "round trip", down(t, x), xv, 2*tol)
				})
			}
		}
	}
}

func TestRoPEErrors(t *testing.T) {
	d := New()
	f := func(dt engine.DType, s ...int) *engine.Tensor { return alloc(t, d, dt, s...) }
	x := f(engine.F32, 1, 2, 3, 8)
	wantArgError(t, "odd D", d.RoPE(f(engine.F32, 1, 2, 3, 7), f(engine.F32, 1, 2, 3, 7), f(engine.I32, 3), 1e4), "rope")
	wantArgError(t, "float pos", d.RoPE(x, x, f(engine.F32, 3), 1e4), "rope")
	wantArgError(t, "pos length", d.RoPE(x, x, f(engine.I32, 4), 1e4), "rope")
	wantArgError(t, "rank 3", d.RoPE(f(engine.F32, 2, 3, 8), f(engine.F32, 2, 3, 8), f(engine.I32, 3), 1e4), "rope")
	wantArgError(t, "out shape", d.RoPE(f(engine.F32, 1, 3, 2, 8), x, f(engine.I32, 3), 1e4), "rope")
	wantArgError(t, "backward", d.RoPEBackward(x, x, nil, 1e4), "rope")
}
