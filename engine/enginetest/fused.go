package enginetest

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/ref"
)

// The fused decode-step ops (engine.NormLinear, engine.DecodePreparer),
// run through engine.NormLinearMulti, NormLinearSwiGLU and DecodePrep so
// that a device without the kernels is judged on the compositions, against
// the references of the ops they fuse.

func init() {
	register(normLinearCases)
	register(decodePrepCases)
	register(normLinearPrepCases)
	badArgs = append(badArgs,
		badArg{"norm linear multi", "a norm weight of the wrong width", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
			return engine.NormLinearMulti(dev, []*engine.Tensor{ts.New(dt, 2, 4)}, []*engine.Tensor{ts.New(dt, 4, 8)},
				ts.New(dt, 2, 8), ts.New(dt, 7), 1e-6, nil)
		}},
		badArg{"norm linear swiglu", "integer rows", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
			return engine.NormLinearSwiGLU(dev, ts.New(dt, 2, 4), ts.New(engine.I32, 2, 8), ts.New(dt, 8),
				ts.New(dt, 4, 8), ts.New(dt, 4, 8), 1e-6, nil, nil, nil)
		}},
		badArg{"decode prep", "caches of another head count", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
			return engine.DecodePrep(dev, engine.DecodePrepArgs{Q: ts.New(dt, 1, 1, 4, 16), K: ts.New(dt, 1, 1, 2, 16),
				V: ts.New(dt, 1, 1, 2, 16), QNorm: ts.New(dt, 16), KNorm: ts.New(dt, 16), QOut: ts.New(dt, 1, 4, 1, 16),
				KCache: ts.New(dt, 1, 4, 8, 16), VCache: ts.New(dt, 1, 4, 8, 16), Pos: ts.New(engine.I32, 1),
				Starts: ts.New(engine.I32, 1), Eps: 1e-6, Theta: 1e4})
		}},
		badArg{"decode prep", "a probe without its norm weight", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
			return engine.DecodePrep(dev, engine.DecodePrepArgs{Q: ts.New(dt, 1, 1, 4, 16), K: ts.New(dt, 1, 1, 2, 16),
				V: ts.New(dt, 1, 1, 2, 16), R: ts.New(dt, 1, 1, 4, 16), QNorm: ts.New(dt, 16), KNorm: ts.New(dt, 16),
				QOut: ts.New(dt, 1, 4, 1, 16), ROut: ts.New(dt, 1, 4, 1, 16), KCache: ts.New(dt, 1, 2, 8, 16),
				VCache: ts.New(dt, 1, 2, 8, 16), Pos: ts.New(engine.I32, 1), Starts: ts.New(engine.I32, 1), Eps: 1e-6, Theta: 1e4})
		}},
	)
}

// normLinearErr returns the rounding-error magnitudes E of y = h W^T
// (h [M, K] the normed rows, w [N, K]), elementwise [M, N]: the output's
// own rounding |y| and the rounding of h to the dtype that the composition
// stores (a fused kernel keeps h in f32), sum_k |h_k| |W_nk|.
func normLinearErr(h, w, y []float64, m, n, k int) []float64 {
	e := absAll(y)
	for i := range m {
		for j := range n {
			var s float64
			for p := range k {
				s += math.Abs(h[i*k+p] * w[j*k+p])
			}
			e[i*n+j] += s
		}
	}
	return e
}

