package engine

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Weight-only int8 quantization (docs/ENGINE.md, "Weight-only int8"). A
// weight matrix W [N, K] (a linear layer's [out, in]) is stored as int8
// values and one f32 scale per output row and group of G consecutive
// input columns, symmetric (no zero point):
//
//	s[n, g]  = max_{k in group g} |W[n, k]| / 127
//	Q[n, k]  = clamp(round(W[n, k] / s[n, k/G]), -127, 127)
//	W'[n, k] = Q[n, k] s[n, k/G]
//
// The groups are k in [gG, min((g+1)G, K)); G >= K is one scale per row
// (per-channel). The scales are f32: they cost 4/G bytes a weight (3% of
// the int8 bytes at G = 128, 0.4% per-channel at K = 1024), and f32 keeps
// them exact for any weight magnitude, where f16 would lose precision
// below 6e-5 (a group of small weights) and bf16 would add a 2^-9
// relative error to every weight of the group.

// DefaultInt8Group is the default group size G of QuantizeInt8: 128 input
// columns share a scale.
const DefaultInt8Group = 128

// Int8Weight is a weight-only int8 matrix W [N, K]:
// W[n, k] = Q[n, k] Scales[n, k / Group].
type Int8Weight struct {
	Q      *Tensor // I8 [N, K]
	Scales *Tensor // F32 [N, Int8Groups(K, Group)]
	Group  int     // G >= 1: the input columns that share a scale (>= K: one scale a row)
}

// Int8Groups is the number of scale groups of a row of k columns in groups
// of group: ceil(k / group) (0 for an empty row). group must be positive.
func Int8Groups(k, group int) int {
	if k <= 0 {
		return 0
	}
	return (k + group - 1) / group
}

// Dims returns N and K, the rows and columns of W (0, 0 without Q).
func (w Int8Weight) Dims() (n, k int) {
	if w.Q == nil || w.Q.Rank() != 2 {
		return 0, 0
	}
	return w.Q.Dim(0), w.Q.Dim(1)
}

// Bytes is the device memory the weight takes: its int8 values and f32
// scales.
func (w Int8Weight) Bytes() int64 {
	var n int64
	if w.Q != nil {
		n += int64(w.Q.Bytes())
	}
	if w.Scales != nil {
		n += int64(w.Scales.Bytes())
	}
	return n
}

// Int8Bytes is the memory of an [n, k] weight quantized with group size
// group: n k int8 values and n Int8Groups(k, group) f32 scales.
func Int8Bytes(n, k, group int) int64 {
	return int64(n)*int64(k) + 4*int64(n)*int64(Int8Groups(k, max(group, 1)))
}

// String describes the weight as "i8[N,K] g128".
func (w Int8Weight) String() string { return fmt.Sprintf("%v g%d", w.Q, w.Group) }

// Free releases the weight's tensors on dev.
func (w Int8Weight) Free(dev Device) {
	if w.Q != nil {
		dev.Free(w.Q)
	}
	if w.Scales != nil {
		dev.Free(w.Scales)
	}
}

// minInt8Scale is the smallest scale QuantizeInt8 stores: a normal f32
// (2^-126), where s = max|w| / 127 keeps its relative accuracy. A group
// whose largest magnitude is below 127 times it is stored as zeros.
const minInt8Scale = 0x1p-126

