package model

import "github.com/parallax-engine/parallax/engine"

// normRoPE is the per-head norm and rotation of an attention input: x
// [B, T, H, D] normed per head (rstd [B, T, H] saved), rotated by pos and
// written to out [B, H, T, D]. A device with the fused op
// (engine.NormRoPE) does it in one launch; any other runs RMSNorm into
// scratch [B, T, H, D], the swap and RoPE in place, the same values.
func (r *rec) normRoPE(out, rstd, x, w, pos, scratch *engine.Tensor, eps, theta float32) {
	if r.err != nil {
		return
	}
	if nr, ok := r.dev.(engine.NormRoPE); ok {
		r.fail("rmsnorm rope", nr.RMSNormRoPE(out, rstd, x, w, pos, eps, theta))
		return
	}
	r.rmsnorm(scratch, rstd, x, w, eps)
	r.swap(out, scratch)
	r.rope(out, pos, theta)
}

// normRoPEBackward is normRoPE's backward: dX [B, T, H, D] and dW (added
// to) from dOut [B, H, T, D]: dOut is rotated back in place and swapped
// into scratch [B, T, H, D], then the norm's backward.
func (r *rec) normRoPEBackward(dX, dW, dOut, x, w, rstd, pos, scratch *engine.Tensor, theta float32) {
	if r.err != nil {
		return
	}
	// The fused backward (engine.NormRoPE's RMSNormRoPEBackward) is not
	// used yet: on the H200 its CUDA kernel took 148 us a call against some
	// 60 us for the four unfused ones (gpt2-124m-like, 16 x 512), its dW
	// column sums being the slow part. The forward's fusion is the win.
	r.ropeBackward(dOut, pos, theta)
	r.swap(scratch, dOut)
	r.rmsnormBackward(dX, dW, scratch, x, w, rstd)
}
