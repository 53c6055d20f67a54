package mad

import (
	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/model"
)

// swiglu is the channel mixer: y = W3 (silu(W1 x) * W2 x), bias-free, inner
// width FFN (352 for width 128: int(2*128*4/3) rounded up to a multiple of
// 16, as MAD's SwiGLU).
type swiglu struct {
	env        *Env
	w1, w2, w3 *model.Param
	params     []*model.Param
	bufs       []*engine.Tensor

	x              *engine.Tensor
	gate, up, act  *engine.Tensor // [N, FFN]
	dact, dg, dupG *engine.Tensor // scratch [N, FFN]
}

// SwiGLUWidth is MAD's SwiGLU inner width for model width d.
func SwiGLUWidth(d int) int {
	w := 2 * d * 4 / 3
	return 16 * ((w + 15) / 16)
}

func newSwiGLU(env *Env, prefix string) (Layer, error) {
	b := newBuilder(env, prefix)
	d, f, N := env.Dim, env.FFN, env.N()
	s := &swiglu{env: env}
	s.w1 = b.matrix("w1.weight", f, d)
	s.w2 = b.matrix("w2.weight", f, d)
	s.w3 = b.matrix("w3.weight", d, f)
	s.gate, s.up, s.act = b.buf(engine.F32, N, f), b.buf(engine.F32, N, f), b.buf(engine.F32, N, f)
	s.dact = b.scratch("mlp.dact", engine.F32, N, f)
	s.dg = b.scratch("mlp.dgate", engine.F32, N, f)
	s.dupG = b.scratch("mlp.dup", engine.F32, N, f)
	if b.err != nil {
		return nil, b.fail()
	}
	s.params, s.bufs = b.params, b.bufs
	return s, nil
}

func (s *swiglu) Params() []*model.Param { return s.params }

func (s *swiglu) Free() { freeBufs(s.env.Dev, s.bufs) }

func (s *swiglu) Forward(x, y *engine.Tensor) error {
	r := &rec{dev: s.env.Dev, where: "swiglu"}
	s.x = x
	r.linear(s.gate, x, s.w1.W, nil, nil)
	r.linear(s.up, x, s.w2.W, nil, nil)
	r.swiglu(s.act, s.gate, s.up)
	r.linear(y, s.act, s.w3.W, nil, nil)
	return r.err
}

func (s *swiglu) Backward(dx, dy *engine.Tensor) error {
	r := &rec{dev: s.env.Dev, where: "swiglu backward"}
	r.linearBackward(s.dact, s.w3.G, nil, dy, s.act, s.w3.W, nil, false)
	r.swigluBackward(s.dg, s.dupG, s.dact, s.gate, s.up)
	r.linearBackward(dx, s.w1.G, nil, s.dg, s.x, s.w1.W, nil, false)
	r.linearBackward(dx, s.w2.G, nil, s.dupG, s.x, s.w2.W, nil, true)
	return r.err
}
