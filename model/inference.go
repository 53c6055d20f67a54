package model

import (
	"errors"
	"fmt"
	"slices"

	"github.com/parallax-engine/parallax/engine"
)

// AutoDType is the compute dtype "auto" stands for on a device: bf16 (else
// f16) on a GPU that lists it in DeviceInfo.DTypes, so every product runs on
// its tensor cores, and f32 on the CPU and on software devices, which
// compute in f32 anyway and would only lose precision.
func AutoDType(info engine.DeviceInfo) engine.DType {
	if info.Kind == engine.KindCPU || info.Kind == engine.KindSoftware {
		return engine.F32
	}
	for _, want := range []engine.DType{engine.BF16, engine.F16} {
		if slices.Contains(info.DTypes, want) {
			return want
		}
	}
	return engine.F32
}

// ErrInferenceOnly is wrapped by the errors of what needs the f32 master
// weights (training, saving) on a model loaded with LoadOptions.Inference.
var ErrInferenceOnly = errors.New("the model was loaded for inference only (LoadOptions.Inference) and has no f32 master weights")

// InferenceOnly reports whether the model dropped the f32 masters of its
// compute-copied weights (LoadOptions.Inference with a bf16 or f16 compute
// dtype): those Params have a nil W, and the model cannot be trained or
// saved.
func (m *Model) InferenceOnly() bool { return m.dropped }

// dropMasters fills the compute copies from the loaded masters and frees the
// masters that have a copy: an inference-only model then holds every product
// weight once, in the compute dtype (half of f32 in bf16). The weights that
// feed no product (the gains, an untied embedding) keep their f32 master,
// which is what the forward reads for them. With an f32 compute dtype there
// are no copies and nothing is dropped.
func (m *Model) dropMasters() error {
	r := &rec{dev: m.Dev, where: "inference weights"}
	m.refreshCompute(r)
	if r.err != nil {
		return r.err
	}
	// The copies must be complete before their sources go.
	if err := m.Dev.Sync(); err != nil {
		return fmt.Errorf("inference weights: %w", err)
	}
	for _, p := range m.params {
		if p.C != nil {
			m.Dev.Free(p.W)
			p.W = nil
			m.dropped = true
		}
	}
	return nil
}
