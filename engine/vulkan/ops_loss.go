package vulkan

import (
	"github.com/parallax-engine/parallax/engine"
)

// CrossEntropy is the fused softmax cross-entropy, one workgroup per row
// (shaders/cross_entropy.comp); see engine.Ops. A target outside [0, V)
// that is not the ignore index is reported by Sync.
func (d *Device) CrossEntropy(loss, dLogits, logits, targets *engine.Tensor, o engine.CrossEntropyOpts) error {
	n, v, err := engine.CheckCrossEntropy(loss, dLogits, logits, targets)
	if err != nil {
		return err
	}
	if err := d.own("cross entropy", loss, dLogits, logits, targets); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	lg := in(logits)
	if dLogits == logits {
		lg.write = true
	}
	pc := push(uint32(n), uint32(v), int(o.IgnoreIndex), o.GradScale, dLogits != nil)
	return d.launch("cross_entropy", d.flexWG(), nil, pc, d.groups1(n), lg, in(targets), out(loss), d.opt(dLogits, true), d.statusArg())
}
