package enginetest

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/ref"
)

// Conformance cases of the non-attention ops. Inputs are drawn at the case's
// dtype, so the float64 reference sees exactly what the device sees;
// floating outputs are stored at that dtype too, except where the op fixes
// F32 (rstd, loss, sum of squares, optimizer moments).
//
// Tolerances (relative max-norm, see Tol): products and reductions use
// Tol(dt, terms accumulated); elementwise formulas Tol(dt, a few); copies,
// casts and fills are exact (0). Every backward op is also compared with
// float64 central finite differences of the reference forward at a few
// random coordinates (step 1e-3 on O(1) inputs; the truncation error,
// ~1e-7 relative, is far below every tolerance).

func init() { register(opsCases) }

func opsCases(o Options, dt engine.DType) []Case {
	var cs []Case
	for _, gen := range []func(Options, engine.DType) []Case{
		matmulCases, embeddingCases, rmsnormCases, ropeCases, swigluCases,
		elementwiseCases, copyCases, crossEntropyCases, optimizerCases, newtonSchulzCases,
	} {
		cs = append(cs, gen(o, dt)...)
	}
	return cs
}

// opFDStep is the finite-difference step for O(1) inputs.
const opFDStep = 1e-3

// opFDPoints is how many coordinates each finite-difference check samples.
const opFDPoints = 6

// opMetrics gathers a case's metrics and its first error.
type opMetrics struct {
	list []Metric
	err  error
}

// cmp compares tensor t with want.
func (c *opMetrics) cmp(name string, t *engine.Tensor, want []float64, tol float64) {
	if c.err != nil {
		return
	}
	m, err := Compare(name, t, want, tol)
	if err != nil {
		c.err = err
		return
	}
	c.list = append(c.list, m)
}

// get downloads t (nil after an error).
func (c *opMetrics) get(t *engine.Tensor) []float64 {
	if c.err != nil {
		return nil
	}
	v, err := Download(t)
	if err != nil {
		c.err = err
	}
	return v
}

// fd adds a finite-difference metric: got (a downloaded gradient) at
// random coordinates of x against the central differences of f.
func (c *opMetrics) fd(rng *rand.Rand, name string, got, refGrad []float64, f func([]float64) float64, x []float64, tol float64) {
	if c.err != nil {
		return
	}
	idx := Pick(rng, len(x), opFDPoints)
	xc := append([]float64(nil), x...)
	c.list = append(c.list, GradMetric(name+" fd", got, refGrad, idx, Grad(f, xc, idx, opFDStep), tol))
}

// do records an op's error.
func (c *opMetrics) do(err error) bool {
	if c.err == nil && err != nil {
		c.err = err
	}
	return c.err == nil
}

func (c *opMetrics) result() ([]Metric, error) { return c.list, c.err }

// opDot returns sum(a * b).
func opDot(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

func opSub(a, b []float64) []float64 { return ref.AddScaled(a, b, 1, -1) }

// ---- matmul ----

func matmulCases(o Options, dt engine.DType) []Case {
	type mc struct {
		batch, m, n, k int
		ta, tb, shared bool
		acc            bool
	}
	shapes := []mc{
		{1, 37, 29, 45, false, false, false, false},
		{1, 37, 29, 45, true, false, false, false},
		{1, 37, 29, 45, false, true, false, false},
		{1, 37, 29, 45, true, true, false, true},
		{3, 19, 24, 16, false, true, true, false},
		{2, 1, 70, 33, false, true, false, true},
		{2, 2, 40, 20, true, false, true, false},
		// Decode-sized products (a few rows against a weight, K a multiple
		// of 8): the matrix-vector kernels where a backend has them.
		{1, 1, 72, 264, false, true, false, false},
		{1, 5, 40, 24, false, true, false, true},
		{2, 4, 33, 16, false, true, true, true},
	}
	if !o.Short {
		shapes = append(shapes, mc{1, 130, 67, 300, false, false, false, false}, mc{2, 65, 96, 257, true, true, false, true})
	}
	var cs []Case
	for _, s := range shapes {
		name := fmt.Sprintf("batch %d %dx%dx%d transA=%v transB=%v", s.batch, s.m, s.k, s.n, s.ta, s.tb)
		if s.shared {
			name += " shared b"
		}
		if s.acc {
			name += " accumulate"
		}
		cs = append(cs, Case{Op: "matmul", Name: name, DType: dt, Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
			ts := NewTensors(dev)
			defer ts.Free()
			aShape, bShape := []int{s.batch, s.m, s.k}, []int{s.batch, s.k, s.n}
			if s.ta {
				aShape = []int{s.batch, s.k, s.m}
			}
			if s.tb {
				bShape = []int{s.batch, s.n, s.k}
			}
			nb := s.batch
			if s.shared {
				bShape, nb = bShape[1:], 1
			}
			av, bv := Normal(rng, dt, s.batch*s.m*s.k, 1), Normal(rng, dt, nb*s.k*s.n, 1)
			cv := Normal(rng, dt, s.batch*s.m*s.n, 1)
			a, b, out := ts.Up(dt, av, aShape...), ts.Up(dt, bv, bShape...), ts.Up(dt, cv, s.batch, s.m, s.n)
			if err := ts.Err(); err != nil {
				return nil, err
			}
			var c opMetrics
			c.do(dev.MatMul(out, a, b, engine.MatMulOpts{TransA: s.ta, TransB: s.tb, Accumulate: s.acc}))
			want := ref.MatMul(av, bv, s.batch, s.m, s.n, s.k, s.ta, s.tb, s.shared)
			if s.acc {
				want = ref.AddScaled(want, cv, 1, 1)
			}
			c.cmp("out", out, want, Tol(dt, s.k))
			return c.result()
		}})
	}
	// The backward of a linear layer y = x W^T: dX = dY W, dW += dY^T X.
	const rows, in, outW = 23, 31, 17
	cs = append(cs, Case{Op: "matmul", Name: fmt.Sprintf("linear backward x %dx%d, W %dx%d", rows, in, outW, in), DType: dt,
		Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
			ts := NewTensors(dev)
			defer ts.Free()
			xv, wv, gv := Normal(rng, dt, rows*in, 1), Normal(rng, dt, outW*in, 1), Normal(rng, dt, rows*outW, 1)
			dw0 := Normal(rng, dt, outW*in, 1)
			x, w, g := ts.Up(dt, xv, rows, in), ts.Up(dt, wv, outW, in), ts.Up(dt, gv, rows, outW)
			dx, dw := ts.New(dt, rows, in), ts.Up(dt, dw0, outW, in)
			if err := ts.Err(); err != nil {
				return nil, err
			}
			var c opMetrics
			c.do(dev.MatMul(dx, g, w, engine.MatMulOpts{}))
			c.do(dev.MatMul(dw, g, x, engine.MatMulOpts{TransA: true, Accumulate: true}))
			loss := func(x, w []float64) float64 {
				return opDot(ref.MatMul(x, w, 1, rows, outW, in, false, true, false), gv)
			}
			wdx := ref.MatMul(gv, wv, 1, rows, in, outW, false, false, false)
			wdw := ref.MatMul(gv, xv, 1, outW, in, rows, true, false, false)
			c.cmp("dX", dx, wdx, Tol(dt, outW))
			c.cmp("dW", dw, ref.AddScaled(wdw, dw0, 1, 1), Tol(dt, rows))
			gdx, gdw := c.get(dx), c.get(dw)
			c.fd(rng, "dX", gdx, wdx, func(z []float64) float64 { return loss(z, wv) }, xv, Tol(dt, outW))
			if gdw != nil {
				c.fd(rng, "dW", opSub(gdw, dw0), wdw, func(z []float64) float64 { return loss(xv, z) }, wv, Tol(dt, rows))
			}
			return c.result()
		}})
	return cs
}

