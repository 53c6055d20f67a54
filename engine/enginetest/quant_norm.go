package enginetest

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/ref"
)

// The int8 products with the RMSNorm before them folded in
// (engine.Int8NormLinear), run through engine.NormLinearMultiInt8 and
// NormLinearSwiGLUInt8 so that a device without the kernels is judged on
// the compositions, against the float64 references of RMSNorm and the
// dequantized products.
//
// Their bound joins the two it fuses: the composition rounds h to x's
// dtype (u sum_k |h_k| |W_nk|, normLinearErr's term), and the int8 product
// may round the dequantized weight to that dtype (the same term again) and
// rounds its output, so
//
//	E_mn = |y_mn| + 2 sum_k |h_mk| |W_nk|
//
// (int8NormErr), with the MLP's through the SwiGLU as in
// linearSwiGLUInt8Cases.

func init() {
	register(int8NormCases)
	badArgs = append(badArgs,
		badArg{"norm linear multi int8", "a norm weight of the wrong width", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
			return engine.NormLinearMultiInt8(dev, []*engine.Tensor{ts.New(dt, 2, 4)},
				[]engine.Int8Weight{{Q: ts.New(engine.I8, 4, 16), Scales: ts.New(engine.F32, 4, 1), Group: 16}},
				ts.New(dt, 2, 16), ts.New(dt, 7), 1e-6, nil)
		}},
		badArg{"norm linear swiglu int8", "integer rows", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
			w := engine.Int8Weight{Q: ts.New(engine.I8, 4, 16), Scales: ts.New(engine.F32, 4, 1), Group: 16}
			return engine.NormLinearSwiGLUInt8(dev, ts.New(dt, 2, 4), ts.New(engine.I32, 2, 16), ts.New(dt, 16),
				w, w, 1e-6, nil, nil, nil)
		}},
		badArg{"linear int8", "scales of the wrong shape under norm linear swiglu int8", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
			w := engine.Int8Weight{Q: ts.New(engine.I8, 4, 16), Scales: ts.New(engine.F32, 4, 2), Group: 16}
			return engine.NormLinearSwiGLUInt8(dev, ts.New(dt, 2, 4), ts.New(dt, 2, 16), ts.New(dt, 16),
				w, w, 1e-6, nil, nil, nil)
		}},
	)
}

// int8NormErr returns E = |y| + 2 sum_k |h_k| |W_nk| (see above) for
// y = h W^T, h [m, k] and the dequantized w [n, k].
func int8NormErr(h, w, y []float64, m, n, k int) []float64 {
	e := absAll(y)
	for i := range m {
		for j := range n {
			var s float64
			for p := range k {
				s += math.Abs(h[i*k+p] * w[j*k+p])
			}
			e[i*n+j] += 2 * s
		}
	}
	return e
}

