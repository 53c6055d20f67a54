package train

import (
	"fmt"
	"math"
	"strings"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/model"
)

// Optimizer names accepted by OptimConfig.Name.
const (
	OptMuon  = "muon"  // Muon for hidden matrices, AdamW for the rest
	OptAdamW = "adamw" // AdamW for every parameter
)

// Muon shape-scaling rules (spec/training.md section 2.4).
const (
	ScaleKeller    = "keller"    // sqrt(max(1, rows/cols))
	ScaleMoonlight = "moonlight" // 0.2 sqrt(max(rows, cols)): AdamW-like update RMS
)

// MuonConfig holds Muon's hyperparameters.
type MuonConfig struct {
	// LR is the peak learning rate. With ScaleKeller it is "spectral norm per
	// update" (0.02 is the reference default); with ScaleMoonlight the update
	// has AdamW's RMS, so AdamW's learning rate fits (0 selects AdamW.LR).
	LR          float64 `json:"lr"`
	Momentum    float64 `json:"momentum"`     // EMA coefficient beta, 0.95
	Nesterov    bool    `json:"nesterov"`     // use (1-beta) g + beta m, on by default
	NSSteps     int     `json:"ns_steps"`     // Newton-Schulz iterations, 5
	Scaling     string  `json:"scaling"`      // ScaleKeller or ScaleMoonlight
	WeightDecay float64 `json:"weight_decay"` // decoupled: W *= 1 - lr*wd
}

// AdamWConfig holds AdamW's hyperparameters. Weight decay is decoupled
// (W -= lr*wd*W) and differs by kind: hidden matrices (trained by AdamW only
// with Name == OptAdamW), embeddings and head, gains.
type AdamWConfig struct {
	LR               float64 `json:"lr"`
	Beta1            float64 `json:"beta1"`
	Beta2            float64 `json:"beta2"`
	Eps              float64 `json:"eps"`
	WeightDecay      float64 `json:"weight_decay"`       // hidden matrices
	EmbedWeightDecay float64 `json:"embed_weight_decay"` // embedding and head
	GainWeightDecay  float64 `json:"gain_weight_decay"`  // gains and vectors
}

// OptimConfig selects and configures the optimizer.
type OptimConfig struct {
	Name  string      `json:"name"` // OptMuon or OptAdamW
	Muon  MuonConfig  `json:"muon"`
	AdamW AdamWConfig `json:"adamw"`
}

// DefaultOptimConfig returns the defaults for the named optimizer:
//
//   - Muon (hidden matrices): lr 0.02, momentum 0.95, Nesterov, 5 NS steps,
//     Keller's shape scaling, weight decay 0.01 (the KellerJordan/Muon README
//     example; lr*wd = 2e-4 per step).
//   - AdamW: lr 3e-3 (small models tolerate a high rate: SmolLM-135M used
//     3e-3), betas (0.9, 0.95), eps 1e-8 (Pythia, TinyLlama, OLMo, Moonlight);
//     weight decay 0.1 on hidden matrices (the same sources), none on the
//     embedding, head and gains (OLMo-2 and SmolLM3 exclude embeddings;
//     decaying gains is a per-run choice).
func DefaultOptimConfig(name string) OptimConfig {
	return OptimConfig{
		Name: name,
		Muon: MuonConfig{LR: 0.02, Momentum: 0.95, Nesterov: true, NSSteps: 5,
			Scaling: ScaleKeller, WeightDecay: 0.01},
		AdamW: AdamWConfig{LR: 3e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8,
			WeightDecay: 0.1},
	}
}

// Validate reports the first invalid setting.
func (c OptimConfig) Validate() error {
	if c.Name != OptMuon && c.Name != OptAdamW {
		return fmt.Errorf("optimizer %q: want %s or %s", c.Name, OptMuon, OptAdamW)
	}
	a := c.AdamW
	bad := func(what string, v float64) error {
		return fmt.Errorf("optimizer: %s %v is out of range", what, v)
	}
	switch {
	case !(a.LR >= 0) || math.IsInf(a.LR, 0):
		return bad("adamw lr", a.LR)
	case !(a.Beta1 >= 0 && a.Beta1 < 1):
		return bad("adamw beta1 (want [0, 1))", a.Beta1)
	case !(a.Beta2 >= 0 && a.Beta2 < 1):
		return bad("adamw beta2 (want [0, 1))", a.Beta2)
	case !(a.Eps >= 0):
		return bad("adamw eps", a.Eps)
	case !(a.WeightDecay >= 0 && a.EmbedWeightDecay >= 0 && a.GainWeightDecay >= 0):
		return fmt.Errorf("optimizer: adamw weight decays must be >= 0")
	}
	if c.Name == OptMuon {
		m := c.Muon
		switch {
		case !(m.LR >= 0) || math.IsInf(m.LR, 0):
			return bad("muon lr", m.LR)
		case !(m.Momentum >= 0 && m.Momentum < 1):
			return bad("muon momentum (want [0, 1))", m.Momentum)
		case m.NSSteps < 1 || m.NSSteps > 100:
			return bad("muon ns steps", float64(m.NSSteps))
		case !(m.WeightDecay >= 0):
			return bad("muon weight decay", m.WeightDecay)
		case m.Scaling != ScaleKeller && m.Scaling != ScaleMoonlight:
			return fmt.Errorf("optimizer: muon scaling %q: want %s or %s", m.Scaling, ScaleKeller, ScaleMoonlight)
		}
	}
	return nil
}