// QuantizeInt8 quantizes the row-major matrix w [n, k] with group size
// group (see Int8Weight): it returns the int8 values [n, k] and the f32
// scales [n, Int8Groups(k, group)]. Each element's reconstruction error
// is at most half its scale, |w - q s| <= s / 2 = max|group| / 254 (a
// group whose largest magnitude is below 127 * 2^-126 becomes zeros).
// NaN and infinite weights are an error naming the element.
func QuantizeInt8(w []float32, n, k, group int) ([]int8, []float32, error) {
	if group < 1 {
		return nil, nil, fmt.Errorf("quantize int8: group size %d must be >= 1", group)
	}
	if n < 0 || k < 0 || int64(n)*int64(k) != int64(len(w)) {
		return nil, nil, fmt.Errorf("quantize int8: %d values do not fill a %dx%d matrix", len(w), n, k)
	}
	ng := Int8Groups(k, group)
	q := make([]int8, len(w))
	s := make([]float32, n*ng)
	for r := range n {
		row := w[r*k : (r+1)*k]
		for g := range ng {
			lo, hi := g*group, min((g+1)*group, k)
			amax := 0.0
			for j, v := range row[lo:hi] {
				a := math.Abs(float64(v))
				if math.IsNaN(a) || math.IsInf(a, 0) {
					return nil, nil, fmt.Errorf("quantize int8: element (%d, %d) is %v, not a finite number", r, lo+j, v)
				}
				amax = max(amax, a)
			}
			sc := float32(amax / 127)
			if sc < minInt8Scale {
				continue // zeros: the scale stays 0
			}
			s[r*ng+g] = sc
			inv := float64(sc)
			for j, v := range row[lo:hi] {
				x := math.Round(float64(v) / inv)
				q[r*k+lo+j] = int8(max(-127, min(127, x)))
			}
		}
	}
	return q, s, nil
}

// DequantizeInt8 returns the f32 matrix [n, k] that q and its scales (as
// QuantizeInt8 returns them) stand for: q s, computed in float64 and
// rounded once.
func DequantizeInt8(q []int8, scales []float32, n, k, group int) ([]float32, error) {
	if group < 1 {
		return nil, fmt.Errorf("dequantize int8: group size %d must be >= 1", group)
	}
	ng := Int8Groups(k, group)
	if n < 0 || k < 0 || int64(n)*int64(k) != int64(len(q)) || int64(n)*int64(ng) != int64(len(scales)) {
		return nil, fmt.Errorf("dequantize int8: %d values and %d scales do not fit a %dx%d matrix in groups of %d", len(q), len(scales), n, k, group)
	}
	out := make([]float32, len(q))
	for r := range n {
		for c := range k {
			out[r*k+c] = float32(float64(q[r*k+c]) * float64(scales[r*ng+c/group]))
		}
	}
	return out, nil
}

// NewInt8Weight uploads int8 values q [n, k] and their f32 scales
// [n, Int8Groups(k, group)] to dev.
func NewInt8Weight(dev Device, q []int8, scales []float32, n, k, group int) (Int8Weight, error) {
	if group < 1 {
		return Int8Weight{}, fmt.Errorf("int8 weight: group size %d must be >= 1", group)
	}
	ng := Int8Groups(k, group)
	if n < 0 || k < 0 || int64(n)*int64(k) != int64(len(q)) || int64(n)*int64(ng) != int64(len(scales)) {
		return Int8Weight{}, fmt.Errorf("int8 weight: %d values and %d scales do not fit a %dx%d matrix in groups of %d", len(q), len(scales), n, k, group)
	}
	qt, err := dev.Alloc(I8, n, k)
	if err != nil {
		return Int8Weight{}, fmt.Errorf("int8 weight %dx%d: %w", n, k, err)
	}
	b := make([]byte, len(q))
	for i, v := range q {
		b[i] = byte(v)
	}
	if err := dev.Write(qt, b); err != nil {
		dev.Free(qt)
		return Int8Weight{}, fmt.Errorf("int8 weight %dx%d: %w", n, k, err)
	}
	st, err := dev.Alloc(F32, n, ng)
	if err != nil {
		dev.Free(qt)
		return Int8Weight{}, fmt.Errorf("int8 weight %dx%d scales: %w", n, k, err)
	}
	sb := make([]byte, 4*len(scales))
	for i, v := range scales {
		binary.LittleEndian.PutUint32(sb[4*i:], math.Float32bits(v))
	}
	if err := dev.Write(st, sb); err != nil {
		dev.Free(qt)
		dev.Free(st)
		return Int8Weight{}, fmt.Errorf("int8 weight %dx%d scales: %w", n, k, err)
	}
	return Int8Weight{Q: qt, Scales: st, Group: group}, nil
}