// ---- embedding ----

func embeddingCases(o Options, dt engine.DType) []Case {
	const v, d, b, l = 40, 24, 3, 20
	ids := func(rng *rand.Rand) []float64 {
		x := make([]float64, b*l)
		for i := range x {
			x[i] = float64(rng.IntN(v / 4)) // frequent repeats
		}
		x[0] = v - 1
		return x
	}
	toInts := func(x []float64) []int {
		out := make([]int, len(x))
		for i, f := range x {
			out[i] = int(f)
		}
		return out
	}
	name := fmt.Sprintf("table %dx%d, ids %dx%d with repeats", v, d, b, l)
	return []Case{
		{Op: "embedding", Name: name, DType: dt, Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
			ts := NewTensors(dev)
			defer ts.Free()
			tv, iv := Normal(rng, dt, v*d, 1), ids(rng)
			table, idt, out := ts.Up(dt, tv, v, d), ts.Up(engine.I32, iv, b, l), ts.New(dt, b, l, d)
			if err := ts.Err(); err != nil {
				return nil, err
			}
			var c opMetrics
			c.do(dev.Embedding(out, table, idt))
			c.cmp("out", out, ref.Embedding(tv, toInts(iv), d), 0)
			return c.result()
		}},
		{Op: "embedding backward", Name: name + ", accumulating", DType: dt, Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
			ts := NewTensors(dev)
			defer ts.Free()
			tv, iv, gv := Normal(rng, dt, v*d, 1), ids(rng), Normal(rng, dt, b*l*d, 1)
			dTable, idt, g := ts.Up(dt, tv, v, d), ts.Up(engine.I32, iv, b, l), ts.Up(dt, gv, b, l, d)
			if err := ts.Err(); err != nil {
				return nil, err
			}
			var c opMetrics
			c.do(dev.EmbeddingBackward(dTable, idt, g))
			ii := toInts(iv)
			grad := ref.EmbeddingBackward(gv, ii, v, d)
			c.cmp("dTable", dTable, ref.AddScaled(grad, tv, 1, 1), Tol(dt, b*l))
			if got := c.get(dTable); got != nil {
				f := func(z []float64) float64 { return opDot(ref.Embedding(z, ii, d), gv) }
				c.fd(rng, "dTable", opSub(got, tv), grad, f, Normal(rng, engine.F32, v*d, 1), Tol(dt, b*l))
			}
			return c.result()
		}},
	}
}

// ---- rmsnorm ----

