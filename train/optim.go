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

// Muon shape-scaling rules (docs/MATH.md section 10).
const (
	ScaleKeller    = "keller"    // sqrt(max(1, rows/cols))
	ScaleMoonlight = "moonlight" // 0.2 sqrt(max(rows, cols)): AdamW-like update RMS
)

// Newton-Schulz dtypes accepted by MuonConfig.NSDType.
const (
	NSAuto = "auto" // bf16 when the model computes in bf16 (Optimizer.SetComputeDType), else f32
	NSF32  = "f32"  // f32 always: exact against the float64 reference
	NSBF16 = "bf16" // bf16 always, as the reference Muon
)

// DefaultNSBatchElems bounds the matrices one batched Newton-Schulz call
// stacks when MuonConfig.NSBatch is 0: at most this many elements per stack
// (32 MiB in bf16), at least one matrix. Larger matrices keep a GPU busy on
// their own; the bound keeps the persistent scratch (the stack, its
// Newton-Schulz product and two Gram stacks, per matrix shape) small.
const DefaultNSBatchElems = 1 << 24

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
	// NSDType is the dtype Newton-Schulz iterates in: NSAuto (also ""),
	// NSF32 or NSBF16. The momentum and the weights stay f32; in bf16 the
	// direction is rounded to bf16 before the normalisation and every
	// product is stored in bf16 (accumulated in f32), as the reference Muon
	// does.
	NSDType string `json:"ns_dtype"`
	// NSBatch is the most same-shape matrices one Newton-Schulz call
	// orthogonalises together (a [n, rows, cols] stack); 0 stacks up to
	// DefaultNSBatchElems elements, 1 runs every matrix on its own.
	NSBatch int `json:"ns_batch"`
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
	// Probe treats the Parallax probe (W_R, its norm and gate) apart from
	// the other parameters (probe.go); the zero value treats it alike.
	Probe ProbeOptim `json:"probe,omitzero"`
}

// DefaultOptimConfig returns the defaults for the named optimizer:
//
//   - Muon (hidden matrices): lr 0.02, momentum 0.95, Nesterov, 5 NS steps,
//     Keller's shape scaling, weight decay 0.01 (the KellerJordan/Muon README
//     example; lr*wd = 2e-4 per step); Newton-Schulz in the model's compute
//     dtype if that is bf16, else f32, same-shape matrices batched.
//   - AdamW: lr 3e-3 (small models tolerate a high rate: SmolLM-135M used
//     3e-3), betas (0.9, 0.95), eps 1e-8 (Pythia, TinyLlama, OLMo, Moonlight);
//     weight decay 0.1 on hidden matrices (the same sources), none on the
//     embedding, head and gains (OLMo-2 and SmolLM3 exclude embeddings;
//     decaying gains is a per-run choice).
func DefaultOptimConfig(name string) OptimConfig {
	return OptimConfig{
		Name: name,
		Muon: MuonConfig{LR: 0.02, Momentum: 0.95, Nesterov: true, NSSteps: 5,
			Scaling: ScaleKeller, WeightDecay: 0.01, NSDType: NSAuto},
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
	if err := c.Probe.validate(c.Name); err != nil {
		return err
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
		case m.NSDType != "" && m.NSDType != NSAuto && m.NSDType != NSF32 && m.NSDType != NSBF16:
			return fmt.Errorf("optimizer: muon ns_dtype %q: want %s, %s or %s", m.NSDType, NSAuto, NSF32, NSBF16)
		case m.NSBatch < 0:
			return bad("muon ns_batch (want >= 0)", float64(m.NSBatch))
		}
	}
	return nil
}

