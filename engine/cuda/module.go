//go:build cgo

package cuda

// #include <stdlib.h>
// #include "shim.h"
import "C"

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unsafe"

	kernels "github.com/parallax-engine/parallax/shaders/cuda"

	"github.com/parallax-engine/parallax/internal/atomicfile"
	"github.com/parallax-engine/parallax/internal/concurrent"
)

// archFor names the NVRTC target for compute capability major.minor:
// sm_90a on Hopper (wgmma and friends; NVRTC 12 or newer), sm_XY where
// NVRTC lists it, else PTX for the newest virtual arch it supports (the
// driver compiles PTX for the GPU at load time).
func archFor(major, minor, nvrtcMajor int, supported []int) string {
	cc := major*10 + minor
	if cc == 90 && nvrtcMajor >= 12 {
		return "sm_90a"
	}
	if supported == nil {
		return fmt.Sprintf("sm_%d", cc)
	}
	best := 0
	for _, a := range supported {
		if a == cc {
			return fmt.Sprintf("sm_%d", cc)
		}
		if a < cc && a > best {
			best = a
		}
	}
	if best == 0 {
		best = supported[0]
	}
	return fmt.Sprintf("compute_%d", best)
}

func nvrtcArchs() []int {
	var a [128]C.int
	n := int(C.pxcu_nvrtc_archs(&a[0], 128))
	out := make([]int, n)
	for i := range out {
		out[i] = int(a[i])
	}
	return out
}

// source is the kernel sources: the modules (.cu) and the headers (.cuh).
type source struct {
	modules map[string]string
	headers map[string]string
}

func readSources() (source, error) {
	s := source{modules: map[string]string{}, headers: map[string]string{}}
	err := fs.WalkDir(kernels.FS, ".", func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := fs.ReadFile(kernels.FS, p)
		if err != nil {
			return err
		}
		switch filepath.Ext(p) {
		case ".cu":
			s.modules[strings.TrimSuffix(p, ".cu")] = string(b)
		case ".cuh":
			s.headers[p] = string(b)
		}
		return nil
	})
	return s, err
}

// compileOptions are the NVRTC options for a target.
//
// PARALLAX_CUDA_NVRTC_OPTIONS adds options (space-separated), such as the
// -D switches of attention_wgmma.cu's tuning macros, for measuring a
// kernel variant without editing its source; the cache key includes them.
func compileOptions(arch string) []string {
	opts := []string{"--gpu-architecture=" + arch, "-std=c++17", "-default-device"}
	return append(opts, strings.Fields(os.Getenv("PARALLAX_CUDA_NVRTC_OPTIONS"))...)
}

// compile builds one module with NVRTC: a CUBIN for an sm_ target, PTX for
// a compute_ one. log is the compiler's output.
func compile(name, src string, headers map[string]string, opts []string) (image []byte, log string, err error) {
	names := make([]string, 0, len(headers))
	for h := range headers {
		names = append(names, h)
	}
	sort.Strings(names)
	var free []unsafe.Pointer
	defer func() {
		for _, p := range free {
			C.free(p)
		}
	}()
	cstr := func(s string) *C.char {
		p := C.CString(s)
		free = append(free, unsafe.Pointer(p))
		return p
	}
	n := len(names)
	hs := (**C.char)(C.malloc(C.size_t(max(n, 1)) * C.size_t(unsafe.Sizeof(uintptr(0)))))
	is := (**C.char)(C.malloc(C.size_t(max(n, 1)) * C.size_t(unsafe.Sizeof(uintptr(0)))))
	ops := (**C.char)(C.malloc(C.size_t(max(len(opts), 1)) * C.size_t(unsafe.Sizeof(uintptr(0)))))
	free = append(free, unsafe.Pointer(hs), unsafe.Pointer(is), unsafe.Pointer(ops))
	hsl, isl, osl := unsafe.Slice(hs, max(n, 1)), unsafe.Slice(is, max(n, 1)), unsafe.Slice(ops, max(len(opts), 1))
	for i, h := range names {
		hsl[i], isl[i] = cstr(headers[h]), cstr(h)
	}
	for i, o := range opts {
		osl[i] = cstr(o)
	}
	cubin := C.int(0)
	for _, o := range opts {
		if strings.HasPrefix(o, "--gpu-architecture=sm_") {
			cubin = 1
		}
	}
	var out, clog *C.char
	var size C.size_t
	r := C.pxcu_nvrtc_compile(cstr(src), cstr(name+".cu"), C.int(n), hs, is, C.int(len(opts)), ops, cubin, &out, &size, &clog)
	if clog != nil {
		log = C.GoString(clog)
		C.pxcu_free(unsafe.Pointer(clog))
	}
	if out != nil {
		image = C.GoBytes(unsafe.Pointer(out), C.int(size))
		C.pxcu_free(unsafe.Pointer(out))
	}
	if r != 0 {
		return nil, log, fmt.Errorf("nvrtc: compile %s.cu: %s\n%s", name, C.GoString(C.pxcu_nvrtc_error(r)), strings.TrimSpace(log))
	}
	if cubin == 0 {
		image = append(image, 0) // PTX is loaded as a NUL-terminated string
	}
	return image, log, nil
}