func rmsnormCases(o Options, dt engine.DType) []Case {
	const eps = 1e-6
	shapes := []struct {
		name  string
		shape []int
	}{
		{"full width [5,7,96]", []int{5, 7, 96}},
		{"per head [2,3,4,32]", []int{2, 3, 4, 32}},
	}
	var cs []Case
	for _, s := range shapes {
		n := s.shape[len(s.shape)-1]
		numel := engine.Shape(s.shape).Numel()
		rows := numel / n
		rshape := s.shape[:len(s.shape)-1]
		cs = append(cs, Case{Op: "rmsnorm", Name: s.name, DType: dt, Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
			ts := NewTensors(dev)
			defer ts.Free()
			xv, wv := Normal(rng, dt, numel, 2), Normal(rng, dt, n, 1)
			x, w, out, rstd := ts.Up(dt, xv, s.shape...), ts.Up(dt, wv, n), ts.New(dt, s.shape...), ts.New(engine.F32, rshape...)
			if err := ts.Err(); err != nil {
				return nil, err
			}
			var c opMetrics
			c.do(dev.RMSNorm(out, rstd, x, w, eps))
			wo, wr := ref.RMSNorm(xv, wv, rows, n, eps)
			c.cmp("out", out, wo, Tol(dt, n))
			c.cmp("rstd", rstd, wr, Tol(engine.F32, n))
			return c.result()
		}})
		cs = append(cs, Case{Op: "rmsnorm backward", Name: s.name + ", dW accumulating", DType: dt, Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
			ts := NewTensors(dev)
			defer ts.Free()
			xv, wv, gv, dw0 := Normal(rng, dt, numel, 2), Normal(rng, dt, n, 1), Normal(rng, dt, numel, 1), Normal(rng, dt, n, 1)
			x, w, g := ts.Up(dt, xv, s.shape...), ts.Up(dt, wv, n), ts.Up(dt, gv, s.shape...)
			out, rstd, dx, dw := ts.New(dt, s.shape...), ts.New(engine.F32, rshape...), ts.New(dt, s.shape...), ts.Up(dt, dw0, n)
			if err := ts.Err(); err != nil {
				return nil, err
			}
			var c opMetrics
			c.do(dev.RMSNorm(out, rstd, x, w, eps))
			c.do(dev.RMSNormBackward(dx, dw, g, x, w, rstd))
			wdx, wdw := ref.RMSNormBackward(gv, xv, wv, rows, n, eps)
			c.cmp("dX", dx, wdx, Tol(dt, n))
			c.cmp("dW", dw, ref.AddScaled(wdw, dw0, 1, 1), Tol(dt, rows))
			loss := func(x, w []float64) float64 { o, _ := ref.RMSNorm(x, w, rows, n, eps); return opDot(o, gv) }
			c.fd(rng, "dX", c.get(dx), wdx, func(z []float64) float64 { return loss(z, wv) }, xv, Tol(dt, n))
			if got := c.get(dw); got != nil {
				c.fd(rng, "dW", opSub(got, dw0), wdw, func(z []float64) float64 { return loss(xv, z) }, wv, Tol(dt, rows))
			}
			return c.result()
		}})
	}
	return cs
}

// ---- rope ----

func ropeCases(o Options, dt engine.DType) []Case {
	const maxPos = 1024
	// An f32 backend may form the angle pos*freq in f32: allow its rounding,
	// a few ulp of the largest angle.
	tol := max(Tol(dt, 2), 4*maxPos*0x1p-24)
	type rc struct {
		b, h, l, d int
		theta      float32
		inPlace    bool
	}
	var cs []Case
	for _, s := range []rc{{2, 3, 5, 16, 1e4, false}, {1, 2, 9, 64, 1e6, true}} {
		n := s.b * s.h * s.l * s.d
		name := fmt.Sprintf("[%d,%d,%d,%d] theta %g", s.b, s.h, s.l, s.d, s.theta)
		if s.inPlace {
			name += " in place"
		}
		positions := func(rng *rand.Rand) ([]float64, []int) {
			pf, pi := make([]float64, s.l), make([]int, s.l)
			for i := range pi {
				pi[i] = rng.IntN(maxPos)
				pf[i] = float64(pi[i])
			}
			return pf, pi
		}
		for _, backward := range []bool{false, true} {
			op := "rope"
			if backward {
				op = "rope backward"
			}
			cs = append(cs, Case{Op: op, Name: name, DType: dt, Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
				ts := NewTensors(dev)
				defer ts.Free()
				xv := Normal(rng, dt, n, 1)
				pf, pi := positions(rng)
				x, pos := ts.Up(dt, xv, s.b, s.h, s.l, s.d), ts.Up(engine.I32, pf, s.l)
				out := x
				if !s.inPlace {
					out = ts.New(dt, s.b, s.h, s.l, s.d)
				}
				if err := ts.Err(); err != nil {
					return nil, err
				}
				var c opMetrics
				want := ref.RoPE(xv, s.b, s.h, s.l, s.d, pi, float64(s.theta), backward)
				if !backward {
					c.do(dev.RoPE(out, x, pos, s.theta))
					c.cmp("out", out, want, tol)
					return c.result()
				}
				// x plays dOut: dX = R(-angle) dOut.
				c.do(dev.RoPEBackward(out, x, pos, s.theta))
				c.cmp("dX", out, want, tol)
				f := func(z []float64) float64 {
					return opDot(ref.RoPE(z, s.b, s.h, s.l, s.d, pi, float64(s.theta), false), xv)
				}
				c.fd(rng, "dX", c.get(out), want, f, Normal(rng, engine.F32, n, 1), tol)
				return c.result()
			}})
		}
	}
	return cs
}

// ---- swiglu ----