// resolved fills the defaults that depend on other settings.
func (c OptimConfig) resolved() OptimConfig {
	if c.Muon.LR == 0 && c.Muon.Scaling == ScaleMoonlight {
		c.Muon.LR = c.AdamW.LR
	}
	if c.Muon.NSDType == "" {
		c.Muon.NSDType = NSAuto
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
//
// Muon orthogonalises same-shape matrices together: the matrices this rank
// updates are grouped by shape and each group cut into batches of at most
// MuonConfig.NSBatch matrices (DefaultNSBatchElems elements by default).
// A batch is three calls on one engine.MuonStack [n, rows, cols] of the
// Newton-Schulz dtype: engine.MuonMomentumAll writes every matrix's
// direction into its slot, NewtonSchulz orthogonalises the stack in place,
// and engine.MuonApplyAll applies every slot to its matrix. On a device
// with engine.MuonMultiOps the first and last are one launch each for the
// whole batch (elsewhere two launches a matrix each: the single-matrix op
// and a copy into or out of the stack). The stack and Newton-Schulz's
// scratch are allocated once per shape, by the first Step, and shared by
// the shape's batches.
type Optimizer struct {
	cfg    OptimConfig
	dev    engine.Device
	params []*model.Param
	adam   []*adamState
	muon   []*muonState
	step   int // updates applied so far

	computeDT engine.DType // the model's compute dtype (SetComputeDType); 0 if not given
	nsReady   bool         // nsBatches and nsShapes are built
	nsBatches []*nsBatch   // this rank's Muon matrices, in Newton-Schulz batches
	nsShapes  []*nsShape   // the batches' scratch, one per matrix shape

	par *optParallel // data-parallel sharding (parallel.go); nil in one process
}

// nsShape is the Newton-Schulz scratch shared by the batches of one matrix
// shape, in the Newton-Schulz dtype.
type nsShape struct {
	rows, cols, slots int
	stack             *engine.MuonStack // [slots, rows, cols]: the stacked directions, orthogonalised in place
}

// nsBatch is up to shape.slots matrices orthogonalised by one NewtonSchulz
// call; slots past len(states) hold stale data, computed on and ignored
// (matrices of a batch do not interact). ws, gs and ms are the states'
// weights, gradients and momenta, scales and lrScales their Muon scales
// and learning-rate multipliers, in slot order.
type nsBatch struct {
	shape            *nsShape
	states           []*muonState
	ws, gs, ms       []*engine.Tensor
	scales, lrScales []float32
}

// A state whose tensors are nil belongs to another rank (parallel.go).
type adamState struct {
	p       *model.Param
	m, v    *engine.Tensor
	wd      float64
	lrScale float64 // multiplies the learning rate (ProbeOptim.LRScale)
}

type muonState struct {
	p       *model.Param
	m       *engine.Tensor
	scale   float64
	lrScale float64 // multiplies the learning rate (ProbeOptim.LRScale)
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
	o := &Optimizer{cfg: cfg, dev: dev, params: params, par: par}
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
		if cfg.usesMuon(p) {
			if p.W.Rank() != 2 {
				return nil, fmt.Errorf("optimizer: Muon parameter %q is %v, want a matrix", p.Name, p.W)
			}
			var m *engine.Tensor
			if o.holds(p) {
				if m, err = dev.Alloc(engine.F32, p.W.Shape()...); err != nil {
					return nil, fmt.Errorf("optimizer: momentum of %q: %w", p.Name, err)
				}
			}
			o.muon = append(o.muon, &muonState{p: p, m: m, lrScale: cfg.lrScale(p),
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
		o.adam = append(o.adam, &adamState{p: p, m: m, v: v, wd: wd, lrScale: cfg.lrScale(p)})
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
// "muon: 16 matrices (1.2M, newton-schulz bf16), adamw: 10 tensors (0.6M)".
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
		parts = append(parts, fmt.Sprintf("muon: %d matrices (%s, newton-schulz %v)", len(o.muon), HumanCount(float64(nm)), o.NSDType()))
	}
	parts = append(parts, fmt.Sprintf("adamw: %d tensors (%s)", len(o.adam), HumanCount(float64(na))))
	return strings.Join(parts, ", ")
}

// Step applies one update with the peak learning rates multiplied by
// lrFactor (the schedule's value). Gradients are read, not cleared.
func (o *Optimizer) Step(lrFactor float64) error { return o.StepScaled(lrFactor, 1) }

// StepScaled is Step on the gradients multiplied by gradScale (gradient
// clipping's factor), as ScaleGrads then Step would compute it, bit for
// bit: the AdamW groups fold the factor into their update
// (engine.AdamWOpts.GradScale) and Muon into its momentum
// (engine.MuonMomentumOpts.GradScale), which saves a read and a write of
// every gradient. The gradients are not changed.
func (o *Optimizer) StepScaled(lrFactor, gradScale float64) error {
	// Muon's scratch first: failing to allocate it updates nothing.
	if err := o.buildNS(); err != nil {
		return fmt.Errorf("muon: %w", err)
	}
	o.step++
	a := o.cfg.AdamW
	// One multi-tensor update per weight decay (decayed matrices, undecayed
	// gains) and learning-rate multiplier, in the order the tensors were
	// first seen.
	type adamGroup struct{ p, g, m, v []*engine.Tensor }
	type groupKey struct{ wd, lrScale float64 }
	var keys []groupKey
	groups := map[groupKey]*adamGroup{}
	for _, s := range o.adam {
		if s.m == nil {
			continue // another rank's
		}
		k := groupKey{s.wd, s.lrScale}
		g := groups[k]
		if g == nil {
			g = &adamGroup{}
			groups[k] = g
			keys = append(keys, k)
		}
		g.p, g.g, g.m, g.v = append(g.p, s.p.W), append(g.g, s.p.G), append(g.m, s.m), append(g.v, s.v)
	}
	for _, k := range keys {
		g, wd := groups[k], k.wd
		err := engine.AdamWAll(o.dev, g.p, g.g, g.m, g.v, engine.AdamWOpts{
			LR: float32(a.LR * lrFactor * k.lrScale), Beta1: float32(a.Beta1), Beta2: float32(a.Beta2),
			Eps: float32(a.Eps), WeightDecay: float32(wd), Step: o.step, GradScale: float32(gradScale),
		})
		if err != nil {
			return fmt.Errorf("adamw (%d tensors, weight decay %g): %w", len(g.p), wd, err)
		}
	}
	lr := float32(o.cfg.Muon.LR * lrFactor)
	for _, b := range o.nsBatches {
		if err := o.muonStep(b, lr, float32(gradScale)); err != nil {
			return err
		}
	}
	return o.syncParams()
}

// muonStep applies Muon to the matrices of one batch: momentum of the
// gradients scaled by gradScale into the stack, Newton-Schulz on it, the
// update out of it (matrix i's learning rate is lr * its multiplier,
// rounded to f32).
func (o *Optimizer) muonStep(b *nsBatch, lr, gradScale float32) error {
	mc, st := o.cfg.Muon, b.shape.stack
	mo := engine.MuonMomentumOpts{Beta: float32(mc.Momentum), Nesterov: mc.Nesterov, GradScale: gradScale}
	if err := engine.MuonMomentumAll(st, b.ms, b.gs, mo); err != nil {
		return fmt.Errorf("muon %s: %w", b.names(), err)
	}
	if err := st.NewtonSchulz(mc.NSSteps); err != nil {
		return fmt.Errorf("muon %s: %w", b.names(), err)
	}
	if err := engine.MuonApplyAll(st, b.ws, lr, float32(mc.WeightDecay), b.lrScales, b.scales); err != nil {
		return fmt.Errorf("muon %s: %w", b.names(), err)
	}
	return nil
}

// names names a batch's matrices for errors: "q.0 (and 3 more [64,64])".
func (b *nsBatch) names() string {
	if len(b.states) == 1 {
		return b.states[0].p.Name
	}
	return fmt.Sprintf("%s (and %d more [%d,%d])", b.states[0].p.Name, len(b.states)-1, b.shape.rows, b.shape.cols)
}

// SetComputeDType tells the optimizer the model's compute dtype, which
// MuonConfig.NSDType NSAuto follows: Newton-Schulz runs in bf16 under a
// bf16 model and in f32 otherwise (without the call, f32). The runner calls
// it once, before the first Step; a later call that changes the
// Newton-Schulz dtype frees the Newton-Schulz scratch, which the next Step
// allocates again.
func (o *Optimizer) SetComputeDType(dt engine.DType) {
	before := o.NSDType()
	o.computeDT = dt
	if o.NSDType() != before {
		o.freeNS()
	}
}

// NSDType is the dtype Muon's Newton-Schulz iterates in: MuonConfig.NSDType
// resolved against the compute dtype given to SetComputeDType.
func (o *Optimizer) NSDType() engine.DType {
	switch o.cfg.Muon.NSDType {
	case NSF32:
		return engine.F32
	case NSBF16:
		return engine.BF16
	}
	if o.computeDT == engine.BF16 {
		return engine.BF16
	}
	return engine.F32
}

// buildNS groups the Muon matrices this rank updates by shape (in the
// order their shapes first appear), cuts each group into batches of as
// equal sizes as the limit allows, and allocates each shape's scratch. It
// does nothing once built.
func (o *Optimizer) buildNS() error {
	if o.nsReady {
		return nil
	}
	type key struct{ rows, cols int }
	var order []key
	group := map[key][]*muonState{}
	for _, s := range o.muon {
		if s.m == nil {
			continue // another rank's
		}
		k := key{s.p.W.Dim(0), s.p.W.Dim(1)}
		if _, ok := group[k]; !ok {
			order = append(order, k)
		}
		group[k] = append(group[k], s)
	}
	dt := o.NSDType()
	for _, k := range order {
		ss := group[k]
		n, per := len(ss), max(1, k.rows*k.cols)
		limit := o.cfg.Muon.NSBatch
		if limit == 0 {
			limit = DefaultNSBatchElems / per
		}
		// A stack's element and row indices stay within int32 (kernels').
		limit = max(1, min(limit, math.MaxInt32/per, math.MaxInt32/max(1, k.rows)))
		batches := (n + limit - 1) / limit
		slots := (n + batches - 1) / batches
		sh, err := newNSShape(o.dev, dt, k.rows, k.cols, slots)
		if err != nil {
			o.freeNS()
			return err
		}
		o.nsShapes = append(o.nsShapes, sh)
		for lo := 0; lo < n; lo += slots {
			b := &nsBatch{shape: sh, states: ss[lo:min(lo+slots, n)]}
			for _, s := range b.states {
				b.ws, b.gs, b.ms = append(b.ws, s.p.W), append(b.gs, s.p.G), append(b.ms, s.m)
				b.scales, b.lrScales = append(b.scales, float32(s.scale)), append(b.lrScales, float32(s.lrScale))
			}
			o.nsBatches = append(o.nsBatches, b)
		}
	}
	o.nsReady = true
	return nil
}

// newNSShape allocates the scratch of batches of up to slots [rows, cols]
// matrices.
func newNSShape(dev engine.Device, dt engine.DType, rows, cols, slots int) (*nsShape, error) {
	st, err := engine.NewMuonStack(dev, dt, slots, rows, cols)
	if err != nil {
		return nil, fmt.Errorf("newton-schulz scratch for %d x [%d,%d] %v: %w", slots, rows, cols, dt, err)
	}
	return &nsShape{rows: rows, cols: cols, slots: slots, stack: st}, nil
}

// free releases the scratch.
func (sh *nsShape) free() {
	if sh.stack != nil {
		sh.stack.Free()
	}
	*sh = nsShape{}
}

// freeNS releases the Newton-Schulz scratch; the next Step builds it anew.
func (o *Optimizer) freeNS() {
	for _, sh := range o.nsShapes {
		sh.free()
	}
	o.nsShapes, o.nsBatches, o.nsReady = nil, nil, false
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
	o.freeNS()
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
