package vulkan

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
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
		scalar                bool // never attn_decode_coop (PARALLAX_VULKAN_DECODE=scalar)
		ramp                  bool // scores rising along the cache: the max grows tile after tile
	}{
		{engine.BF16, 2, 2, 4, 1, 700, 128, []int32{700, 333}, 0, 0, false, false, false, false},
		{engine.BF16, 2, 2, 4, 1, 700, 128, []int32{517, 1}, 0, 7, false, false, false, false},
		{engine.BF16, 1, 1, 8, 1, 900, 64, []int32{900}, 130, 0, false, false, false, false},
		{engine.BF16, 1, 2, 2, 3, 400, 128, []int32{399}, 0, 3, false, false, false, false},
		{engine.F16, 3, 1, 1, 1, 300, 256, []int32{300, 64, 129}, 0, 0, false, false, false, false},
		{engine.F16, 1, 2, 4, 1, 1000, 32, []int32{1000}, 0, 1, true, false, false, false},
		{engine.F32, 2, 1, 2, 1, 500, 64, []int32{500, 250}, 50, 0, false, false, false, false},
		{engine.F32, 1, 1, 4, 2, 200, 128, []int32{200}, 0, 2, false, false, false, false},
		{engine.BF16, 2, 2, 4, 1, 700, 128, []int32{700, 333}, 0, 0, false, true, false, false},
		{engine.BF16, 1, 1, 4, 4, 300, 64, []int32{290}, 40, 3, false, false, false, false}, // 16 rows: attn_fwd
		// Several positions per sequence in the 16 x 8 kernel (up to 4 rows).
		{engine.BF16, 2, 2, 2, 2, 600, 128, []int32{600, 97}, 70, 0, false, false, false, false},
		{engine.F16, 1, 1, 1, 3, 500, 64, []int32{480}, 0, 3, false, false, false, false},
		// The scalar kernel on the shapes the tensor-core one takes.
		{engine.BF16, 2, 2, 4, 1, 700, 128, []int32{700, 333}, 0, 0, false, false, true, false},
		{engine.BF16, 1, 1, 8, 1, 900, 64, []int32{900}, 130, 0, false, false, true, false},
		{engine.F16, 3, 1, 1, 1, 300, 256, []int32{300, 64, 129}, 0, 0, false, false, true, false},
		// Rescaling of the accumulators in (nearly) every tile.
		{engine.BF16, 1, 2, 2, 1, 2000, 128, []int32{1999}, 0, 0, false, false, false, true},
		{engine.F16, 1, 1, 4, 2, 1500, 64, []int32{1500}, 0, 5, false, false, false, true},
	}
	rng := rand.New(rand.NewPCG(7, 11))
	for _, tc := range cases {
		name := fmt.Sprintf("%v B%d Hkv%d G%d Lq%d Cap%d D%d w%d s%d softmax=%v generic=%v scalar=%v ramp=%v", tc.dt, tc.B, tc.Hkv, tc.G, tc.Lq, tc.Cap, tc.D, tc.window, tc.splits, tc.softmax, tc.generic, tc.scalar, tc.ramp)
		t.Run(name, func(t *testing.T) {
			if tc.generic {
				setOptions(t, d, Options{Decode: "generic"})
			}
			if tc.scalar {
				setOptions(t, d, Options{Decode: "scalar"})
			}
			Hq := tc.Hkv * tc.G
			randn := func(n int, s float64) []float32 { return randNormal(rng, n, s) }
			qv := randn(tc.B*Hq*tc.Lq*tc.D, 1)
			rv := randn(tc.B*Hq*tc.Lq*tc.D, 1/math.Sqrt(float64(tc.D)))
			kv := randn(tc.B*tc.Hkv*tc.Cap*tc.D, 1)
			if tc.ramp {
				// Key j leans towards every query of its KV head by j / 200:
				// scores grow along the cache, so most tiles raise the max.
				for b := range tc.B {
					for h := range tc.Hkv {
						for j := range tc.Cap {
							for x := range tc.D {
								var dir float64
								for g := range tc.G * tc.Lq {
									dir += float64(qv[((b*Hq+h*tc.G)*tc.Lq+g)*tc.D+x])
								}
								kv[((b*tc.Hkv+h)*tc.Cap+j)*tc.D+x] += float32(dir * float64(j) / 200 / float64(tc.G*tc.Lq))
							}
						}
					}
				}
			}
			vv := randn(tc.B*tc.Hkv*tc.Cap*tc.D, 1)
			run := func(dev engine.Device) []float32 {
				ts := &tensors{t: t, dev: dev}
				defer ts.free()
				mk := func(v []float32, shape ...int) *engine.Tensor { return ts.make(tc.dt, v, shape...) }
				lens, err := engine.FromInt32(dev, tc.lens, tc.B)
				if err != nil {
					t.Fatal(err)
				}
				ts.all = append(ts.all, lens)
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
					k, fast := dd.planDecode(dm, a)
					// (Unless a tuning override narrows the choice of tiles.)
					tuned := d.Options().DecodeKeyTile != 0
					if want := !tc.generic && tc.G*tc.Lq <= 8; fast != want && (!want || (tc.D <= 128 && tc.dt != engine.F32 && !tuned)) {
						t.Fatalf("attn_decode serves this shape on %s: %v", dd.pd.name, fast)
					}
					// Where the matmul runs on tensor cores, so must decode.
					coop := strings.HasPrefix(k.kernel, "attn_decode_coop")
					scalar := tc.scalar || os.Getenv("PARALLAX_VULKAN_DECODE") == "scalar"
					if want := dd.coop && fast && !scalar && tc.dt != engine.F32 && tc.D%16 == 0; coop != want {
						t.Fatalf("kernel %q on %s (tensor cores expected: %v)", k.kernel, dd.pd.name, want)
					}
					t.Logf("kernel: %q", k.kernel)
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
			// Both backends read the same 16-bit inputs; the output is rounded.
			checkClose(t, "o", want, got, dtypeTol(tc.dt, 1e-5))
		})
	}
}

