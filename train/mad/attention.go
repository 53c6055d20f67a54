package mad

import (
	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/model"
)

// The built-in sequence mixers.
const (
	MixerSoftmax  = "softmax"  // multi-head softmax attention
	MixerParallax = "parallax" // the same attention with the Parallax probe W_R
	MixerLinear   = "linear"   // linear attention (uniform weights, unnormalised, output norm)
	MixerAffine   = "affine"   // affine linear attention (the uniform-weight Parallax)
)

func init() {
	RegisterMixer(MixerSoftmax, "multi-head softmax attention as MAD's mh-attention: biased q/k/v/o projections, RoPE on the full head",
		func(env *Env, prefix string) (Layer, error) { return newAttention(env, prefix, false) })
	RegisterMixer(MixerParallax, "the softmax mixer plus the Parallax probe r = W_R x + b_R (RoPE'd like q): o = o_SA - Sigma_KV r",
		func(env *Env, prefix string) (Layer, error) { return newAttention(env, prefix, true) })
	RegisterMixer(MixerLinear, "linear attention o_i = sum_j<=i (q_i.k_j) v_j with a per-head RMSNorm of o",
		func(env *Env, prefix string) (Layer, error) { return newLinearMixer(env, prefix, false) })
	RegisterMixer(MixerAffine, "affine linear attention o_i = vbar_i - Sigma_KV(i) r_i (uniform weights over j <= i)",
		func(env *Env, prefix string) (Layer, error) { return newLinearMixer(env, prefix, true) })
}

// attention is the MAD mh-attention mixer (Heads x HeadDim, causal, RoPE
// with base RopeTheta on the whole head, every projection with a bias) and,
// with parallax, its Parallax version: a probe projection W_R (with bias,
// initialised like W_Q) whose output is RoPE'd with the query positions and
// enters the engine's Attention op as R (docs/MATH.md sections 2-3):
//
//	q, k, v, r = x W^T + b;  q, k, r = RoPE(.)
//	o = Attention(q, k, v, r);  y = o W_O^T + b_O
type attention struct {
	env      *Env
	parallax bool
	q, k, v  *model.Param
	r, o     *model.Param
	qb, kb   *model.Param
	vb, rb   *model.Param
	ob       *model.Param
	params   []*model.Param
	bufs     []*engine.Tensor

	x              *engine.Tensor // the input of the last Forward
	qp, kp, vp, rp *engine.Tensor // projections [N, H*D] = [B, T, H, D]
	qh, kh, vh, rh *engine.Tensor // [B, H, T, D], q, k, r rotated
	att            *engine.Tensor // attention output [B, H, T, D]
	lse, tbar      *engine.Tensor // F32 [B, H, T]
	vbar           *engine.Tensor // o_SA [B, H, T, D] (Parallax)
	attT           *engine.Tensor // att as [N, H*D]

	// Backward scratch, shared with the other mixers.
	dattT, dproj             *engine.Tensor // [N, H*D]
	datt, dqh, dkh, dvh, drh *engine.Tensor // [B, H, T, D]
}

func newAttention(env *Env, prefix string, parallax bool) (Layer, error) {
	b := newBuilder(env, prefix)
	d, hd := env.Dim, env.Heads*env.HeadDim
	B, T, H, D, N := env.B, env.T, env.Heads, env.HeadDim, env.N()
	a := &attention{env: env, parallax: parallax}
	a.q, a.qb = b.matrix("q.weight", hd, d), b.bias("q.bias", hd)
	a.k, a.kb = b.matrix("k.weight", hd, d), b.bias("k.bias", hd)
	a.v, a.vb = b.matrix("v.weight", hd, d), b.bias("v.bias", hd)
	if parallax {
		a.r, a.rb = b.matrix("r.weight", hd, d), b.bias("r.bias", hd)
	}
	a.o, a.ob = b.matrix("o.weight", d, hd), b.bias("o.bias", d)

	a.qp, a.kp, a.vp = b.buf(engine.F32, N, hd), b.buf(engine.F32, N, hd), b.buf(engine.F32, N, hd)
	a.qh, a.kh, a.vh = b.buf(engine.F32, B, H, T, D), b.buf(engine.F32, B, H, T, D), b.buf(engine.F32, B, H, T, D)
	a.att, a.lse = b.buf(engine.F32, B, H, T, D), b.buf(engine.F32, B, H, T)
	a.attT = b.buf(engine.F32, N, hd)
	if parallax {
		a.rp, a.rh = b.buf(engine.F32, N, hd), b.buf(engine.F32, B, H, T, D)
		a.vbar, a.tbar = b.buf(engine.F32, B, H, T, D), b.buf(engine.F32, B, H, T)
	}
	a.dattT, a.dproj = b.scratch("mix.dattT", engine.F32, N, hd), b.scratch("mix.dproj", engine.F32, N, hd)
	a.datt = b.scratch("mix.datt", engine.F32, B, H, T, D)
	a.dqh, a.dkh = b.scratch("mix.dqh", engine.F32, B, H, T, D), b.scratch("mix.dkh", engine.F32, B, H, T, D)
	a.dvh = b.scratch("mix.dvh", engine.F32, B, H, T, D)
	if parallax {
		a.drh = b.scratch("mix.drh", engine.F32, B, H, T, D)
	}
	if b.err != nil {
		return nil, b.fail()
	}
	a.params, a.bufs = b.params, b.bufs
	return a, nil
}

