package vulkan

import (
	"github.com/parallax-engine/parallax/engine"
)

// CrossEntropy is the fused softmax cross-entropy, one workgroup per row
// (shaders/cross_entropy.comp); see engine.Ops. The shader takes the row
// stride W of logits [N, W] and the class count C apart: it reads only the
// class columns [0, C) and zeroes dLogits' pad columns [C, W). A target
// outside [0, C) that is not the ignore index is reported by Sync.
func (d *Device) CrossEntropy(loss, dLogits, logits, targets *engine.Tensor, o engine.CrossEntropyOpts) error {
	n, w, classes, err := engine.CheckCrossEntropy(d.own, loss, dLogits, logits, targets, o)
	if err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	lg := in(logits)
	if dLogits == logits {
		lg.write = true
	}
	pc := push(uint32(n), uint32(w), uint32(classes), int(o.IgnoreIndex), o.GradScale, dLogits != nil)
	return d.launch("cross_entropy", d.flexWG(), nil, pc, d.groups1(n), lg, in(targets), out(loss), d.opt(dLogits, true), d.statusArg())
}