// resolved fills the defaults that depend on other settings.
func (c OptimConfig) resolved() OptimConfig {
	if c.Muon.LR == 0 && c.Muon.Scaling == ScaleMoonlight {
		c.Muon.LR = c.AdamW.LR
	}
	return c
}

// MuonScale is the multiplier Muon applies to the orthogonalised update of a
// [rows, cols] matrix (rows = output features) under the given rule.
func MuonScale(rule string, rows, cols int) float64 {
	if rule == ScaleMoonlight {
		return 0.2 * math.Sqrt(float64(max(rows, cols)))
	}
	return math.Sqrt(max(1, float64(rows)/float64(cols)))
}

// Optimizer updates parameters from their gradients. Muon trains the hidden
// matrices (each matrix on its own: q, k, v, r, o, gate, up and down are
// separate parameters) and AdamW everything else; with Name == OptAdamW,
// AdamW trains all of them. All state is F32 on the parameters' device.
type Optimizer struct {
	cfg    OptimConfig
	dev    engine.Device
	params []*model.Param
	adam   []*adamState
	muon   []*muonState
	step   int // updates applied so far

	scratch map[string][2]*engine.Tensor // Muon's u and o per matrix shape

	par *optParallel // data-parallel sharding (parallel.go); nil in one process
}

// A state whose tensors are nil belongs to another rank (parallel.go).
type adamState struct {
	p    *model.Param
	m, v *engine.Tensor
	wd   float64
}

type muonState struct {
	p     *model.Param
	m     *engine.Tensor
	scale float64
}

// NewOptimizer allocates the optimizer state for params on dev. Parameter
// names must be unique.
func NewOptimizer(dev engine.Device, params []*model.Param, cfg OptimConfig) (*Optimizer, error) {
	return newOptimizer(dev, params, cfg, nil)
}

// newOptimizer allocates the state this rank holds (all of it without par).
func newOptimizer(dev engine.Device, params []*model.Param, cfg OptimConfig, par *optParallel) (*Optimizer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.resolved()
	o := &Optimizer{cfg: cfg, dev: dev, params: params, scratch: map[string][2]*engine.Tensor{}, par: par}
	if par != nil {
		par.assign(params, cfg)
	}
	seen := map[string]bool{}
	var err error
	for _, p := range params {
		if p.W == nil || p.G == nil {
			return nil, fmt.Errorf("optimizer: parameter %q has no weight or gradient tensor", p.Name)
		}
		if seen[p.Name] {
			return nil, fmt.Errorf("optimizer: parameter name %q is used twice", p.Name)
		}
		seen[p.Name] = true
		if !p.W.Shape().Equal(p.G.Shape()) {
			return nil, fmt.Errorf("optimizer: parameter %q: gradient %v does not match weight %v", p.Name, p.G, p.W)
		}
		if cfg.Name == OptMuon && p.Kind == model.Matrix {
			if p.W.Rank() != 2 {
				return nil, fmt.Errorf("optimizer: Muon parameter %q is %v, want a matrix", p.Name, p.W)
			}
			var m *engine.Tensor
			if o.holds(p) {
				if m, err = dev.Alloc(engine.F32, p.W.Shape()...); err != nil {
					return nil, fmt.Errorf("optimizer: momentum of %q: %w", p.Name, err)
				}
			}
			o.muon = append(o.muon, &muonState{p: p, m: m,
				scale: MuonScale(cfg.Muon.Scaling, p.W.Dim(0), p.W.Dim(1))})
			continue
		}
		var m, v *engine.Tensor
		if o.holds(p) {
			if m, err = dev.Alloc(engine.F32, p.W.Shape()...); err != nil {
				return nil, fmt.Errorf("optimizer: first moment of %q: %w", p.Name, err)
			}
			if v, err = dev.Alloc(engine.F32, p.W.Shape()...); err != nil {
				return nil, fmt.Errorf("optimizer: second moment of %q: %w", p.Name, err)
			}
		}
		wd := cfg.AdamW.GainWeightDecay
		switch p.Kind {
		case model.Matrix:
			wd = cfg.AdamW.WeightDecay
		case model.Embedding, model.Head:
			wd = cfg.AdamW.EmbedWeightDecay
		}
		o.adam = append(o.adam, &adamState{p: p, m: m, v: v, wd: wd})
	}
	return o, nil
}

// Config returns the optimizer's configuration with defaults resolved.
func (o *Optimizer) Config() OptimConfig { return o.cfg }

// Steps is the number of updates applied so far.
func (o *Optimizer) Steps() int { return o.step }

