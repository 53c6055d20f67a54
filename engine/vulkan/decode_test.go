package vulkan

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/cpu"
)

// TestDecodeKernel checks attn_decode (the bandwidth kernel) against the
// CPU backend on shapes that span many tiles and splits: GQA groups of
// 1 to 8 heads, several query positions, sliding windows, short and
// full sequences, every cache dtype. The conformance suite's decode
// shapes are small; these make every tile boundary, the register
// prefetch, the split ranges and the key-group merge matter.
func TestDecodeKernel(t *testing.T) {
	d := testDevice(t)
	c := cpu.New()
	cases := []struct {
		dt                    engine.DType
		B, Hkv, G, Lq, Cap, D int
		lens                  []int32
		window, splits        int
		softmax               bool
		generic               bool // through attn_fwd (PARALLAX_VULKAN_DECODE=generic)
	}{
		{engine.BF16, 2, 2, 4, 1, 700, 128, []int32{700, 333}, 0, 0, false, false},
		{engine.BF16, 2, 2, 4, 1, 700, 128, []int32{517, 1}, 0, 7, false, false},
		{engine.BF16, 1, 1, 8, 1, 900, 64, []int32{900}, 130, 0, false, false},
		{engine.BF16, 1, 2, 2, 3, 400, 128, []int32{399}, 0, 3, false, false},
		{engine.F16, 3, 1, 1, 1, 300, 256, []int32{300, 64, 129}, 0, 0, false, false},
		{engine.F16, 1, 2, 4, 1, 1000, 32, []int32{1000}, 0, 1, true, false},
		{engine.F32, 2, 1, 2, 1, 500, 64, []int32{500, 250}, 50, 0, false, false},
		{engine.F32, 1, 1, 4, 2, 200, 128, []int32{200}, 0, 2, false, false},
		{engine.BF16, 2, 2, 4, 1, 700, 128, []int32{700, 333}, 0, 0, false, true},
		{engine.BF16, 1, 1, 4, 4, 300, 64, []int32{290}, 40, 3, false, false}, // 16 rows: attn_fwd
	}
	rng := rand.New(rand.NewPCG(7, 11))
	for _, tc := range cases {
		name := fmt.Sprintf("%v B%d Hkv%d G%d Lq%d Cap%d D%d w%d s%d softmax=%v generic=%v", tc.dt, tc.B, tc.Hkv, tc.G, tc.Lq, tc.Cap, tc.D, tc.window, tc.splits, tc.softmax, tc.generic)
		t.Run(name, func(t *testing.T) {
			if tc.generic {
				t.Setenv("PARALLAX_VULKAN_DECODE", "generic")
			}
			Hq := tc.Hkv * tc.G
			randn := func(n int, s float64) []float32 {
				v := make([]float32, n)
				for i := range v {
					v[i] = float32(rng.NormFloat64() * s)
				}
				return v
			}
			qv := randn(tc.B*Hq*tc.Lq*tc.D, 1)
			rv := randn(tc.B*Hq*tc.Lq*tc.D, 1/math.Sqrt(float64(tc.D)))
			kv := randn(tc.B*tc.Hkv*tc.Cap*tc.D, 1)
			vv := randn(tc.B*tc.Hkv*tc.Cap*tc.D, 1)
			run := func(dev engine.Device) []float32 {
				mk := func(v []float32, shape ...int) *engine.Tensor {
					x, err := engine.FromFloat32(dev, tc.dt, v, shape...)
					if err != nil {
						t.Fatal(err)
					}
					return x
				}
				lens, err := engine.FromInt32(dev, tc.lens, tc.B)
				if err != nil {
					t.Fatal(err)
				}
				a := engine.DecodeArgs{
					Q: mk(qv, tc.B, Hq, tc.Lq, tc.D), KCache: mk(kv, tc.B, tc.Hkv, tc.Cap, tc.D),
					VCache: mk(vv, tc.B, tc.Hkv, tc.Cap, tc.D), Lens: lens,
					O: mk(make([]float32, len(qv)), tc.B, Hq, tc.Lq, tc.D), Window: tc.window, Splits: tc.splits,
				}
				if !tc.softmax {
					a.R = mk(rv, tc.B, Hq, tc.Lq, tc.D)
				}
				if dd, ok := dev.(*Device); ok {
					dm := engine.AttnDims{B: tc.B, Hq: Hq, Hkv: tc.Hkv, G: tc.G, Lq: tc.Lq, Lk: tc.Cap, D: tc.D}
					// Every device with subgroup arithmetic and 32 KiB of
					// shared memory takes 16-bit caches of D <= 128 to
					// attn_decode; f32 and larger heads may need more.
					_, fast := dd.planDecode(dm, a)
					if want := !tc.generic && tc.G*tc.Lq <= 8; fast != want && (!want || (tc.D <= 128 && tc.dt != engine.F32)) {
						t.Fatalf("attn_decode serves this shape on %s: %v", dd.pd.name, fast)
					}
					t.Logf("attn_decode: %v", fast)
				}
				ops, ok := dev.(engine.Ops)
				if !ok {
					t.Fatalf("%T has no ops", dev)
				}
				if err := ops.DecodeAttention(a); err != nil {
					t.Fatal(err)
				}
				o, err := engine.Float32s(a.O)
				if err != nil {
					t.Fatal(err)
				}
				return o
			}
			want, got := run(c), run(d)
			var worst, scale float64
			for i := range want {
				if math.IsNaN(float64(got[i])) {
					t.Fatalf("o[%d] is NaN", i)
				}
				worst = max(worst, math.Abs(float64(got[i]-want[i])))
				scale = max(scale, math.Abs(float64(want[i])))
			}
			tol := 1e-5
			if tc.dt != engine.F32 {
				tol = 4e-3 // both backends read the same 16-bit inputs; the output is rounded
				if tc.dt == engine.BF16 {
					tol = 1.6e-2
				}
			}
			if rel := worst / max(scale, 1e-30); rel > tol || scale == 0 {
				t.Errorf("max |vulkan - cpu| / max |cpu| = %.3g (tolerance %.3g, scale %.3g)", rel, tol, scale)
			} else {
				t.Logf("relative error %.3g", rel)
			}
		})
	}
}