// int8NormCases: decode-sized rows (1..8, which the matrix-vector kernels
// take, and 9, which they do not), K and groups the 16-byte kernels take
// and ones they do not, the norm weight in f32 beside 16-bit activations
// as the model passes it; then batches of 9 to 64 rows (CUDA's tensor-core
// kernel, which sums the squares of x per K slice as it stages it): a
// partial last stage, N off its tiles, a small model's q, k, v and MLP.
func int8NormCases(o Options, dt engine.DType) []Case {
	const eps = 1e-6
	type nl struct {
		m, k, g int
		ns      []int
		wdt     engine.DType // the norm weight's dtype (0: dt)
	}
	shapes := []nl{{1, 128, 64, []int{40, 24, 24}, 0}, {3, 256, 128, []int{16, 8, 8, 16}, engine.F32},
		{8, 64, 64, []int{9, 33}, 0}, {2, 1024, 128, []int{48, 16, 16}, engine.F32}, {5, 40, 16, []int{5, 7}, 0},
		{9, 32, 32, []int{8}, 0}}
	if o.Short {
		shapes = shapes[:3]
	}
	shapes = append(shapes, nl{12, 256, 128, []int{40, 24, 24}, engine.F32}, nl{20, 1088, 64, []int{70, 9}, 0})
	if !o.Short {
		shapes = append(shapes, nl{32, 1024, 128, []int{2048, 1024, 1024}, engine.F32}, nl{64, 1024, 1024, []int{1024}, 0})
	}
	var cs []Case
	for _, s := range shapes {
		wdt := s.wdt
		if wdt == 0 {
			wdt = dt
		}
		name := fmt.Sprintf("x %dx%d, norm %v, weights %v, group %d", s.m, s.k, wdt, s.ns, s.g)
		cs = append(cs, Case{Op: "norm linear multi int8", Name: name, DType: dt,
			Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
				ts := NewTensors(dev)
				defer ts.Free()
				xv, gv := Normal(rng, dt, s.m*s.k, 2), Normal(rng, wdt, s.k, 1)
				x, g, h := ts.Up(dt, xv, s.m, s.k), ts.Up(wdt, gv, s.k), ts.New(dt, s.m, s.k)
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
				c.do(engine.NormLinearMultiInt8(dev, outs, ws, x, g, eps, h))
				hv, _ := ref.RMSNorm(xv, gv, s.m, s.k, eps)
				for i, n := range s.ns {
					want := ref.MatMul(hv, wds[i], 1, s.m, n, s.k, false, true, false)
					c.cmp(fmt.Sprintf("out %d", i), outs[i], want,
						errBoundTol(dt, Tol(dt, s.k), int8NormErr(hv, wds[i], want, s.m, n, s.k), want))
				}
				return c.result()
			}})
	}
	type ns struct {
		m, k, n, g int
		wdt        engine.DType
	}
	sw := []ns{{1, 256, 40, 128, 0}, {4, 64, 24, 32, engine.F32}, {9, 32, 8, 32, 0}, {2, 1024, 64, 1024, engine.F32},
		{3, 40, 12, 8, 0}, {8, 128, 16, 64, 0}}
	if o.Short {
		sw = sw[:3]
	}
	sw = append(sw, ns{12, 256, 40, 128, engine.F32}, ns{24, 1088, 50, 64, 0})
	if !o.Short {
		sw = append(sw, ns{32, 1024, 3072, 128, engine.F32}, ns{64, 1024, 3072, 1024, 0})
	}
	for _, s := range sw {
		wdt := s.wdt
		if wdt == 0 {
			wdt = dt
		}
		cs = append(cs, Case{Op: "norm linear swiglu int8",
			Name: fmt.Sprintf("x %dx%d, norm %v, weights %dx%d, group %d", s.m, s.k, wdt, s.n, s.k, s.g), DType: dt,
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
				xv, nv := Normal(rng, dt, s.m*s.k, 2), Normal(rng, wdt, s.k, 1)
				x, g := ts.Up(dt, xv, s.m, s.k), ts.Up(wdt, nv, s.k)
				act := ts.Up(dt, Normal(rng, dt, s.m*s.n, 1), s.m, s.n)
				if err := ts.Err(); err != nil {
					return nil, err
				}
				var c opMetrics
				// nil scratch: the composition allocates its own.
				c.do(engine.NormLinearSwiGLUInt8(dev, act, x, g, wg, wu, eps, nil, nil, nil))
				hv, _ := ref.RMSNorm(xv, nv, s.m, s.k, eps)
				gd, ud := ref.DequantInt8(gq, gs, s.n, s.k, s.g), ref.DequantInt8(uq, us, s.n, s.k, s.g)
				gate := ref.MatMul(hv, gd, 1, s.m, s.n, s.k, false, true, false)
				up := ref.MatMul(hv, ud, 1, s.m, s.n, s.k, false, true, false)
				want := ref.SwiGLU(gate, up)
				eg, eu := int8NormErr(hv, gd, gate, s.m, s.n, s.k), int8NormErr(hv, ud, up, s.m, s.n, s.k)
				e := make([]float64, len(want))
				for i := range e {
					sg := 1 / (1 + math.Exp(-gate[i]))
					silu, dsilu := gate[i]*sg, sg*(1+gate[i]*(1-sg))
					e[i] = 2*math.Abs(want[i]) + math.Abs(dsilu*up[i])*eg[i] + math.Abs(silu)*eu[i]
				}
				c.cmp("act", act, want, errBoundTol(dt, 2*Tol(dt, s.k), e, want))
				return c.result()
			}})
	}
	return cs
}
