package cpu

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/enginetest"
	"github.com/parallax-engine/parallax/engine/ref"
)

// Accuracy targets of these tests, relative max-norm error against the
// float64 reference on identical (float32-representable) inputs:
//
//	forward (o, vbar, lse, tbar), decode, linear forward:  1e-5
//	backward (dq, dk, dv, dr), linear backward:            1e-4
//	LLA (CG to 1e-10, or Cholesky):                        1e-5
//	bf16 inputs and outputs:                               enginetest.Tol(BF16)

// attnShape is one test configuration of the attention family.
type attnShape = enginetest.AttnShape

// attnShapes cover Lq = Lk, decode (Lq = 1), a cache offset (Lq < Lk), GQA
// with G = 1, 2, 4, D = 8..128, windows, non-causal attention and lengths
// around the tile sizes (1, 7, 33, 100, 129 against tiles of 64 keys and
// blocks of 32 rows).
var attnShapes = []attnShape{
	{B: 1, Hq: 1, Hkv: 1, Lq: 1, Lk: 1, D: 8, Causal: true, Window: 0},
	{B: 1, Hq: 2, Hkv: 2, Lq: 33, Lk: 33, D: 16, Causal: true, Window: 0},
	{B: 2, Hq: 4, Hkv: 2, Lq: 1, Lk: 100, D: 32, Causal: true, Window: 0},
	{B: 1, Hq: 2, Hkv: 1, Lq: 7, Lk: 129, D: 8, Causal: true, Window: 0},
	{B: 1, Hq: 4, Hkv: 1, Lq: 100, Lk: 100, D: 16, Causal: true, Window: 33},
	{B: 2, Hq: 2, Hkv: 2, Lq: 7, Lk: 33, D: 64, Causal: false, Window: 0},
	{B: 1, Hq: 4, Hkv: 2, Lq: 129, Lk: 129, D: 8, Causal: true, Window: 1},
	{B: 1, Hq: 2, Hkv: 1, Lq: 20, Lk: 20, D: 128, Causal: true, Window: 0},
	{B: 1, Hq: 1, Hkv: 1, Lq: 5, Lk: 70, D: 128, Causal: false, Window: 0},
	{B: 1, Hq: 4, Hkv: 4, Lq: 40, Lk: 71, D: 16, Causal: true, Window: 64},
}

type attnData struct {
	q, k, v, r, dO []float64
}

// newAttnData draws inputs representable at dt: q, k, v standard normal
// (scores of order one), the probe scaled by 1/sqrt(D) so that r.k is of
// order one too.
func newAttnData(rng *rand.Rand, s attnShape, dt engine.DType) attnData {
	nq, nk := s.Rows()*s.D, s.B*s.Hkv*s.Lk*s.D
	return attnData{
		q: enginetest.Normal(rng, dt, nq, 1), k: enginetest.Normal(rng, dt, nk, 1),
		v: enginetest.Normal(rng, dt, nk, 1), r: enginetest.Normal(rng, dt, nq, 1/math.Sqrt(float64(s.D))),
		dO: enginetest.Normal(rng, dt, nq, 1),
	}
}

// attnT wraps enginetest.Tensors with test failure on upload errors.
type attnT struct {
	t  *testing.T
	ts *enginetest.Tensors
}

func newAttnT(t *testing.T, d *Device) *attnT { return &attnT{t, enginetest.NewTensors(d)} }

func (a *attnT) up(dt engine.DType, vals []float64, shape ...int) *engine.Tensor {
	a.t.Helper()
	x := a.ts.Up(dt, vals, shape...)
	if err := a.ts.Err(); err != nil {
		a.t.Fatal(err)
	}
	return x
}

func (a *attnT) new(dt engine.DType, shape ...int) *engine.Tensor {
	a.t.Helper()
	x := a.ts.New(dt, shape...)
	if err := a.ts.Err(); err != nil {
		a.t.Fatal(err)
	}
	return x
}

// attnNear reports the relative max-norm error of got and fails above tol.
func attnNear(t *testing.T, name string, got, want []float64, tol float64) float64 {
	t.Helper()
	e := enginetest.RelErr(got, want)
	if !(e <= tol) {
		t.Errorf("%s: relative error %.3g exceeds %.3g", name, e, tol)
	}
	return e
}

// attnNearOrZero is attnNear, except that a reference that is zero up to
// float64 rounding (dq and dk when every row sees one key: p = 1 and
// dS = 0) is compared in absolute terms.
func attnNearOrZero(t *testing.T, name string, got, want []float64, tol float64) float64 {
	t.Helper()
	var m float64
	for _, x := range want {
		m = max(m, math.Abs(x))
	}
	if m > 1e-12 {
		return attnNear(t, name, got, want, tol)
	}
	e := enginetest.RelErr(got, make([]float64, len(got)))
	if !(e <= tol) {
		t.Errorf("%s: the gradient is zero, got values up to %.3g", name, e)
	}
	return 0
}

// fwdOut are the forward's output tensors.
type fwdOut struct{ o, lse, vbar, tbar *engine.Tensor }

