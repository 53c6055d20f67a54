package train

import (
	"fmt"
	"math"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/model"
)

// GradNorm computes the global L2 norm of the gradients: SumSquares
// accumulates every gradient's sum of squares into one F32 scalar on the
// device, then a single host read. acc is a F32 [1] scratch tensor.
func GradNorm(dev engine.Device, params []*model.Param, acc *engine.Tensor) (float64, error) {
	if len(params) == 0 {
		return 0, nil
	}
	if err := engine.SumSquaresAll(dev, acc, grads(params), false); err != nil {
		return 0, fmt.Errorf("grad norm: %w", err)
	}
	v, err := engine.Float32s(acc)
	if err != nil {
		return 0, fmt.Errorf("grad norm: %w", err)
	}
	return math.Sqrt(float64(v[0])), nil
}

// ScaleGrads multiplies every gradient by s (skipped when s == 1).
func ScaleGrads(dev engine.Device, params []*model.Param, s float64) error {
	if s == 1 {
		return nil
	}
	if err := engine.ScaleAll(dev, grads(params), float32(s)); err != nil {
		return fmt.Errorf("scale grads: %w", err)
	}
	return nil
}

// grads lists the parameters' gradients.
func grads(params []*model.Param) []*engine.Tensor {
	gs := make([]*engine.Tensor, len(params))
	for i, p := range params {
		gs[i] = p.G
	}
	return gs
}

// ClipFactor returns the multiplier that makes gradients of global norm
// norm have norm at most maxNorm (1 when maxNorm <= 0 or no clipping is
// needed). The 1e-6 guards a zero norm as PyTorch's clip_grad_norm_ does.
func ClipFactor(norm, maxNorm float64) float64 {
	if maxNorm <= 0 || norm <= maxNorm {
		return 1
	}
	return maxNorm / (norm + 1e-6)
}

// ZeroGrads sets every gradient to zero (the backward pass accumulates).
func ZeroGrads(dev engine.Device, params []*model.Param) error {
	if err := engine.FillAll(dev, grads(params), 0); err != nil {
		return fmt.Errorf("zero grads: %w", err)
	}
	return nil
}
