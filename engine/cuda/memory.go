//go:build cgo

package cuda

// #include "shim.h"
import "C"

import (
	"fmt"
	"math/bits"

	"github.com/parallax-engine/parallax/engine"
)

// buffer is one device allocation: a tensor's storage (shared by its
// reshaped views) or an op's scratch.
type buffer struct {
	ptr   uint64
	size  int64 // the bucket size actually allocated
	freed bool
}

// ptr returns a tensor's device address (0 for nil).
func ptr(t *engine.Tensor) uint64 {
	if t == nil {
		return 0
	}
	return t.Storage().(*buffer).ptr
}

// allocator caches freed device memory in size buckets: powers of two up to
// 1 MiB, multiples of 2 MiB above. cuMemAlloc and cuMemFree synchronise the
// device, so a training step that allocates the same shapes every step
// reaches a steady state with no driver allocation at all. Reuse is safe
// because every op runs on one stream: work enqueued before a Free finishes
// before work enqueued after the next Alloc of the same memory.
type allocator struct {
	d      *Device
	free   map[int64][]*buffer
	cached int64
	live   int64
}

func bucket(n int64) int64 {
	if n <= 256 {
		return 256
	}
	if n <= 1<<20 {
		return 1 << (64 - bits.LeadingZeros64(uint64(n-1)))
	}
	const step = 2 << 20
	return (n + step - 1) / step * step
}

func (a *allocator) get(n int64) (*buffer, error) {
	size := bucket(n)
	if a.free == nil {
		a.free = map[int64][]*buffer{}
	}
	if l := a.free[size]; len(l) > 0 {
		b := l[len(l)-1]
		a.free[size] = l[:len(l)-1]
		a.cached -= size
		a.live += size
		b.freed = false
		return b, nil
	}
	var p C.CUdeviceptr
	r := C.pxcu_mem_alloc(a.d.ctx, &p, C.size_t(size))
	if r != 0 && a.cached > 0 {
		// Out of memory with memory cached: give the cache back and retry.
		C.pxcu_stream_sync(a.d.ctx, a.d.stream)
		a.release()
		r = C.pxcu_mem_alloc(a.d.ctx, &p, C.size_t(size))
	}
	if r != 0 {
		return nil, fmt.Errorf("%w (%d bytes requested, %d in use)", cuErr("cuMemAlloc", r), size, a.live)
	}
	a.live += size
	return &buffer{ptr: uint64(p), size: size}, nil
}

func (a *allocator) put(b *buffer) {
	if b == nil || b.freed {
		return
	}
	b.freed = true
	if a.d != nil && a.d.rec != nil {
		// A graph being recorded may address it: kept until the graph is freed.
		a.d.rec.held = append(a.d.rec.held, b)
		return
	}
	a.live -= b.size
	a.cached += b.size
	a.free[b.size] = append(a.free[b.size], b)
}

// release frees every cached buffer.
func (a *allocator) release() {
	for size, l := range a.free {
		for _, b := range l {
			C.pxcu_mem_free(a.d.ctx, C.CUdeviceptr(b.ptr))
		}
		delete(a.free, size)
	}
	a.cached = 0
}

// scratch returns a temporary buffer of n bytes; the caller puts it back
// once the ops that use it are enqueued.
func (d *Device) scratch(n int64) (*buffer, error) { return d.alloc.get(n) }
