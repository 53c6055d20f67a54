package model

import (
	"errors"
	"fmt"
	"math"

	"github.com/parallax-engine/parallax/engine"
)

// LossStats is the cross-entropy of one forward over its counted targets
// (those not equal to IgnoreIndex).
type LossStats struct {
	Mean  float64 // Sum / Count; 0 when nothing was counted
	Sum   float64 // sum of the per-token losses (summed in float64)
	Count int     // number of counted targets
}

// Forward is the training forward: tokens and targets are [B, T] row-major
// (len B*T), a target of IgnoreIndex is not counted; targets may be nil (no
// loss). Every layer's activations are kept for Backward, and Logits and
// CORs read the result.
func (m *Model) Forward(tokens, targets []int32, B, T int) (LossStats, error) {
	return m.forwardBatch(tokens, targets, B, T, true)
}

// Evaluate is Forward without keeping what Backward needs: it runs in the
// smaller inference buffers (one set of layer activations for all layers).
// Logits reads its result.
func (m *Model) Evaluate(tokens, targets []int32, B, T int) (LossStats, error) {
	return m.forwardBatch(tokens, targets, B, T, false)
}

// ForwardBackward is Forward followed by Backward(lossScale), with the loss
// gradient computed by the forward's cross-entropy pass (one pass over the
// [tokens, vocabulary] logits instead of two) and one host synchronisation,
// at the end, where Forward and Backward have one each. The loss is
// checked for NaN and infinity after the backward, so a non-finite loss
// leaves gradients of no use (ErrNonFiniteLoss is returned as by Forward).
// Logits are not readable afterwards; CORs and GateMeans are.
func (m *Model) ForwardBackward(tokens, targets []int32, B, T int, lossScale float32) (LossStats, error) {
	if targets == nil {
		return LossStats{}, errors.New("forward-backward: no targets")
	}
	a, err := m.runForward(tokens, targets, B, T, true, lossScale)
	if err != nil {
		return LossStats{}, err
	}
	if err := m.backward(a); err != nil {
		return LossStats{}, err
	}
	return m.lossStats(a)
}

func (m *Model) forwardBatch(tokens, targets []int32, B, T int, train bool) (LossStats, error) {
	a, err := m.runForward(tokens, targets, B, T, train, 0)
	if err != nil {
		return LossStats{}, err
	}
	if !a.haveLoss {
		return LossStats{}, m.Dev.Sync()
	}
	return m.lossStats(a)
}

// runForward checks and uploads a batch and enqueues the forward over it;
// with fuseScale > 0 (ForwardBackward) its cross entropy also writes
// dLogits of fuseScale * mean loss.
func (m *Model) runForward(tokens, targets []int32, B, T int, train bool, fuseScale float32) (*Activations, error) {
	if err := m.checkTokens(tokens, targets, B, T); err != nil {
		return nil, err
	}
	if T > m.Config.MaxSeq {
		return nil, fmt.Errorf("forward: sequence length %d exceeds the model's max_seq %d", T, m.Config.MaxSeq)
	}
	a, err := m.activations(B, T, train)
	if err != nil {
		return nil, err
	}
	m.last = nil
	if err := m.upload(a, tokens, targets, 0); err != nil {
		return nil, err
	}
	a.lossScale, a.fuseGrad = fuseScale, fuseScale != 0
	err = m.forward(a, nil, false)
	a.fuseGrad = false
	if err != nil {
		return nil, fmt.Errorf("forward: %w", err)
	}
	m.last = a
	return a, nil
}

// checkTokens validates a batch on the host, so a bad id is reported as the
// caller's mistake with its position rather than as a device error.
func (m *Model) checkTokens(tokens, targets []int32, B, T int) error {
	if B <= 0 || T <= 0 {
		return fmt.Errorf("forward: batch %dx%d is empty", B, T)
	}
	if len(tokens) != B*T {
		return fmt.Errorf("forward: %d tokens do not fill a %dx%d batch", len(tokens), B, T)
	}
	if targets != nil && len(targets) != B*T {
		return fmt.Errorf("forward: %d targets do not fill a %dx%d batch", len(targets), B, T)
	}
	V := int32(m.Config.Vocab)
	for i, t := range tokens {
		if t < 0 || t >= V {
			return fmt.Errorf("forward: token %d at (%d, %d) is outside the vocabulary [0, %d)", t, i/T, i%T, V)
		}
	}
	for i, t := range targets {
		if t != IgnoreIndex && (t < 0 || t >= V) {
			return fmt.Errorf("forward: target %d at (%d, %d) is outside the vocabulary [0, %d) and is not %d (ignore)", t, i/T, i%T, V, IgnoreIndex)
		}
	}
	return nil
}

