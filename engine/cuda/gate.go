//go:build cgo

package cuda

import "github.com/parallax-engine/parallax/engine"

// HeadGate scales each head's vector by the sigmoid of its gate logit.
func (d *Device) HeadGate(out, x, z *engine.Tensor) error {
	rows, h, dim, err := engine.CheckHeadGate(d.own, out, x, z)
	if err != nil {
		return err
	}
	n := int64(rows) * int64(h) * int64(dim)
	return d.launch(ew, "head_gate", grid1(n), threads256, 0,
		newArgs().p(ptr(out)).i(dt(out)).p(ptr(x)).i(dt(x)).p(ptr(z)).i(dt(z)).l(n).i(dim))
}

// HeadGateBackward computes dX = sigmoid(z) dOut and
// dZ = sigmoid(z) (1 - sigmoid(z)) sum_d dOut x.
func (d *Device) HeadGateBackward(dX, dZ, dOut, x, z *engine.Tensor) error {
	rows, h, dim, err := engine.CheckHeadGateBackward(d.own, dX, dZ, dOut, x, z)
	if err != nil {
		return err
	}
	n := int64(rows) * int64(h)
	return d.launch(ew, "head_gate_bwd", grid1(n), threads256, 0,
		newArgs().p(ptr(dX)).i(dt(dX)).p(ptr(dZ)).i(dt(dZ)).p(ptr(dOut)).i(dt(dOut)).
			p(ptr(x)).i(dt(x)).p(ptr(z)).i(dt(z)).l(n).i(dim))
}
