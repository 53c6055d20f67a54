package enginetest

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/ref"
)

func init() { register(normRoPECases) }

// normRoPECase is one shape of the fused head norm and rotation: x
// [B, L, H, D], positions [L] or per sequence [B, L].
type normRoPECase struct {
	b, l, h, d int
	perSeq     bool
	theta      float32
}

func (s normRoPECase) String() string {
	p := fmt.Sprintf("pos [%d]", s.l)
	if s.perSeq {
		p = fmt.Sprintf("pos [%d,%d]", s.b, s.l)
	}
	return fmt.Sprintf("x [%d,%d,%d,%d], %s, theta %g", s.b, s.l, s.h, s.d, p, s.theta)
}

// positions draws the case's positions in [0, normRoPEMaxPos).
func (s normRoPECase) positions(rng *rand.Rand) (pf []float64, pi []int, shape []int) {
	n, shape := s.l, []int{s.l}
	if s.perSeq {
		n, shape = s.b*s.l, []int{s.b, s.l}
	}
	pf, pi = make([]float64, n), make([]int, n)
	for i := range pi {
		pi[i] = rng.IntN(normRoPEMaxPos)
		pf[i] = float64(pi[i])
	}
	return pf, pi, shape
}

const normRoPEMaxPos = 1024

// normRoPECases cover RMSNormRoPE and its backward (engine.NormRoPE, run
// through engine.RMSNormRoPE so a device without the fused op is judged on
// its composition): against the composition of the references of RMSNorm,
// SwapAxes12 and RoPE, the backward also against finite differences. The
// shapes take the 16-byte kernels (D/2 a multiple of 8), the generic ones
// (D = 12), one position (decoding), per-sequence positions and
// training-sized batches.
func normRoPECases(o Options, dt engine.DType) []Case {
	const eps = 1e-6
	shapes := []normRoPECase{
		{2, 5, 3, 16, false, 1e4},
		{2, 6, 4, 64, true, 1e4},
		{3, 1, 4, 128, true, 1e6},
		{1, 3, 2, 12, false, 1e4},
		// Training-sized batches (16384 rows): units of several heads and
		// dW partials summed over many rows, shared and per-sequence
		// positions.
		{4, 512, 8, 64, false, 1e4},
		{2, 256, 32, 64, true, 1e6},
		// Large enough (8 x 640 x 13 rows of D/16 lanes each, just over
		// twice the 2^17 lanes the CUDA 16-byte kernels aim at) for
		// units of two heads there, 13 heads leaving a last unit of one,
		// and more blocks than the backward's capped grid on the H200.
		{8, 640, 13, 64, true, 1e4},
	}
	if o.Short {
		shapes = shapes[:2]
	}
	// An f32 backend may form the angle pos*freq in f32 (as for RoPE): a
	// few ulp of the largest angle.
	angleTol := 4 * normRoPEMaxPos * 0x1p-24
	var cs []Case
	for _, s := range shapes {
		b, l, h, d := s.b, s.l, s.h, s.d
		rows, n := b*l*h, b*l*h*d
		cs = append(cs, Case{Op: "rmsnorm rope", Name: s.String(), DType: dt, Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
			ts := NewTensors(dev)
			defer ts.Free()
			xv, wv := Normal(rng, dt, n, 2), Normal(rng, dt, d, 1)
			pf, pi, pshape := s.positions(rng)
			x, w, pos := ts.Up(dt, xv, b, l, h, d), ts.Up(dt, wv, d), ts.Up(engine.I32, pf, pshape...)
			out, rstd := ts.New(dt, b, h, l, d), ts.New(engine.F32, b, l, h)
			if err := ts.Err(); err != nil {
				return nil, err
			}
			var c opMetrics
			c.do(engine.RMSNormRoPE(dev, out, rstd, x, w, pos, eps, s.theta))
			want, wr := ref.RMSNormRoPE(xv, wv, b, l, h, d, pi, eps, float64(s.theta))
			floor := max(Tol(dt, d), angleTol)
			c.cmp("out", out, want, errBoundTol(dt, floor, normRoPEForwardErr(xv, wv, want, b, l, h, d, eps), want))
			c.cmp("rstd", rstd, wr, Tol(engine.F32, d))
			return c.result()
		}})
		cs = append(cs, Case{Op: "rmsnorm rope backward", Name: s.String() + ", dW accumulating", DType: dt, Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
			ts := NewTensors(dev)
			defer ts.Free()
			xv, wv, gv, dw0 := Normal(rng, dt, n, 2), Normal(rng, dt, d, 1), Normal(rng, dt, n, 1), Normal(rng, dt, d, 1)
			pf, pi, pshape := s.positions(rng)
			x, w, g, pos := ts.Up(dt, xv, b, l, h, d), ts.Up(dt, wv, d), ts.Up(dt, gv, b, h, l, d), ts.Up(engine.I32, pf, pshape...)
			out, rstd, dx, dw := ts.New(dt, b, h, l, d), ts.New(engine.F32, b, l, h), ts.New(dt, b, l, h, d), ts.Up(dt, dw0, d)
			if err := ts.Err(); err != nil {
				return nil, err
			}
			var c opMetrics
			c.do(engine.RMSNormRoPE(dev, out, rstd, x, w, pos, eps, s.theta))
			c.do(engine.RMSNormRoPEBackward(dev, dx, dw, g, x, w, rstd, pos, s.theta))
			theta := float64(s.theta)
			wdx, wdw := ref.RMSNormRoPEBackward(gv, xv, wv, b, l, h, d, pi, eps, theta)
			wdwAll := ref.AddScaled(wdw, dw0, 1, 1)
			edx, edw := normRoPEBackwardErr(gv, xv, wv, wdx, wdwAll, b, l, h, d, pi, eps, theta)
			dxTol := errBoundTol(dt, max(Tol(dt, d), angleTol), edx, wdx)
			dwTol := errBoundTol(dt, max(Tol(dt, rows), angleTol), edw, wdwAll)
			c.cmp("dX", dx, wdx, dxTol)
			c.cmp("dW", dw, wdwAll, dwTol)
			loss := func(x, w []float64) float64 {
				o, _ := ref.RMSNormRoPE(x, w, b, l, h, d, pi, eps, theta)
				return opDot(o, gv)
			}
			c.fd(rng, "dX", c.get(dx), wdx, func(z []float64) float64 { return loss(z, wv) }, xv, dxTol)
			if got := c.get(dw); got != nil {
				c.fd(rng, "dW", opSub(got, dw0), wdw, func(z []float64) float64 { return loss(xv, z) }, wv, dwTol)
			}
			return c.result()
		}})
	}
	return cs
}

