package cpu

import (
	"fmt"
	"math"

	"github.com/parallax-engine/parallax/engine"
)

// CrossEntropy is the fused softmax cross-entropy; see engine.Ops. Each row
// of logits [N, W] subtracts the maximum of its C = o.Classes (or W) class
// columns before exponentiating and sums the exponentials in float64; the
// row's exponentials are kept, so each logit is exponentiated once. The pad
// columns [C, W) are never read, and zeroed in dLogits. A target outside
// [0, C) that is not the ignore index is an error (returned and kept for
// Sync) and nothing is written.
func (d *Device) CrossEntropy(loss, dLogits, logits, targets *engine.Tensor, o engine.CrossEntropyOpts) error {
	n, w, classes, err := engine.CheckCrossEntropy(d.own, loss, dLogits, logits, targets, o)
	if err != nil {
		return err
	}
	tg := ints(targets)
	for i, t := range tg {
		if t != o.IgnoreIndex && (t < 0 || int(t) >= classes) {
			return d.fail(fmt.Errorf("cross entropy: targets[%d] = %d is outside [0, %d) and is not the ignore index %d",
				i, t, classes, o.IgnoreIndex))
		}
	}
	ls := loss.Storage().([]float32)
	lv := viewOf(logits)
	var dv tensorView
	if dLogits != nil {
		dv = viewOf(dLogits)
	}
	d.parallelMin(n, rowChunk(w), func(lo, hi int) {
		xbuf := make([]float32, w)
		ebuf := make([]float32, classes)
		for r := lo; r < hi; r++ {
			t := tg[r]
			if t == o.IgnoreIndex {
				ls[r] = 0
				if dLogits != nil {
					out := dv.span(xbuf, r*w, (r+1)*w)
					clear(out)
					dv.commit(out, r*w)
				}
				continue
			}
			x := lv.read(xbuf, r*w, r*w+classes)
			m := float32(math.Inf(-1))
			for _, z := range x {
				m = max(m, z)
			}
			e := ebuf[:len(x)]
			var s float64
			for j, z := range x {
				ez := exp32(z - m)
				e[j] = ez
				s += float64(ez)
			}
			// The other classes' mass, summed apart from e[t] so that p_t - 1 =
			// -others/s keeps its accuracy when p_t is close to 1.
			others := s - float64(e[t])
			if others < 0.5*s {
				others = 0
				for j, ez := range e {
					if j != int(t) {
						others += float64(ez)
					}
				}
			}
			lse := float64(m) + math.Log(s)
			ls[r] = float32(lse - float64(x[t]))
			if dLogits == nil {
				continue
			}
			// x is no longer needed: dLogits may alias logits, and xbuf may
			// serve as the staging buffer.
			out := dv.span(xbuf, r*w, (r+1)*w)
			c := float32(float64(o.GradScale) / s)
			for j, ez := range e {
				out[j] = ez * c
			}
			out[t] = float32(-float64(o.GradScale) * others / s)
			clear(out[classes:])
			dv.commit(out, r*w)
		}
	})
	return nil
}

// SumSquares writes (or adds) sum x^2 into out, accumulated in float64; see
// engine.Ops.
func (d *Device) SumSquares(out, x *engine.Tensor, accumulate bool) error {
	n, err := engine.CheckSumSquares(d.own, out, x)
	if err != nil {
		return err
	}
	s := d.parallelSumSquares(viewOf(x), 0, n)
	o := out.Storage().([]float32)
	if accumulate {
		s += float64(o[0])
	}
	o[0] = float32(s)
	return nil
}
