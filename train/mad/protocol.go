package mad

import (
	"fmt"
	"math"
	"slices"
)

// Protocol is how a suite trains: which settings of each task, the lr x
// weight-decay grid, the epoch budget and the batch.
type Protocol struct {
	Name string `json:"name"` // "full", "quick" or "custom"
	// Baseline restricts every task to its baseline setting; otherwise the
	// whole sweep (66 settings) runs.
	Baseline bool      `json:"baseline_only"`
	LRs      []float64 `json:"lrs"`
	WDs      []float64 `json:"weight_decays"`
	Epochs   int       `json:"epochs"` // at most this many epochs (the cosine period)
	// MaxSteps, when > 0, caps the epochs of a setting at
	// ceil(MaxSteps / steps per epoch) (still at most Epochs), so that a
	// task with 12,800 examples gets 20 epochs and memorization, with 2
	// steps per epoch, keeps its 200.
	MaxSteps int     `json:"max_steps"`
	Batch    int     `json:"batch"`
	MinLR    float64 `json:"min_lr"`
	StopAcc  float64 `json:"stop_acc"`
	Seed     uint64  `json:"seed"` // model initialisation and data order of every run
	// MaxTrain and MaxTest, when > 0, cap the number of training and test
	// examples of every setting (a reduced-scale run, not MAD).
	MaxTrain int `json:"max_train,omitempty"`
	MaxTest  int `json:"max_test,omitempty"`
}

// FullProtocol is MAD's: all 66 settings, lr in {1e-4, 5e-4, 1e-3} x weight
// decay in {0, 0.1}, at most 200 epochs of batch 128 with cosine decay to
// 1e-6, early stop at 0.999 test accuracy.
func FullProtocol() Protocol {
	return Protocol{Name: "full", LRs: []float64{1e-4, 5e-4, 1e-3}, WDs: []float64{0, 0.1},
		Epochs: 200, Batch: 128, MinLR: 1e-6, StopAcc: 0.999, Seed: 1}
}

// QuickProtocol is the one-GPU-session version: the baseline setting of
// each task, lr in {5e-4, 1e-3} with no weight decay, and at most 2,000
// steps per run (20 epochs for the 12,800-example tasks, the full 200
// epochs = 400 steps for memorization), the cosine running over that
// shorter budget.
func QuickProtocol() Protocol {
	p := FullProtocol()
	p.Name = "quick"
	p.Baseline = true
	p.LRs = []float64{5e-4, 1e-3}
	p.WDs = []float64{0}
	p.MaxSteps = 2000
	return p
}

// Validate reports an unusable protocol.
func (p Protocol) Validate() error {
	switch {
	case len(p.LRs) == 0 || len(p.WDs) == 0:
		return fmt.Errorf("mad protocol: the lr and weight-decay grids must not be empty")
	case p.Epochs < 1 || p.Batch < 1:
		return fmt.Errorf("mad protocol: epochs %d and batch %d must be >= 1", p.Epochs, p.Batch)
	case p.MaxSteps < 0 || p.MaxTrain < 0 || p.MaxTest < 0:
		return fmt.Errorf("mad protocol: max steps, max train and max test must be >= 0")
	case !(p.MinLR >= 0):
		return fmt.Errorf("mad protocol: min lr %v < 0", p.MinLR)
	}
	for _, v := range p.LRs {
		if !(v > 0) || math.IsInf(v, 0) {
			return fmt.Errorf("mad protocol: learning rate %v must be positive", v)
		}
	}
	for _, v := range p.WDs {
		if !(v >= 0) || math.IsInf(v, 0) {
			return fmt.Errorf("mad protocol: weight decay %v must be >= 0", v)
		}
	}
	return nil
}

// TaskSettings returns the settings of task the protocol runs (with the
// example caps applied).
func (p Protocol) TaskSettings(task string) ([]Setting, error) {
	all, err := Sweep(task)
	if err != nil {
		return nil, err
	}
	if p.Baseline {
		all = all[:1]
	}
	for i := range all {
		if p.MaxTrain > 0 && all[i].TrainExamples > p.MaxTrain {
			all[i].TrainExamples = p.MaxTrain
		}
		if p.MaxTest > 0 && all[i].TestExamples > p.MaxTest {
			all[i].TestExamples = p.MaxTest
		}
	}
	// Capping may merge settings that differed only in their size.
	out := all[:0]
	for _, s := range all {
		if !slices.ContainsFunc(out, func(o Setting) bool { return o.ID() == s.ID() }) {
			out = append(out, s)
		}
	}
	return out, nil
}

// EpochsFor is the epoch budget of a setting.
func (p Protocol) EpochsFor(s Setting) int {
	if p.MaxSteps <= 0 {
		return p.Epochs
	}
	perEpoch := (s.TrainExamples + p.Batch - 1) / p.Batch
	return max(1, min(p.Epochs, (p.MaxSteps+perEpoch-1)/perEpoch))
}

// Runs lists the protocol's runs for one setting, mixer and optimizer: one
// per grid point.
func (p Protocol) Runs(s Setting, mixer, optimizer string, mc ModelConfig) []RunSpec {
	var out []RunSpec
	for _, lr := range p.LRs {
		for _, wd := range p.WDs {
			out = append(out, RunSpec{Setting: s, Mixer: mixer, Optimizer: optimizer, LR: lr, WD: wd,
				Epochs: p.EpochsFor(s), Batch: p.Batch, MinLR: p.MinLR, StopAcc: p.StopAcc, Seed: p.Seed, Model: mc})
		}
	}
	return out
}
