package train

import (
	"fmt"
	"path/filepath"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/model"
)

// TrainingMemory estimates the device memory one rank of a run needs for
// the model of mc in compute dtype dt: the parameters (model.EstimateMemory),
// their f32 gradients and the optimizer state of o, all f32: Muon's momentum
// for the hidden matrices and AdamW's two moments for everything else (for
// everything with o.Name == OptAdamW). Over ranks ranks Muon's state is
// dealt to owners, and with zero AdamW's too. Activations are not counted.
func TrainingMemory(mc model.Config, dt engine.DType, o OptimConfig, ranks int, zero bool) model.Memory {
	need := model.EstimateMemory(mc, dt)
	need.Grads = model.GradBytes(mc)
	ranks = max(ranks, 1)
	var muon, adam int64
	for _, s := range model.ParamSpecs(mc) {
		if o.Name == OptMuon && s.Kind == model.Matrix {
			muon = satAdd(muon, satMul(s.Numel(), 4))
		} else {
			adam = satAdd(adam, satMul(s.Numel(), 8))
		}
	}
	muon /= int64(ranks)
	if zero {
		adam /= int64(ranks)
	}
	need.Optimizer = satAdd(muon, adam)
	return need
}

// checkMemory fails, before the model is allocated, when the model of mc
// with its gradients and optimizer state does not fit in what the device
// has free; the error (a *model.MemoryError) says how much is needed and
// how much there is.
func (r *runner) checkMemory(mc model.Config, dt engine.DType) error {
	ranks := 1
	if r.cfg.Group != nil {
		ranks = r.cfg.Group.Size()
	}
	if err := model.CheckMemory(r.dev, TrainingMemory(mc, dt, r.cfg.Optim, ranks, r.cfg.ZeRO)); err != nil {
		return fmt.Errorf("train: %s: %w", mc, err)
	}
	return nil
}

func satAdd(a, b int64) int64 {
	if a > 1<<62 || b > 1<<62 {
		return 1<<63 - 1
	}
	return a + b
}

func satMul(a, b int64) int64 {
	if a != 0 && b > (1<<63-1)/a {
		return 1<<63 - 1
	}
	return a * b
}

// precheckMemory runs checkMemory as the run starts, before the tokenizer
// and the data are prepared, on a lower bound of the model: a resumed run's
// config.json as it is; a new run's preset or config file with the
// smallest vocabulary the tokenizer could give it (257: the bytes and the
// end-of-text token; setupModel checks the final config again). A config
// that cannot be read is left for setupModel to report.
func (r *runner) precheckMemory() error {
	var mc model.Config
	var err error
	if r.cfg.Resume {
		mc, err = model.ReadConfig(filepath.Join(r.cfg.Out, model.ConfigFile))
	} else if mc, err = r.modelConfig(); err == nil && !r.cfg.KeepVocab {
		mc.Vocab = min(mc.Vocab, 257)
	}
	if err != nil {
		return nil
	}
	dt, err := r.computeDType()
	if err != nil {
		return nil
	}
	return r.checkMemory(mc, dt)
}
