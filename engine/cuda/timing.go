//go:build cgo

package cuda

// #include "shim.h"
import "C"

import (
	"fmt"
	"sort"
	"time"

	"github.com/parallax-engine/parallax/engine"
)

var _ engine.Timer = (*Device)(nil)

// Timed runs fn (which enqueues work) between two CUDA events and returns
// the GPU time between them, after waiting for the work. An error a kernel
// raised is reported, as by Sync.
func (d *Device) Timed(fn func() error) (time.Duration, error) {
	var a, b C.CUevent
	if r := C.pxcu_event_create(d.ctx, &a); r != 0 {
		return 0, cuErr("cuEventCreate", r)
	}
	defer C.pxcu_event_destroy(d.ctx, a)
	if r := C.pxcu_event_create(d.ctx, &b); r != 0 {
		return 0, cuErr("cuEventCreate", r)
	}
	defer C.pxcu_event_destroy(d.ctx, b)
	if r := C.pxcu_event_record(d.ctx, a, d.stream); r != 0 {
		return 0, cuErr("cuEventRecord", r)
	}
	if err := fn(); err != nil {
		return 0, err
	}
	if r := C.pxcu_event_record(d.ctx, b, d.stream); r != 0 {
		return 0, cuErr("cuEventRecord", r)
	}
	if r := C.pxcu_event_sync(d.ctx, b); r != 0 {
		return 0, cuErr("cuEventSynchronize", r)
	}
	var ms C.float
	if r := C.pxcu_event_elapsed(d.ctx, &ms, a, b); r != 0 {
		return 0, cuErr("cuEventElapsedTime", r)
	}
	return time.Duration(float64(ms) * float64(time.Millisecond)), d.kernelError()
}

// median times fn reps times (after warm warm-up runs), running before
// (untimed, e.g. flushL2) ahead of each, and returns the median in
// milliseconds. It serves the kernel benchmarks (bench_test.go).
func (d *Device) median(warm, reps int, before, fn func() error) (float64, error) {
	var ts []float64
	for i := 0; i < warm+reps; i++ {
		if before != nil {
			if err := before(); err != nil {
				return 0, err
			}
		}
		el, err := d.Timed(fn)
		if err != nil {
			return 0, err
		}
		if i >= warm {
			ts = append(ts, float64(el)/float64(time.Millisecond))
		}
	}
	if len(ts) == 0 {
		return 0, fmt.Errorf("cuda: no timed runs")
	}
	sort.Float64s(ts)
	return ts[len(ts)/2], nil
}

var _ engine.CacheFlusher = (*Device)(nil)

// FlushCaches enqueues flushL2 (engine.CacheFlusher).
func (d *Device) FlushCaches() error { return d.flushL2() }

// flushL2 overwrites a scratch buffer several times the L2 cache, so that
// the next kernel reads its inputs from device memory.
func (d *Device) flushL2() error {
	n := int64(max(d.g.l2, 1<<20)) * 8
	b, err := d.scratch(n)
	if err != nil {
		return err
	}
	defer d.alloc.put(b)
	return cuErr("memset", C.pxcu_memset32(d.ctx, C.CUdeviceptr(b.ptr), 0x3f800000, C.size_t(n/4), d.stream))
}

// randomFill fills t with uniform values in [-scale, scale) computed on the
// device from seed.
func (d *Device) randomFill(t *engine.Tensor, seed uint32, scale float32) error {
	if err := d.own("random fill", t); err != nil {
		return err
	}
	n := int64(t.Numel())
	if n == 0 {
		return nil
	}
	return d.launch(ew, "rand_fill", grid1(n), threads256, 0, newArgs().p(ptr(t)).i(dt(t)).l(n).i(int(int32(seed))).f(scale))
}

// releaseCache frees the allocator's cached memory (after waiting for the
// device).
func (d *Device) releaseCache() error {
	err := d.Sync()
	for _, b := range []*buffer{d.decPart, d.decCnt} {
		d.alloc.put(b)
	}
	d.decPart, d.decCnt = nil, nil
	d.alloc.release()
	return err
}
