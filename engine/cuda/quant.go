//go:build cgo

package cuda

import (
	"encoding/binary"
	"fmt"
	"os"

	"github.com/parallax-engine/parallax/engine"
)

// The weight-only int8 ops (kernels in shaders/cuda/qgemv.cu). A product
// of up to qgemvMaxRows rows whose shapes the matrix-vector kernels take
// (K and the group size multiples of 16, or the group >= K; 16-byte
// aligned x and q) streams the int8 weight once (qgemv_m*); every other
// product dequantizes the weight into scratch of x's dtype (dequant_i8)
// and runs the MatMul over it, on the tensor cores for bf16 and f16.

const qmod = "qgemv"

// qgemvMaxRows is the most rows of x the matrix-vector kernels take
// (qgemv_m1 .. qgemv_m8). More rows would take passes of 8, each reading
// the weight again and each as costly as 8 rows' arithmetic: measured on
// the H200 (a qwen3-0.6b-shaped model, bf16 activations), a decode step of
// 32 sequences took 12.1 ms in four passes against 2.4 ms for bf16 on
// cuBLASLt, which the dequantized copy also runs on.
const qgemvMaxRows = 8

// qgemvOff sends every int8 product to the dequantize-and-multiply path
// (PARALLAX_CUDA_GEMV=0, the switch of the 16-bit matrix-vector kernels).
var qgemvOff = os.Getenv("PARALLAX_CUDA_GEMV") == "0"

// qgemvTakes reports whether the matrix-vector kernels take the product
// out = x W^T with its x and weight (rows aside).
func qgemvTakes(d engine.Int8Dims, x *engine.Tensor, w engine.Int8Weight) bool {
	return !qgemvOff && d.N > 0 && d.K > 0 && d.K%16 == 0 && (w.Group%16 == 0 || w.Group >= d.K) &&
		ptr(x)%16 == 0 && ptr(w.Q)%16 == 0
}

// LinearInt8 computes out = x W^T (+ out) for an int8 weight; see
// engine.Ops.
func (d *Device) LinearInt8(out, x *engine.Tensor, w engine.Int8Weight, accumulate bool) error {
	dims, err := engine.CheckLinearInt8(d.own, out, x, w)
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
		return d.Fill(out, 0)
	}
	if dims.M <= qgemvMaxRows && qgemvTakes(dims, x, w) {
		return d.launch(qmod, fmt.Sprintf("qgemv_m%d", dims.M), [3]int{(dims.N + 7) / 8, 1, 1}, threads256, 0,
			newArgs().p(ptr(out)).i(dt(out)).p(ptr(x)).i(dt(x)).p(ptr(w.Q)).p(ptr(w.Scales)).
				i(dims.N).i(dims.K).i(w.Group).i(dims.Groups).i(b2i(accumulate)))
	}
	return d.linearInt8Dequant(out, x, w, dims, accumulate)
}

// linearInt8Dequant dequantizes w into scratch of x's dtype and multiplies
// over it with MatMul (cuBLASLt's tensor cores for bf16 and f16, or the
// 16-bit matrix-vector kernel).
func (d *Device) linearInt8Dequant(out, x *engine.Tensor, w engine.Int8Weight, dims engine.Int8Dims, accumulate bool) error {
	buf, err := d.scratch(int64(dims.N) * int64(dims.K) * int64(x.DType().Size()))
	if err != nil {
		return fmt.Errorf("linear int8: dequantized weight: %w", err)
	}
	defer d.alloc.put(buf)
	wt := engine.NewTensor(d, x.DType(), engine.Shape{dims.N, dims.K}, buf)
	if err := d.dequant(wt, w, nil, dims.N, dims.N, dims.K); err != nil {
		return err
	}
	return engine.LinearDequantized(d, out, x, wt, dims, accumulate)
}

// dequant writes rows of W into out (rows of K): W[ids[r]] for ids I32,
// else W[r].
func (d *Device) dequant(out *engine.Tensor, w engine.Int8Weight, ids *engine.Tensor, rows, n, k int) error {
	if rows == 0 || k == 0 {
		return nil
	}
	gx := min(rows, 1<<16)
	gy := (rows + gx - 1) / gx
	return d.launch(qmod, "dequant_i8", [3]int{gx, gy, 1}, threads256, 0,
		newArgs().p(ptr(out)).i(dt(out)).p(ptr(w.Q)).p(ptr(w.Scales)).p(ptr(ids)).l(int64(rows)).
			i(n).i(k).i(w.Group).i(engine.Int8Groups(k, w.Group)).p(d.errBuf.ptr))
}

// EmbeddingInt8 gathers dequantized rows of an int8 weight (every row when
// ids is nil); an id out of range is reported at Sync. See engine.Ops.
func (d *Device) EmbeddingInt8(out *engine.Tensor, w engine.Int8Weight, ids *engine.Tensor) error {
	rows, k, n, err := engine.CheckEmbeddingInt8(d.own, out, w, ids)
	if err != nil {
		return err
	}
	return d.dequant(out, w, ids, rows, n, k)
}

