package enginetest

import (
	"fmt"
	"math/rand/v2"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/ref"
)

func init() { register(linearMultiCases) }

// linearMultiCases check engine.LinearMulti (one launch where the device
// has the kernel, else a product per weight) against a product per weight
// of the reference: decode-sized rows against three or four weights of
// different widths.
func linearMultiCases(o Options, dt engine.DType) []Case {
	type lm struct {
		m, k int
		ns   []int
	}
	var cs []Case
	for _, s := range []lm{{1, 72, []int{40, 24, 24}}, {3, 264, []int{16, 8, 8, 16}}, {8, 32, []int{9, 33}}} {
		cs = append(cs, Case{Op: "linear multi", Name: fmt.Sprintf("x %dx%d, weights %v", s.m, s.k, s.ns), DType: dt,
			Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
				ts := NewTensors(dev)
				defer ts.Free()
				xv := Normal(rng, dt, s.m*s.k, 1)
				x := ts.Up(dt, xv, s.m, s.k)
				var outs, ws []*engine.Tensor
				var wvs [][]float64
				for _, n := range s.ns {
					wv := Normal(rng, dt, n*s.k, 1)
					wvs = append(wvs, wv)
					ws = append(ws, ts.Up(dt, wv, n, s.k))
					outs = append(outs, ts.Up(dt, Normal(rng, dt, s.m*n, 1), s.m, n))
				}
				if err := ts.Err(); err != nil {
					return nil, err
				}
				var c opMetrics
				c.do(engine.LinearMulti(dev, outs, ws, x))
				for i, n := range s.ns {
					c.cmp(fmt.Sprintf("out %d", i), outs[i], ref.MatMul(xv, wvs[i], 1, s.m, n, s.k, false, true, false), Tol(dt, s.k))
				}
				return c.result()
			}})
	}
	return cs
}

func init() { register(linearSwiGLUCases) }

// linearSwiGLUCases check engine.LinearSwiGLU against the reference's
// products and SwiGLU in float64 (the fused form rounds only act; the
// bound allows the unfused one's rounded products too).
func linearSwiGLUCases(o Options, dt engine.DType) []Case {
	var cs []Case
	for _, s := range []struct{ m, k, n int }{{1, 264, 40}, {4, 32, 24}, {9, 16, 8}} {
		cs = append(cs, Case{Op: "linear swiglu", Name: fmt.Sprintf("x %dx%d, weights %dx%d", s.m, s.k, s.n, s.k), DType: dt,
			Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
				ts := NewTensors(dev)
				defer ts.Free()
				xv, gv, uv := Normal(rng, dt, s.m*s.k, 1), Normal(rng, dt, s.n*s.k, 0.3), Normal(rng, dt, s.n*s.k, 0.3)
				x, wg, wu := ts.Up(dt, xv, s.m, s.k), ts.Up(dt, gv, s.n, s.k), ts.Up(dt, uv, s.n, s.k)
				act, gate, up := ts.Up(dt, make([]float64, s.m*s.n), s.m, s.n), ts.Up(dt, make([]float64, s.m*s.n), s.m, s.n), ts.Up(dt, make([]float64, s.m*s.n), s.m, s.n)
				if err := ts.Err(); err != nil {
					return nil, err
				}
				var c opMetrics
				c.do(engine.LinearSwiGLU(dev, act, gate, up, x, wg, wu))
				g := ref.MatMul(xv, gv, 1, s.m, s.n, s.k, false, true, false)
				u := ref.MatMul(xv, uv, 1, s.m, s.n, s.k, false, true, false)
				c.cmp("act", act, ref.SwiGLU(g, u), 2*Tol(dt, s.k))
				return c.result()
			}})
	}
	return cs
}