func swigluCases(o Options, dt engine.DType) []Case {
	const n = 1500
	return []Case{
		{Op: "swiglu", Name: fmt.Sprintf("n %d, gate scale 3", n), DType: dt, Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
			ts := NewTensors(dev)
			defer ts.Free()
			gv, uv := Normal(rng, dt, n, 3), Normal(rng, dt, n, 1)
			g, u, out := ts.Up(dt, gv, 3, n/3), ts.Up(dt, uv, 3, n/3), ts.New(dt, 3, n/3)
			if err := ts.Err(); err != nil {
				return nil, err
			}
			var c opMetrics
			c.do(dev.SwiGLU(out, g, u))
			c.cmp("out", out, ref.SwiGLU(gv, uv), Tol(dt, 4))
			return c.result()
		}},
		{Op: "swiglu backward", Name: fmt.Sprintf("n %d, gate scale 3", n), DType: dt, Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
			ts := NewTensors(dev)
			defer ts.Free()
			gv, uv, dv := Normal(rng, dt, n, 3), Normal(rng, dt, n, 1), Normal(rng, dt, n, 1)
			g, u, dy := ts.Up(dt, gv, n), ts.Up(dt, uv, n), ts.Up(dt, dv, n)
			dg, du := ts.New(dt, n), ts.New(dt, n)
			if err := ts.Err(); err != nil {
				return nil, err
			}
			var c opMetrics
			c.do(dev.SwiGLUBackward(dg, du, dy, g, u))
			wg, wu := ref.SwiGLUBackward(dv, gv, uv)
			c.cmp("dGate", dg, wg, Tol(dt, 8))
			c.cmp("dUp", du, wu, Tol(dt, 4))
			c.fd(rng, "dGate", c.get(dg), wg, func(z []float64) float64 { return opDot(ref.SwiGLU(z, uv), dv) }, gv, Tol(dt, 8))
			c.fd(rng, "dUp", c.get(du), wu, func(z []float64) float64 { return opDot(ref.SwiGLU(gv, z), dv) }, uv, Tol(dt, 4))
			return c.result()
		}},
	}
}

// ---- add scaled, fill, sum of squares ----

func elementwiseCases(o Options, dt engine.DType) []Case {
	const n = 3000
	var cs []Case
	for _, alias := range []string{"", "a", "b"} {
		name := "n 3000, alpha 0.5, beta -1.25"
		if alias != "" {
			name += ", out aliases " + alias
		}
		cs = append(cs, Case{Op: "add scaled", Name: name, DType: dt, Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
			ts := NewTensors(dev)
			defer ts.Free()
			av, bv := Normal(rng, dt, n, 1), Normal(rng, dt, n, 1)
			a, b := ts.Up(dt, av, n), ts.Up(dt, bv, 30, n/30)
			var out *engine.Tensor
			switch alias {
			case "a":
				out = a
			case "b":
				out = b
			default:
				out = ts.New(dt, n)
			}
			if err := ts.Err(); err != nil {
				return nil, err
			}
			var c opMetrics
			c.do(dev.AddScaled(out, a, b, 0.5, -1.25))
			c.cmp("out", out, ref.AddScaled(av, bv, 0.5, -1.25), Tol(dt, 2))
			return c.result()
		}})
	}
	cs = append(cs, Case{Op: "fill", Name: "[7,300] with -1.7", DType: dt, Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
		ts := NewTensors(dev)
		defer ts.Free()
		x := ts.Up(dt, Normal(rng, dt, 2100, 1), 7, 300)
		if err := ts.Err(); err != nil {
			return nil, err
		}
		var c opMetrics
		c.do(dev.Fill(x, -1.7))
		want := make([]float64, 2100)
		for i := range want {
			want[i] = float64(dt.Round(-1.7))
		}
		c.cmp("t", x, want, 0)
		return c.result()
	}})
	for _, acc := range []bool{false, true} {
		name := "n 20000"
		if acc {
			name += ", accumulating"
		}
		cs = append(cs, Case{Op: "sum squares", Name: name, DType: dt, Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
			const m = 20000
			ts := NewTensors(dev)
			defer ts.Free()
			xv := Normal(rng, dt, m, 1)
			x, out := ts.Up(dt, xv, 20, m/20), ts.Up(engine.F32, []float64{12.5}, 1)
			if err := ts.Err(); err != nil {
				return nil, err
			}
			var c opMetrics
			c.do(dev.SumSquares(out, x, acc))
			want := ref.SumSquares(xv)
			if acc {
				want += 12.5
			}
			c.cmp("out", out, []float64{want}, Tol(engine.F32, m))
			return c.result()
		}})
	}
	return cs
}

// ---- cast, swapaxes12, kv append ----

// opInts returns n integers in [-1000, 1000] as float64.
func opInts(rng *rand.Rand, n int) []float64 {
	x := make([]float64, n)
	for i := range x {
		x[i] = float64(rng.IntN(2001) - 1000)
	}
	return x
}