// Int8Dims are the validated sizes of a LinearInt8: M rows of x, N and K
// of W, Groups scales a row.
type Int8Dims struct {
	M, N, K, Groups int
}

// checkInt8Weight validates w's operands and returns N, K and the groups.
func checkInt8Weight(op string, w Int8Weight) (n, k, ng int, err error) {
	if w.Q == nil {
		return 0, 0, 0, argErr(op, "q", "missing (want I8 [N,K])")
	}
	if w.Q.DType() != I8 || w.Q.Rank() != 2 {
		return 0, 0, 0, argErr(op, "q", "want I8 [N,K], got %v", w.Q)
	}
	n, k = w.Q.Dim(0), w.Q.Dim(1)
	if w.Group < 1 {
		return 0, 0, 0, argErr(op, "", "group size %d must be >= 1", w.Group)
	}
	ng = Int8Groups(k, w.Group)
	if w.Scales == nil {
		return 0, 0, 0, argErr(op, "scales", "missing (want F32 [%d,%d])", n, ng)
	}
	if w.Scales.DType() != F32 || !w.Scales.shape.Equal(Shape{n, ng}) {
		return 0, 0, 0, argErr(op, "scales", "want F32 [%d,%d] (a scale per row and group of %d of the %d columns), got %v",
			n, ng, w.Group, k, w.Scales)
	}
	return n, k, ng, nil
}

// CheckLinearInt8 validates LinearInt8's operands: x [..., K] of a
// floating dtype, w an Int8Weight [N, K], out [..., N] of x's dtype or
// F32.
func CheckLinearInt8(own Owner, out, x *Tensor, w Int8Weight) (Int8Dims, error) {
	const op = "linear int8"
	var d Int8Dims
	n, k, ng, err := checkInt8Weight(op, w)
	if err != nil {
		return d, err
	}
	if err := needFloats(op, []string{"out", "x"}, out, x); err != nil {
		return d, err
	}
	if x.Rank() < 1 || x.Dim(-1) != k {
		return d, argErr(op, "x", "want [...,%d] (the weight's K), got %v", k, x)
	}
	if out.DType() != x.DType() && out.DType() != F32 {
		return d, argErr(op, "out", "dtype %v is neither x's %v nor f32", out, x.DType())
	}
	want := append(x.shape[:x.Rank()-1].Clone(), n)
	if err := needShape(op, "out", out, want); err != nil {
		return d, err
	}
	d = Int8Dims{M: x.shape[:x.Rank()-1].Numel(), N: n, K: k, Groups: ng}
	return d, own.check(op, out, x, w.Q, w.Scales)
}

// CheckEmbeddingInt8 validates EmbeddingInt8 and returns the rows gathered,
// their width K and the weight's rows N (the vocabulary). ids nil gathers
// every row: out must be [N, K].
func CheckEmbeddingInt8(own Owner, out *Tensor, w Int8Weight, ids *Tensor) (rows, k, n int, err error) {
	const op = "embedding int8"
	n, k, _, err = checkInt8Weight(op, w)
	if err != nil {
		return 0, 0, 0, err
	}
	if err = needFloats(op, []string{"out"}, out); err != nil {
		return 0, 0, 0, err
	}
	want := Shape{n, k}
	rows = n
	if ids != nil {
		if err = needDType(op, "ids", ids, I32); err != nil {
			return 0, 0, 0, err
		}
		want, rows = append(ids.Shape(), k), ids.Numel()
	}
	if err = needShape(op, "out", out, want); err != nil {
		return 0, 0, 0, err
	}
	return rows, k, n, own.check(op, out, w.Q, w.Scales, ids)
}

