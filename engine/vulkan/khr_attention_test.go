package vulkan

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/parallax-engine/parallax/engine"
)

// The KHR attention forward (attn_fwd_coop_khr) is certified as the KHR
// matmul is (khr_matmul_test.go): on lavapipe's 8x8x8 fragments and
// 8-wide subgroups in CI, on a GPU's driver through PARALLAX_VULKAN_KHR_RUN.

// TestKHRAttentionConformance runs the conformance suite's attention
// forward cases (f16) on the device with the KHR kernel, which it must
// have kept after its self-test at open: those of head dimensions 16 to
// 128 run on it, the others (D = 8, the non-finite inputs) on the scalar
// kernel, as on the NV path.
func TestKHRAttentionConformance(t *testing.T) {
	index := khrChild(t)
	d := openKHR(t, index)
	if d.khrAttn == 0 {
		t.Fatalf("vulkan:%d: the KHR attention forward is not used: %s", index, d.khrAttnWhy)
	}
	t.Logf("attention path: %s; kernel: %s", d.info.Features["attention path"], d.info.Kernels["attention forward"])
	runCases(t, d, `^attention( backward)?/`, engine.F16)
}

// TestKHRAttentionAgainstScalar compares the KHR forward and backward
// with the scalar kernels on the same 16-bit inputs over the masks and shapes the suite's
// cases do not all reach: no mask, causal with and without a window,
// softmax and Parallax, GQA groups, rows past a block, keys past a tile,
// bf16 inputs, and the saved statistics (lse, vbar, tbar), checking that
// the forward takes the KHR kernel. Both compute in f32 from the same
// inputs; the KHR kernel rounds P and P T to f16 (relative 2^-11) before
// their products with V, which moves o by at most about 2^-11 max|v|
// (1 + |tbar|) and the saved statistics by less. The tolerance, 4e-3
// (1 + max|tbar|) max(max|v|, 1), is eight times that; a misplaced
// fragment, row or key moves o by the order of max|v|.
func TestKHRAttentionAgainstScalar(t *testing.T) {
	index := khrChild(t)
	d := openKHR(t, index)
	if d.khrAttn == 0 {
		t.Fatalf("vulkan:%d: the KHR attention forward is not used: %s", index, d.khrAttnWhy)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, c := range []struct {
		b, hq, hkv, lq, lk, dim int
		causal                  bool
		window                  int
		probe                   bool
		dt                      engine.DType
	}{
		{1, 2, 1, 37, 37, 64, true, 0, true, engine.F16},
		{2, 4, 2, 21, 45, 32, true, 0, true, engine.BF16},
		{1, 2, 2, 19, 53, 16, false, 0, true, engine.F16},
		{1, 3, 1, 40, 40, 32, true, 9, true, engine.F16},
		{1, 2, 1, 17, 33, 64, true, 0, false, engine.BF16},
		{1, 1, 1, 1, 29, 16, true, 0, true, engine.F16},
		{1, 2, 1, 16, 16, 16, false, 0, true, engine.F16},
	} {
		name := fmt.Sprintf("B%d Hq%d Hkv%d Lq%d Lk%d D%d causal %v window %d probe %v %v",
			c.b, c.hq, c.hkv, c.lq, c.lk, c.dim, c.causal, c.window, c.probe, c.dt)
		t.Run(name, func(t *testing.T) {
			var ts []*engine.Tensor
			defer func() {
				for _, x := range ts {
					d.Free(x)
				}
			}()
			up := func(dt engine.DType, scale float64, shape ...int) *engine.Tensor {
				n := 1
				for _, s := range shape {
					n *= s
				}
				v := make([]float32, n)
				for i := range v {
					v[i] = float32(rng.NormFloat64() * scale)
				}
				x, err := engine.FromFloat32(d, dt, v, shape...)
				if err != nil {
					t.Fatal(err)
				}
				ts = append(ts, x)
				return x
			}
			q := up(c.dt, 1, c.b, c.hq, c.lq, c.dim)
			k := up(c.dt, 1, c.b, c.hkv, c.lk, c.dim)
			v := up(c.dt, 1, c.b, c.hkv, c.lk, c.dim)
			var r *engine.Tensor
			if c.probe {
				r = up(c.dt, 0.3, c.b, c.hq, c.lq, c.dim)
			}
			do := up(c.dt, 1, c.b, c.hq, c.lq, c.dim)
			vmax := 0.0
			vs, _ := engine.Float32s(v)
			for _, x := range vs {
				vmax = max(vmax, math.Abs(float64(x)))
			}
			saved := d.opts.Attention
			defer func() { d.opts.Attention = saved }()
			type result struct{ o, lse, vbar, tbar, dq, dk, dv, dr []float32 }
			var res [2]result
			for i, path := range []string{saved, "scalar"} {
				d.opts.Attention = path
				a := engine.AttentionArgs{Q: q, K: k, V: v, R: r,
					AttentionOpts: engine.AttentionOpts{Causal: c.causal, Window: c.window}}
				var err error
				if a.O, err = d.Alloc(engine.F32, c.b, c.hq, c.lq, c.dim); err != nil {
					t.Fatal(err)
				}
				ts = append(ts, a.O)
				if a.LSE, err = d.Alloc(engine.F32, c.b, c.hq, c.lq); err != nil {
					t.Fatal(err)
				}
				ts = append(ts, a.LSE)
				if c.probe {
					if a.Vbar, err = d.Alloc(engine.F32, c.b, c.hq, c.lq, c.dim); err != nil {
						t.Fatal(err)
					}
					if a.Tbar, err = d.Alloc(engine.F32, c.b, c.hq, c.lq); err != nil {
						t.Fatal(err)
					}
					ts = append(ts, a.Vbar, a.Tbar)
				}
				if path != "scalar" {
					dims, err := engine.CheckAttention(d.own, a)
					if err != nil {
						t.Fatal(err)
					}
					c := fwdCall{dims: dims, q: in(q), k: in(k), v: in(v), r: d.opt(r, false), mode: modeSoftmax, hasR: r != nil}
					if !d.useFwdCoopKHR(c) {
						t.Fatal("the forward does not take attn_fwd_coop_khr")
					}
				}
				if err := d.Attention(a); err != nil {
					t.Fatalf("%s path: %v", path, err)
				}
				read := func(x *engine.Tensor) []float32 {
					if x == nil {
						return nil
					}
					f, err := engine.Float32s(x)
					if err != nil {
						t.Fatalf("%s path: %v", path, err)
					}
					return f
				}
				g := engine.AttentionBackwardArgs{Q: q, K: k, V: v, R: r, O: a.O, DO: do, LSE: a.LSE, Vbar: a.Vbar, Tbar: a.Tbar,
					AttentionOpts: a.AttentionOpts}
				grads := []**engine.Tensor{&g.DQ, &g.DK, &g.DV}
				shapes := [][]int{{c.b, c.hq, c.lq, c.dim}, {c.b, c.hkv, c.lk, c.dim}, {c.b, c.hkv, c.lk, c.dim}}
				if c.probe {
					grads, shapes = append(grads, &g.DR), append(shapes, []int{c.b, c.hq, c.lq, c.dim})
				}
				for j, x := range grads {
					var err error
					if *x, err = d.Alloc(engine.F32, shapes[j]...); err != nil {
						t.Fatal(err)
					}
					ts = append(ts, *x)
				}
				if path != "scalar" {
					dims, err := engine.CheckAttentionBackward(d.own, g)
					if err != nil {
						t.Fatal(err)
					}
					bc := bwdCall{dims: dims, q: in(q), k: in(k), v: in(v), r: d.opt(r, false), g: in(do), mode: modeSoftmax, hasR: r != nil}
					if !d.useBwdCoopKHR(bc) {
						t.Fatal("the backward does not take attn_dq_coop_khr and attn_dkv_coop_khr")
					}
				}
				if err := d.AttentionBackward(g); err != nil {
					t.Fatalf("%s path backward: %v", path, err)
				}
				res[i] = result{read(a.O), read(a.LSE), read(a.Vbar), read(a.Tbar), read(g.DQ), read(g.DK), read(g.DV), read(g.DR)}
			}
			tmax := 0.0
			for _, x := range res[1].tbar {
				tmax = max(tmax, math.Abs(float64(x)))
			}
			tol := 4e-3 * (1 + tmax) * max(vmax, 1)
			cmp := func(what string, got, want []float32, tol float64) {
				worst := 0.0
				for i := range want {
					e := math.Abs(float64(got[i] - want[i]))
					if !(e <= tol) { // NaN fails
						t.Fatalf("%s[%d]: %v on the KHR kernel, %v on the scalar one (tolerance %.3g)", what, i, got[i], want[i], tol)
					}
					worst = max(worst, e)
				}
				t.Logf("%s: worst %.3g (tolerance %.3g)", what, worst, tol)
			}
			cmp("o", res[0].o, res[1].o, tol)
			cmp("lse", res[0].lse, res[1].lse, 4e-3)
			if c.probe {
				cmp("vbar", res[0].vbar, res[1].vbar, 4e-3*max(vmax, 1))
				cmp("tbar", res[0].tbar, res[1].tbar, 4e-3*(1+tmax))
			}
			// The gradients: dS, dT and W are rounded to f16 before their
			// products (and dO staged in f16, exactly scaled), so each moves
			// by a few 2^-11 of the sum of its terms' magnitudes; 1% of the
			// largest gradient is far above that at these sizes and far
			// below the error of a misplaced fragment, row or key.
			grad := func(what string, got, want []float32) {
				if want == nil {
					return
				}
				gmax := 0.0
				for _, x := range want {
					gmax = max(gmax, math.Abs(float64(x)))
				}
				cmp(what, got, want, 1e-2*max(gmax, 1e-3))
			}
			grad("dq", res[0].dq, res[1].dq)
			grad("dk", res[0].dk, res[1].dk)
			grad("dv", res[0].dv, res[1].dv)
			grad("dr", res[0].dr, res[1].dr)
		})
	}
}
