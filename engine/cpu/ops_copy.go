package cpu

import (
	"fmt"

	"github.com/parallax-engine/parallax/engine"
)

// Cast converts src into dst's dtype; see engine.Ops. Equal dtypes copy raw
// storage; float to float rounds to nearest even (through float32, which
// holds every bf16 and f16 value exactly); float to I32 truncates toward
// zero, saturating at the int32 range (NaN gives 0); I32 to float is exact
// wherever the dtype holds the integer.
func (d *Device) Cast(dst, src *engine.Tensor) error {
	n, err := engine.CheckCast(d.own, dst, src)
	if err != nil {
		return err
	}
	dv, sv := viewOf(dst), viewOf(src)
	d.parallelMin(n, elemChunk, func(lo, hi int) {
		copyElems(dv, lo, sv, lo, hi-lo)
	})
	return nil
}

// SwapAxes12 writes dst[a, c, b, d] = src[a, b, c, d] as raw storage, for
// every dtype; see engine.Ops.
func (d *Device) SwapAxes12(dst, src *engine.Tensor) error {
	dims, err := engine.CheckSwapAxes12(d.own, dst, src)
	if err != nil {
		return err
	}
	a, b, c, e := dims[0], dims[1], dims[2], dims[3]
	dv, sv := viewOf(dst), viewOf(src)
	rows := a * b * c
	d.parallelMin(rows, rowChunk(e), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			// r indexes src rows (ia, ib, ic); the row lands at (ia, ic, ib).
			ia, ib, ic := r/(b*c), r/c%b, r%c
			copyElems(dv, ((ia*c+ic)*b+ib)*e, sv, r*e, e)
		}
	})
	return nil
}

// KVAppend writes x [B, H, n, D] into cache [B, H, Cap, D] at positions
// start..start+n-1; see engine.Ops. Equal dtypes copy raw storage, others
// convert.
func (d *Device) KVAppend(cache, x *engine.Tensor, start int) error {
	b, h, n, capacity, dim, err := engine.CheckKVAppend(d.own, cache, x, start)
	if err != nil {
		return err
	}
	cv, xv := viewOf(cache), viewOf(x)
	block := n * dim
	d.parallelMin(b*h, max(1, elemChunk/max(block, 1)), func(lo, hi int) {
		for bh := lo; bh < hi; bh++ {
			copyElems(cv, (bh*capacity+start)*dim, xv, bh*block, block)
		}
	})
	return nil
}

// KVAppendAt writes x [B, H, n, D] into cache [B, H, Cap, D] at positions
// starts[b]..starts[b]+n-1 of each sequence; see engine.Ops.
func (d *Device) KVAppendAt(cache, x, starts *engine.Tensor) error {
	b, h, n, capacity, dim, err := engine.CheckKVAppendAt(d.own, cache, x, starts)
	if err != nil {
		return err
	}
	st := starts.Storage().([]int32)
	for i, s := range st {
		if s < 0 || int(s)+n > capacity {
			return &engine.ArgError{Op: "kv append at", Operand: "starts",
				Msg: fmt.Sprintf("starts[%d] = %d: positions %d..%d do not fit a cache of capacity %d", i, s, s, int(s)+n-1, capacity)}
		}
	}
	cv, xv := viewOf(cache), viewOf(x)
	block := n * dim
	d.parallelMin(b*h, max(1, elemChunk/max(block, 1)), func(lo, hi int) {
		for bh := lo; bh < hi; bh++ {
			copyElems(cv, (bh*capacity+int(st[bh/h]))*dim, xv, bh*block, block)
		}
	})
	return nil
}
