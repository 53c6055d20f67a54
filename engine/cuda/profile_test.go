//go:build cgo

package cuda_test

import (
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/enginetest"
)

// TestProfile profiles a few ops with CUDA events and checks the names,
// call counts, FLOPs and times; a second profile reuses the events.
func TestProfile(t *testing.T) {
	d := openGPU(t)
	if _, err := d.StopProfile(); err == nil {
		t.Error("StopProfile before StartProfile succeeded")
	}
	const M, N, K = 64, 48, 32
	alloc := func(dt engine.DType, shape ...int) *engine.Tensor {
		x, err := d.Alloc(dt, shape...)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	a, b, c := alloc(engine.BF16, M, K), alloc(engine.BF16, K, N), alloc(engine.BF16, M, N)
	x, y := alloc(engine.F32, 1024), alloc(engine.F32, 1024)
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for round := 0; round < 2; round++ {
		must(d.StartProfile())
		if err := d.StartProfile(); err == nil || !strings.Contains(err.Error(), "already") {
			t.Errorf("StartProfile twice: %v, want an error", err)
		}
		for range 2 {
			must(d.MatMul(c, a, b, engine.MatMulOpts{}))
		}
		for range 3 {
			must(d.AddScaled(x, x, y, 1, 1))
		}
		must(d.Fill(y, 1))
		must(d.Cast(x, y)) // same dtype: a device-to-device copy
		p, err := d.StopProfile()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("profile %d:\n%s", round+1, p.Table())
		got := enginetest.ProfileByName(t, p)
		gemm := engine.GemmName(engine.BF16, engine.BF16, engine.BF16, M, N, K, 1, false, false)
		for name, calls := range map[string]int{gemm: 2, "add_scaled": 3, "fill": 1, "memcpy DtoD": 1} {
			if e, ok := got[name]; !ok || e.Calls != calls {
				t.Errorf("%q: %d calls (present %v), want %d; profile %+v", name, e.Calls, ok, calls, p)
			}
		}
		if e := got[gemm]; e.FLOPs != 2*2*M*N*K {
			t.Errorf("%s: %v FLOPs, want %d", gemm, e.FLOPs, 2*2*M*N*K)
		}
		if e := got["memcpy DtoD"]; e.Bytes != 2*4*1024 {
			t.Errorf("memcpy DtoD: %v bytes, want %d", e.Bytes, 2*4*1024)
		}
		if !(p.TotalMillis() > 0) {
			t.Errorf("total %v ms, want > 0", p.TotalMillis())
		}
	}
}
