package engine

import "fmt"

// MultiLinear is implemented by a Device that computes several linear
// layers of one input in a single launch where the operands suit it (the
// q, k, v and r projections of a decode step: a few rows of x against
// weights each read once).
type MultiLinear interface {
	// LinearMulti computes outs[i] = x W_i^T for x [M, K] and ws[i] [N_i, K]
	// (outs[i] [M, N_i]), at most four weights. It reports false, having
	// done nothing, when the device has no kernel for these operands.
	LinearMulti(outs, ws []*Tensor, x *Tensor) (bool, error)
}

// LinearMulti computes outs[i] = x ws[i]^T for every i: in one launch on a
// MultiLinear device that takes the operands, else one MatMul each. The
// results are those of the separate products up to the order of the f32
// accumulation.
func LinearMulti(dev Device, outs, ws []*Tensor, x *Tensor) error {
	if len(outs) != len(ws) || len(ws) == 0 {
		return fmt.Errorf("linear multi: %d outputs for %d weights", len(outs), len(ws))
	}
	if ml, ok := dev.(MultiLinear); ok && len(ws) <= 4 {
		if done, err := ml.LinearMulti(outs, ws, x); done || err != nil {
			return err
		}
	}
	for i := range ws {
		if err := dev.MatMul(outs[i], x, ws[i], MatMulOpts{TransB: true}); err != nil {
			return fmt.Errorf("linear multi: weight %d: %w", i, err)
		}
	}
	return nil
}

// MLPFuser is implemented by a Device that computes a SwiGLU MLP's
// activation straight from its input where the operands suit it (a decode
// step's few rows), without storing the gate and up products.
type MLPFuser interface {
	// LinearSwiGLU computes act = silu(x Wg^T) * (x Wu^T) (x [M, K], Wg and
	// Wu [N, K], act [M, N]), the two products kept in f32 up to the
	// activation. It reports false, having done nothing, when the device
	// has no kernel for these operands.
	LinearSwiGLU(act, x, wGate, wUp *Tensor) (bool, error)
}

// LinearSwiGLU computes act = silu(x Wg^T) * (x Wu^T): fused on an MLPFuser
// device that takes the operands, else as the two products into gate and
// up ([M, N] scratch of act's dtype, which then hold them) and SwiGLU. The
// fused form rounds only act, the other the products too.
func LinearSwiGLU(dev Device, act, gate, up, x, wGate, wUp *Tensor) error {
	if f, ok := dev.(MLPFuser); ok {
		if done, err := f.LinearSwiGLU(act, x, wGate, wUp); done || err != nil {
			return err
		}
	}
	if err := dev.MatMul(gate, x, wGate, MatMulOpts{TransB: true}); err != nil {
		return fmt.Errorf("linear swiglu: gate: %w", err)
	}
	if err := dev.MatMul(up, x, wUp, MatMulOpts{TransB: true}); err != nil {
		return fmt.Errorf("linear swiglu: up: %w", err)
	}
	return dev.SwiGLU(act, gate, up)
}
