package model

import (
	"encoding/binary"
	"fmt"
	"os"

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
	// int8 maps the values of a quantized model's int8 weights (an I8
	// weight passed to linear, embedding, ...) to their Int8Weight; the
	// helpers below then run the int8 ops (quant.go).
	int8 map[*engine.Tensor]*engine.Int8Weight
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
// An int8 W runs LinearInt8.
func (r *rec) linear(y, x, w *engine.Tensor) {
	if q := r.int8Of("linear", w); q != nil {
		r.fail("linear", r.dev.LinearInt8(y, x, *q, false))
	} else if r.err == nil {
		r.fail("linear", r.dev.MatMul(y, x, w, engine.MatMulOpts{TransB: true}))
	}
}

// linearAdd is y += x W^T (a projection into the residual stream).
func (r *rec) linearAdd(y, x, w *engine.Tensor) {
	if q := r.int8Of("linear", w); q != nil {
		r.fail("linear", r.dev.LinearInt8(y, x, *q, true))
	} else if r.err == nil {
		r.fail("linear", r.dev.MatMul(y, x, w, engine.MatMulOpts{TransB: true, Accumulate: true}))
	}
}

// linearResidual is y = res + x W^T with res apart from y (a projection
// into a new residual stream, engine.LinearResidual: one product where the
// device takes it, else the copy and an accumulating product). An int8 W
// takes the copy and an accumulating LinearInt8. With trainFusion off it
// is the copy and linearAdd.
func (r *rec) linearResidual(y, res, x, w *engine.Tensor) {
	if q := r.int8Of("linear", w); q != nil || !trainFusion {
		r.copy(y, res)
		r.linearAdd(y, x, w)
	} else if r.err == nil {
		r.fail("linear", engine.LinearResidual(r.dev, y, res, x, w))
	}
}

// rmsnormBackwardAdd is dx += the RMSNorm input gradient (dw accumulating
// as rmsnormBackward's): engine.RMSNormBackwardAdd, one pass where the
// device takes it, else the backward into tmp and an add (which trainFusion
// off always runs).
func (r *rec) rmsnormBackwardAdd(dx, dw, dOut, x, w, rstd, tmp *engine.Tensor) {
	if !trainFusion {
		r.rmsnormBackward(tmp, dw, dOut, x, w, rstd)
		r.add(dx, dx, tmp)
	} else if r.err == nil {
		r.fail("rmsnorm backward", engine.RMSNormBackwardAdd(r.dev, dx, dw, dOut, x, w, rstd, tmp))
	}
}

// trainFusion runs the training step's fused residual ops (rec.linearResidual,
// rec.rmsnormBackwardAdd) in place of the ops they compose; the tests turn
// it off to compare the two paths.
var trainFusion = true

// linearBackward is the backward of y = x W^T: dx = dy W (dx += dy W when
// addDX, to sum the gradients of projections sharing one input) and
// dW += dy^T x.
func (r *rec) linearBackward(dx, dw, dy, x, w *engine.Tensor, addDX bool) {
	if r.err == nil && w != nil && w.DType() == engine.I8 {
		r.fail("linear backward", ErrQuantized)
	}
	if r.err != nil {
		return
	}
	r.fail("linear backward (input)", r.dev.MatMul(dx, dy, w, engine.MatMulOpts{Accumulate: addDX}))
	if r.err == nil {
		r.fail("linear backward (weight)", r.dev.MatMul(dw, dy, x, engine.MatMulOpts{TransA: true, Accumulate: true}))
	}
}

// An int8 table (a quantized model's embedding) gathers dequantized rows
// with EmbeddingInt8.
func (r *rec) embedding(out, table, ids *engine.Tensor) {
	if q := r.int8Of("embedding", table); q != nil {
		r.fail("embedding", r.dev.EmbeddingInt8(out, *q, ids))
	} else if r.err == nil {
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
// Int8 weights run engine.LinearMultiInt8.
func (r *rec) linearMulti(ys, ws []*engine.Tensor, x *engine.Tensor) {
	if qs := r.int8All("linear", ws); qs != nil {
		r.fail("linear", engine.LinearMultiInt8(r.dev, ys, qs, x))
	} else if r.err == nil {
		r.fail("linear", engine.LinearMulti(r.dev, ys, ws, x))
	}
}

// linearSwiGLU is act = silu(x Wg^T) * (x Wu^T) (engine.LinearSwiGLU; gate
// and up are its scratch where it is not fused).
// Int8 weights run engine.LinearSwiGLUInt8.
func (r *rec) linearSwiGLU(act, gate, up, x, wGate, wUp *engine.Tensor) {
	if qs := r.int8All("mlp", []*engine.Tensor{wGate, wUp}); qs != nil {
		r.fail("mlp", engine.LinearSwiGLUInt8(r.dev, act, gate, up, x, qs[0], qs[1]))
	} else if r.err == nil {
		r.fail("mlp", engine.LinearSwiGLU(r.dev, act, gate, up, x, wGate, wUp))
	}
}

// decodeFusion runs a decode step's fused ops (engine.NormLinearMulti,
// engine.DecodePrep, engine.NormLinearSwiGLU: the block's norms inside the
// products' kernels and the attention inputs prepared in one op) in place
// of the ops they compose; PARALLAX_DECODE_FUSION=0 turns them off, to
// measure them or rule them out. Prefill and training never use them.
var decodeFusion = os.Getenv("PARALLAX_DECODE_FUSION") != "0"

// normLinearMulti is y_i = RMSNorm(x) W_i^T for each weight
// (engine.NormLinearMulti; h is the normed rows' scratch where it is not
// fused). Int8 weights run engine.NormLinearMultiInt8 (the same fusion
// over the int8 kernels).
func (r *rec) normLinearMulti(ys, ws []*engine.Tensor, x, normW *engine.Tensor, eps float32, h *engine.Tensor) {
	if !allFloat(ws...) {
		if qs := r.int8All("norm linear", ws); qs != nil {
			r.fail("norm linear", engine.NormLinearMultiInt8(r.dev, ys, qs, x, normW, eps, h))
		} else {
			r.rmsnorm(h, nil, x, normW, eps)
			r.linearMulti(ys, ws, h)
		}
	} else if r.err == nil {
		r.fail("norm linear", engine.NormLinearMulti(r.dev, ys, ws, x, normW, eps, h))
	}
}

// normLinearDecodePrep is normLinearMulti(ys, ws, x, normW, eps, h) then
// decodePrep(a) (engine.NormLinearDecodePrep; int8 weights
// engine.NormLinearDecodePrepInt8).
func (r *rec) normLinearDecodePrep(ys, ws []*engine.Tensor, x, normW *engine.Tensor, eps float32, h *engine.Tensor, a engine.DecodePrepArgs) {
	switch {
	case r.err != nil:
	case allFloat(ws...):
		r.fail("norm linear decode prep", engine.NormLinearDecodePrep(r.dev, ys, ws, x, normW, eps, h, a))
	default:
		if qs := r.int8All("norm linear", ws); qs != nil {
			r.fail("norm linear decode prep", engine.NormLinearDecodePrepInt8(r.dev, ys, qs, x, normW, eps, h, a))
			return
		}
		r.normLinearMulti(ys, ws, x, normW, eps, h)
		r.decodePrep(a)
	}
}

// normLinearSwiGLU is act = silu(h Wg^T) * (h Wu^T), h = RMSNorm(x)
// (engine.NormLinearSwiGLU; h, gate and up are its scratch where it is not
// fused). Int8 weights run engine.NormLinearSwiGLUInt8.
func (r *rec) normLinearSwiGLU(act, x, normW, wGate, wUp *engine.Tensor, eps float32, h, gate, up *engine.Tensor) {
	if !allFloat(wGate, wUp) {
		if qs := r.int8All("norm mlp", []*engine.Tensor{wGate, wUp}); qs != nil {
			r.fail("norm mlp", engine.NormLinearSwiGLUInt8(r.dev, act, x, normW, qs[0], qs[1], eps, h, gate, up))
		} else {
			r.rmsnorm(h, nil, x, normW, eps)
			r.linearSwiGLU(act, gate, up, h, wGate, wUp)
		}
	} else if r.err == nil {
		r.fail("norm mlp", engine.NormLinearSwiGLU(r.dev, act, x, normW, wGate, wUp, eps, h, gate, up))
	}
}

// allFloat reports whether every tensor has a floating dtype.
func allFloat(ts ...*engine.Tensor) bool {
	for _, t := range ts {
		if !t.DType().IsFloat() {
			return false
		}
	}
	return true
}

// decodePrep norms and rotates a decode step's q, k (and r) and appends k
// and v to the caches (engine.DecodePrep).
func (r *rec) decodePrep(a engine.DecodePrepArgs) {
	if r.err == nil {
		r.fail("decode prep", engine.DecodePrep(r.dev, a))
	}
}