// Params returns the parameters the optimizer updates.
func (o *Optimizer) Params() []*model.Param { return o.params }

// Groups describes how parameters were assigned, for logs:
// "muon: 16 matrices (1.2M), adamw: 10 tensors (0.6M)".
func (o *Optimizer) Groups() string {
	var nm, na int
	for _, s := range o.muon {
		nm += s.p.W.Numel()
	}
	for _, s := range o.adam {
		na += s.p.W.Numel()
	}
	var parts []string
	if len(o.muon) > 0 {
		parts = append(parts, fmt.Sprintf("muon: %d matrices (%s)", len(o.muon), HumanCount(float64(nm))))
	}
	parts = append(parts, fmt.Sprintf("adamw: %d tensors (%s)", len(o.adam), HumanCount(float64(na))))
	return strings.Join(parts, ", ")
}

// Step applies one update with the peak learning rates multiplied by
// lrFactor (the schedule's value). Gradients are read, not cleared.
func (o *Optimizer) Step(lrFactor float64) error {
	o.step++
	a := o.cfg.AdamW
	for _, s := range o.adam {
		if s.m == nil {
			continue // another rank's
		}
		err := o.dev.AdamW(s.p.W, s.p.G, s.m, s.v, engine.AdamWOpts{
			LR: float32(a.LR * lrFactor), Beta1: float32(a.Beta1), Beta2: float32(a.Beta2),
			Eps: float32(a.Eps), WeightDecay: float32(s.wd), Step: o.step,
		})
		if err != nil {
			return fmt.Errorf("adamw %s: %w", s.p.Name, err)
		}
	}
	mc := o.cfg.Muon
	lr := float32(mc.LR * lrFactor)
	for _, s := range o.muon {
		if s.m == nil {
			continue // another rank's
		}
		u, out, err := o.muonScratch(s.p.W.Shape())
		if err != nil {
			return fmt.Errorf("muon %s: %w", s.p.Name, err)
		}
		if err := o.dev.MuonMomentum(u, s.m, s.p.G, float32(mc.Momentum), mc.Nesterov); err != nil {
			return fmt.Errorf("muon %s: %w", s.p.Name, err)
		}
		if err := engine.NewtonSchulz(o.dev, out, u, mc.NSSteps); err != nil {
			return fmt.Errorf("muon %s: %w", s.p.Name, err)
		}
		if err := o.dev.MuonApply(s.p.W, out, lr, float32(mc.WeightDecay), float32(s.scale)); err != nil {
			return fmt.Errorf("muon %s: %w", s.p.Name, err)
		}
	}
	return o.syncParams()
}

// muonScratch returns two F32 buffers of the given shape, shared by every
// matrix of that shape.
func (o *Optimizer) muonScratch(shape engine.Shape) (u, out *engine.Tensor, err error) {
	key := shape.String()
	if b, ok := o.scratch[key]; ok {
		return b[0], b[1], nil
	}
	if u, err = o.dev.Alloc(engine.F32, shape...); err != nil {
		return nil, nil, err
	}
	if out, err = o.dev.Alloc(engine.F32, shape...); err != nil {
		o.dev.Free(u)
		return nil, nil, err
	}
	o.scratch[key] = [2]*engine.Tensor{u, out}
	return u, out, nil
}

// State lists the optimizer's state tensors by checkpoint name:
// "<param>.exp_avg" and "<param>.exp_avg_sq" for AdamW, "<param>.momentum"
// for Muon (the names PyTorch's optimizers use for the same quantities).
// A data-parallel optimizer lists the tensors this rank holds.
func (o *Optimizer) State() map[string]*engine.Tensor {
	out := map[string]*engine.Tensor{}
	for _, s := range o.adam {
		if s.m != nil {
			out[s.p.Name+".exp_avg"] = s.m
			out[s.p.Name+".exp_avg_sq"] = s.v
		}
	}
	for _, s := range o.muon {
		if s.m != nil {
			out[s.p.Name+".momentum"] = s.m
		}
	}
	return out
}

// SetSteps sets the number of updates already applied (AdamW's bias
// correction counts from it), when restoring a checkpoint.
func (o *Optimizer) SetSteps(n int) { o.step = n }

// Free releases the optimizer's device memory.
func (o *Optimizer) Free() {
	for _, t := range o.State() {
		o.dev.Free(t)
	}
	for _, b := range o.scratch {
		o.dev.Free(b[0])
		o.dev.Free(b[1])
	}
	o.scratch = map[string][2]*engine.Tensor{}
}

// HumanCount formats a count with a k/M/G suffix: 1.23M.
func HumanCount(n float64) string {
	switch {
	case math.Abs(n) >= 1e9:
		return fmt.Sprintf("%.2fG", n/1e9)
	case math.Abs(n) >= 1e6:
		return fmt.Sprintf("%.2fM", n/1e6)
	case math.Abs(n) >= 1e3:
		return fmt.Sprintf("%.1fk", n/1e3)
	}
	return fmt.Sprintf("%.0f", n)
}
