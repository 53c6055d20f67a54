package engine

import "fmt"

// ResidualLinear is implemented by a Device that adds a linear layer to a
// residual stream held apart from the result in one product (the addend
// read by the product itself, no copy of the stream first).
type ResidualLinear interface {
	// LinearResidual computes y = r + x W^T for x [..., K], W [N, K] and r,
	// y [..., N] of one shape, r apart from y (no overlap). It reports
	// false, having done nothing, when the device has no kernel for these
	// operands.
	LinearResidual(y, r, x, w *Tensor) (bool, error)
}

// LinearResidual computes y = r + x w^T (a projection added to a residual
// stream r into a new stream y; y may be r itself, the in-place add): in
// one product on a ResidualLinear device that takes the operands, else as
// the copy of r into y (Cast) and an accumulating MatMul. Both add the f32
// product to r and round once to y's dtype; they differ at most in the
// order of the f32 accumulation.
func LinearResidual(dev Device, y, r, x, w *Tensor) error {
	if y == nil || r == nil {
		return argErr("linear residual", "y", "y and r are required")
	}
	if err := needShape("linear residual", "r", r, y.shape); err != nil {
		return err
	}
	if y != r {
		if rl, ok := dev.(ResidualLinear); ok {
			if done, err := rl.LinearResidual(y, r, x, w); done || err != nil {
				return err
			}
		}
		if err := dev.Cast(y, r); err != nil {
			return fmt.Errorf("linear residual: copy: %w", err)
		}
	}
	return dev.MatMul(y, x, w, MatMulOpts{TransB: true, Accumulate: true})
}

// RMSNormBackwardAccumulator is implemented by a Device whose RMSNorm
// backward can add its input gradient into dX in the same pass (a
// residual stream's gradient: the norm's input is the stream), instead of
// writing it to a scratch that is then added.
type RMSNormBackwardAccumulator interface {
	// RMSNormBackwardAccumulate is RMSNormBackward with
	// dX += rstd * (gy - xhat * mean(gy * xhat)) in place of dX = ...,
	// the sum formed in f32 and rounded once to dX's dtype; dW accumulates
	// as RMSNormBackward's. dX must not alias dOut or x. It reports false,
	// having done nothing, when the device has no kernel for the operands.
	RMSNormBackwardAccumulate(dX, dW, dOut, x, w, rstd *Tensor) (bool, error)
}

// RMSNormBackwardAdd is RMSNormBackward adding its input gradient into dX
// (dX += rstd (gy - xhat mean(gy xhat)), dW += sum dOut xhat): in one
// pass on an RMSNormBackwardAccumulator device that takes the operands,
// else as RMSNormBackward into tmp (dX's shape; its dtype rounds the
// gradient before the add) and AddScaled(dX, dX, tmp). tmp may be nil only
// on a device that takes the operands. dX must not be dOut or x.
func RMSNormBackwardAdd(dev Device, dX, dW, dOut, x, w, rstd, tmp *Tensor) error {
	const op = "rmsnorm backward add"
	if dX != nil && (dX == dOut || dX == x) {
		return argErr(op, "dX", "must not alias dOut or x")
	}
	if a, ok := dev.(RMSNormBackwardAccumulator); ok {
		if done, err := a.RMSNormBackwardAccumulate(dX, dW, dOut, x, w, rstd); done || err != nil {
			return err
		}
	}
	if tmp == nil {
		return argErr(op, "tmp", "missing (the scratch of the unfused form)")
	}
	if tmp == dX || tmp == dOut || tmp == x {
		return argErr(op, "tmp", "must not alias dX, dOut or x")
	}
	if err := dev.RMSNormBackward(tmp, dW, dOut, x, w, rstd); err != nil {
		return err
	}
	return dev.AddScaled(dX, dX, tmp, 1, 1)
}
