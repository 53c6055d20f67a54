//go:build cgo

package cuda

// #include "shim.h"
import "C"

import (
	"errors"
	"fmt"
	"math"

	"github.com/parallax-engine/parallax/engine"
)

var _ engine.Profiler = (*Device)(nil)

// profiler is a device's per-op timing (engine.Profiler). While on, every
// kernel launch, cuBLASLt matmul and memset/memcpy on the device's stream
// is bracketed by two events; the host never waits on them until
// StopProfile, so the profiled ops run back to back as they would
// otherwise. The events are created as ops need them and kept for the
// next profile (creating one is a driver call, recording one is cheap).
type profiler struct {
	on     bool
	events []C.CUevent // op i is timed by events 2i (before) and 2i+1 (after)
	ops    []profOp    // the ops timed so far
}

// profOp is what is known of one timed op besides its time.
type profOp struct {
	name         string
	flops, bytes float64
}

// StartProfile starts timing every kernel, cuBLASLt matmul, memset and
// memcpy enqueued on the device's stream (NCCL collectives are not timed).
// It does not wait for the device.
func (d *Device) StartProfile() error {
	if d.closed {
		return errors.New("cuda: start profile: the device is closed")
	}
	if d.prof.on {
		return errors.New("cuda: start profile: a profile is being recorded already")
	}
	if d.rec != nil {
		return errors.New("cuda: start profile: a graph is being recorded")
	}
	d.prof.on = true
	d.prof.ops = d.prof.ops[:0]
	return nil
}

// StopProfile waits once for the last timed op and reads the time between
// each op's two events.
func (d *Device) StopProfile() (engine.Profile, error) {
	if !d.prof.on {
		return nil, errors.New("cuda: stop profile: no profile was started")
	}
	d.prof.on = false
	ops := d.prof.ops
	d.prof.ops = ops[:0]
	if len(ops) == 0 {
		return engine.Profile{}, nil
	}
	// One stream: its last event completes after every earlier one.
	if r := C.pxcu_event_sync(d.ctx, d.prof.events[2*len(ops)-1]); r != 0 {
		return nil, fmt.Errorf("stop profile: %w", cuErr("cuEventSynchronize", r))
	}
	entries := make([]engine.ProfileEntry, len(ops))
	for i, op := range ops {
		var ms C.float
		if r := C.pxcu_event_elapsed(d.ctx, &ms, d.prof.events[2*i], d.prof.events[2*i+1]); r != 0 {
			return nil, fmt.Errorf("stop profile: op %d of %d (%s): %w", i+1, len(ops), op.name, cuErr("cuEventElapsedTime", r))
		}
		v := float64(ms)
		if !(v >= 0) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("cuda: stop profile: op %d of %d (%s) took %v ms by its events", i+1, len(ops), op.name, v)
		}
		entries[i] = engine.ProfileEntry{Name: op.name, Calls: 1, Millis: v, FLOPs: op.flops, Bytes: op.bytes}
	}
	return engine.AggregateProfile(entries), nil
}

// profBegin records the event before the next op (creating the pair of
// events it needs if the pool is short). An op whose enqueue fails after
// profBegin is not counted, and the next op records the same events again.
func (d *Device) profBegin() error {
	i := 2 * len(d.prof.ops)
	for len(d.prof.events) < i+2 {
		var e C.CUevent
		if r := C.pxcu_event_create(d.ctx, &e); r != 0 {
			return fmt.Errorf("profile: %w", cuErr("cuEventCreate", r))
		}
		d.prof.events = append(d.prof.events, e)
	}
	if r := C.pxcu_event_record(d.ctx, d.prof.events[i], d.stream); r != 0 {
		return fmt.Errorf("profile: %w", cuErr("cuEventRecord", r))
	}
	return nil
}

// profEnd records the event after the op begun by profBegin and counts the
// op.
func (d *Device) profEnd(name string, flops, bytes float64) error {
	if r := C.pxcu_event_record(d.ctx, d.prof.events[2*len(d.prof.ops)+1], d.stream); r != 0 {
		return fmt.Errorf("profile: after %s: %w", name, cuErr("cuEventRecord", r))
	}
	d.prof.ops = append(d.prof.ops, profOp{name: name, flops: flops, bytes: bytes})
	return nil
}

// memOp enqueues one memset or memcpy on the stream (enqueue), which moves
// bytes; when profiling it is timed under name, which also names it in an
// error.
func (d *Device) memOp(name string, bytes int64, enqueue func() C.CUresult) error {
	if !d.prof.on {
		return cuErr(name, enqueue())
	}
	if err := d.profBegin(); err != nil {
		return err
	}
	if err := cuErr(name, enqueue()); err != nil {
		return err
	}
	return d.profEnd(name, 0, float64(bytes))
}

// profFree destroys the event pool (Close) and reports the first failure.
func (d *Device) profFree() error {
	var err error
	for _, e := range d.prof.events {
		if r := C.pxcu_event_destroy(d.ctx, e); r != 0 && err == nil {
			err = fmt.Errorf("profile: %w", cuErr("cuEventDestroy", r))
		}
	}
	d.prof = profiler{}
	return err
}

// ltDType is the engine dtype of a cudaDataType code of ltType.
func ltDType(c C.int) engine.DType {
	switch c {
	case 14:
		return engine.BF16
	case 2:
		return engine.F16
	}
	return engine.F32
}

// gemmProfile names a cuBLASLt product for a profile and counts its FLOPs
// (2 m n k per product) and the bytes it must move at least (each operand
// once, the output twice when accumulated). The library's column-major
// product is out^T = op(b)^T op(a)^T (see MatMul), so the row-major M, N
// and transposes of the name are its n, m and swapped transposes.
func gemmProfile(g *C.pxcu_gemm) (name string, flops, bytes float64) {
	la, lb, out := ltDType(g.atype), ltDType(g.btype), ltDType(g.ctype) // the library's A is MatMul's b
	m, n, k, batch := float64(g.m), float64(g.n), float64(g.k), float64(g.batch)
	name = engine.GemmName(lb, la, out, int(g.n), int(g.m), int(g.k), int(g.batch), g.transb != 0, g.transa != 0)
	flops = 2 * m * n * k * batch
	a, b, c := m*k, k*n, m*n*batch
	if g.stridea != 0 {
		a *= batch
	}
	if g.strideb != 0 {
		b *= batch
	}
	if g.beta != 0 {
		c *= 2
	}
	bytes = a*float64(la.Size()) + b*float64(lb.Size()) + c*float64(out.Size())
	return name, flops, bytes
}
