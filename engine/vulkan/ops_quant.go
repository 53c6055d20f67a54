package vulkan

import (
	"fmt"

	"github.com/parallax-engine/parallax/engine"
)

// The weight-only int8 ops. A product of up to qmatmulMaxRows rows runs the
// matrix-vector kernel (shaders/qmatmul.comp), which reads the int8
// weight once; every other product dequantizes the weight into a tensor
// of x's dtype (shaders/qdequant.comp) and runs MatMul over it.
// EmbeddingInt8 is qdequant.comp over the ids (or every row).

// qmatmulMaxRows is the most rows of x the matrix-vector kernel takes (as
// the CUDA backend's qgemv: more would take passes of 8 rows, each reading
// the weight again).
const qmatmulMaxRows = 8

// qTeam is the invocations of qmatmul.comp that compute one output column.
const qTeam = 32

// LinearInt8 computes out = x W^T (+ out) for an int8 weight; see
// engine.Ops.
func (d *Device) LinearInt8(o, x *engine.Tensor, w engine.Int8Weight, accumulate bool) error {
	dims, err := engine.CheckLinearInt8(d.own, o, x, w)
	if err != nil {
		return err
	}
	if dims.M == 0 || dims.N == 0 {
		return nil
	}
	if dims.K == 0 {
		if accumulate {
			return nil
		}
		return d.Fill(o, 0)
	}
	if dims.M > qmatmulMaxRows {
		return d.linearInt8Dequant(o, x, w, dims, accumulate)
	}
	return d.qmatmul(o, x, w, dims, accumulate, nil, 0)
}

// qmatmul runs qmatmul.comp for the rows of x (at most qmatmulMaxRows),
// with normW the RMSNorm before the product folded in (NORM) unless nil.
func (d *Device) qmatmul(o, x *engine.Tensor, w engine.Int8Weight, dims engine.Int8Dims, accumulate bool, normW *engine.Tensor, eps float32) error {
	fast := dims.K%16 == 0 && (w.Group%16 == 0 || w.Group >= dims.K)
	wg := d.flexWG()
	cols := wg / qTeam
	pc := push(uint32(dims.M), uint32(0), uint32(dims.N), uint32(dims.K), uint32(w.Group), uint32(dims.Groups), accumulate, fast, eps)
	var sp spec
	gn := d.none()
	if normW != nil {
		sp, gn = spec{1: 1}, in(normW)
	}
	return d.launch("qmatmul", wg, sp, pc, d.groups1((dims.N+cols-1)/cols), in(x), in(w.Q), in(w.Scales), out(o), gn)
}

// linearInt8Dequant dequantizes w into a tensor of x's dtype and multiplies
// over it with MatMul.
func (d *Device) linearInt8Dequant(out, x *engine.Tensor, w engine.Int8Weight, dims engine.Int8Dims, accumulate bool) error {
	wt, err := d.Alloc(x.DType(), dims.N, dims.K)
	if err != nil {
		return fmt.Errorf("linear int8: dequantized weight: %w", err)
	}
	defer d.Free(wt)
	if err := d.dequant(wt, w, nil, dims.N, dims.N, dims.K); err != nil {
		return err
	}
	return engine.LinearDequantized(d, out, x, wt, dims, accumulate)
}

// dequant writes rows of W into dst (rows of K): W[ids[r]] with ids, else
// W[r].
func (d *Device) dequant(dst *engine.Tensor, w engine.Int8Weight, ids *engine.Tensor, rows, n, k int) error {
	if rows == 0 || k == 0 {
		return nil
	}
	wg := d.flexWG()
	idArg := d.none()
	if ids != nil {
		idArg = in(ids)
	}
	pc := push(uint32(rows), uint32(n), uint32(k), uint32(w.Group), uint32(engine.Int8Groups(k, w.Group)), ids != nil)
	return d.launch("qdequant", wg, nil, pc, d.strideGroups(rows*k, wg), in(w.Q), in(w.Scales), idArg, out(dst), d.statusArg())
}