// cacheDir is where compiled modules are kept: $PARALLAX_CUDA_CACHE, else
// the user cache folder's parallax/cuda.
func cacheDir() string {
	if d := os.Getenv("PARALLAX_CUDA_CACHE"); d != "" {
		return d
	}
	d, err := os.UserCacheDir()
	if err != nil {
		d = os.TempDir()
	}
	return filepath.Join(d, "parallax", "cuda")
}

// build returns a module's image from the cache or compiles and caches it.
// The key hashes the module's source, every header, the options and the
// NVRTC version; a cache write that fails is not an error.
func build(name string, src source, opts []string, nvrtc [2]int) ([]byte, error) {
	h := sha256.New()
	fmt.Fprintf(h, "nvrtc %d.%d\n%s\n", nvrtc[0], nvrtc[1], strings.Join(opts, " "))
	h.Write([]byte(src.modules[name]))
	keys := make([]string, 0, len(src.headers))
	for k := range src.headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(h, "\x00%s\x00%s", k, src.headers[k])
	}
	key := hex.EncodeToString(h.Sum(nil))[:24]
	arch := strings.TrimPrefix(opts[0], "--gpu-architecture=")
	path := filepath.Join(cacheDir(), fmt.Sprintf("%s-%s-%s.bin", name, arch, key))
	if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
		return b, nil
	}
	img, log, err := compile(name, src.modules[name], src.headers, opts)
	if err != nil {
		return nil, err
	}
	if os.Getenv("PARALLAX_CUDA_VERBOSE") != "" && strings.TrimSpace(log) != "" {
		fmt.Fprintf(os.Stderr, "nvrtc %s.cu:\n%s\n", name, log)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err == nil {
		_ = atomicfile.WriteFile(path, img) // a cache: losing it costs only time
	}
	return img, nil
}

// modules are a device's loaded kernel modules and the functions looked up
// in them.
type modules struct {
	d    *Device
	mods map[string]C.CUmodule
	fns  map[string]*kernel
}

// kernel is one function of a module and the dynamic shared memory limit
// set on it so far.
type kernel struct {
	f    C.CUfunction
	name string
	smem int
	pdl  bool // written for programmatic dependent launch (pdl.go)
}

// loadModules compiles (or fetches from the cache) every module, in
// parallel, and loads them into the device's context.
func loadModules(d *Device) (*modules, error) {
	src, err := readSources()
	if err != nil {
		return nil, fmt.Errorf("cuda: read kernel sources: %w", err)
	}
	arch := archFor(d.g.ccMajor, d.g.ccMinor, d.g.nvrtcVersion[0], nvrtcArchs())
	opts := compileOptions(arch)
	names := make([]string, 0, len(src.modules))
	for n := range src.modules {
		names = append(names, n)
	}
	sort.Strings(names)
	imgs := make([][]byte, len(names))
	errs := concurrent.Each(len(names), func(i int) (err error) {
		imgs[i], err = build(names[i], src, opts, d.g.nvrtcVersion)
		return err
	})
	m := &modules{d: d, mods: map[string]C.CUmodule{}, fns: map[string]*kernel{}}
	for i, n := range names {
		if errs[i] != nil {
			m.unload()
			return nil, errs[i]
		}
		var mod C.CUmodule
		if r := C.pxcu_module_load(d.ctx, &mod, unsafe.Pointer(&imgs[i][0])); r != 0 {
			m.unload()
			return nil, fmt.Errorf("%w (module %s.cu for %s)", cuErr("cuModuleLoadData", r), n, arch)
		}
		m.mods[n] = mod
	}
	return m, nil
}

