package cpu

import (
	"fmt"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/enginetest"
	"github.com/parallax-engine/parallax/engine/ref"
)

func TestRMSNorm(t *testing.T) {
	shapes := [][]int{{1, 3}, {3, 5, 96}, {2, 3, 4, 32}, {1000, 24}, {7}}
	for si, shape := range shapes {
		for _, dt := range []engine.DType{engine.F32, engine.BF16} {
			for _, d := range testDevices() {
				t.Run(fmt.Sprintf("%v/%v/threads=%d", shape, dt, d.threads), func(t *testing.T) {
					rng := newRng(uint64(si))
					n := shape[len(shape)-1]
					numel := engine.Shape(shape).Numel()
					rows := numel / n
					const eps = 1e-6
					xv := enginetest.Normal(rng, dt, numel, 2)
					wv := enginetest.Normal(rng, dt, n, 1)
					gv := enginetest.Normal(rng, dt, numel, 1)
					dw0 := enginetest.Normal(rng, dt, n, 1)
					x, w, g := up(t, d, dt, xv, shape...), up(t, d, dt, wv, n), up(t, d, dt, gv, shape...)
					out := alloc(t, d, dt, shape...)
					rstd := alloc(t, d, engine.F32, shape[:len(shape)-1]...)
					if err := d.RMSNorm(out, rstd, x, w, eps); err != nil {
						t.Fatal(err)
					}
					wo, wr := ref.RMSNorm(xv, wv, rows, n, eps)
					near(t, "out", down(t, out), wo, tolFor(dt, n))
					near(t, "rstd", down(t, rstd), wr, tolFor(engine.F32, n))

					dx := alloc(t, d, dt, shape...)
					dw := up(t, d, dt, dw0, n)
					if err := d.RMSNormBackward(dx, dw, g, x, w, rstd); err != nil {
						t.Fatal(err)
					}
					wdx, wdw := ref.RMSNormBackward(gv, xv, wv, rows, n, eps)
					near(t, "dX", down(t, dx), wdx, tolFor(dt, n))
					near(t, "dW", down(t, dw), ref.AddScaled(wdw, dw0, 1, 1), tolFor(dt, rows))

					// Without rstd, and in place.
					if err := d.RMSNorm(x, nil, x, w, eps); err != nil {
						t.Fatal(err)
					}
					near(t, "in place", down(t, x), wo, tolFor(dt, n))
				})
			}
		}
	}
}

func TestRMSNormErrors(t *testing.T) {
	d := New()
	f := func(dt engine.DType, s ...int) *engine.Tensor { return alloc(t, d, dt, s...) }
	x, w := f(engine.F32, 3, 8), f(engine.F32, 8)
	cases := []struct {
		name string
		err  error
		op   string
	}{
		{"w width", d.RMSNorm(f(engine.F32, 3, 8), nil, x, f(engine.F32, 7), 1e-6), "rmsnorm"},
		{"out shape", d.RMSNorm(f(engine.F32, 8, 3), nil, x, w, 1e-6), "rmsnorm"},
		{"rstd dtype", d.RMSNorm(f(engine.F32, 3, 8), f(engine.BF16, 3), x, w, 1e-6), "rmsnorm"},
		{"rstd shape", d.RMSNorm(f(engine.F32, 3, 8), f(engine.F32, 8), x, w, 1e-6), "rmsnorm"},
		{"int x", d.RMSNorm(f(engine.F32, 3, 8), nil, f(engine.I32, 3, 8), w, 1e-6), "rmsnorm"},
		{"backward without rstd", d.RMSNormBackward(f(engine.F32, 3, 8), f(engine.F32, 8), f(engine.F32, 3, 8), x, w, nil), "rmsnorm backward"},
		{"backward dW shape", d.RMSNormBackward(f(engine.F32, 3, 8), f(engine.F32, 3), f(engine.F32, 3, 8), x, w, f(engine.F32, 3)), "rmsnorm backward"},
		{"backward dX shape", d.RMSNormBackward(f(engine.F32, 8, 3), f(engine.F32, 8), f(engine.F32, 3, 8), x, w, f(engine.F32, 3)), "rmsnorm backward"},
	}
	for _, c := range cases {
		wantArgError(t, c.name, c.err, "")
	}
}