func (a *attention) Params() []*model.Param { return a.params }

func (a *attention) Free() { freeBufs(a.env.Dev, a.bufs) }

func (a *attention) opts() engine.AttentionOpts { return engine.AttentionOpts{Causal: true} }

func (a *attention) Forward(x, y *engine.Tensor) error {
	e := a.env
	r := &rec{dev: e.Dev, where: "attention"}
	B, T, H, D := e.B, e.T, e.Heads, e.HeadDim
	a.x = x
	r.linear(a.qp, x, a.q.W, a.qb.W, e.Ones)
	r.swap(a.qh, heads(a.qp, B, T, H, D))
	r.rope(a.qh, e.Pos, e.RopeTheta)
	r.linear(a.kp, x, a.k.W, a.kb.W, e.Ones)
	r.swap(a.kh, heads(a.kp, B, T, H, D))
	r.rope(a.kh, e.Pos, e.RopeTheta)
	r.linear(a.vp, x, a.v.W, a.vb.W, e.Ones)
	r.swap(a.vh, heads(a.vp, B, T, H, D))
	args := engine.AttentionArgs{Q: a.qh, K: a.kh, V: a.vh, O: a.att, LSE: a.lse, AttentionOpts: a.opts()}
	if a.parallax {
		r.linear(a.rp, x, a.r.W, a.rb.W, e.Ones)
		r.swap(a.rh, heads(a.rp, B, T, H, D))
		r.rope(a.rh, e.Pos, e.RopeTheta) // r takes the query positions
		args.R, args.Vbar, args.Tbar = a.rh, a.vbar, a.tbar
	}
	if r.err == nil {
		r.do("attention", e.Dev.Attention(args))
	}
	r.swap(heads(a.attT, B, T, H, D), a.att)
	r.linear(y, a.attT, a.o.W, a.ob.W, e.Ones)
	return r.err
}

func (a *attention) Backward(dx, dy *engine.Tensor) error {
	e := a.env
	r := &rec{dev: e.Dev, where: "attention backward"}
	B, T, H, D := e.B, e.T, e.Heads, e.HeadDim
	r.linearBackward(a.dattT, a.o.G, a.ob.G, dy, a.attT, a.o.W, e.Ones, false)
	r.swap(a.datt, heads(a.dattT, B, T, H, D))
	args := engine.AttentionBackwardArgs{Q: a.qh, K: a.kh, V: a.vh, O: a.att, DO: a.datt, LSE: a.lse,
		DQ: a.dqh, DK: a.dkh, DV: a.dvh, AttentionOpts: a.opts()}
	if a.parallax {
		args.R, args.Vbar, args.Tbar, args.DR = a.rh, a.vbar, a.tbar, a.drh
	}
	if r.err == nil {
		r.do("attention backward", e.Dev.AttentionBackward(args))
	}
	dp := heads(a.dproj, B, T, H, D)
	r.ropeBackward(a.dqh, e.Pos, e.RopeTheta)
	r.swap(dp, a.dqh)
	r.linearBackward(dx, a.q.G, a.qb.G, a.dproj, a.x, a.q.W, e.Ones, false)
	r.ropeBackward(a.dkh, e.Pos, e.RopeTheta)
	r.swap(dp, a.dkh)
	r.linearBackward(dx, a.k.G, a.kb.G, a.dproj, a.x, a.k.W, e.Ones, true)
	r.swap(dp, a.dvh)
	r.linearBackward(dx, a.v.G, a.vb.G, a.dproj, a.x, a.v.W, e.Ones, true)
	if a.parallax {
		r.ropeBackward(a.drh, e.Pos, e.RopeTheta)
		r.swap(dp, a.drh)
		r.linearBackward(dx, a.r.G, a.rb.G, a.dproj, a.x, a.r.W, e.Ones, true)
	}
	return r.err
}