// upload writes a batch's ids, targets and (if changed) positions
// start..start+T-1.
func (m *Model) upload(a *Activations, tokens, targets []int32, start int) error {
	if err := writeInt32s(m.Dev, a.ids, tokens); err != nil {
		return fmt.Errorf("upload tokens: %w", err)
	}
	a.haveLoss, a.count, a.logitsGone, a.gradReady = targets != nil, 0, false, false
	if targets != nil {
		for _, t := range targets {
			if t != IgnoreIndex {
				a.count++
			}
		}
		if err := writeInt32s(m.Dev, a.targets, targets); err != nil {
			return fmt.Errorf("upload targets: %w", err)
		}
	}
	if a.posStart != start {
		pos := make([]int32, a.T)
		for i := range pos {
			pos[i] = int32(start + i)
		}
		if err := writeInt32s(m.Dev, a.pos, pos); err != nil {
			return fmt.Errorf("upload positions: %w", err)
		}
		a.posStart = start
	}
	return nil
}

// forward runs the whole model over the uploaded batch: embedding, the
// blocks, the final norm, the head and (with targets) the per-token loss.
// With a cache, the blocks append their keys and values at positions
// a.posStart.. and attend over the cache. With last, only each sequence's
// last position goes through the head, into a.lastLogits [B, V].
func (m *Model) forward(a *Activations, cache *KVCache, last bool) error {
	c := m.Config
	r := &rec{dev: m.Dev, views: a.views, int8: m.int8}
	m.refreshCompute(r)
	r.embedding(a.res[0], m.Embed.compute(), a.ids)
	for l := range c.Layers {
		r.where = fmt.Sprintf("layer %d", l)
		// Inference has one stream buffer, updated in place (nothing reads
		// a block's input again): x == out.
		x := a.res[l%len(a.res)]
		out := a.res[(l+1)%len(a.res)]
		m.blockForward(r, l, a, &a.layers[l%len(a.layers)], x, out, cache)
	}
	r.where = "head"
	final := a.res[c.Layers%len(a.res)]
	if last {
		if err := m.allocLast(a); err != nil {
			return err
		}
		// Gather the last rows with the embedding op (a row gather of the
		// [N, d] stream); the final norm is per row, so norming after the
		// gather is the same.
		r.embedding(a.lastRows, final, a.lastIdx)
		r.rmsnorm(a.lastNorm, nil, a.lastRows, m.Norm.W, float32(c.NormEps))
		r.linear(a.lastLogits, a.lastNorm, m.HeadWeight().compute())
		return r.err
	}
	if decodeFusion && decoding(a, cache) && !a.haveLoss {
		// A decode step (nothing reads the normed rows again): the final
		// norm rides in the head product's kernel.
		r.normLinearMulti([]*engine.Tensor{a.logits}, []*engine.Tensor{m.HeadWeight().compute()}, final, m.Norm.W,
			float32(c.NormEps), a.lnf)
		return r.err
	}
	r.rmsnorm(a.lnf, a.lnfRstd, final, m.Norm.W, float32(c.NormEps))
	r.linear(a.logits, a.lnf, m.HeadWeight().compute())
	switch {
	case a.haveLoss && a.fuseGrad:
		// The loss and, in place, dLogits of lossScale * mean loss.
		r.crossEntropy(a.loss, a.logits, a.logits, a.targets, m.ceOpts(a.gradScale()))
		a.logitsGone, a.gradReady = true, true
	case a.haveLoss:
		r.crossEntropy(a.loss, nil, a.logits, a.targets, m.ceOpts(0))
	}
	return r.err
}