func copyCases(o Options, dt engine.DType) []Case {
	var cs []Case
	const n = 1000
	castCase := func(from, to engine.DType) Case {
		return Case{Op: "cast", Name: fmt.Sprintf("%v to %v, n %d", from, to, n), DType: dt, Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
			ts := NewTensors(dev)
			defer ts.Free()
			var xv []float64
			if from == engine.I32 {
				xv = opInts(rng, n)
			} else {
				xv = Normal(rng, from, n, 100)
			}
			x, y := ts.Up(from, xv, 10, n/10), ts.New(to, n)
			if err := ts.Err(); err != nil {
				return nil, err
			}
			var c opMetrics
			c.do(dev.Cast(y, x))
			c.cmp("dst", y, ref.Cast(xv, to), 0)
			return c.result()
		}}
	}
	for _, to := range []engine.DType{engine.F32, engine.BF16, engine.F16, engine.I32} {
		cs = append(cs, castCase(dt, to))
	}
	cs = append(cs, castCase(engine.I32, dt))

	swap := func(et engine.DType) Case {
		const a, b, c, d = 2, 3, 5, 8
		return Case{Op: "swapaxes12", Name: fmt.Sprintf("[%d,%d,%d,%d] %v", a, b, c, d, et), DType: dt, Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
			ts := NewTensors(dev)
			defer ts.Free()
			var xv []float64
			if et == engine.I32 {
				xv = opInts(rng, a*b*c*d)
			} else {
				xv = Normal(rng, et, a*b*c*d, 1)
			}
			x, y := ts.Up(et, xv, a, b, c, d), ts.New(et, a, c, b, d)
			if err := ts.Err(); err != nil {
				return nil, err
			}
			var m opMetrics
			m.do(dev.SwapAxes12(y, x))
			m.cmp("dst", y, ref.SwapAxes12(xv, a, b, c, d), 0)
			return m.result()
		}}
	}
	cs = append(cs, swap(dt))
	if dt == engine.F32 {
		cs = append(cs, swap(engine.I32))
	}

	kv := func(xdt engine.DType) Case {
		const b, h, capacity, nn, d, start = 2, 3, 12, 4, 8, 5
		cdt := dt
		if xdt == engine.I32 {
			cdt = engine.I32
		}
		return Case{Op: "kv append", Name: fmt.Sprintf("%v cache [%d,%d,%d,%d], %d %v rows at %d", cdt, b, h, capacity, d, nn, xdt, start), DType: dt,
			Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
				ts := NewTensors(dev)
				defer ts.Free()
				var cv, xv []float64
				if cdt == engine.I32 {
					cv, xv = opInts(rng, b*h*capacity*d), opInts(rng, b*h*nn*d)
				} else {
					cv, xv = Normal(rng, dt, b*h*capacity*d, 1), Normal(rng, xdt, b*h*nn*d, 1)
				}
				cache, x := ts.Up(cdt, cv, b, h, capacity, d), ts.Up(xdt, xv, b, h, nn, d)
				if err := ts.Err(); err != nil {
					return nil, err
				}
				var m opMetrics
				m.do(dev.KVAppend(cache, x, start))
				m.cmp("cache", cache, ref.KVAppend(cv, ref.Cast(xv, cdt), b, h, capacity, nn, d, start), 0)
				return m.result()
			}}
	}
	cs = append(cs, kv(dt))
	if dt != engine.F32 {
		cs = append(cs, kv(engine.F32))
	} else {
		cs = append(cs, kv(engine.I32))
	}
	cs = append(cs, kvAt(dt))
	return cs
}

// kvAt is KVAppendAt with a random start per sequence (the first at 0, the
// last at the end of the cache, the others anywhere).
func kvAt(dt engine.DType) Case {
	const b, h, capacity, nn, d = 4, 2, 12, 3, 8
	return Case{Op: "kv append at", Name: fmt.Sprintf("%v cache [%d,%d,%d,%d], %d rows at per-sequence starts", dt, b, h, capacity, d, nn), DType: dt,
		Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
			ts := NewTensors(dev)
			defer ts.Free()
			starts := []int{0, capacity - nn, rng.IntN(capacity - nn + 1), rng.IntN(capacity - nn + 1)}
			sv := make([]float64, b)
			for i, s := range starts {
				sv[i] = float64(s)
			}
			cv, xv := Normal(rng, dt, b*h*capacity*d, 1), Normal(rng, dt, b*h*nn*d, 1)
			cache, x, st := ts.Up(dt, cv, b, h, capacity, d), ts.Up(dt, xv, b, h, nn, d), ts.Up(engine.I32, sv, b)
			if err := ts.Err(); err != nil {
				return nil, err
			}
			var m opMetrics
			m.do(dev.KVAppendAt(cache, x, st))
			m.cmp("cache", cache, ref.KVAppendAt(cv, xv, b, h, capacity, nn, d, starts), 0)
			return m.result()
		}}
}

// ---- cross entropy ----