// TestDecodeCoopRange checks that a cache value beyond f16's range on the
// tensor-core decode path is reported by Sync, not returned as a silent
// infinity or NaN, and that the scalar kernel computes the same input.
func TestDecodeCoopRange(t *testing.T) {
	d := testDevice(t)
	const B, Hkv, G, L, D = 1, 1, 2, 256, 64
	dm := engine.AttnDims{B: B, Hq: Hkv * G, Hkv: Hkv, G: G, Lq: 1, Lk: L, D: D}
	mk := func(v []float32, shape ...int) *engine.Tensor {
		x, err := engine.FromFloat32(d, engine.BF16, v, shape...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Free(x) })
		return x
	}
	fill := func(n int, v float32) []float32 {
		out := make([]float32, n)
		for i := range out {
			out[i] = v * float32(i%7-3) / 3
		}
		return out
	}
	vv := fill(B*Hkv*L*D, 1)
	vv[5*D+3] = 1e5 // representable in bf16, not in f16
	lens, err := engine.FromInt32(d, []int32{L}, B)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Free(lens) })
	a := engine.DecodeArgs{
		Q: mk(fill(B*Hkv*G*D, 0.1), B, Hkv*G, 1, D), R: mk(fill(B*Hkv*G*D, 0.01), B, Hkv*G, 1, D),
		KCache: mk(fill(B*Hkv*L*D, 0.5), B, Hkv, L, D), VCache: mk(vv, B, Hkv, L, D),
		Lens: lens, O: mk(make([]float32, B*Hkv*G*D), B, Hkv*G, 1, D),
	}
	if k, ok := d.planDecode(dm, a); !ok || !strings.HasPrefix(k.kernel, "attn_decode_coop") {
		t.Skipf("%s has no tensor-core decode", d.pd.name)
	}
	if err := d.DecodeAttention(a); err != nil {
		t.Fatal(err)
	}
	err = d.Sync()
	if err == nil || !strings.Contains(err.Error(), "65504") {
		t.Fatalf("Sync = %v, want the f16 range error", err)
	}
	t.Log(err)
	setOptions(t, d, Options{Decode: "scalar"})
	if err := d.DecodeAttention(a); err != nil {
		t.Fatal(err)
	}
	o, err := engine.Float32s(a.O)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range o {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatalf("scalar kernel: o[%d] = %v", i, v)
		}
	}
}