// normLinearCases check NormLinearMulti and NormLinearSwiGLU: decode-sized
// rows (1..8, which the CUDA kernels take, and 9, which they do not),
// K = 1024 as in a 0.6B model's blocks, and the norm weight in f32 beside
// 16-bit activations as the model passes it.
func normLinearCases(o Options, dt engine.DType) []Case {
	const eps = 1e-6
	type nl struct {
		m, k int
		ns   []int
		wdt  engine.DType // the norm weight's dtype (0: dt)
	}
	shapes := []nl{{1, 72, []int{40, 24, 24}, 0}, {3, 264, []int{16, 8, 8, 16}, engine.F32}, {8, 32, []int{9, 33}, 0},
		{2, 1024, []int{48, 16, 16}, engine.F32}, {9, 16, []int{8}, 0}}
	if o.Short {
		shapes = shapes[:3]
	}
	var cs []Case
	for _, s := range shapes {
		wdt := s.wdt
		if wdt == 0 {
			wdt = dt
		}
		name := fmt.Sprintf("x %dx%d, norm %v, weights %v", s.m, s.k, wdt, s.ns)
		cs = append(cs, Case{Op: "norm linear multi", Name: name, DType: dt,
			Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
				ts := NewTensors(dev)
				defer ts.Free()
				xv, gv := Normal(rng, dt, s.m*s.k, 2), Normal(rng, wdt, s.k, 1)
				x, g, h := ts.Up(dt, xv, s.m, s.k), ts.Up(wdt, gv, s.k), ts.New(dt, s.m, s.k)
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
				c.do(engine.NormLinearMulti(dev, outs, ws, x, g, eps, h))
				hv, _ := ref.RMSNorm(xv, gv, s.m, s.k, eps)
				for i, n := range s.ns {
					want := ref.MatMul(hv, wvs[i], 1, s.m, n, s.k, false, true, false)
					c.cmp(fmt.Sprintf("out %d", i), outs[i], want,
						errBoundTol(dt, Tol(dt, s.k), normLinearErr(hv, wvs[i], want, s.m, n, s.k), want))
				}
				return c.result()
			}})
	}
	sw := []struct {
		m, k, n int
		wdt     engine.DType
	}{{1, 264, 40, 0}, {4, 32, 24, engine.F32}, {9, 16, 8, 0}, {2, 1024, 64, engine.F32}}
	if o.Short {
		sw = sw[:3]
	}
	for _, s := range sw {
		wdt := s.wdt
		if wdt == 0 {
			wdt = dt
		}
		cs = append(cs, Case{Op: "norm linear swiglu", Name: fmt.Sprintf("x %dx%d, norm %v, weights %dx%d", s.m, s.k, wdt, s.n, s.k), DType: dt,
			Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
				ts := NewTensors(dev)
				defer ts.Free()
				xv, nv := Normal(rng, dt, s.m*s.k, 2), Normal(rng, wdt, s.k, 1)
				gv, uv := Normal(rng, dt, s.n*s.k, 0.3), Normal(rng, dt, s.n*s.k, 0.3)
				x, g, wg, wu := ts.Up(dt, xv, s.m, s.k), ts.Up(wdt, nv, s.k), ts.Up(dt, gv, s.n, s.k), ts.Up(dt, uv, s.n, s.k)
				act := ts.Up(dt, Normal(rng, dt, s.m*s.n, 1), s.m, s.n)
				if err := ts.Err(); err != nil {
					return nil, err
				}
				var c opMetrics
				// nil scratch: the composition allocates its own.
				c.do(engine.NormLinearSwiGLU(dev, act, x, g, wg, wu, eps, nil, nil, nil))
				hv, _ := ref.RMSNorm(xv, nv, s.m, s.k, eps)
				gate := ref.MatMul(hv, gv, 1, s.m, s.n, s.k, false, true, false)
				up := ref.MatMul(hv, uv, 1, s.m, s.n, s.k, false, true, false)
				want := ref.SwiGLU(gate, up)
				c.cmp("act", act, want, errBoundTol(dt, 2*Tol(dt, s.k), normSwiGLUErr(hv, gv, uv, gate, up, want, s.m, s.n, s.k), want))
				return c.result()
			}})
	}
	return cs
}

// normSwiGLUErr returns the rounding-error magnitudes of act =
// silu(gate) up with gate = h Wg^T and up = h Wu^T: act's own rounding,
// and the errors of gate and up (their own rounding where the composition
// stores them, and that of h, normLinearErr) through the partial
// derivatives |up silu'(gate)| and |silu(gate)|.
func normSwiGLUErr(h, wg, wu, gate, up, act []float64, m, n, k int) []float64 {
	eg, eu := normLinearErr(h, wg, gate, m, n, k), normLinearErr(h, wu, up, m, n, k)
	e := absAll(act)
	for i, z := range gate {
		s := 1 / (1 + math.Exp(-z))
		e[i] += math.Abs(up[i]*s*(1+z*(1-s)))*eg[i] + math.Abs(z*s)*eu[i]
	}
	return e
}

// decodePrepCase is one shape of DecodePrep: L new positions of B
// sequences, caches of capacity cap.
type decodePrepCase struct {
	b, l, hq, hkv, d, cap int
	perSeq, probe, kvh    bool // per-sequence positions; r given; KH and VH given
	theta                 float32
	keep                  bool // KeepKV: KH and VH must hold k and v
}

