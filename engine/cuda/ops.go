//go:build cgo

package cuda

// #include "shim.h"
import "C"

import (
	"fmt"
	"math"
	"os"

	"github.com/parallax-engine/parallax/engine"
)

// Host side of the non-attention ops (kernels in shaders/cuda/elementwise.cu):
// validate with the engine's Check function, then enqueue.

const ew = "elementwise"

// dt is a tensor's dtype code as the kernels take it.
func dt(t *engine.Tensor) int { return dtCode(t.DType()) }

func dtCode(d engine.DType) int {
	switch d {
	case engine.BF16:
		return 1
	case engine.F16:
		return 2
	case engine.I32:
		return 3
	}
	return 0
}

// castRaw converts n elements between device pointers.
func (d *Device) castRaw(dst uint64, dd engine.DType, src uint64, sd engine.DType, n int64) error {
	if n == 0 {
		return nil
	}
	if dd == sd {
		nb := n * int64(dd.Size())
		return d.memOp("memcpy DtoD", 2*nb, func() C.CUresult { // read and written
			return C.pxcu_dtod(d.ctx, C.CUdeviceptr(dst), C.CUdeviceptr(src), C.size_t(nb), d.stream)
		})
	}
	return d.launch(ew, "cast", grid1(n), threads256, 0, newArgs().p(dst).i(dtCode(dd)).p(src).i(dtCode(sd)).l(n))
}

// zero clears n bytes at p.
func (d *Device) zero(p uint64, n int64) error {
	if n == 0 {
		return nil
	}
	return d.memOp("memset", n, func() C.CUresult {
		return C.pxcu_memset8(d.ctx, C.CUdeviceptr(p), 0, C.size_t(n), d.stream)
	})
}

// Embedding gathers rows of table; an out-of-range id is reported at Sync.
func (d *Device) Embedding(out, table, ids *engine.Tensor) error {
	n, dim, v, err := engine.CheckEmbedding(d.own, out, table, ids)
	if err != nil {
		return err
	}
	if wideRows(n, dim, out, table) {
		return d.launch(ew, "embedding8", grid1(int64(n)*int64(dim/8)), threads256, 0,
			newArgs().p(ptr(out)).i(dt(out)).p(ptr(table)).i(dt(table)).p(ptr(ids)).i(n).i(dim/8).i(v).p(d.errBuf.ptr))
	}
	return d.launch(ew, "embedding", grid1(int64(n)*int64(dim)), threads256, 0,
		newArgs().p(ptr(out)).i(dt(out)).p(ptr(table)).i(dt(table)).p(ptr(ids)).l(int64(n)).i(dim).i(v).p(d.errBuf.ptr))
}

// wideRows reports whether n rows of dim elements of the (non-I32)
// tensors ts can take the 16-byte row kernels (embedding8,
// embedding_bwd8): dim a multiple of 8, 16-byte aligned tensors and
// n dim / 8 within a 32-bit index.
func wideRows(n, dim int, ts ...*engine.Tensor) bool {
	if dim%8 != 0 || dim == 0 || int64(n)*int64(dim/8) >= 1<<31 {
		return false
	}
	for _, t := range ts {
		if t.DType() == engine.I32 || ptr(t)%16 != 0 {
			return false
		}
	}
	return true
}

