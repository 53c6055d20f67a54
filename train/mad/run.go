package mad

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"time"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/train"
)

// RunSpec is one training run: a setting, a mixer, an optimizer and one
// point of the lr x weight-decay grid, with the protocol's knobs.
type RunSpec struct {
	Setting   Setting `json:"setting"`
	Mixer     string  `json:"mixer"`
	Optimizer string  `json:"optimizer"` // train.OptAdamW or train.OptMuon
	LR        float64 `json:"lr"`
	WD        float64 `json:"weight_decay"`
	Epochs    int     `json:"epochs"`   // at most this many epochs; also the cosine period
	Batch     int     `json:"batch"`    // sequences per step (and per evaluation batch)
	MinLR     float64 `json:"min_lr"`   // the cosine's floor (1e-6)
	StopAcc   float64 `json:"stop_acc"` // stop once the test accuracy reaches this (0.999); <= 0 never
	Seed      uint64  `json:"seed"`     // model initialisation and data order
	// Model overrides the MAD model's shape for tests and experiments; the
	// zero value is DefaultModelConfig. Vocab, Mixer and AutoEncoder always
	// come from the run.
	Model ModelConfig `json:"model"`
}

// Key names the run uniquely: every field that changes its result.
func (r RunSpec) Key() string {
	k := fmt.Sprintf("%s/%s/%s/%s/lr%s-wd%s-e%d-b%d-min%s-stop%s-seed%d", r.Setting.Task, r.Setting.ID(), r.Mixer, r.Optimizer,
		fmtFloat(r.LR), fmtFloat(r.WD), r.Epochs, r.Batch, fmtFloat(r.MinLR), fmtFloat(r.StopAcc), r.Seed)
	if r.Model != (ModelConfig{}) {
		c := r.Model
		k += fmt.Sprintf("-d%dh%dx%df%db%d", c.Dim, c.Heads, c.HeadDim, c.FFN, c.Blocks)
	}
	return k
}

func fmtFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// ModelConfig returns the model the run trains.
func (r RunSpec) ModelConfig() ModelConfig {
	c := r.Model
	if c == (ModelConfig{}) {
		c = DefaultModelConfig(r.Setting.Vocab, r.Mixer)
	}
	c.Vocab, c.Mixer = r.Setting.Vocab, r.Mixer
	c.AutoEncoder = r.Setting.Task == Compression
	return c
}

// Validate reports an invalid run.
func (r RunSpec) Validate() error {
	if err := r.Setting.Validate(); err != nil {
		return err
	}
	if err := r.ModelConfig().Validate(); err != nil {
		return err
	}
	switch {
	case r.Optimizer != train.OptAdamW && r.Optimizer != train.OptMuon:
		return fmt.Errorf("mad run: optimizer %q: want %s or %s", r.Optimizer, train.OptAdamW, train.OptMuon)
	case !(r.LR > 0) || !(r.WD >= 0) || !(r.MinLR >= 0):
		return fmt.Errorf("mad run: lr %v must be > 0, weight decay %v and min lr %v >= 0", r.LR, r.WD, r.MinLR)
	case r.Epochs < 1 || r.Batch < 1:
		return fmt.Errorf("mad run: epochs %d and batch %d must be >= 1", r.Epochs, r.Batch)
	}
	return nil
}

// OptimConfig is the run's optimizer. AdamW follows the reference: PyTorch's
// defaults (betas 0.9, 0.999, eps 1e-8) with the weight decay on every
// parameter. Muon trains the hidden matrices with Moonlight's RMS-matched
// scaling (0.2 sqrt(max(rows, cols))), so that the same lr and weight-decay
// grid means the same update size for both optimizers; everything else
// stays on AdamW with the same lr and decay.
func (r RunSpec) OptimConfig() train.OptimConfig {
	o := train.DefaultOptimConfig(r.Optimizer)
	o.AdamW = train.AdamWConfig{LR: r.LR, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8,
		WeightDecay: r.WD, EmbedWeightDecay: r.WD, GainWeightDecay: r.WD}
	o.Muon = train.MuonConfig{LR: r.LR, Momentum: 0.95, Nesterov: true, NSSteps: 5,
		Scaling: train.ScaleMoonlight, WeightDecay: r.WD}
	return o
}

// EpochLR is the learning rate of 0-based epoch e: PyTorch's
// CosineAnnealingLR with T_max = Epochs and eta_min = MinLR, stepped once
// per epoch.
func (r RunSpec) EpochLR(e int) float64 {
	return r.MinLR + (r.LR-r.MinLR)*(1+math.Cos(math.Pi*float64(e)/float64(r.Epochs)))/2
}

