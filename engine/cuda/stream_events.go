//go:build cgo

package cuda

// #include <stdlib.h>
// #include "stream_events.h"
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

var (
	waitOnce sync.Once
	waitErr  error
)

// loadStreamWait binds cuStreamWaitEvent once per process, from the driver
// library load opened.
func loadStreamWait() error {
	waitOnce.Do(func() {
		if err := load(); err != nil {
			waitErr = err
			return
		}
		p := C.CString(libs.cuda)
		defer C.free(unsafe.Pointer(p))
		if name := C.pxcu_bind_stream_wait(p); name != nil {
			waitErr = fmt.Errorf("CUDA driver library %s: %s not found (driver too old)", libs.cuda, C.GoString(name))
		}
	})
	return waitErr
}

// sideStream is a second stream of a device, for work that runs alongside
// the device's stream (NCCL collectives overlapping the backward pass).
// Two events order the streams both ways without blocking the host: after
// makes the side stream wait for what the device's stream has enqueued so
// far; join makes the device's stream wait for what the side stream has.
// An event may be recorded again once the wait on it has been enqueued
// (the wait captures the record before it), so one event per direction
// serves every call. Used from the goroutine driving the device.
type sideStream struct {
	d           *Device
	s           C.CUstream
	ready, done C.CUevent
}

// newSideStream creates the stream and its two events.
func (d *Device) newSideStream() (*sideStream, error) {
	if err := loadStreamWait(); err != nil {
		return nil, err
	}
	ss := &sideStream{d: d}
	if r := C.pxcu_stream_create(d.ctx, &ss.s); r != 0 {
		return nil, cuErr("cuStreamCreate (second stream)", r)
	}
	if r := C.pxcu_event_create(d.ctx, &ss.ready); r != 0 {
		ss.close()
		return nil, cuErr("cuEventCreate", r)
	}
	if r := C.pxcu_event_create(d.ctx, &ss.done); r != 0 {
		ss.close()
		return nil, cuErr("cuEventCreate", r)
	}
	return ss, nil
}

// after orders the side stream after the work enqueued so far on the
// device's stream.
func (ss *sideStream) after() error {
	d := ss.d
	if r := C.pxcu_event_record(d.ctx, ss.ready, d.stream); r != 0 {
		return cuErr("cuEventRecord", r)
	}
	return cuErr("cuStreamWaitEvent", C.pxcu_stream_wait_event(d.ctx, ss.s, ss.ready))
}

// join orders the device's stream after the work enqueued so far on the
// side stream.
func (ss *sideStream) join() error {
	d := ss.d
	if r := C.pxcu_event_record(d.ctx, ss.done, ss.s); r != 0 {
		return cuErr("cuEventRecord", r)
	}
	return cuErr("cuStreamWaitEvent", C.pxcu_stream_wait_event(d.ctx, d.stream, ss.done))
}

// close releases the events and the stream. Work still enqueued on the
// stream completes first (cuStreamDestroy does not wait, it defers).
func (ss *sideStream) close() {
	d := ss.d
	if ss.ready != nil {
		C.pxcu_event_destroy(d.ctx, ss.ready)
	}
	if ss.done != nil {
		C.pxcu_event_destroy(d.ctx, ss.done)
	}
	if ss.s != nil {
		C.pxcu_stream_destroy(d.ctx, ss.s)
	}
	ss.ready, ss.done, ss.s = nil, nil, nil
}
