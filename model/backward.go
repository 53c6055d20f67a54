package model

import (
	"errors"
	"fmt"

	"github.com/parallax-engine/parallax/engine"
)

// Backward computes the gradients of lossScale * (mean loss of the last
// Forward) and ADDS them to every parameter's G (allocating G on first use):
// the caller zeroes the gradients (ZeroGrads) before a step, and gradient
// accumulation over k micro-batches is k Forward/Backward pairs with
// lossScale 1/k (or count_i/total to weight by counted tokens).
//
// It is the forward read in reverse: the head and final norm, then each
// block from the last to the first (MLP, then attention), then the
// embedding. The logits buffer is reused for dLogits. A hook set by
// SetGradHook is called as each group of gradients becomes final.
func (m *Model) Backward(lossScale float32) error {
	a := m.last
	switch {
	case a == nil:
		return errors.New("backward: no forward has run")
	case !a.Train:
		return errors.New("backward: the last forward was Evaluate (use Forward to train)")
	case !a.haveLoss:
		return errors.New("backward: the last forward had no targets")
	case a.logitsGone:
		return errors.New("backward: already run for this forward")
	}
	a.lossScale = lossScale
	return m.backward(a)
}

// backward is Backward on a's forward; dLogits are computed first unless
// the forward's cross-entropy already wrote them (ForwardBackward).
func (m *Model) backward(a *Activations) error {
	if err := m.AllocGrads(); err != nil {
		return err
	}
	if err := m.allocGrads(a); err != nil {
		return fmt.Errorf("backward: %w", err)
	}
	c := m.Config
	g := a.grads
	r := &rec{dev: m.Dev, where: "head"}
	hw := m.HeadWeight()

	// Loss and head: dLogits = scale/count * (softmax - onehot), in place.
	if !a.gradReady {
		r.crossEntropy(a.loss, a.logits, a.logits, a.targets, m.ceOpts(a.gradScale()))
		a.logitsGone, a.gradReady = true, true
	}
	if m.padV != c.Vocab {
		m.headBackwardPadded(r, g.dln, hw, a)
	} else {
		r.linearBackward(g.dln, hw.G, a.logits, a.lnf, hw.compute(), false)
	}
	r.rmsnormBackward(g.dres, m.Norm.G, g.dln, a.res[c.Layers], m.Norm.W, a.lnfRstd)
	m.gradsReady(r, 0) // the final norm's and the untied head's

	for l := c.Layers - 1; l >= 0; l-- {
		r.where = fmt.Sprintf("layer %d", l)
		m.blockBackward(r, l, a, a.res[l])
		m.gradsReady(r, c.Layers-l)
	}

	r.where = "embedding"
	r.embeddingBackward(m.Embed.G, a.ids, g.dres)
	m.gradsReady(r, c.Layers+1)
	if r.err != nil {
		return fmt.Errorf("backward: %w", r.err)
	}
	return nil
}

