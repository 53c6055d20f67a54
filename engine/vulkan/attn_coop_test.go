package vulkan

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/cpu"
)

// TestAttentionForwardKernel checks the attention forward (attn_fwd_coop
// where the device has tensor cores, else attn_fwd) against the CPU
// backend on prefill shapes that span many 32-row blocks and 16-key
// tiles: GQA, rows that do not fill a block (and blocks that straddle two
// heads), causal with and without a window, non-causal, more keys than
// queries, D = 64 and 128, softmax and Parallax, with every saved
// statistic. On a device with cooperative matrices the 16-bit cases must
// take the tensor-core kernel.
func TestAttentionForwardKernel(t *testing.T) {
	d := testDevice(t)
	c := cpu.New()
	cases := []struct {
		dt                   engine.DType
		B, Hkv, G, Lq, Lk, D int
		causal               bool
		window               int
		softmax              bool
		scale                float64 // inputs' standard deviation
	}{
		{engine.BF16, 2, 2, 2, 200, 200, 128, true, 0, false, 1},
		{engine.BF16, 1, 1, 4, 77, 77, 64, true, 0, false, 1},
		{engine.F16, 1, 2, 1, 130, 300, 64, true, 50, false, 1},
		{engine.F16, 2, 1, 2, 64, 96, 128, false, 0, false, 1},
		{engine.BF16, 1, 2, 2, 300, 300, 128, true, 0, true, 1},
		{engine.BF16, 1, 1, 1, 512, 512, 128, true, 0, false, 3}, // large scores: the max moves often
		{engine.BF16, 1, 1, 2, 40, 40, 16, true, 0, false, 1},    // fewer K/V pieces than invocations
		{engine.F16, 1, 2, 1, 50, 60, 48, true, 0, false, 1},     // pieces not a multiple of the workgroup
		{engine.F32, 1, 1, 2, 100, 100, 64, true, 0, false, 1},
	}
	rng := rand.New(rand.NewPCG(3, 5))
	for _, tc := range cases {
		name := fmt.Sprintf("%v B%d Hkv%d G%d Lq%d Lk%d D%d causal=%v w%d softmax=%v x%g", tc.dt, tc.B, tc.Hkv, tc.G, tc.Lq, tc.Lk, tc.D, tc.causal, tc.window, tc.softmax, tc.scale)
		t.Run(name, func(t *testing.T) {
			Hq := tc.Hkv * tc.G
			randn := func(n int, s float64) []float32 { return randNormal(rng, n, s) }
			nq, nk := tc.B*Hq*tc.Lq*tc.D, tc.B*tc.Hkv*tc.Lk*tc.D
			qv, kv, vv := randn(nq, tc.scale), randn(nk, tc.scale), randn(nk, 1)
			rv := randn(nq, 1/math.Sqrt(float64(tc.D)))
			type outs struct{ o, lse, vbar, tbar []float32 }
			run := func(dev engine.Device) outs {
				ts := &tensors{t: t, dev: dev}
				defer ts.free()
				mk := ts.make
				a := engine.AttentionArgs{
					Q: mk(tc.dt, qv, tc.B, Hq, tc.Lq, tc.D), K: mk(tc.dt, kv, tc.B, tc.Hkv, tc.Lk, tc.D),
					V: mk(tc.dt, vv, tc.B, tc.Hkv, tc.Lk, tc.D), O: mk(tc.dt, make([]float32, nq), tc.B, Hq, tc.Lq, tc.D),
					LSE:           mk(engine.F32, make([]float32, nq/tc.D), tc.B, Hq, tc.Lq),
					AttentionOpts: engine.AttentionOpts{Causal: tc.causal, Window: tc.window},
				}
				if !tc.softmax {
					a.R = mk(tc.dt, rv, tc.B, Hq, tc.Lq, tc.D)
					a.Vbar = mk(tc.dt, make([]float32, nq), tc.B, Hq, tc.Lq, tc.D)
					a.Tbar = mk(engine.F32, make([]float32, nq/tc.D), tc.B, Hq, tc.Lq)
				}
				if dd, ok := dev.(*Device); ok {
					dims, err := engine.CheckAttention(nil, a)
					if err != nil {
						t.Fatal(err)
					}
					coop := dd.useFwdCoop(fwdCall{dims: dims, q: in(a.Q), k: in(a.K), v: in(a.V), r: dd.opt(a.R, false),
						mode: modeSoftmax, hasR: a.R != nil})
					forced := os.Getenv("PARALLAX_VULKAN_ATTN") == "scalar"
					if want := dd.coop && dd.hasSubgroupOps(subgroupBasic|subgroupVote|subgroupClustered) && tc.dt != engine.F32 && !forced; coop != want {
						t.Fatalf("tensor-core forward on %s: %v, want %v", dd.pd.name, coop, want)
					}
					t.Logf("tensor cores: %v", coop)
				}
				if err := dev.(engine.Ops).Attention(a); err != nil {
					t.Fatal(err)
				}
				return outs{read(t, a.O), read(t, a.LSE), read(t, a.Vbar), read(t, a.Tbar)}
			}
			want, got := run(c), run(d)
			tol := dtypeTol(tc.dt, 1e-5)
			checkClose(t, "o", want.o, got.o, tol)
			checkClose(t, "lse", want.lse, got.lse, max(tol/4, 1e-6)) // f32 from f32 sums
			if !tc.softmax {
				checkClose(t, "vbar", want.vbar, got.vbar, tol)
				checkClose(t, "tbar", want.tbar, got.tbar, tol)
			}
		})
	}
}

