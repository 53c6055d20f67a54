package engine

import "fmt"

// NormLinear is implemented by a Device that fuses a pre-norm block's
// RMSNorm into the products that read its output, where the operands suit
// it (a decode step: a few rows of x against weights each read once). The
// normalized rows h = RMSNorm(x, normW) are never stored: each block of the
// kernel recomputes the sums of squares of the rows from x and keeps h in
// f32, so the norm costs no launch and no round trip of h through memory.
//
// Rounding: the fused form never rounds h; the composition (RMSNorm into a
// scratch of x's dtype, then the products) rounds it to that dtype before
// the products. The two differ by up to u sum_k |h_k| |W_jk| per output
// (u the unit roundoff of x's dtype), the bound the conformance suite
// holds both to.
type NormLinear interface {
	// NormLinearMulti computes outs[i] = RMSNorm(x, normW, eps) ws[i]^T for
	// x [M, K], normW [K] and ws[i] [N_i, K] (outs[i] [M, N_i]), at most
	// four weights, h = x rstd normW with rstd = 1/sqrt(mean(x^2) + eps)
	// over each row. It reports false, having done nothing, when the device
	// has no kernel for these operands.
	NormLinearMulti(outs, ws []*Tensor, x, normW *Tensor, eps float32) (bool, error)
	// NormLinearSwiGLU computes act = silu(h Wg^T) * (h Wu^T) with
	// h = RMSNorm(x, normW, eps) (x [M, K], Wg and Wu [N, K], act [M, N]),
	// h and the two products kept in f32 up to the activation. It reports
	// false, having done nothing, when the device has no kernel for these
	// operands.
	NormLinearSwiGLU(act, x, normW, wGate, wUp *Tensor, eps float32) (bool, error)
}

// CheckNormLinear validates the norm operands of the NormLinear ops and
// returns K: x a floating tensor of rank 2 or more whose last dimension is
// K, normW a floating [K]. The products' operands are checked by
// CheckMatMul. Valid operands are then passed to own (nil: no device).
func CheckNormLinear(own Owner, op string, x, normW *Tensor) (k int, err error) {
	if err = needFloats(op, []string{"x", "normW"}, x, normW); err != nil {
		return 0, err
	}
	if x.Rank() < 2 {
		return 0, argErr(op, "x", "want rank 2 or more [..., M, K], got %v", x)
	}
	k = x.Dim(x.Rank() - 1)
	if err = needShape(op, "normW", normW, Shape{k}); err != nil {
		return 0, err
	}
	return k, own.check(op, x, normW)
}

// NormLinearMulti computes outs[i] = RMSNorm(x, normW, eps) ws[i]^T for
// every i (see NormLinear.NormLinearMulti): in one launch on a NormLinear
// device that takes the operands, else as RMSNorm into scratch (x's dtype
// and shape; nil allocates one for the call) and LinearMulti. The
// composition rounds the normalized rows to scratch's dtype, the fused
// form keeps them in f32 (see NormLinear).
func NormLinearMulti(dev Device, outs, ws []*Tensor, x, normW *Tensor, eps float32, scratch *Tensor) error {
	const op = "norm linear multi"
	if len(outs) != len(ws) || len(ws) == 0 {
		return fmt.Errorf("%s: %d outputs for %d weights", op, len(outs), len(ws))
	}
	if _, err := CheckNormLinear(nil, op, x, normW); err != nil {
		return err
	}
	if nl, ok := dev.(NormLinear); ok && len(ws) <= 4 {
		if done, err := nl.NormLinearMulti(outs, ws, x, normW, eps); done || err != nil {
			return err
		}
	}
	return normThen(dev, op, x, normW, eps, scratch, func(h *Tensor) error { return LinearMulti(dev, outs, ws, h) })
}

// NormLinearSwiGLU computes act = silu(h Wg^T) * (h Wu^T) with
// h = RMSNorm(x, normW, eps) (see NormLinear.NormLinearSwiGLU): fused on a
// NormLinear device that takes the operands, else as RMSNorm into scratch
// (x's dtype and shape) and LinearSwiGLU with gate and up ([M, N] of act's
// dtype) as its scratch. A nil scratch, gate or up is allocated for the
// call. The composition rounds h (and, unless the device fuses
// LinearSwiGLU, the products) to the dtype; the fused form only act.
func NormLinearSwiGLU(dev Device, act, x, normW, wGate, wUp *Tensor, eps float32, scratch, gate, up *Tensor) error {
	const op = "norm linear swiglu"
	if _, err := CheckNormLinear(nil, op, x, normW); err != nil {
		return err
	}
	if nl, ok := dev.(NormLinear); ok {
		if done, err := nl.NormLinearSwiGLU(act, x, normW, wGate, wUp, eps); done || err != nil {
			return err
		}
	}
	return normSwiGLUThen(dev, op, act, x, normW, eps, scratch, gate, up, func(g, u, h *Tensor) error {
		return LinearSwiGLU(dev, act, g, u, h, wGate, wUp)
	})
}

// normThen is the norm of the compositions: h = RMSNorm(x, normW, eps)
// into scratch (x's dtype and shape; nil allocates one for the call),
// then then(h).
func normThen(dev Device, op string, x, normW *Tensor, eps float32, scratch *Tensor, then func(h *Tensor) error) error {
	h, free, err := scratchLike(dev, scratch, x.dtype, x.shape)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	defer free()
	if err := dev.RMSNorm(h, nil, x, normW, eps); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return then(h)
}

// normSwiGLUThen is normThen with the gate and up scratch of the SwiGLU
// compositions ([M, N] of act's dtype; nil ones allocated for the call).
func normSwiGLUThen(dev Device, op string, act, x, normW *Tensor, eps float32, scratch, gate, up *Tensor,
	then func(g, u, h *Tensor) error) error {
	if act == nil {
		return argErr(op, "act", "missing")
	}
	g, freeG, err := scratchLike(dev, gate, act.dtype, act.shape)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	defer freeG()
	u, freeU, err := scratchLike(dev, up, act.dtype, act.shape)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	defer freeU()
	return normThen(dev, op, x, normW, eps, scratch, func(h *Tensor) error { return then(g, u, h) })
}

// scratchLike returns t, or where t is nil a new tensor of dtype dt and
// shape s that free releases.
func scratchLike(dev Device, t *Tensor, dt DType, s Shape) (*Tensor, func(), error) {
	if t != nil {
		return t, func() {}, nil
	}
	n, err := dev.Alloc(dt, s...)
	if err != nil {
		return nil, nil, err
	}
	return n, func() { dev.Free(n) }, nil
}
