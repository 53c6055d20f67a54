//go:build cgo

package cuda_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/cpu"
	"github.com/parallax-engine/parallax/engine/cuda"
	"github.com/parallax-engine/parallax/engine/enginetest"
)

// The conformance suite's attention shapes are small; these cases run the
// tensor-core kernels (bf16, D = 32/64/128, several tiles, GQA, masks) and
// compare them with the CPU backend on the same bf16 inputs.

type tcCase struct {
	B, Hq, Hkv, Lq, Lk, D int
	causal                bool
	window                int
}

func (c tcCase) String() string {
	return fmt.Sprintf("B%d_Hq%d_Hkv%d_Lq%d_Lk%d_D%d_causal%v_w%d", c.B, c.Hq, c.Hkv, c.Lq, c.Lk, c.D, c.causal, c.window)
}

var tcCases = []tcCase{
	{1, 2, 2, 256, 256, 128, true, 0},
	{2, 4, 2, 200, 200, 64, true, 0},
	{1, 4, 1, 100, 300, 128, true, 0},
	{1, 2, 1, 130, 130, 64, false, 0},
	{1, 2, 2, 300, 300, 64, true, 70},
	{2, 2, 1, 150, 150, 32, true, 0},
	{1, 2, 1, 520, 520, 128, true, 0},
	{1, 2, 2, 400, 400, 128, true, 100},
	{1, 2, 2, 64, 1000, 128, false, 0},
}

// pair holds the same tensor on both devices.
type pair struct{ g, c *engine.Tensor }

type twin struct {
	t         *testing.T
	gpu, cpu  engine.Device
	rng       *rand.Rand
	allocated []pair
}

func (w *twin) up(dt engine.DType, scale float64, shape ...int) pair {
	n := engine.Shape(shape).Numel()
	v := enginetest.Normal(w.rng, dt, n, scale)
	g, err := enginetest.Upload(w.gpu, dt, v, shape...)
	if err != nil {
		w.t.Fatal(err)
	}
	c, err := enginetest.Upload(w.cpu, dt, v, shape...)
	if err != nil {
		w.t.Fatal(err)
	}
	p := pair{g, c}
	w.allocated = append(w.allocated, p)
	return p
}

func (w *twin) zeros(dt engine.DType, shape ...int) pair {
	g, err := w.gpu.Alloc(dt, shape...)
	if err != nil {
		w.t.Fatal(err)
	}
	c, _ := w.cpu.Alloc(dt, shape...)
	p := pair{g, c}
	w.allocated = append(w.allocated, p)
	return p
}

func (w *twin) free() {
	for _, p := range w.allocated {
		w.gpu.Free(p.g)
	}
}

func (w *twin) check(name string, p pair, tol float64) {
	w.t.Helper()
	g, err := enginetest.Download(p.g)
	if err != nil {
		w.t.Fatalf("%s: %v", name, err)
	}
	c, _ := enginetest.Download(p.c)
	for i, x := range c { // rows with no key: -Inf on both sides
		if math.IsInf(x, -1) && math.IsInf(g[i], -1) {
			g[i], c[i] = 0, 0
		}
	}
	e := enginetest.RelErr(g, c)
	w.t.Logf("%-6s rel err %.3g", name, e)
	if !(e <= tol) {
		w.t.Errorf("%s: relative error %.3g exceeds %.3g", name, e, tol)
	}
}

