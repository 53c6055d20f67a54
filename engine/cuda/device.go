//go:build cgo

package cuda

// #include "shim.h"
import "C"

import (
	"fmt"
	"math"
	"strconv"
	"sync"
	"unsafe"

	"github.com/parallax-engine/parallax/engine"
)

func init() { engine.Register(backend{}) }

// What a CUDA device offers: every op, and the optional capabilities
// (besides these, engine.Timer in timing.go, engine.Profiler in profile.go,
// engine.MemoryReporter in meminfo.go, engine.MultiTensorOps in multi.go and
// engine.GraphRecorder in graph.go).
var (
	_ engine.Device      = (*Device)(nil)
	_ engine.Collectives = (*Device)(nil)
)

type backend struct{}

func (backend) Name() string { return "cuda" }

// Device attribute numbers of the driver API (CUdevice_attribute).
const (
	attrClockRate      = 13
	attrSMCount        = 16
	attrMemClockRate   = 36
	attrBusWidth       = 37
	attrL2Size         = 38
	attrCCMajor        = 75
	attrCCMinor        = 76
	attrSmemOptinBlock = 97
)

// gpu is what Devices learns about one GPU.
type gpu struct {
	ordinal      int
	dev          C.CUdevice
	name         string
	mem          int64
	sms          int
	ccMajor      int
	ccMinor      int
	clockKHz     int
	memClockKHz  int
	busWidth     int
	l2           int
	smemOptin    int
	driver       int
	nvrtcVersion [2]int
}

var (
	gpusOnce sync.Once
	gpus     []gpu
	gpusErr  error
)

func listGPUs() ([]gpu, error) {
	gpusOnce.Do(func() {
		if err := load(); err != nil {
			gpusErr = err
			return
		}
		var n C.int
		if r := C.pxcu_device_count(&n); r != 0 {
			gpusErr = cuErr("cuDeviceGetCount", r)
			return
		}
		if n == 0 {
			gpusErr = fmt.Errorf("the CUDA driver reports no GPU")
			return
		}
		var drv C.int
		C.pxcu_driver_version(&drv)
		var maj, mnr C.int
		C.pxcu_nvrtc_version(&maj, &mnr)
		for i := 0; i < int(n); i++ {
			g := gpu{ordinal: i, driver: int(drv), nvrtcVersion: [2]int{int(maj), int(mnr)}}
			if r := C.pxcu_device_get(&g.dev, C.int(i)); r != 0 {
				gpusErr = cuErr("cuDeviceGet", r)
				return
			}
			var name [256]C.char
			C.pxcu_device_name(&name[0], 256, g.dev)
			g.name = C.GoString(&name[0])
			var mem C.size_t
			C.pxcu_device_mem(&mem, g.dev)
			g.mem = int64(mem)
			attr := func(a int) int {
				var v C.int
				if C.pxcu_device_attr(&v, C.int(a), g.dev) != 0 {
					return 0
				}
				return int(v)
			}
			g.sms, g.ccMajor, g.ccMinor = attr(attrSMCount), attr(attrCCMajor), attr(attrCCMinor)
			g.clockKHz, g.memClockKHz, g.busWidth = attr(attrClockRate), attr(attrMemClockRate), attr(attrBusWidth)
			g.l2, g.smemOptin = attr(attrL2Size), attr(attrSmemOptinBlock)
			gpus = append(gpus, g)
		}
	})
	return gpus, gpusErr
}

// peakTFLOPs estimates the dense bf16 tensor-core rate (f32 accumulate) for
// model FLOP utilisation: FLOPs per SM per clock by architecture times SMs
// times the boost clock at which the vendor quotes it.
func (g gpu) peakTFLOPs() float64 {
	perSM := 1024.0 // Turing and consumer Ampere/Ada
	clock := float64(g.clockKHz) * 1e3
	switch {
	case g.ccMajor == 8 && g.ccMinor == 0:
		perSM = 2048
	case g.ccMajor == 9:
		perSM = 4096
		clock = 1.83e9 // H100/H200 SXM datasheet clock for 989 TFLOP/s
	case g.ccMajor >= 10:
		perSM = 8192
	}
	if clock == 0 {
		clock = 1.5e9
	}
	return perSM * float64(g.sms) * clock / 1e12
}

