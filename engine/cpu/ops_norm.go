package cpu

import (
	"math"

	"github.com/parallax-engine/parallax/engine"
)

// rowChunk is the least number of rows of width n worth a worker.
func rowChunk(n int) int { return max(1, elemChunk/max(n, 1)) }

// RMSNorm normalises the rows of x; see engine.Ops. Row statistics
// accumulate in float64.
func (d *Device) RMSNorm(out, rstd, x, w *engine.Tensor, eps float32) error {
	rows, n, err := engine.CheckRMSNorm(d.own, out, rstd, x, w)
	if err != nil {
		return err
	}
	if rows == 0 || n == 0 {
		return nil
	}
	wf := floats(w)
	xv, ov := viewOf(x), viewOf(out)
	var rs []float32
	if rstd != nil {
		rs = rstd.Storage().([]float32)
	}
	d.parallelMin(rows, rowChunk(n), func(lo, hi int) {
		xbuf := make([]float32, n)
		obuf := make([]float32, n)
		for r := lo; r < hi; r++ {
			xr := xv.read(xbuf, r*n, (r+1)*n)
			var ss float64
			for _, v := range xr {
				ss += float64(v) * float64(v)
			}
			s := float32(1 / math.Sqrt(ss/float64(n)+float64(eps)))
			if rs != nil {
				rs[r] = s
			}
			or := ov.span(obuf, r*n, (r+1)*n)
			for i, v := range xr {
				or[i] = v * s * wf[i]
			}
			ov.commit(or, r*n)
		}
	})
	return nil
}

// RMSNormBackward computes dX and accumulates dW; see engine.Ops. The row
// means and the dW partial sums (one per worker, combined in order)
// accumulate in float64.
func (d *Device) RMSNormBackward(dX, dW, dOut, x, w, rstd *engine.Tensor) error {
	return d.rmsnormBackward(dX, dW, dOut, x, w, rstd, false)
}

// RMSNormBackwardAccumulate is RMSNormBackward adding the input gradient
// into dX (engine.RMSNormBackwardAccumulator): each element's gradient is
// formed in f32 as RMSNormBackward's and added to dX in f32, so for an f32
// dX the result is bit for bit that of RMSNormBackward into a scratch and
// AddScaled; a 16-bit dX is rounded once (the composition rounds twice).
func (d *Device) RMSNormBackwardAccumulate(dX, dW, dOut, x, w, rstd *engine.Tensor) (bool, error) {
	if dX == dOut || dX == x {
		return false, &engine.ArgError{Op: "rmsnorm backward", Operand: "dX", Msg: "an accumulating dX must not alias dOut or x"}
	}
	return true, d.rmsnormBackward(dX, dW, dOut, x, w, rstd, true)
}

func (d *Device) rmsnormBackward(dX, dW, dOut, x, w, rstd *engine.Tensor, addDX bool) error {
	rows, n, err := engine.CheckRMSNormBackward(d.own, dX, dW, dOut, x, w, rstd)
	if err != nil {
		return err
	}
	if rows == 0 || n == 0 {
		return nil
	}
	wf := floats(w)
	rs := rstd.Storage().([]float32)
	xv, gv, dv := viewOf(x), viewOf(dOut), viewOf(dX)
	count, size := d.reduceChunks(rows, rowChunk(n))
	parts := make([][]float64, count)
	d.parallel(count, func(c0, c1 int) {
		xbuf := make([]float32, n)
		gbuf := make([]float32, n)
		dbuf := make([]float32, n)
		for c := c0; c < c1; c++ {
			dw := make([]float64, n)
			parts[c] = dw
			for r := c * size; r < min((c+1)*size, rows); r++ {
				xr := xv.read(xbuf, r*n, (r+1)*n)
				gr := gv.read(gbuf, r*n, (r+1)*n)
				s := rs[r]
				// mean(gy * xhat) with gy = dOut * w, xhat = x * rstd.
				var dot float64
				for i, g := range gr {
					xh := float64(xr[i]) * float64(s)
					dot += float64(g) * float64(wf[i]) * xh
					dw[i] += float64(g) * xh
				}
				mean := float32(dot / float64(n))
				dr := dv.span(dbuf, r*n, (r+1)*n)
				if addDX {
					// The row's current values (f32: the storage itself).
					dr = dv.read(dbuf, r*n, (r+1)*n)
					for i, g := range gr {
						xh := xr[i] * s
						dr[i] += float32(s * (g*wf[i] - xh*mean))
					}
				} else {
					for i, g := range gr {
						xh := xr[i] * s
						dr[i] = s * (g*wf[i] - xh*mean)
					}
				}
				dv.commit(dr, r*n)
			}
		}
	})
	acc, commit := output(dW, true)
	for i := range acc {
		var s float64
		for _, p := range parts {
			s += p[i]
		}
		acc[i] = float32(float64(acc[i]) + s)
	}
	commit()
	return nil
}

var _ engine.RMSNormBackwardAccumulator = (*Device)(nil)
