package mad

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
)

// The choices of Protocol.Settings: which settings of each task a suite runs.
const (
	// SettingsBaseline is each task's baseline setting (6 in all).
	SettingsBaseline = "baseline"
	// SettingsHard is each task's baseline plus the hardest value of each
	// knob of its sweep (Hard; 24 in all), to separate mixers that both
	// solve the baseline.
	SettingsHard = "hard"
	// SettingsAll is each task's whole sweep (Sweep; 66 in all).
	SettingsAll = "all"
)

// SettingsChoices lists the values Protocol.Settings accepts, easiest first.
func SettingsChoices() []string { return []string{SettingsBaseline, SettingsHard, SettingsAll} }

// Protocol is how a suite trains: which settings of each task, the lr x
// weight-decay grid, the epoch budget and the batch.
//
// Its JSON (in results.json) names the settings choice "settings" and also
// writes the older boolean "baseline_only" (true for SettingsBaseline);
// JSON without "settings" is read by "baseline_only", as earlier versions
// wrote it.
type Protocol struct {
	Name string `json:"name"` // "full", "quick", with "+custom" when flags changed it
	// Settings picks each task's settings: SettingsBaseline, SettingsHard or
	// SettingsAll; "" means SettingsAll.
	Settings string `json:"settings"`
	// MaxSeqLen, when > 0, drops every setting whose seq_len exceeds it
	// (a shorter run, not MAD); a task left without settings is not run.
	MaxSeqLen int       `json:"max_seq_len,omitempty"`
	LRs       []float64 `json:"lrs"`
	WDs       []float64 `json:"weight_decays"`
	Epochs    int       `json:"epochs"` // at most this many epochs (the cosine period)
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
	return Protocol{Name: "full", Settings: SettingsAll, LRs: []float64{1e-4, 5e-4, 1e-3}, WDs: []float64{0, 0.1},
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
	p.Settings = SettingsBaseline
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
	case p.MaxSeqLen < 0:
		return fmt.Errorf("mad protocol: max seq len %d must be >= 0", p.MaxSeqLen)
	case !slices.Contains(SettingsChoices(), p.SettingsChoice()):
		return fmt.Errorf("mad protocol: settings %q: want %s", p.Settings, strings.Join(SettingsChoices(), ", "))
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

// SettingsChoice is Settings with "" read as SettingsAll.
func (p Protocol) SettingsChoice() string {
	if p.Settings == "" {
		return SettingsAll
	}
	return p.Settings
}

// TaskSettings returns the settings of task the protocol runs (with the
// example caps applied and the settings longer than MaxSeqLen dropped).
func (p Protocol) TaskSettings(task string) ([]Setting, error) {
	kept, _, err := p.selectSettings(task)
	return kept, err
}

// DroppedSettings returns the settings of task that the settings choice
// includes but MaxSeqLen drops (none when MaxSeqLen is 0).
func (p Protocol) DroppedSettings(task string) ([]Setting, error) {
	_, dropped, err := p.selectSettings(task)
	return dropped, err
}

// selectSettings returns the settings of task the protocol runs and those
// MaxSeqLen drops.
func (p Protocol) selectSettings(task string) (kept, dropped []Setting, err error) {
	var all []Setting
	switch c := p.SettingsChoice(); c {
	case SettingsBaseline:
		var base Setting
		base, err = Baseline(task)
		all = []Setting{base}
	case SettingsHard:
		all, err = Hard(task)
	case SettingsAll:
		all, err = Sweep(task)
	default:
		err = fmt.Errorf("mad protocol: settings %q: want %s", c, strings.Join(SettingsChoices(), ", "))
	}
	if err != nil {
		return nil, nil, err
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
	for _, s := range all {
		if slices.ContainsFunc(kept, func(o Setting) bool { return o.ID() == s.ID() }) ||
			slices.ContainsFunc(dropped, func(o Setting) bool { return o.ID() == s.ID() }) {
			continue
		}
		if p.MaxSeqLen > 0 && s.SeqLen > p.MaxSeqLen {
			dropped = append(dropped, s)
		} else {
			kept = append(kept, s)
		}
	}
	return kept, dropped, nil
}

// protocolJSON is Protocol without its JSON methods.
type protocolJSON Protocol

// MarshalJSON writes the protocol with its settings choice both as
// "settings" and, for readers of earlier results, as "baseline_only".
func (p Protocol) MarshalJSON() ([]byte, error) {
	p.Settings = p.SettingsChoice()
	return json.Marshal(struct {
		protocolJSON
		Baseline bool `json:"baseline_only"`
	}{protocolJSON(p), p.Settings == SettingsBaseline})
}

// UnmarshalJSON reads a protocol, taking the settings choice from
// "settings" or, in results written before it existed, "baseline_only".
func (p *Protocol) UnmarshalJSON(b []byte) error {
	var v struct {
		protocolJSON
		Baseline *bool `json:"baseline_only"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("mad protocol: %w", err)
	}
	*p = Protocol(v.protocolJSON)
	if p.Settings == "" {
		p.Settings = SettingsAll
		if v.Baseline != nil && *v.Baseline {
			p.Settings = SettingsBaseline
		}
	}
	return nil
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