// EmbeddingBackward accumulates dOut rows into dTable with f32 atomics (in
// an f32 copy when dTable is 16-bit).
func (d *Device) EmbeddingBackward(dTable, ids, dOut *engine.Tensor) error {
	n, dim, v, err := engine.CheckEmbeddingBackward(d.own, dTable, ids, dOut)
	if err != nil {
		return err
	}
	total := int64(v) * int64(dim)
	acc := ptr(dTable)
	var tmp *buffer
	if dTable.DType() != engine.F32 {
		if tmp, err = d.scratch(total * 4); err != nil {
			return err
		}
		defer d.alloc.put(tmp)
		acc = tmp.ptr
		if err := d.castRaw(acc, engine.F32, ptr(dTable), dTable.DType(), total); err != nil {
			return err
		}
	}
	if acc%16 == 0 && wideRows(n, dim, dOut) {
		err = d.launch(ew, "embedding_bwd8", grid1(int64(n)*int64(dim/8)), threads256, 0,
			newArgs().p(acc).p(ptr(ids)).p(ptr(dOut)).i(dt(dOut)).i(n).i(dim/8).i(v).p(d.errBuf.ptr))
	} else {
		err = d.launch(ew, "embedding_bwd", grid1(int64(n)*int64(dim)), threads256, 0,
			newArgs().p(acc).p(ptr(ids)).p(ptr(dOut)).i(dt(dOut)).l(int64(n)).i(dim).i(v).p(d.errBuf.ptr))
	}
	if err != nil {
		return err
	}
	if tmp != nil {
		return d.castRaw(ptr(dTable), dTable.DType(), acc, engine.F32, total)
	}
	return nil
}

// lanesPerRow is the lanes a row of n elements gets in the 16-byte
// (8-element) norm kernels: n/8 when that is a power of two below 32, else
// 32; 0 when n is not a multiple of 8 (the pairwise kernels then run).
func lanesPerRow(n int) int {
	if n%8 != 0 || n == 0 {
		return 0
	}
	c := n / 8
	if c >= 32 {
		return 32
	}
	if c&(c-1) != 0 {
		return 0
	}
	return c
}

// ewGrid is the grid of the elementwise kernels that take 8 elements a
// thread when n is a multiple of 8 (GRID_STRIDE8) and 2 otherwise.
func ewGrid(n int64) [3]int {
	if n%8 == 0 {
		return grid1(n / 8)
	}
	return grid1((n + 1) / 2)
}

// ropeRows and rope8Rows are ROPE_ROWS and ROPE8_ROWS of elementwise.cu:
// the rows a rope (rope8) thread rotates at a time.
const (
	ropeRows  = 16
	rope8Rows = 4
)

func rowGrid(rows int) [3]int { return [3]int{max(1, min(rows, 1<<20)), 1, 1} }

// warpRowGrid is the grid of a warp-per-row kernel in blocks of 256 threads
// (8 rows a block; the kernels loop over the rest).
func warpRowGrid(rows int) [3]int { return [3]int{max(1, min((rows+7)/8, 1<<20)), 1, 1} }

// RMSNorm normalises rows, one warp per row.
func (d *Device) RMSNorm(out, rstd, x, w *engine.Tensor, eps float32) error {
	rows, n, err := engine.CheckRMSNorm(d.own, out, rstd, x, w)
	if err != nil {
		return err
	}
	if rows == 0 || n == 0 {
		return nil
	}
	if lpr := lanesPerRow(n); lpr > 0 {
		return d.launch(ew, "rmsnorm8", warpRowGrid((rows+32/lpr-1)/(32/lpr)), threads256, 0,
			newArgs().p(ptr(out)).i(dt(out)).p(ptr(rstd)).p(ptr(x)).i(dt(x)).p(ptr(w)).i(dt(w)).l(int64(rows)).i(n).f(eps).i(lpr))
	}
	return d.launch(ew, "rmsnorm", warpRowGrid(rows), threads256, 0,
		newArgs().p(ptr(out)).i(dt(out)).p(ptr(rstd)).p(ptr(x)).i(dt(x)).p(ptr(w)).i(dt(w)).l(int64(rows)).i(n).f(eps))
}

// RMSNormBackward computes dX per row and accumulates dW by a column
// reduction into an f32 scratch.
func (d *Device) RMSNormBackward(dX, dW, dOut, x, w, rstd *engine.Tensor) error {
	return d.rmsnormBackward(dX, dW, dOut, x, w, rstd, false)
}

