package enginetest

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/ref"
)

func init() { register(int8Cases) }

// The weight-only int8 ops (engine/quant.go) against the float64
// dequantize-then-multiply reference, on weights quantized on the host by
// engine.QuantizeInt8 (so the reference sees exactly the values the device
// holds).
//
// Their bound (docs/ENGINE.md, "Weight-only int8"): the int8 values and
// scales are exact, x arrives rounded, and what a kernel may round is the
// dequantized weight q s (to x's dtype, where a tensor-core product runs
// over a dequantized copy; to f32 otherwise) and the output. So the error
// of y = x W^T (+ c) is at most u E with
//
//	E_mn = |y_mn| + sum_k |x_mk| |W_nk|
//
// (u the unit roundoff of x's dtype), with the fixed tolerance of a MatMul
// of the same depth as the floor.
func int8Cases(o Options, dt engine.DType) []Case {
	var cs []Case
	cs = append(cs, linearInt8Cases(o, dt)...)
	cs = append(cs, embeddingInt8Cases(dt)...)
	cs = append(cs, linearMultiInt8Cases(o, dt)...)
	cs = append(cs, linearSwiGLUInt8Cases(o, dt)...)
	return cs
}

// quantized draws a normal [n, k] weight (std scale), quantizes it with
// group size g on the host and uploads it: it returns the device weight
// and the int8 values and scales as float64 for the reference.
func quantized(dev engine.Device, rng *rand.Rand, n, k, g int, scale float64) (engine.Int8Weight, []float64, []float64, error) {
	w := make([]float32, n*k)
	for i := range w {
		w[i] = float32(rng.NormFloat64() * scale)
	}
	q, s, err := engine.QuantizeInt8(w, n, k, g)
	if err != nil {
		return engine.Int8Weight{}, nil, nil, err
	}
	qw, err := engine.NewInt8Weight(dev, q, s, n, k, g)
	if err != nil {
		return engine.Int8Weight{}, nil, nil, err
	}
	qf, sf := make([]float64, len(q)), make([]float64, len(s))
	for i, v := range q {
		qf[i] = float64(v)
	}
	for i, v := range s {
		sf[i] = float64(v)
	}
	return qw, qf, sf, nil
}

// int8LinearErr returns E_mn = |y_mn| + sum_k |x_mk| |W_nk| (see above)
// for y [m, n], x [m, k] and the dequantized W [n, k].
func int8LinearErr(y, x, w []float64, m, n, k int) []float64 {
	e := absAll(y)
	for i := range m {
		for j := range n {
			var s float64
			for p := range k {
				s += math.Abs(x[i*k+p]) * math.Abs(w[j*k+p])
			}
			e[i*n+j] += s
		}
	}
	return e
}

// linearInt8Cases: decode-sized rows (the matrix-vector kernels: K and G
// multiples of 16) and shapes they do not take (odd K, odd G, a partial
// last group, many rows: the dequantize-and-multiply path), with and
// without accumulation, f32 outputs and a rank-3 x; then decode batches
// of 9 to 64 rows (CUDA's tensor-core kernel: K a multiple of 16, G a
// multiple of 64 or >= K) at the projections' shapes of a small model,
// with K split over blocks or not, a partial last stage (K % 128 != 0),
// N off the 64-row tiles and per-channel scales, and 3 and 5 rows, which
// PARALLAX_CUDA_QGEMM_MIN_ROWS moves to that kernel.
func linearInt8Cases(o Options, dt engine.DType) []Case {
	type lc struct {
		lead       []int // x's leading dimensions (M = their product)
		n, k, g    int
		acc, out32 bool
	}
	shapes := []lc{
		{[]int{1}, 72, 256, 128, false, false},
		{[]int{1}, 40, 264, 128, true, false}, // partial last group, K % 16 = 8
		{[]int{4}, 33, 512, 64, true, false},
		{[]int{8}, 24, 128, 128, false, true}, // per-channel (G = K)
		{[]int{3}, 17, 96, 512, false, false}, // G > K: per-channel
		{[]int{2}, 9, 45, 16, false, false},   // odd K
		{[]int{5}, 16, 64, 7, true, false},    // odd G
		{[]int{2, 3}, 20, 64, 32, false, true},
		{[]int{37}, 29, 160, 32, true, false}, // many rows
		// One row with K >= 1024 and few columns: K split over two warps
		// a column on CUDA (qgemv_k2_m1), K % 512 != 0 in the second.
		{[]int{1}, 40, 1024, 128, true, false},
		{[]int{1}, 13, 2064, 48, false, true},
	}
	if !o.Short {
		shapes = append(shapes, lc{[]int{130}, 67, 300, 128, false, false}, lc{[]int{16}, 48, 1024, 128, true, true})
	}
	shapes = append(shapes,
		lc{[]int{9}, 100, 80, 128, false, false}, // G > K: per-channel; one stage
		lc{[]int{13}, 37, 1088, 64, true, false}, // a partial last stage
		lc{[]int{5}, 72, 512, 128, false, false},
		lc{[]int{3, 7}, 40, 256, 256, true, true}, // 21 rows, G = K
	)
	if !o.Short {
		shapes = append(shapes,
			lc{[]int{9}, 2048, 1024, 128, false, false},
			lc{[]int{16}, 1024, 3072, 128, true, false},
			lc{[]int{32}, 2048, 1024, 1024, true, false},
			lc{[]int{32}, 1024, 3072, 128, false, true},
			lc{[]int{64}, 2048, 1024, 128, true, false},
			lc{[]int{64}, 1024, 3072, 4096, false, false},
			lc{[]int{3}, 2048, 1024, 128, true, false},
		)
	}
	var cs []Case
	for _, s := range shapes {
		m := 1
		for _, d := range s.lead {
			m *= d
		}
		name := fmt.Sprintf("x %v x %d, W %dx%d, group %d", s.lead, s.k, s.n, s.k, s.g)
		if s.acc {
			name += " accumulate"
		}
		if s.out32 {
			name += " f32 out"
		}
		cs = append(cs, Case{Op: "linear int8", Name: name, DType: dt, Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
			ts := NewTensors(dev)
			defer ts.Free()
			w, qv, sv, err := quantized(dev, rng, s.n, s.k, s.g, 0.5)
			if err != nil {
				return nil, err
			}
			defer w.Free(dev)
			odt := dt
			if s.out32 {
				odt = engine.F32
			}
			xv, cv := Normal(rng, dt, m*s.k, 1), Normal(rng, odt, m*s.n, 1)
			x := ts.Up(dt, xv, append(append([]int(nil), s.lead...), s.k)...)
			out := ts.Up(odt, cv, append(append([]int(nil), s.lead...), s.n)...)
			if err := ts.Err(); err != nil {
				return nil, err
			}
			var c opMetrics
			c.do(dev.LinearInt8(out, x, w, s.acc))
			wd := ref.DequantInt8(qv, sv, s.n, s.k, s.g)
			want := ref.MatMul(xv, wd, 1, m, s.n, s.k, false, true, false)
			if s.acc {
				want = ref.AddScaled(want, cv, 1, 1)
			}
			c.cmp("out", out, want, errBoundTol(dt, Tol(dt, s.k), int8LinearErr(want, xv, wd, m, s.n, s.k), want))
			return c.result()
		}})
	}
	return cs
}

