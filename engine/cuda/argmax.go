//go:build cgo

package cuda

import "github.com/parallax-engine/parallax/engine"

var _ engine.ArgMaxer = (*Device)(nil)

// ArgMaxRows picks each row's largest logit on the device (argmax_rows in
// shaders/cuda/sample.cu); see engine.ArgMaxer.
func (d *Device) ArgMaxRows(out, x *engine.Tensor, classes int) error {
	n, w, err := engine.CheckArgMaxRows(d.own, out, x, classes)
	if err != nil {
		return err
	}
	return d.launch("sample", "argmax_rows", [3]int{n, 1, 1}, threads256, 0,
		newArgs().p(ptr(out)).p(ptr(x)).i(dt(x)).i(w).i(classes))
}
