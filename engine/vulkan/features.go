package vulkan

/*
#include "pxvk.h"
*/
import "C"

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	vk "github.com/vulkan-go/vulkan"

	"github.com/parallax-engine/parallax/engine"
)

// limits are the device limits the backend plans with.
type limits struct {
	maxStorageBufferRange   uint64
	maxSharedMemory         uint32
	maxGroupCount           [3]uint32
	maxGroupInvocations     uint32
	maxGroupSize            [3]uint32
	minStorageOffsetAlign   uint64
	maxPushConstants        uint32
	maxStorageBuffersPerSet uint32
	timestampPeriod         float32 // nanoseconds per tick
	maxAllocation           uint64  // maxMemoryAllocationSize (0: unknown)
}

// memoryType is one entry of the device's memory types.
type memoryType struct {
	flags vk.MemoryPropertyFlags
	heap  uint32
}

// coopShape is one supported cooperative-matrix shape.
type coopShape struct {
	M, N, K                int
	A, B, C, Result, Scope int
}

// physDevice is what the backend knows about one physical device.
type physDevice struct {
	index       int
	handle      vk.PhysicalDevice
	name        string
	devType     vk.PhysicalDeviceType
	apiVersion  uint32
	driverVer   uint32
	vendorID    uint32
	cacheUUID   [16]byte
	lim         limits
	memTypes    []memoryType
	heapSizes   []uint64
	heapLocal   []bool
	queueFamily int    // a family with compute, -1 if none
	tsBits      uint32 // timestampValidBits of that family
	exts        []string
	x           C.pxDeviceInfo // Properties2/Features2 results
}

func queryPhysical(rt *vkRuntime, index int, pd vk.PhysicalDevice) *physDevice {
	p := &physDevice{index: index, handle: pd, queueFamily: -1}
	var props vk.PhysicalDeviceProperties
	vk.GetPhysicalDeviceProperties(pd, &props)
	props.Deref()
	props.Limits.Deref()
	p.name = vk.ToString(props.DeviceName[:])
	p.devType = props.DeviceType
	p.apiVersion = props.ApiVersion
	p.driverVer = props.DriverVersion
	p.vendorID = props.VendorID
	p.cacheUUID = props.PipelineCacheUUID
	l := &props.Limits
	p.lim = limits{
		maxStorageBufferRange:   uint64(l.MaxStorageBufferRange),
		maxSharedMemory:         l.MaxComputeSharedMemorySize,
		maxGroupCount:           l.MaxComputeWorkGroupCount,
		maxGroupInvocations:     l.MaxComputeWorkGroupInvocations,
		maxGroupSize:            l.MaxComputeWorkGroupSize,
		minStorageOffsetAlign:   uint64(l.MinStorageBufferOffsetAlignment),
		maxPushConstants:        l.MaxPushConstantsSize,
		maxStorageBuffersPerSet: l.MaxPerStageDescriptorStorageBuffers,
		timestampPeriod:         l.TimestampPeriod,
	}

	var mp vk.PhysicalDeviceMemoryProperties
	vk.GetPhysicalDeviceMemoryProperties(pd, &mp)
	mp.Deref()
	for i := range mp.MemoryTypes[:mp.MemoryTypeCount] {
		mp.MemoryTypes[i].Deref()
		p.memTypes = append(p.memTypes, memoryType{flags: vk.MemoryPropertyFlags(mp.MemoryTypes[i].PropertyFlags), heap: mp.MemoryTypes[i].HeapIndex})
	}
	for i := range mp.MemoryHeaps[:mp.MemoryHeapCount] {
		mp.MemoryHeaps[i].Deref()
		p.heapSizes = append(p.heapSizes, uint64(mp.MemoryHeaps[i].Size))
		p.heapLocal = append(p.heapLocal, vk.MemoryHeapFlags(mp.MemoryHeaps[i].Flags)&vk.MemoryHeapFlags(vk.MemoryHeapDeviceLocalBit) != 0)
	}

	var qf [64]C.pxQueueFamilyProperties
	nq := int(C.px_queue_families((C.pxGetInstanceProcAddr)(rt.gipa), unsafe.Pointer(rt.instance), unsafe.Pointer(pd), &qf[0], C.int(len(qf))))
	// Prefer a compute family without graphics (a dedicated compute queue),
	// else the first with compute.
	for pass := 0; pass < 2 && p.queueFamily < 0; pass++ {
		for i := range qf[:nq] {
			fl := vk.QueueFlags(qf[i].queueFlags)
			if fl&vk.QueueFlags(vk.QueueComputeBit) == 0 || qf[i].queueCount == 0 {
				continue
			}
			if pass == 0 && fl&vk.QueueFlags(vk.QueueGraphicsBit) != 0 {
				continue
			}
			p.queueFamily, p.tsBits = i, uint32(qf[i].timestampValidBits)
			break
		}
	}

	p.exts = deviceExtensions(rt, pd)
	names, free := cstrings(p.exts)
	C.px_query((C.pxGetInstanceProcAddr)(rt.gipa), unsafe.Pointer(rt.instance), unsafe.Pointer(pd),
		C.uint32_t(p.apiVersion), names, C.int(len(p.exts)), &p.x)
	free()
	p.lim.maxAllocation = uint64(p.x.maxMemoryAllocationSize)
	return p
}

