// Package cpu is the pure-Go reference backend: every engine op, in float32
// with float64 where accuracy needs it, parallel over all cores. It is the
// fallback for machines without a GPU and the reference the GPU backends are
// certified against. Importing it registers the "cpu" backend.
package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"sync"

	"github.com/parallax-engine/parallax/engine"
)

func init() { engine.Register(backend{}) }

type backend struct{}

func (backend) Name() string { return "cpu" }

func (backend) Devices() ([]engine.DeviceInfo, error) {
	return []engine.DeviceInfo{info()}, nil
}

func (backend) Open(index int) (engine.Device, error) {
	if index != 0 {
		return nil, fmt.Errorf("cpu has one device (cpu:0), not cpu:%d: %w", index, engine.ErrNoDevice)
	}
	return New(), nil
}

// Threads is the number of worker goroutines ops use: PARALLAX_CPU_THREADS if
// set to a positive integer, else GOMAXPROCS.
func Threads() int {
	if s := os.Getenv("PARALLAX_CPU_THREADS"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			return n
		}
	}
	return runtime.GOMAXPROCS(0)
}

func info() engine.DeviceInfo {
	return engine.DeviceInfo{
		Backend: "cpu", Index: 0,
		Name:   fmt.Sprintf("%s/%s CPU, %d threads", runtime.GOOS, runtime.GOARCH, Threads()),
		Kind:   engine.KindCPU,
		DTypes: []engine.DType{engine.F32, engine.BF16, engine.F16},
		Features: map[string]string{
			"compute": "f32 (bf16/f16 storage is widened on load)",
		},
	}
}

// Device is the CPU device. Ops run synchronously on the calling goroutine
// and a pool of workers; errors found while running (an out-of-range token
// id, say) are returned by the op and also kept for the next Sync.
type Device struct {
	threads int
	pending engine.PendingError
}

// New returns a CPU device using Threads() workers.
func New() *Device { return &Device{threads: Threads()} }

// Info describes the device.
func (d *Device) Info() engine.DeviceInfo { return info() }

// Alloc returns a zero-filled tensor backed by a Go slice: []float32 for F32,
// []uint16 (raw bits) for BF16 and F16, []int32 for I32, []int8 for I8.
func (d *Device) Alloc(dtype engine.DType, shape ...int) (*engine.Tensor, error) {
	s, _, err := engine.CheckAlloc("cpu", dtype, shape)
	if err != nil {
		return nil, err
	}
	n := s.Numel()
	var buf any
	switch dtype {
	case engine.F32:
		buf = make([]float32, n)
	case engine.BF16, engine.F16:
		buf = make([]uint16, n)
	case engine.I32:
		buf = make([]int32, n)
	case engine.I8:
		buf = make([]int8, n)
	}
	return engine.NewTensor(d, dtype, s, buf), nil
}

// Free drops the tensor's memory (the garbage collector reclaims it).
func (d *Device) Free(t *engine.Tensor) {}

// Write copies little-endian bytes into t.
func (d *Device) Write(t *engine.Tensor, src []byte) error {
	if t.Device() != engine.Device(d) {
		return fmt.Errorf("cpu write: tensor %v is not on cpu:0", t)
	}
	if len(src) != t.Bytes() {
		return fmt.Errorf("cpu write %v: got %d bytes, want %d", t, len(src), t.Bytes())
	}
	switch b := t.Storage().(type) {
	case []float32:
		for i := range b {
			b[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case []uint16:
		for i := range b {
			b[i] = binary.LittleEndian.Uint16(src[2*i:])
		}
	case []int32:
		for i := range b {
			b[i] = int32(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case []int8:
		for i := range b {
			b[i] = int8(src[i])
		}
	}
	return nil
}

// Read copies t's contents as little-endian bytes into dst.
func (d *Device) Read(t *engine.Tensor, dst []byte) error {
	if t.Device() != engine.Device(d) {
		return fmt.Errorf("cpu read: tensor %v is not on cpu:0", t)
	}
	if len(dst) != t.Bytes() {
		return fmt.Errorf("cpu read %v: got a %d-byte buffer, want %d", t, len(dst), t.Bytes())
	}
	switch b := t.Storage().(type) {
	case []float32:
		for i, v := range b {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
		}
	case []uint16:
		for i, v := range b {
			binary.LittleEndian.PutUint16(dst[2*i:], v)
		}
	case []int32:
		for i, v := range b {
			binary.LittleEndian.PutUint32(dst[4*i:], uint32(v))
		}
	case []int8:
		for i, v := range b {
			dst[i] = byte(v)
		}
	}
	return nil
}

// Sync returns (and clears) the first error raised by an op since the last
// Sync. CPU ops have already finished when they return.
func (d *Device) Sync() error { return d.pending.Take() }

// Close releases nothing; the CPU device needs no teardown.
func (d *Device) Close() error { return nil }

// fail records err for Sync and returns it.
func (d *Device) fail(err error) error { return d.pending.Fail(err) }

// own checks that every tensor lives on this device.
func (d *Device) own(op string, ts ...*engine.Tensor) error {
	return engine.CheckDevice(op, d, ts...)
}

// floats returns t's values as float32. For F32 it is the tensor's own
// storage (callers must not write to it); other dtypes are widened into a
// new slice.
func floats(t *engine.Tensor) []float32 {
	switch b := t.Storage().(type) {
	case []float32:
		return b
	case []uint16:
		out := make([]float32, len(b))
		conv := engine.BF16ToFloat32
		if t.DType() == engine.F16 {
			conv = engine.F16ToFloat32
		}
		for i, h := range b {
			out[i] = conv(h)
		}
		return out
	case []int32:
		out := make([]float32, len(b))
		for i, v := range b {
			out[i] = float32(v)
		}
		return out
	}
	return nil
}

// output returns a float32 slice to write t's new values into and a commit
// function that stores them into t (rounding to t's dtype). For F32 the slice
// is t's storage and commit does nothing. When accumulate is set the slice
// starts with t's current values.
func output(t *engine.Tensor, accumulate bool) ([]float32, func()) {
	if b, ok := t.Storage().([]float32); ok {
		return b, func() {}
	}
	var buf []float32
	if accumulate {
		buf = floats(t)
	} else {
		buf = make([]float32, t.Numel())
	}
	return buf, func() { store(t, buf) }
}

// store writes vals into t, converting to t's dtype.
func store(t *engine.Tensor, vals []float32) {
	switch b := t.Storage().(type) {
	case []float32:
		copy(b, vals)
	case []uint16:
		conv := engine.BF16FromFloat32
		if t.DType() == engine.F16 {
			conv = engine.F16FromFloat32
		}
		for i, v := range vals {
			b[i] = conv(v)
		}
	case []int32:
		for i, v := range vals {
			b[i] = int32(v)
		}
	}
}

// ints returns an I32 tensor's storage.
func ints(t *engine.Tensor) []int32 { return t.Storage().([]int32) }

// parallel runs fn over [0, n) split into contiguous chunks, one per worker
// (fewer when n is small), and waits for all of them.
func (d *Device) parallel(n int, fn func(lo, hi int)) {
	d.parallelMin(n, 1, fn)
}

// parallelMin is parallel with at least minChunk items per worker, so tiny
// loops stay on one goroutine.
func (d *Device) parallelMin(n, minChunk int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	workers := min(d.threads, (n+minChunk-1)/max(minChunk, 1))
	if workers <= 1 {
		fn(0, n)
		return
	}
	chunk := (n + workers - 1) / workers
	var wg sync.WaitGroup
	for lo := 0; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(lo, hi)
		}()
	}
	wg.Wait()
}
