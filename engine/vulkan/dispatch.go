package vulkan

/*
#include "pxvk.h"
*/
import "C"

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/parallax-engine/parallax/engine"
)

// arg is one storage-buffer binding of a dispatch: a byte range of a
// region, the dtype the shader reads it as and whether it writes it.
type arg struct {
	r         *region
	off, size uint64
	dt        engine.DType
	write     bool
}

// in binds a tensor read-only.
func in(t *engine.Tensor) arg {
	r := regionOf(t)
	return arg{r: r, size: roundUp(uint64(t.Bytes()), 4), dt: t.DType()}
}

// out binds a tensor the kernel writes (and may read).
func out(t *engine.Tensor) arg {
	a := in(t)
	a.write = true
	return a
}

// scratch binds a whole region as f32 (written).
func scratch(r *region) arg { return arg{r: r, size: r.size, dt: engine.F32, write: true} }

// opt binds t, or the dummy buffer when t is nil.
func (d *Device) opt(t *engine.Tensor, write bool) arg {
	if t == nil {
		return arg{r: d.dummy, size: d.dummy.size, dt: engine.F32}
	}
	if write {
		return out(t)
	}
	return in(t)
}

// none is an unused binding.
func (d *Device) none() arg { return d.opt(nil, false) }

// statusArg binds the device's error flags. Kernels only raise flags
// (first error wins, by an atomic compare-and-swap) and the host reads
// them after the batch's fence, so the binding is not tracked as a write:
// two kernels that may raise an error do not wait for each other (the
// key and value appends of a decode step, say).
func (d *Device) statusArg() arg {
	return arg{r: d.status, size: d.status.size, dt: engine.I32}
}

// grid is a workgroup count.
type grid [3]uint32

// groups1 spreads n workgroups over x (and y, z when n exceeds the
// device's per-dimension limit); kernels use px_group() and skip indices
// >= n.
func (d *Device) groups1(n int) grid {
	if n <= 0 {
		return grid{0, 1, 1}
	}
	mx := int(d.pd.lim.maxGroupCount[0])
	if n <= mx {
		return grid{uint32(n), 1, 1}
	}
	y := (n + mx - 1) / mx
	my := int(d.pd.lim.maxGroupCount[1])
	if y <= my {
		return grid{uint32(mx), uint32(y), 1}
	}
	z := (y + my - 1) / my
	return grid{uint32(mx), uint32(my), uint32(z)}
}

// stride returns groups for a grid-stride loop over n elements with wg
// invocations per group (at most 4096 groups: each loops).
func (d *Device) strideGroups(n, wg int) grid {
	g := (n + wg - 1) / wg
	g = min(max(g, 1), 4096, int(d.pd.lim.maxGroupCount[0]))
	return grid{uint32(g), 1, 1}
}

// push packs push constants: uint32, int, float32 and bool values in order.
func push(vals ...any) []uint32 {
	out := make([]uint32, 0, len(vals))
	for _, v := range vals {
		switch x := v.(type) {
		case uint32:
			out = append(out, x)
		case int:
			out = append(out, uint32(int32(x)))
		case float32:
			out = append(out, math.Float32bits(x))
		case float64:
			out = append(out, math.Float32bits(float32(x)))
		case bool:
			if x {
				out = append(out, 1)
			} else {
				out = append(out, 0)
			}
		default:
			panic(fmt.Sprintf("vulkan: push constant of type %T", v))
		}
	}
	return out
}

// specWG is the constant id of WG, the workgroup size as the shaders use it
// in constant expressions (shaders/common.glsl).
const specWG = 9

// flexWG is the workgroup size of kernels that work with any power of
// two: 256, or the device's largest power of two below that (Vulkan
// guarantees at least 128).
func (d *Device) flexWG() int {
	lim := min(256, int(d.pd.lim.maxGroupInvocations), int(d.pd.lim.maxGroupSize[0]))
	wg := 1
	for wg*2 <= lim {
		wg *= 2
	}
	return wg
}