// kind maps the Vulkan device type to the engine's Kind.
func (p *physDevice) kind() engine.Kind {
	switch p.devType {
	case vk.PhysicalDeviceTypeDiscreteGpu:
		return engine.KindDiscreteGPU
	case vk.PhysicalDeviceTypeIntegratedGpu:
		return engine.KindIntegratedGPU
	case vk.PhysicalDeviceTypeVirtualGpu:
		return engine.KindVirtualGPU
	}
	return engine.KindSoftware // CPU (lavapipe, SwiftShader) and "other"
}

// localMemory is the size of the largest device-local heap.
func (p *physDevice) localMemory() int64 {
	var m uint64
	for i, s := range p.heapSizes {
		if p.heapLocal[i] {
			m = max(m, s)
		}
	}
	return int64(m)
}

// usable reports why the backend cannot run on the device, or nil.
func (p *physDevice) usable() error {
	if p.apiVersion < vk.MakeVersion(1, 1, 0) {
		return fmt.Errorf("device %q supports Vulkan %s; 1.1 or newer is needed", p.name, versionString(p.apiVersion))
	}
	if p.queueFamily < 0 {
		return fmt.Errorf("device %q has no compute queue", p.name)
	}
	if p.x.hasProps2 == 0 {
		return fmt.Errorf("device %q: vkGetPhysicalDeviceProperties2 is unavailable", p.name)
	}
	return nil
}

// has16BitStorage reports whether 16-bit tensors can be loaded and stored
// as uint16_t (else the shaders' word-and-atomic variant is used).
func (p *physDevice) has16BitStorage() bool { return cBool(p.x.storageBuffer16BitAccess) }

// coopShapesNV lists the NV cooperative-matrix shapes.
func (p *physDevice) coopShapesNV() []coopShape {
	var out []coopShape
	for i := 0; i < int(p.x.nCoopNV); i++ {
		c := p.x.coopNVProps[i]
		out = append(out, coopShape{int(c.MSize), int(c.NSize), int(c.KSize), int(c.AType), int(c.BType), int(c.CType), int(c.DType), int(c.scope)})
	}
	return out
}

// coopShapesKHR lists the KHR cooperative-matrix shapes.
func (p *physDevice) coopShapesKHR() []coopShape {
	var out []coopShape
	for i := 0; i < int(p.x.nCoopKHR); i++ {
		c := p.x.coopKHRProps[i]
		out = append(out, coopShape{int(c.MSize), int(c.NSize), int(c.KSize), int(c.AType), int(c.BType), int(c.CType), int(c.ResultType), int(c.scope)})
	}
	return out
}

