package vulkan

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/parallax-engine/parallax/engine"
)

// benchShape reads the comma-separated integers of environment variable
// name, or returns def.
func benchShape(b *testing.B, name string, def []int) []int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	out := make([]int, len(def))
	ptrs := make([]any, len(def))
	format := ""
	for i := range out {
		ptrs[i] = &out[i]
		if i > 0 {
			format += ","
		}
		format += "%d"
	}
	if _, err := fmt.Sscanf(v, format, ptrs...); err != nil {
		b.Fatalf("%s=%q: want %d comma-separated integers: %v", name, v, len(def), err)
	}
	return out
}

// timeGPU runs fn b.N times between GPU timestamps and reports the mean
// device time as gpu-us/op.
func timeGPU(b *testing.B, d *Device, fn func() error) {
	var total time.Duration
	for range b.N {
		el, err := d.Timed(fn)
		if err != nil {
			b.Fatal(err)
		}
		total += el
	}
	b.ReportMetric(float64(total.Microseconds())/float64(b.N), "gpu-us/op")
}

// BenchmarkAttentionBackwardKernels times the tensor-core backward's two
// kernels separately (causal, bf16, Parallax) at
// PARALLAX_VULKAN_BENCH_ATTN=B,H,L,D (default 8,16,4096,128), on a device
// that has them:
//
//	go test ./engine/vulkan -run - -bench AttentionBackwardKernels
func BenchmarkAttentionBackwardKernels(b *testing.B) {
	d := testDevice(b)
	s := benchShape(b, "PARALLAX_VULKAN_BENCH_ATTN", []int{8, 16, 4096, 128})
	B, H, L, D := s[0], s[1], s[2], s[3]
	if !d.coopAttention(D, 128, subgroupBasic|subgroupVote, engine.BF16) {
		b.Skipf("%s has no tensor-core backward for D = %d", d.pd.name, D)
	}
	ts := &tensors{t: b, dev: d}
	defer ts.free()
	rng := rand.New(rand.NewPCG(1, 2))
	qs, rs := []int{B, H, L, D}, []int{B, H, L}
	n, nr := B*H*L*D, B*H*L
	mk := func(dt engine.DType, n int, s float64, shape ...int) arg {
		return in(ts.make(dt, randNormal(rng, n, s), shape...))
	}
	c := bwdCall{q: mk(engine.BF16, n, 1, qs...), k: mk(engine.BF16, n, 1, qs...), v: mk(engine.BF16, n, 1, qs...),
		r: mk(engine.BF16, n, 0.1, qs...), g: mk(engine.BF16, n, 1, qs...),
		lse: mk(engine.F32, nr, 1, rs...), tb: mk(engine.F32, nr, 0.1, rs...),
		dq: out(ts.make(engine.BF16, make([]float32, n), qs...)), dk: out(ts.make(engine.BF16, make([]float32, n), qs...)),
		dv: out(ts.make(engine.BF16, make([]float32, n), qs...)), dr: out(ts.make(engine.BF16, make([]float32, n), qs...)),
		mode: modeSoftmax, hasR: true,
		dims: engine.AttnDims{B: B, Hq: H, Hkv: H, G: 1, Lq: L, Lk: L, D: D, Scale: float32(1 / math.Sqrt(float64(D))), Causal: true}}
	// T, Bv and the largest |dO| (1) as the pre-pass would leave them.
	sv := randNormal(rng, 2*nr+1, 1)
	sv[2*nr] = 1
	stats := in(ts.make(engine.F32, sv, 2*nr+1))
	for _, k := range []struct {
		name string
		fn   func(bwdCall, arg) error
	}{{"rows", d.bwdRowsCoop}, {"cols", d.bwdColsCoop}} {
		b.Run(k.name, func(b *testing.B) {
			// The first run on fresh buffers is slower (docs/PERFORMANCE.md).
			if err := k.fn(c, stats); err != nil {
				b.Fatal(err)
			}
			timeGPU(b, d, func() error { return k.fn(c, stats) })
		})
	}
}

// BenchmarkDecodeCombine times a decode (bf16, Parallax, one query per
// sequence, every sequence full) and its split-KV combine pass alone at
// PARALLAX_VULKAN_BENCH_DECODE=B,Hq,Hkv,L,D,S (default 1,32,8,16384,128,32):
//
//	go test ./engine/vulkan -run - -bench DecodeCombine
func BenchmarkDecodeCombine(b *testing.B) {
	d := testDevice(b)
	s := benchShape(b, "PARALLAX_VULKAN_BENCH_DECODE", []int{1, 32, 8, 16384, 128, 32})
	B, Hq, Hkv, L, D, S := s[0], s[1], s[2], s[3], s[4], s[5]
	ts := &tensors{t: b, dev: d}
	defer ts.free()
	rng := rand.New(rand.NewPCG(1, 2))
	qs, ks := []int{B, Hq, 1, D}, []int{B, Hkv, L, D}
	lv := make([]int32, B)
	for i := range lv {
		lv[i] = int32(L)
	}
	lens, err := engine.FromInt32(d, lv, B)
	if err != nil {
		b.Fatal(err)
	}
	ts.all = append(ts.all, lens)
	a := engine.DecodeArgs{
		Q: ts.make(engine.BF16, randNormal(rng, B*Hq*D, 1), qs...), R: ts.make(engine.BF16, randNormal(rng, B*Hq*D, 0.1), qs...),
		KCache: ts.make(engine.BF16, randNormal(rng, B*Hkv*L*D, 1), ks...), VCache: ts.make(engine.BF16, randNormal(rng, B*Hkv*L*D, 1), ks...),
		Lens: lens, O: ts.make(engine.BF16, make([]float32, B*Hq*D), qs...), Splits: S,
	}
	b.Run("decode", func(b *testing.B) {
		if err := d.DecodeAttention(a); err != nil {
			b.Fatal(err)
		}
		timeGPU(b, d, func() error { return d.DecodeAttention(a) })
	})
	if S <= 1 {
		return
	}
	dm := engine.AttnDims{B: B, Hq: Hq, Hkv: Hkv, G: Hq / Hkv, Lq: 1, Lk: L, D: D, Causal: true}
	part, release, err := d.partialStates(dm, S)
	if err != nil {
		b.Fatal(err)
	}
	defer release()
	// Every split saw keys (m = d1 = d2 = 1, O1 = O2 = 1), so the combine
	// reads all of them.
	if err := d.b.fill(part.r, 0, part.r.size, math.Float32bits(1)); err != nil {
		b.Fatal(err)
	}
	pc := push(uint32(B), uint32(Hq), uint32(Hkv), uint32(Hq/Hkv), uint32(1), uint32(L),
		true, uint32(0), float32(0.1), uint32(S), uint32(1), uint32(0))
	b.Run("combine", func(b *testing.B) {
		timeGPU(b, d, func() error { return d.combineSplits(dm, pc, part, out(a.O), in(lens), true) })
	})
}