// crossEntropyCases cover full rows (Classes 0, and Classes == W) and rows
// padded past the classes (Classes < W: pad columns [C, W) that must not
// count). The pad logits hold a poison (a huge finite value, NaN or +Inf)
// that would dominate the loss if read, and a separate dLogits is poisoned
// too (7 in the class columns, NaN in the pad), so that only values the op
// wrote pass: the pad of dLogits must come back exactly 0, and a NaN
// anywhere fails (RelErr and the pad check turn it into +Inf).
//
// Tolerances: the loss is stored as F32 after a sum of C exponentials,
// Tol(F32, C); dLogits is that softmax rounded to dt, Tol(dt, C); the pad
// columns are stored zeros, exact (0).
func crossEntropyCases(o Options, dt engine.DType) []Case {
	const ignore = -100
	var cs []Case
	for _, s := range []struct {
		n, w, classes int     // classes 0: every column is a class
		pad           float64 // the pad logits (never read)
		alias, noGrad bool    // dLogits aliases logits; loss only (dLogits nil)
	}{
		{12, 50, 0, 0, false, false},
		{6, 700, 0, 0, true, false},
		{7, 64, 64, 0, false, false},
		{12, 128, 50, 1000, false, false},
		{9, 300, 257, math.NaN(), false, false},
		{6, 768, 700, 1000, true, false},
		{4, 640, 130, 1000, true, false},
		{10, 256, 200, math.Inf(1), false, true},
		// Rows of the presets' vocabularies: GPT-2's padded to 50304 (the
		// pad logits never read), an odd width, Qwen3's 151936.
		{5, 50304, 50257, 1000, false, false},
		{4, 70008, 69999, math.NaN(), true, false},
		{3, 151936, 0, 0, false, false},
	} {
		c := s.classes
		if c == 0 {
			c = s.w
		}
		name := fmt.Sprintf("logits [%d,%d], every 4th row ignored", s.n, s.w)
		switch {
		case c < s.w:
			name = fmt.Sprintf("logits [%d,%d], classes %d (pad logits %g), every 4th row ignored", s.n, s.w, s.classes, s.pad)
		case s.classes != 0:
			name = fmt.Sprintf("logits [%d,%d], classes %d = W, every 4th row ignored", s.n, s.w, s.classes)
		}
		switch {
		case s.alias:
			name += ", dLogits aliases logits"
		case s.noGrad:
			name += ", loss only"
		}
		cs = append(cs, Case{Op: "cross entropy", Name: name, DType: dt, Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
			ts := NewTensors(dev)
			defer ts.Free()
			lv := Normal(rng, dt, s.n*s.w, 3)
			poison := make([]float64, s.n*s.w)
			for i := range lv {
				if i%s.w >= c {
					lv[i], poison[i] = s.pad, math.NaN()
				} else {
					poison[i] = 7
				}
			}
			tf, ti, lossPoison := make([]float64, s.n), make([]int, s.n), make([]float64, s.n)
			counted := 0
			for i := range ti {
				lossPoison[i] = 7 // ignored rows must be written 0
				ti[i] = rng.IntN(c)
				switch {
				case i%4 == 1:
					ti[i] = ignore
				case i == 0:
					ti[i] = c - 1 // the last class, next to the pad
				}
				if ti[i] != ignore {
					counted++
				}
				tf[i] = float64(ti[i])
			}
			scale := 1 / float64(counted)
			logits, targets, loss := ts.Up(dt, lv, s.n, s.w), ts.Up(engine.I32, tf, s.n), ts.Up(engine.F32, lossPoison, s.n)
			var dl *engine.Tensor
			switch {
			case s.alias:
				dl = logits
			case !s.noGrad:
				dl = ts.Up(dt, poison, s.n, s.w)
			}
			if err := ts.Err(); err != nil {
				return nil, err
			}
			var m opMetrics
			m.do(dev.CrossEntropy(loss, dl, logits, targets,
				engine.CrossEntropyOpts{IgnoreIndex: ignore, GradScale: float32(scale), Classes: s.classes}))
			wl, wd := ref.CrossEntropyPadded(lv, ti, s.n, s.w, c, ignore, scale)
			m.cmp("loss", loss, wl, Tol(engine.F32, c))
			if dl == nil {
				return m.result()
			}
			m.cmp("dLogits", dl, wd, Tol(dt, c))
			got := m.get(dl)
			if got == nil {
				return m.result()
			}
			if c < s.w {
				m.list = append(m.list, Metric{Name: "dLogits pad", Err: padErr(got, s.w, c), Tol: 0})
			}
			f := func(z []float64) float64 {
				l, _ := ref.CrossEntropyPadded(z, ti, s.n, s.w, c, ignore, scale)
				var sum float64
				for _, x := range l {
					sum += scale * x
				}
				return sum
			}
			m.fd(rng, "dLogits", got, wd, f, lv, Tol(dt, c))
			return m.result()
		}})
	}
	// A target in the pad columns is out of range, and Classes outside
	// [0, W] is an argument error.
	const n, w, classes = 4, 128, 100
	cs = append(cs, Case{Op: "cross entropy", Name: fmt.Sprintf("logits [%d,%d], classes %d, errors", n, w, classes), DType: dt,
		Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
			ts := NewTensors(dev)
			defer ts.Free()
			logits, loss, dl := ts.Up(dt, Normal(rng, dt, n*w, 1), n, w), ts.New(engine.F32, n), ts.New(dt, n, w)
			if err := ts.Err(); err != nil {
				return nil, err
			}
			var list []Metric
			for _, bad := range []int{classes, w - 1} {
				targets := ts.Up(engine.I32, []float64{0, ignore, float64(bad), classes - 1}, n)
				if err := ts.Err(); err != nil {
					return nil, err
				}
				err := dev.CrossEntropy(loss, dl, logits, targets, engine.CrossEntropyOpts{IgnoreIndex: ignore, GradScale: 1, Classes: classes})
				// The error is returned, or reported by Sync (a device-side
				// check); either way Sync must be clean afterwards.
				if serr := dev.Sync(); err == nil {
					err = serr
				}
				if err == nil {
					return nil, fmt.Errorf("target %d (in the pad columns [%d, %d)) was not reported", bad, classes, w)
				}
				if err := dev.Sync(); err != nil {
					return nil, fmt.Errorf("target %d: Sync still reports %w after the error was taken", bad, err)
				}
				list = append(list, Metric{Name: fmt.Sprintf("target %d rejected", bad), Err: 0, Tol: 0})
			}
			targets := ts.Up(engine.I32, []float64{0, 1, 2, 3}, n)
			if err := ts.Err(); err != nil {
				return nil, err
			}
			for _, bad := range []int{-1, w + 1} {
				err := dev.CrossEntropy(loss, dl, logits, targets, engine.CrossEntropyOpts{IgnoreIndex: ignore, GradScale: 1, Classes: bad})
				var ae *engine.ArgError
				if !errors.As(err, &ae) {
					return nil, fmt.Errorf("classes %d: want an argument error, got %v", bad, err)
				}
				list = append(list, Metric{Name: fmt.Sprintf("classes %d rejected", bad), Err: 0, Tol: 0})
			}
			return list, nil
		}})
	return cs
}