// coopMatMulNV reports whether the NV cooperative-matrix matmul kernel
// (16x16x16, f16 inputs, f32 accumulators, subgroup scope) can run, and why
// not. PARALLAX_VULKAN_COOPMAT=0 switches it off.
func (p *physDevice) coopMatMulNV() (bool, string) {
	if v := os.Getenv("PARALLAX_VULKAN_COOPMAT"); v == "0" {
		return false, "off (PARALLAX_VULKAN_COOPMAT=0)"
	}
	if p.x.hasCoopNV == 0 || !cBool(p.x.coopNV) {
		return false, "no VK_NV_cooperative_matrix"
	}
	if !cBool(p.x.shaderFloat16) || !cBool(p.x.storageBuffer16BitAccess) || !cBool(p.x.vulkanMemoryModel) {
		return false, "needs shaderFloat16, 16-bit storage and the Vulkan memory model"
	}
	if !p.hasCoopShapeNV(16, 16, 16) {
		return false, "no 16x16x16 f16 x f16 -> f32 shape"
	}
	return true, ""
}

// coopKind is a cooperative-matrix matmul kernel family.
type coopKind int

const (
	coopNone coopKind = iota // the scalar kernels only
	coopNV                   // matmul_coop (VK_NV_cooperative_matrix)
	coopKHR                  // matmul_coop_khr (VK_KHR_cooperative_matrix)
)

// matmulPath is the matmul kernel a device runs for f16 products: the
// family, the KHR kernel's fragment shape, and why (a line for `parallax
// devices`).
type matmulPath struct {
	kind  coopKind
	shape coopShape // coopKHR: M x N x K of one fragment
	why   string
}

// khrMaxFragment bounds the KHR fragment edges the kernel accepts: its
// workgroup tile is 4 fragments on a side, so 32 gives 128 x 128 tiles.
const khrMaxFragment = 32

// khrSharedBytes is the shared memory matmul_coop_khr declares for a
// fragment shape: its A and B slices (f16, 2 K-fragments deep) and the f32
// result tile.
func khrSharedBytes(s coopShape) int {
	bm, bn, tk := 4*s.M, 4*s.N, 2*s.K
	return 2*(bm*tk+tk*bn) + 4*bm*bn
}

// coopMatMulKHR returns the fragment shape the KHR cooperative-matrix
// matmul kernel runs with on the device, or why it cannot run. Of the f16
// x f16 + f32 -> f32 subgroup-scope shapes the device reports, it takes the
// largest (M N K, then M N) whose tiles fit the device's shared memory:
// 16x16x16 on NVIDIA and AMD, 8x8x8 on lavapipe.
func (p *physDevice) coopMatMulKHR() (coopShape, string) {
	if p.x.hasCoopKHR == 0 || !cBool(p.x.coopKHR) {
		return coopShape{}, "no VK_KHR_cooperative_matrix"
	}
	if !cBool(p.x.shaderFloat16) || !cBool(p.x.storageBuffer16BitAccess) || !cBool(p.x.vulkanMemoryModel) {
		return coopShape{}, "needs shaderFloat16, 16-bit storage and the Vulkan memory model"
	}
	// The kernel's workgroup is four subgroups of the reported size; a
	// device that may compile it with other sizes would leave parts of
	// the tile to no subgroup.
	sg := int(p.x.subgroupSize)
	if sg <= 0 {
		return coopShape{}, "no subgroup size reported"
	}
	if p.x.minSubgroupSize != 0 && p.x.minSubgroupSize != p.x.maxSubgroupSize {
		return coopShape{}, fmt.Sprintf("the subgroup size varies (%d..%d); the kernel needs a fixed one", p.x.minSubgroupSize, p.x.maxSubgroupSize)
	}
	if lim := min(int(p.lim.maxGroupInvocations), int(p.lim.maxGroupSize[0])); 4*sg > lim {
		return coopShape{}, fmt.Sprintf("four %d-wide subgroups exceed the workgroup limit %d", sg, lim)
	}
	var best coopShape
	found := false
	for _, s := range p.coopShapesKHR() {
		if s.A != C.PX_COMPONENT_FLOAT16 || s.B != C.PX_COMPONENT_FLOAT16 || s.C != C.PX_COMPONENT_FLOAT32 ||
			s.Result != C.PX_COMPONENT_FLOAT32 || s.Scope != C.PX_SCOPE_SUBGROUP {
			continue
		}
		if s.M <= 0 || s.N <= 0 || s.K <= 0 || s.M > khrMaxFragment || s.N > khrMaxFragment || s.K > khrMaxFragment {
			continue
		}
		if khrSharedBytes(s) > int(p.lim.maxSharedMemory) {
			continue
		}
		if !found || s.M*s.N*s.K > best.M*best.N*best.K || (s.M*s.N*s.K == best.M*best.N*best.K && s.M*s.N > best.M*best.N) {
			best, found = s, true
		}
	}
	if !found {
		return coopShape{}, "no f16 x f16 -> f32 subgroup shape that fits (" + shapeList(p.coopShapesKHR()) + ")"
	}
	return best, ""
}