var _ engine.Int8MultiLinear = (*Device)(nil)

// LinearMultiInt8 runs up to four int8 decode products of one x in one
// launch (qgemv_multi_m*) when each would take the matrix-vector kernel and the weights share a group size and the outputs a dtype;
// see engine.Int8MultiLinear.
func (d *Device) LinearMultiInt8(outs []*engine.Tensor, ws []engine.Int8Weight, x *engine.Tensor) (bool, error) {
	set, dims, blocks, err := d.qgemvSet(outs, ws, x)
	if dims.M == 0 || err != nil {
		return err != nil, err
	}
	name := fmt.Sprintf("qgemv_multi_m%d", dims.M)
	return true, d.launch(qmod, name, [3]int{blocks, 1, 1}, threads256, 0,
		newArgs().blob(set[:], 8).i(dt(outs[0])).p(ptr(x)).i(dt(x)).i(dims.K).i(ws[0].Group).i(dims.Groups))
}

// qgemvSet validates a LinearMultiInt8 and packs its qgemv_set: it returns
// the first weight's dims and the grid, or dims.M == 0 (and no error) when
// qgemv_multi_m* does not take the operands.
func (d *Device) qgemvSet(outs []*engine.Tensor, ws []engine.Int8Weight, x *engine.Tensor) (set [136]byte, dims0 engine.Int8Dims, blocks int, err error) {
	if len(ws) == 0 || len(ws) > 4 || len(outs) != len(ws) {
		return set, engine.Int8Dims{}, 0, nil
	}
	for i, w := range ws {
		dims, err := engine.CheckLinearInt8(d.own, outs[i], x, w)
		if err != nil {
			return set, engine.Int8Dims{}, 0, err
		}
		if i == 0 {
			dims0 = dims
		}
		if dims.M == 0 || dims.M > qgemvMaxRows || !qgemvTakes(dims, x, w) || w.Group != ws[0].Group || outs[i].DType() != outs[0].DType() {
			return set, engine.Int8Dims{}, 0, nil
		}
		binary.LittleEndian.PutUint64(set[8*i:], ptr(outs[i]))
		binary.LittleEndian.PutUint64(set[32+8*i:], ptr(w.Q))
		binary.LittleEndian.PutUint64(set[64+8*i:], ptr(w.Scales))
		binary.LittleEndian.PutUint32(set[96+4*i:], uint32(dims.N))
		binary.LittleEndian.PutUint32(set[112+4*i:], uint32(blocks))
		blocks += (dims.N + 7) / 8
	}
	for i := len(ws); i <= 4; i++ {
		binary.LittleEndian.PutUint32(set[112+4*i:], uint32(blocks))
	}
	return set, dims0, blocks, nil
}

var _ engine.Int8MLPFuser = (*Device)(nil)

// LinearSwiGLUInt8 runs a decode step's int8 gate and up products and the
// SwiGLU in one launch (qgemv_swiglu_m*) when both would take the
// matrix-vector kernel; see engine.Int8MLPFuser.
func (d *Device) LinearSwiGLUInt8(act, x *engine.Tensor, wGate, wUp engine.Int8Weight) (bool, error) {
	dims, err := d.qgemvSwiGLUDims(act, x, wGate, wUp)
	if dims.M == 0 || err != nil {
		return err != nil, err
	}
	return true, d.launch(qmod, fmt.Sprintf("qgemv_swiglu_m%d", dims.M), [3]int{(dims.N + 7) / 8, 1, 1}, threads256, 0,
		newArgs().p(ptr(act)).i(dt(act)).p(ptr(x)).i(dt(x)).p(ptr(wGate.Q)).p(ptr(wGate.Scales)).
			p(ptr(wUp.Q)).p(ptr(wUp.Scales)).i(dims.N).i(dims.K).i(wGate.Group).i(dims.Groups))
}

// qgemvSwiGLUDims validates a LinearSwiGLUInt8 and returns its dims, or
// dims.M == 0 (and no error) when qgemv_swiglu_m* does not take the
// operands.
func (d *Device) qgemvSwiGLUDims(act, x *engine.Tensor, wGate, wUp engine.Int8Weight) (engine.Int8Dims, error) {
	dims, err := engine.CheckLinearInt8(d.own, act, x, wGate)
	if err != nil {
		return engine.Int8Dims{}, err
	}
	if _, err := engine.CheckLinearInt8(d.own, act, x, wUp); err != nil {
		return engine.Int8Dims{}, err
	}
	if dims.M == 0 || dims.M > qgemvMaxRows || wGate.Group != wUp.Group || !qgemvTakes(dims, x, wGate) || !qgemvTakes(dims, x, wUp) {
		return engine.Int8Dims{}, nil
	}
	return dims, nil
}
