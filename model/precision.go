package model

import (
	"fmt"

	"github.com/parallax-engine/parallax/engine"
)

// The precision policy. Parameters are f32 master weights (what the
// optimizer updates and checkpoints store). When the compute dtype is
// narrower (bf16 or f16 on GPUs), every weight a matmul reads has a copy in
// the compute dtype, refreshed from the master once after each change, so
// that every linear layer (forward, input gradient and weight gradient) is
// one tensor-core product of two compute-dtype operands with f32
// accumulation. Without the copies a backend has to widen its operands to
// f32 on every call and multiply in plain f32, several times slower. With
// an f32 compute dtype there are no copies: the master is the compute weight,
// so f32 results stay exact.
//
// The vocabulary is padded for the head in the narrow dtypes: the head's
// copy has PadVocab rows (the first Vocab are the weights; the pad rows repeat
// row 0 and are never counted), so the head product and the [N, PadVocab]
// logits have a width that tiles the tensor cores and aligns every row. The
// cross-entropy counts only the first Vocab columns (CrossEntropyOpts.Classes)
// and writes zero gradient to the others, so the padding changes no loss and
// no gradient. Checkpoints, Logits and the master weights never see it.

// padMultiple is the vocabulary padding of the narrow compute dtypes: a
// multiple of the 128-wide tiles matmul libraries use on tensor cores.
const padMultiple = 128

// compute returns the weight a product reads: the compute-dtype copy, or the
// master when there is none.
func (p *Param) compute() *engine.Tensor {
	if p.Q != nil {
		return p.Q.Q // the int8 values: the passes' products look up the scales (quant.go)
	}
	if p.C != nil {
		return p.C
	}
	return p.W
}

// wantsCopy reports whether p gets a compute-dtype copy: the weights that
// feed matmuls (the tied embedding is the head too).
func (m *Model) wantsCopy(p *Param) bool {
	if m.DType == engine.F32 || p.W == nil { // W nil: an int8 weight (quant.go)
		return false
	}
	switch p.Kind {
	case Matrix, Gate, Head:
		return true
	case Embedding:
		return m.Config.TiedEmbeddings
	}
	return false
}

// PadVocab is the width of the head's output: Vocab rounded up to a multiple
// of 128 when the compute dtype is narrower than f32, else Vocab.
func (m *Model) PadVocab() int { return m.padV }

// initCompute allocates the compute copies and the padding's row map; the
// copies are filled on the first forward (the weights are stale until then).
func (m *Model) initCompute() error {
	c := m.Config
	m.padV = c.Vocab
	if m.DType != engine.F32 && c.Vocab%padMultiple != 0 {
		m.padV = (c.Vocab + padMultiple - 1) / padMultiple * padMultiple
	}
	hw := m.HeadWeight()
	for _, p := range m.params {
		if !m.wantsCopy(p) {
			continue
		}
		shape := p.W.Shape()
		if p == hw {
			shape[0] = m.padV
		}
		t, err := m.Dev.Alloc(m.DType, shape...)
		if err != nil {
			return fmt.Errorf("allocate the %v copy of %s: %w", m.DType, p.Name, err)
		}
		p.C = t
	}
	if m.padV != c.Vocab {
		// Row i of the padded head is master row i; pad rows read row 0 (any
		// valid row: their logits are never counted and their gradient is 0).
		ids := make([]int32, m.padV)
		for i := range c.Vocab {
			ids[i] = int32(i)
		}
		t, err := m.Dev.Alloc(engine.I32, m.padV)
		if err != nil {
			return fmt.Errorf("allocate the vocabulary padding map: %w", err)
		}
		m.padIDs = t
		if err := writeInt32s(m.Dev, t, ids); err != nil {
			return fmt.Errorf("upload the vocabulary padding map: %w", err)
		}
	}
	m.stale = true
	return nil
}

// MarkWeightsChanged tells the model that its master weights changed (an
// optimizer step, a load, a direct write to some Param.W), so that the next
// forward refreshes the compute-dtype copies first. It costs nothing with an
// f32 compute dtype, and does nothing on an inference-only model, whose
// copies are the only weights left (there is nothing to refresh them from).
func (m *Model) MarkWeightsChanged() {
	if !m.dropped {
		m.stale = true
	}
}

// refreshCompute rounds every master weight into its compute copy, if any
// changed since the last refresh: one multi-tensor cast (engine.CastAll)
// and a row gather for the padded head.
func (m *Model) refreshCompute(r *rec) {
	if !m.stale || r.err != nil {
		return
	}
	var dsts, srcs []*engine.Tensor
	for _, p := range m.params {
		if p.C == nil {
			continue
		}
		if p.C.Dim(0) != p.W.Dim(0) {
			r.embedding(p.C, p.W, m.padIDs)
		} else {
			dsts, srcs = append(dsts, p.C), append(srcs, p.W)
		}
	}
	if r.err == nil {
		r.fail("refresh compute weights", engine.CastAll(r.dev, dsts, srcs))
	}
	if r.err == nil {
		m.stale = false
	}
}

// unpad drops the pad columns of logits read from the device: rows of
// PadVocab values become rows of Vocab.
func (m *Model) unpad(vals []float32) []float32 {
	V, W := m.Config.Vocab, m.padV
	if W == V {
		return vals
	}
	rows := len(vals) / W
	out := make([]float32, rows*V)
	for i := range rows {
		copy(out[i*V:(i+1)*V], vals[i*W:i*W+V])
	}
	return out
}

// readLogits downloads a logits buffer [rows, PadVocab] as [rows, Vocab].
func (m *Model) readLogits(t *engine.Tensor) ([]float32, error) {
	v, err := engine.Float32s(t)
	if err != nil {
		return nil, err
	}
	return m.unpad(v), nil
}

// freeCompute releases the compute copies and the padding map.
func (m *Model) freeCompute() {
	for _, p := range m.params {
		if p.C != nil {
			m.Dev.Free(p.C)
			p.C = nil
		}
	}
	if m.padIDs != nil {
		m.Dev.Free(m.padIDs)
		m.padIDs = nil
	}
	if m.headGrad != nil {
		m.Dev.Free(m.headGrad)
		m.headGrad = nil
	}
}
