package engine

import "fmt"

// Int8NormLinear is implemented by a Device that fuses a pre-norm block's
// RMSNorm into the int8 matrix-vector products that read its output, as
// NormLinear does for 16-bit weights: the normalized rows
// h = RMSNorm(x, normW) are never stored; each block of the kernel
// recomputes the sums of squares of its rows from x and keeps h in f32.
//
// Rounding: the fused form never rounds h; the composition (RMSNorm into a
// scratch of x's dtype, then LinearMultiInt8 or LinearSwiGLUInt8) rounds
// it to that dtype before the products. The two differ by up to
// u sum_k |h_k| |W_jk| per output (u the unit roundoff of x's dtype, W the
// dequantized weight), the bound the conformance suite holds both to, on
// top of the int8 products' own (see CheckLinearInt8's ops).
type Int8NormLinear interface {
	// NormLinearMultiInt8 computes outs[i] = RMSNorm(x, normW, eps) ws[i]^T
	// for x [M, K], normW [K] and the int8 weights ws[i] [N_i, K]
	// (outs[i] [M, N_i]), at most four. It reports false, having done
	// nothing, when the device has no kernel for these operands.
	NormLinearMultiInt8(outs []*Tensor, ws []Int8Weight, x, normW *Tensor, eps float32) (bool, error)
	// NormLinearSwiGLUInt8 computes act = silu(h Wg^T) * (h Wu^T) with
	// h = RMSNorm(x, normW, eps) (x [M, K], Wg and Wu int8 [N, K],
	// act [M, N]), h and the two products kept in f32 up to the
	// activation. It reports false, having done nothing, when the device
	// has no kernel for these operands.
	NormLinearSwiGLUInt8(act, x, normW *Tensor, wGate, wUp Int8Weight, eps float32) (bool, error)
}

// NormLinearMultiInt8 computes outs[i] = RMSNorm(x, normW, eps) ws[i]^T for
// every int8 weight (see Int8NormLinear.NormLinearMultiInt8): in one
// launch on an Int8NormLinear device that takes the operands, else as
// RMSNorm into scratch (x's dtype and shape; nil allocates one for the
// call) and LinearMultiInt8. The composition rounds the normalized rows to
// scratch's dtype, the fused form keeps them in f32 (see Int8NormLinear).
func NormLinearMultiInt8(dev Device, outs []*Tensor, ws []Int8Weight, x, normW *Tensor, eps float32, scratch *Tensor) error {
	const op = "norm linear multi int8"
	if len(outs) != len(ws) || len(ws) == 0 {
		return fmt.Errorf("%s: %d outputs for %d weights", op, len(outs), len(ws))
	}
	if _, err := CheckNormLinear(nil, op, x, normW); err != nil {
		return err
	}
	if nl, ok := dev.(Int8NormLinear); ok && len(ws) <= 4 {
		if done, err := nl.NormLinearMultiInt8(outs, ws, x, normW, eps); done || err != nil {
			return err
		}
	}
	return normThen(dev, op, x, normW, eps, scratch, func(h *Tensor) error { return LinearMultiInt8(dev, outs, ws, h) })
}

// NormLinearSwiGLUInt8 computes act = silu(h Wg^T) * (h Wu^T) with
// h = RMSNorm(x, normW, eps) for int8 Wg and Wu (see
// Int8NormLinear.NormLinearSwiGLUInt8): fused on an Int8NormLinear device
// that takes the operands, else as RMSNorm into scratch (x's dtype and
// shape) and LinearSwiGLUInt8 with gate and up ([M, N] of act's dtype) as
// its scratch. A nil scratch, gate or up is allocated for the call. The
// composition rounds h (and, unless the device fuses LinearSwiGLUInt8, the
// products) to the dtype; the fused form only act.
func NormLinearSwiGLUInt8(dev Device, act, x, normW *Tensor, wGate, wUp Int8Weight, eps float32, scratch, gate, up *Tensor) error {
	const op = "norm linear swiglu int8"
	if _, err := CheckNormLinear(nil, op, x, normW); err != nil {
		return err
	}
	if nl, ok := dev.(Int8NormLinear); ok {
		if done, err := nl.NormLinearSwiGLUInt8(act, x, normW, wGate, wUp, eps); done || err != nil {
			return err
		}
	}
	return normSwiGLUThen(dev, op, act, x, normW, eps, scratch, gate, up, func(g, u, h *Tensor) error {
		return LinearSwiGLUInt8(dev, act, g, u, h, wGate, wUp)
	})
}
