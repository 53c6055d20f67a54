package model

import (
	"os"

	"github.com/parallax-engine/parallax/engine"
)

// unfusedNormRoPEBackward (PARALLAX_NORMROPE_BWD=unfused) runs the
// composed backward (RoPE backward, swap, RMSNorm backward) even where the
// device has the fused one, to measure one against the other.
var unfusedNormRoPEBackward = os.Getenv("PARALLAX_NORMROPE_BWD") == "unfused"

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
// to) from dOut [B, H, T, D]. A device with the fused op does it in one
// pass (dOut is left as it was); any other rotates dOut back in place,
// swaps it into scratch [B, T, H, D] and runs the norm's backward.
func (r *rec) normRoPEBackward(dX, dW, dOut, x, w, rstd, pos, scratch *engine.Tensor, theta float32) {
	if r.err != nil {
		return
	}
	if nr, ok := r.dev.(engine.NormRoPE); ok && !unfusedNormRoPEBackward {
		r.fail("rmsnorm rope backward", nr.RMSNormRoPEBackward(dX, dW, dOut, x, w, rstd, pos, theta))
		return
	}
	r.ropeBackward(dOut, pos, theta)
	r.swap(scratch, dOut)
	r.rmsnormBackward(dX, dW, scratch, x, w, rstd)
}