// padErr is the largest magnitude in the pad columns [c, w) of the rows of
// g (width w): 0 when every pad entry is exactly zero, +Inf for a NaN.
func padErr(g []float64, w, c int) float64 {
	var e float64
	for i, x := range g {
		if i%w < c {
			continue
		}
		if math.IsNaN(x) {
			return math.Inf(1)
		}
		e = max(e, math.Abs(x))
	}
	return e
}

// ---- optimizers ----

// muonMomentumOpts are the momentum settings the Muon cases run: both
// directions unscaled, and each with a clip-like gradient scale.
var muonMomentumOpts = []engine.MuonMomentumOpts{
	{Beta: 0.95, Nesterov: true},
	{Beta: 0.95, Nesterov: false},
	{Beta: 0.95, Nesterov: true, GradScale: 0.37},
	{Beta: 0.95, Nesterov: false, GradScale: 0.61},
}

// muonMomentumName names a momentum setting in a case's name.
func muonMomentumName(o engine.MuonMomentumOpts) string {
	return fmt.Sprintf("beta %g, nesterov=%v, grad scale %g", o.Beta, o.Nesterov, o.Scale())
}

// scaledGrad is the gradient AdamW and MuonMomentum use under a gradient
// scale s (AdamWOpts.Scale(), MuonMomentumOpts.Scale()): g scaled by s
// and rounded to f32, exact when s is 1.
func scaledGrad(g []float64, s float32) []float64 {
	out := make([]float64, len(g))
	for i, x := range g {
		out[i] = float64(s * float32(x))
	}
	return out
}

func optimizerCases(o Options, dt engine.DType) []Case {
	const n = 2000
	var cs []Case
	for _, gs := range []float32{0, 0.37} {
		adam := engine.AdamWOpts{LR: 1e-2, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, Step: 5, GradScale: gs}
		cs = append(cs, Case{Op: "adamw", Name: fmt.Sprintf("n %d, lr %g, betas (%g, %g), wd %g, step %d, grad scale %g", n, adam.LR, adam.Beta1, adam.Beta2, adam.WeightDecay, adam.Step, adam.Scale()), DType: dt,
			Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
				ts := NewTensors(dev)
				defer ts.Free()
				pv, gv := Normal(rng, dt, n, 1), Normal(rng, dt, n, 0.1)
				mv, vv := Normal(rng, engine.F32, n, 0.01), Rand(rng, engine.F32, n, 1e-3)
				for i := range vv {
					vv[i] = math.Abs(vv[i])
				}
				p, g, m, v := ts.Up(dt, pv, n), ts.Up(dt, gv, n), ts.Up(engine.F32, mv, n), ts.Up(engine.F32, vv, n)
				if err := ts.Err(); err != nil {
					return nil, err
				}
				var c opMetrics
				c.do(dev.AdamW(p, g, m, v, adam))
				sg := scaledGrad(gv, adam.Scale())
				wp, wm, wv := ref.AdamW(pv, sg, mv, vv, float64(adam.LR), float64(adam.Beta1), float64(adam.Beta2),
					float64(adam.Eps), float64(adam.WeightDecay), adam.Step)
				ep, em := adamwErr(pv, sg, mv, wp, wm, wv, adam)
				c.cmp("p", p, wp, errBoundTol(engine.F32, Tol(dt, 4), ep, wp))
				c.cmp("m", m, wm, errBoundTol(engine.F32, Tol(engine.F32, 4), em, wm))
				c.cmp("v", v, wv, Tol(engine.F32, 4))
				c.cmp("g (unchanged)", g, gv, 0)
				if got := c.get(p); got != nil && dt == engine.F32 {
					// The step itself, which is small next to p.
					c.list = append(c.list, Metric{Name: "p - p0", Err: RelErr(opSub(got, pv), opSub(wp, pv)), Tol: 1e-4})
				}
				return c.result()
			}})
	}
	for _, mo := range muonMomentumOpts {
		cs = append(cs, Case{Op: "muon momentum", Name: fmt.Sprintf("n %d, %s", n, muonMomentumName(mo)), DType: dt,
			Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
				ts := NewTensors(dev)
				defer ts.Free()
				mv, gv := Normal(rng, engine.F32, n, 0.1), Normal(rng, dt, n, 1)
				m, g, u := ts.Up(engine.F32, mv, n), ts.Up(dt, gv, 40, n/40), ts.New(dt, n)
				if err := ts.Err(); err != nil {
					return nil, err
				}
				var c opMetrics
				c.do(dev.MuonMomentum(u, m, g, mo))
				wu, wm := ref.MuonMomentum(mv, scaledGrad(gv, mo.Scale()), float64(mo.Beta), mo.Nesterov)
				c.cmp("u", u, wu, Tol(dt, 4))
				c.cmp("m", m, wm, Tol(engine.F32, 4))
				c.cmp("g (unchanged)", g, gv, 0)
				return c.result()
			}})
	}
	const batch, rows, cols = 3, 24, 40
	for _, inPlace := range []bool{false, true} {
		name := fmt.Sprintf("[%d,%d,%d]", batch, rows, cols)
		if inPlace {
			name += " in place"
		}
		cs = append(cs, Case{Op: "frobenius normalize", Name: name, DType: dt, Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
			ts := NewTensors(dev)
			defer ts.Free()
			xv := Normal(rng, dt, batch*rows*cols, 2)
			x := ts.Up(dt, xv, batch, rows, cols)
			out := x
			if !inPlace {
				out = ts.New(dt, batch, rows, cols)
			}
			if err := ts.Err(); err != nil {
				return nil, err
			}
			var c opMetrics
			c.do(dev.FrobeniusNormalize(out, x, 1e-7))
			c.cmp("out", out, ref.FrobeniusNormalize(xv, batch, rows*cols, 1e-7), Tol(dt, rows*cols))
			return c.result()
		}})
	}
	cs = append(cs, Case{Op: "muon apply", Name: fmt.Sprintf("n %d, lr 0.02, wd 0.1, scale 1.5", n), DType: dt, Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
		ts := NewTensors(dev)
		defer ts.Free()
		pv, ov := Normal(rng, dt, n, 1), Normal(rng, dt, n, 1)
		p, upd := ts.Up(dt, pv, n), ts.Up(dt, ov, 50, n/50)
		if err := ts.Err(); err != nil {
			return nil, err
		}
		var c opMetrics
		c.do(dev.MuonApply(p, upd, 0.02, 0.1, 1.5))
		c.cmp("p", p, ref.MuonApply(pv, ov, 0.02, 0.1, 1.5), Tol(dt, 3))
		return c.result()
	}})
	return cs
}