// allocLast allocates the buffers of a last-position-only head.
func (m *Model) allocLast(a *Activations) error {
	if a.lastLogits != nil {
		return nil
	}
	al := &alloc{dev: m.Dev}
	lastIdx := al.t(engine.I32, a.B)
	lastRows, lastNorm := al.t(m.DType, a.B, m.Config.Dim), al.t(m.DType, a.B, m.Config.Dim)
	lastLogits := al.t(engine.F32, a.B, m.padV)
	if al.err != nil {
		al.fail()
		return al.err
	}
	idx := make([]int32, a.B)
	for b := range idx {
		idx[b] = int32(b*a.T + a.T - 1)
	}
	if err := writeInt32s(m.Dev, lastIdx, idx); err != nil {
		al.fail()
		return err
	}
	a.lastIdx, a.lastRows, a.lastNorm, a.lastLogits = lastIdx, lastRows, lastNorm, lastLogits
	return nil
}

// decoding reports whether a forward over cache is a decode step (rows
// after a cached prefix, or a ragged step), not a prefill from position 0.
func decoding(a *Activations, cache *KVCache) bool {
	return cache != nil && (a.posStart != 0 || cache.seqPos != nil)
}

// blockForward is one pre-norm block (docs/MATH.md section 9):
//
//	h = RMSNorm(x); q, k, v, r = W h; q, k, r = RoPE(headnorm(.))
//	mid = x + W_O Attention(q, k, v, r)
//	out = mid + W_down(silu(W_gate h2) * W_up h2), h2 = RMSNorm(mid)
func (m *Model) blockForward(r *rec, l int, a *Activations, la *layerActs, x, out *engine.Tensor, cache *KVCache) {
	c := m.Config
	blk := &m.Blocks[l]
	eps, theta := float32(c.NormEps), float32(c.RopeTheta)
	qd, kvd := c.QDim(), c.KVDim()

	pos := a.pos
	if cache != nil && cache.seqPos != nil {
		pos = cache.seqPos // a ragged step (BatchCache): sequence b at starts[b]
	}
	prefill := !decoding(a, cache)
	// A decode step runs the fused decode ops (ops.go, decodeFusion): the
	// norms inside the products' kernels, one op for the attention inputs.
	fused := decodeFusion && !prefill
	// A prompt's prefill over a cache (generation) prepares its attention
	// inputs in that one op too, keeping k and v for its own attention
	// (the caches' starts are 0 then: Step writes them).
	prefillPrep := decodeFusion && prefill && cache != nil && !a.Train
	prep := fused || prefillPrep // the attention inputs through DecodePrep
	// The projections of h in one call: one launch where the device has a
	// kernel for the shapes (decoding), a product each otherwise.
	outs := []*engine.Tensor{mat(la.q, qd), mat(la.k, kvd), mat(a.vn, kvd)}
	ws := []*engine.Tensor{blk.Q.compute(), blk.K.compute(), blk.V.compute()}
	if c.Parallax() {
		outs, ws = append(outs, mat(la.r, qd)), append(ws, blk.R.compute())
	}
	var pa engine.DecodePrepArgs
	if prep {
		// q, k (and r) normed and rotated, k and v appended: one op.
		pa = engine.DecodePrepArgs{Q: la.q, K: la.k, V: a.vn, QNorm: blk.QNorm.W, KNorm: blk.KNorm.W, QOut: la.qh,
			KCache: cache.K[l], VCache: cache.V[l], Pos: pos, Starts: cache.starts, Eps: eps, Theta: theta, KH: la.kh, VH: la.vh,
			KeepKV: prefillPrep}
		if c.Parallax() && !c.ProbeGate {
			pa.R, pa.RNorm, pa.ROut = la.r, blk.RNorm.W, la.rh
		}
	}
	if fused && !c.ProbeGate { // (the probe gate reads h itself)
		// The products and the preparation: one op, one launch where the
		// device fuses them.
		r.normLinearDecodePrep(outs, ws, x, blk.InputNorm.W, eps, la.ln1, pa)
	} else {
		r.rmsnorm(la.ln1, la.ln1Rstd, x, blk.InputNorm.W, eps)
		r.linearMulti(outs, ws, la.ln1)
		if prep {
			r.decodePrep(pa)
		}
	}
	if !prep {
		// Per-head RMSNorm, then RoPE, from [B, T, H, D] into [B, H, T, D]:
		// one fused op per input.
		r.normRoPE(la.qh, la.qRstd, la.q, blk.QNorm.W, pos, a.qn, eps, theta)
		r.normRoPE(la.kh, la.kRstd, la.k, blk.KNorm.W, pos, a.kn, eps, theta)
		r.swap(la.vh, a.vn)
	}
	if c.Parallax() && (!prep || c.ProbeGate) {
		if c.ProbeGate {
			// r = sigmoid(w_g . h) r per token and head, after the norm
			// (which would undo it) and before RoPE (a per-head scalar
			// commutes with the rotation).
			r.rmsnorm(la.rn, la.rRstd, la.r, blk.RNorm.W, eps)
			r.linear(mat(la.gz, c.Heads), la.ln1, blk.RGate.compute())
			r.headGate(a.rn, la.rn, la.gz)
			r.swap(la.rh, a.rn)
			r.rope(la.rh, pos, theta) // r takes the query positions
		} else {
			r.normRoPE(la.rh, la.rRstd, la.r, blk.RNorm.W, pos, a.rn, eps, theta)
		}
	}

	switch {
	case prefill:
		r.attention(engine.AttentionArgs{Q: la.qh, K: la.kh, V: la.vh, R: la.rh, O: la.att,
			LSE: la.lse, Vbar: la.vbar, Tbar: la.tbar, AttentionOpts: engine.AttentionOpts{Causal: true}})
		if cache != nil && !prefillPrep {
			r.kvAppend(cache.K[l], la.kh, 0)
			r.kvAppend(cache.V[l], la.vh, 0)
		}
	default:
		// The starts are data (cache.starts), so a recorded step replays.
		if !fused {
			r.kvAppendAt(cache.K[l], la.kh, cache.starts)
			r.kvAppendAt(cache.V[l], la.vh, cache.starts)
		}
		r.decodeAttention(engine.DecodeArgs{Q: la.qh, R: la.rh, KCache: cache.K[l], VCache: cache.V[l],
			Lens: cache.lens, O: la.att, Splits: cache.splits})
	}
	if m.inspect != nil && cache != nil {
		m.inspect.capture(r, l, a, la, cache)
	}

	r.swap(la.attT, la.att)
	// In place (x == out, inference) the residual adds accumulate into the
	// stream itself. Training keeps x and mid: the products read the
	// residual apart from their result (linearResidual), so no copy.
	mid := la.mid
	if x == out {
		mid = x
		r.linearAdd(mid, mat(la.attT, qd), blk.O.compute())
	} else {
		r.linearResidual(mid, x, mat(la.attT, qd), blk.O.compute())
	}

	if !fused {
		r.rmsnorm(la.ln2, la.ln2Rstd, mid, blk.PostNorm.W, eps)
	}
	switch {
	case fused: // the norm inside the kernel (engine.NormLinearSwiGLU)
		r.normLinearSwiGLU(la.act, mid, blk.PostNorm.W, blk.Gate.compute(), blk.Up.compute(), eps, la.ln2, la.gate, la.up)
	case a.Train:
		// The backward reads gate and up: store them.
		r.linear(la.gate, la.ln2, blk.Gate.compute())
		r.linear(la.up, la.ln2, blk.Up.compute())
		r.swiglu(la.act, la.gate, la.up)
	default:
		r.linearSwiGLU(la.act, la.gate, la.up, la.ln2, blk.Gate.compute(), blk.Up.compute())
	}
	if x == out {
		r.linearAdd(out, la.act, blk.Down.compute())
	} else {
		r.linearResidual(out, mid, la.act, blk.Down.compute())
	}
}

