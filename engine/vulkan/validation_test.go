package vulkan_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/enginetest"
	"github.com/parallax-engine/parallax/engine/vulkan"
)

// validationLayerInstalled looks for the Khronos validation layer's
// manifest where Debian's vulkan-validationlayers puts it.
func validationLayerInstalled() bool {
	for _, dir := range []string{"/usr/share/vulkan/explicit_layer.d", "/usr/local/share/vulkan/explicit_layer.d", "/etc/vulkan/explicit_layer.d"} {
		if m, _ := filepath.Glob(filepath.Join(dir, "VkLayer_khronos_validation.json")); len(m) > 0 {
			return true
		}
	}
	return false
}

// TestValidationLayer reruns the short conformance suite (f32 and bf16)
// in a child process with VK_LAYER_KHRONOS_validation enabled and fails on
// any validation error. Skipped when the layer is not installed (Debian:
// vulkan-validationlayers).
func TestValidationLayer(t *testing.T) {
	if os.Getenv("PARALLAX_VULKAN_VALIDATION") != "" {
		t.Skip("already running under validation")
	}
	if !validationLayerInstalled() {
		t.Skip("VK_LAYER_KHRONOS_validation is not installed")
	}
	openAll(t) // skip or fail like the other tests when there is no device
	cmd := exec.Command(os.Args[0], "-test.run", "^TestUnderValidation$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "PARALLAX_VULKAN_VALIDATION=1")
	out, err := cmd.CombinedOutput()
	if err != nil || strings.Contains(string(out), "vulkan validation error") {
		t.Fatalf("under VK_LAYER_KHRONOS_validation: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "--- PASS: TestUnderValidation") {
		t.Fatalf("the validated run did not pass:\n%s", out)
	}
}

// TestUnderValidation is the child of TestValidationLayer.
func TestUnderValidation(t *testing.T) {
	if os.Getenv("PARALLAX_VULKAN_VALIDATION") == "" {
		t.Skip("run by TestValidationLayer with PARALLAX_VULKAN_VALIDATION=1")
	}
	if !vulkan.ValidationEnabled() {
		t.Fatal("the validation layer is not enabled")
	}
	for _, d := range openAll(t) {
		enginetest.Run(t, d, enginetest.Options{DTypes: []engine.DType{engine.F32, engine.BF16}, Short: true})
	}
	if n := vulkan.ValidationErrors(); n != 0 {
		t.Fatalf("%d validation errors", n)
	}
}