// TestAttentionBackwardKernel checks the attention backward (the
// tensor-core kernels where the device has them, else the scalar ones)
// against the CPU backend: each backend runs the forward and then the
// backward on the same inputs and upstream gradient, and dq, dk, dv (and
// dr) are compared, on the forward test's kinds of shapes.
func TestAttentionBackwardKernel(t *testing.T) {
	d := testDevice(t)
	c := cpu.New()
	cases := []struct {
		dt                   engine.DType
		B, Hkv, G, Lq, Lk, D int
		causal               bool
		window               int
		softmax              bool
		gscale               float64 // the upstream gradient's standard deviation
	}{
		{engine.BF16, 1, 2, 2, 200, 200, 128, true, 0, false, 1},
		{engine.F16, 1, 1, 4, 77, 77, 64, true, 0, false, 1},
		{engine.F16, 1, 2, 1, 130, 300, 64, true, 50, false, 1},
		{engine.BF16, 2, 1, 2, 64, 96, 128, false, 0, false, 1},
		{engine.BF16, 1, 2, 2, 150, 150, 64, true, 0, true, 1},
		{engine.BF16, 1, 1, 2, 40, 40, 16, true, 0, false, 1},
		{engine.F16, 1, 2, 1, 50, 60, 48, true, 0, false, 1},
		{engine.F32, 1, 1, 2, 70, 70, 64, true, 0, false, 1},
		// Training-sized gradients, far below f16's normal range, and large
		// ones: the tensor-core kernels scale dO into range.
		{engine.BF16, 1, 2, 2, 200, 200, 128, true, 0, false, 1e-6},
		{engine.F16, 1, 1, 4, 77, 77, 64, true, 0, false, 1e-5},
		{engine.BF16, 1, 1, 2, 64, 64, 64, true, 0, true, 1e-7},
		{engine.BF16, 1, 1, 2, 64, 64, 128, false, 0, false, 300},
	}
	rng := rand.New(rand.NewPCG(9, 1))
	for _, tc := range cases {
		name := fmt.Sprintf("%v B%d Hkv%d G%d Lq%d Lk%d D%d causal=%v w%d softmax=%v g%g", tc.dt, tc.B, tc.Hkv, tc.G, tc.Lq, tc.Lk, tc.D, tc.causal, tc.window, tc.softmax, tc.gscale)
		t.Run(name, func(t *testing.T) {
			Hq := tc.Hkv * tc.G
			randn := func(n int, s float64) []float32 { return randNormal(rng, n, s) }
			nq, nk := tc.B*Hq*tc.Lq*tc.D, tc.B*tc.Hkv*tc.Lk*tc.D
			qv, kv, vv, gv := randn(nq, 1), randn(nk, 1), randn(nk, 1), randn(nq, tc.gscale)
			rv := randn(nq, 1/math.Sqrt(float64(tc.D)))
			run := func(dev engine.Device) map[string][]float32 {
				ts := &tensors{t: t, dev: dev}
				defer ts.free()
				mk := ts.make
				qs, ks, rs := []int{tc.B, Hq, tc.Lq, tc.D}, []int{tc.B, tc.Hkv, tc.Lk, tc.D}, []int{tc.B, Hq, tc.Lq}
				opts := engine.AttentionOpts{Causal: tc.causal, Window: tc.window}
				f := engine.AttentionArgs{
					Q: mk(tc.dt, qv, qs...), K: mk(tc.dt, kv, ks...), V: mk(tc.dt, vv, ks...),
					O: mk(tc.dt, make([]float32, nq), qs...), LSE: mk(engine.F32, make([]float32, nq/tc.D), rs...),
					AttentionOpts: opts,
				}
				if !tc.softmax {
					f.R = mk(tc.dt, rv, qs...)
					f.Vbar = mk(tc.dt, make([]float32, nq), qs...)
					f.Tbar = mk(engine.F32, make([]float32, nq/tc.D), rs...)
				}
				ops := dev.(engine.Ops)
				if err := ops.Attention(f); err != nil {
					t.Fatal(err)
				}
				bw := engine.AttentionBackwardArgs{
					Q: f.Q, K: f.K, V: f.V, R: f.R, O: f.O, DO: mk(tc.dt, gv, qs...), LSE: f.LSE, Vbar: f.Vbar, Tbar: f.Tbar,
					DQ: mk(tc.dt, make([]float32, nq), qs...), DK: mk(tc.dt, make([]float32, nk), ks...),
					DV: mk(tc.dt, make([]float32, nk), ks...), AttentionOpts: opts,
				}
				if !tc.softmax {
					bw.DR = mk(tc.dt, make([]float32, nq), qs...)
				}
				if dd, ok := dev.(*Device); ok {
					dims, err := engine.CheckAttentionBackward(nil, bw)
					if err != nil {
						t.Fatal(err)
					}
					coop := dd.useBwdCoop(bwdCall{dims: dims, q: in(bw.Q), k: in(bw.K), v: in(bw.V), r: dd.opt(bw.R, false),
						g: in(bw.DO), mode: modeSoftmax, hasR: bw.R != nil})
					forced := os.Getenv("PARALLAX_VULKAN_ATTN") == "scalar"
					if want := dd.coop && dd.hasSubgroupOps(subgroupBasic|subgroupVote) && tc.dt != engine.F32 && !forced; coop != want {
						t.Fatalf("tensor-core backward on %s: %v, want %v", dd.pd.name, coop, want)
					}
					t.Logf("tensor cores: %v", coop)
				}
				if err := ops.AttentionBackward(bw); err != nil {
					t.Fatal(err)
				}
				return map[string][]float32{"dq": read(t, bw.DQ), "dk": read(t, bw.DK), "dv": read(t, bw.DV), "dr": read(t, bw.DR)}
			}
			want, got := run(c), run(d)
			for _, name := range []string{"dq", "dk", "dv", "dr"} {
				if want[name] != nil {
					checkClose(t, name, want[name], got[name], dtypeTol(tc.dt, 1e-4))
				}
			}
		})
	}
}
