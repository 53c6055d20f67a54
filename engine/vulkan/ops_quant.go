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
	fast := dims.K%16 == 0 && (w.Group%16 == 0 || w.Group >= dims.K)
	wg := d.flexWG()
	cols := wg / qTeam
	pc := push(uint32(dims.M), uint32(0), uint32(dims.N), uint32(dims.K), uint32(w.Group), uint32(dims.Groups), accumulate, fast)
	return d.launch("qmatmul", wg, nil, pc, d.groups1((dims.N+cols-1)/cols), in(x), in(w.Q), in(w.Scales), out(o))
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
	x2, err := x.Reshape(dims.M, dims.K)
	if err != nil {
		return err
	}
	o2, err := out.Reshape(dims.M, dims.N)
	if err != nil {
		return err
	}
	return d.MatMul(o2, x2, wt, engine.MatMulOpts{TransB: true, Accumulate: accumulate})
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
