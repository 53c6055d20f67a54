package vulkan

import (
	"errors"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/enginetest"
)

// testDevice opens vulkan:0 for a test, or skips it when there is no
// Vulkan device (fails under PARALLAX_REQUIRE_VULKAN=1).
func testDevice(t testing.TB) *Device {
	t.Helper()
	d, err := Open(0)
	if err != nil {
		if os.Getenv("PARALLAX_REQUIRE_VULKAN") == "1" {
			t.Fatalf("PARALLAX_REQUIRE_VULKAN=1 but vulkan:0 cannot be opened: %v", err)
		}
		t.Skipf("no Vulkan device: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// upload and download move float32 values to and from tensors.
var (
	upload   = enginetest.MustFromFloat32
	download = enginetest.MustFloat32s
)

// A chain of dependent adds recorded into one batch: each needs a barrier
// after the previous one, and the batch is submitted once, at the Read.
func TestDependentChainOneBatch(t *testing.T) {
	d := testDevice(t)
	const steps = 1000
	x := upload(t, d, engine.F32, []float32{0, 0.5, -1}, 3)
	one := upload(t, d, engine.F32, []float32{1, 1, 1}, 3)
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	sub0, bar0 := d.b.submits, d.b.barriers
	for i := 0; i < steps; i++ {
		if err := d.AddScaled(x, x, one, 1, 1); err != nil {
			t.Fatal(err)
		}
	}
	if d.b.submits != sub0 {
		t.Errorf("recording %d ops submitted %d batches; want none before the host needs a result", steps, d.b.submits-sub0)
	}
	if got := d.b.barriers - bar0; got < steps-1 {
		t.Errorf("%d barriers between %d dependent dispatches, want >= %d", got, steps, steps-1)
	}
	got := download(t, x)
	for i, want := range []float32{steps, steps + 0.5, steps - 1} {
		if got[i] != want {
			t.Errorf("x[%d] = %v after %d adds, want %v", i, got[i], steps, want)
		}
	}
	if n := d.b.submits - sub0; n != 1 {
		t.Errorf("%d submits for one batch and one read, want 1", n)
	}
}

// Independent dispatches need no barrier between them.
func TestIndependentOpsNoBarrier(t *testing.T) {
	d := testDevice(t)
	var xs []*engine.Tensor
	src := upload(t, d, engine.F32, []float32{1, 2, 3, 4}, 4)
	for i := 0; i < 8; i++ {
		x, err := d.Alloc(engine.F32, 4)
		if err != nil {
			t.Fatal(err)
		}
		xs = append(xs, x)
	}
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	bar0 := d.b.barriers
	for i, x := range xs {
		if err := d.AddScaled(x, src, src, float32(i), 0); err != nil {
			t.Fatal(err)
		}
	}
	if got := d.b.barriers - bar0; got != 0 {
		t.Errorf("%d barriers between %d independent dispatches, want 0", got, len(xs))
	}
	for i, x := range xs {
		got := download(t, x)
		if got[3] != float32(4*i) {
			t.Errorf("x%d[3] = %v, want %v", i, got[3], 4*i)
		}
	}
}

// A Read in the middle of a batch submits what was recorded so far and
// sees its result; recording continues afterwards.
func TestReadMidBatchFlushes(t *testing.T) {
	d := testDevice(t)
	x := upload(t, d, engine.F32, []float32{1, 2}, 2)
	for i := 0; i < 5; i++ {
		if err := d.AddScaled(x, x, x, 1, 1); err != nil { // x *= 2
			t.Fatal(err)
		}
	}
	if got := download(t, x); got[0] != 32 || got[1] != 64 {
		t.Fatalf("mid-batch read = %v, want [32 64]", got)
	}
	for i := 0; i < 3; i++ {
		if err := d.AddScaled(x, x, x, 1, 1); err != nil {
			t.Fatal(err)
		}
	}
	if got := download(t, x); got[0] != 256 || got[1] != 512 {
		t.Fatalf("final read = %v, want [256 512]", got)
	}
}

// Memory freed while queued ops still use it is reused in stream order:
// the new tensor's upload and zero fill happen after those ops.
func TestFreeReuseIsOrdered(t *testing.T) {
	d := testDevice(t)
	const n = 4096
	vals := make([]float32, n)
	for i := range vals {
		vals[i] = float32(i)
	}
	a := upload(t, d, engine.F32, vals, n)
	b, err := d.Alloc(engine.F32, n)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := d.AddScaled(b, a, a, 2, 0); err != nil { // queued, reads a
		t.Fatal(err)
	}
	ra := regionOf(a)
	d.Free(a)
	c, err := d.Alloc(engine.F32, n) // may take a's range: zeroed after the add
	if err != nil {
		t.Fatal(err)
	}
	if regionOf(c).off == ra.off && regionOf(c).blk == ra.blk {
		t.Logf("c reuses a's range")
	}
	junk := make([]float32, n)
	for i := range junk {
		junk[i] = -7
	}
	if err := engine.WriteFloat32(c, junk); err != nil {
		t.Fatal(err)
	}
	got := download(t, b)
	for i := range got {
		if got[i] != 2*vals[i] {
			t.Fatalf("b[%d] = %v, want %v: the reuse of a's memory overtook the op reading it", i, got[i], 2*vals[i])
		}
	}
	if gc := download(t, c); gc[0] != -7 || gc[n-1] != -7 {
		t.Fatalf("c = %v..., want -7", gc[:2])
	}
	if _, err := d.Alloc(engine.F32, n); err != nil {
		t.Fatal(err)
	}
}

// Tensors larger than one storage-buffer binding can address are refused
// with an error naming the limit.
func TestOversizedTensorRefused(t *testing.T) {
	d := testDevice(t)
	lim := d.MaxTensorBytes()
	n := int(lim/4) + 1
	_, err := d.Alloc(engine.F32, n)
	if err == nil {
		t.Fatalf("Alloc(f32[%d]) of %d bytes succeeded on a device limited to %d bytes per tensor", n, 4*n, lim)
	}
	if !strings.Contains(err.Error(), "maxStorageBufferRange") {
		t.Errorf("error %q does not name maxStorageBufferRange", err)
	}
	// Just below the limit is fine for 16-bit tensors of an odd count too.
	x, err := d.Alloc(engine.BF16, 3)
	if err != nil {
		t.Fatal(err)
	}
	d.Free(x)
}

// Bad indices found by shaders are reported by Sync (and only once).
func TestShaderErrorsAtSync(t *testing.T) {
	d := testDevice(t)
	table := upload(t, d, engine.F32, make([]float32, 4*3), 4, 3)
	ids, err := engine.FromInt32(d, []int32{0, 3, 4}, 3)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := d.Alloc(engine.F32, 3, 3)
	if err := d.Embedding(out, table, ids); err != nil {
		t.Fatal(err)
	}
	err = d.Sync()
	if err == nil || !strings.Contains(err.Error(), "ids[2] = 4") {
		t.Fatalf("Sync after an out-of-range id = %v, want an error naming ids[2] = 4", err)
	}
	if err := d.Sync(); err != nil {
		t.Fatalf("second Sync = %v, want nil (the error is reported once)", err)
	}

	q := upload(t, d, engine.F32, make([]float32, 2*1*1*8), 2, 1, 1, 8)
	kc := upload(t, d, engine.F32, make([]float32, 2*1*5*8), 2, 1, 5, 8)
	lens, _ := engine.FromInt32(d, []int32{3, 9}, 2)
	o, _ := d.Alloc(engine.F32, 2, 1, 1, 8)
	if err := d.DecodeAttention(engine.DecodeArgs{Q: q, KCache: kc, VCache: kc, Lens: lens, O: o}); err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); err == nil || !strings.Contains(err.Error(), "lens[1] = 9") {
		t.Fatalf("Sync after lens beyond the capacity = %v, want an error naming lens[1] = 9", err)
	}
}

// f32 to f16/bf16 conversions in the shaders round exactly like the
// host's, including subnormals, ties and overflow.
func TestHalfConversionsExact(t *testing.T) {
	d := testDevice(t)
	vals := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 65504, 65519.99, 65520, 1e6, -1e6, 5.9604645e-8, 2.9802322e-8, 2.9802326e-8,
		4.4703484e-8, 6.1035156e-5, 6.1035152e-5, 1.0009765625, 1.00048828125, 1.00146484375, 3.3895314e38,
		float32(math.Inf(1)), float32(math.Inf(-1)), 1.00390625, 1.01171875, -2.5e-39, 1e-45, 0.1, 3.14159265}
	src := upload(t, d, engine.F32, vals, len(vals))
	for _, dt := range []engine.DType{engine.F16, engine.BF16} {
		dst, _ := d.Alloc(dt, len(vals))
		if err := d.Cast(dst, src); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, dst.Bytes())
		if err := d.Read(dst, buf); err != nil {
			t.Fatal(err)
		}
		for i, v := range vals {
			got := uint16(buf[2*i]) | uint16(buf[2*i+1])<<8
			want := engine.F16FromFloat32(v)
			if dt == engine.BF16 {
				want = engine.BF16FromFloat32(v)
			}
			if got != want {
				t.Errorf("%v(%g) = %#04x, want %#04x", dt, v, got, want)
			}
		}
		// And back: widening is exact.
		back, _ := d.Alloc(engine.F32, len(vals))
		if err := d.Cast(back, dst); err != nil {
			t.Fatal(err)
		}
		got := download(t, back)
		for i, v := range vals {
			if want := dt.Round(v); got[i] != want && !(math.IsNaN(float64(got[i])) && math.IsNaN(float64(want))) {
				t.Errorf("f32(%v(%g)) = %g, want %g", dt, v, got[i], want)
			}
		}
	}
}

// Operations on a closed device fail cleanly.
func TestClosedDevice(t *testing.T) {
	d := testDevice(t)
	x := upload(t, d, engine.F32, []float32{1}, 1)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Fill(x, 1); !errors.Is(err, errClosed) {
		t.Errorf("Fill on a closed device = %v, want errClosed", err)
	}
	if _, err := d.Alloc(engine.F32, 1); err == nil {
		t.Error("Alloc on a closed device succeeded")
	}
}

// GPU timestamps around a batch of ops.
func TestTimed(t *testing.T) {
	d := testDevice(t)
	a, _ := d.Alloc(engine.F32, 256, 256)
	c, _ := d.Alloc(engine.F32, 256, 256)
	dt, err := d.Timed(func() error { return d.MatMul(c, a, a, engine.MatMulOpts{}) })
	if err != nil {
		t.Skipf("no timestamps: %v", err)
	}
	if dt <= 0 {
		t.Errorf("Timed = %v, want > 0", dt)
	}
	t.Logf("256^3 matmul: %v", dt)
}
