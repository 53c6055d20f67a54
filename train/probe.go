package train

import (
	"fmt"
	"math"
	"strings"

	"github.com/parallax-engine/parallax/model"
)

// ProbeOptim sets how the optimizer treats the Parallax probe: W_R
// (self_attn.r_proj), its norm (r_norm) and the gate ablation's w_g
// (r_gate). These are the parameters a converted softmax model adds, and
// adapting one may want them on a schedule of their own.
type ProbeOptim struct {
	// LRScale multiplies the learning rate of every probe parameter (under
	// whichever optimizer trains it); 0 means 1.
	LRScale float64 `json:"lr_scale,omitempty"`
	// Optimizer trains W_R: OptMuon or OptAdamW; "" follows the run's
	// optimizer (Muon for hidden matrices under OptMuon). OptMuon needs the
	// run's optimizer to be OptMuon.
	Optimizer string `json:"optimizer,omitempty"`
}

func (p ProbeOptim) validate(run string) error {
	if p.Optimizer == OptMuon && run != OptMuon {
		return fmt.Errorf("optimizer: the probe can be trained by Muon only when the run's optimizer is %s", OptMuon)
	}
	if !(p.LRScale >= 0) || math.IsInf(p.LRScale, 0) {
		return fmt.Errorf("optimizer: probe learning-rate scale %v must be a finite number >= 0 (0 means 1)", p.LRScale)
	}
	switch p.Optimizer {
	case "", OptMuon, OptAdamW:
	default:
		return fmt.Errorf("optimizer: probe optimizer %q: want %s or %s", p.Optimizer, OptMuon, OptAdamW)
	}
	return nil
}

// IsProbe reports whether a parameter name belongs to the Parallax probe
// (W_R, its norm or its gate).
func IsProbe(name string) bool {
	for _, s := range []string{".self_attn.r_proj.", ".self_attn.r_norm.", ".self_attn.r_gate."} {
		if strings.Contains(name, s) {
			return true
		}
	}
	return false
}

// usesMuon reports whether Muon trains p: a hidden matrix under OptMuon,
// unless it is W_R and the probe is given to AdamW.
func (c OptimConfig) usesMuon(p *model.Param) bool {
	if c.Name != OptMuon || p.Kind != model.Matrix {
		return false
	}
	return !(IsProbe(p.Name) && c.Probe.Optimizer == OptAdamW)
}

// lrScale is the learning-rate multiplier of p.
func (c OptimConfig) lrScale(p *model.Param) float64 {
	if IsProbe(p.Name) && c.Probe.LRScale > 0 {
		return c.Probe.LRScale
	}
	return 1
}
