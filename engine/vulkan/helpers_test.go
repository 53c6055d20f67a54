package vulkan

import (
	"math"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/enginetest"
)

// randNormal returns n samples of N(0, s^2).
var randNormal = enginetest.Normal32

// tensors makes tensors on dev from float32 values and frees them all
// with free.
type tensors struct {
	t   testing.TB
	dev engine.Device
	all []*engine.Tensor
}

func (ts *tensors) make(dt engine.DType, v []float32, shape ...int) *engine.Tensor {
	ts.t.Helper()
	x := upload(ts.t, ts.dev, dt, v, shape...)
	ts.all = append(ts.all, x)
	return x
}

func (ts *tensors) free() {
	for _, x := range ts.all {
		ts.dev.Free(x)
	}
	ts.all = nil
}

// read returns x's values (nil for a nil tensor).
func read(t *testing.T, x *engine.Tensor) []float32 {
	t.Helper()
	if x == nil {
		return nil
	}
	return download(t, x)
}

// dtypeTol is the relative tolerance of a kernel against the CPU backend on
// the same inputs: the conformance suite's bound for 16-bit outputs (docs/MATH.md
// section 8), f32 for float32.
func dtypeTol(dt engine.DType, f32 float64) float64 {
	if dt == engine.F32 {
		return f32
	}
	return enginetest.Tol(dt, 1)
}

// checkClose fails unless max |got - want| / max |want| <= tol; NaN never
// passes, and infinities must match exactly.
func checkClose(t *testing.T, what string, want, got []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	var worst, scale float64
	for i := range want {
		w, g := float64(want[i]), float64(got[i])
		if math.IsNaN(g) {
			t.Fatalf("%s[%d] is NaN", what, i)
		}
		if math.IsInf(w, 0) || math.IsInf(g, 0) {
			if w != g {
				t.Fatalf("%s[%d] = %v, want %v", what, i, g, w)
			}
			continue
		}
		worst = max(worst, math.Abs(g-w))
		scale = max(scale, math.Abs(w))
	}
	if rel := worst / max(scale, 1e-30); rel > tol || scale == 0 {
		t.Errorf("%s: max |vulkan - cpu| / max |cpu| = %.3g (tolerance %.3g, scale %.3g)", what, rel, tol, scale)
	} else {
		t.Logf("%s: relative error %.3g", what, rel)
	}
}
