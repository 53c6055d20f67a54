//go:build cgo

package cuda_test

import (
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/enginetest"
)

// TestConformance runs the whole conformance suite on cuda:0 for f32 and
// bf16 inputs. It skips without a GPU unless PARALLAX_REQUIRE_CUDA=1.
func TestConformance(t *testing.T) {
	d := openGPU(t)
	enginetest.Run(t, d, enginetest.Options{
		DTypes: []engine.DType{engine.F32, engine.BF16},
		Short:  testing.Short(),
	})
}
