package cpu

import (
	"math"

	"github.com/parallax-engine/parallax/engine"
)

// Shared helpers of the ops: chunked float32 access to tensors of any dtype,
// parallel reductions and a fast float32 exp.

// ewBlock is the number of elements elementwise ops convert at a time (the
// length of their scratch buffers).
const ewBlock = 512

// elemChunk is the least number of elements worth handing to one worker in
// an elementwise op.
const elemChunk = 1 << 14

// tensorView gives chunked float32 access to a tensor's storage without
// widening the whole tensor first.
type tensorView struct {
	f32  []float32 // F32 storage
	u16  []uint16  // BF16 / F16 storage (raw bits)
	i32  []int32   // I32 storage
	half bool      // u16 holds F16 rather than BF16
}

func viewOf(t *engine.Tensor) tensorView {
	switch b := t.Storage().(type) {
	case []float32:
		return tensorView{f32: b}
	case []uint16:
		return tensorView{u16: b, half: t.DType() == engine.F16}
	case []int32:
		return tensorView{i32: b}
	}
	return tensorView{}
}

// read returns elements [lo, hi) as float32: a subslice of the storage for
// F32 (callers must not write to it), else the values converted into buf,
// which must hold hi-lo elements.
func (v tensorView) read(buf []float32, lo, hi int) []float32 {
	switch {
	case v.f32 != nil:
		return v.f32[lo:hi:hi]
	case v.u16 != nil:
		out := buf[:hi-lo]
		src := v.u16[lo:hi]
		if v.half {
			for i, h := range src {
				out[i] = engine.F16ToFloat32(h)
			}
		} else {
			for i, h := range src {
				out[i] = engine.BF16ToFloat32(h)
			}
		}
		return out
	case v.i32 != nil:
		out := buf[:hi-lo]
		for i, x := range v.i32[lo:hi] {
			out[i] = float32(x)
		}
		return out
	}
	return buf[:0]
}

// span returns where to compute elements [lo, hi): the storage itself for
// F32, else buf (hi-lo elements), which commit then stores.
func (v tensorView) span(buf []float32, lo, hi int) []float32 {
	if v.f32 != nil {
		return v.f32[lo:hi:hi]
	}
	return buf[:hi-lo]
}

// commit stores vals, computed in a span starting at element lo, rounding to
// the storage dtype (nothing to do for F32, whose span is the storage).
func (v tensorView) commit(vals []float32, lo int) {
	switch {
	case v.f32 != nil:
		if len(vals) > 0 && &v.f32[lo] != &vals[0] {
			copy(v.f32[lo:], vals)
		}
	case v.u16 != nil:
		dst := v.u16[lo : lo+len(vals)]
		if v.half {
			for i, x := range vals {
				dst[i] = engine.F16FromFloat32(x)
			}
		} else {
			for i, x := range vals {
				dst[i] = engine.BF16FromFloat32(x)
			}
		}
	case v.i32 != nil:
		dst := v.i32[lo : lo+len(vals)]
		for i, x := range vals {
			dst[i] = toInt32(x)
		}
	}
}

// sameStorage reports whether two tensors share memory (one is a reshape
// of the other).
func sameStorage(a, b *engine.Tensor) bool {
	if a.Numel() == 0 || b.Numel() == 0 {
		return false
	}
	switch x := a.Storage().(type) {
	case []float32:
		y, ok := b.Storage().([]float32)
		return ok && &x[0] == &y[0]
	case []uint16:
		y, ok := b.Storage().([]uint16)
		return ok && &x[0] == &y[0]
	case []int32:
		y, ok := b.Storage().([]int32)
		return ok && &x[0] == &y[0]
	}
	return false
}

// toInt32 truncates toward zero, saturating at the int32 range; NaN is 0.
func toInt32(x float32) int32 {
	switch {
	case x != x:
		return 0
	case x >= 2147483647:
		return math.MaxInt32
	case x <= -2147483648:
		return math.MinInt32
	}
	return int32(x)
}