// RMSNormBackwardAccumulate is RMSNormBackward with dX += the input
// gradient, read, added in f32 and written by the same pass (rmsnorm_bwd8
// or rmsnorm_bwd with acc; engine.RMSNormBackwardAccumulator). dX must not
// overlap dOut or x.
func (d *Device) RMSNormBackwardAccumulate(dX, dW, dOut, x, w, rstd *engine.Tensor) (bool, error) {
	if _, _, err := engine.CheckRMSNormBackward(d.own, dX, dW, dOut, x, w, rstd); err != nil {
		return false, err
	}
	if overlaps(dX, dOut) || overlaps(dX, x) {
		return false, &engine.ArgError{Op: "rmsnorm backward", Operand: "dX", Msg: "an accumulating dX must not overlap dOut or x"}
	}
	return true, d.rmsnormBackward(dX, dW, dOut, x, w, rstd, true)
}

// overlaps reports whether the device memory of a and b overlaps.
func overlaps(a, b *engine.Tensor) bool {
	pa, pb := ptr(a), ptr(b)
	ea := pa + uint64(a.Numel()*a.DType().Size())
	eb := pb + uint64(b.Numel()*b.DType().Size())
	return pa < eb && pb < ea
}

func (d *Device) rmsnormBackward(dX, dW, dOut, x, w, rstd *engine.Tensor, accumulate bool) error {
	rows, n, err := engine.CheckRMSNormBackward(d.own, dX, dW, dOut, x, w, rstd)
	if err != nil {
		return err
	}
	if rows == 0 || n == 0 {
		return nil
	}
	addDX := 0
	if accumulate {
		addDX = 1
	}
	if lpr := lanesPerRow(n); lpr > 0 && n/(8*lpr) <= 4 && !rmsnormAtomicDW &&
		ptr(dX)%16 == 0 && ptr(dOut)%16 == 0 && ptr(x)%16 == 0 && ptr(w)%16 == 0 {
		// One pass: dX and the blocks' dW partials, then their column sum.
		rpw := 32 / lpr
		blocks := min((rows+8*rpw-1)/(8*rpw), 2*max(d.g.sms, 1))
		part, err := d.scratch(int64(blocks) * int64(n) * 4)
		if err != nil {
			return err
		}
		defer d.alloc.put(part)
		name := fmt.Sprintf("rmsnorm_bwdw8_%d", n/(8*lpr))
		if err := d.launch(ew, name, [3]int{blocks, 1, 1}, threads256, 8*n*4,
			newArgs().p(ptr(dX)).i(dt(dX)).p(part.ptr).p(ptr(dOut)).i(dt(dOut)).p(ptr(x)).i(dt(x)).p(ptr(w)).i(dt(w)).
				p(ptr(rstd)).l(int64(rows)).i(n).i(lpr).i(addDX)); err != nil {
			return err
		}
		return d.colsumAdd(ptr(dW), dt(dW), part.ptr, blocks, n)
	}
	var err2 error
	if lpr := lanesPerRow(n); lpr > 0 {
		err2 = d.launch(ew, "rmsnorm_bwd8", warpRowGrid((rows+32/lpr-1)/(32/lpr)), threads256, 0,
			newArgs().p(ptr(dX)).i(dt(dX)).p(ptr(dOut)).i(dt(dOut)).p(ptr(x)).i(dt(x)).p(ptr(w)).i(dt(w)).p(ptr(rstd)).l(int64(rows)).i(n).i(lpr).i(addDX))
	} else {
		err2 = d.launch(ew, "rmsnorm_bwd", warpRowGrid(rows), threads256, 0,
			newArgs().p(ptr(dX)).i(dt(dX)).p(ptr(dOut)).i(dt(dOut)).p(ptr(x)).i(dt(x)).p(ptr(w)).i(dt(w)).p(ptr(rstd)).l(int64(rows)).i(n).i(addDX))
	}
	if err2 != nil {
		return err2
	}
	grid := [3]int{(n + 31) / 32, min((rows+63)/64, 1024), 1}
	dwArgs := func(acc uint64) *args {
		return newArgs().p(acc).p(ptr(dOut)).i(dt(dOut)).p(ptr(x)).i(dt(x)).p(ptr(rstd)).l(int64(rows)).i(n)
	}
	if dW.DType() == engine.F32 {
		// The blocks' column sums add straight into an f32 dW.
		return d.launch(ew, "rmsnorm_dw", grid, [3]int{32, 8, 1}, 0, dwArgs(ptr(dW)))
	}
	acc, err := d.scratch(int64(n) * 4)
	if err != nil {
		return err
	}
	defer d.alloc.put(acc)
	if err := d.zero(acc.ptr, int64(n)*4); err != nil {
		return err
	}
	if err := d.launch(ew, "rmsnorm_dw", grid, [3]int{32, 8, 1}, 0, dwArgs(acc.ptr)); err != nil {
		return err
	}
	return d.launch(ew, "add_f32", grid1(int64(n)), threads256, 0, newArgs().p(ptr(dW)).i(dt(dW)).p(acc.ptr).l(int64(n)))
}

