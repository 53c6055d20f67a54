package vulkan

import (
	"fmt"
	"os"
	"strings"
	"unsafe"

	vk "github.com/vulkan-go/vulkan"
)

// handle is a non-dispatchable Vulkan handle (VkBuffer, VkPipeline, ...)
// kept as an integer. The binding types these handles as C pointers; a
// driver (or a validation layer that wraps handles) may hand out small
// integers, which Go's stack copier rejects in pointer-typed variables
// ("invalid pointer found on stack") unless GODEBUG=invalidptr=0. The
// backend therefore converts every such handle to a handle right after the
// binding returns it, stores only handles, and records commands through its
// own C code (shim.c), so pointer-typed copies live only for the duration of
// a binding call. checkHandle refuses, with a clear message, values that
// would still be unsafe there.
type handle uint64

// toHandle converts a binding handle (a pointer-shaped value) to a handle.
func toHandle[T any](h T) handle {
	if unsafe.Sizeof(h) != 8 {
		panic("vulkan: non-dispatchable handles must be 64-bit")
	}
	return *(*handle)(unsafe.Pointer(&h))
}

// vkOf converts a handle back to the binding's type T for a binding call.
func vkOf[T any](h handle) T {
	var t T
	if unsafe.Sizeof(t) != 8 {
		panic("vulkan: non-dispatchable handles must be 64-bit")
	}
	return *(*T)(unsafe.Pointer(&h))
}

// minLegalPointer is the Go runtime's lowest valid pointer value: smaller
// non-zero values in pointer-typed stack slots abort the program unless
// GODEBUG=invalidptr=0.
const minLegalPointer = 4096

// checkHandle reports an error for a handle the binding cannot safely
// carry in this process.
func checkHandle(what string, h handle) error {
	if h == 0 || h >= minLegalPointer || invalidPtrOff() {
		return nil
	}
	return fmt.Errorf("the Vulkan driver returned %s handle %#x, a small integer the Go runtime rejects in pointer-typed variables; run with GODEBUG=invalidptr=0", what, uint64(h))
}

func invalidPtrOff() bool {
	for _, kv := range strings.Split(os.Getenv("GODEBUG"), ",") {
		if strings.TrimSpace(kv) == "invalidptr=0" {
			return true
		}
	}
	return false
}

// vkErr wraps a failed Vulkan call.
func vkErr(call string, res vk.Result) error {
	if res == vk.Success {
		return nil
	}
	return fmt.Errorf("%s: %v (VkResult %d)", call, vk.Error(res), int32(res))
}
