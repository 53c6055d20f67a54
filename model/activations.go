package model

import (
	"fmt"

	"github.com/parallax-engine/parallax/engine"
)

// IgnoreIndex marks a target that is not counted in the loss.
const IgnoreIndex = -100

// layerActs are one block's saved activations (shapes for B sequences of T
// tokens, N = B*T). In a training forward every layer has its own; an
// inference forward reuses one set for all layers.
type layerActs struct {
	ln1, ln1Rstd        *engine.Tensor // input_layernorm(x) [N, d]; F32 rstd [N]
	q, k, r             *engine.Tensor // projections before the head norms [B, T, H, D]
	qRstd, kRstd, rRstd *engine.Tensor // F32 [B, T, H], the head norms' rstd
	qh, kh, vh, rh      *engine.Tensor // normed, rotated [B, H, T, D] (vh: v swapped)
	att                 *engine.Tensor // attention output o [B, Hq, T, D]
	lse, tbar           *engine.Tensor // F32 [B, Hq, T] saved for the backward
	vbar                *engine.Tensor // o_SA [B, Hq, T, D] (Parallax, training)
	attT                *engine.Tensor // att back in [B, T, Hq, D] = [N, Hq*D]
	mid                 *engine.Tensor // residual after attention [N, d]
	ln2, ln2Rstd        *engine.Tensor // post_attention_layernorm(mid) [N, d]; F32 [N]
	gate, up, act       *engine.Tensor // MLP [N, FFN]; act = silu(gate) * up
	rn, gz              *engine.Tensor // probe gate: normed r before the gate [B, T, Hq, D]; logits [B, T, Hq]
}

// gradActs are the activation gradients of the backward pass, shared by all
// layers (they are overwritten layer after layer).
type gradActs struct {
	dres, dtmp, dln *engine.Tensor // [N, d]: running residual grad, scratch, grad of a norm's output
	dattT           *engine.Tensor // [B, T, Hq, D]
	datt, dqh, drh  *engine.Tensor // [B, Hq, T, D]
	dkh, dvh        *engine.Tensor // [B, Hkv, T, D]
	dq, dr          *engine.Tensor // [B, T, Hq, D], grads of the q, r projections
	dk, dv          *engine.Tensor // [B, T, Hkv, D]
	dh, dgate, dup  *engine.Tensor // [N, FFN]
	dgz             *engine.Tensor // [B, T, Hq]: grad of the probe gate's logits
}

// Activations are the buffers of one forward (and backward) shape, allocated
// once and reused while B and T stay the same. Engine tensors have no
// sub-views, so a different shape allocates a new set (the model keeps one
// set for training, one for inference and one for one-token decoding).
type Activations struct {
	B, T  int
	DType engine.DType // compute dtype of the buffers
	Train bool         // per-layer buffers kept for Backward

	ids, targets *engine.Tensor // I32 [N]
	pos          *engine.Tensor // I32 [T] positions
	res          []*engine.Tensor
	layers       []layerActs
	qn, kn, rn   *engine.Tensor // per-head normed q, k, r before the swap [B, T, H, D] (scratch)
	vn           *engine.Tensor // v projection [B, T, Hkv, D] (scratch)
	lnf, lnfRstd *engine.Tensor // model.norm(x) [N, d]; F32 [N]
	logits       *engine.Tensor // [N, PadVocab]: F32, or the compute dtype in training (dLogits in place after Backward)
	loss         *engine.Tensor // F32 [N] per-token loss
	cor          *engine.Tensor // F32 [1] scratch for CorrectionRatio
	grads        *gradActs      // allocated by the first Backward

	// The head over each sequence's last position only (generation).
	lastIdx            *engine.Tensor // I32 [B]: row b*T + T-1
	lastRows, lastNorm *engine.Tensor // [B, d]
	lastLogits         *engine.Tensor // F32 [B, PadVocab]

	views map[*engine.Tensor]bool // tensors that are views of others (not freed on their own)

	// State of the last forward through these buffers.
	posStart   int  // first position of pos
	haveLoss   bool // targets were given
	count      int  // counted targets
	logitsGone bool // Backward turned logits into dLogits
	// ForwardBackward: the forward's cross-entropy also writes dLogits,
	// scaled for lossScale; gradReady says it did.
	fuseGrad, gradReady bool
	lossScale           float32
}

