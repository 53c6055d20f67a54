package vulkan

import (
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/enginetest"
)

// TestProfile profiles a few ops (on lavapipe in CI) and checks the
// profile's names, call counts, FLOPs and times; then a profile long
// enough to span several query pools and batches, and the misuse errors.
func TestProfile(t *testing.T) {
	d := testDevice(t)
	if _, err := d.StopProfile(); err == nil || !strings.Contains(err.Error(), "no profile was started") {
		t.Errorf("StopProfile before StartProfile: %v, want an error", err)
	}
	if d.pd.tsBits == 0 || d.pd.lim.timestampPeriod == 0 {
		err := d.StartProfile()
		if err == nil || !strings.Contains(err.Error(), "has no timestamps") {
			t.Fatalf("StartProfile without timestamps: %v, want an error saying so", err)
		}
		t.Skipf("%s: %v", d.pd.name, err)
	}

	const M, N, K = 64, 48, 32
	a := upload(t, d, engine.F32, make([]float32, M*K), M, K)
	b := upload(t, d, engine.F32, make([]float32, K*N), K, N)
	c, _ := d.Alloc(engine.F32, M, N)
	x := upload(t, d, engine.F32, []float32{1, 2, 3, 4}, 4)
	y := upload(t, d, engine.F32, []float32{10, 20, 30, 40}, 4)
	w := upload(t, d, engine.F32, []float32{1, 1, 1, 1}, 4)
	nx, _ := d.Alloc(engine.F32, 4)
	ss, _ := d.Alloc(engine.F32, 1)
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}

	if err := d.StartProfile(); err != nil {
		t.Fatal(err)
	}
	if err := d.StartProfile(); err == nil || !strings.Contains(err.Error(), "already") {
		t.Errorf("StartProfile twice: %v, want an error", err)
	}
	for range 2 {
		if err := d.MatMul(c, a, b, engine.MatMulOpts{}); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		if err := d.AddScaled(x, x, y, 1, 0.5); err != nil {
			t.Fatal(err)
		}
	}
	must(t, d.Fill(c, 0))
	must(t, d.RMSNorm(nx, nil, x, w, 1e-6))
	must(t, d.SumSquares(ss, x, false))
	p, err := d.StopProfile()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("profile on %s:\n%s", d.pd.name, p.Table())

	got := enginetest.ProfileByName(t, p)
	gemm := engine.GemmName(engine.F32, engine.F32, engine.F32, M, N, K, 1, false, false)
	for name, calls := range map[string]int{
		gemm: 2, "elementwise add scaled": 3, "fill buffer": 1, "rmsnorm forward": 1, "reduce partials": 1, "reduce sum": 1,
	} {
		if e, ok := got[name]; !ok || e.Calls != calls {
			t.Errorf("%q: %d calls (present %v), want %d", name, e.Calls, ok, calls)
		}
	}
	if len(p) != 6 {
		t.Errorf("%d entries, want 6", len(p))
	}
	if e := got[gemm]; e.FLOPs != 2*2*M*N*K || e.Bytes != 2*4*(M*K+K*N+M*N) {
		t.Errorf("%s: %v FLOPs, %v bytes; want %d and %d", gemm, e.FLOPs, e.Bytes, 2*2*M*N*K, 2*4*(M*K+K*N+M*N))
	}
	if e := got["fill buffer"]; e.Bytes != 4*M*N {
		t.Errorf("fill buffer: %v bytes, want %d", e.Bytes, 4*M*N)
	}
	if !(p.TotalMillis() > 0) {
		t.Errorf("total %v ms, want > 0", p.TotalMillis())
	}
	// Profiling changes nothing computed: x = x + y/2 three times.
	checkClose(t, "x", []float32{16, 32, 48, 64}, download(t, x), 0)

	// Ops after StopProfile are not timed; a long profile spans several
	// query pools and batches (submitted every maxBatchOps commands).
	must(t, d.AddScaled(x, x, y, 1, 0))
	const many = queriesPerPool + 100
	must(t, d.StartProfile())
	for range many {
		must(t, d.AddScaled(x, x, y, 1, 0))
	}
	p, err = d.StopProfile()
	if err != nil {
		t.Fatal(err)
	}
	if len(p) != 1 || p[0].Name != "elementwise add scaled" || p[0].Calls != many {
		t.Errorf("long profile: %+v, want %d calls of elementwise add scaled", p, many)
	}
	if len(d.prof.pools) < 2 {
		t.Errorf("%d query pools after %d ops, want 2 or more", len(d.prof.pools), many)
	}
	// The pools are reset and reused by the next profile.
	pools := len(d.prof.pools)
	must(t, d.StartProfile())
	must(t, d.MatMul(c, a, b, engine.MatMulOpts{TransB: false, Accumulate: true}))
	p, err = d.StopProfile()
	if err != nil {
		t.Fatal(err)
	}
	if len(p) != 1 || p[0].Calls != 1 || !strings.HasPrefix(p[0].Name, "gemm f32 64x48x32 nn") || p[0].Bytes != 4*(M*K+K*N+2*M*N) {
		t.Errorf("third profile: %+v", p)
	}
	if len(d.prof.pools) != pools {
		t.Errorf("%d query pools after the third profile, want %d (reused)", len(d.prof.pools), pools)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