// matmulPath chooses the cooperative-matrix matmul kernel under o: NV
// where it runs (the faster, tuned kernel, and the one the tensor-core
// attention kernels share features with), else KHR; o.Coop forces one or
// neither, and PARALLAX_VULKAN_COOPMAT=0 switches both off.
func (p *physDevice) matmulPath(o Options) matmulPath {
	if os.Getenv("PARALLAX_VULKAN_COOPMAT") == "0" {
		return matmulPath{why: "off (PARALLAX_VULKAN_COOPMAT=0)"}
	}
	mode := o.Coop
	if mode == "off" {
		return matmulPath{why: "off (" + EnvCoop + "=off)"}
	}
	nvOK, nvWhy := false, "not chosen ("+EnvCoop+"="+mode+")"
	if mode != "khr" {
		nvOK, nvWhy = p.coopMatMulNV()
	}
	if nvOK {
		why := "VK_NV_cooperative_matrix 16x16x16"
		if mode == "nv" {
			why += ", forced (" + EnvCoop + "=nv)"
		}
		return matmulPath{kind: coopNV, why: why}
	}
	if mode == "nv" {
		return matmulPath{why: "NV forced (" + EnvCoop + "=nv) but " + nvWhy}
	}
	shape, khrWhy := p.coopMatMulKHR()
	if khrWhy != "" {
		if mode == "khr" {
			return matmulPath{why: "KHR forced (" + EnvCoop + "=khr) but " + khrWhy}
		}
		return matmulPath{why: "NV: " + nvWhy + "; KHR: " + khrWhy}
	}
	why := fmt.Sprintf("VK_KHR_cooperative_matrix %dx%dx%d, subgroup %d", shape.M, shape.N, shape.K, p.x.subgroupSize)
	if mode == "khr" {
		why += ", forced (" + EnvCoop + "=khr)"
	} else {
		why += " (NV: " + nvWhy + ")"
	}
	return matmulPath{kind: coopKHR, shape: shape, why: why}
}

// pathFeatures sets the "matmul path" and "attention path" lines of a
// device description for matmul path mm.
func (p *physDevice) pathFeatures(f map[string]string, mm matmulPath) {
	switch mm.kind {
	case coopNV:
		f["matmul path"] = "cooperative matrix (NV, f16 inputs) + scalar: " + mm.why
		if p.x.subgroupSize == 32 {
			f["attention path"] = "cooperative matrix (NV, f16 operands) for 16-bit attention, its backward and decode + scalar"
		} else {
			f["attention path"] = "scalar (the tensor-core kernels need 32-wide subgroups)"
		}
	case coopKHR:
		f["matmul path"] = "cooperative matrix (KHR, f16 inputs) + scalar: " + mm.why
		if e, why := khrAttention(mm, int(p.x.subgroupSize)); why == "" {
			f["attention path"] = fmt.Sprintf("cooperative matrix (KHR, f16 operands, %dx%dx%d) for 16-bit attention and its backward + scalar (decode)", e, e, e)
		} else {
			f["attention path"] = "scalar (KHR attention: " + why + "; decode is NV-only)"
		}
	default:
		f["matmul path"] = "scalar (coopmat: " + mm.why + ")"
		f["attention path"] = "scalar (coopmat: " + mm.why + ")"
	}
}