// runAttention runs the device forward and returns its tensors.
func runAttention(t *testing.T, d *Device, at *attnT, s attnShape, dt engine.DType, in attnData, parallax bool) fwdOut {
	t.Helper()
	a := engine.AttentionArgs{
		Q: at.up(dt, in.q, s.QShape()...), K: at.up(dt, in.k, s.KVShape()...), V: at.up(dt, in.v, s.KVShape()...),
		O: at.new(dt, s.QShape()...), LSE: at.new(engine.F32, s.B, s.Hq, s.Lq), AttentionOpts: s.Opts(),
	}
	if parallax {
		a.R = at.up(dt, in.r, s.QShape()...)
		a.Vbar = at.new(dt, s.QShape()...)
		a.Tbar = at.new(engine.F32, s.B, s.Hq, s.Lq)
	}
	if err := d.Attention(a); err != nil {
		t.Fatal(err)
	}
	return fwdOut{a.O, a.LSE, a.Vbar, a.Tbar}
}

func kinds(parallax bool) string {
	if parallax {
		return "parallax"
	}
	return "softmax"
}

func TestAttentionForwardMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	worst := 0.0
	for _, s := range attnShapes {
		for _, parallax := range []bool{false, true} {
			t.Run(s.String()+" "+kinds(parallax), func(t *testing.T) {
				d := New()
				at := newAttnT(t, d)
				in := newAttnData(rng, s, engine.F32)
				var r []float64
				if parallax {
					r = in.r
				}
				o, vbar, tbar, lse := ref.Attention(s.Dims(), in.q, in.k, in.v, r)
				got := runAttention(t, d, at, s, engine.F32, in, parallax)
				worst = max(worst, attnNear(t, "o", down(t, got.o), o, 1e-5))
				attnNear(t, "lse", down(t, got.lse), lse, 1e-5)
				if parallax {
					worst = max(worst, attnNear(t, "vbar", down(t, got.vbar), vbar, 1e-5))
					attnNear(t, "tbar", down(t, got.tbar), tbar, 1e-5)
				}
			})
		}
	}
	t.Logf("largest relative error of o/vbar: %.3g", worst)
}

func TestAttentionForwardBF16(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	for _, s := range []attnShape{attnShapes[2], attnShapes[4], attnShapes[7]} {
		for _, parallax := range []bool{false, true} {
			t.Run(s.String()+" "+kinds(parallax), func(t *testing.T) {
				d := New()
				at := newAttnT(t, d)
				in := newAttnData(rng, s, engine.BF16)
				var r []float64
				if parallax {
					r = in.r
				}
				o, vbar, _, lse := ref.Attention(s.Dims(), in.q, in.k, in.v, r)
				got := runAttention(t, d, at, s, engine.BF16, in, parallax)
				tol := enginetest.Tol(engine.BF16, s.Lk)
				attnNear(t, "o", down(t, got.o), o, tol)
				attnNear(t, "lse", down(t, got.lse), lse, 1e-5) // f32 statistic
				if parallax {
					attnNear(t, "vbar", down(t, got.vbar), vbar, tol)
				}
			})
		}
	}
}

// TestZeroProbeIsSoftmaxBitForBit: Parallax with r = 0 must reproduce
// softmax attention exactly (post-training adaptation relies on it).
func TestZeroProbeIsSoftmaxBitForBit(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 26))
	for _, s := range attnShapes {
		d := New()
		at := newAttnT(t, d)
		in := newAttnData(rng, s, engine.F32)
		soft := runAttention(t, d, at, s, engine.F32, in, false)
		in.r = make([]float64, len(in.r))
		par := runAttention(t, d, at, s, engine.F32, in, true)
		a, b, c := soft.o.Storage().([]float32), par.o.Storage().([]float32), par.vbar.Storage().([]float32)
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(b[i]) || math.Float32bits(a[i]) != math.Float32bits(c[i]) {
				t.Fatalf("%v: r = 0 output %v (vbar %v) differs from softmax %v at %d", s, b[i], c[i], a[i], i)
			}
		}
		la, lb := soft.lse.Storage().([]float32), par.lse.Storage().([]float32)
		for i := range la {
			if la[i] != lb[i] {
				t.Fatalf("%v: r = 0 lse %v differs from softmax %v at %d", s, lb[i], la[i], i)
			}
		}
	}
}