// lossStats downloads the per-token losses and reduces them in float64.
func (m *Model) lossStats(a *Activations) (LossStats, error) {
	loss, err := engine.Float32s(a.loss)
	if err != nil {
		return LossStats{}, fmt.Errorf("forward: %w", err)
	}
	if err := m.Dev.Sync(); err != nil {
		return LossStats{}, fmt.Errorf("forward: %w", err)
	}
	var s LossStats
	for _, v := range loss {
		s.Sum += float64(v)
	}
	s.Count = a.count
	if s.Count > 0 {
		s.Mean = s.Sum / float64(s.Count)
	}
	if math.IsNaN(s.Sum) || math.IsInf(s.Sum, 0) {
		return s, fmt.Errorf("forward: %w (%v)", ErrNonFiniteLoss, s.Sum)
	}
	return s, nil
}

// ErrNonFiniteLoss is wrapped by the error of a forward whose loss is NaN or
// infinite (the LossStats are returned with it); NonFiniteLayer says where
// it started.
var ErrNonFiniteLoss = errors.New("the loss is not finite")

// NonFiniteLayer reports where the last training Forward first produced a
// NaN or infinity: -1 for the embedding, l for the output of layer l,
// Layers for the logits, and ok false if everything is finite. It downloads
// the residual stream layer by layer, so it is for diagnosing, not for
// every step.
func (m *Model) NonFiniteLayer() (layer int, ok bool, err error) {
	a := m.last
	if a == nil || !a.Train {
		return 0, false, errors.New("non-finite check: needs a training Forward first")
	}
	bad := func(t *engine.Tensor) (bool, error) {
		v, err := engine.Float32s(t)
		if err != nil {
			return false, err
		}
		for _, x := range v {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return true, nil
			}
		}
		return false, nil
	}
	for l, t := range a.res {
		if b, err := bad(t); err != nil || b {
			return l - 1, b, err
		}
	}
	if a.logitsGone {
		return 0, false, nil
	}
	b, err := bad(a.logits)
	return m.Config.Layers, b, err
}

