package vulkan

/*
#cgo CFLAGS: -O2
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "pxvk.h"

static void *px_call_gipa(void *f, void *instance, const char *name) {
	return (void *)((pxGetInstanceProcAddr)f)(instance, name);
}
typedef int32_t (*pxEnumerateInstanceVersion)(uint32_t *);
static uint32_t px_instance_version(void *gipa) {
	pxEnumerateInstanceVersion f = (pxEnumerateInstanceVersion)px_call_gipa(gipa, NULL, "vkEnumerateInstanceVersion");
	uint32_t v = 1u << 22; // 1.0 loaders lack the function
	if (f != NULL && f(&v) != 0) {
		v = 1u << 22;
	}
	return v;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"unsafe"

	vk "github.com/vulkan-go/vulkan"
)

// vkRuntime is the process-wide Vulkan state: the loader, one instance and
// its physical devices. It is created on first use and lives until the
// process exits (devices opened from it are closed individually).
type vkRuntime struct {
	gipa       unsafe.Pointer // vkGetInstanceProcAddr
	instance   vk.Instance
	apiVersion uint32 // the instance's
	validation bool   // VK_LAYER_KHRONOS_validation is enabled
	phys       []*physDevice
}

var (
	rtOnce sync.Once
	rtVal  *vkRuntime
	rtErr  error
)

// loadRuntime returns the process-wide runtime, loading libvulkan and
// creating the instance on first call. The error is sticky: a machine
// without a loader or a driver reports the same reason every time.
func loadRuntime() (*vkRuntime, error) {
	rtOnce.Do(func() { rtVal, rtErr = newRuntime() })
	return rtVal, rtErr
}

// ErrNoVulkan is wrapped by the errors of a machine that cannot run Vulkan
// at all: no loader library, or no driver (ICD) that offers a device.
var ErrNoVulkan = errors.New("vulkan unavailable")

func newRuntime() (*vkRuntime, error) {
	var cerr [512]C.char
	gipa := C.px_load(&cerr[0], C.int(len(cerr)))
	if gipa == nil {
		return nil, fmt.Errorf("%w: %s", ErrNoVulkan, C.GoString(&cerr[0]))
	}
	// The binding's own loader would dlopen the unversioned libvulkan.so
	// (only in -dev packages); hand it the entry point we resolved instead.
	vk.SetGetInstanceProcAddr(gipa)
	if err := vk.Init(); err != nil {
		return nil, fmt.Errorf("%w: initialising the loader: %v", ErrNoVulkan, err)
	}
	rt := &vkRuntime{gipa: gipa}
	// Ask for the loader's version, at most 1.3 (the newest the structures
	// in pxvk.h and the shaders need).
	api := uint32(C.px_instance_version(gipa))
	if api > vk.MakeVersion(1, 3, 0) {
		api = vk.MakeVersion(1, 3, 0)
	}
	if api < vk.MakeVersion(1, 1, 0) {
		return nil, fmt.Errorf("%w: the Vulkan loader is version %s; Vulkan 1.1 or newer is needed", ErrNoVulkan, versionString(api))
	}
	rt.apiVersion = api
	var layers, exts []string
	if v := os.Getenv("PARALLAX_VULKAN_VALIDATION"); v != "" && v != "0" {
		if !instanceLayerPresent(gipa, "VK_LAYER_KHRONOS_validation") {
			return nil, fmt.Errorf("%w: PARALLAX_VULKAN_VALIDATION is set but VK_LAYER_KHRONOS_validation is not installed (Debian: vulkan-validationlayers)", ErrNoVulkan)
		}
		layers = append(layers, "VK_LAYER_KHRONOS_validation\x00")
		exts = append(exts, "VK_EXT_debug_utils\x00")
		rt.validation = true
	}
	// Window-system extensions a presenting program asked for
	// (RequestInstanceExtensions) before the runtime was created.
	for _, e := range instanceExtsRequested {
		exts = append(exts, e+"\x00")
	}
	// Every string handed to the binding is NUL-terminated: it passes the
	// Go bytes as char* without copying.
	app := &vk.ApplicationInfo{
		SType:              vk.StructureTypeApplicationInfo,
		PApplicationName:   "parallax\x00",
		ApplicationVersion: vk.MakeVersion(0, 1, 0),
		PEngineName:        "parallax\x00",
		EngineVersion:      vk.MakeVersion(0, 1, 0),
		ApiVersion:         api,
	}
	ci := &vk.InstanceCreateInfo{
		SType:                   vk.StructureTypeInstanceCreateInfo,
		PApplicationInfo:        app,
		EnabledLayerCount:       uint32(len(layers)),
		PpEnabledLayerNames:     layers,
		EnabledExtensionCount:   uint32(len(exts)),
		PpEnabledExtensionNames: exts,
	}
	var inst vk.Instance
	if res := vk.CreateInstance(ci, nil, &inst); res != vk.Success {
		if res == vk.ErrorIncompatibleDriver {
			return nil, fmt.Errorf("%w: %s", ErrNoVulkan, noDriverHint(icdManifests(os.Getenv)))
		}
		return nil, fmt.Errorf("%w: vkCreateInstance: %v", ErrNoVulkan, vk.Error(res))
	}
	// The binding's Init fetched instance functions with a NULL instance,
	// which a modern loader answers with NULL: fetch them again now.
	if err := vk.InitInstance(inst); err != nil {
		return nil, fmt.Errorf("%w: loading instance functions: %v", ErrNoVulkan, err)
	}
	if rt.validation {
		if res := C.px_enable_debug((C.pxGetInstanceProcAddr)(gipa), unsafe.Pointer(inst)); res != 0 {
			return nil, fmt.Errorf("%w: PARALLAX_VULKAN_VALIDATION: creating the debug messenger failed (VkResult %d)", ErrNoVulkan, int32(res))
		}
	}
	rt.instance = inst
	var n uint32
	if res := vk.EnumeratePhysicalDevices(inst, &n, nil); res != vk.Success {
		return nil, fmt.Errorf("%w: vkEnumeratePhysicalDevices: %v", ErrNoVulkan, vk.Error(res))
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: the loader found no Vulkan driver with a device (install mesa-vulkan-drivers for the lavapipe CPU device, or your GPU's driver)", ErrNoVulkan)
	}
	pds := make([]vk.PhysicalDevice, n)
	if res := vk.EnumeratePhysicalDevices(inst, &n, pds); res != vk.Success && res != vk.Incomplete {
		return nil, fmt.Errorf("%w: vkEnumeratePhysicalDevices: %v", ErrNoVulkan, vk.Error(res))
	}
	for i, pd := range pds[:n] {
		rt.phys = append(rt.phys, queryPhysical(rt, i, pd))
	}
	return rt, nil
}

func instanceLayerPresent(gipa unsafe.Pointer, name string) bool {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	return C.px_instance_layer((C.pxGetInstanceProcAddr)(gipa), cs) != 0
}

// versionString formats a packed Vulkan version as "1.3.239".
func versionString(v uint32) string {
	return fmt.Sprintf("%d.%d.%d", v>>22, (v>>12)&0x3ff, v&0xfff)
}

// deviceExtensions lists a physical device's extension names, sorted.
func deviceExtensions(rt *vkRuntime, pd vk.PhysicalDevice) []string {
	var n C.int
	p := C.px_device_extensions((C.pxGetInstanceProcAddr)(rt.gipa), unsafe.Pointer(rt.instance), unsafe.Pointer(pd), &n)
	if p == nil {
		return nil
	}
	defer C.px_free(unsafe.Pointer(p))
	props := unsafe.Slice(p, int(n))
	names := make([]string, 0, n)
	for i := range props {
		names = append(names, C.GoString(&props[i].extensionName[0]))
	}
	sort.Strings(names)
	return names
}

// cstrings copies names into C memory for px_query; free with freeCStrings.
func cstrings(names []string) (**C.char, func()) {
	if len(names) == 0 {
		return nil, func() {}
	}
	arr := (*[1 << 20]*C.char)(C.malloc(C.size_t(len(names)) * C.size_t(unsafe.Sizeof((*C.char)(nil)))))[:len(names):len(names)]
	for i, s := range names {
		arr[i] = C.CString(s)
	}
	return &arr[0], func() {
		for _, p := range arr {
			C.free(unsafe.Pointer(p))
		}
		C.free(unsafe.Pointer(&arr[0]))
	}
}

func hasString(list []string, s string) bool {
	i := sort.SearchStrings(list, s)
	return i < len(list) && list[i] == s
}

func cBool(b C.pxBool32) bool { return b != 0 }

func trimC(s string) string { return strings.TrimRight(s, "\x00") }