// normRoPEForwardErr returns the rounding-error magnitudes E of
// RMSNormRoPE's out (see bounds.go): the output's own rounding |out|, and
// the rounding a backend may apply to the normed row y = x rstd w before
// the rotation (the composition stores it in the dtype), which reaches
// out[i] through cos and sin: |y_i| + |y_{i +- D/2}|.
func normRoPEForwardErr(x, w, out []float64, b, l, h, d int, eps float64) []float64 {
	y, _ := ref.RMSNorm(x, w, b*l*h, d, eps)
	ys := ref.SwapAxes12(y, b, l, h, d)
	e := absAll(out)
	half := d / 2
	for r := range b * h * l {
		for i := range half {
			o := r*d + i
			m := math.Abs(ys[o]) + math.Abs(ys[o+half])
			e[o] += m
			e[o+half] += m
		}
	}
	return e
}

// normRoPEBackwardErr returns the rounding-error magnitudes of dX and dW
// (the latter including the accumulated dw0, want holding their sum): the
// outputs' own rounding, and that of the rotated-back gradient g, which
// the composition stores in the dtype: with xhat = x rstd, a relative
// error u in g moves dX by at most rstd (|g w| + |xhat| mean|g w xhat|)
// and dW by sum over rows of |g xhat|.
func normRoPEBackwardErr(dOut, x, w, wantDX, wantDW []float64, b, l, h, d int, pos []int, eps, theta float64) (edx, edw []float64) {
	g := ref.SwapAxes12(ref.RoPE(dOut, b, h, l, d, pos, theta, true), b, h, l, d)
	_, rstd := ref.RMSNorm(x, w, b*l*h, d, eps)
	edx, edw = absAll(wantDX), absAll(wantDW)
	for r := range b * l * h {
		s := rstd[r]
		var m float64
		for i := range d {
			m += math.Abs(g[r*d+i]*w[i]) * math.Abs(x[r*d+i]*s)
		}
		m /= float64(d)
		for i := range d {
			xh := math.Abs(x[r*d+i] * s)
			edx[r*d+i] += s * (math.Abs(g[r*d+i]*w[i]) + xh*m)
			edw[i] += math.Abs(g[r*d+i]) * xh
		}
	}
	return edx, edw
}
