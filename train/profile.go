package train

import (
	"fmt"

	"github.com/parallax-engine/parallax/engine"
)

// stepProfiler returns the device's profiler when Config.ProfileStep asks
// for a profile (nil when it does not), or why that step cannot be
// profiled: it is not one this run makes, or the device has no per-op
// timers.
func (r *runner) stepProfiler() (engine.Profiler, error) {
	n := r.cfg.ProfileStep
	switch {
	case n == 0:
		return nil, nil
	case n < 0:
		return nil, fmt.Errorf("train: profile step %d: want a step number >= 1 (0: no profile)", n)
	case n <= r.st.Step || n > r.cfg.Steps:
		return nil, fmt.Errorf("train: profile step %d is not one this run makes (steps %d to %d)", n, r.st.Step+1, r.cfg.Steps)
	}
	p, ok := r.dev.(engine.Profiler)
	if !ok {
		info := r.dev.Info()
		return nil, fmt.Errorf("train: profile step %d: %s (%s) has no per-op device timers to profile with; use a CUDA or Vulkan device", n, info.ID(), info.Name)
	}
	return p, nil
}