// runBackward runs the device forward then backward, returning dq, dk, dv, dr.
func runBackward(t *testing.T, d *Device, s attnShape, dt engine.DType, in attnData, parallax bool) (dq, dk, dv, dr []float64) {
	t.Helper()
	at := newAttnT(t, d)
	f := runAttention(t, d, at, s, dt, in, parallax)
	a := engine.AttentionBackwardArgs{
		Q: at.up(dt, in.q, s.QShape()...), K: at.up(dt, in.k, s.KVShape()...), V: at.up(dt, in.v, s.KVShape()...),
		O: f.o, DO: at.up(dt, in.dO, s.QShape()...), LSE: f.lse, Vbar: f.vbar, Tbar: f.tbar,
		DQ: at.new(dt, s.QShape()...), DK: at.new(dt, s.KVShape()...), DV: at.new(dt, s.KVShape()...),
		AttentionOpts: s.Opts(),
	}
	if parallax {
		a.R = at.up(dt, in.r, s.QShape()...)
		a.DR = at.new(dt, s.QShape()...)
	}
	// Gradients are overwritten, not accumulated: start from garbage.
	for _, x := range []*engine.Tensor{a.DQ, a.DK, a.DV, a.DR} {
		if x != nil {
			if b, ok := x.Storage().([]float32); ok {
				for i := range b {
					b[i] = 7
				}
			}
		}
	}
	if err := d.AttentionBackward(a); err != nil {
		t.Fatal(err)
	}
	dq, dk, dv = down(t, a.DQ), down(t, a.DK), down(t, a.DV)
	if parallax {
		dr = down(t, a.DR)
	}
	return
}

func TestAttentionBackwardMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 28))
	worst := 0.0
	for _, s := range attnShapes {
		for _, parallax := range []bool{false, true} {
			t.Run(s.String()+" "+kinds(parallax), func(t *testing.T) {
				in := newAttnData(rng, s, engine.F32)
				var r []float64
				if parallax {
					r = in.r
				}
				wq, wk, wv, wr := ref.AttentionBackward(s.Dims(), in.q, in.k, in.v, r, in.dO)
				dq, dk, dv, dr := runBackward(t, New(), s, engine.F32, in, parallax)
				worst = max(worst, attnNearOrZero(t, "dq", dq, wq, 1e-4))
				worst = max(worst, attnNearOrZero(t, "dk", dk, wk, 1e-4))
				worst = max(worst, attnNearOrZero(t, "dv", dv, wv, 1e-4))
				if parallax {
					worst = max(worst, attnNearOrZero(t, "dr", dr, wr, 1e-4))
				}
			})
		}
	}
	t.Logf("largest relative gradient error: %.3g", worst)
}

func TestAttentionBackwardBF16(t *testing.T) {
	rng := rand.New(rand.NewPCG(29, 30))
	for _, s := range []attnShape{attnShapes[3], attnShapes[4]} {
		in := newAttnData(rng, s, engine.BF16)
		wq, wk, wv, wr := ref.AttentionBackward(s.Dims(), in.q, in.k, in.v, in.r, in.dO)
		dq, dk, dv, dr := runBackward(t, New(), s, engine.BF16, in, true)
		tol := enginetest.Tol(engine.BF16, s.Lk)
		attnNear(t, s.String()+" dq", dq, wq, tol)
		attnNear(t, s.String()+" dk", dk, wk, tol)
		attnNear(t, s.String()+" dv", dv, wv, tol)
		attnNear(t, s.String()+" dr", dr, wr, tol)
	}
}

// TestAttentionIndependentOfThreads: every output row is computed by one
// work item whatever the worker count, so the results agree bit for bit.
func TestAttentionIndependentOfThreads(t *testing.T) {
	s := attnShape{B: 2, Hq: 4, Hkv: 2, Lq: 70, Lk: 70, D: 16, Causal: true, Window: 0}
	in := newAttnData(rand.New(rand.NewPCG(31, 32)), s, engine.F32)
	var first [4][]float64
	for n, threads := range []int{1, 3, 8} {
		d := &Device{threads: threads}
		dq, dk, dv, dr := runBackward(t, d, s, engine.F32, in, true)
		got := [4][]float64{dq, dk, dv, dr}
		if n == 0 {
			first = got
			continue
		}
		for g := range got {
			for i := range got[g] {
				if got[g][i] != first[g][i] {
					t.Fatalf("%d threads: gradient %d differs at %d from 1 thread", threads, g, i)
				}
			}
		}
	}
}

func TestDecodeAttentionMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(33, 34))
	type decCase struct {
		B, Hq, Hkv, Lq, Cap, D, Window int
		lens                           []int
	}
	cases := []decCase{
		{3, 4, 2, 1, 100, 16, 0, []int{100, 1, 57}},
		{2, 4, 1, 3, 70, 32, 0, []int{3, 70}},
		{2, 2, 2, 2, 130, 8, 20, []int{130, 45}},
		{1, 8, 2, 1, 9, 128, 0, []int{9}},
	}
	worst := 0.0
	for _, c := range cases {
		for _, parallax := range []bool{false, true} {
			for _, splits := range []int{0, 1, 2, 3, 7, 200} {
				name := fmt.Sprintf("B%d Hq%d Hkv%d Lq%d Cap%d D%d w%d lens%v %s splits%d",
					c.B, c.Hq, c.Hkv, c.Lq, c.Cap, c.D, c.Window, c.lens, kinds(parallax), splits)
				t.Run(name, func(t *testing.T) {
					d := New()
					at := newAttnT(t, d)
					nq, nk := c.B*c.Hq*c.Lq*c.D, c.B*c.Hkv*c.Cap*c.D
					q := enginetest.Normal(rng, engine.F32, nq, 1)
					kc := enginetest.Normal(rng, engine.F32, nk, 1)
					vc := enginetest.Normal(rng, engine.F32, nk, 1)
					var r []float64
					qs := []int{c.B, c.Hq, c.Lq, c.D}
					a := engine.DecodeArgs{
						Q: at.up(engine.F32, q, qs...), KCache: at.up(engine.F32, kc, c.B, c.Hkv, c.Cap, c.D),
						VCache: at.up(engine.F32, vc, c.B, c.Hkv, c.Cap, c.D),
						O:      at.new(engine.F32, qs...), Window: c.Window, Splits: splits,
					}
					if parallax {
						r = enginetest.Normal(rng, engine.F32, nq, 1/math.Sqrt(float64(c.D)))
						a.R = at.up(engine.F32, r, qs...)
					}
					lens := make([]float64, c.B)
					for b, n := range c.lens {
						lens[b] = float64(n)
					}
					a.Lens = at.up(engine.I32, lens, c.B)
					if err := d.DecodeAttention(a); err != nil {
						t.Fatal(err)
					}
					dims := ref.Dims{B: c.B, Hq: c.Hq, Hkv: c.Hkv, Lq: c.Lq, D: c.D, Scale: 1 / math.Sqrt(float64(c.D)), Window: c.Window}
					want := ref.DecodeAttention(dims, q, r, kc, vc, c.Cap, c.lens)
					worst = max(worst, attnNear(t, "o", down(t, a.O), want, 1e-5))
				})
			}
		}
	}
	t.Logf("largest relative error: %.3g", worst)
}

func TestPartialMergeIsExact(t *testing.T) {
	// Folding keys in one run or in two runs merged must agree to rounding.
	rng := rand.New(rand.NewPCG(35, 36))
	const D, n = 8, 50
	s := make([]float32, n)
	tt := make([]float32, n)
	v := make([]float32, n*D)
	for i := range s {
		s[i], tt[i] = float32(rng.NormFloat64()*3), float32(rng.NormFloat64())
	}
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	mk := func() *partial {
		p := &partial{o1: make([]float32, D), o2: make([]float32, D)}
		p.reset()
		return p
	}
	whole, a, b, empty := mk(), mk(), mk(), mk()
	whole.absorb(append([]float32(nil), s...), append([]float32(nil), tt...), v)
	a.absorb(append([]float32(nil), s[:20]...), append([]float32(nil), tt[:20]...), v[:20*D])
	b.absorb(append([]float32(nil), s[20:]...), append([]float32(nil), tt[20:]...), v[20*D:])
	a.merge(empty)
	empty.merge(b)
	a.merge(empty)
	o1, o2 := make([]float32, D), make([]float32, D)
	l1, t1 := whole.finish(o1, nil)
	l2, t2 := a.finish(o2, nil)
	if e := enginetest.RelErr(f64s(o2), f64s(o1)); e > 1e-6 || math.Abs(float64(l1-l2)) > 1e-6 || math.Abs(float64(t1-t2)) > 1e-6 {
		t.Errorf("merged state differs: o err %.3g, lse %v vs %v, tbar %v vs %v", e, l2, l1, t2, t1)
	}
}

func f64s(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

// llaShapes see more than D keys per row, or are used with lambda > 0.
var llaShapes = []attnShape{
	{B: 1, Hq: 2, Hkv: 1, Lq: 12, Lk: 12, D: 4, Causal: true, Window: 0},
	{B: 2, Hq: 2, Hkv: 2, Lq: 5, Lk: 40, D: 8, Causal: true, Window: 0},
	{B: 1, Hq: 4, Hkv: 2, Lq: 9, Lk: 30, D: 8, Causal: true, Window: 12},
	{B: 1, Hq: 2, Hkv: 1, Lq: 6, Lk: 33, D: 16, Causal: false, Window: 0},
	{B: 1, Hq: 1, Hkv: 1, Lq: 3, Lk: 20, D: 128, Causal: true, Window: 0},
}

func runLLA(t *testing.T, d *Device, s attnShape, in attnData, lambda float32, solver engine.LLASolver, tol float32) (o, rho, eta []float64, err error) {
	t.Helper()
	at := newAttnT(t, d)
	a := engine.LLAArgs{
		Q: at.up(engine.F32, in.q, s.QShape()...), K: at.up(engine.F32, in.k, s.KVShape()...),
		V: at.up(engine.F32, in.v, s.KVShape()...), O: at.new(engine.F32, s.QShape()...),
		RhoStar: at.new(engine.F32, s.QShape()...), Eta: at.new(engine.F32, s.B, s.Hq, s.Lq),
		Lambda: lambda, Solver: solver, Tol: tol, AttentionOpts: s.Opts(),
	}
	if err := d.LLA(a); err != nil {
		return nil, nil, nil, err
	}
	return down(t, a.O), down(t, a.RhoStar), down(t, a.Eta), nil
}

func TestLLAMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(37, 38))
	worst := map[string]float64{}
	defer func() {
		for _, k := range []string{"direct tol 0", "cg tol 1e-10", "cg tol 0"} {
			t.Logf("%s: largest relative error of o, rho*, eta %.3g", k, worst[k])
		}
	}()
	for _, s := range llaShapes {
		for _, lambda := range []float32{0.5, 0.01} {
			in := newAttnData(rng, s, engine.F32)
			wo, wrho, weta := ref.LLA(s.Dims(), in.q, in.k, in.v, float64(lambda))
			for _, c := range []struct {
				solver engine.LLASolver
				tol    float32
				want   float64
			}{{engine.SolveDirect, 0, 1e-5}, {engine.SolveCG, 1e-10, 1e-5}, {engine.SolveCG, 0, 1e-3}} {
				if c.tol == 0 && c.solver == engine.SolveCG && lambda < 0.5 {
					// The default tolerance (1e-6 relative residual) costs
					// accuracy in proportion to the condition number, up
					// to 1e4 for a small ridge.
					continue
				}
				t.Run(fmt.Sprintf("%v lambda %v %v tol %v", s, lambda, c.solver, c.tol), func(t *testing.T) {
					o, rho, eta, err := runLLA(t, New(), s, in, lambda, c.solver, c.tol)
					if err != nil {
						t.Fatal(err)
					}
					e := attnNear(t, "o", o, wo, c.want)
					e = max(e, attnNear(t, "rho*", rho, wrho, c.want))
					e = max(e, attnNear(t, "eta", eta, weta, c.want))
					key := fmt.Sprintf("%v tol %v", c.solver, c.tol)
					worst[key] = max(worst[key], e)
				})
			}
		}
	}
}

