package enginetest

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/parallax-engine/parallax/engine"
)

// Helpers for the backends' unit tests: each is the engine call of its
// name that fails the test on an error instead of returning it.

// must returns v, failing t when err is not nil.
func must[T any](t testing.TB, v T, err error) T {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// MustUpload is Upload: vals rounded to dt in a new tensor on dev.
func MustUpload(t testing.TB, dev engine.Device, dt engine.DType, vals []float64, shape ...int) *engine.Tensor {
	t.Helper()
	x, err := Upload(dev, dt, vals, shape...)
	return must(t, x, err)
}

// MustDownload is Download: x's values as float64.
func MustDownload(t testing.TB, x *engine.Tensor) []float64 {
	t.Helper()
	v, err := Download(x)
	return must(t, v, err)
}

// MustAlloc is dev.Alloc: a new zero-filled tensor.
func MustAlloc(t testing.TB, dev engine.Device, dt engine.DType, shape ...int) *engine.Tensor {
	t.Helper()
	x, err := dev.Alloc(dt, shape...)
	return must(t, x, err)
}

// MustFloat32s is engine.Float32s: x's values as float32.
func MustFloat32s(t testing.TB, x *engine.Tensor) []float32 {
	t.Helper()
	v, err := engine.Float32s(x)
	return must(t, v, err)
}

// MustFromFloat32 is engine.FromFloat32: vals in a new tensor of dtype dt
// on dev.
func MustFromFloat32(t testing.TB, dev engine.Device, dt engine.DType, vals []float32, shape ...int) *engine.Tensor {
	t.Helper()
	x, err := engine.FromFloat32(dev, dt, vals, shape...)
	return must(t, x, err)
}

// ProfileByName indexes p's entries by name, failing t (without stopping
// it) for an entry whose time is not finite and >= 0.
func ProfileByName(t testing.TB, p engine.Profile) map[string]engine.ProfileEntry {
	t.Helper()
	got := map[string]engine.ProfileEntry{}
	for _, e := range p {
		got[e.Name] = e
		if math.IsNaN(e.Millis) || math.IsInf(e.Millis, 0) || e.Millis < 0 {
			t.Errorf("%s: %v ms, want a finite time >= 0", e.Name, e.Millis)
		}
	}
	return got
}

// Normal32 returns n samples of N(0, s^2) as float32 (not rounded to any
// narrower dtype).
func Normal32(rng *rand.Rand, n int, s float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * s)
	}
	return v
}
