package vulkan

/*
#include "pxvk.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"maps"
	"runtime"
	"time"
	"unsafe"

	vk "github.com/vulkan-go/vulkan"

	"github.com/parallax-engine/parallax/engine"
)

// Device is one opened Vulkan device: a logical device with one compute
// queue, a pooling allocator, the pipelines built so far and the batch of
// commands being recorded. Ops validate their arguments, record one or more
// dispatches (with the barriers they need) and return; the batch is
// submitted when the host needs a result (Read, Sync) or when it grows
// large. Methods must be called from one goroutine at a time.
type Device struct {
	rt   *vkRuntime
	pd   *physDevice
	info engine.DeviceInfo
	opts Options // kernel and feature choices (options.go)

	dev   vk.Device
	queue vk.Queue
	px    *C.pxDevice

	push     bool       // push descriptors (else a descriptor pool per batch)
	no16     bool       // 16-bit tensors through 32-bit words and atomics
	coop     bool       // NV cooperative-matrix kernels (matmul and attention)
	mm       matmulPath // the cooperative-matrix matmul kernel, if any
	subgroup int        // subgroup size
	khrAttn  int        // the KHR attention kernels' fragment edge; 0: not run (khrAttnWhy)

	khrAttnWhy string // why the KHR attention kernels are not run, where the matmul path is KHR

	fenceSpin time.Duration // how long a wait polls a fence before blocking (fenceSpinFor)

	mem   *allocator // tensors
	stage *allocator // host-visible staging for uploads and readbacks (nil on UMA)

	pipes pipelines
	b     batcher

	status *region // device-side error flags (host-visible)
	dummy  *region // bound where an optional operand is absent

	ropeTables map[ropeKey]*region
	queries    handle // timestamp query pool (Timed)
	prof       profiler

	decPart    *region             // decode's split partial states, grown as needed (ops_attention.go)
	scratchGen uint64              // bumped when persistent scratch is reallocated (stales graphs)
	graphs     map[*graph]struct{} // recorded graphs not yet freed (graph.go)

	pending engine.PendingError // the first error raised while executing, for Sync
	closed  bool

	present bool // VK_KHR_swapchain is enabled (OpenPresenting)
	wwf     bool // shaderStorageImageWriteWithoutFormat is enabled
}

// What a Vulkan device offers: every op, and the optional capabilities
// (besides these, engine.Profiler in profile.go, engine.MemoryReporter in
// meminfo.go and engine.GraphRecorder in graph.go).
var (
	_ engine.Device      = (*Device)(nil)
	_ engine.Timer       = (*Device)(nil)
	_ engine.ArgMaxer    = (*Device)(nil)
	_ engine.MultiLinear = (*Device)(nil)
	_ engine.MLPFuser    = (*Device)(nil)
)

// newDevice creates the logical device for p under the environment's
// options.
func newDevice(rt *vkRuntime, p *physDevice) (*Device, error) { return newDeviceFor(rt, p, false) }

// newDeviceFor creates the logical device for p under the environment's
// options; present also enables what drawing into a window's swapchain
// needs (OpenPresenting).
func newDeviceFor(rt *vkRuntime, p *physDevice, present bool) (*Device, error) {
	o, err := optionsFromEnv()
	if err != nil {
		return nil, err
	}
	return newDeviceWith(rt, p, present, o)
}

// OpenWith opens Vulkan device index with options o instead of the ones
// the environment sets (Open and engine.Open("vulkan:N") read those).
func OpenWith(index int, o Options) (*Device, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	rt, p, err := usablePhys(index)
	if err != nil {
		return nil, err
	}
	return newDeviceWith(rt, p, false, o)
}

// Options returns the device's kernel and feature choices.
func (d *Device) Options() Options { return d.opts }

// SetOptions replaces the device's kernel choices (for tests and
// benchmarks that compare kernels on one device); ops recorded afterwards
// use them. The choices read at open only (NoPushDescriptors,
// No16BitStorage, PipelineStats) must stay as they are. It fails, changing
// nothing, on an invalid choice.
func (d *Device) SetOptions(o Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	if o.NoPushDescriptors != d.opts.NoPushDescriptors || o.No16BitStorage != d.opts.No16BitStorage ||
		o.PipelineStats != d.opts.PipelineStats || o.Coop != d.opts.Coop {
		return errors.New("vulkan: push descriptors, 16-bit storage, pipeline statistics and the cooperative-matrix path are chosen at open (OpenWith)")
	}
	d.opts = o
	d.info.Kernels = d.kernels(o)
	return nil
}

// listedKernels is a device listing's DeviceInfo.Kernels: what the device
// would run if opened under the environment's options.
func (p *physDevice) listedKernels() map[string]string {
	o, err := optionsFromEnv()
	if err != nil {
		return map[string]string{"options": err.Error()}
	}
	return o.kernels(p.matmulPath(o), int(p.x.subgroupSize))
}

// newDeviceWith creates the logical device for p under options o.
func newDeviceWith(rt *vkRuntime, p *physDevice, present bool, o Options) (*Device, error) {
	d := &Device{rt: rt, pd: p, info: p.info(), opts: o, subgroup: int(p.x.subgroupSize), present: present}
	d.info.Features = maps.Clone(d.info.Features)
	d.push = p.x.hasPushDescriptor != 0 && p.x.maxPushDescriptors >= maxBindings && !o.NoPushDescriptors
	d.no16 = !p.has16BitStorage() || o.No16BitStorage
	d.mm = p.matmulPath(o)
	d.coop = d.mm.kind == coopNV
	p.pathFeatures(d.info.Features, d.mm) // under o, not the environment
	d.fenceSpin = fenceSpinFor(p.devType)
	if d.subgroup <= 0 {
		d.subgroup = 1
	}

	var exts []string
	if d.push {
		exts = append(exts, "VK_KHR_push_descriptor\x00")
	}
	en := C.pxEnable{}
	if !d.no16 || d.mm.kind != coopNone {
		en.chain16Bit = 1
	}
	if d.coop {
		exts = append(exts, "VK_NV_cooperative_matrix\x00")
		if p.apiVersion < vk.MakeVersion(1, 2, 0) {
			exts = append(exts, "VK_KHR_shader_float16_int8\x00", "VK_KHR_vulkan_memory_model\x00")
		}
		en.chainFloat16, en.chainMemoryModel, en.chainCoopNV = 1, 1, 1
	}
	if d.mm.kind == coopKHR {
		exts = append(exts, "VK_KHR_cooperative_matrix\x00")
		if p.apiVersion < vk.MakeVersion(1, 2, 0) {
			exts = append(exts, "VK_KHR_shader_float16_int8\x00", "VK_KHR_vulkan_memory_model\x00")
		}
		en.chainFloat16, en.chainMemoryModel, en.chainCoopKHR = 1, 1, 1
	}
	stats := o.PipelineStats && hasString(p.exts, "VK_KHR_pipeline_executable_properties")
	if stats {
		exts = append(exts, "VK_KHR_pipeline_executable_properties\x00")
		en.chainExecStats = 1
	}
	var chain unsafe.Pointer
	if present {
		exts = append(exts, "VK_KHR_swapchain\x00")
		d.wwf = C.px_write_without_format((C.pxGetInstanceProcAddr)(rt.gipa), unsafe.Pointer(rt.instance), unsafe.Pointer(p.handle)) != 0
		chain = C.px_feature_chain_present(&en, C.pxBool32(b2u(d.wwf)))
	} else {
		chain = C.px_feature_chain(&en)
	}
	if chain == nil {
		return nil, errors.New("vulkan: out of host memory")
	}
	defer C.px_free(chain)

	qci := []vk.DeviceQueueCreateInfo{{
		SType:            vk.StructureTypeDeviceQueueCreateInfo,
		QueueFamilyIndex: uint32(p.queueFamily),
		QueueCount:       1,
		PQueuePriorities: []float32{1},
	}}
	ci := &vk.DeviceCreateInfo{
		SType:                   vk.StructureTypeDeviceCreateInfo,
		PNext:                   chain, // VkPhysicalDeviceFeatures2 and its chain, in C memory
		QueueCreateInfoCount:    1,
		PQueueCreateInfos:       qci,
		EnabledExtensionCount:   uint32(len(exts)),
		PpEnabledExtensionNames: exts,
	}
	var dev vk.Device
	res := vk.CreateDevice(p.handle, ci, nil, &dev)
	// The binding stores a pointer to the Go slice of priorities in its C
	// copy of the create info without keeping the slice alive.
	runtime.KeepAlive(ci)
	runtime.KeepAlive(qci)
	if res != vk.Success {
		return nil, fmt.Errorf("vulkan:%d (%s): %w", p.index, p.name, vkErr("vkCreateDevice", res))
	}
	d.dev = dev
	var q vk.Queue // a local: cgo refuses pointers into structs holding Go pointers
	vk.GetDeviceQueue(dev, uint32(p.queueFamily), 0, &q)
	d.queue = q
	var cerr [256]C.char
	push := C.int(0)
	if d.push {
		push = 1
	}
	d.px = C.px_device_new((C.pxGetInstanceProcAddr)(rt.gipa), unsafe.Pointer(rt.instance), unsafe.Pointer(dev), push, &cerr[0], C.int(len(cerr)))
	if d.px == nil {
		vk.DestroyDevice(dev, nil)
		return nil, fmt.Errorf("vulkan:%d: %s", p.index, C.GoString(&cerr[0]))
	}
	if stats {
		C.px_device_capture_stats(d.px, (C.pxGetInstanceProcAddr)(rt.gipa), unsafe.Pointer(rt.instance), 1)
	}
	if err := d.init(); err != nil {
		d.Close()
		return nil, fmt.Errorf("vulkan:%d (%s): %w", p.index, p.name, err)
	}
	if d.mm.kind != coopNone {
		// The tensor-core path is checked against the scalar one once per
		// device before ops may use it.
		if why := d.checkCoop(); why != "" {
			d.coop = false
			d.mm = matmulPath{why: why}
			p.pathFeatures(d.info.Features, d.mm)
		}
	}
	if d.mm.kind == coopKHR {
		// So are the KHR attention kernels, where the device takes them.
		f, why := khrAttention(d.mm, d.subgroup)
		if why == "" {
			d.khrAttn = f
			if why = d.checkAttnKHR(); why != "" {
				d.khrAttn = 0
				why = "self-test: " + why
				d.info.Features["attention path"] = "scalar (KHR attention " + why + ")"
			}
		}
		d.khrAttnWhy = why
	}
	d.info.Kernels = d.kernels(o)
	return d, nil
}

// kernels is DeviceInfo.Kernels under o for the open device: o.kernels,
// with the KHR attention kernels dropped where their self-test failed.
func (d *Device) kernels(o Options) map[string]string {
	m := o.kernels(d.mm, d.subgroup)
	if d.mm.kind == coopKHR && d.khrAttn == 0 && o.Attention != "scalar" {
		m["attention forward"] = "attn_fwd (scalar; KHR: " + d.khrAttnWhy + ")"
		m["attention backward"] = "attn_bwd_pre, then attn_dq + attn_dkv (scalar; KHR: " + d.khrAttnWhy + ")"
	}
	return m
}

// init sets up memory, the batcher and the pipeline cache.
func (d *Device) init() error {
	var err error
	if d.mem, d.stage, err = newAllocators(d); err != nil {
		return err
	}
	if err := d.b.init(d); err != nil {
		return err
	}
	if err := d.pipes.init(d); err != nil {
		return err
	}
	host := d.mem
	if d.stage != nil {
		host = d.stage
	}
	if d.status, err = host.alloc(64); err != nil {
		return err
	}
	clear(d.status.bytes())
	if d.dummy, err = d.mem.alloc(16); err != nil {
		return err
	}
	d.ropeTables = map[ropeKey]*region{}
	return nil
}

// Info describes the device.
func (d *Device) Info() engine.DeviceInfo { return d.info }

// Close waits for outstanding work and releases every Vulkan object of the
// device; its tensors become invalid.
func (d *Device) Close() error {
	if d.closed {
		return nil
	}
	d.closed = true
	var err error
	if d.dev != nil {
		if d.b.ready {
			err = d.b.waitAll()
		}
		if d.b.err != nil {
			// A lost or hung device: waiting for it could block forever and
			// destroying objects it may still use is undefined; leak them.
			return d.b.err
		}
		vk.DeviceWaitIdle(d.dev)
		if d.queries != 0 {
			vk.DestroyQueryPool(d.dev, vkOf[vk.QueryPool](d.queries), nil)
		}
		d.profFree()
		d.closeGraphs()
		d.pipes.destroy()
		d.b.destroy()
		if d.stage != nil {
			d.stage.destroy()
		}
		if d.mem != nil {
			d.mem.destroy()
		}
		if d.px != nil {
			C.px_device_free(d.px)
			d.px = nil
		}
		vk.DestroyDevice(d.dev, nil)
		d.dev = nil
	}
	return err
}

// Sync submits the recorded batch, waits for every submitted batch and
// returns (and clears) the first error an op raised while executing.
func (d *Device) Sync() error {
	if d.closed {
		return errClosed
	}
	if d.b.rec != nil {
		return d.refuse("sync")
	}
	err := d.b.waitAll()
	if p := d.pending.Take(); err == nil {
		err = p
	}
	return err
}

var errClosed = errors.New("vulkan: device is closed")

// fail records err for Sync and returns it.
func (d *Device) fail(err error) error { return d.pending.Fail(err) }

// own checks that the tensors live on this device.
func (d *Device) own(op string, ts ...*engine.Tensor) error {
	if d.closed {
		return fmt.Errorf("%s: %w", op, errClosed)
	}
	return engine.CheckDevice(op, d, ts...)
}

// ValidationErrors is the number of errors VK_LAYER_KHRONOS_validation has
// reported in this process (PARALLAX_VULKAN_VALIDATION=1 enables the layer).
func ValidationErrors() int { return int(C.px_validation_error_count()) }

// ValidationEnabled reports whether the validation layer is on.
func ValidationEnabled() bool {
	rt, err := loadRuntime()
	return err == nil && rt.validation
}