func TestLLARidgeZeroWithEnoughKeys(t *testing.T) {
	s := attnShape{B: 1, Hq: 2, Hkv: 1, Lq: 4, Lk: 40, D: 8, Causal: false, Window: 0}
	in := newAttnData(rand.New(rand.NewPCG(39, 40)), s, engine.F32)
	wo, _, _ := ref.LLA(s.Dims(), in.q, in.k, in.v, 0)
	for _, solver := range []engine.LLASolver{engine.SolveDirect, engine.SolveCG} {
		o, _, _, err := runLLA(t, New(), s, in, 0, solver, 1e-10)
		if err != nil {
			t.Fatalf("%v: %v", solver, err)
		}
		attnNear(t, solver.String()+" o", o, wo, 1e-4)
	}
}

// TestLLAIsParallaxWithAmplifiedProbe checks on the device that LLA equals
// Parallax attention with the probe r = (1 + eta) rho*.
func TestLLAIsParallaxWithAmplifiedProbe(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	for _, s := range llaShapes {
		in := newAttnData(rng, s, engine.F32)
		o, rho, eta, err := runLLA(t, New(), s, in, 0.3, engine.SolveDirect, 0)
		if err != nil {
			t.Fatal(err)
		}
		for n, e := range eta {
			if !(e >= 0) {
				t.Fatalf("%v: eta %v of row %d is not >= 0", s, e, n)
			}
			for x := range s.D {
				in.r[n*s.D+x] = float64(float32((1 + e) * rho[n*s.D+x]))
			}
		}
		d := New()
		got := runAttention(t, d, newAttnT(t, d), s, engine.F32, in, true)
		attnNear(t, s.String()+": Parallax with r = (1 + eta) rho* vs LLA", down(t, got.o), o, 1e-4)
	}
}

func TestLLASingularRowsAreErrors(t *testing.T) {
	// Causal with lambda = 0: the first rows see at most D keys.
	s := attnShape{B: 1, Hq: 1, Hkv: 1, Lq: 12, Lk: 12, D: 4, Causal: true, Window: 0}
	in := newAttnData(rand.New(rand.NewPCG(43, 44)), s, engine.F32)
	for _, solver := range []engine.LLASolver{engine.SolveCG, engine.SolveDirect} {
		d := New()
		_, _, _, err := runLLA(t, d, s, in, 0, solver, 0)
		if err == nil || !strings.Contains(err.Error(), "position 0") || !strings.Contains(err.Error(), "lambda > 0") {
			t.Errorf("%v: lambda 0 with 1 visible key gave %v, want an error naming position 0", solver, err)
		}
		if d.Sync() == nil {
			t.Errorf("%v: Sync did not report the error", solver)
		}
	}
	// Many copies of one key: Sig has rank 1 whatever the count.
	s = attnShape{B: 1, Hq: 1, Hkv: 1, Lq: 2, Lk: 10, D: 4, Causal: false, Window: 0}
	in = newAttnData(rand.New(rand.NewPCG(45, 46)), s, engine.F32)
	for j := range s.Lk {
		copy(in.k[j*s.D:(j+1)*s.D], in.k[:s.D])
	}
	for _, solver := range []engine.LLASolver{engine.SolveCG, engine.SolveDirect} {
		_, _, _, err := runLLA(t, New(), s, in, 0, solver, 0)
		if err == nil || !strings.Contains(err.Error(), "row (b 0, head 0, position 0") {
			t.Errorf("%v: degenerate keys gave %v, want an error naming the row", solver, err)
		}
	}
}