func (g gpu) info(o Options) engine.DeviceInfo {
	bw := float64(g.memClockKHz) * 1e3 * 2 * float64(g.busWidth) / 8 / 1e9
	return engine.DeviceInfo{
		Backend: "cuda", Index: g.ordinal, Name: g.name, Kind: engine.KindDiscreteGPU, Memory: g.mem,
		DTypes: []engine.DType{engine.F32, engine.BF16, engine.F16},
		Features: map[string]string{
			"compute_capability": fmt.Sprintf("%d.%d", g.ccMajor, g.ccMinor),
			"arch":               archFor(g.ccMajor, g.ccMinor, g.nvrtcVersion[0], nil),
			"sms":                strconv.Itoa(g.sms),
			"peak_tflops":        strconv.FormatFloat(math.Round(g.peakTFLOPs()), 'f', 0, 64),
			"mem_gbs":            strconv.FormatFloat(math.Round(bw), 'f', 0, 64),
			"l2_mib":             strconv.Itoa(g.l2 >> 20),
			"smem_per_block_kib": strconv.Itoa(g.smemOptin >> 10),
			"driver":             fmt.Sprintf("%d.%d", g.driver/1000, g.driver%1000/10),
			"nvrtc":              fmt.Sprintf("%d.%d", g.nvrtcVersion[0], g.nvrtcVersion[1]),
			"compute":            "bf16/f16 tensor cores with f32 accumulation; f32 exact (no TF32)",
			"attention path":     g.attentionPath(o),
		},
		Kernels: o.kernels(g.hasWgmma(), hasTensorMaps()),
	}
}

// hasWgmma reports whether attention_wgmma.cu's kernels are compiled for
// this GPU: Hopper with NVRTC 12 or newer, which targets sm_90a.
func (g gpu) hasWgmma() bool {
	return archFor(g.ccMajor, g.ccMinor, g.nvrtcVersion[0], nil) == "sm_90a"
}

// attentionPath names the bf16 attention kernels this GPU runs under o.
func (g gpu) attentionPath(o Options) string {
	if g.hasWgmma() {
		if o.NoWGMMA {
			return "mma.sync (wgmma switched off by PARALLAX_CUDA_WGMMA=0)"
		}
		return "wgmma forward and backward (bf16, D 64/128) + mma.sync decode and other head sizes"
	}
	return "mma.sync"
}

func (backend) Devices() ([]engine.DeviceInfo, error) {
	gs, err := listGPUs()
	if err != nil {
		return nil, err
	}
	o, err := optionsFromEnv()
	if err != nil {
		return nil, err
	}
	out := make([]engine.DeviceInfo, len(gs))
	for i, g := range gs {
		out[i] = g.info(o)
	}
	return out, nil
}

func (backend) Open(index int) (engine.Device, error) {
	o, err := optionsFromEnv()
	if err != nil {
		return nil, err
	}
	return OpenWith(index, o)
}

// OpenWith opens cuda:index with kernel options o instead of the ones the
// environment sets (engine.Open("cuda:N") reads those).
func OpenWith(index int, o Options) (*Device, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	gs, err := listGPUs()
	if err != nil {
		return nil, err
	}
	if index < 0 || index >= len(gs) {
		return nil, fmt.Errorf("cuda has %d device(s), not cuda:%d: %w", len(gs), index, engine.ErrNoDevice)
	}
	return open(gs[index], o)
}

// Options returns the device's kernel choices.
func (d *Device) Options() Options { return d.opts }

// SetOptions replaces the device's kernel choices (for tests and
// benchmarks that compare kernels on one device); ops enqueued afterwards
// use them. It fails, changing nothing, on an invalid choice.
func (d *Device) SetOptions(o Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	d.opts = o
	d.info.Kernels = o.kernels(d.g.hasWgmma(), hasTensorMaps())
	d.info.Features["attention path"] = d.g.attentionPath(o)
	return nil
}

// Device is one GPU: its primary context, one stream on which every op is
// enqueued in order, a caching allocator, the compiled kernel modules and a
// cuBLASLt handle.
//
// Threads: a CUDA context is current per OS thread and Go moves goroutines
// between threads, so every C wrapper makes this device's context current
// (cuCtxSetCurrent, a few tens of nanoseconds) before its driver call. No
// goroutine is locked to a thread and any goroutine may drive the device
// (one at a time, as engine.Device requires).
type Device struct {
	g               gpu
	opts            Options // kernel choices (options.go)
	info            engine.DeviceInfo
	ctx             C.CUcontext
	stream          C.CUstream
	alloc           allocator
	mods            *modules
	lt              unsafe.Pointer
	ltWS            *buffer
	algos           map[C.pxcu_gemm]ltAlgo
	errBuf          *buffer // [4]int32: code and details of the first kernel-detected error
	decPart, decCnt *buffer // decode split partials and completion counters
	prof            profiler
	mt              map[string]*mtTable // multi-tensor tables by content (multi.go)
	ropeTabs        map[ropeKey]*buffer // RoPE frequency tables (normrope.go)
	prepCnt         *buffer             // gemv_norm_prep's per-head counters, 0 between launches (fused.go)
	rec             *recording          // the graph being recorded (graph.go)
	scratchGen      uint64              // bumped when a persistent scratch is reallocated (stales graphs)
	closed          bool
}

