package enginetest

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/ref"
)

// Conformance cases of the attention family: attention forward and backward
// (softmax and Parallax), decode attention over a KV cache, exact LLA, plain
// and affine linear attention and the correction ratio, each against the
// float64 reference in package ref on inputs drawn at the case's dtype.
// Outputs are stored at that dtype (statistics in F32).
//
// Tolerances (relative max-norm): f32 forward outputs max(2e-5, Tol(F32,
// Lk)) and gradients max(1e-4, Tol(F32, Lk D)), which leave room for f32
// accumulation orders other than the CPU's; bf16 and f16 follow Tol(dt)
// (docs/MATH.md section 8: within 1e-2 for bf16 outputs and gradients). The
// forward's o and vbar and every attention gradient take the larger of that
// and their rounding-model bound (bounds.go, docs/ENGINE.md), which exceeds
// it when the output is ill-conditioned. Every
// gradient is also compared at a few random coordinates with float64 central
// finite differences of the reference forward's loss sum(o * dO).

func init() { register(attentionCases) }

// AttnShape is one attention-family shape: batch, query and KV heads,
// query and key lengths, head dimension, causal mask and sliding window.
type AttnShape struct {
	B, Hq, Hkv, Lq, Lk, D int
	Causal                bool
	Window                int
}

// String names the shape as the conformance tables do.
func (c AttnShape) String() string {
	s := fmt.Sprintf("B%d Hq%d Hkv%d Lq%d Lk%d D%d", c.B, c.Hq, c.Hkv, c.Lq, c.Lk, c.D)
	if c.Causal {
		s += " causal"
	}
	if c.Window > 0 {
		s += fmt.Sprintf(" w%d", c.Window)
	}
	return s
}

// Dims is the shape as the float64 reference takes it (scale 1/sqrt(D)).
func (c AttnShape) Dims() ref.Dims {
	return ref.Dims{B: c.B, Hq: c.Hq, Hkv: c.Hkv, Lq: c.Lq, Lk: c.Lk, D: c.D,
		Scale: 1 / math.Sqrt(float64(c.D)), Causal: c.Causal, Window: c.Window}
}

// Opts are the shape's mask options.
func (c AttnShape) Opts() engine.AttentionOpts {
	return engine.AttentionOpts{Causal: c.Causal, Window: c.Window}
}

// QShape is the shape of Q (and R, O): [B, Hq, Lq, D].
func (c AttnShape) QShape() []int { return []int{c.B, c.Hq, c.Lq, c.D} }

// KVShape is the shape of K and V: [B, Hkv, Lk, D].
func (c AttnShape) KVShape() []int { return []int{c.B, c.Hkv, c.Lk, c.D} }

// Rows is the number of query rows, B Hq Lq.
func (c AttnShape) Rows() int { return c.B * c.Hq * c.Lq }

func (c AttnShape) nq() int     { return c.Rows() * c.D }
func (c AttnShape) nk() int     { return c.B * c.Hkv * c.Lk * c.D }
func (c AttnShape) stat() []int { return []int{c.B, c.Hq, c.Lq} }

// attnFwdTol and attnGradTol are the family's forward and gradient
// tolerances for inputs of dtype dt.
func attnFwdTol(dt engine.DType, c AttnShape) float64 {
	if dt == engine.F32 {
		return max(2e-5, Tol(dt, c.Lk))
	}
	return Tol(dt, c.Lk)
}

func attnGradTol(dt engine.DType, c AttnShape) float64 {
	if dt == engine.F32 {
		return max(1e-4, Tol(dt, c.Lk*c.D))
	}
	return Tol(dt, c.Lk*c.D)
}

// attnFDStep and attnFDPoints: finite differences on O(1) inputs, a few
// coordinates per gradient.
const (
	attnFDStep   = 1e-4
	attnFDPoints = 3
)

// attnIn are a case's inputs: q, k, v standard normal, the probe r scaled by
// 1/sqrt(D) so r.k is of order one, dO standard normal.
type attnIn struct{ q, k, v, r, dO []float64 }

func newAttnIn(rng *rand.Rand, dt engine.DType, c AttnShape) attnIn {
	return attnIn{
		q: Normal(rng, dt, c.nq(), 1), k: Normal(rng, dt, c.nk(), 1), v: Normal(rng, dt, c.nk(), 1),
		r: Normal(rng, dt, c.nq(), 1/math.Sqrt(float64(c.D))), dO: Normal(rng, dt, c.nq(), 1),
	}
}

func attnKind(parallax bool) string {
	if parallax {
		return "parallax"
	}
	return "softmax"
}