func (s decodePrepCase) String() string {
	return fmt.Sprintf("B%d L%d Hq%d Hkv%d D%d cap %d, per-sequence pos %v, r %v, scratch %v, theta %g, keep %v",
		s.b, s.l, s.hq, s.hkv, s.d, s.cap, s.perSeq, s.probe, s.kvh, s.theta, s.keep)
}

// decodePrepCases check DecodePrep against the references of
// RMSNormRoPE, SwapAxes12 and KVAppendAt: the caches start random, so the
// rows a sequence does not append must come back unchanged. The shapes
// take the CUDA kernel (D = 16..128, one and several positions, per
// sequence positions) and the composition (D = 12); the KeepKV shapes
// include a prefill of 37 positions and the single-head, single-position
// one whose swap is the identity.
func decodePrepCases(o Options, dt engine.DType) []Case {
	const eps = 1e-6
	shapes := []decodePrepCase{
		{1, 1, 4, 2, 128, 9, false, true, false, 1e6, false},
		{3, 1, 4, 2, 64, 7, true, true, true, 1e4, false},
		{2, 2, 2, 1, 16, 6, true, false, false, 1e4, false},
		{1, 37, 4, 2, 128, 40, false, true, true, 1e6, true},
		{2, 3, 2, 2, 32, 8, false, true, true, 1e4, false},
		{2, 2, 2, 2, 12, 5, false, true, false, 1e4, false},
		{2, 1, 2, 1, 64, 4, true, false, true, 1e4, true},
		{1, 5, 2, 2, 12, 9, false, false, true, 1e4, true},
	}
	if o.Short {
		shapes = shapes[:4]
	}
	var cs []Case
	for _, s := range shapes {
		cs = append(cs, Case{Op: "decode prep", Name: s.String(), DType: dt, Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
			b, l, hq, hkv, d, capacity := s.b, s.l, s.hq, s.hkv, s.d, s.cap
			ts := NewTensors(dev)
			defer ts.Free()
			qv, kv, vv := Normal(rng, dt, b*l*hq*d, 2), Normal(rng, dt, b*l*hkv*d, 2), Normal(rng, dt, b*l*hkv*d, 1)
			qn, kn, rn := Normal(rng, dt, d, 1), Normal(rng, dt, d, 1), Normal(rng, dt, d, 0.5)
			kc, vc := Normal(rng, dt, b*hkv*capacity*d, 1), Normal(rng, dt, b*hkv*capacity*d, 1)
			pi, pf, pshape, st, sf := s.positions(rng)
			a := engine.DecodePrepArgs{
				Q: ts.Up(dt, qv, b, l, hq, d), K: ts.Up(dt, kv, b, l, hkv, d), V: ts.Up(dt, vv, b, l, hkv, d),
				QNorm: ts.Up(dt, qn, d), KNorm: ts.Up(dt, kn, d), QOut: ts.New(dt, b, hq, l, d),
				KCache: ts.Up(dt, kc, b, hkv, capacity, d), VCache: ts.Up(dt, vc, b, hkv, capacity, d),
				Pos: ts.Up(engine.I32, pf, pshape...), Starts: ts.Up(engine.I32, sf, b), Eps: eps, Theta: s.theta,
			}
			var rv []float64
			if s.probe {
				rv = Normal(rng, dt, b*l*hq*d, 2)
				a.R, a.RNorm, a.ROut = ts.Up(dt, rv, b, l, hq, d), ts.Up(dt, rn, d), ts.New(dt, b, hq, l, d)
			}
			if s.kvh || s.keep {
				a.KH, a.VH = ts.New(dt, b, hkv, l, d), ts.New(dt, b, hkv, l, d)
				a.KeepKV = s.keep
			}
			if err := ts.Err(); err != nil {
				return nil, err
			}
			var c opMetrics
			c.do(engine.DecodePrep(dev, a))
			s.check(&c, dt, a, prepInputs{qv, kv, vv, rv, qn, kn, rn, kc, vc, pi, st})
			return c.result()
		}})
	}
	return cs
}

// positions draws a case's positions (normRoPECase.positions: pi, and as
// values pf of shape pshape) and cache starts (st, sf [B]).
func (s decodePrepCase) positions(rng *rand.Rand) (pi []int, pf []float64, pshape []int, st []int, sf []float64) {
	pf, pi, pshape = normRoPECase{b: s.b, l: s.l, perSeq: s.perSeq}.positions(rng)
	st, sf = make([]int, s.b), make([]float64, s.b)
	for i := range st {
		st[i] = rng.IntN(s.cap - s.l + 1)
		sf[i] = float64(st[i])
	}
	return pi, pf, pshape, st, sf
}

