// Package vulkan is the Vulkan compute backend: every engine op as a
// SPIR-V compute shader (package shaders), on any device with a Vulkan 1.1
// driver, including Mesa's lavapipe on the CPU. Importing it registers the
// "vulkan" backend; engine.Open("vulkan:N") opens device N.
//
// It loads libvulkan.so.1 itself (no development package is needed at run
// time) and uses github.com/vulkan-go/vulkan for object creation, with a
// small C shim (pxvk.h, shim.c) for what the binding's 1.1 headers lack and
// for command recording. Ops are recorded into batched command buffers with
// the barriers their data dependencies need and run when the host reads a
// result or calls Sync.
//
// Vulkan handles are kept as integers on the Go side (see handles.go), so
// programs need no GODEBUG setting; a driver that hands out handles the Go
// runtime would reject in pointer-typed variables is refused with a message
// asking for GODEBUG=invalidptr=0.
//
// Environment: PARALLAX_VULKAN_VALIDATION=1 enables
// VK_LAYER_KHRONOS_validation; PARALLAX_VULKAN_NO16=1,
// PARALLAX_VULKAN_COOPMAT=0 and PARALLAX_VULKAN_PUSH_DESCRIPTORS=0 force the
// portable paths; PARALLAX_VULKAN_PIPELINE_CACHE=0 disables the on-disk
// pipeline cache; PARALLAX_VULKAN_TIMEOUT bounds how long a batch may run.
// docs/VULKAN.md describes the design.
package vulkan