// copyElems copies n elements from src (starting at so) to dst (starting at
// do): raw storage when the dtypes match, else converted through float32.
func copyElems(dst tensorView, do int, src tensorView, so, n int) {
	switch {
	case dst.f32 != nil && src.f32 != nil:
		copy(dst.f32[do:do+n], src.f32[so:so+n])
		return
	case dst.u16 != nil && src.u16 != nil && dst.half == src.half:
		copy(dst.u16[do:do+n], src.u16[so:so+n])
		return
	case dst.i32 != nil && src.i32 != nil:
		copy(dst.i32[do:do+n], src.i32[so:so+n])
		return
	}
	var buf, obuf [ewBlock]float32
	for s := 0; s < n; s += ewBlock {
		e := min(s+ewBlock, n)
		x := src.read(buf[:], so+s, so+e)
		out := dst.span(obuf[:], do+s, do+e)
		copy(out, x)
		dst.commit(out, do+s)
	}
}

// reduceChunks splits [0, n) into at most d.threads contiguous pieces of at least
// minChunk items; piece c is [c*size, min((c+1)*size, n)). It returns the
// piece count and size. Reductions keep one partial result per piece and
// combine them in order, so results do not depend on scheduling.
func (d *Device) reduceChunks(n, minChunk int) (count, size int) {
	if n <= 0 {
		return 0, 0
	}
	count = max(1, min(d.threads, n/max(minChunk, 1)))
	size = (n + count - 1) / count
	count = (n + size - 1) / size
	return count, size
}

// sumSquares returns sum x^2 over elements [lo, hi) of v, accumulated in
// float64.
func sumSquares(v tensorView, lo, hi int) float64 {
	var buf [ewBlock]float32
	var s0, s1, s2, s3 float64
	for s := lo; s < hi; s += ewBlock {
		x := v.read(buf[:], s, min(s+ewBlock, hi))
		i := 0
		for ; i+3 < len(x); i += 4 {
			a, b, c, e := float64(x[i]), float64(x[i+1]), float64(x[i+2]), float64(x[i+3])
			s0 += a * a
			s1 += b * b
			s2 += c * c
			s3 += e * e
		}
		for ; i < len(x); i++ {
			a := float64(x[i])
			s0 += a * a
		}
	}
	return (s0 + s1) + (s2 + s3)
}

// parallelSumSquares is sumSquares over [lo, hi) split across the workers.
func (d *Device) parallelSumSquares(v tensorView, lo, hi int) float64 {
	count, size := d.reduceChunks(hi-lo, elemChunk)
	parts := make([]float64, count)
	d.parallel(count, func(c0, c1 int) {
		for c := c0; c < c1; c++ {
			parts[c] = sumSquares(v, lo+c*size, min(lo+(c+1)*size, hi))
		}
	})
	var s float64
	for _, p := range parts {
		s += p
	}
	return s
}

// exp32 is e^x for float32 x, correct to about one unit in the last place:
// x = k ln2 + r with |r| <= ln2/2, e^r by its degree-7 Taylor polynomial in
// float64 (truncation error < 1e-8 relative), scaled by 2^k.
func exp32(x float32) float32 {
	switch {
	case x != x:
		return x
	case x > 88.8:
		return float32(math.Inf(1))
	case x < -104:
		return 0
	}
	const log2e = 1.4426950408889634
	const ln2 = 0.6931471805599453
	xf := float64(x)
	k := math.Floor(xf*log2e + 0.5)
	r := xf - k*ln2
	p := 1 + r*(1+r*(1.0/2+r*(1.0/6+r*(1.0/24+r*(1.0/120+r*(1.0/720+r*(1.0/5040)))))))
	// 2^k as a float64 (k lies in [-151, 129], inside float64's normal range).
	return float32(p * math.Float64frombits(uint64(int64(k)+1023)<<52))
}

// sigmoid32 is 1 / (1 + e^-x).
func sigmoid32(x float32) float32 { return 1 / (1 + exp32(-x)) }