// hasCoopShapeNV reports whether the device lists the NV cooperative-matrix
// shape M x N x K with f16 inputs and f32 accumulators at subgroup scope.
func (p *physDevice) hasCoopShapeNV(m, n, k int) bool {
	for _, s := range p.coopShapesNV() {
		if s.M == m && s.N == n && s.K == k && s.A == C.PX_COMPONENT_FLOAT16 && s.B == C.PX_COMPONENT_FLOAT16 &&
			s.C == C.PX_COMPONENT_FLOAT32 && s.Result == C.PX_COMPONENT_FLOAT32 && s.Scope == C.PX_SCOPE_SUBGROUP {
			return true
		}
	}
	return false
}

func componentName(c int) string {
	switch c {
	case 0:
		return "f16"
	case 1:
		return "f32"
	case 2:
		return "f64"
	case 3, 4, 5, 6:
		return "i" + strconv.Itoa(8<<(c-3))
	case 7, 8, 9, 10:
		return "u" + strconv.Itoa(8<<(c-7))
	case C.PX_COMPONENT_BFLOAT16:
		return "bf16"
	}
	return "type" + strconv.Itoa(c)
}

func shapeList(shapes []coopShape) string {
	seen := map[string]bool{}
	var parts []string
	for _, s := range shapes {
		if s.Scope != C.PX_SCOPE_SUBGROUP {
			continue
		}
		k := fmt.Sprintf("%dx%dx%d %sx%s->%s", s.M, s.N, s.K, componentName(s.A), componentName(s.B), componentName(s.Result))
		if !seen[k] {
			seen[k] = true
			parts = append(parts, k)
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// info builds the engine's description of the device.
func (p *physDevice) info() engine.DeviceInfo {
	x := &p.x
	f := map[string]string{
		"api":                      versionString(p.apiVersion),
		"subgroup size":            strconv.Itoa(int(x.subgroupSize)),
		"shared memory":            fmt.Sprintf("%d KiB", p.lim.maxSharedMemory/1024),
		"max storage buffer range": fmt.Sprintf("%d MiB", p.lim.maxStorageBufferRange>>20),
		"fp16 arithmetic":          yesNo(cBool(x.shaderFloat16)),
		"16-bit storage":           yesNo(p.has16BitStorage()),
		"fp64":                     yesNo(cBool(x.shaderFloat64)),
		"push descriptors":         yesNo(x.hasPushDescriptor != 0),
		"bf16 shader type":         yesNo(cBool(x.bf16Type)),
		"max workgroups":           fmt.Sprintf("%d x %d x %d", p.lim.maxGroupCount[0], p.lim.maxGroupCount[1], p.lim.maxGroupCount[2]),
	}
	if name := trimC(C.GoString(&x.driverName[0])); name != "" {
		d := name
		if inf := trimC(C.GoString(&x.driverInfo[0])); inf != "" {
			d += " " + inf
		}
		f["driver"] = d
	}
	if x.minSubgroupSize != 0 && x.minSubgroupSize != x.maxSubgroupSize {
		f["subgroup size"] = fmt.Sprintf("%d (%d..%d)", x.subgroupSize, x.minSubgroupSize, x.maxSubgroupSize)
	}
	if x.hasCoopKHR != 0 && cBool(x.coopKHR) {
		f["coopmat khr"] = shapeList(p.coopShapesKHR())
	} else {
		f["coopmat khr"] = "no"
	}
	if x.hasCoopNV != 0 && cBool(x.coopNV) {
		f["coopmat nv"] = shapeList(p.coopShapesNV())
	} else {
		f["coopmat nv"] = "no"
	}
	o, err := optionsFromEnv()
	if err != nil {
		o = Options{} // the listing's "kernels" entry reports the error
	}
	p.pathFeatures(f, p.matmulPath(o))
	if !p.has16BitStorage() {
		f["16-bit tensors"] = "word atomics (no 16-bit storage)"
	}
	if err := p.usable(); err != nil {
		f["unusable"] = err.Error()
	}
	return engine.DeviceInfo{
		Backend:  "vulkan",
		Index:    p.index,
		Name:     p.name,
		Kind:     p.kind(),
		Memory:   p.localMemory(),
		DTypes:   []engine.DType{engine.F32, engine.BF16, engine.F16},
		Features: f,
	}
}