// alloc is an allocation helper that remembers the first error and every
// tensor allocated, so a failed set can be freed.
type alloc struct {
	dev  engine.Device
	err  error
	made []*engine.Tensor
}

func (a *alloc) t(dtype engine.DType, shape ...int) *engine.Tensor {
	if a.err != nil {
		return nil
	}
	t, err := a.dev.Alloc(dtype, shape...)
	if err != nil {
		a.err = fmt.Errorf("allocate activation %v %v: %w", dtype, engine.Shape(shape), err)
		return nil
	}
	a.made = append(a.made, t)
	return t
}

func (a *alloc) fail() {
	for _, t := range a.made {
		a.dev.Free(t)
	}
}

// newActivations allocates the buffers for B x T tokens. train keeps every
// layer's activations (and the statistics the attention backward needs).
func (m *Model) newActivations(B, T int, train bool) (*Activations, error) {
	c := m.Config
	N, d, hq, hkv, D, f := B*T, c.Dim, c.Heads, c.KVHeads, c.HeadDim, c.FFN
	dt := m.DType
	al := &alloc{dev: m.Dev}
	a := &Activations{B: B, T: T, DType: dt, Train: train, posStart: -1}
	a.ids = al.t(engine.I32, N)
	a.targets = al.t(engine.I32, N)
	a.pos = al.t(engine.I32, T)
	nl, nres := 1, 1 // inference: one layer set, the stream updated in place
	if train {
		nl, nres = c.Layers, c.Layers+1
	}
	for range nres {
		a.res = append(a.res, al.t(dt, N, d))
	}
	a.qn, a.kn, a.vn = al.t(dt, B, T, hq, D), al.t(dt, B, T, hkv, D), al.t(dt, B, T, hkv, D)
	if c.Parallax() {
		a.rn = al.t(dt, B, T, hq, D)
	}
	// One position (decoding): [B, 1, H, D] and [B, H, 1, D] are the same
	// memory, so the attention layouts are views of the projections' and
	// the swaps between them vanish (rec.swap skips a swap onto a view of
	// its source).
	oneTok := !train && T == 1
	view := func(src *engine.Tensor, shape ...int) *engine.Tensor {
		if !oneTok || src == nil {
			return al.t(dt, shape...)
		}
		v, err := src.Reshape(shape...)
		if err != nil {
			if al.err == nil {
				al.err = fmt.Errorf("activation view: %w", err)
			}
			return nil
		}
		if a.views == nil {
			a.views = map[*engine.Tensor]bool{}
		}
		a.views[v] = true
		return v
	}
	a.layers = make([]layerActs, nl)
	for i := range a.layers {
		la := &a.layers[i]
		la.ln1, la.ln1Rstd = al.t(dt, N, d), al.t(engine.F32, N)
		la.q, la.qRstd = al.t(dt, B, T, hq, D), al.t(engine.F32, B, T, hq)
		la.k, la.kRstd = al.t(dt, B, T, hkv, D), al.t(engine.F32, B, T, hkv)
		la.qh, la.kh, la.vh = view(a.qn, B, hq, T, D), view(a.kn, B, hkv, T, D), view(a.vn, B, hkv, T, D)
		if c.Parallax() {
			la.r, la.rRstd = al.t(dt, B, T, hq, D), al.t(engine.F32, B, T, hq)
			la.rh = view(a.rn, B, hq, T, D)
			if c.ProbeGate {
				la.rn, la.gz = al.t(dt, B, T, hq, D), al.t(dt, B, T, hq)
			}
		}
		la.att = al.t(dt, B, hq, T, D)
		if train {
			la.lse = al.t(engine.F32, B, hq, T)
			if c.Parallax() {
				la.tbar = al.t(engine.F32, B, hq, T)
				la.vbar = al.t(dt, B, hq, T, D)
			}
		}
		la.attT = view(la.att, B, T, hq, D)
		la.mid = al.t(dt, N, d)
		la.ln2, la.ln2Rstd = al.t(dt, N, d), al.t(engine.F32, N)
		la.gate, la.up, la.act = al.t(dt, N, f), al.t(dt, N, f), al.t(dt, N, f)
	}
	a.lnf, a.lnfRstd = al.t(dt, N, d), al.t(engine.F32, N)
	// Training logits are in the compute dtype (the head's output and, in
	// place, dLogits, both read by bf16 products in the backward); the
	// cross-entropy works in f32 internally. Inference keeps f32 logits.
	ldt := engine.F32
	if train {
		ldt = dt
	}
	a.logits = al.t(ldt, N, m.padV)
	a.loss = al.t(engine.F32, N)
	a.cor = al.t(engine.F32, 1)
	if al.err != nil {
		al.fail()
		return nil, al.err
	}
	return a, nil
}

