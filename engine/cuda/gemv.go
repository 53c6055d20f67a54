//go:build cgo

package cuda

import (
	"encoding/binary"
	"fmt"
	"os"

	"github.com/parallax-engine/parallax/engine"
)

// gemvMaxRows is the most activation rows the matrix-vector kernels take
// (gemv_m1 .. gemv_m8 in shaders/cuda/gemv.cu).
const gemvMaxRows = 8

// gemvOff turns the matrix-vector kernels off (PARALLAX_CUDA_GEMV=0), so
// every product goes to cuBLASLt.
var gemvOff = os.Getenv("PARALLAX_CUDA_GEMV") == "0"

// gemv runs out (+)= a b^T on the matrix-vector kernels when the product is
// a decode step's: a few rows of a 16-bit a against a 16-bit weight b
// [N, K] of the same dtype, K a multiple of 8 and 16-byte aligned operands.
// cuBLASLt picks tiles made for many rows and reaches a fraction of the
// memory bandwidth there. It reports whether it took the product.
func (d *Device) gemv(dims engine.MatMulDims, o engine.MatMulOpts, out, a, b *engine.Tensor) (bool, error) {
	rows := gemvRows(dims, o, out, a, b)
	if rows == 0 {
		return false, nil
	}
	acc := 0
	if o.Accumulate {
		acc = 1
	}
	blocks := (dims.N + 7) / 8 // a warp per output column, 8 warps a block
	name := fmt.Sprintf("gemv_m%d", rows)
	if ks := gemvSplit(blocks, dims.K, d.g.sms); ks > 1 {
		// KS warps a column, 8 / KS columns a block.
		blocks = (dims.N + 8/ks - 1) / (8 / ks)
		name = fmt.Sprintf("gemv_k%d_m%d", ks, rows)
	}
	return true, d.launch("gemv", name, [3]int{blocks, 1, 1}, threads256, 0,
		newArgs().p(ptr(out)).i(dt(out)).p(ptr(a)).p(ptr(b)).i(dt(a)).i(dims.N).i(dims.K).i(acc))
}

// gemvSplitEnv fixes the K split of the single matrix-vector products
// (PARALLAX_CUDA_GEMV_SPLIT: 1, 2 or 4; unset or "auto" picks by shape).
var gemvSplitEnv = os.Getenv("PARALLAX_CUDA_GEMV_SPLIT")

// gemvSplit returns how many warps share an output column (gemv_k2_m*,
// gemv_k4_m*): a product of fewer than two blocks of 8 columns an SM puts
// too few loads in flight per SM to reach the memory bandwidth (N = 1024
// is 128 blocks on 132 SMs), so its K is split over 2 warps. Measured on
// the H200 (a 0.6B-shaped decode step, batch 1): 1.065 ms unsplit, 0.934
// split in 2, 0.990 split in 4.
func gemvSplit(blocks, k, sms int) int {
	switch gemvSplitEnv {
	case "1":
		return 1
	case "2":
		return 2
	case "4":
		return 4
	}
	if blocks < 2*max(sms, 1) && k >= 2*256 {
		return 2
	}
	return 1
}

// gemvRows is the number of activation rows of the product out = x w^T that
// the matrix-vector kernels take, 0 where they do not: 1 to gemvMaxRows
// rows (over a batch sharing w), a 16-bit x of w's dtype, out in x's dtype
// or f32, K a multiple of 8 and 16-byte aligned operands.
func gemvRows(dims engine.MatMulDims, o engine.MatMulOpts, out, x, w *engine.Tensor) int {
	rows, xt := dims.M*dims.Batch, x.DType()
	switch {
	case gemvOff, o.TransA, !o.TransB, dims.Batch > 1 && !dims.SharedB, rows == 0, rows > gemvMaxRows, dims.N == 0,
		xt != w.DType(), xt != engine.BF16 && xt != engine.F16, out.DType() != xt && out.DType() != engine.F32,
		dims.K%8 != 0, ptr(x)%16 != 0, ptr(w)%16 != 0:
		return 0
	}
	return rows
}

var _ engine.MultiLinear = (*Device)(nil)