// colsumAdd adds the column sums of part [p, n] (f32) into dst [n] of
// dtype code dtd, in a fixed order.
func (d *Device) colsumAdd(dst uint64, dtd int, part uint64, p, n int) error {
	return d.launch(ew, "colsum_add", [3]int{(n + 31) / 32, 1, 1}, [3]int{32, 16, 1}, 0,
		newArgs().p(dst).i(dtd).p(part).i(p).i(n))
}

// rmsnormAtomicDW (PARALLAX_CUDA_RMSNORM_DW=atomic) keeps the RMSNorm
// backward's former two kernels (rmsnorm_bwd8, then rmsnorm_dw's atomic
// column sums) for measurement.
var rmsnormAtomicDW = os.Getenv("PARALLAX_CUDA_RMSNORM_DW") == "atomic"

// RoPE rotates pairs of x into out (which may alias x); pos is [L] or
// per-sequence [B, L].
func (d *Device) RoPE(out, x, pos *engine.Tensor, theta float32) error {
	return d.rope(out, x, pos, theta, false)
}

// RoPEBackward applies the inverse rotation.
func (d *Device) RoPEBackward(dX, dOut, pos *engine.Tensor, theta float32) error {
	return d.rope(dX, dOut, pos, theta, true)
}

func (d *Device) rope(out, x, pos *engine.Tensor, theta float32, inverse bool) error {
	b, h, l, dim, err := engine.CheckRoPE(d.own, out, x, pos, inverse)
	if err != nil {
		return err
	}
	inv := 0
	if inverse {
		inv = 1
	}
	if pos.Rank() == 2 {
		// Per-sequence positions pos [B, L] (shaders/cuda/ragged.cu): one
		// thread per (row, pair).
		return d.launch("ragged", "rope_seq", grid1(int64(b)*int64(h)*int64(l)*int64(dim/2)), threads256, 0,
			newArgs().p(ptr(out)).i(dt(out)).p(ptr(x)).i(dt(x)).p(ptr(pos)).i(b).i(h).i(l).i(dim).f(theta).i(inv))
	}
	if (dim/2)%8 == 0 && dt(x) != 3 && dt(out) != 3 {
		// x: (l, 8 pairs) groups; y: (b, h) rows, rope8Rows of them a
		// thread in the y direction's stride.
		g := grid1(int64(l) * int64(dim/16))
		g[1] = max(1, min((b*h+rope8Rows-1)/rope8Rows, 65535))
		tab, err := d.ropeTable(theta, dim)
		if err != nil {
			return err
		}
		return d.launch(ew, "rope8", g, threads256, 0,
			newArgs().p(ptr(out)).i(dt(out)).p(ptr(x)).i(dt(x)).p(ptr(pos)).i(b).i(h).i(l).i(dim).f(theta).i(inv).p(tab))
	}
	// x: (l, i) pairs, y: groups of ropeRows (b, h) rows sharing them.
	g := grid1(int64(l) * int64(dim/2))
	g[1] = max(1, min((b*h+ropeRows-1)/ropeRows, 65535))
	return d.launch(ew, "rope", g, threads256, 0,
		newArgs().p(ptr(out)).i(dt(out)).p(ptr(x)).i(dt(x)).p(ptr(pos)).i(b).i(h).i(l).i(dim).f(theta).i(inv))
}

