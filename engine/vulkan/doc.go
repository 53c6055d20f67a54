// Package vulkan is the Vulkan compute backend: every engine op as a
// SPIR-V compute shader (package shaders), on any GPU with a Vulkan 1.1
// driver, and on the CPU through Mesa's lavapipe. Importing it registers
// the "vulkan" backend; docs/VULKAN.md describes its design.
package vulkan
