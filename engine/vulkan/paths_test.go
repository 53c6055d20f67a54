package vulkan

import (
	"regexp"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/enginetest"
)

// runCases runs the conformance cases whose "op/variant/dtype" matches re.
func runCases(t *testing.T, d *Device, re string, dts ...engine.DType) {
	t.Helper()
	filter := regexp.MustCompile(re)
	o := enginetest.Options{DTypes: dts, Short: true}
	seed := enginetest.Seed(o)
	n := 0
	for i, c := range enginetest.Cases(d, o) {
		name := c.Op + "/" + c.Name + "/" + c.DType.String()
		if !filter.MatchString(name) {
			continue
		}
		n++
		r := enginetest.Check(d, c, seed+uint64(i))
		if !r.Pass() {
			w := r.Worst()
			t.Errorf("%s: err %v, worst %s %.3g > %.3g (seed %d)", name, r.Err, w.Name, w.Err, w.Tol, seed)
		}
	}
	if n == 0 {
		t.Fatalf("no case matches %q", re)
	}
}

// The variant of every kernel for devices without 16-bit storage access
// (16-bit elements through 32-bit words, stores with atomics), forced on.
func TestNo16BitStoragePath(t *testing.T) {
	d := testDeviceWith(t, Options{No16BitStorage: true})
	if !d.no16 {
		t.Fatal("No16BitStorage did not select the word-access kernels")
	}
	runCases(t, d, `^(add scaled|cast|swapaxes12|kv append|embedding|rmsnorm|cross entropy|matmul|linear multi|linear swiglu|argmax rows|attention|attention backward|decode attention|linear int8|linear multi int8|linear swiglu int8|norm linear multi int8|norm linear swiglu int8|embedding int8)/`,
		engine.BF16, engine.F16)
}

// Descriptor sets from per-batch pools instead of push descriptors, with
// enough dispatches in one batch to need more than one pool.
func TestDescriptorPoolPath(t *testing.T) {
	d := testDeviceWith(t, Options{NoPushDescriptors: true})
	if d.push {
		t.Fatal("NoPushDescriptors did not disable push descriptors")
	}
	x := upload(t, d, engine.F32, []float32{0, 1}, 2)
	one := upload(t, d, engine.F32, []float32{1, 1}, 2)
	const steps = 600 // > 256 sets per pool
	for i := 0; i < steps; i++ {
		if err := d.AddScaled(x, x, one, 1, 1); err != nil {
			t.Fatal(err)
		}
	}
	if got := download(t, x); got[0] != steps || got[1] != steps+1 {
		t.Fatalf("x = %v after %d adds, want [%d %d]", got, steps, steps, steps+1)
	}
	runCases(t, d, `^(matmul|attention|rmsnorm backward)/`, engine.F32)
}

// testDeviceWith opens vulkan:0 with options o (skipping the test where
// there is no device, as testDevice does).
func testDeviceWith(t testing.TB, o Options) *Device {
	t.Helper()
	testDevice(t) // skips or fails without a device
	d, err := OpenWith(0, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// setOptions gives d the kernel options o, and its own back when the
// test ends.
func setOptions(t testing.TB, d *Device, o Options) {
	t.Helper()
	prev := d.Options()
	if err := d.SetOptions(o); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.SetOptions(prev) })
}
