package cpu

import (
	"math"

	"github.com/parallax-engine/parallax/engine"
)

// CorrectionRatio writes the mean over rows of ||vbar - o|| / ||vbar||
// (rows with vbar = 0 count 0), each row's norms in float64. The rows are
// summed in order, so the result does not depend on the thread count.
func (d *Device) CorrectionRatio(out, o, vbar *engine.Tensor) error {
	rows, D, err := engine.CheckCorrectionRatio(d.own, out, o, vbar)
	if err != nil {
		return err
	}
	of, vf := floats(o), floats(vbar)
	ratio := make([]float64, rows)
	d.parallelMin(rows, 256, func(lo, hi int) {
		for n := lo; n < hi; n++ {
			var num, den float64
			vr, or := vf[n*D:(n+1)*D], of[n*D:(n+1)*D]
			for x, vx := range vr {
				e := float64(vx) - float64(or[x])
				num += e * e
				den += float64(vx) * float64(vx)
			}
			if den > 0 {
				ratio[n] = math.Sqrt(num / den)
			}
		}
	})
	var sum float64
	for _, x := range ratio {
		sum += x
	}
	res := float32(0)
	if rows > 0 {
		res = float32(sum / float64(rows))
	}
	store(out, []float32{res})
	return nil
}