// EpochStats is one epoch of a run.
type EpochStats struct {
	Epoch        int     `json:"epoch"` // 1-based
	LR           float64 `json:"lr"`
	TrainLoss    Num     `json:"train_loss"`
	TestLoss     Num     `json:"test_loss"`
	TestPPL      Num     `json:"test_ppl"`
	TestAcc      float64 `json:"test_acc"`       // macro (MAD's)
	TestAccMicro float64 `json:"test_acc_micro"` // plain accuracy
	Seconds      float64 `json:"seconds"`        // wall time of the epoch (training and evaluation)
}

// Why a run stopped.
const (
	StopThreshold = "threshold" // the test accuracy reached StopAcc
	StopEpochs    = "epochs"    // the epoch budget ran out
	StopDiverged  = "diverged"  // the training loss became NaN or infinite
)

// RunResult is a finished run. Its score is TestAcc: the macro test
// accuracy of the epoch with the lowest test perplexity (the reference's
// best checkpoint).
type RunResult struct {
	Key          string       `json:"key"`
	Spec         RunSpec      `json:"spec"`
	TestAcc      float64      `json:"test_acc"`
	TestAccMicro float64      `json:"test_acc_micro"`
	TestPPL      Num          `json:"test_ppl"`     // null when no epoch was evaluated
	BestEpoch    int          `json:"best_epoch"`   // the epoch of the lowest test perplexity (0: none)
	MaxTestAcc   float64      `json:"max_test_acc"` // the best macro accuracy of any epoch
	Epochs       int          `json:"epochs"`       // epochs run
	Steps        int          `json:"steps"`
	Stop         string       `json:"stop"`
	Seconds      float64      `json:"seconds"`
	Params       int          `json:"params"`         // all parameters
	ParamsNonEmb int          `json:"params_non_emb"` // without embedding and head
	Device       string       `json:"device"`
	History      []EpochStats `json:"history"`
}

// Train runs one training run on dev with the setting's data (Generate).
// onEpoch, if not nil, is called after every epoch. Cancelling ctx stops
// between steps and returns ctx's error.
func Train(ctx context.Context, dev engine.Device, spec RunSpec, trainSet, testSet *Dataset, onEpoch func(EpochStats)) (RunResult, error) {
	return TrainResumable(ctx, dev, spec, trainSet, testSet, "", onEpoch)
}

// TrainResumable is Train with the run's progress saved into dir (see
// PartialDir) after an epoch, at most every SaveEvery, and continued from
// there when dir holds a save of this run; dir "" saves nothing. The
// result is the uninterrupted run's; onEpoch sees only the epochs run in
// this call. The save is removed once the run is done.
func TrainResumable(ctx context.Context, dev engine.Device, spec RunSpec, trainSet, testSet *Dataset, dir string,
	onEpoch func(EpochStats)) (RunResult, error) {
	if err := spec.Validate(); err != nil {
		return RunResult{}, err
	}
	if trainSet.T != testSet.T || trainSet.N < 1 || testSet.N < 1 {
		return RunResult{}, fmt.Errorf("mad run: train %dx%d and test %dx%d sets do not match", trainSet.N, trainSet.T, testSet.N, testSet.T)
	}
	start := time.Now()
	B, T := spec.Batch, trainSet.T
	m, err := NewModel(dev, spec.ModelConfig(), B, T)
	if err != nil {
		return RunResult{}, err
	}
	defer m.Free()
	opt, err := train.NewOptimizer(dev, m.Params(), spec.OptimConfig())
	if err != nil {
		return RunResult{}, err
	}
	defer opt.Free()

	rs := &runState{bestPPL: math.Inf(1), pcg: rand.NewPCG(spec.Seed, 0x6d61642d6f726472), order: make([]int, trainSet.N),
		res: RunResult{Key: spec.Key(), Spec: spec, Stop: StopEpochs, TestPPL: Num(math.Inf(1))}}
	for i := range rs.order {
		rs.order[i] = i
	}
	if dir != "" {
		switch err := loadPartial(dir, spec.Key(), m, opt, rs); {
		case errors.Is(err, errNoPartial):
		case err != nil:
			return RunResult{}, fmt.Errorf("mad run: resume from %s: %w (remove the folder to start the run afresh)", dir, err)
		}
	}
	spent := rs.res.Seconds
	res, order, bestPPL := &rs.res, rs.order, rs.bestPPL
	res.Params, res.ParamsNonEmb = m.NumParams()
	res.Device = dev.Info().ID() // this call's, also for a resumed run
	bt := newBatcher(B, T)
	rng := rand.New(rs.pcg)
	lastSave := time.Time{}
	for epoch := rs.epoch; epoch < spec.Epochs; epoch++ {
		t0 := time.Now()
		lr := spec.EpochLR(epoch)
		factor := lr / spec.LR
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		var lossSum float64
		var count int
		diverged := false
		for s := 0; s < len(order); s += B {
			if err := ctx.Err(); err != nil {
				return *res, err
			}
			bt.fill(trainSet, order[s:min(s+B, len(order))])
			if err := m.ZeroGrads(); err != nil {
				return *res, err
			}
			st, err := m.Forward(bt.tokens, bt.targets)
			if errors.Is(err, ErrNonFinite) {
				diverged = true
				break
			}
			if err != nil {
				return *res, err
			}
			if err := m.Backward(); err != nil {
				return *res, err
			}
			if err := opt.Step(factor); err != nil {
				return *res, err
			}
			lossSum += st.Sum
			count += st.Count
			res.Steps++
		}
		if diverged {
			res.Stop = StopDiverged
			break
		}
		sc, err := evaluate(m, testSet, bt)
		if err != nil {
			return *res, err
		}
		es := EpochStats{Epoch: epoch + 1, LR: lr, TrainLoss: Num(lossSum / math.Max(1, float64(count))),
			TestLoss: Num(sc.Loss()), TestPPL: Num(sc.Perplexity()), TestAcc: sc.Macro(), TestAccMicro: sc.Micro(),
			Seconds: time.Since(t0).Seconds()}
		res.History = append(res.History, es)
		res.Epochs = epoch + 1
		res.MaxTestAcc = math.Max(res.MaxTestAcc, es.TestAcc)
		if float64(es.TestPPL) < bestPPL {
			bestPPL = float64(es.TestPPL)
			res.BestEpoch, res.TestAcc, res.TestAccMicro, res.TestPPL = es.Epoch, es.TestAcc, es.TestAccMicro, es.TestPPL
		}
		if onEpoch != nil {
			onEpoch(es)
		}
		if spec.StopAcc > 0 && es.TestAcc >= spec.StopAcc {
			res.Stop = StopThreshold
			break
		}
		if dir != "" && epoch+1 < spec.Epochs && time.Since(lastSave) >= SaveEvery {
			rs.epoch, rs.bestPPL = epoch+1, bestPPL
			res.Seconds = spent + time.Since(start).Seconds()
			if err := savePartial(dir, m, opt, rs); err != nil {
				return *res, fmt.Errorf("mad run: save progress into %s: %w", dir, err)
			}
			lastSave = time.Now()
		}
	}
	res.Seconds = spent + time.Since(start).Seconds()
	return *res, nil
}