// embeddingInt8Cases: rows gathered by id (the tied embedding's lookup)
// and the whole matrix (ids nil: the dequantization the large-M product
// runs on), each element rounded once to the output's dtype.
func embeddingInt8Cases(dt engine.DType) []Case {
	var cs []Case
	for _, s := range []struct {
		v, k, g int
		ids     []int // nil: every row
	}{
		{50, 64, 32, []int{3, 0, 49, 3, 17}},
		{12, 40, 16, []int{11, 2}}, // a partial last group
		{9, 24, 128, nil},
	} {
		name := fmt.Sprintf("W %dx%d group %d, %d ids", s.v, s.k, s.g, len(s.ids))
		if s.ids == nil {
			name = fmt.Sprintf("W %dx%d group %d, every row", s.v, s.k, s.g)
		}
		cs = append(cs, Case{Op: "embedding int8", Name: name, DType: dt, Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
			ts := NewTensors(dev)
			defer ts.Free()
			w, qv, sv, err := quantized(dev, rng, s.v, s.k, s.g, 1)
			if err != nil {
				return nil, err
			}
			defer w.Free(dev)
			wd := ref.DequantInt8(qv, sv, s.v, s.k, s.g)
			var ids, out *engine.Tensor
			want := wd
			if s.ids != nil {
				iv := make([]float64, len(s.ids))
				for i, id := range s.ids {
					iv[i] = float64(id)
				}
				ids = ts.Up(engine.I32, iv, len(s.ids))
				out = ts.New(dt, len(s.ids), s.k)
				want = ref.Embedding(wd, s.ids, s.k)
			} else {
				out = ts.New(dt, s.v, s.k)
			}
			if err := ts.Err(); err != nil {
				return nil, err
			}
			var c opMetrics
			c.do(dev.EmbeddingInt8(out, w, ids))
			c.cmp("out", out, want, Tol(dt, 1))
			return c.result()
		}})
	}
	return cs
}