var linShapes = []attnShape{
	{B: 1, Hq: 1, Hkv: 1, Lq: 7, Lk: 7, D: 4, Causal: true, Window: 0},
	{B: 2, Hq: 4, Hkv: 2, Lq: 33, Lk: 33, D: 8, Causal: true, Window: 0},
	{B: 1, Hq: 2, Hkv: 1, Lq: 7, Lk: 40, D: 16, Causal: true, Window: 0},
	{B: 1, Hq: 4, Hkv: 1, Lq: 50, Lk: 50, D: 8, Causal: true, Window: 9},
	{B: 1, Hq: 2, Hkv: 2, Lq: 9, Lk: 12, D: 8, Causal: false, Window: 0},
	{B: 1, Hq: 2, Hkv: 1, Lq: 1, Lk: 100, D: 32, Causal: true, Window: 0},
	{B: 1, Hq: 1, Hkv: 1, Lq: 10, Lk: 10, D: 8, Causal: true, Window: 1},
	{B: 1, Hq: 2, Hkv: 1, Lq: 30, Lk: 30, D: 64, Causal: true, Window: 7},
	{B: 1, Hq: 1, Hkv: 1, Lq: 20, Lk: 20, D: 64, Causal: false, Window: 0},
}

// TestLinearAttentionMatchesReference runs each shape on one worker and on
// eight (which splits every head's D x D sums into slabs).
func TestLinearAttentionMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(47, 48))
	worstF, worstB := 0.0, 0.0
	defer func() { t.Logf("largest relative errors: forward %.3g, backward %.3g", worstF, worstB) }()
	for n, s := range linShapes {
		for _, affine := range []bool{false, true} {
			name := s.String() + " plain"
			if affine {
				name = s.String() + " affine"
			}
			d := &Device{threads: 1}
			if n%2 == 1 {
				d = &Device{threads: 8}
				name += " 8 threads"
			}
			t.Run(name, func(t *testing.T) {
				at := newAttnT(t, d)
				in := newAttnData(rng, s, engine.F32)
				R, K, V := at.up(engine.F32, in.r, s.QShape()...), at.up(engine.F32, in.k, s.KVShape()...), at.up(engine.F32, in.v, s.KVShape()...)
				O := at.new(engine.F32, s.QShape()...)
				if err := d.LinearAttention(engine.LinearAttentionArgs{R: R, K: K, V: V, O: O, Affine: affine, AttentionOpts: s.Opts()}); err != nil {
					t.Fatal(err)
				}
				worstF = max(worstF, attnNear(t, "o", down(t, O), ref.LinearAttention(s.Dims(), in.r, in.k, in.v, affine), 1e-5))
				ba := engine.LinearAttentionBackwardArgs{R: R, K: K, V: V, DO: at.up(engine.F32, in.dO, s.QShape()...),
					DR: at.new(engine.F32, s.QShape()...), DK: at.new(engine.F32, s.KVShape()...), DV: at.new(engine.F32, s.KVShape()...),
					Affine: affine, AttentionOpts: s.Opts()}
				if err := d.LinearAttentionBackward(ba); err != nil {
					t.Fatal(err)
				}
				wr, wk, wv := ref.LinearAttentionBackward(s.Dims(), in.r, in.k, in.v, in.dO, affine)
				worstB = max(worstB, attnNear(t, "dr", down(t, ba.DR), wr, 1e-4))
				worstB = max(worstB, attnNear(t, "dk", down(t, ba.DK), wk, 1e-4))
				worstB = max(worstB, attnNear(t, "dv", down(t, ba.DV), wv, 1e-4))
			})
		}
	}
}

func TestCorrectionRatio(t *testing.T) {
	d := New()
	at := newAttnT(t, d)
	rng := rand.New(rand.NewPCG(49, 50))
	o := enginetest.Normal(rng, engine.F32, 6*16, 1)
	vbar := enginetest.Normal(rng, engine.F32, 6*16, 1)
	for x := 32; x < 48; x++ {
		vbar[x] = 0 // a row with vbar = 0 counts 0
	}
	out := at.new(engine.F32, 1)
	if err := d.CorrectionRatio(out, at.up(engine.F32, o, 2, 3, 16), at.up(engine.F32, vbar, 2, 3, 16)); err != nil {
		t.Fatal(err)
	}
	attnNear(t, "cor", down(t, out), []float64{ref.CorrectionRatio(o, vbar, 16)}, 1e-6)
}

