package train

import (
	"fmt"
	"math"
)

// Schedule kinds.
const (
	SchedWSD      = "wsd"      // warmup, stable, linear decay over the final fraction
	SchedCosine   = "cosine"   // warmup, then cosine to MinRatio
	SchedConstant = "constant" // warmup, then constant
)

// Schedule is a learning-rate schedule: Factor(step) multiplies every
// group's peak learning rate.
type Schedule struct {
	Kind  string `json:"kind"`  // SchedWSD, SchedCosine or SchedConstant
	Total int    `json:"total"` // total number of steps of the run
	// Warmup is the number of linear warmup steps: step s < Warmup has
	// factor (s+1)/Warmup, so the first step is not wasted at 0.
	Warmup int `json:"warmup"`
	// DecayFrac is WSD's final fraction of Total over which the factor
	// falls linearly from 1 to MinRatio.
	DecayFrac float64 `json:"decay_frac"`
	// MinRatio is the final factor (the floor of the decay).
	MinRatio float64 `json:"min_ratio"`
}

// DefaultSchedule returns WSD over total steps with warmup 5% of the steps
// (at most 200), decay over the final 20% to 0.1 of the peak (the decay
// length and floor of modded-nanogpt and SmolLM are 40%/0.1 and 20%/0).
func DefaultSchedule(total int) Schedule {
	return Schedule{Kind: SchedWSD, Total: total, Warmup: min(200, max(1, total/20)),
		DecayFrac: 0.2, MinRatio: 0.1}
}

// Validate reports an invalid schedule.
func (s Schedule) Validate() error {
	switch s.Kind {
	case SchedWSD, SchedCosine, SchedConstant:
	default:
		return fmt.Errorf("schedule %q: want %s, %s or %s", s.Kind, SchedWSD, SchedCosine, SchedConstant)
	}
	if s.Total < 1 {
		return fmt.Errorf("schedule: total steps %d must be >= 1", s.Total)
	}
	if s.Warmup < 0 {
		return fmt.Errorf("schedule: warmup %d must be >= 0", s.Warmup)
	}
	if !(s.DecayFrac >= 0 && s.DecayFrac <= 1) {
		return fmt.Errorf("schedule: decay fraction %v must lie in [0, 1]", s.DecayFrac)
	}
	if !(s.MinRatio >= 0 && s.MinRatio <= 1) {
		return fmt.Errorf("schedule: min ratio %v must lie in [0, 1]", s.MinRatio)
	}
	return nil
}

// Factor returns the learning-rate multiplier for the 0-based step.
func (s Schedule) Factor(step int) float64 {
	if step < s.Warmup {
		return float64(step+1) / float64(s.Warmup)
	}
	switch s.Kind {
	case SchedWSD:
		decay := int(math.Round(s.DecayFrac * float64(s.Total)))
		start := s.Total - decay
		if decay <= 0 || step < start {
			return 1
		}
		// Linear from 1 at the first decay step to MinRatio at the last.
		frac := float64(step-start+1) / float64(decay)
		return 1 - (1-s.MinRatio)*min(frac, 1)
	case SchedCosine:
		span := s.Total - s.Warmup
		if span <= 1 {
			return 1
		}
		frac := min(float64(step-s.Warmup)/float64(span-1), 1)
		return s.MinRatio + (1-s.MinRatio)*0.5*(1+math.Cos(math.Pi*frac))
	}
	return 1
}
