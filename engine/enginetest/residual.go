package enginetest

import (
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/ref"
)

func init() { register(linearResidualCases) }

// linearResidualCases check engine.LinearResidual (y = r + x W^T in one
// product where the device takes the operands, else the copy and an
// accumulating MatMul) against the reference product plus r: training
// sized rows over a rank-3 and a rank-2 x, a decode row (which a device
// may leave to the composition) and y = r (in place). r must come back
// unchanged where it is apart from y. The bound is accumTol's: the
// product's Tol(dt, K), then the add's rounding.
func linearResidualCases(o Options, dt engine.DType) []Case {
	type lr struct {
		name    string
		rows    []int // x's leading dimensions
		k, n    int
		inPlace bool
	}
	var cs []Case
	for _, s := range []lr{
		{"x [2,9,48], w [40,48]", []int{2, 9}, 48, 40, false},
		{"x [33,64], w [24,64]", []int{33}, 64, 24, false},
		{"decode x [1,72], w [40,72]", []int{1}, 72, 40, false},
		{"in place, x [6,32], w [16,32]", []int{6}, 32, 16, true},
	} {
		m := 1
		for _, r := range s.rows {
			m *= r
		}
		xs, ys := append(append([]int(nil), s.rows...), s.k), append(append([]int(nil), s.rows...), s.n)
		cs = append(cs, Case{Op: "linear residual", Name: s.name, DType: dt,
			Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
				ts := NewTensors(dev)
				defer ts.Free()
				xv, wv, rv := Normal(rng, dt, m*s.k, 1), Normal(rng, dt, s.n*s.k, 1), Normal(rng, dt, m*s.n, 4)
				x, w, r := ts.Up(dt, xv, xs...), ts.Up(dt, wv, s.n, s.k), ts.Up(dt, rv, ys...)
				y := r
				if !s.inPlace {
					y = ts.Up(dt, Normal(rng, dt, m*s.n, 1), ys...) // overwritten
				}
				if err := ts.Err(); err != nil {
					return nil, err
				}
				var c opMetrics
				c.do(engine.LinearResidual(dev, y, r, x, w))
				p := ref.MatMul(xv, wv, 1, m, s.n, s.k, false, true, false)
				want := ref.AddScaled(rv, p, 1, 1)
				c.cmp("y", y, want, accumTol(dt, Tol(dt, s.k), p, want))
				if !s.inPlace {
					c.cmp("r (unchanged)", r, rv, 0)
				}
				return c.result()
			}})
	}
	return cs
}

func init() { register(rmsnormBackwardAddCases) }

// rmsnormBackwardAddCases check engine.RMSNormBackwardAdd (dX += the
// RMSNorm input gradient in the backward's pass where the device takes the
// operands, else the backward into a scratch and AddScaled) against the
// reference gradient plus dX's prior value, dW accumulating as
// RMSNormBackward's. The widths reach every kernel shape: 16-byte rows of
// 4, 8 and 32 lanes, and the one-warp-a-row kernel over even and odd
// widths. dX aliasing dOut must be refused.
func rmsnormBackwardAddCases(o Options, dt engine.DType) []Case {
	const eps = 1e-6
	var cs []Case
	for _, shape := range [][]int{{2, 3, 4, 32}, {3, 5, 64}, {4, 256}, {5, 7, 96}, {3, 7, 33}} {
		n := shape[len(shape)-1]
		numel := engine.Shape(shape).Numel()
		rows := numel / n
		rshape := shape[:len(shape)-1]
		cs = append(cs, Case{Op: "rmsnorm backward add", Name: fmt.Sprintf("%v, dW accumulating", shape), DType: dt,
			Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
				ts := NewTensors(dev)
				defer ts.Free()
				xv, wv, gv := Normal(rng, dt, numel, 2), Normal(rng, dt, n, 1), Normal(rng, dt, numel, 1)
				dx0, dw0 := Normal(rng, dt, numel, 1), Normal(rng, dt, n, 1)
				x, w, g := ts.Up(dt, xv, shape...), ts.Up(dt, wv, n), ts.Up(dt, gv, shape...)
				out, rstd, tmp := ts.New(dt, shape...), ts.New(engine.F32, rshape...), ts.New(dt, shape...)
				dx, dw := ts.Up(dt, dx0, shape...), ts.Up(dt, dw0, n)
				if err := ts.Err(); err != nil {
					return nil, err
				}
				var c opMetrics
				c.do(dev.RMSNorm(out, rstd, x, w, eps))
				var ae *engine.ArgError
				if err := engine.RMSNormBackwardAdd(dev, g, dw, g, x, w, rstd, tmp); !errors.As(err, &ae) {
					return nil, fmt.Errorf("dX aliasing dOut: got %v, want an argument error", err)
				}
				c.do(engine.RMSNormBackwardAdd(dev, dx, dw, g, x, w, rstd, tmp))
				wdx, wdw := ref.RMSNormBackward(gv, xv, wv, rows, n, eps)
				want := ref.AddScaled(dx0, wdx, 1, 1)
				c.cmp("dX", dx, want, accumTol(dt, Tol(dt, n), wdx, want))
				c.cmp("dW", dw, ref.AddScaled(wdw, dw0, 1, 1), Tol(dt, rows))
				return c.result()
			}})
	}
	return cs
}
