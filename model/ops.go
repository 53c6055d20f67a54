package model

import (
	"encoding/binary"
	"fmt"

	"github.com/parallax-engine/parallax/engine"
)

// rec enqueues ops on a device, stopping at the first error: once an op
// fails, the following calls do nothing and err (wrapped with where, such as
// "layer 3", and the op's name) is what the pass returns. It lets the
// forward and backward passes read as the plain list of layer calls they are.
type rec struct {
	dev   engine.Device
	where string
	err   error
	views map[*engine.Tensor]bool // activations that are views of others (swap skips a swap onto its own source)
}

func (r *rec) fail(op string, err error) {
	if err != nil && r.err == nil {
		if r.where != "" {
			r.err = fmt.Errorf("%s: %s: %w", r.where, op, err)
		} else {
			r.err = fmt.Errorf("%s: %w", op, err)
		}
	}
}

// linear is y = x W^T for x [N, in] and W [out, in] (PyTorch's Linear).
func (r *rec) linear(y, x, w *engine.Tensor) {
	if r.err == nil {
		r.fail("linear", r.dev.MatMul(y, x, w, engine.MatMulOpts{TransB: true}))
	}
}

// linearAdd is y += x W^T (a projection into the residual stream).
func (r *rec) linearAdd(y, x, w *engine.Tensor) {
	if r.err == nil {
		r.fail("linear", r.dev.MatMul(y, x, w, engine.MatMulOpts{TransB: true, Accumulate: true}))
	}
}

// linearBackward is the backward of y = x W^T: dx = dy W (dx += dy W when
// addDX, to sum the gradients of projections sharing one input) and
// dW += dy^T x.
func (r *rec) linearBackward(dx, dw, dy, x, w *engine.Tensor, addDX bool) {
	if r.err != nil {
		return
	}
	r.fail("linear backward (input)", r.dev.MatMul(dx, dy, w, engine.MatMulOpts{Accumulate: addDX}))
	if r.err == nil {
		r.fail("linear backward (weight)", r.dev.MatMul(dw, dy, x, engine.MatMulOpts{TransA: true, Accumulate: true}))
	}
}

func (r *rec) embedding(out, table, ids *engine.Tensor) {
	if r.err == nil {
		r.fail("embedding", r.dev.Embedding(out, table, ids))
	}
}

func (r *rec) embeddingBackward(dTable, ids, dOut *engine.Tensor) {
	if r.err == nil {
		r.fail("embedding backward", r.dev.EmbeddingBackward(dTable, ids, dOut))
	}
}

func (r *rec) rmsnorm(out, rstd, x, w *engine.Tensor, eps float32) {
	if r.err == nil {
		r.fail("rmsnorm", r.dev.RMSNorm(out, rstd, x, w, eps))
	}
}

func (r *rec) rmsnormBackward(dx, dw, dOut, x, w, rstd *engine.Tensor) {
	if r.err == nil {
		r.fail("rmsnorm backward", r.dev.RMSNormBackward(dx, dw, dOut, x, w, rstd))
	}
}

func (r *rec) rope(x, pos *engine.Tensor, theta float32) {
	if r.err == nil {
		r.fail("rope", r.dev.RoPE(x, x, pos, theta))
	}
}

func (r *rec) ropeBackward(dx, pos *engine.Tensor, theta float32) {
	if r.err == nil {
		r.fail("rope backward", r.dev.RoPEBackward(dx, dx, pos, theta))
	}
}

func (r *rec) swap(dst, src *engine.Tensor) {
	if r.err == nil && r.views[dst] && swapIsIdentity(src) {
		return // one position (decoding): both layouts are the same memory
	}
	if r.err == nil {
		r.fail("swap axes", r.dev.SwapAxes12(dst, src))
	}
}

func (r *rec) copy(dst, src *engine.Tensor) {
	if r.err == nil {
		r.fail("copy", r.dev.Cast(dst, src))
	}
}

func (r *rec) add(out, a, b *engine.Tensor) {
	if r.err == nil {
		r.fail("add", r.dev.AddScaled(out, a, b, 1, 1))
	}
}

func (r *rec) swiglu(out, gate, up *engine.Tensor) {
	if r.err == nil {
		r.fail("swiglu", r.dev.SwiGLU(out, gate, up))
	}
}

func (r *rec) headGate(out, x, z *engine.Tensor) {
	if r.err == nil {
		r.fail("probe gate", r.dev.HeadGate(out, x, z))
	}
}

func (r *rec) headGateBackward(dX, dZ, dOut, x, z *engine.Tensor) {
	if r.err == nil {
		r.fail("probe gate backward", r.dev.HeadGateBackward(dX, dZ, dOut, x, z))
	}
}

func (r *rec) swigluBackward(dGate, dUp, dOut, gate, up *engine.Tensor) {
	if r.err == nil {
		r.fail("swiglu backward", r.dev.SwiGLUBackward(dGate, dUp, dOut, gate, up))
	}
}

func (r *rec) attention(a engine.AttentionArgs) {
	if r.err == nil {
		r.fail("attention", r.dev.Attention(a))
	}
}

func (r *rec) attentionBackward(a engine.AttentionBackwardArgs) {
	if r.err == nil {
		r.fail("attention backward", r.dev.AttentionBackward(a))
	}
}

func (r *rec) decodeAttention(a engine.DecodeArgs) {
	if r.err == nil {
		r.fail("decode attention", r.dev.DecodeAttention(a))
	}
}

func (r *rec) kvAppend(cache, x *engine.Tensor, start int) {
	if r.err == nil {
		r.fail("kv append", r.dev.KVAppend(cache, x, start))
	}
}

func (r *rec) crossEntropy(loss, dLogits, logits, targets *engine.Tensor, o engine.CrossEntropyOpts) {
	if r.err == nil {
		r.fail("cross entropy", r.dev.CrossEntropy(loss, dLogits, logits, targets, o))
	}
}

// writeInt32s uploads vals into the I32 tensor t.
func writeInt32s(dev engine.Device, t *engine.Tensor, vals []int32) error {
	b := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	}
	return dev.Write(t, b)
}

// swapIsIdentity reports whether SwapAxes12 of t leaves its memory as it is:
// one of the two swapped dimensions has length 1.
func swapIsIdentity(t *engine.Tensor) bool {
	s := t.Shape()
	return len(s) == 4 && (s[1] == 1 || s[2] == 1)
}

func (r *rec) kvAppendAt(cache, x, starts *engine.Tensor) {
	if r.err == nil {
		r.fail("kv append", r.dev.KVAppendAt(cache, x, starts))
	}
}

// linearMulti is y_i = x W_i^T for each weight (engine.LinearMulti).
func (r *rec) linearMulti(ys, ws []*engine.Tensor, x *engine.Tensor) {
	if r.err == nil {
		r.fail("linear", engine.LinearMulti(r.dev, ys, ws, x))
	}
}

// linearSwiGLU is act = silu(x Wg^T) * (x Wu^T) (engine.LinearSwiGLU; gate
// and up are its scratch where it is not fused).
func (r *rec) linearSwiGLU(act, gate, up, x, wGate, wUp *engine.Tensor) {
	if r.err == nil {
		r.fail("mlp", engine.LinearSwiGLU(r.dev, act, gate, up, x, wGate, wUp))
	}
}