func TestTensorCoreAttention(t *testing.T) {
	gpu := openGPU(t)
	const tol = 1.6e-2
	for _, c := range tcCases {
		for _, px := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v_px%v", c, px), func(t *testing.T) {
				w := &twin{t: t, gpu: gpu, cpu: cpu.New(), rng: rand.New(rand.NewPCG(uint64(c.Lq), uint64(c.D)))}
				defer w.free()
				dt := engine.BF16
				qs, ks := []int{c.B, c.Hq, c.Lq, c.D}, []int{c.B, c.Hkv, c.Lk, c.D}
				st := []int{c.B, c.Hq, c.Lq}
				q, k, v := w.up(dt, 1, qs...), w.up(dt, 1, ks...), w.up(dt, 1, ks...)
				o, lse := w.zeros(dt, qs...), w.zeros(engine.F32, st...)
				var r, vb, tb pair
				if px {
					r, vb, tb = w.up(dt, 1/math.Sqrt(float64(c.D)), qs...), w.zeros(dt, qs...), w.zeros(engine.F32, st...)
				}
				opts := engine.AttentionOpts{Causal: c.causal, Window: c.window}
				for _, side := range []int{0, 1} {
					pick := func(p pair) *engine.Tensor {
						if side == 0 {
							return p.g
						}
						return p.c
					}
					var dev engine.Device = gpu
					if side == 1 {
						dev = w.cpu
					}
					a := engine.AttentionArgs{Q: pick(q), K: pick(k), V: pick(v), O: pick(o), LSE: pick(lse), AttentionOpts: opts}
					if px {
						a.R, a.Vbar, a.Tbar = pick(r), pick(vb), pick(tb)
					}
					if err := dev.Attention(a); err != nil {
						t.Fatal(err)
					}
				}
				w.check("o", o, tol)
				w.check("lse", lse, tol)
				if px {
					w.check("vbar", vb, tol)
					w.check("tbar", tb, tol)
				}
				// The other forward kernels on the same inputs: on Hopper the
				// default above is attention_wgmma.cu's TMA kernel; then its
				// 64- and 128-key-tile variants, each also with cp.async
				// loads, and the mma.sync kernels (64- and, for D = 128,
				// 32-key tiles).
				type variant struct {
					name string
					opts cuda.Options
				}
				variants := []variant{{"o mma", cuda.Options{NoWGMMA: true}}, {"o bn64", cuda.Options{ForwardKeyTile: 64}},
					{"o bn128", cuda.Options{ForwardKeyTile: 128}},
					{"o cp.async bn64", cuda.Options{ForwardKeyTile: 64, ForwardLoads: "cp.async"}},
					{"o cp.async bn128", cuda.Options{ForwardKeyTile: 128, ForwardLoads: "cp.async"}}}
				if c.D == 128 {
					variants = append(variants, variant{"o bn32", cuda.Options{NoWGMMA: true, ForwardKeyTile: 32}})
				}
				for _, vr := range variants {
					ov := w.zeros(dt, qs...)
					a := engine.AttentionArgs{Q: q.g, K: k.g, V: v.g, O: ov.g, AttentionOpts: opts}
					if px {
						a.R = r.g
					}
					setOptions(t, gpu, vr.opts)
					err := gpu.Attention(a)
					setOptions(t, gpu, cuda.Options{})
					if err != nil {
						t.Fatal(err)
					}
					w.check(vr.name, pair{ov.g, o.c}, tol)
				}
				// Backward, each side from its own forward's statistics, the
				// GPU once per kernel set: the default (on Hopper the wgmma
				// kernels), its dq kernel with 32-key tiles, the one-kernel
				// backward with dq reductions, the wgmma dK/dV kernel with
				// the mma.sync dQ kernel, and the mma.sync kernels alone.
				g := w.up(dt, 1, qs...)
				back := func(dev engine.Device, pick func(pair) *engine.Tensor, dq, dk, dv, dr pair) {
					a := engine.AttentionBackwardArgs{Q: pick(q), K: pick(k), V: pick(v), R: pick(r), O: pick(o), DO: pick(g),
						LSE: pick(lse), Vbar: pick(vb), Tbar: pick(tb), DQ: pick(dq), DK: pick(dk), DV: pick(dv), DR: pick(dr),
						AttentionOpts: opts}
					if err := dev.AttentionBackward(a); err != nil {
						t.Fatal(err)
					}
				}
				grads := func() (dq, dk, dv, dr pair) {
					dq, dk, dv = w.zeros(dt, qs...), w.zeros(dt, ks...), w.zeros(dt, ks...)
					if px {
						dr = w.zeros(dt, qs...)
					}
					return
				}
				dq, dk, dv, dr := grads()
				back(w.cpu, func(p pair) *engine.Tensor {
					if p.g == nil {
						return nil
					}
					return p.c
				}, dq, dk, dv, dr)
				for _, vr := range []struct {
					name string
					opts cuda.Options
				}{
					{"", cuda.Options{}}, {" wgmma", cuda.Options{Backward: "wgmma"}}, {" tma", cuda.Options{Backward: "tma"}},
					{" dq32", cuda.Options{DQKeyTile: 32}}, {" fused", cuda.Options{Backward: "fused"}},
					{" split", cuda.Options{Backward: "split"}}, {" mma", cuda.Options{NoWGMMA: true}}} {
					setOptions(t, gpu, vr.opts)
					gq, gk, gv, gr := grads()
					back(gpu, func(p pair) *engine.Tensor { return p.g }, gq, gk, gv, gr)
					w.check("dq"+vr.name, pair{gq.g, dq.c}, tol)
					w.check("dk"+vr.name, pair{gk.g, dk.c}, tol)
					w.check("dv"+vr.name, pair{gv.g, dv.c}, tol)
					if px {
						w.check("dr"+vr.name, pair{gr.g, dr.c}, tol)
					}
				}
			})
		}
	}
}