// blockBackward is blockForward in reverse. On entry g.dres holds dL/d(out);
// on return dL/dx.
func (m *Model) blockBackward(r *rec, l int, a *Activations, x *engine.Tensor) {
	c := m.Config
	blk := &m.Blocks[l]
	la := &a.layers[l]
	g := a.grads
	theta := float32(c.RopeTheta)
	qd, kvd := c.QDim(), c.KVDim()

	// MLP: out = mid + W_down act, act = silu(gate) * up, gate/up = W h2.
	r.linearBackward(g.dh, blk.Down.G, g.dres, la.act, blk.Down.compute(), false)
	r.swigluBackward(g.dgate, g.dup, g.dh, la.gate, la.up)
	r.linearBackward(g.dln, blk.Gate.G, g.dgate, la.ln2, blk.Gate.compute(), false)
	r.linearBackward(g.dln, blk.Up.G, g.dup, la.ln2, blk.Up.compute(), true)
	// g.dres += the norm's input gradient: g.dres = dL/dmid (g.dtmp is
	// the scratch where the device does not add in the norm's pass).
	r.rmsnormBackwardAdd(g.dres, blk.PostNorm.G, g.dln, la.mid, blk.PostNorm.W, la.ln2Rstd, g.dtmp)

	// Attention: mid = x + W_O attT.
	r.linearBackward(mat(g.dattT, qd), blk.O.G, g.dres, mat(la.attT, qd), blk.O.compute(), false)
	r.swap(g.datt, g.dattT)
	r.attentionBackward(engine.AttentionBackwardArgs{Q: la.qh, K: la.kh, V: la.vh, R: la.rh,
		O: la.att, DO: g.datt, LSE: la.lse, Vbar: la.vbar, Tbar: la.tbar,
		DQ: g.dqh, DK: g.dkh, DV: g.dvh, DR: g.drh, AttentionOpts: engine.AttentionOpts{Causal: true}})

	// RoPE and the head norms, back to [B, T, H, D] (one fused op each,
	// or with the forward's scratch buffers), for q, k and r; v only
	// swaps back.
	r.normRoPEBackward(g.dq, blk.QNorm.G, g.dqh, la.q, blk.QNorm.W, la.qRstd, a.pos, a.qn, theta)
	r.normRoPEBackward(g.dk, blk.KNorm.G, g.dkh, la.k, blk.KNorm.W, la.kRstd, a.pos, a.kn, theta)
	r.swap(g.dv, g.dvh)

	// The projections share their input h = ln1: their input grads add up.
	r.linearBackward(g.dln, blk.Q.G, mat(g.dq, qd), la.ln1, blk.Q.compute(), false)
	r.linearBackward(g.dln, blk.K.G, mat(g.dk, kvd), la.ln1, blk.K.compute(), true)
	r.linearBackward(g.dln, blk.V.G, mat(g.dv, kvd), la.ln1, blk.V.compute(), true)
	if c.Parallax() {
		if c.ProbeGate {
			r.ropeBackward(g.drh, a.pos, theta)
			r.swap(a.rn, g.drh)
			// g.dq is free again: it receives dL/d(normed r) before the gate.
			r.headGateBackward(g.dq, g.dgz, a.rn, la.rn, la.gz)
			r.linearBackward(g.dln, blk.RGate.G, mat(g.dgz, c.Heads), la.ln1, blk.RGate.compute(), true)
			r.rmsnormBackward(g.dr, blk.RNorm.G, g.dq, la.r, blk.RNorm.W, la.rRstd)
		} else {
			r.normRoPEBackward(g.dr, blk.RNorm.G, g.drh, la.r, blk.RNorm.W, la.rRstd, a.pos, a.rn, theta)
		}
		r.linearBackward(g.dln, blk.R.G, mat(g.dr, qd), la.ln1, blk.R.compute(), true)
	}
	r.rmsnormBackwardAdd(g.dres, blk.InputNorm.G, g.dln, x, blk.InputNorm.W, la.ln1Rstd, g.dtmp) // g.dres = dL/dx
}

// headBackwardPadded is the head's backward over a padded vocabulary:
// dx = dLogits W_pad, and the weight gradient of the PadVocab rows into a
// scratch that is then added row by row into the [Vocab, d] gradient (an
// embedding backward with the padding's row map; the pad rows' gradient is
// exactly zero, since the cross-entropy writes zero to the pad columns).
func (m *Model) headBackwardPadded(r *rec, dx *engine.Tensor, hw *Param, a *Activations) {
	if r.err != nil {
		return
	}
	if m.headGrad == nil {
		t, err := m.Dev.Alloc(engine.F32, m.padV, m.Config.Dim)
		if err != nil {
			r.fail("head gradient scratch", err)
			return
		}
		m.headGrad = t
	}
	r.fail("linear backward (input)", m.Dev.MatMul(dx, a.logits, hw.compute(), engine.MatMulOpts{}))
	if r.err == nil {
		r.fail("linear backward (weight)", m.Dev.MatMul(m.headGrad, a.logits, a.lnf, engine.MatMulOpts{TransA: true}))
	}
	r.embeddingBackward(hw.G, m.padIDs, m.headGrad)
}
