package mad

import (
	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/model"
)

// linearMixer is linear attention (affine false) or affine linear
// attention (affine true), the uniform-weight branch of the Parallax
// family (docs/MATH.md section 6), with bias-free projections as in MAD's
// linear-attention layers:
//
//	linear:  o_i = sum_{j<=i} (q_i.k_j) v_j,  y = RMSNorm_head(o) W_O^T
//	affine:  o_i = vbar_i - Sigma_KV(i) r_i,  y = o W_O^T
//
// The unnormalised linear attention grows with the prefix length, so its
// output is RMS-normalised per head (with a learned gain, as RetNet and
// TransNormer do) where MAD divides by q.sum(k) instead (the engine has no
// such division); the affine form is an average and needs no norm.
type linearMixer struct {
	env     *Env
	affine  bool
	q, k, v *model.Param // q is the probe (r in the engine's notation)
	o, gain *model.Param // gain: the output head norm (linear only)
	params  []*model.Param
	bufs    []*engine.Tensor

	x          *engine.Tensor
	qp, kp, vp *engine.Tensor // [N, H*D]
	qh, kh, vh *engine.Tensor // [B, H, T, D]
	att        *engine.Tensor // [B, H, T, D]
	attN, rstd *engine.Tensor // normed output [B, H, T, D] and its F32 rstd [B, H, T] (linear)
	attT       *engine.Tensor // [N, H*D]

	dattT, dproj               *engine.Tensor
	datt, dattN, dqh, dkh, dvh *engine.Tensor
}

func newLinearMixer(env *Env, prefix string, affine bool) (Layer, error) {
	b := newBuilder(env, prefix)
	d, hd := env.Dim, env.Heads*env.HeadDim
	B, T, H, D, N := env.B, env.T, env.Heads, env.HeadDim, env.N()
	m := &linearMixer{env: env, affine: affine}
	name := "q.weight"
	if affine {
		name = "r.weight"
	}
	m.q = b.matrix(name, hd, d)
	m.k = b.matrix("k.weight", hd, d)
	m.v = b.matrix("v.weight", hd, d)
	if !affine {
		m.gain = b.gain("o_norm.weight", D)
	}
	m.o = b.matrix("o.weight", d, hd)
	m.qp, m.kp, m.vp = b.buf(engine.F32, N, hd), b.buf(engine.F32, N, hd), b.buf(engine.F32, N, hd)
	m.qh, m.kh, m.vh = b.buf(engine.F32, B, H, T, D), b.buf(engine.F32, B, H, T, D), b.buf(engine.F32, B, H, T, D)
	m.att, m.attT = b.buf(engine.F32, B, H, T, D), b.buf(engine.F32, N, hd)
	if !affine {
		m.attN, m.rstd = b.buf(engine.F32, B, H, T, D), b.buf(engine.F32, B, H, T)
		m.dattN = b.scratch("mix.dattN", engine.F32, B, H, T, D)
	}
	m.dattT, m.dproj = b.scratch("mix.dattT", engine.F32, N, hd), b.scratch("mix.dproj", engine.F32, N, hd)
	m.datt = b.scratch("mix.datt", engine.F32, B, H, T, D)
	m.dqh, m.dkh = b.scratch("mix.dqh", engine.F32, B, H, T, D), b.scratch("mix.dkh", engine.F32, B, H, T, D)
	m.dvh = b.scratch("mix.dvh", engine.F32, B, H, T, D)
	if b.err != nil {
		return nil, b.fail()
	}
	m.params, m.bufs = b.params, b.bufs
	return m, nil
}

func (m *linearMixer) Params() []*model.Param { return m.params }

func (m *linearMixer) Free() { freeBufs(m.env.Dev, m.bufs) }

func (m *linearMixer) opts() engine.AttentionOpts { return engine.AttentionOpts{Causal: true} }

func (m *linearMixer) Forward(x, y *engine.Tensor) error {
	e := m.env
	r := &rec{dev: e.Dev, where: "linear attention"}
	B, T, H, D := e.B, e.T, e.Heads, e.HeadDim
	m.x = x
	r.linear(m.qp, x, m.q.W, nil, nil)
	r.swap(m.qh, heads(m.qp, B, T, H, D))
	r.linear(m.kp, x, m.k.W, nil, nil)
	r.swap(m.kh, heads(m.kp, B, T, H, D))
	r.linear(m.vp, x, m.v.W, nil, nil)
	r.swap(m.vh, heads(m.vp, B, T, H, D))
	if r.err == nil {
		r.do("linear attention", e.Dev.LinearAttention(engine.LinearAttentionArgs{
			R: m.qh, K: m.kh, V: m.vh, O: m.att, Affine: m.affine, AttentionOpts: m.opts()}))
	}
	out := m.att
	if !m.affine {
		r.rmsnorm(m.attN, m.rstd, m.att, m.gain.W, e.NormEps)
		out = m.attN
	}
	r.swap(heads(m.attT, B, T, H, D), out)
	r.linear(y, m.attT, m.o.W, nil, nil)
	return r.err
}

func (m *linearMixer) Backward(dx, dy *engine.Tensor) error {
	e := m.env
	r := &rec{dev: e.Dev, where: "linear attention backward"}
	B, T, H, D := e.B, e.T, e.Heads, e.HeadDim
	r.linearBackward(m.dattT, m.o.G, nil, dy, m.attT, m.o.W, nil, false)
	if m.affine {
		r.swap(m.datt, heads(m.dattT, B, T, H, D))
	} else {
		r.swap(m.dattN, heads(m.dattT, B, T, H, D))
		r.rmsnormBackward(m.datt, m.gain.G, m.dattN, m.att, m.gain.W, m.rstd)
	}
	if r.err == nil {
		r.do("linear attention backward", e.Dev.LinearAttentionBackward(engine.LinearAttentionBackwardArgs{
			R: m.qh, K: m.kh, V: m.vh, DO: m.datt, DR: m.dqh, DK: m.dkh, DV: m.dvh,
			Affine: m.affine, AttentionOpts: m.opts()}))
	}
	dp := heads(m.dproj, B, T, H, D)
	r.swap(dp, m.dqh)
	r.linearBackward(dx, m.q.G, nil, m.dproj, m.x, m.q.W, nil, false)
	r.swap(dp, m.dkh)
	r.linearBackward(dx, m.k.G, nil, m.dproj, m.x, m.k.W, nil, true)
	r.swap(dp, m.dvh)
	r.linearBackward(dx, m.v.G, nil, m.dproj, m.x, m.v.W, nil, true)
	return r.err
}