func (m *modules) unload() {
	for n, mod := range m.mods {
		C.pxcu_module_unload(m.d.ctx, mod)
		delete(m.mods, n)
	}
}

// fn looks a kernel up by module and name (cached).
func (d *Device) fn(module, name string) (*kernel, error) {
	key := module + "/" + name
	if k, ok := d.mods.fns[key]; ok {
		return k, nil
	}
	mod, ok := d.mods.mods[module]
	if !ok {
		return nil, fmt.Errorf("cuda: no kernel module %q", module)
	}
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	k := &kernel{name: name, pdl: pdlKernel(module, name)}
	if r := C.pxcu_module_function(d.ctx, &k.f, mod, cs); r != 0 {
		return nil, fmt.Errorf("%w (kernel %s in %s.cu)", cuErr("cuModuleGetFunction", r), name, module)
	}
	d.mods.fns[key] = k
	return k, nil
}

// args packs kernel parameters into one buffer, each at its natural
// alignment, remembering where each starts (cuLaunchKernel takes a pointer
// per parameter).
type args struct {
	b    []byte
	offs []int32
}

func (a *args) align(n int) {
	for len(a.b)%n != 0 {
		a.b = append(a.b, 0)
	}
	a.offs = append(a.offs, int32(len(a.b)))
}

// p appends a device pointer.
func (a *args) p(v uint64) *args {
	a.align(8)
	a.b = binary.LittleEndian.AppendUint64(a.b, v)
	return a
}

// i appends an int.
func (a *args) i(v int) *args {
	a.align(4)
	a.b = binary.LittleEndian.AppendUint32(a.b, uint32(int32(v)))
	return a
}

// l appends a long long.
func (a *args) l(v int64) *args {
	a.align(8)
	a.b = binary.LittleEndian.AppendUint64(a.b, uint64(v))
	return a
}

// f appends a float.
func (a *args) f(v float32) *args {
	a.align(4)
	a.b = binary.LittleEndian.AppendUint32(a.b, math.Float32bits(v))
	return a
}

// tmap appends a tensor map (a 64-byte-aligned 128-byte struct).
func (a *args) tmap(m *tensorMap) *args {
	a.align(64)
	a.b = append(a.b, m[:]...)
	return a
}

// blob appends a struct passed by value, laid out by the caller, at the
// struct's alignment.
func (a *args) blob(b []byte, alignment int) *args {
	a.align(alignment)
	a.b = append(a.b, b...)
	return a
}

func newArgs() *args { return &args{b: make([]byte, 0, 128)} }

// tensorMap is a CUtensorMap: what the TMA unit needs to copy boxes of a
// tensor in global memory into shared memory.
type tensorMap [128]byte

// Tensor map element types and swizzles (cuda.h's CUtensorMapDataType and
// CUtensorMapSwizzle).
const (
	tmF32        = 7
	tmBF16       = 9
	tmSwizzle0   = 0
	tmSwizzle128 = 3
)

// hasTensorMaps reports whether the driver encodes tensor maps (a device
// uses them unless Options.NoTMA: Device.tma).
func hasTensorMaps() bool {
	return C.pxcu_has_tensor_map() != 0
}

