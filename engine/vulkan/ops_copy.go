package vulkan

import (
	"github.com/parallax-engine/parallax/engine"
)

// Copies: Cast, SwapAxes12 and KVAppend are one strided copy kernel
// (shaders/copy.comp): element i of src, viewed as [d0, d1, d2, d3], lands
// at dst[base + sum i_k s_k]. Equal dtypes move raw bits.

func (d *Device) copyKernel(dst, src *engine.Tensor, n int, dims [4]int, strides [4]int, base int) error {
	if n == 0 {
		return nil
	}
	pc := push(uint32(n), uint32(dims[1]), uint32(dims[2]), uint32(dims[3]),
		uint32(strides[0]), uint32(strides[1]), uint32(strides[2]), uint32(strides[3]), uint32(base))
	wg := d.flexWG()
	return d.launch("copy", wg, nil, pc, d.strideGroups(n, wg), in(src), out(dst))
}

// Cast converts src to dst's dtype (a raw copy when they match); see
// engine.Ops.
func (d *Device) Cast(dst, src *engine.Tensor) error {
	n, err := engine.CheckCast(d.own, dst, src)
	if err != nil {
		return err
	}
	return d.copyKernel(dst, src, n, [4]int{1, 1, 1, max(n, 1)}, [4]int{0, 0, 0, 1}, 0)
}

// SwapAxes12 writes dst[a, c, b, e] = src[a, b, c, e]; see engine.Ops.
func (d *Device) SwapAxes12(dst, src *engine.Tensor) error {
	dims, err := engine.CheckSwapAxes12(d.own, dst, src)
	if err != nil {
		return err
	}
	a, b, c, e := dims[0], dims[1], dims[2], dims[3]
	n := a * b * c * e
	return d.copyKernel(dst, src, n, [4]int{a, max(b, 1), max(c, 1), max(e, 1)}, [4]int{c * b * e, e, b * e, 1}, 0)
}

// KVAppend writes x [B, H, n, D] into cache [B, H, Cap, D] at positions
// start..start+n-1; see engine.Ops.
func (d *Device) KVAppend(cache, x *engine.Tensor, start int) error {
	b, h, n, capacity, dim, err := engine.CheckKVAppend(d.own, cache, x, start)
	if err != nil {
		return err
	}
	total := b * h * n * dim
	return d.copyKernel(cache, x, total, [4]int{b, max(h, 1), max(n, 1), max(dim, 1)},
		[4]int{h * capacity * dim, capacity * dim, dim, 1}, start*dim)
}

// KVAppendAt writes x [B, H, n, D] into cache [B, H, Cap, D] at each
// sequence's start (read on the device; a bad start is reported at Sync);
// see engine.Ops.
func (d *Device) KVAppendAt(cache, x, starts *engine.Tensor) error {
	b, h, n, capacity, dim, err := engine.CheckKVAppendAt(d.own, cache, x, starts)
	if err != nil {
		return err
	}
	total := b * h * n * dim
	if total == 0 {
		return nil
	}
	pc := push(uint32(total), uint32(h), uint32(n), uint32(dim), uint32(capacity))
	wg := d.flexWG()
	return d.launch("kv_append_at", wg, nil, pc, d.strideGroups(total, wg), in(x), in(starts), out(cache), d.statusArg())
}
