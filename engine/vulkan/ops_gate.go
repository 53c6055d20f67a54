package vulkan

import (
	"github.com/parallax-engine/parallax/engine"
)

// HeadGate scales each head vector by the sigmoid of its gate logit:
// out[..., h, :] = sigmoid(z[..., h]) x[..., h, :] (shaders/gate.comp).
func (d *Device) HeadGate(o, x, z *engine.Tensor) error {
	rows, h, dim, err := engine.CheckHeadGate(d.own, o, x, z)
	if err != nil {
		return err
	}
	n := rows * h
	if n*dim == 0 {
		return nil
	}
	wg := d.flexWG()
	return d.launch("gate", wg, spec{1: 0}, push(uint32(n), uint32(dim)), d.strideGroups(n*dim, wg),
		in(x), in(z), out(o), d.none(), d.none())
}

// HeadGateBackward computes dX = sigmoid(z) dOut and
// dZ = sigmoid(z) (1 - sigmoid(z)) sum_d dOut x.
func (d *Device) HeadGateBackward(dX, dZ, dOut, x, z *engine.Tensor) error {
	rows, h, dim, err := engine.CheckHeadGateBackward(d.own, dX, dZ, dOut, x, z)
	if err != nil {
		return err
	}
	n := rows * h
	if n == 0 {
		return nil
	}
	return d.launch("gate", 64, spec{1: 1}, push(uint32(n), uint32(dim)), d.groups1(n),
		in(x), in(z), out(dX), in(dOut), out(dZ))
}