// prepInputs are the values a decodePrepCase's reference starts from: the
// projections, the norm weights, the caches before the op, the positions
// and the starts.
type prepInputs struct {
	q, k, v, r, qn, kn, rn, kc, vc []float64
	pos, starts                    []int
}

// check compares DecodePrep's outputs in a (run from in) with the
// references of RMSNormRoPE, SwapAxes12 and KVAppendAt.
func (s decodePrepCase) check(c *opMetrics, dt engine.DType, a engine.DecodePrepArgs, in prepInputs) {
	const eps = 1e-6
	b, l, hq, hkv, d, capacity := s.b, s.l, s.hq, s.hkv, s.d, s.cap
	qv, kv, vv, rv, qn, kn, rn, kc, vc, pi, st := in.q, in.k, in.v, in.r, in.qn, in.kn, in.rn, in.kc, in.vc, in.pos, in.starts
	angleTol := 4 * normRoPEMaxPos * 0x1p-24 // as normRoPECases
	theta := float64(s.theta)
	floor := max(Tol(dt, d), angleTol)
	nr := func(name string, t *engine.Tensor, x, w []float64, h int) {
		want, _ := ref.RMSNormRoPE(x, w, b, l, h, d, pi, eps, theta)
		c.cmp(name, t, want, errBoundTol(dt, floor, normRoPEForwardErr(x, w, want, b, l, h, d, eps), want))
	}
	nr("qOut", a.QOut, qv, qn, hq)
	if s.probe {
		nr("rOut", a.ROut, rv, rn, hq)
	}
	// The caches: the appended rows replace positions starts[b]..
	wk, _ := ref.RMSNormRoPE(kv, kn, b, l, hkv, d, pi, eps, theta)
	ek := normRoPEForwardErr(kv, kn, wk, b, l, hkv, d, eps)
	wantK, errK := append([]float64(nil), kc...), absAll(kc)
	wantV := append([]float64(nil), vc...)
	vs := ref.SwapAxes12(vv, b, l, hkv, d)
	for bh := range b * hkv {
		for i := range l {
			src, dst := (bh*l+i)*d, (bh*capacity+st[bh/hkv]+i)*d
			copy(wantK[dst:dst+d], wk[src:src+d])
			copy(errK[dst:dst+d], ek[src:src+d])
			copy(wantV[dst:dst+d], vs[src:src+d])
		}
	}
	c.cmp("kCache", a.KCache, wantK, errBoundTol(dt, floor, errK, wantK))
	c.cmp("vCache", a.VCache, wantV, Tol(dt, 1))
	if s.keep {
		c.cmp("kh", a.KH, wk, errBoundTol(dt, floor, ek, wk))
		c.cmp("vh", a.VH, vs, Tol(dt, 1))
	}
}

// normLinearPrepCases check NormLinearDecodePrep: the raw projections
// against the products' reference (as normLinearCases), and the prepared
// attention inputs against DecodePrep's references started from the
// projections the device wrote (so that both hold the op to the bounds of
// its two halves). The shapes take the fused CUDA kernel (B L rows up to
// 8, D a multiple of 16, with and without r, per-sequence positions) and,
// with 9 rows, the composition.
func normLinearPrepCases(o Options, dt engine.DType) []Case {
	type nlp struct {
		decodePrepCase
		k int
	}
	shapes := []nlp{
		{decodePrepCase{1, 1, 4, 2, 128, 9, false, true, false, 1e6, false}, 256},
		{decodePrepCase{3, 1, 4, 2, 64, 7, true, false, false, 1e4, false}, 72},
		{decodePrepCase{2, 2, 2, 1, 16, 6, true, true, true, 1e4, false}, 32},
		{decodePrepCase{1, 1, 2, 2, 32, 4, false, true, false, 1e4, false}, 1024},
		{decodePrepCase{9, 1, 2, 1, 16, 3, false, true, false, 1e4, false}, 16},
	}
	if o.Short {
		shapes = shapes[:3]
	}
	var cs []Case
	for _, s := range shapes {
		cs = append(cs, normLinearPrepCase(s.decodePrepCase, s.k, 0, dt))
		// int8 weights in groups of up to 128 columns (K = 72: none the
		// 16-byte kernels take)
		cs = append(cs, normLinearPrepCase(s.decodePrepCase, s.k, min(s.k, 128), dt))
	}
	return cs
}