// linearMultiInt8Cases check engine.LinearMultiInt8 (one launch where the
// device has the kernel, else a LinearInt8 each) against the reference:
// decode rows, then batches of 9 to 64 (q, k, v at a small model's shapes
// beside small weights off the 64-row tiles).
func linearMultiInt8Cases(o Options, dt engine.DType) []Case {
	type mc struct {
		m, k, g int
		ns      []int
	}
	shapes := []mc{{1, 128, 64, []int{40, 24, 24}}, {3, 256, 128, []int{16, 8, 8, 16}}, {8, 64, 64, []int{9, 33}}, {2, 40, 16, []int{5, 7}},
		{12, 256, 128, []int{40, 24, 24}}, {33, 192, 64, []int{9, 70, 16, 5}}}
	if !o.Short {
		shapes = append(shapes, mc{16, 1024, 128, []int{2048, 1024, 1024}}, mc{64, 1024, 1024, []int{2048, 1024, 1024}})
	}
	var cs []Case
	for _, s := range shapes {
		cs = append(cs, Case{Op: "linear multi int8", Name: fmt.Sprintf("x %dx%d, weights %v, group %d", s.m, s.k, s.ns, s.g), DType: dt,
			Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
				ts := NewTensors(dev)
				defer ts.Free()
				xv := Normal(rng, dt, s.m*s.k, 1)
				x := ts.Up(dt, xv, s.m, s.k)
				var outs []*engine.Tensor
				var ws []engine.Int8Weight
				var wds [][]float64
				defer func() {
					for _, w := range ws {
						w.Free(dev)
					}
				}()
				for _, n := range s.ns {
					w, qv, sv, err := quantized(dev, rng, n, s.k, s.g, 0.5)
					if err != nil {
						return nil, err
					}
					ws, wds = append(ws, w), append(wds, ref.DequantInt8(qv, sv, n, s.k, s.g))
					outs = append(outs, ts.Up(dt, Normal(rng, dt, s.m*n, 1), s.m, n))
				}
				if err := ts.Err(); err != nil {
					return nil, err
				}
				var c opMetrics
				c.do(engine.LinearMultiInt8(dev, outs, ws, x))
				for i, n := range s.ns {
					want := ref.MatMul(xv, wds[i], 1, s.m, n, s.k, false, true, false)
					c.cmp(fmt.Sprintf("out %d", i), outs[i], want, errBoundTol(dt, Tol(dt, s.k), int8LinearErr(want, xv, wds[i], s.m, n, s.k), want))
				}
				return c.result()
			}})
	}
	return cs
}

// linearSwiGLUInt8Cases check engine.LinearSwiGLUInt8. The fused form
// rounds only act; the composition also rounds the gate and up products
// (and the weights, like LinearInt8), so with g, v the products, their
// bounds E_g, E_v (int8LinearErr) and act = silu(g) v:
//
//	E_act = |act| + |silu'(g) v| E_g + |silu(g)| E_v + |silu(g) v|
//
// (the last term: SwiGLU rounding its own output after the products'.)
// Decode rows, then batches of 9 to 64 (a small model's MLP beside small
// shapes off the 32-column tiles of CUDA's tensor-core kernel).
func linearSwiGLUInt8Cases(o Options, dt engine.DType) []Case {
	type sc struct{ m, k, n, g int }
	shapes := []sc{{1, 256, 40, 128}, {4, 64, 24, 32}, {9, 32, 8, 32}, {2, 40, 12, 8}, {12, 256, 40, 128}, {21, 1088, 70, 64}}
	if !o.Short {
		shapes = append(shapes, sc{9, 1024, 3072, 128}, sc{32, 1024, 3072, 128}, sc{64, 1024, 3072, 1024})
	}
	var cs []Case
	for _, s := range shapes {
		cs = append(cs, Case{Op: "linear swiglu int8", Name: fmt.Sprintf("x %dx%d, weights %dx%d, group %d", s.m, s.k, s.n, s.k, s.g), DType: dt,
			Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
				ts := NewTensors(dev)
				defer ts.Free()
				wg, gq, gs, err := quantized(dev, rng, s.n, s.k, s.g, 0.3)
				if err != nil {
					return nil, err
				}
				defer wg.Free(dev)
				wu, uq, us, err := quantized(dev, rng, s.n, s.k, s.g, 0.3)
				if err != nil {
					return nil, err
				}
				defer wu.Free(dev)
				xv := Normal(rng, dt, s.m*s.k, 1)
				x := ts.Up(dt, xv, s.m, s.k)
				act, gate, up := ts.New(dt, s.m, s.n), ts.New(dt, s.m, s.n), ts.New(dt, s.m, s.n)
				if err := ts.Err(); err != nil {
					return nil, err
				}
				var c opMetrics
				c.do(engine.LinearSwiGLUInt8(dev, act, gate, up, x, wg, wu))
				gd, ud := ref.DequantInt8(gq, gs, s.n, s.k, s.g), ref.DequantInt8(uq, us, s.n, s.k, s.g)
				g := ref.MatMul(xv, gd, 1, s.m, s.n, s.k, false, true, false)
				u := ref.MatMul(xv, ud, 1, s.m, s.n, s.k, false, true, false)
				want := ref.SwiGLU(g, u)
				eg, eu := int8LinearErr(g, xv, gd, s.m, s.n, s.k), int8LinearErr(u, xv, ud, s.m, s.n, s.k)
				e := make([]float64, len(want))
				for i := range e {
					sg := 1 / (1 + math.Exp(-g[i]))
					silu, dsilu := g[i]*sg, sg*(1+g[i]*(1-sg))
					e[i] = 2*math.Abs(want[i]) + math.Abs(dsilu*u[i])*eg[i] + math.Abs(silu)*eu[i]
				}
				c.cmp("act", act, want, errBoundTol(dt, 2*Tol(dt, s.k), e, want))
				return c.result()
			}})
	}
	return cs
}
