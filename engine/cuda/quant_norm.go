//go:build cgo

package cuda

import (
	"fmt"

	"github.com/parallax-engine/parallax/engine"
)

// Host side of the int8 products with the RMSNorm before them folded in:
// qgemm_norm_* in shaders/cuda/qgemm.cu (bf16 x, the rows the tensor-core
// kernel takes: each block sums the squares of its slice of x as it
// stages it) and qgemv_norm_* in qgemv.cu (each block recomputes the sums
// of squares of its 1..8 rows from x). They take what the plain int8
// kernels take, with a 16-byte aligned norm weight.

var _ engine.Int8NormLinear = (*Device)(nil)

// NormLinearMultiInt8 runs up to four int8 products of RMSNorm(x) in one
// launch (qgemm_norm_* or qgemv_norm_multi_m*) where LinearMultiInt8 would
// take the products of the normed rows; see engine.Int8NormLinear.
func (d *Device) NormLinearMultiInt8(outs []*engine.Tensor, ws []engine.Int8Weight, x, normW *engine.Tensor, eps float32) (bool, error) {
	dm, env, pick, err := d.int8NormPick("norm linear multi int8", outs, ws, x, normW)
	if err != nil {
		return true, err
	}
	switch pick {
	case int8QGEMM:
		set, tiles := int8Set(outs, ws, dm, qgemmTileRows)
		return true, d.qgemm(env, "norm_", &set, tiles, dt(outs[0]), x, dm[0], ws[0].Group, false, normW, eps)
	case int8QGEMV:
		set, blocks := int8Set(outs, ws, dm, 8)
		return true, d.launch(qmod, fmt.Sprintf("qgemv_norm_multi_m%d", dm[0].M), [3]int{blocks, 1, 1}, threads256, 0,
			newArgs().blob(set[:], 8).i(dt(outs[0])).p(ptr(x)).i(dt(x)).i(dm[0].K).i(ws[0].Group).i(dm[0].Groups).
				p(ptr(normW)).i(dt(normW)).f(eps))
	}
	return false, nil
}

// NormLinearSwiGLUInt8 runs a decode step's post-attention norm, int8 gate
// and up products and SwiGLU in one launch (qgemm_norm_swiglu_* or
// qgemv_norm_swiglu_m*) where LinearSwiGLUInt8 would take the normed rows;
// see engine.Int8NormLinear.
func (d *Device) NormLinearSwiGLUInt8(act, x, normW *engine.Tensor, wGate, wUp engine.Int8Weight, eps float32) (bool, error) {
	const op = "norm linear swiglu int8"
	if _, err := engine.CheckNormLinear(d.own, op, x, normW); err != nil {
		return true, err
	}
	if act == nil {
		return false, nil
	}
	dims, ok, err := d.int8SwiGLU(act, x, wGate, wUp)
	if !ok || err != nil || ptr(normW)%16 != 0 {
		return err != nil, err
	}
	env, err := qgemmEnvNow()
	if err != nil {
		return true, err
	}
	ws, dm := []engine.Int8Weight{wGate, wUp}, []engine.Int8Dims{dims, dims}
	switch d.int8Pick(env, dm, x, ws, true) {
	case int8QGEMM:
		set, _ := int8Set([]*engine.Tensor{act, act}, ws, dm, qgemmTileRows)
		return true, d.qgemm(env, "norm_swiglu_", &set, qgemmSwiGLUTiles(dims.N), dt(act), x, dims, wGate.Group, false, normW, eps)
	case int8QGEMV:
		return true, d.launch(qmod, fmt.Sprintf("qgemv_norm_swiglu_m%d", dims.M), [3]int{(dims.N + 7) / 8, 1, 1}, threads256, 0,
			newArgs().p(ptr(act)).i(dt(act)).p(ptr(x)).i(dt(x)).p(ptr(wGate.Q)).p(ptr(wGate.Scales)).
				p(ptr(wUp.Q)).p(ptr(wUp.Scales)).i(dims.N).i(dims.K).i(wGate.Group).i(dims.Groups).
				p(ptr(normW)).i(dt(normW)).f(eps))
	}
	return false, nil
}

// NormLinearDecodePrepInt8 is NormLinearDecodePrep for int8 weights
// (qgemv_norm_prep_m*: qgemv_norm_multi's products, then the last block of
// each head prepares it) where Options.FusedPrep is set and the
// matrix-vector kernel takes the products; see
// engine.Int8NormLinearPreparer.
func (d *Device) NormLinearDecodePrepInt8(outs []*engine.Tensor, ws []engine.Int8Weight, x, normW *engine.Tensor, eps float32, a engine.DecodePrepArgs) (bool, error) {
	const op = "norm linear decode prep int8"
	if !d.opts.FusedPrep || a.KeepKV {
		return false, nil
	}
	dm, _, pick, err := d.int8NormPick(op, outs, ws, x, normW)
	if pick != int8QGEMV || err != nil {
		return err != nil, err
	}
	p, ok, err := d.decodePrepOps(a)
	if !ok || err != nil {
		return err != nil, err
	}
	if !p.fuses(outs, a, dm[0].M) {
		return false, nil
	}
	if err := d.ensurePrepCounters(); err != nil {
		return true, err
	}
	set, blocks := int8Set(outs, ws, dm, 8)
	return true, d.launch(qmod, fmt.Sprintf("qgemv_norm_prep_m%d", dm[0].M), [3]int{blocks, 1, 1}, threads256, 0,
		p.args(newArgs().blob(set[:], 8).i(dt(outs[0])).p(ptr(x)).i(dt(x)).i(dm[0].K).i(ws[0].Group).i(dm[0].Groups).
			p(ptr(normW)).i(dt(normW)).f(eps), a).p(d.errBuf.ptr).p(d.prepCnt.ptr))
}

// int8NormPick checks the operands of a norm-folded int8 product and picks
// its kernel (int8Pick); the pick is neither int8QGEMM nor int8QGEMV
// (and err nil) where no fused kernel takes them.
func (d *Device) int8NormPick(op string, outs []*engine.Tensor, ws []engine.Int8Weight, x, normW *engine.Tensor) (dm []engine.Int8Dims, env qgemmEnv, pick int8Kernel, err error) {
	if _, err = engine.CheckNormLinear(d.own, op, x, normW); err != nil {
		return nil, env, pick, err
	}
	dims, ok, err := d.int8Multi(outs, ws, x)
	if !ok || err != nil || ptr(normW)%16 != 0 {
		return nil, env, pick, err
	}
	if env, err = qgemmEnvNow(); err != nil {
		return nil, env, pick, err
	}
	dm = dims[:len(ws)]
	return dm, env, d.int8Pick(env, dm, x, ws, true), nil
}
