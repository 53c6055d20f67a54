package cpu

import (
	"fmt"

	"github.com/parallax-engine/parallax/engine"
)

// slot returns matrix i of stack [n, rows, cols] as a [rows, cols] tensor
// sharing the stack's storage.
func (d *Device) slot(stack *engine.Tensor, i int) *engine.Tensor {
	per := stack.Dim(1) * stack.Dim(2)
	var buf any
	switch b := stack.Storage().(type) {
	case []float32:
		buf = b[i*per : (i+1)*per : (i+1)*per]
	case []uint16:
		buf = b[i*per : (i+1)*per : (i+1)*per]
	}
	return engine.NewTensor(d, stack.DType(), engine.Shape{stack.Dim(1), stack.Dim(2)}, buf)
}

// MuonMomentumMany runs MuonMomentum for every matrix straight into its
// slot of stack (the same arithmetic, bit for bit); see
// engine.MuonMultiOps.
func (d *Device) MuonMomentumMany(stack *engine.Tensor, ms, gs []*engine.Tensor, o engine.MuonMomentumOpts) error {
	if _, err := engine.CheckMuonMomentumMany(stack, ms, gs, o); err != nil {
		return err
	}
	if err := d.own("muon momentum", stack); err != nil {
		return err
	}
	for i := range ms {
		if err := d.MuonMomentum(d.slot(stack, i), ms[i], gs[i], o); err != nil {
			return fmt.Errorf("matrix %d of %d: %w", i, len(ms), err)
		}
	}
	return nil
}

// MuonApplyMany runs MuonApply for every parameter straight from its slot
// of stack (the same arithmetic, bit for bit); see engine.MuonMultiOps.
func (d *Device) MuonApplyMany(ps []*engine.Tensor, stack *engine.Tensor, lr, wd float32, lrScales, scales []float32) error {
	if _, err := engine.CheckMuonApplyMany(ps, stack, lrScales, scales); err != nil {
		return err
	}
	if err := d.own("muon apply", stack); err != nil {
		return err
	}
	for i, p := range ps {
		if err := d.MuonApply(p, d.slot(stack, i), engine.ScaledLR(lr, lrScales, i), wd, scales[i]); err != nil {
			return fmt.Errorf("matrix %d of %d: %w", i, len(ps), err)
		}
	}
	return nil
}

var _ engine.MuonMultiOps = (*Device)(nil)