// ---- Newton-Schulz (the composite of engine/muon.go) ----

// nsTol is the tolerance of engine.NewtonSchulz against the float64
// reference: five steps of three chained products each, every intermediate
// stored at dt.
func nsTol(dt engine.DType) float64 {
	switch dt {
	case engine.BF16:
		return 0.1
	case engine.F16:
		return 0.015
	}
	return 3e-5
}

func newtonSchulzCases(o Options, dt engine.DType) []Case {
	var cs []Case
	for _, s := range [][3]int{{1, 32, 64}, {2, 64, 32}} {
		batch, rows, cols := s[0], s[1], s[2]
		per := rows * cols
		cs = append(cs, Case{Op: "newton-schulz", Name: fmt.Sprintf("5 steps, batch %d of %dx%d", batch, rows, cols), DType: dt,
			Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
				ts := NewTensors(dev)
				defer ts.Free()
				gv := Normal(rng, dt, batch*per, 1)
				g, out := ts.Up(dt, gv, batch, rows, cols), ts.New(dt, batch, rows, cols)
				if err := ts.Err(); err != nil {
					return nil, err
				}
				var c opMetrics
				c.do(engine.NewtonSchulz(dev, out, g, 5))
				want := make([]float64, 0, batch*per)
				for b := range batch {
					want = append(want, ref.NewtonSchulz(gv[b*per:(b+1)*per], rows, cols, 5)...)
				}
				c.cmp("out", out, want, nsTol(dt))
				return c.result()
			}})
	}
	// Muon's promise (docs/MATH.md section 10): a matrix with well-separated
	// singular values (a 2:1 Gaussian one: sigma/||G||_F >= ~0.04) comes out
	// with singular values in [0.68, 1.21]. The metric is the distance
	// outside that interval; 16-bit storage rounds every intermediate and is
	// allowed a little slack.
	slack := map[engine.DType]float64{engine.F32: 1e-6, engine.F16: 0.01, engine.BF16: 0.03}[dt]
	for _, s := range [][2]int{{48, 96}, {96, 48}} {
		rows, cols := s[0], s[1]
		cs = append(cs, Case{Op: "newton-schulz", Name: fmt.Sprintf("singular values of NS5(gaussian %dx%d) in [0.68, 1.21]", rows, cols), DType: dt,
			Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
				ts := NewTensors(dev)
				defer ts.Free()
				g, out := ts.Up(dt, Normal(rng, dt, rows*cols, 1), rows, cols), ts.New(dt, rows, cols)
				if err := ts.Err(); err != nil {
					return nil, err
				}
				var c opMetrics
				c.do(engine.NewtonSchulz(dev, out, g, 5))
				got := c.get(out)
				if got == nil {
					return c.result()
				}
				sv := ref.SingularValues(got, rows, cols)
				dist := max(0, 0.68-sv[0], sv[len(sv)-1]-1.21)
				if math.IsNaN(sv[0]) || math.IsNaN(sv[len(sv)-1]) {
					dist = math.Inf(1)
				}
				c.list = append(c.list, Metric{Name: fmt.Sprintf("sv [%.3f, %.3f] outside", sv[0], sv[len(sv)-1]), Err: dist, Tol: slack})
				return c.result()
			}})
	}
	return cs
}
