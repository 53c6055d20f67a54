package cpu

import (
	"math"

	"github.com/parallax-engine/parallax/engine"
)

// HeadGate scales each head's vector by the sigmoid of its gate logit.
func (d *Device) HeadGate(out, x, z *engine.Tensor) error {
	_, _, dim, err := engine.CheckHeadGate(d.own, out, x, z)
	if err != nil {
		return err
	}
	xs, zs := floats(x), floats(z)
	o, commit := output(out, false)
	d.parallelMin(len(zs), 64, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			s := float32(1 / (1 + math.Exp(-float64(zs[i]))))
			row := xs[i*dim : (i+1)*dim]
			dst := o[i*dim : (i+1)*dim]
			for j, v := range row {
				dst[j] = s * v
			}
		}
	})
	commit()
	return nil
}

// HeadGateBackward computes dX = sigmoid(z) dOut and
// dZ = sigmoid(z) (1 - sigmoid(z)) sum_d dOut x.
func (d *Device) HeadGateBackward(dX, dZ, dOut, x, z *engine.Tensor) error {
	_, _, dim, err := engine.CheckHeadGateBackward(d.own, dX, dZ, dOut, x, z)
	if err != nil {
		return err
	}
	xs, zs, gs := floats(x), floats(z), floats(dOut)
	dx, commitX := output(dX, false)
	dz, commitZ := output(dZ, false)
	d.parallelMin(len(zs), 64, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			s := 1 / (1 + math.Exp(-float64(zs[i])))
			var dot float64
			for j := i * dim; j < (i+1)*dim; j++ {
				dot += float64(gs[j]) * float64(xs[j])
				dx[j] = float32(s) * gs[j]
			}
			dz[i] = float32(s * (1 - s) * dot)
		}
	})
	commitX()
	commitZ()
	return nil
}
