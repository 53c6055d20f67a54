package vulkan

import "github.com/parallax-engine/parallax/engine"

// ArgMaxRows writes each row's first largest index among its first
// classes columns (-1 for a row holding a NaN there) on the device
// (shaders/argmax.comp), so greedy decoding reads back one id per
// sequence; see engine.ArgMaxer. A short row takes one workgroup; a
// longer one (a vocabulary of logits) is split into parts of 4 WG columns
// whose best entries a second pass combines.
func (d *Device) ArgMaxRows(o, x *engine.Tensor, classes int) error {
	n, w, err := engine.CheckArgMaxRows(d.own, o, x, classes)
	if err != nil || n == 0 {
		return err
	}
	wg := d.flexWG()
	d.profileAs("argmax rows", 0, float64(n*classes*x.DType().Size()+4*n))
	parts := (classes + 4*wg - 1) / (4 * wg)
	if parts <= 2 {
		pc := push(uint32(w), uint32(classes), uint32(n), uint32(1))
		return d.launch("argmax", wg, spec{1: 0}, pc, d.groups1(n), in(x), out(o), d.none())
	}
	pr, err := d.tmp(3 * n * parts)
	if err != nil {
		return err
	}
	defer d.mem.release(pr)
	pc := push(uint32(w), uint32(classes), uint32(n), uint32(parts))
	if err := d.launch("argmax", wg, spec{1: 1}, pc, d.groups1(n*parts), in(x), out(o), scratch(pr)); err != nil {
		return err
	}
	d.profileAs("argmax rows (combine)", 0, float64(12*n*parts+4*n))
	return d.launch("argmax", wg, spec{1: 2}, pc, d.groups1(n), in(x), out(o), scratch(pr))
}