// Int8MultiLinear is implemented by a Device that computes several int8
// linear layers of one input in a single launch where the operands suit
// it (the q, k, v and r projections of a decode step), as MultiLinear
// does for 16-bit weights.
type Int8MultiLinear interface {
	// LinearMultiInt8 computes outs[i] = x W_i^T for x [M, K] and the int8
	// weights ws[i] [N_i, K] (outs[i] [M, N_i]), at most four. It reports
	// false, having done nothing, when the device has no kernel for these
	// operands.
	LinearMultiInt8(outs []*Tensor, ws []Int8Weight, x *Tensor) (bool, error)
}

// LinearMultiInt8 computes outs[i] = x ws[i]^T for every i: in one launch
// on an Int8MultiLinear device that takes the operands, else one
// LinearInt8 each.
func LinearMultiInt8(dev Device, outs []*Tensor, ws []Int8Weight, x *Tensor) error {
	if len(outs) != len(ws) || len(ws) == 0 {
		return fmt.Errorf("linear multi int8: %d outputs for %d weights", len(outs), len(ws))
	}
	if ml, ok := dev.(Int8MultiLinear); ok && len(ws) <= 4 {
		if done, err := ml.LinearMultiInt8(outs, ws, x); done || err != nil {
			return err
		}
	}
	for i := range ws {
		if err := dev.LinearInt8(outs[i], x, ws[i], false); err != nil {
			return fmt.Errorf("linear multi int8: weight %d: %w", i, err)
		}
	}
	return nil
}

// Int8MLPFuser is implemented by a Device that computes a SwiGLU MLP's
// activation straight from its input and int8 gate and up weights where
// the operands suit it, as MLPFuser does for 16-bit weights.
type Int8MLPFuser interface {
	// LinearSwiGLUInt8 computes act = silu(x Wg^T) * (x Wu^T) (x [M, K],
	// Wg and Wu int8 [N, K], act [M, N]), the products kept in f32 up to
	// the activation. It reports false, having done nothing, when the
	// device has no kernel for these operands.
	LinearSwiGLUInt8(act, x *Tensor, wGate, wUp Int8Weight) (bool, error)
}

// LinearSwiGLUInt8 computes act = silu(x Wg^T) * (x Wu^T) for int8 Wg and
// Wu: fused on an Int8MLPFuser device that takes the operands, else as the
// two products into gate and up ([M, N] scratch of act's dtype) and
// SwiGLU.
func LinearSwiGLUInt8(dev Device, act, gate, up, x *Tensor, wGate, wUp Int8Weight) error {
	if f, ok := dev.(Int8MLPFuser); ok {
		if done, err := f.LinearSwiGLUInt8(act, x, wGate, wUp); done || err != nil {
			return err
		}
	}
	if err := dev.LinearInt8(gate, x, wGate, false); err != nil {
		return fmt.Errorf("linear swiglu int8: gate: %w", err)
	}
	if err := dev.LinearInt8(up, x, wUp, false); err != nil {
		return fmt.Errorf("linear swiglu int8: up: %w", err)
	}
	return dev.SwiGLU(act, gate, up)
}

// LinearDequantized computes out (+)= x wt^T over wt [N, K], an int8
// weight dequantized into x's dtype, with x and out taken as the dims.M
// rows of the product: the backends' path for what their int8 kernels
// decline (prefill, larger batches).
func LinearDequantized(dev Device, out, x, wt *Tensor, dims Int8Dims, accumulate bool) error {
	x2, err := x.Reshape(dims.M, dims.K)
	if err != nil {
		return err
	}
	o2, err := out.Reshape(dims.M, dims.N)
	if err != nil {
		return err
	}
	return dev.MatMul(o2, x2, wt, MatMulOpts{TransB: true, Accumulate: accumulate})
}