// LinearMulti runs up to four decode products of one x in one launch
// (gemv_multi_m* in shaders/cuda/gemv.cu) when each would take the
// matrix-vector kernel alone and the outputs share a dtype; see
// engine.MultiLinear.
func (d *Device) LinearMulti(outs, ws []*engine.Tensor, x *engine.Tensor) (bool, error) {
	set, rows, k, blocks, err := d.gemvSet("linear multi", outs, ws, x)
	if rows == 0 || err != nil {
		return err != nil, err
	}
	name := fmt.Sprintf("gemv_multi_m%d", rows)
	return true, d.launch("gemv", name, [3]int{blocks, 1, 1}, threads256, 0,
		newArgs().blob(set[:], 8).i(dt(outs[0])).p(ptr(x)).i(dt(x)).i(k))
}

// gemvSet checks up to four products outs[i] = x ws[i]^T and lays out the
// gemv_set of a gemv_multi launch (out[4], w[4], n[4], first[5]): rows is
// 0 (and err nil) where the matrix-vector kernels do not take every
// product with the same rows and output dtype.
func (d *Device) gemvSet(op string, outs, ws []*engine.Tensor, x *engine.Tensor) (set [104]byte, rows, k, blocks int, err error) {
	if len(ws) == 0 || len(ws) > 4 || len(outs) != len(ws) {
		return set, 0, 0, 0, nil
	}
	for i, w := range ws {
		o := engine.MatMulOpts{TransB: true}
		dims, err := engine.CheckMatMul(outs[i], x, w, o)
		if err != nil {
			return set, 0, 0, 0, err
		}
		if err := d.own(op, outs[i], x, w); err != nil {
			return set, 0, 0, 0, err
		}
		r := gemvRows(dims, o, outs[i], x, w)
		if i == 0 {
			rows, k = r, dims.K
		}
		if r == 0 || r != rows || outs[i].DType() != outs[0].DType() {
			return set, 0, 0, 0, nil
		}
		binary.LittleEndian.PutUint64(set[8*i:], ptr(outs[i]))
		binary.LittleEndian.PutUint64(set[32+8*i:], ptr(w))
		binary.LittleEndian.PutUint32(set[64+4*i:], uint32(dims.N))
		binary.LittleEndian.PutUint32(set[80+4*i:], uint32(blocks))
		blocks += (dims.N + 7) / 8
	}
	if k == 0 {
		return set, 0, 0, 0, nil
	}
	for i := len(ws); i <= 4; i++ {
		binary.LittleEndian.PutUint32(set[80+4*i:], uint32(blocks))
	}
	return set, rows, k, blocks, nil
}

var _ engine.MLPFuser = (*Device)(nil)

// LinearSwiGLU runs a decode step's gate and up products and the SwiGLU in
// one launch (gemv_swiglu_m* in shaders/cuda/gemv.cu) when both products
// would take the matrix-vector kernel; see engine.MLPFuser.
func (d *Device) LinearSwiGLU(act, x, wGate, wUp *engine.Tensor) (bool, error) {
	dims, rows, err := d.swigluRows("linear swiglu", act, x, wGate, wUp)
	if rows == 0 || err != nil {
		return err != nil, err
	}
	return true, d.launch("gemv", fmt.Sprintf("gemv_swiglu_m%d", rows), [3]int{(dims.N + 7) / 8, 1, 1}, threads256, 0,
		newArgs().p(ptr(act)).i(dt(act)).p(ptr(x)).p(ptr(wGate)).p(ptr(wUp)).i(dt(x)).i(dims.N).i(dims.K))
}

// swigluRows checks act = silu(x Wg^T) * (x Wu^T) and returns the product's
// sizes and the rows the matrix-vector kernels take (0 where they do not
// take both products).
func (d *Device) swigluRows(op string, act, x, wGate, wUp *engine.Tensor) (engine.MatMulDims, int, error) {
	o := engine.MatMulOpts{TransB: true}
	dims, err := engine.CheckMatMul(act, x, wGate, o)
	if err != nil {
		return dims, 0, err
	}
	if _, err := engine.CheckMatMul(act, x, wUp, o); err != nil {
		return dims, 0, err
	}
	if err := d.own(op, act, x, wGate, wUp); err != nil {
		return dims, 0, err
	}
	rows := gemvRows(dims, o, act, x, wGate)
	if rows == 0 || gemvRows(dims, o, act, x, wUp) == 0 {
		return dims, 0, nil
	}
	return dims, rows, nil
}