// attnMetrics gathers a case's metrics and its first error.
type attnMetrics struct {
	list []Metric
	err  error
}

func (m *attnMetrics) cmp(name string, t *engine.Tensor, want []float64, tol float64) {
	if m.err != nil || t == nil {
		return
	}
	x, err := Compare(name, t, want, tol)
	if err != nil {
		m.err = err
		return
	}
	m.list = append(m.list, x)
}

// fd spot-checks gradient tensor t (reference gradient want) against
// finite differences of loss at attnFDPoints coordinates of x.
func (m *attnMetrics) fd(rng *rand.Rand, name string, t *engine.Tensor, want, x []float64, loss func() float64, tol float64) {
	if m.err != nil || t == nil {
		return
	}
	got, err := Download(t)
	if err != nil {
		m.err = fmt.Errorf("%s: %w", name, err)
		return
	}
	idx := Pick(rng, len(x), attnFDPoints)
	fd := Grad(func([]float64) float64 { return loss() }, x, idx, attnFDStep)
	m.list = append(m.list, GradMetric(name+" fd", got, want, idx, fd, tol))
}

func (m *attnMetrics) result() ([]Metric, error) { return m.list, m.err }

func attnDotAll(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

func attentionCases(o Options, dt engine.DType) []Case {
	fwd := []AttnShape{
		{1, 2, 2, 16, 16, 16, true, 0},
		{2, 4, 2, 7, 9, 16, true, 3},
		{1, 4, 1, 1, 37, 32, true, 0},
		{2, 2, 1, 5, 12, 8, false, 0},
		{1, 2, 1, 70, 70, 64, true, 0},
		{1, 2, 1, 33, 100, 128, true, 16},
		// Small heads over several 32-key chunks: the CUDA SIMT kernels'
		// lane-per-key form (D <= 16).
		{2, 4, 2, 70, 70, 8, true, 0},
		{1, 2, 1, 40, 100, 16, false, 0},
	}
	bwd := []AttnShape{
		{1, 2, 2, 9, 9, 8, true, 0},
		{2, 4, 2, 7, 12, 16, true, 4},
		{1, 4, 1, 1, 20, 16, true, 0},
		{1, 2, 1, 6, 10, 8, false, 0},
		{1, 2, 1, 70, 70, 32, true, 0},
		{2, 4, 2, 70, 70, 8, true, 0},
		{1, 2, 1, 45, 80, 16, true, 20},
	}
	lla := []AttnShape{
		{1, 2, 1, 9, 9, 8, true, 0},
		{2, 2, 2, 5, 30, 16, true, 10},
		{1, 4, 2, 6, 20, 8, false, 0},
	}
	lin := []AttnShape{
		{1, 2, 2, 9, 9, 8, true, 0},
		{2, 4, 2, 7, 12, 16, true, 4},
		{1, 2, 1, 6, 10, 8, false, 0},
		{1, 2, 1, 40, 40, 32, true, 0},
	}
	type decCfg struct {
		B, Hq, Hkv, Lq, Cap, D, Window int
		lens                           []int
	}
	dec := []decCfg{
		{3, 4, 2, 1, 50, 16, 0, []int{50, 1, 23}},
		{2, 8, 2, 2, 70, 32, 0, []int{2, 65}},
		{2, 2, 1, 1, 100, 64, 24, []int{100, 40}},
		// Several tokens a sequence: 20 and 36 query rows a group, more
		// than one 8-row tile on the tensor-core path, the last one short.
		{1, 8, 2, 5, 90, 128, 0, []int{90}},
		{2, 4, 1, 9, 80, 64, 16, []int{80, 9}},
	}
	if o.Short {
		fwd, bwd, lla, lin, dec = fwd[:3], bwd[:3], lla[:2], lin[:2], dec[:2]
	}

	var cs []Case
	for _, c := range fwd {
		for _, parallax := range []bool{false, true} {
			cs = append(cs, Case{Op: "attention", Name: c.String() + " " + attnKind(parallax), DType: dt,
				Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
					return attentionForwardCase(dev, rng, dt, c, parallax)
				}})
		}
	}
	for _, c := range bwd {
		for _, parallax := range []bool{false, true} {
			cs = append(cs, Case{Op: "attention backward", Name: c.String() + " " + attnKind(parallax), DType: dt,
				Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
					return attentionBackwardCase(dev, rng, dt, c, parallax)
				}})
		}
	}
	for _, c := range dec {
		for _, parallax := range []bool{false, true} {
			for _, splits := range []int{1, 3, 0} {
				name := fmt.Sprintf("B%d Hq%d Hkv%d Lq%d Cap%d D%d lens%v", c.B, c.Hq, c.Hkv, c.Lq, c.Cap, c.D, c.lens)
				if c.Window > 0 {
					name += fmt.Sprintf(" w%d", c.Window)
				}
				name += fmt.Sprintf(" splits%d %s", splits, attnKind(parallax))
				cs = append(cs, Case{Op: "decode attention", Name: name, DType: dt,
					Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
						d := ref.Dims{B: c.B, Hq: c.Hq, Hkv: c.Hkv, Lq: c.Lq, Lk: c.Cap, D: c.D,
							Scale: 1 / math.Sqrt(float64(c.D)), Window: c.Window}
						return decodeCase(dev, rng, dt, d, c.lens, splits, parallax)
					}})
			}
		}
	}
	for _, c := range lla {
		for _, solver := range []engine.LLASolver{engine.SolveCG, engine.SolveDirect} {
			cs = append(cs, Case{Op: "lla", Name: c.String() + " lambda1 " + solver.String(), DType: dt,
				Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
					return llaCase(dev, rng, dt, c, 1, solver)
				}})
		}
	}
	for _, c := range lin {
		for _, affine := range []bool{false, true} {
			kind := "plain"
			if affine {
				kind = "affine"
			}
			cs = append(cs, Case{Op: "linear attention", Name: c.String() + " " + kind, DType: dt,
				Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
					return linearCase(dev, rng, dt, c, affine, false)
				}})
			cs = append(cs, Case{Op: "linear attention backward", Name: c.String() + " " + kind, DType: dt,
				Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
					return linearCase(dev, rng, dt, c, affine, true)
				}})
		}
	}
	for _, shape := range [][]int{{2, 3, 5, 16}, {1, 2, 40, 64}} {
		cs = append(cs, Case{Op: "correction ratio", Name: fmt.Sprint(engine.Shape(shape)), DType: dt,
			Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
				return corCase(dev, rng, dt, shape)
			}})
	}
	return cs
}

