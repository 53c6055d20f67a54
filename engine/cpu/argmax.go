package cpu

import (
	"math"

	"github.com/parallax-engine/parallax/engine"
)

var _ engine.ArgMaxer = (*Device)(nil)

// ArgMaxRows writes each row's first largest index among its first classes
// columns (-1 for a row with a NaN); see engine.ArgMaxer.
func (d *Device) ArgMaxRows(out, x *engine.Tensor, classes int) error {
	n, w, err := engine.CheckArgMaxRows(d.own, out, x, classes)
	if err != nil {
		return err
	}
	xv, ids := viewOf(x), out.Storage().([]int32)
	d.parallelMin(n, 1, func(lo, hi int) {
		buf := make([]float32, classes)
		for r := lo; r < hi; r++ {
			row := xv.read(buf, r*w, r*w+classes)
			best, bv := int32(0), float32(math.Inf(-1))
			for c, v := range row {
				if v != v {
					best = -1
					break
				}
				if v > bv || c == 0 {
					best, bv = int32(c), v
				}
			}
			ids[r] = best
		}
	})
	return nil
}