func TestTensorCoreDecode(t *testing.T) {
	gpu := openGPU(t)
	for _, c := range []decodeShape{
		{2, 8, 8, 1, 1000, 128, 0, 0, []int{1000, 77}},
		{3, 16, 4, 1, 700, 128, 0, 3, []int{700, 1, 450}},
		{2, 32, 8, 2, 520, 64, 0, 0, []int{520, 300}},
		{1, 8, 1, 1, 5000, 128, 0, 0, []int{4999}},
		{2, 4, 2, 1, 900, 64, 100, 0, []int{900, 333}},
		{1, 4, 4, 1, 300, 32, 0, 1, []int{300}},
		// The few-sequence plans: G = 4 and 8 rows (one combine item a
		// thread), G = 1 at D = 16 (16 threads an item), many splits
		// (several batches of eight in the combine), a length of one and
		// empty splits.
		{1, 32, 8, 1, 3000, 128, 0, 0, []int{2999}},
		{2, 16, 2, 2, 2000, 128, 0, 64, []int{2000, 1500}},
		{1, 2, 2, 1, 4000, 16, 0, 0, []int{3900}},
		{2, 8, 1, 1, 6000, 64, 0, 48, []int{6000, 65}},
		{2, 8, 2, 1, 900, 128, 200, 0, []int{1, 900}},
	} {
		// Each ring depth (0: the plan's own, 3 or 4 stages for these
		// shapes on an H200).
		for _, stages := range []int{0, 3, 4, 6} {
			for _, px := range []bool{false, true} {
				t.Run(fmt.Sprintf("%+v_px%v_stages%d", c, px, stages), func(t *testing.T) {
					if stages > 0 {
						defer cuda.SetDecodeOverrides(0, stages, false)()
					}
					decodeCase(t, gpu, c, px)
				})
			}
		}
	}
}

// decodeShape is a decode test: the sizes, the window, DecodeArgs.Splits
// and the sequences' lengths.
type decodeShape struct {
	B, Hq, Hkv, Lq, Cap, D, window, splits int
	lens                                   []int
}

// decodeCase runs one tensor-core decode on the GPU and the CPU backend
// and compares o.
func decodeCase(t *testing.T, gpu *cuda.Device, c decodeShape, px bool) {
	const tol = 1.6e-2
	w := &twin{t: t, gpu: gpu, cpu: cpu.New(), rng: rand.New(rand.NewPCG(uint64(c.Cap), uint64(c.D)))}
	defer w.free()
	dt := engine.BF16
	qs, ks := []int{c.B, c.Hq, c.Lq, c.D}, []int{c.B, c.Hkv, c.Cap, c.D}
	q, k, v, o := w.up(dt, 1, qs...), w.up(dt, 1, ks...), w.up(dt, 1, ks...), w.zeros(dt, qs...)
	var r pair
	if px {
		r = w.up(dt, 1/math.Sqrt(float64(c.D)), qs...)
	}
	lv := make([]float64, c.B)
	for i, n := range c.lens {
		lv[i] = float64(n)
	}
	lg, _ := enginetest.Upload(gpu, engine.I32, lv, c.B)
	lc, _ := enginetest.Upload(w.cpu, engine.I32, lv, c.B)
	defer gpu.Free(lg)
	for side, dev := range []engine.Device{gpu, w.cpu} {
		pick := func(p pair) *engine.Tensor {
			if p.g == nil {
				return nil
			}
			if side == 0 {
				return p.g
			}
			return p.c
		}
		lens := lg
		if side == 1 {
			lens = lc
		}
		if err := dev.DecodeAttention(engine.DecodeArgs{Q: pick(q), R: pick(r), KCache: pick(k), VCache: pick(v),
			Lens: lens, O: pick(o), Window: c.window, Splits: c.splits}); err != nil {
			t.Fatal(err)
		}
	}
	w.check("o", o, tol)
}

// setOptions gives gpu the kernel options o, and its defaults back when
// the test ends.
func setOptions(t *testing.T, gpu *cuda.Device, o cuda.Options) {
	t.Helper()
	if err := gpu.SetOptions(o); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gpu.SetOptions(cuda.Options{}) })
}