// allocGrads allocates the backward's buffers (training activations only).
func (m *Model) allocGrads(a *Activations) error {
	if a.grads != nil {
		return nil
	}
	c := m.Config
	B, T := a.B, a.T
	N, d, hq, hkv, D, f := B*T, c.Dim, c.Heads, c.KVHeads, c.HeadDim, c.FFN
	dt := m.DType
	al := &alloc{dev: m.Dev}
	g := &gradActs{}
	g.dres, g.dtmp, g.dln = al.t(dt, N, d), al.t(dt, N, d), al.t(dt, N, d)
	g.dattT = al.t(dt, B, T, hq, D)
	g.datt, g.dqh = al.t(dt, B, hq, T, D), al.t(dt, B, hq, T, D)
	g.dkh, g.dvh = al.t(dt, B, hkv, T, D), al.t(dt, B, hkv, T, D)
	g.dq, g.dk, g.dv = al.t(dt, B, T, hq, D), al.t(dt, B, T, hkv, D), al.t(dt, B, T, hkv, D)
	if c.Parallax() {
		g.drh, g.dr = al.t(dt, B, hq, T, D), al.t(dt, B, T, hq, D)
		if c.ProbeGate {
			g.dgz = al.t(dt, B, T, hq)
		}
	}
	g.dh, g.dgate, g.dup = al.t(dt, N, f), al.t(dt, N, f), al.t(dt, N, f)
	if al.err != nil {
		al.fail()
		return al.err
	}
	a.grads = g
	return nil
}

// free releases every buffer of a (nil-safe).
func (a *Activations) free(dev engine.Device) {
	if a == nil {
		return
	}
	fr := func(ts ...*engine.Tensor) {
		for _, t := range ts {
			if t != nil && !a.views[t] {
				dev.Free(t)
			}
		}
	}
	fr(a.ids, a.targets, a.pos, a.qn, a.kn, a.rn, a.vn, a.lnf, a.lnfRstd, a.logits, a.loss, a.cor)
	fr(a.lastIdx, a.lastRows, a.lastNorm, a.lastLogits)
	fr(a.res...)
	for _, la := range a.layers {
		fr(la.ln1, la.ln1Rstd, la.q, la.k, la.r, la.qRstd, la.kRstd, la.rRstd, la.qh, la.kh, la.vh, la.rh,
			la.att, la.lse, la.tbar, la.vbar, la.attT, la.mid, la.ln2, la.ln2Rstd, la.gate, la.up, la.act, la.rn, la.gz)
	}
	if g := a.grads; g != nil {
		fr(g.dres, g.dtmp, g.dln, g.dattT, g.datt, g.dqh, g.drh, g.dkh, g.dvh, g.dq, g.dr, g.dk, g.dv,
			g.dh, g.dgate, g.dup, g.dgz)
	}
}

// activations returns the buffer set for a shape, reallocating the slot when
// the shape changed. Training forwards, multi-token inference forwards and
// one-token decode steps each have their own slot, so generation does not
// thrash between its prefill and decode shapes.
func (m *Model) activations(B, T int, train bool) (*Activations, error) {
	slot := &m.infer
	switch {
	case train:
		slot = &m.train
	case T == 1:
		slot = &m.decode
	}
	if a := *slot; a != nil && a.B == B && a.T == T && a.DType == m.DType {
		return a, nil
	}
	if *slot == m.last {
		m.last = nil
	}
	(*slot).free(m.Dev)
	*slot = nil
	a, err := m.newActivations(B, T, train)
	if err != nil {
		return nil, fmt.Errorf("model activations for B=%d T=%d: %w", B, T, err)
	}
	*slot = a
	return a, nil
}

// mat views t as a matrix [Numel/cols, cols] (sharing storage).
func mat(t *engine.Tensor, cols int) *engine.Tensor {
	v, err := t.Reshape(t.Numel()/cols, cols)
	if err != nil {
		panic("model: internal reshape: " + err.Error())
	}
	return v
}

// gradScale is the factor of dLogits: lossScale over the counted targets.
func (a *Activations) gradScale() float32 {
	if a.count == 0 {
		return 0
	}
	return a.lossScale / float32(a.count)
}
