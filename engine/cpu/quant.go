package cpu

import (
	"fmt"

	"github.com/parallax-engine/parallax/engine"
)

// The weight-only int8 ops (engine/quant.go): for a few rows of x a weight
// row is dequantized into float32 (q s, one rounding) and dotted with each
// row of x in float32, like MatMul's decode path (workers split the
// weight's rows, so each is read once); for more rows the whole weight is
// dequantized and multiplied by MatMul's blocked GEMM.

// cpuInt8Rows is the most rows of x LinearInt8 dots with each dequantized
// weight row directly; more take the dequantized matrix through MatMul.
const cpuInt8Rows = 8

// int8Parts returns a weight's int8 values and f32 scales (the CPU
// storage of I8 and F32 tensors).
func int8Parts(w engine.Int8Weight) ([]int8, []float32) {
	return w.Q.Storage().([]int8), w.Scales.Storage().([]float32)
}

// dequantRow writes row r of W into dst (len K): q[r, j] s[r, j/G] in
// float32.
func dequantRow(dst []float32, q []int8, s []float32, r, k, ng, group int) {
	qr, sr := q[r*k:(r+1)*k], s[r*ng:(r+1)*ng]
	for g, sc := range sr {
		lo, hi := g*group, min((g+1)*group, k)
		for j := lo; j < hi; j++ {
			dst[j] = float32(qr[j]) * sc
		}
	}
}

// dot32 is sum_j a[j] b[j] in float32 with four partial sums.
func dot32(a, b []float32) float32 {
	var s0, s1, s2, s3 float32
	n := len(a)
	b = b[:n]
	j := 0
	for ; j+4 <= n; j += 4 {
		s0 += a[j] * b[j]
		s1 += a[j+1] * b[j+1]
		s2 += a[j+2] * b[j+2]
		s3 += a[j+3] * b[j+3]
	}
	for ; j < n; j++ {
		s0 += a[j] * b[j]
	}
	return (s0 + s1) + (s2 + s3)
}

// LinearInt8 computes out = x W^T (+ out) for an int8 weight; see
// engine.Ops.
func (d *Device) LinearInt8(out, x *engine.Tensor, w engine.Int8Weight, accumulate bool) error {
	dims, err := engine.CheckLinearInt8(d.own, out, x, w)
	if err != nil {
		return err
	}
	if sameStorage(out, x) {
		return &engine.ArgError{Op: "linear int8", Operand: "out", Msg: fmt.Sprintf("%v shares its storage with x; write the product to another tensor", out)}
	}
	M, N, K := dims.M, dims.N, dims.K
	if M == 0 || N == 0 {
		return nil
	}
	q, s := int8Parts(w)
	if M > cpuInt8Rows {
		// Many rows: dequantize once and run the blocked GEMM, which reuses
		// each packed weight panel across the rows.
		wt := engine.NewTensor(d, engine.F32, engine.Shape{N, K}, make([]float32, N*K))
		wf := wt.Storage().([]float32)
		d.parallelMin(N, rowChunk(K), func(lo, hi int) {
			for n := lo; n < hi; n++ {
				dequantRow(wf[n*K:(n+1)*K], q, s, n, K, dims.Groups, w.Group)
			}
		})
		x2, err := x.Reshape(M, K)
		if err != nil {
			return err
		}
		o2, err := out.Reshape(M, N)
		if err != nil {
			return err
		}
		return d.MatMul(o2, x2, wt, engine.MatMulOpts{TransB: true, Accumulate: accumulate})
	}
	xf := floats(x)
	o, commit := output(out, accumulate)
	d.parallelMin(N, rowChunk(K*max(M, 1)), func(lo, hi int) {
		row := make([]float32, K)
		for n := lo; n < hi; n++ {
			dequantRow(row, q, s, n, K, dims.Groups, w.Group)
			for m := range M {
				v := dot32(xf[m*K:(m+1)*K], row)
				if accumulate {
					v += o[m*N+n]
				}
				o[m*N+n] = v
			}
		}
	})
	commit()
	return nil
}

// EmbeddingInt8 gathers dequantized rows of an int8 weight (every row in
// order when ids is nil); see engine.Ops. Nothing is written if an id is
// out of range.
func (d *Device) EmbeddingInt8(out *engine.Tensor, w engine.Int8Weight, ids *engine.Tensor) error {
	rows, k, n, err := engine.CheckEmbeddingInt8(d.own, out, w, ids)
	if err != nil {
		return err
	}
	var id []int32
	if ids != nil {
		id = ints(ids)
		if err := d.checkIDs("embedding int8", id, n); err != nil {
			return err
		}
	}
	if rows == 0 || k == 0 {
		return nil
	}
	q, s := int8Parts(w)
	ng := engine.Int8Groups(k, w.Group)
	ov := viewOf(out)
	d.parallelMin(rows, rowChunk(k), func(lo, hi int) {
		buf := make([]float32, k)
		for r := lo; r < hi; r++ {
			src := r
			if id != nil {
				src = int(id[r])
			}
			dst := ov.span(buf, r*k, (r+1)*k)
			dequantRow(dst, q, s, src, k, ng, w.Group)
			ov.commit(dst, r*k)
		}
	})
	return nil
}
