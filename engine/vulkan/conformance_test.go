package vulkan_test

import (
	"os"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/enginetest"
	"github.com/parallax-engine/parallax/engine/vulkan"
)

// requireVulkan reports whether a missing Vulkan device must fail the
// tests (CI sets PARALLAX_REQUIRE_VULKAN=1) rather than skip them.
func requireVulkan() bool { return os.Getenv("PARALLAX_REQUIRE_VULKAN") == "1" }

// openAll opens every Vulkan device, or skips (fails under
// PARALLAX_REQUIRE_VULKAN=1) when there is none.
func openAll(t *testing.T) []*vulkan.Device {
	t.Helper()
	n, err := vulkan.Count()
	if err == nil && n == 0 {
		err = engine.ErrNoDevice
	}
	if err != nil {
		if requireVulkan() {
			t.Fatalf("PARALLAX_REQUIRE_VULKAN=1 but no Vulkan device: %v", err)
		}
		t.Skipf("no Vulkan device (%v); set PARALLAX_REQUIRE_VULKAN=1 to make this a failure", err)
	}
	var devs []*vulkan.Device
	for i := 0; i < n; i++ {
		d, err := vulkan.Open(i)
		if err != nil {
			t.Errorf("vulkan:%d: %v", i, err)
			continue
		}
		t.Cleanup(func() { d.Close() })
		devs = append(devs, d)
	}
	if len(devs) == 0 {
		t.Fatal("no Vulkan device could be opened")
	}
	return devs
}

// TestConformance runs the engine's conformance suite on every Vulkan
// device, for f32, bf16 and f16 inputs.
func TestConformance(t *testing.T) {
	for _, d := range openAll(t) {
		t.Run(d.Info().ID(), func(t *testing.T) {
			enginetest.Run(t, d, enginetest.Options{
				DTypes: []engine.DType{engine.F32, engine.BF16, engine.F16},
				Short:  testing.Short(),
			})
		})
	}
}
