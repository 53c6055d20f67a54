//go:build cgo

package cuda_test

import (
	"os"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/cuda"
)

// openGPU opens cuda:0, skipping the test where no usable GPU is found
// unless PARALLAX_REQUIRE_CUDA=1, which turns that into a failure.
func openGPU(t testing.TB) *cuda.Device {
	t.Helper()
	d, err := engine.Open("cuda:0")
	if err != nil {
		if os.Getenv("PARALLAX_REQUIRE_CUDA") == "1" {
			t.Fatalf("PARALLAX_REQUIRE_CUDA=1 but no CUDA device: %v", err)
		}
		t.Skipf("no CUDA device: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d.(*cuda.Device)
}
