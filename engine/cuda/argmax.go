//go:build cgo

package cuda

import "github.com/parallax-engine/parallax/engine"

var _ engine.ArgMaxer = (*Device)(nil)

// argmaxChunk is ARGMAX_CHUNK of shaders/cuda/sample.cu: the columns of a
// row one argmax_part block reduces.
const argmaxChunk = 1024

// ArgMaxRows picks each row's largest logit on the device (argmax_part
// over chunks of argmaxChunk columns, then argmax_final a row, in
// shaders/cuda/sample.cu); see engine.ArgMaxer.
func (d *Device) ArgMaxRows(out, x *engine.Tensor, classes int) error {
	n, w, err := engine.CheckArgMaxRows(d.own, out, x, classes)
	if err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	nc := (classes + argmaxChunk - 1) / argmaxChunk
	const maxRows = 65535 // a grid's y extent; more rows take several launches
	rows := min(n, maxRows)
	parts := int64(rows) * int64(nc)
	scr, err := d.scratch(parts * 12)
	if err != nil {
		return err
	}
	defer d.alloc.put(scr)
	pv, pi, pn := scr.ptr, scr.ptr+uint64(parts*4), scr.ptr+uint64(parts*8)
	for r0 := 0; r0 < n; r0 += maxRows {
		m := min(n-r0, maxRows)
		xr := ptr(x) + uint64(r0)*uint64(w)*uint64(x.DType().Size())
		if err := d.launch("sample", "argmax_part", [3]int{nc, m, 1}, threads256, 0,
			newArgs().p(pv).p(pi).p(pn).p(xr).i(dt(x)).i(w).i(classes)); err != nil {
			return err
		}
		if err := d.launch("sample", "argmax_final", [3]int{m, 1, 1}, threads256, 0,
			newArgs().p(ptr(out)+uint64(r0)*4).p(pv).p(pi).p(pn).i(nc)); err != nil {
			return err
		}
	}
	return nil
}