// SwiGLU computes silu(gate) * up.
func (d *Device) SwiGLU(out, gate, up *engine.Tensor) error {
	n, err := engine.CheckElementwise(d.own, "swiglu", []string{"out", "gate", "up"}, out, gate, up)
	if err != nil {
		return err
	}
	return d.launch(ew, "swiglu", ewGrid(int64(n)), threads256, 0,
		newArgs().p(ptr(out)).i(dt(out)).p(ptr(gate)).i(dt(gate)).p(ptr(up)).i(dt(up)).l(int64(n)))
}

// SwiGLUBackward computes dGate and dUp.
func (d *Device) SwiGLUBackward(dGate, dUp, dOut, gate, up *engine.Tensor) error {
	const op = "swiglu backward"
	n, err := engine.CheckElementwise(d.own, op, []string{"dGate", "dUp", "dOut", "gate", "up"}, dGate, dUp, dOut, gate, up)
	if err != nil {
		return err
	}
	return d.launch(ew, "swiglu_bwd", ewGrid(int64(n)), threads256, 0,
		newArgs().p(ptr(dGate)).i(dt(dGate)).p(ptr(dUp)).i(dt(dUp)).p(ptr(dOut)).i(dt(dOut)).
			p(ptr(gate)).i(dt(gate)).p(ptr(up)).i(dt(up)).l(int64(n)))
}

// AddScaled computes out = alpha a + beta b (out may alias a or b).
func (d *Device) AddScaled(out, a, b *engine.Tensor, alpha, beta float32) error {
	n, err := engine.CheckElementwise(d.own, "add scaled", []string{"out", "a", "b"}, out, a, b)
	if err != nil {
		return err
	}
	return d.launch(ew, "add_scaled", ewGrid(int64(n)), threads256, 0,
		newArgs().p(ptr(out)).i(dt(out)).p(ptr(a)).i(dt(a)).p(ptr(b)).i(dt(b)).l(int64(n)).f(alpha).f(beta))
}

// Fill sets every element to value (rounded; truncated for I32).
func (d *Device) Fill(t *engine.Tensor, value float32) error {
	if err := engine.CheckFill(d.own, t); err != nil {
		return err
	}
	n := int64(t.Numel())
	if n == 0 {
		return nil
	}
	return d.launch(ew, "fill", grid1(n), threads256, 0, newArgs().p(ptr(t)).i(dt(t)).l(n).f(value))
}

// Cast converts src into dst's dtype (a copy when they match).
func (d *Device) Cast(dst, src *engine.Tensor) error {
	n, err := engine.CheckCast(d.own, dst, src)
	if err != nil {
		return err
	}
	return d.castRaw(ptr(dst), dst.DType(), ptr(src), src.DType(), int64(n))
}

// SwapAxes12 transposes the middle two dimensions.
func (d *Device) SwapAxes12(dst, src *engine.Tensor) error {
	s, err := engine.CheckSwapAxes12(d.own, dst, src)
	if err != nil {
		return err
	}
	// The widest unit that divides a row of D elements and both pointers'
	// alignment: rows move as 16-byte (or 4-byte) pieces.
	es := src.DType().Size()
	row := s[3] * es
	unit := es
	for _, u := range []int{16, 4} {
		if row%u == 0 && ptr(dst)%uint64(u) == 0 && ptr(src)%uint64(u) == 0 {
			unit = u
			break
		}
	}
	if row == 0 {
		return nil
	}
	return d.launch(ew, "swap12", grid1(int64(src.Numel())*int64(es)/int64(unit)), threads256, 0,
		newArgs().p(ptr(dst)).p(ptr(src)).i(unit).i(s[0]).i(s[1]).i(s[2]).i(row/unit))
}

