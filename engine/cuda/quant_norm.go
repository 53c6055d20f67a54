//go:build cgo

package cuda

import (
	"fmt"

	"github.com/parallax-engine/parallax/engine"
)

// Host side of the int8 products with the RMSNorm before them folded in
// (qgemv_norm_* in shaders/cuda/qgemv.cu: each block recomputes the sums
// of squares of its 1..8 rows from x). They take what the plain int8
// matrix-vector kernels take, with a 16-byte aligned norm weight.

var _ engine.Int8NormLinear = (*Device)(nil)

// NormLinearMultiInt8 runs up to four int8 decode products of RMSNorm(x)
// in one launch (qgemv_norm_multi_m*) where LinearMultiInt8 would take
// the products of the normed rows; see engine.Int8NormLinear.
func (d *Device) NormLinearMultiInt8(outs []*engine.Tensor, ws []engine.Int8Weight, x, normW *engine.Tensor, eps float32) (bool, error) {
	const op = "norm linear multi int8"
	if _, err := engine.CheckNormLinear(d.own, op, x, normW); err != nil {
		return true, err
	}
	set, dims, blocks, err := d.qgemvSet(outs, ws, x)
	if dims.M == 0 || err != nil || ptr(normW)%16 != 0 {
		return err != nil, err
	}
	return true, d.launch(qmod, fmt.Sprintf("qgemv_norm_multi_m%d", dims.M), [3]int{blocks, 1, 1}, threads256, 0,
		newArgs().blob(set[:], 8).i(dt(outs[0])).p(ptr(x)).i(dt(x)).i(dims.K).i(ws[0].Group).i(dims.Groups).
			p(ptr(normW)).i(dt(normW)).f(eps))
}

// NormLinearSwiGLUInt8 runs a decode step's post-attention norm, int8 gate
// and up products and SwiGLU in one launch (qgemv_norm_swiglu_m*) where
// LinearSwiGLUInt8 would take the normed rows; see engine.Int8NormLinear.
func (d *Device) NormLinearSwiGLUInt8(act, x, normW *engine.Tensor, wGate, wUp engine.Int8Weight, eps float32) (bool, error) {
	const op = "norm linear swiglu int8"
	if _, err := engine.CheckNormLinear(d.own, op, x, normW); err != nil {
		return true, err
	}
	if act == nil {
		return false, nil
	}
	dims, err := d.qgemvSwiGLUDims(act, x, wGate, wUp)
	if dims.M == 0 || err != nil || ptr(normW)%16 != 0 {
		return err != nil, err
	}
	return true, d.launch(qmod, fmt.Sprintf("qgemv_norm_swiglu_m%d", dims.M), [3]int{(dims.N + 7) / 8, 1, 1}, threads256, 0,
		newArgs().p(ptr(act)).i(dt(act)).p(ptr(x)).i(dt(x)).p(ptr(wGate.Q)).p(ptr(wGate.Scales)).
			p(ptr(wUp.Q)).p(ptr(wUp.Scales)).i(dims.N).i(dims.K).i(wGate.Group).i(dims.Groups).
			p(ptr(normW)).i(dt(normW)).f(eps))
}
