package cpu_test

import (
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/cpu"
	"github.com/parallax-engine/parallax/engine/enginetest"
)

// TestConformance runs the whole conformance suite on the CPU backend, for
// f32 and for bf16 inputs (which the CPU widens to f32 and rounds on store).
func TestConformance(t *testing.T) {
	enginetest.Run(t, cpu.New(), enginetest.Options{
		DTypes: []engine.DType{engine.F32, engine.BF16},
		Short:  testing.Short(),
	})
}