// attentionForwardOn runs Attention on dev, returning its output tensors
// (vbar and tbar nil for softmax).
func attentionForwardOn(dev engine.Device, ts *Tensors, dt engine.DType, c AttnShape, in attnIn, parallax bool) (engine.AttentionArgs, error) {
	a := engine.AttentionArgs{
		Q: ts.Up(dt, in.q, c.QShape()...), K: ts.Up(dt, in.k, c.KVShape()...), V: ts.Up(dt, in.v, c.KVShape()...),
		O: ts.New(dt, c.QShape()...), LSE: ts.New(engine.F32, c.stat()...), AttentionOpts: c.Opts(),
	}
	if parallax {
		a.R = ts.Up(dt, in.r, c.QShape()...)
		a.Vbar = ts.New(dt, c.QShape()...)
		a.Tbar = ts.New(engine.F32, c.stat()...)
	}
	if err := ts.Err(); err != nil {
		return a, err
	}
	return a, dev.Attention(a)
}

func attentionForwardCase(dev engine.Device, rng *rand.Rand, dt engine.DType, c AttnShape, parallax bool) ([]Metric, error) {
	ts := NewTensors(dev)
	defer ts.Free()
	in := newAttnIn(rng, dt, c)
	a, err := attentionForwardOn(dev, ts, dt, c, in, parallax)
	if err != nil {
		return nil, err
	}
	var r []float64
	if parallax {
		r = in.r
	}
	o, vbar, tbar, lse := ref.Attention(c.Dims(), in.q, in.k, in.v, r)
	tol := attnFwdTol(dt, c)
	// o and vbar are weighted sums whose weights a kernel may round: their
	// tolerance is the rounding model's bound where that exceeds tol.
	eo, evbar := attnForwardErr(c.Dims(), in.q, in.k, in.v, r)
	var m attnMetrics
	m.cmp("o", a.O, o, errBoundTol(dt, tol, eo, o))
	m.cmp("lse", a.LSE, lse, tol)
	if parallax {
		m.cmp("vbar", a.Vbar, vbar, errBoundTol(dt, tol, evbar, vbar))
		m.cmp("tbar", a.Tbar, tbar, tol)
	}
	return m.result()
}