func open(g gpu, o Options) (*Device, error) {
	d := &Device{g: g, opts: o, info: g.info(o), algos: map[C.pxcu_gemm]ltAlgo{}}
	if r := C.pxcu_ctx_retain(&d.ctx, g.dev); r != 0 {
		return nil, cuErr("cuDevicePrimaryCtxRetain", r)
	}
	if r := C.pxcu_stream_create(d.ctx, &d.stream); r != 0 {
		C.pxcu_ctx_release(g.dev)
		return nil, cuErr("cuStreamCreate", r)
	}
	d.alloc.d = d
	var err error
	if d.mods, err = loadModules(d); err != nil {
		d.Close()
		return nil, err
	}
	if r := C.pxcu_lt_create(d.ctx, &d.lt); r != 0 {
		d.Close()
		return nil, fmt.Errorf("cublasLtCreate failed (status %d)", int(r))
	}
	if d.ltWS, err = d.alloc.get(ltWorkspace); err != nil {
		d.Close()
		return nil, err
	}
	if d.errBuf, err = d.alloc.get(16); err != nil {
		d.Close()
		return nil, err
	}
	if err := cuErr("memset", C.pxcu_memset8(d.ctx, C.CUdeviceptr(d.errBuf.ptr), 0, 16, d.stream)); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// Info describes the device.
func (d *Device) Info() engine.DeviceInfo { return d.info }

// Alloc returns a zero-filled tensor.
func (d *Device) Alloc(dtype engine.DType, shape ...int) (*engine.Tensor, error) {
	s, n, err := engine.CheckAlloc("cuda", dtype, shape)
	if err != nil {
		return nil, err
	}
	b, err := d.alloc.get(n)
	if err != nil {
		return nil, fmt.Errorf("cuda alloc %v%v: %w", dtype, s, err)
	}
	if n > 0 {
		if err := d.memOp("memset", n, func() C.CUresult {
			return C.pxcu_memset8(d.ctx, C.CUdeviceptr(b.ptr), 0, C.size_t(n), d.stream)
		}); err != nil {
			d.alloc.put(b)
			return nil, err
		}
	}
	return engine.NewTensor(d, dtype, s, b), nil
}

// Free returns the tensor's memory to the allocator's cache. Work already
// enqueued that reads it runs first (one stream), so it is safe to free a
// tensor right after the op that last uses it.
func (d *Device) Free(t *engine.Tensor) {
	if t == nil || t.Device() != engine.Device(d) {
		return
	}
	if b, ok := t.Storage().(*buffer); ok {
		d.alloc.put(b)
	}
}

// Write copies little-endian bytes into t (ordered after enqueued ops).
func (d *Device) Write(t *engine.Tensor, src []byte) error {
	if t.Device() != engine.Device(d) {
		return fmt.Errorf("cuda write: tensor %v is not on %s", t, d.info.ID())
	}
	if len(src) != t.Bytes() {
		return fmt.Errorf("cuda write %v: got %d bytes, want %d", t, len(src), t.Bytes())
	}
	if len(src) == 0 {
		return nil
	}
	if d.rec != nil {
		return d.refuse("write")
	}
	return d.memOp("memcpy HtoD", int64(len(src)), func() C.CUresult {
		return C.pxcu_htod(d.ctx, C.CUdeviceptr(ptr(t)), unsafe.Pointer(&src[0]), C.size_t(len(src)), d.stream)
	})
}

// htod copies host bytes to device memory at p, ordered after enqueued ops.
func (d *Device) htod(p uint64, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return d.memOp("memcpy HtoD", int64(len(src)), func() C.CUresult {
		return C.pxcu_htod(d.ctx, C.CUdeviceptr(p), unsafe.Pointer(&src[0]), C.size_t(len(src)), d.stream)
	})
}

// Read waits for enqueued ops and copies t's bytes into dst. An error a
// kernel raised is reported (as by Sync) instead of the copy.
func (d *Device) Read(t *engine.Tensor, dst []byte) error {
	if t.Device() != engine.Device(d) {
		return fmt.Errorf("cuda read: tensor %v is not on %s", t, d.info.ID())
	}
	if len(dst) != t.Bytes() {
		return fmt.Errorf("cuda read %v: got a %d-byte buffer, want %d", t, len(dst), t.Bytes())
	}
	if d.rec != nil {
		return d.refuse("read")
	}
	if len(dst) == 0 {
		return d.Sync()
	}
	if err := cuErr("memcpy DtoH", C.pxcu_dtoh(d.ctx, unsafe.Pointer(&dst[0]), C.CUdeviceptr(ptr(t)), C.size_t(len(dst)), d.stream)); err != nil {
		return err
	}
	return d.kernelError()
}

// Sync waits for every enqueued op and returns the first error one raised:
// a CUDA error, or a condition a kernel detected (an out-of-range token id,
// an invalid cache length, a singular LLA system).
func (d *Device) Sync() error {
	if d.rec != nil {
		return d.refuse("sync")
	}
	if err := cuErr("stream synchronize", C.pxcu_stream_sync(d.ctx, d.stream)); err != nil {
		return err
	}
	return d.kernelError()
}

func (d *Device) kernelError() error {
	var e [4]int32
	if r := C.pxcu_dtoh(d.ctx, unsafe.Pointer(&e[0]), C.CUdeviceptr(d.errBuf.ptr), 16, d.stream); r != 0 {
		return cuErr("memcpy DtoH", r)
	}
	if e[0] == 0 {
		return nil
	}
	C.pxcu_memset8(d.ctx, C.CUdeviceptr(d.errBuf.ptr), 0, 16, d.stream)
	if d.decCnt != nil { // a failed decode may have left counters behind
		C.pxcu_memset8(d.ctx, C.CUdeviceptr(d.decCnt.ptr), 0, C.size_t(d.decCnt.size), d.stream)
	}
	return kernelErr(e)
}

// Kernel-detected error codes (shaders/cuda/common.cuh).
func kernelErr(e [4]int32) error {
	switch e[0] {
	case 1:
		return &engine.ArgError{Op: "embedding", Operand: "ids", Msg: fmt.Sprintf("id %d at position %d is outside [0, %d)", e[1], e[2], e[3])}
	case 2:
		return &engine.ArgError{Op: "decode attention", Operand: "lens", Msg: fmt.Sprintf("lens[%d] = %d is outside [Lq, capacity %d]", e[1], e[2], e[3])}
	case 3:
		return &engine.ArgError{Op: "lla", Msg: fmt.Sprintf("row %d (position %d): the %d x %d system is singular (omega - mu.rho* <= 1e-9 omega, or the output is not finite)", e[1], e[2], e[3], e[3])}
	case 5:
		return &engine.ArgError{Op: "kv append at", Operand: "starts", Msg: fmt.Sprintf("starts[%d] = %d is outside [0, capacity %d - n]", e[1], e[2], e[3])}
	case 4:
		return &engine.ArgError{Op: "cross entropy", Operand: "targets", Msg: fmt.Sprintf("target %d of row %d is outside [0, %d) and not the ignore index", e[1], e[2], e[3])}
	}
	return fmt.Errorf("cuda: kernel reported error %d (%d, %d, %d)", e[0], e[1], e[2], e[3])
}

// Close waits for enqueued work and releases everything the device holds.
func (d *Device) Close() error {
	if d.closed {
		return nil
	}
	d.closed = true
	err := cuErr("stream synchronize", C.pxcu_stream_sync(d.ctx, d.stream))
	if d.lt != nil {
		C.pxcu_lt_destroy(d.lt)
	}
	if d.mods != nil {
		d.mods.unload()
	}
	d.mtFree()
	for _, b := range d.ropeTabs {
		d.alloc.put(b)
	}
	if d.prepCnt != nil {
		d.alloc.put(d.prepCnt)
	}
	d.alloc.release()
	if e := d.profFree(); err == nil {
		err = e
	}
	C.pxcu_stream_destroy(d.ctx, d.stream)
	C.pxcu_ctx_release(d.g.dev)
	return err
}

// own checks that every tensor lives on this device.
func (d *Device) own(op string, ts ...*engine.Tensor) error {
	return engine.CheckDevice(op, d, ts...)
}

// MemInfo reports the free and total device memory in bytes.
func (d *Device) MemInfo() (free, total int64, err error) {
	var f, t C.size_t
	if r := C.pxcu_mem_info(d.ctx, &f, &t); r != 0 {
		return 0, 0, cuErr("cuMemGetInfo", r)
	}
	return int64(f), int64(t), nil
}
