package cpu

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/enginetest"
)

// Helpers shared by the op unit tests.

// testDevices are the devices the op tests run on: the default worker count
// and an odd one larger than most test machines have cores, so the chunking
// paths with several (oversubscribed) workers run everywhere.
func testDevices() []*Device { return []*Device{New(), {threads: 5}} }

func newRng(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x51ed)) }

// up uploads vals rounded to dt, alloc allocates a zero tensor and down
// reads a tensor back as float64.
var (
	up    = enginetest.MustUpload
	alloc = enginetest.MustAlloc
	down  = enginetest.MustDownload
)

// upInts uploads an I32 tensor.
func upInts(t *testing.T, d *Device, vals []int, shape ...int) *engine.Tensor {
	t.Helper()
	iv := make([]int32, len(vals))
	for i, v := range vals {
		iv[i] = int32(v)
	}
	x, err := engine.FromInt32(d, iv, shape...)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// near fails the test if got is not within tol (relative max-norm) of want.
func near(t *testing.T, name string, got, want []float64, tol float64) {
	t.Helper()
	if e := enginetest.RelErr(got, want); !(e <= tol) {
		t.Errorf("%s: relative error %.3g exceeds %.3g", name, e, tol)
	}
}

// roundTo returns vals as stored at dt.
func roundTo(dt engine.DType, vals []float64) []float64 {
	out := make([]float64, len(vals))
	for i, v := range vals {
		out[i] = float64(dt.Round(float32(v)))
	}
	return out
}

// tolFor is the tolerance for an output stored at dt after depth accumulated
// terms.
func tolFor(dt engine.DType, depth int) float64 { return enginetest.Tol(dt, depth) }

// wantArgError fails unless err is an *engine.ArgError of op op.
func wantArgError(t *testing.T, what string, err error, op string) {
	t.Helper()
	var ae *engine.ArgError
	if !errors.As(err, &ae) {
		t.Errorf("%s: want an argument error, got %v", what, err)
		return
	}
	if op != "" && ae.Op != op {
		t.Errorf("%s: error names op %q, want %q (%v)", what, ae.Op, op, err)
	}
}

// noPanic runs fn, turning a panic into a test failure.
func noPanic(t *testing.T, what string, fn func()) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Errorf("%s panicked: %v", what, p)
		}
	}()
	fn()
}

func isFinite(xs []float64) bool {
	for _, x := range xs {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return false
		}
	}
	return true
}