func attentionBackwardCase(dev engine.Device, rng *rand.Rand, dt engine.DType, c AttnShape, parallax bool) ([]Metric, error) {
	ts := NewTensors(dev)
	defer ts.Free()
	in := newAttnIn(rng, dt, c)
	f, err := attentionForwardOn(dev, ts, dt, c, in, parallax)
	if err != nil {
		return nil, err
	}
	a := engine.AttentionBackwardArgs{
		Q: f.Q, K: f.K, V: f.V, R: f.R, O: f.O, DO: ts.Up(dt, in.dO, c.QShape()...),
		LSE: f.LSE, Vbar: f.Vbar, Tbar: f.Tbar,
		DQ: ts.New(dt, c.QShape()...), DK: ts.New(dt, c.KVShape()...), DV: ts.New(dt, c.KVShape()...),
		AttentionOpts: c.Opts(),
	}
	var r []float64
	if parallax {
		r = in.r
		a.DR = ts.New(dt, c.QShape()...)
	}
	if err := ts.Err(); err != nil {
		return nil, err
	}
	if err := dev.AttentionBackward(a); err != nil {
		return nil, err
	}
	d := c.Dims()
	dq, dk, dv, dr := ref.AttentionBackward(d, in.q, in.k, in.v, r, in.dO)
	loss := func() float64 {
		o, _, _, _ := ref.Attention(d, in.q, in.k, in.v, r)
		return attnDotAll(o, in.dO)
	}
	// Each gradient's tolerance is the rounding model's bound where that
	// exceeds the fixed one: dS and dT are differences that cancel when p
	// concentrates on few keys, after o and vbar were rounded (see
	// attnBackwardErr and docs/ENGINE.md).
	tol := attnGradTol(dt, c)
	edq, edk, edv, edr := attnBackwardErr(d, in.q, in.k, in.v, r, in.dO)
	tq, tk, tv := errBoundTol(dt, tol, edq, dq), errBoundTol(dt, tol, edk, dk), errBoundTol(dt, tol, edv, dv)
	var m attnMetrics
	m.cmp("dq", a.DQ, dq, tq)
	m.cmp("dk", a.DK, dk, tk)
	m.cmp("dv", a.DV, dv, tv)
	m.fd(rng, "dq", a.DQ, dq, in.q, loss, tq)
	m.fd(rng, "dk", a.DK, dk, in.k, loss, tk)
	m.fd(rng, "dv", a.DV, dv, in.v, loss, tv)
	if parallax {
		tr := errBoundTol(dt, tol, edr, dr)
		m.cmp("dr", a.DR, dr, tr)
		m.fd(rng, "dr", a.DR, dr, in.r, loss, tr)
	}
	return m.result()
}

func decodeCase(dev engine.Device, rng *rand.Rand, dt engine.DType, d ref.Dims, lens []int, splits int, parallax bool) ([]Metric, error) {
	ts := NewTensors(dev)
	defer ts.Free()
	capacity := d.Lk
	qs := []int{d.B, d.Hq, d.Lq, d.D}
	cs := []int{d.B, d.Hkv, capacity, d.D}
	nq, nk := d.B*d.Hq*d.Lq*d.D, d.B*d.Hkv*capacity*d.D
	q := Normal(rng, dt, nq, 1)
	kc, vc := Normal(rng, dt, nk, 1), Normal(rng, dt, nk, 1)
	lv := make([]float64, len(lens))
	for b, n := range lens {
		lv[b] = float64(n)
	}
	a := engine.DecodeArgs{
		Q: ts.Up(dt, q, qs...), KCache: ts.Up(dt, kc, cs...), VCache: ts.Up(dt, vc, cs...),
		Lens: ts.Up(engine.I32, lv, d.B), O: ts.New(dt, qs...),
		Window: d.Window, Splits: splits,
	}
	var r []float64
	if parallax {
		r = Normal(rng, dt, nq, 1/math.Sqrt(float64(d.D)))
		a.R = ts.Up(dt, r, qs...)
	}
	if err := ts.Err(); err != nil {
		return nil, err
	}
	if err := dev.DecodeAttention(a); err != nil {
		return nil, err
	}
	maxLen := 0
	for _, n := range lens {
		maxLen = max(maxLen, n)
	}
	tol := attnFwdTol(dt, AttnShape{Lk: maxLen})
	var m attnMetrics
	m.cmp("o", a.O, ref.DecodeAttention(d, q, r, kc, vc, capacity, lens), tol)
	return m.result()
}