// newTensorMap encodes a tiled tensor map of a rank-dimensional tensor at
// device address addr: dims innermost first, strides in bytes of the
// dimensions after the first, box the copied box's extent; elements
// outside the tensor read as zero.
func (d *Device) newTensorMap(dtype int, addr uint64, dims, strides []uint64, box []uint32, swizzle int) (*tensorMap, error) {
	if C.pxcu_has_tensor_map() == 0 {
		return nil, fmt.Errorf("cuTensorMapEncodeTiled: not in this CUDA driver (needs CUDA 12)")
	}
	if len(dims) < 1 || len(dims) > 5 || len(strides) != len(dims)-1 || len(box) != len(dims) {
		return nil, fmt.Errorf("tensor map: %d dims, %d strides, %d box extents", len(dims), len(strides), len(box))
	}
	var m tensorMap
	cd := make([]C.ulonglong, len(dims))
	cs := make([]C.ulonglong, len(dims))
	cb := make([]C.uint, len(dims))
	for i := range dims {
		cd[i], cb[i] = C.ulonglong(dims[i]), C.uint(box[i])
		if i < len(strides) {
			cs[i] = C.ulonglong(strides[i])
		}
	}
	if r := C.pxcu_tensor_map(d.ctx, unsafe.Pointer(&m[0]), C.int(dtype), C.uint(len(dims)), C.ulonglong(addr), &cd[0], &cs[0],
		&cb[0], C.int(swizzle)); r != 0 {
		return nil, fmt.Errorf("%w (dims %v, strides %v, box %v)", cuErr("cuTensorMapEncodeTiled", r), dims, strides, box)
	}
	return &m, nil
}

// launch enqueues kernel module/name on the device's stream.
func (d *Device) launch(module, name string, grid, block [3]int, smem int, a *args) error {
	k, err := d.fn(module, name)
	if err != nil {
		return err
	}
	for i := range grid {
		if grid[i] <= 0 {
			return nil // nothing to do
		}
	}
	if smem > 48<<10 && smem > k.smem {
		if r := C.pxcu_func_set_smem(d.ctx, k.f, C.int(smem)); r != 0 {
			return fmt.Errorf("%w (kernel %s wants %d bytes of shared memory)", cuErr("cuFuncSetAttribute", r), name, smem)
		}
		k.smem = smem
	}
	if len(a.b) == 0 {
		a.b = append(a.b, 0)
		a.offs = append(a.offs, 0)
	}
	offs := make([]C.int, len(a.offs))
	for i, o := range a.offs {
		offs[i] = C.int(o)
	}
	prof := d.prof.on
	if prof {
		if err := d.profBegin(); err != nil {
			return fmt.Errorf("cuda kernel %s: %w", name, err)
		}
	}
	gx, gy, gz := C.uint(grid[0]), C.uint(grid[1]), C.uint(grid[2])
	bx, by, bz := C.uint(block[0]), C.uint(block[1]), C.uint(block[2])
	var r C.CUresult
	fn := "cuLaunchKernel"
	if k.pdl && d.pdl() {
		fn = "cuLaunchKernelEx"
		r = C.pxcu_launch_pdl(d.ctx, k.f, gx, gy, gz, bx, by, bz, C.uint(smem), d.stream,
			unsafe.Pointer(&a.b[0]), &offs[0], C.int(len(a.offs)))
	} else {
		r = C.pxcu_launch(d.ctx, k.f, gx, gy, gz, bx, by, bz, C.uint(smem), d.stream,
			unsafe.Pointer(&a.b[0]), &offs[0], C.int(len(a.offs)))
	}
	if r != 0 {
		return fmt.Errorf("%w (kernel %s, grid %v, block %v, smem %d)", cuErr(fn, r), name, grid, block, smem)
	}
	if prof {
		return d.profEnd(name, 0, 0)
	}
	return nil
}

// grid1 is a 1-D grid of blocks of 256 threads covering n items (capped;
// kernels loop over the rest).
func grid1(n int64) [3]int {
	b := (n + 255) / 256
	b = min(b, 1<<20)
	return [3]int{int(max(b, 1)), 1, 1}
}

var threads256 = [3]int{256, 1, 1}

// nvrtcVersionOf returns the loaded NVRTC's version.
func nvrtcVersionOf() (major, minor int) {
	var a, b C.int
	C.pxcu_nvrtc_version(&a, &b)
	return int(a), int(b)
}