// EmbeddingInt8 gathers dequantized rows of an int8 weight (every row when
// ids is nil); an id out of range is reported at Sync. See engine.Ops.
func (d *Device) EmbeddingInt8(o *engine.Tensor, w engine.Int8Weight, ids *engine.Tensor) error {
	rows, k, n, err := engine.CheckEmbeddingInt8(d.own, o, w, ids)
	if err != nil {
		return err
	}
	return d.dequant(o, w, ids, rows, n, k)
}

var _ engine.Int8NormLinear = (*Device)(nil)

// qmatmulNormTakes reports whether qmatmul.comp with NORM takes a product
// of these dims: the rows it takes without (at most qmatmulMaxRows) and a
// non-empty product, which the plain LinearInt8 handles without a kernel.
func qmatmulNormTakes(dims engine.Int8Dims) bool {
	return dims.M > 0 && dims.M <= qmatmulMaxRows && dims.N > 0 && dims.K > 0
}

// NormLinearMultiInt8 runs each int8 decode product of RMSNorm(x) as one
// qmatmul.comp dispatch with NORM (each workgroup recomputes its rows'
// sums of squares from x): the norm costs no dispatch of its own. It
// declines, for the engine's composition, the products the matrix-vector
// kernel does not take; see engine.Int8NormLinear.
func (d *Device) NormLinearMultiInt8(outs []*engine.Tensor, ws []engine.Int8Weight, x, normW *engine.Tensor, eps float32) (bool, error) {
	const op = "norm linear multi int8"
	if _, err := engine.CheckNormLinear(d.own, op, x, normW); err != nil {
		return true, err
	}
	if len(ws) == 0 || len(ws) > 4 || len(outs) != len(ws) {
		return false, nil
	}
	dims := make([]engine.Int8Dims, len(ws))
	for i, w := range ws {
		var err error
		if dims[i], err = engine.CheckLinearInt8(d.own, outs[i], x, w); err != nil {
			return true, err
		}
		if !qmatmulNormTakes(dims[i]) {
			return false, nil
		}
	}
	for i, w := range ws {
		if err := d.qmatmul(outs[i], x, w, dims[i], false, normW, eps); err != nil {
			return true, err
		}
	}
	return true, nil
}

// NormLinearSwiGLUInt8 runs a decode step's post-attention norm and int8
// gate and up products as two qmatmul.comp dispatches with NORM into f32
// scratch, and the SwiGLU over them into act: the products stay in f32 up
// to the activation. It declines what NormLinearMultiInt8 declines; see
// engine.Int8NormLinear.
func (d *Device) NormLinearSwiGLUInt8(act, x, normW *engine.Tensor, wGate, wUp engine.Int8Weight, eps float32) (bool, error) {
	const op = "norm linear swiglu int8"
	if _, err := engine.CheckNormLinear(d.own, op, x, normW); err != nil {
		return true, err
	}
	if act == nil {
		return false, nil // the composition reports the missing operand
	}
	dg, err := engine.CheckLinearInt8(d.own, act, x, wGate)
	if err != nil {
		return true, err
	}
	du, err := engine.CheckLinearInt8(d.own, act, x, wUp)
	if err != nil {
		return true, err
	}
	if !qmatmulNormTakes(dg) {
		return false, nil
	}
	gate, err := d.Alloc(engine.F32, act.Shape()...)
	if err != nil {
		return true, fmt.Errorf("%s: %w", op, err)
	}
	defer d.Free(gate)
	up, err := d.Alloc(engine.F32, act.Shape()...)
	if err != nil {
		return true, fmt.Errorf("%s: %w", op, err)
	}
	defer d.Free(up)
	if err := d.qmatmul(gate, x, wGate, dg, false, normW, eps); err != nil {
		return true, err
	}
	if err := d.qmatmul(up, x, wUp, du, false, normW, eps); err != nil {
		return true, err
	}
	return true, d.elementwise(ewSwiGLU, act.Numel(), 1, false, [6]float32{}, out(act), in(gate), in(up))
}