func llaCase(dev engine.Device, rng *rand.Rand, dt engine.DType, c AttnShape, lambda float64, solver engine.LLASolver) ([]Metric, error) {
	ts := NewTensors(dev)
	defer ts.Free()
	in := newAttnIn(rng, dt, c)
	a := engine.LLAArgs{
		Q: ts.Up(dt, in.q, c.QShape()...), K: ts.Up(dt, in.k, c.KVShape()...), V: ts.Up(dt, in.v, c.KVShape()...),
		O: ts.New(dt, c.QShape()...), RhoStar: ts.New(dt, c.QShape()...), Eta: ts.New(engine.F32, c.stat()...),
		Lambda: float32(lambda), Solver: solver, AttentionOpts: c.Opts(),
	}
	if err := ts.Err(); err != nil {
		return nil, err
	}
	if err := dev.LLA(a); err != nil {
		return nil, err
	}
	o, rho, eta := ref.LLA(c.Dims(), in.q, in.k, in.v, lambda)
	// The CG tolerance (1e-6 relative residual) and the system's condition
	// number (below ~100 with lambda = 1 and unit-scale keys) bound the
	// solve's error; outputs then carry the dtype's rounding.
	tol := 2e-4
	if dt != engine.F32 {
		tol = Tol(dt, c.Lk)
	}
	var m attnMetrics
	m.cmp("o", a.O, o, tol)
	m.cmp("rho*", a.RhoStar, rho, tol)
	m.cmp("eta", a.Eta, eta, tol)
	return m.result()
}

func linearCase(dev engine.Device, rng *rand.Rand, dt engine.DType, c AttnShape, affine, backward bool) ([]Metric, error) {
	ts := NewTensors(dev)
	defer ts.Free()
	in := newAttnIn(rng, dt, c)
	R, K, V := ts.Up(dt, in.r, c.QShape()...), ts.Up(dt, in.k, c.KVShape()...), ts.Up(dt, in.v, c.KVShape()...)
	d := c.Dims()
	var m attnMetrics
	if !backward {
		O := ts.New(dt, c.QShape()...)
		if err := ts.Err(); err != nil {
			return nil, err
		}
		if err := dev.LinearAttention(engine.LinearAttentionArgs{R: R, K: K, V: V, O: O, Affine: affine, AttentionOpts: c.Opts()}); err != nil {
			return nil, err
		}
		m.cmp("o", O, ref.LinearAttention(d, in.r, in.k, in.v, affine), attnFwdTol(dt, c))
		return m.result()
	}
	a := engine.LinearAttentionBackwardArgs{R: R, K: K, V: V, DO: ts.Up(dt, in.dO, c.QShape()...),
		DR: ts.New(dt, c.QShape()...), DK: ts.New(dt, c.KVShape()...), DV: ts.New(dt, c.KVShape()...),
		Affine: affine, AttentionOpts: c.Opts()}
	if err := ts.Err(); err != nil {
		return nil, err
	}
	if err := dev.LinearAttentionBackward(a); err != nil {
		return nil, err
	}
	dr, dk, dv := ref.LinearAttentionBackward(d, in.r, in.k, in.v, in.dO, affine)
	loss := func() float64 { return attnDotAll(ref.LinearAttention(d, in.r, in.k, in.v, affine), in.dO) }
	tol := attnGradTol(dt, c)
	m.cmp("dr", a.DR, dr, tol)
	m.cmp("dk", a.DK, dk, tol)
	m.cmp("dv", a.DV, dv, tol)
	m.fd(rng, "dr", a.DR, dr, in.r, loss, tol)
	m.fd(rng, "dk", a.DK, dk, in.k, loss, tol)
	m.fd(rng, "dv", a.DV, dv, in.v, loss, tol)
	return m.result()
}

func corCase(dev engine.Device, rng *rand.Rand, dt engine.DType, shape []int) ([]Metric, error) {
	ts := NewTensors(dev)
	defer ts.Free()
	n := engine.Shape(shape).Numel()
	D := shape[len(shape)-1]
	vbar := Normal(rng, dt, n, 1)
	o := make([]float64, n)
	corr := Normal(rng, dt, n, 0.5)
	for i := range o {
		o[i] = float64(dt.Round(float32(vbar[i] - corr[i])))
	}
	for x := 0; x < D; x++ {
		vbar[x] = 0 // a row with vbar = 0 counts 0
	}
	out := ts.New(engine.F32, 1)
	O, Vbar := ts.Up(dt, o, shape...), ts.Up(dt, vbar, shape...)
	if err := ts.Err(); err != nil {
		return nil, err
	}
	if err := dev.CorrectionRatio(out, O, Vbar); err != nil {
		return nil, err
	}
	var m attnMetrics
	// f32 norms of D terms; the inputs are exact at dt, so only the
	// device's arithmetic differs from the reference.
	m.cmp("cor", out, []float64{ref.CorrectionRatio(o, vbar, D)}, Tol(engine.F32, D))
	return m.result()
}