// TestAttentionBadInputsAreErrors: wrong shapes and values give argument
// errors naming the problem, never a panic.
func TestAttentionBadInputsAreErrors(t *testing.T) {
	d := New()
	at := newAttnT(t, d)
	f := engine.F32
	q := at.new(f, 1, 4, 5, 8)
	k := at.new(f, 1, 2, 6, 8)
	v := at.new(f, 1, 2, 6, 8)
	o := at.new(f, 1, 4, 5, 8)
	lse := at.new(f, 1, 4, 5)
	lens := func(n ...float64) *engine.Tensor { return at.up(engine.I32, n, len(n)) }
	cases := []struct {
		name, want string
		run        func() error
	}{
		{"q of rank 3", "rank 4", func() error {
			return d.Attention(engine.AttentionArgs{Q: at.new(f, 4, 5, 8), K: k, V: v, O: o})
		}},
		{"heads not a multiple", "multiple", func() error {
			return d.Attention(engine.AttentionArgs{Q: at.new(f, 1, 3, 5, 8), K: k, V: v, O: at.new(f, 1, 3, 5, 8)})
		}},
		{"head dims differ", "does not match", func() error {
			return d.Attention(engine.AttentionArgs{Q: q, K: at.new(f, 1, 2, 6, 4), V: at.new(f, 1, 2, 6, 4), O: o})
		}},
		{"causal Lq > Lk", "Lq <= Lk", func() error {
			return d.Attention(engine.AttentionArgs{Q: at.new(f, 1, 4, 9, 8), K: k, V: v, O: at.new(f, 1, 4, 9, 8),
				AttentionOpts: engine.AttentionOpts{Causal: true}})
		}},
		{"window without causal", "causal", func() error {
			return d.Attention(engine.AttentionArgs{Q: q, K: k, V: v, O: o, AttentionOpts: engine.AttentionOpts{Window: 2}})
		}},
		{"backward without lse", "lse", func() error {
			return d.AttentionBackward(engine.AttentionBackwardArgs{Q: q, K: k, V: v, O: o, DO: o,
				DQ: at.new(f, 1, 4, 5, 8), DK: at.new(f, 1, 2, 6, 8), DV: at.new(f, 1, 2, 6, 8)})
		}},
		{"backward with r but no tbar", "tbar", func() error {
			return d.AttentionBackward(engine.AttentionBackwardArgs{Q: q, K: k, V: v, R: q, O: o, DO: o, LSE: lse,
				DQ: at.new(f, 1, 4, 5, 8), DK: at.new(f, 1, 2, 6, 8), DV: at.new(f, 1, 2, 6, 8), DR: at.new(f, 1, 4, 5, 8)})
		}},
		{"decode lens below Lq", "lens[0] = 4", func() error {
			return d.DecodeAttention(engine.DecodeArgs{Q: q, KCache: k, VCache: v, O: o, Lens: lens(4)})
		}},
		{"decode lens above capacity", "lens[0] = 7", func() error {
			return d.DecodeAttention(engine.DecodeArgs{Q: q, KCache: k, VCache: v, O: o, Lens: lens(7)})
		}},
		{"decode negative lens", "lens[0] = -1", func() error {
			return d.DecodeAttention(engine.DecodeArgs{Q: q, KCache: k, VCache: v, O: o, Lens: lens(-1)})
		}},
		{"decode lens of wrong dtype", "i32", func() error {
			return d.DecodeAttention(engine.DecodeArgs{Q: q, KCache: k, VCache: v, O: o, Lens: at.new(f, 1)})
		}},
		{"lla negative lambda", "lambda", func() error {
			return d.LLA(engine.LLAArgs{Q: q, K: k, V: v, O: o, Lambda: -1})
		}},
		{"linear attention o missing", "o", func() error {
			return d.LinearAttention(engine.LinearAttentionArgs{R: q, K: k, V: v})
		}},
		{"linear backward dK wrong shape", "dK", func() error {
			return d.LinearAttentionBackward(engine.LinearAttentionBackwardArgs{R: q, K: k, V: v, DO: o,
				DR: at.new(f, 1, 4, 5, 8), DK: at.new(f, 1, 2, 5, 8), DV: at.new(f, 1, 2, 6, 8)})
		}},
		{"correction ratio out not scalar", "out", func() error { return d.CorrectionRatio(at.new(f, 2), o, o) }},
		{"tensor of another device", "lives on", func() error {
			return d.Attention(engine.AttentionArgs{Q: q, K: k, V: v, O: func() *engine.Tensor {
				x, _ := New().Alloc(f, 1, 4, 5, 8)
				return x
			}()})
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var err error
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("panicked: %v", p)
					}
				}()
				err = c.run()
			}()
			var ae *engine.ArgError
			if !errors.As(err, &ae) {
				t.Fatalf("want an *engine.ArgError, got %v", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not mention %q", err, c.want)
			}
		})
	}
	d.Sync() // clear the recorded decode errors
}