// Logits downloads the logits [B*T, V] (row-major) of the last Forward or
// Evaluate. They are gone after Backward, which turns them into their
// gradient in place.
func (m *Model) Logits() ([]float32, error) {
	a := m.last
	if a == nil {
		return nil, errors.New("logits: no forward has run")
	}
	if a.logitsGone {
		return nil, errors.New("logits: Backward has overwritten them (read them before Backward)")
	}
	return m.readLogits(a.logits)
}

// ceOpts are the cross-entropy options of the head: the pad columns of a
// padded vocabulary are not classes.
func (m *Model) ceOpts(gradScale float32) engine.CrossEntropyOpts {
	o := engine.CrossEntropyOpts{IgnoreIndex: IgnoreIndex, GradScale: gradScale}
	if m.padV != m.Config.Vocab {
		o.Classes = m.Config.Vocab
	}
	return o
}

// SequenceLogits runs one sequence through the model and returns its logits
// [T, V] (row-major, position t predicting token t+1): the full forward
// behind `eval --dump-logits`.
func (m *Model) SequenceLogits(tokens []int) ([]float32, error) {
	ids := make([]int32, len(tokens))
	for i, t := range tokens {
		ids[i] = int32(t)
	}
	if _, err := m.Evaluate(ids, nil, 1, len(ids)); err != nil {
		return nil, err
	}
	return m.Logits()
}

// CORs returns each layer's correction-to-output ratio, mean over tokens and
// heads of ||Sigma_KV r|| / ||o_SA|| (docs/MATH.md section 7), from
// the last training Forward of a Parallax model.
func (m *Model) CORs() ([]float64, error) {
	a := m.last
	if !m.Config.Parallax() {
		return nil, errors.New("COR: a softmax model has no correction")
	}
	if a == nil || !a.Train {
		return nil, errors.New("COR: needs a training Forward first (Evaluate does not keep o_SA)")
	}
	out := make([]float64, m.Config.Layers)
	for l := range out {
		la := &a.layers[l]
		if err := m.Dev.CorrectionRatio(a.cor, la.att, la.vbar); err != nil {
			return nil, fmt.Errorf("COR layer %d: %w", l, err)
		}
		v, err := engine.Float32s(a.cor)
		if err != nil {
			return nil, fmt.Errorf("COR layer %d: %w", l, err)
		}
		out[l] = float64(v[0])
	}
	return out, nil
}

// GateMeans returns, per layer, the mean of the probe gate sigmoid(w_g . h)
// over the tokens and heads of the last training Forward (ProbeGate models
// only). The paper reports it settling near 0.26 under AdamW and near 1
// under Muon.
func (m *Model) GateMeans() ([]float64, error) {
	a := m.last
	if !m.Config.ProbeGate {
		return nil, errors.New("gate: the model has no probe gate")
	}
	if a == nil || !a.Train {
		return nil, errors.New("gate: needs a training Forward first")
	}
	out := make([]float64, m.Config.Layers)
	for l := range out {
		z, err := engine.Float32s(a.layers[l].gz)
		if err != nil {
			return nil, fmt.Errorf("gate layer %d: %w", l, err)
		}
		var s float64
		for _, v := range z {
			s += 1 / (1 + math.Exp(-float64(v)))
		}
		out[l] = s / float64(max(len(z), 1))
	}
	return out, nil
}