// launch records one dispatch of kernel over g workgroups of wg
// invocations (specialization constant 0) with the given constants, push
// constants and bindings; binding i's dtype becomes constant 100+i.
func (d *Device) launch(kernel string, wg int, sp spec, pc []uint32, g grid, args ...arg) error {
	prof := d.prof.on
	var op profOp
	if prof {
		op = d.takeTag(kernel, sp)
	}
	if g[0] == 0 || g[1] == 0 || g[2] == 0 {
		return nil
	}
	if len(args) > maxBindings {
		return fmt.Errorf("vulkan: kernel %s binds %d buffers (at most %d)", kernel, len(args), maxBindings)
	}
	if lim := min(int(d.pd.lim.maxGroupInvocations), int(d.pd.lim.maxGroupSize[0])); wg > lim {
		return fmt.Errorf("vulkan: kernel %s needs %d invocations per workgroup; %s allows %d", kernel, wg, d.pd.name, lim)
	}
	if len(pc)*4 > pushBytes {
		return fmt.Errorf("vulkan: kernel %s pushes %d bytes (at most %d)", kernel, len(pc)*4, pushBytes)
	}
	full := spec{0: uint32(wg), specWG: uint32(wg)}
	for k, v := range sp {
		full[k] = v
	}
	for i, a := range args {
		full[uint32(100+i)] = uint32(a.dt)
	}
	pl, err := d.pipes.get(kernel, len(args), full)
	if err != nil {
		return err
	}
	f, err := d.b.begin()
	if err != nil {
		return err
	}
	acc := make([]access, len(args))
	bufs := make([]uint64, len(args))
	offs := make([]uint64, len(args))
	sizes := make([]uint64, len(args))
	regs := make([]*region, len(args))
	for i, a := range args {
		lo := a.r.off + a.off
		acc[i] = access{a.r.buffer(), lo, lo + a.size, a.write}
		bufs[i], offs[i], sizes[i], regs[i] = uint64(a.r.buffer()), lo, a.size, a.r
	}
	d.b.hazard(f, acc)
	var pool handle
	if !d.push {
		if pool, err = d.b.descriptorPool(f, false); err != nil {
			return d.b.recordFailed(f, err)
		}
	}
	// Always the whole declared range, so no shader reads unset bytes.
	full32 := make([]uint32, pushBytes/4)
	copy(full32, pc)
	pcp := unsafe.Pointer(&full32[0])
	var q int
	if prof {
		if q, err = d.profBegin(f); err != nil {
			return fmt.Errorf("vulkan: kernel %s: %w", kernel, err)
		}
	}
	for attempt := 0; ; attempt++ {
		res := C.px_dispatch(d.px, unsafe.Pointer(f.cmd), C.pxHandle(pl.pipe), C.pxHandle(pl.layout), C.pxHandle(pl.setLayout), C.pxHandle(pool),
			C.int(len(args)), (*C.uint64_t)(&bufs[0]), (*C.uint64_t)(&offs[0]), (*C.uint64_t)(&sizes[0]),
			pcp, C.uint32_t(pushBytes), C.uint32_t(g[0]), C.uint32_t(g[1]), C.uint32_t(g[2]))
		if res == 0 {
			break
		}
		// VK_ERROR_OUT_OF_POOL_MEMORY / VK_ERROR_FRAGMENTED_POOL: next pool.
		if pool == 0 || attempt > 0 || (res != -1000069000 && res != -12) {
			return d.b.recordFailed(f, fmt.Errorf("vulkan: recording %s: VkResult %d", kernel, int32(res)))
		}
		if pool, err = d.b.descriptorPool(f, true); err != nil {
			return d.b.recordFailed(f, err)
		}
	}
	if prof {
		d.profEnd(f, q, op)
	}
	return d.b.touched(f, regs...)
}