func benchAttention(b *testing.B, backward, parallax bool) {
	s := attnShape{B: 1, Hq: 4, Hkv: 4, Lq: 1024, Lk: 1024, D: 64, Causal: true, Window: 0}
	d := New()
	at := &attnT{ts: enginetest.NewTensors(d)}
	in := newAttnData(rand.New(rand.NewPCG(1, 1)), s, engine.F32)
	tq := func(v []float64) *engine.Tensor { return at.ts.Up(engine.F32, v, s.QShape()...) }
	tk := func(v []float64) *engine.Tensor { return at.ts.Up(engine.F32, v, s.KVShape()...) }
	fa := engine.AttentionArgs{Q: tq(in.q), K: tk(in.k), V: tk(in.v), O: tq(in.q), LSE: at.ts.New(engine.F32, s.B, s.Hq, s.Lq),
		AttentionOpts: s.Opts()}
	if parallax {
		fa.R, fa.Vbar, fa.Tbar = tq(in.r), tq(in.q), at.ts.New(engine.F32, s.B, s.Hq, s.Lq)
	}
	if err := d.Attention(fa); err != nil {
		b.Fatal(err)
	}
	ba := engine.AttentionBackwardArgs{Q: fa.Q, K: fa.K, V: fa.V, R: fa.R, O: fa.O, DO: tq(in.dO), LSE: fa.LSE,
		Vbar: fa.Vbar, Tbar: fa.Tbar, DQ: tq(in.q), DK: tk(in.k), DV: tk(in.v), AttentionOpts: s.Opts()}
	if parallax {
		ba.DR = tq(in.q)
	}
	pairs := float64(s.B*s.Hq) * float64(s.Lq) * float64(s.Lk+1) / 2
	b.ResetTimer()
	for range b.N {
		var err error
		if backward {
			err = d.AttentionBackward(ba)
		} else {
			err = d.Attention(fa)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(pairs*float64(b.N)/b.Elapsed().Seconds()/1e6, "Mpairs/s")
}

// BenchmarkAttentionForward: B1 H4 L1024 D64 causal.
func BenchmarkAttentionForward(b *testing.B) {
	b.Run("softmax", func(b *testing.B) { benchAttention(b, false, false) })
	b.Run("parallax", func(b *testing.B) { benchAttention(b, false, true) })
}

// BenchmarkAttentionBackward: B1 H4 L1024 D64 causal.
func BenchmarkAttentionBackward(b *testing.B) {
	b.Run("softmax", func(b *testing.B) { benchAttention(b, true, false) })
	b.Run("parallax", func(b *testing.B) { benchAttention(b, true, true) })
}

// TestAttentionEmptyShapes: zero batch, zero positions and zero rows are
// valid and do nothing (no panic, no error).
func TestAttentionEmptyShapes(t *testing.T) {
	d := New()
	at := newAttnT(t, d)
	f := engine.F32
	for _, s := range []attnShape{{B: 0, Hq: 2, Hkv: 1, Lq: 3, Lk: 3, D: 8, Causal: true, Window: 0}, {B: 1, Hq: 2, Hkv: 1, Lq: 0, Lk: 0, D: 8, Causal: true, Window: 0}, {B: 1, Hq: 2, Hkv: 2, Lq: 0, Lk: 5, D: 8, Causal: false, Window: 0}} {
		q, k := at.new(f, s.QShape()...), at.new(f, s.KVShape()...)
		stat := func() *engine.Tensor { return at.new(f, s.B, s.Hq, s.Lq) }
		errs := []error{
			d.Attention(engine.AttentionArgs{Q: q, K: k, V: k, R: q, O: at.new(f, s.QShape()...), LSE: stat(), Tbar: stat(), AttentionOpts: s.Opts()}),
			d.AttentionBackward(engine.AttentionBackwardArgs{Q: q, K: k, V: k, R: q, O: q, DO: q, LSE: stat(), Vbar: q, Tbar: stat(),
				DQ: at.new(f, s.QShape()...), DK: at.new(f, s.KVShape()...), DV: at.new(f, s.KVShape()...), DR: at.new(f, s.QShape()...),
				AttentionOpts: s.Opts()}),
			d.LLA(engine.LLAArgs{Q: q, K: k, V: k, O: at.new(f, s.QShape()...), Lambda: 1, AttentionOpts: s.Opts()}),
			d.LinearAttention(engine.LinearAttentionArgs{R: q, K: k, V: k, O: at.new(f, s.QShape()...), Affine: true, AttentionOpts: s.Opts()}),
			d.LinearAttentionBackward(engine.LinearAttentionBackwardArgs{R: q, K: k, V: k, DO: q, DR: at.new(f, s.QShape()...),
				DK: at.new(f, s.KVShape()...), DV: at.new(f, s.KVShape()...), Affine: true, AttentionOpts: s.Opts()}),
		}
		if s.B == 0 || s.Lq <= s.Lk {
			errs = append(errs, d.DecodeAttention(engine.DecodeArgs{Q: q, R: q, KCache: k, VCache: k, O: at.new(f, s.QShape()...),
				Lens: at.up(engine.I32, make([]float64, s.B), s.B)}))
		}
		for n, err := range errs {
			if err != nil {
				t.Errorf("%v: op %d: %v", s, n, err)
			}
		}
	}
	out := at.new(f, 1)
	if err := d.CorrectionRatio(out, at.new(f, 0, 8), at.new(f, 0, 8)); err != nil || down(t, out)[0] != 0 {
		t.Errorf("correction ratio of no rows: %v, %v", err, down(t, out))
	}
}