// KVAppend writes x into the cache at positions start.. (converting).
func (d *Device) KVAppend(cache, x *engine.Tensor, start int) error {
	b, h, n, capacity, dim, err := engine.CheckKVAppend(d.own, cache, x, start)
	if err != nil {
		return err
	}
	if dim%8 == 0 && x.Numel()/8 < 1<<31 && cache.DType().IsFloat() && x.DType().IsFloat() &&
		ptr(cache)%16 == 0 && ptr(x)%16 == 0 {
		return d.launch(ew, "kv_append8", grid1(int64(x.Numel())/8), threads256, 0,
			newArgs().p(ptr(cache)).i(dt(cache)).p(ptr(x)).i(dt(x)).i(b).i(h).i(n).i(capacity).i(dim).i(start))
	}
	return d.launch(ew, "kv_append", grid1(int64(x.Numel())), threads256, 0,
		newArgs().p(ptr(cache)).i(dt(cache)).p(ptr(x)).i(dt(x)).i(b).i(h).i(n).i(capacity).i(dim).i(start))
}

// KVAppendAt writes x into cache at each sequence's start (read on the
// device; a bad start is reported at Sync).
func (d *Device) KVAppendAt(cache, x, starts *engine.Tensor) error {
	b, h, n, capacity, dim, err := engine.CheckKVAppendAt(d.own, cache, x, starts)
	if err != nil {
		return err
	}
	return d.launch(ew, "kv_append_at", grid1(int64(x.Numel())), threads256, 0,
		newArgs().p(ptr(cache)).i(dt(cache)).p(ptr(x)).i(dt(x)).p(ptr(starts)).i(b).i(h).i(n).i(capacity).i(dim).p(d.errBuf.ptr))
}

// CrossEntropy is the fused softmax cross-entropy, one block per row; the
// kernel takes the row stride W and the class count C apart, reads only the
// class columns [0, C) and zeroes dLogits' pad columns [C, W). A target
// outside [0, C) (and not ignored) is reported at Sync.
func (d *Device) CrossEntropy(loss, dLogits, logits, targets *engine.Tensor, o engine.CrossEntropyOpts) error {
	n, w, classes, err := engine.CheckCrossEntropy(d.own, loss, dLogits, logits, targets, o)
	if err != nil {
		return err
	}
	dl, dtdl := uint64(0), 0
	if dLogits != nil {
		dl, dtdl = ptr(dLogits), dt(dLogits)
	}
	return d.launch(ew, "cross_entropy", rowGrid(n), threads256, 0,
		newArgs().p(ptr(loss)).p(dl).i(dtdl).p(ptr(logits)).i(dt(logits)).p(ptr(targets)).i(n).i(w).i(classes).
			i(int(o.IgnoreIndex)).f(o.GradScale).p(d.errBuf.ptr))
}

// zeroedScratch is scratch(n) set to zero (the double accumulators of the
// reductions); the caller puts it back.
func (d *Device) zeroedScratch(n int64) (*buffer, error) {
	b, err := d.scratch(n)
	if err != nil {
		return nil, err
	}
	if err := d.zero(b.ptr, n); err != nil {
		d.alloc.put(b)
		return nil, err
	}
	return b, nil
}

// sumSquares enqueues per-matrix sums of squares (double) of x viewed as
// batch matrices of per elements into a new zeroed scratch.
func (d *Device) sumSquares(x *engine.Tensor, batch, per int64) (*buffer, error) {
	acc, err := d.zeroedScratch(batch * 8)
	if err != nil {
		return nil, err
	}
	g := grid1(per)
	g[0] = min(g[0], 1024)
	g[1] = int(batch)
	if err := d.launch(ew, "sumsq", g, threads256, 0, newArgs().p(acc.ptr).p(ptr(x)).i(dt(x)).l(per)); err != nil {
		d.alloc.put(acc)
		return nil, err
	}
	return acc, nil
}