// normLinearPrepCase is one case of normLinearPrepCases, with int8 weights
// in groups of group columns where group > 0.
func normLinearPrepCase(s decodePrepCase, k, group int, dt engine.DType) Case {
	const eps = 1e-6
	op, name := "norm linear decode prep", fmt.Sprintf("K %d, %v", k, s)
	if group > 0 {
		op, name = op+" int8", fmt.Sprintf("%s, group %d", name, group)
	}
	return Case{Op: op, Name: name, DType: dt, Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
		b, l, hq, hkv, d, capacity := s.b, s.l, s.hq, s.hkv, s.d, s.cap
		m := b * l
		ts := NewTensors(dev)
		defer ts.Free()
		xv, gv := Normal(rng, dt, m*k, 2), Normal(rng, engine.F32, k, 1)
		x, g, h := ts.Up(dt, xv, m, k), ts.Up(engine.F32, gv, k), ts.New(dt, m, k)
		qn, kn, rn := Normal(rng, dt, d, 1), Normal(rng, dt, d, 1), Normal(rng, dt, d, 0.5)
		kc, vc := Normal(rng, dt, b*hkv*capacity*d, 1), Normal(rng, dt, b*hkv*capacity*d, 1)
		pi, pf, pshape, st, sf := s.positions(rng)
		a := engine.DecodePrepArgs{
			Q: ts.New(dt, b, l, hq, d), K: ts.New(dt, b, l, hkv, d), V: ts.New(dt, b, l, hkv, d),
			QNorm: ts.Up(dt, qn, d), KNorm: ts.Up(dt, kn, d), QOut: ts.New(dt, b, hq, l, d),
			KCache: ts.Up(dt, kc, b, hkv, capacity, d), VCache: ts.Up(dt, vc, b, hkv, capacity, d),
			Pos: ts.Up(engine.I32, pf, pshape...), Starts: ts.Up(engine.I32, sf, b), Eps: eps, Theta: s.theta,
		}
		if s.probe {
			a.R, a.RNorm, a.ROut = ts.New(dt, b, l, hq, d), ts.Up(dt, rn, d), ts.New(dt, b, hq, l, d)
		}
		if s.kvh {
			a.KH, a.VH = ts.New(dt, b, hkv, l, d), ts.New(dt, b, hkv, l, d)
		}
		projs := []*engine.Tensor{a.Q, a.K, a.V}
		if s.probe {
			projs = append(projs, a.R)
		}
		var outs, ws []*engine.Tensor
		var qs []engine.Int8Weight
		defer func() {
			for _, w := range qs {
				w.Free(dev)
			}
		}()
		var wvs [][]float64
		for _, p := range projs {
			n := p.Numel() / m
			if group > 0 {
				w, qv, sv, err := quantized(dev, rng, n, k, group, 0.5)
				if err != nil {
					return nil, err
				}
				qs, wvs = append(qs, w), append(wvs, ref.DequantInt8(qv, sv, n, k, group))
			} else {
				wv := Normal(rng, dt, n*k, 1)
				wvs, ws = append(wvs, wv), append(ws, ts.Up(dt, wv, n, k))
			}
			o, err := p.Reshape(m, n)
			if err != nil {
				return nil, err
			}
			outs = append(outs, o)
		}
		if err := ts.Err(); err != nil {
			return nil, err
		}
		var c opMetrics
		if group > 0 {
			c.do(engine.NormLinearDecodePrepInt8(dev, outs, qs, x, g, eps, h, a))
		} else {
			c.do(engine.NormLinearDecodePrep(dev, outs, ws, x, g, eps, h, a))
		}
		hv, _ := ref.RMSNorm(xv, gv, m, k, eps)
		raw := make([][]float64, 4)
		for i, o := range outs {
			n := o.Dim(1)
			want := ref.MatMul(hv, wvs[i], 1, m, n, k, false, true, false)
			e := normLinearErr(hv, wvs[i], want, m, n, k)
			if group > 0 {
				e = int8NormErr(hv, wvs[i], want, m, n, k)
			}
			c.cmp(fmt.Sprintf("projection %d", i), o, want, errBoundTol(dt, Tol(dt, k), e, want))
			var err error
			if raw[i], err = Download(o); err != nil {
				return nil, err
			}
		}
		s.check(&c, dt, a, prepInputs{raw[0], raw[1], raw[2], raw[3], qn, kn, rn, kc, vc, pi, st})
		return c.result()
	}}
}
