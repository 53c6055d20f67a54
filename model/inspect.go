package model

import (
	"errors"
	"fmt"

	"github.com/parallax-engine/parallax/engine"
)

// Inspector keeps, while a model generates one sequence through a KV cache,
// what it takes to look at its attention on the device, without
// downloading anything: every layer's queries and probes after the head
// norm and RoPE for all positions so far (the cache already holds the
// keys), and each layer's correction strength for the newest step. A
// viewer recomputes any head's attention weights from Q, R and the cache's
// K (cmd/parallax-view does, in a compute shader).
type Inspector struct {
	// Q and R are each layer's queries and probes, [1, Hq, Cap, D] in the
	// model's compute dtype, positions 0..Len-1 of the cache filled. R is
	// nil for a softmax model.
	Q, R []*engine.Tensor
	// COR is F32 [Layers]: per layer, the correction-to-output ratio
	// ||Sigma_KV r|| / ||o_SA|| (= ||o - o_SA|| / ||o_SA||) averaged over
	// the heads and positions of the last Step (0 for a softmax model).
	COR *engine.Tensor

	m      *Model
	kv     *KVCache
	cor4   *engine.Tensor // COR as [1, 1, Layers, 1] (KVAppend's shape)
	cor1   *engine.Tensor // F32 [1]: one layer's ratio
	cor1x4 *engine.Tensor // cor1 as [1, 1, 1, 1]
	vbar   *engine.Tensor // o_SA of the current step [1, Hq, T, D]
}

// NewInspector allocates an inspector for kv (a cache of one sequence) and
// attaches it: from now on every Step through kv also records into it. Free
// detaches and releases it.
func (m *Model) NewInspector(kv *KVCache) (*Inspector, error) {
	if kv == nil || kv.K == nil {
		return nil, errors.New("inspector: no kv cache")
	}
	if kv.B != 1 {
		return nil, fmt.Errorf("inspector: the cache holds %d sequences; the inspector follows one", kv.B)
	}
	c := m.Config
	al := &alloc{dev: m.Dev}
	in := &Inspector{m: m, kv: kv}
	for range c.Layers {
		in.Q = append(in.Q, al.t(m.DType, 1, c.Heads, kv.Cap, c.HeadDim))
		if c.Parallax() {
			in.R = append(in.R, al.t(m.DType, 1, c.Heads, kv.Cap, c.HeadDim))
		}
	}
	in.COR = al.t(engine.F32, c.Layers)
	in.cor1 = al.t(engine.F32, 1)
	if al.err != nil {
		al.fail()
		return nil, fmt.Errorf("inspector: %w", al.err)
	}
	var err error
	if in.cor4, err = in.COR.Reshape(1, 1, c.Layers, 1); err == nil {
		in.cor1x4, err = in.cor1.Reshape(1, 1, 1, 1)
	}
	if err != nil {
		al.fail()
		return nil, fmt.Errorf("inspector: %w", err)
	}
	m.inspect = in
	return in, nil
}

// Free detaches the inspector from its model and releases its memory
// (once; later calls do nothing).
func (in *Inspector) Free() {
	if in.m == nil {
		return
	}
	if in.m.inspect == in {
		in.m.inspect = nil
	}
	dev := in.m.Dev
	for _, t := range append(append([]*engine.Tensor{in.COR, in.cor1, in.vbar}, in.Q...), in.R...) {
		if t != nil {
			dev.Free(t)
		}
	}
	*in = Inspector{}
}

// capture records layer l's share of the step: the step's queries and
// probes appended at their positions, and the layer's correction ratio.
// It runs right after the layer's attention, while la still holds it.
func (in *Inspector) capture(r *rec, l int, a *Activations, la *layerActs, cache *KVCache) {
	if cache != in.kv || r.err != nil {
		return
	}
	r.kvAppend(in.Q[l], la.qh, a.posStart)
	if in.R == nil {
		return
	}
	r.kvAppend(in.R[l], la.rh, a.posStart)
	// o_SA of the same rows: the step's attention without the probe.
	c := in.m.Config
	if in.vbar == nil || in.vbar.Shape()[2] != a.T {
		if in.vbar != nil {
			in.m.Dev.Free(in.vbar)
			in.vbar = nil
		}
		t, err := in.m.Dev.Alloc(in.m.DType, 1, c.Heads, a.T, c.HeadDim)
		if err != nil {
			r.fail("inspector", err)
			return
		}
		in.vbar = t
	}
	if a.posStart == 0 {
		r.attention(engine.AttentionArgs{Q: la.qh, K: la.kh, V: la.vh, O: in.vbar, AttentionOpts: engine.AttentionOpts{Causal: true}})
	} else {
		r.decodeAttention(engine.DecodeArgs{Q: la.qh, KCache: cache.K[l], VCache: cache.V[l], Lens: cache.lens, O: in.vbar})
	}
	if r.err == nil {
		r.fail("inspector: correction ratio", r.dev.CorrectionRatio(in.cor1, la.att, in.vbar))
	}
	r.kvAppend(in.cor4, in.cor1x4, l)
}