// SumSquares computes (or adds to out) sum x^2.
func (d *Device) SumSquares(out, x *engine.Tensor, accumulate bool) error {
	n, err := engine.CheckSumSquares(d.own, out, x)
	if err != nil {
		return err
	}
	acc, err := d.sumSquares(x, 1, int64(n))
	if err != nil {
		return err
	}
	defer d.alloc.put(acc)
	a := 0
	if accumulate {
		a = 1
	}
	return d.launch(ew, "sumsq_final", [3]int{1, 1, 1}, [3]int{32, 1, 1}, 0, newArgs().p(ptr(out)).p(acc.ptr).i(a))
}

// AdamW updates p, m, v in place (PyTorch's order), in double.
func (d *Device) AdamW(p, g, m, v *engine.Tensor, o engine.AdamWOpts) error {
	n, err := engine.CheckAdamW(d.own, p, g, m, v, o)
	if err != nil {
		return err
	}
	decay, step, bc2 := o.Factors()
	a := newArgs().p(ptr(p)).i(dt(p)).p(ptr(g)).i(dt(g)).p(ptr(m)).p(ptr(v)).l(int64(n))
	for _, x := range []float64{decay, step, bc2, float64(o.Beta1), float64(o.Beta2), float64(o.Eps)} {
		a.l(int64(math.Float64bits(x)))
	}
	a.f(o.Scale())
	return d.launch(ew, "adamw", grid1(int64(n)), threads256, 0, a)
}

// FrobeniusNormalize writes x / (||x||_F + eps) per matrix.
func (d *Device) FrobeniusNormalize(out, x *engine.Tensor, eps float32) error {
	batch, per, err := engine.CheckFrobeniusNormalize(d.own, out, x)
	if err != nil {
		return err
	}
	if batch == 0 || per == 0 {
		return nil
	}
	acc, err := d.sumSquares(x, int64(batch), int64(per))
	if err != nil {
		return err
	}
	defer d.alloc.put(acc)
	n := int64(batch) * int64(per)
	kern, g := "frob_scale", grid1(n)
	if per%8 == 0 && ptr(out)%16 == 0 && ptr(x)%16 == 0 {
		kern, g = "frob_scale8", grid1(n/8)
	}
	return d.launch(ew, kern, g, threads256, 0,
		newArgs().p(ptr(out)).i(dt(out)).p(ptr(x)).i(dt(x)).p(acc.ptr).l(int64(per)).l(n).f(eps))
}

// MuonApply updates p = p (1 - lr wd) - lr scale o.
func (d *Device) MuonApply(p, o *engine.Tensor, lr, wd, scale float32) error {
	n, err := engine.CheckMuonApply(d.own, p, o)
	if err != nil {
		return err
	}
	return d.launch(ew, "muon_apply", grid1(int64(n)), threads256, 0,
		newArgs().p(ptr(p)).i(dt(p)).p(ptr(o)).i(dt(o)).l(int64(n)).f(lr).f(wd).f(scale))
}

// CorrectionRatio writes the mean over rows of ||vbar - o|| / ||vbar||.
func (d *Device) CorrectionRatio(out, o, vbar *engine.Tensor) error {
	rows, dim, err := engine.CheckCorrectionRatio(d.own, out, o, vbar)
	if err != nil {
		return err
	}
	acc, err := d.zeroedScratch(8)
	if err != nil {
		return err
	}
	defer d.alloc.put(acc)
	if rows > 0 {
		if err := d.launch(ew, "cor_rows", [3]int{max(1, min((rows+7)/8, 4096)), 1, 1}, threads256, 0,
			newArgs().p(acc.ptr).p(ptr(o)).i(dt(o)).p(ptr(vbar)).i(dt(vbar)).l(int64(rows)).i(dim)); err != nil {
			return err
		}
	}
	return d.launch(ew, "cor_final", [3]int{1, 1, 1}, [3]int{32, 1, 1}, 0, newArgs().p(ptr(out)).p(acc.ptr).l(int64(rows)))
}