// DropPartial removes a finished run's saved progress (PartialRunDir).
func DropPartial(dir string) error {
	if dir == "" {
		return nil
	}
	if err := os.RemoveAll(dir + ".new"); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

// batcher holds one batch's host buffers.
type batcher struct {
	B, T            int
	tokens, targets []int32
}

func newBatcher(B, T int) *batcher {
	return &batcher{B: B, T: T, tokens: make([]int32, B*T), targets: make([]int32, B*T)}
}

// fill copies examples idx (at most B) of ds into the batch and pads the
// remaining rows with sequences whose targets are all ignored.
func (bt *batcher) fill(ds *Dataset, idx []int) {
	T := bt.T
	for b := range bt.B {
		tk, tg := bt.tokens[b*T:(b+1)*T], bt.targets[b*T:(b+1)*T]
		if b < len(idx) {
			in, out := ds.Example(idx[b])
			copy(tk, in)
			copy(tg, out)
			continue
		}
		clear(tk)
		for i := range tg {
			tg[i] = IgnoreIndex
		}
	}
}

// Evaluate scores m on every example of ds (m's batch shape, ds.T == m.T).
func Evaluate(m *Model, ds *Dataset) (*Scores, error) {
	if ds.T != m.T {
		return nil, fmt.Errorf("mad evaluate: examples of %d tokens for a model of %d", ds.T, m.T)
	}
	return evaluate(m, ds, newBatcher(m.B, m.T))
}

func evaluate(m *Model, ds *Dataset, bt *batcher) (*Scores, error) {
	sc := NewScores(m.Config.Vocab)
	idx := make([]int, 0, m.B)
	for s := 0; s < ds.N; s += m.B {
		idx = idx[:0]
		for i := s; i < min(s+m.B, ds.N); i++ {
			idx = append(idx, i)
		}
		bt.fill(ds, idx)
		st, err := m.Forward(bt.tokens, bt.targets)
		if err != nil && !errors.Is(err, ErrNonFinite) {
			return nil, err
		}
		logits, err := m.Logits()
		if err != nil {
			return nil, err
		}
		sc.AddLoss(st)
		sc.AddLogits(logits[:len(idx)*m.T*m.Config.Vocab], bt.targets[:len(idx)*m.T])
	}
	return sc, nil
}
