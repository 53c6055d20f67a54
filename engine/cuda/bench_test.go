//go:build cgo

package cuda_test

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/cuda"
)

// TestBench times decode and prefill on cuda:0 when PARALLAX_CUDA_BENCH=1
// (a test, not a Benchmark, so that one run prints a whole table). Times
// are medians of CUDA-event timings; decode flushes the L2 cache before
// every run. PARALLAX_BENCH_OUT names a JSON-lines file for the results;
// PARALLAX_BENCH_ONLY=decode|prefill limits the sets. For prefill,
// PARALLAX_BENCH_SHAPES="B,H,L,D;..." replaces the shapes,
// PARALLAX_BENCH_KIND=parallax|softmax keeps one kind and
// PARALLAX_BENCH_VARIANTS=0 skips the non-default kernels.
//
//	PARALLAX_CUDA_BENCH=1 go test ./engine/cuda -run TestBench -v
func TestBench(t *testing.T) {
	if os.Getenv("PARALLAX_CUDA_BENCH") != "1" {
		t.Skip("set PARALLAX_CUDA_BENCH=1 to run the benchmarks")
	}
	d := openGPU(t)
	var out *os.File
	if p := os.Getenv("PARALLAX_BENCH_OUT"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		out = f
	}
	emit := func(rec map[string]any) {
		if out != nil {
			b, _ := json.Marshal(rec)
			out.Write(append(b, '\n'))
		}
	}
	only := os.Getenv("PARALLAX_BENCH_ONLY")
	if only == "" || only == "decode" {
		benchDecode(t, d, emit)
	}
	if only == "" || only == "sweep" {
		benchDecodeSplits(t, d, emit)
	}
	if only == "" || only == "prefill" {
		benchPrefill(t, d, emit)
	}
}

func envInts(name string, def []int) []int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil {
			out = append(out, n)
		}
	}
	return out
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func alloc(t *testing.T, d *cuda.Device, dt engine.DType, seed uint32, scale float32, shape ...int) *engine.Tensor {
	t.Helper()
	x, err := d.Alloc(dt, shape...)
	must(t, err)
	if scale != 0 {
		must(t, cuda.RandomFill(d, x, seed, scale))
	}
	return x
}

// benchDecode: bf16, D = 128, Hkv = 8, one new token per sequence, all
// sequences full (Lens = L).
func benchDecode(t *testing.T, d *cuda.Device, emit func(map[string]any)) {
	const D, Hkv = 128, 8
	t.Logf("decode (bf16, D %d, Hkv %d, Lq 1, L2 flushed, median of 30):", D, Hkv)
	t.Logf("%-9s %3s %3s %6s %9s %10s %10s %8s %7s", "kind", "G", "B", "L", "cache MB", "time us", "GB/s", "% 4.4TB", "splits")
	for _, G := range envInts("PARALLAX_BENCH_G", []int{1, 2, 4}) {
		for _, B := range envInts("PARALLAX_BENCH_B", []int{1, 8, 32, 64}) {
			for _, L := range envInts("PARALLAX_BENCH_L", []int{512, 1024, 4096, 16384, 32768}) {
				Hq := G * Hkv
				q := alloc(t, d, engine.BF16, 1, 1, B, Hq, 1, D)
				r := alloc(t, d, engine.BF16, 2, 0.1, B, Hq, 1, D)
				k := alloc(t, d, engine.BF16, 3, 1, B, Hkv, L, D)
				v := alloc(t, d, engine.BF16, 4, 1, B, Hkv, L, D)
				o := alloc(t, d, engine.BF16, 0, 0, B, Hq, 1, D)
				lv := make([]int32, B)
				for i := range lv {
					lv[i] = int32(L)
				}
				lens, err := engine.FromInt32(d, lv, B)
				must(t, err)
				bytes := float64(2*B*Hkv*L*D*2 + 2*B*Hq*D*2*2)
				for _, px := range []bool{false, true} {
					a := engine.DecodeArgs{Q: q, KCache: k, VCache: v, Lens: lens, O: o}
					name := "softmax"
					if px {
						a.R, name = r, "parallax"
					}
					ms, err := cuda.Median(d, 3, 30, func() error { return cuda.FlushL2(d) }, func() error { return d.DecodeAttention(a) })
					must(t, err)
					us := ms * 1e3
					gbs := bytes / (ms * 1e-3) / 1e9
					t.Logf("%-9s %3d %3d %6d %9.0f %10.2f %10.0f %7.1f%%", name, G, B, L, bytes/1e6, us, gbs, 100*gbs/4400)
					emit(map[string]any{"bench": "decode", "kind": name, "G": G, "B": B, "L": L, "D": D, "Hkv": Hkv,
						"us": us, "gbs": gbs, "frac": gbs / 4400, "cache_bytes": bytes})
				}
				for _, x := range []*engine.Tensor{q, r, k, v, o, lens} {
					d.Free(x)
				}
				must(t, cuda.ReleaseCache(d))
			}
		}
	}
}

// benchDecodeSplits sweeps the minimum keys per split of the automatic
// split count for small batches (PARALLAX_CUDA_DECODE_SPLIT_KEYS).
func benchDecodeSplits(t *testing.T, d *cuda.Device, emit func(map[string]any)) {
	const D, Hkv = 128, 8
	defer os.Unsetenv("PARALLAX_CUDA_DECODE_SPLIT_KEYS")
	t.Logf("decode split sweep (parallax, G 1): time us per minimum keys per split")
	t.Logf("%3s %6s %8s %8s %8s %8s %8s", "B", "L", "64", "128", "256", "512", "1024")
	for _, B := range []int{1, 8} {
		for _, L := range []int{512, 1024, 4096, 16384} {
			q := alloc(t, d, engine.BF16, 1, 1, B, Hkv, 1, D)
			r := alloc(t, d, engine.BF16, 2, 0.1, B, Hkv, 1, D)
			k := alloc(t, d, engine.BF16, 3, 1, B, Hkv, L, D)
			v := alloc(t, d, engine.BF16, 4, 1, B, Hkv, L, D)
			o := alloc(t, d, engine.BF16, 0, 0, B, Hkv, 1, D)
			lv := make([]int32, B)
			for i := range lv {
				lv[i] = int32(L)
			}
			lens, err := engine.FromInt32(d, lv, B)
			must(t, err)
			a := engine.DecodeArgs{Q: q, R: r, KCache: k, VCache: v, Lens: lens, O: o}
			line := fmt.Sprintf("%3d %6d", B, L)
			for _, keys := range []int{64, 128, 256, 512, 1024} {
				o := d.Options()
				o.DecodeSplitKeys = keys
				must(t, d.SetOptions(o))
				ms, err := cuda.Median(d, 3, 30, func() error { return cuda.FlushL2(d) }, func() error { return d.DecodeAttention(a) })
				o.DecodeSplitKeys = 0
				must(t, d.SetOptions(o))
				must(t, err)
				line += fmt.Sprintf(" %8.2f", ms*1e3)
				emit(map[string]any{"bench": "decode_split_sweep", "B": B, "L": L, "split_keys": keys, "us": ms * 1e3})
			}
			t.Log(line)
			for _, x := range []*engine.Tensor{q, r, k, v, o, lens} {
				d.Free(x)
			}
			must(t, cuda.ReleaseCache(d))
		}
	}
}

// benchPrefill: causal bf16 forward and forward+backward. TFLOP/s counts
// matrix products over the causal half, each 2 x (L^2/2) x D flops per
// head: Parallax forward 4 (QK^T, RK^T, P1 V, P2 V), backward 8 (S, T and
// dO V^T recomputed, dV, dK from dS and dT, dQ, dR), so 12 for
// forward+backward; softmax 2 and 2 + 5 = 7 (FlashAttention's 3.5x).
func benchPrefill(t *testing.T, d *cuda.Device, emit func(map[string]any)) {
	type shape struct{ B, H, L, D int }
	shapes := []shape{{8, 16, 2048, 128}, {4, 16, 4096, 128}, {2, 16, 8192, 128}, {1, 16, 16384, 128},
		{16, 16, 1024, 64}, {8, 16, 2048, 64}, {8, 16, 4096, 64}, {1, 16, 16384, 64}}
	if env := os.Getenv("PARALLAX_BENCH_SHAPES"); env != "" {
		shapes = nil
		for _, f := range strings.Split(env, ";") {
			var s shape
			if _, err := fmt.Sscanf(f, "%d,%d,%d,%d", &s.B, &s.H, &s.L, &s.D); err != nil {
				t.Fatalf("PARALLAX_BENCH_SHAPES: %q: want B,H,L,D: %v", f, err)
			}
			shapes = append(shapes, s)
		}
	}
	kindOnly, variants := os.Getenv("PARALLAX_BENCH_KIND"), os.Getenv("PARALLAX_BENCH_VARIANTS") != "0"
	t.Logf("prefill (bf16, causal, median of 10):")
	t.Logf("%-9s %3s %3s %6s %4s %10s %9s %12s %9s", "kind", "B", "H", "L", "D", "fwd ms", "TFLOP/s", "fwd+bwd ms", "TFLOP/s")
	for _, s := range shapes {
		qs := []int{s.B, s.H, s.L, s.D}
		st := []int{s.B, s.H, s.L}
		q, k, v := alloc(t, d, engine.BF16, 11, 1, qs...), alloc(t, d, engine.BF16, 12, 1, qs...), alloc(t, d, engine.BF16, 13, 1, qs...)
		r := alloc(t, d, engine.BF16, 14, float32(1/math.Sqrt(float64(s.D))), qs...)
		g := alloc(t, d, engine.BF16, 15, 1, qs...)
		o, vb, dq, dk, dv, dr := alloc(t, d, engine.BF16, 0, 0, qs...), alloc(t, d, engine.BF16, 0, 0, qs...),
			alloc(t, d, engine.BF16, 0, 0, qs...), alloc(t, d, engine.BF16, 0, 0, qs...), alloc(t, d, engine.BF16, 0, 0, qs...),
			alloc(t, d, engine.BF16, 0, 0, qs...)
		lse, tb := alloc(t, d, engine.F32, 0, 0, st...), alloc(t, d, engine.F32, 0, 0, st...)
		for _, px := range []bool{false, true} {
			fa := engine.AttentionArgs{Q: q, K: k, V: v, O: o, LSE: lse, AttentionOpts: engine.AttentionOpts{Causal: true}}
			ba := engine.AttentionBackwardArgs{Q: q, K: k, V: v, O: o, DO: g, LSE: lse, DQ: dq, DK: dk, DV: dv,
				AttentionOpts: engine.AttentionOpts{Causal: true}}
			name, pf, pb := "softmax", 2.0, 7.0
			if px {
				fa.R, fa.Vbar, fa.Tbar = r, vb, tb
				ba.R, ba.Vbar, ba.Tbar, ba.DR = r, vb, tb, dr
				name, pf, pb = "parallax", 4, 12
			}
			if kindOnly != "" && kindOnly != name {
				continue
			}
			fwd1 := func() error { return d.Attention(fa) }
			fwdbwd := func() error {
				if err := d.Attention(fa); err != nil {
					return err
				}
				return d.AttentionBackward(ba)
			}
			fwd, both := medianWith(t, d, fwd1), medianWith(t, d, fwdbwd)
			unit := float64(s.B*s.H) * float64(s.L) * float64(s.L) * float64(s.D) // one causal product = 2 flops x L^2/2 x D
			tf, tb2 := pf*unit/(fwd*1e-3)/1e12, pb*unit/(both*1e-3)/1e12
			t.Logf("%-9s %3d %3d %6d %4d %10.3f %9.0f %12.3f %9.0f", name, s.B, s.H, s.L, s.D, fwd, tf, both, tb2)
			emit(map[string]any{"bench": "prefill", "kind": name, "B": s.B, "H": s.H, "L": s.L, "D": s.D,
				"fwd_ms": fwd, "fwd_tflops": tf, "fwdbwd_ms": both, "fwdbwd_tflops": tb2})
			if !variants {
				continue
			}
			// The other forward kernels on the same inputs (the default on
			// Hopper is the wgmma kernel): mma.sync, and 128-key tiles.
			fm := medianWith(t, d, fwd1, "PARALLAX_CUDA_WGMMA", "0")
			t.Logf("%-9s %3d %3d %6d %4d %10.3f %9.0f   (forward, mma.sync kernel)", name, s.B, s.H, s.L, s.D, fm, pf*unit/(fm*1e-3)/1e12)
			emit(map[string]any{"bench": "prefill_mma", "kind": name, "B": s.B, "H": s.H, "L": s.L, "D": s.D, "fwd_ms": fm})
			// The wgmma forward with 64- and 128-key tiles (Parallax at
			// D = 128 has no 128-key kernel), TMA and cp.async loads.
			for _, bn := range []string{"64", "128"} {
				if bn == "128" && px && s.D == 128 {
					continue
				}
				for _, ld := range []string{"tma", "cp.async"} {
					fv := medianWith(t, d, fwd1, "PARALLAX_CUDA_FWD_BN", bn, "PARALLAX_CUDA_FWD", ld)
					t.Logf("%-9s %3d %3d %6d %4d %10.3f %9.0f   (forward, %s-key tiles, %s)", name, s.B, s.H, s.L, s.D, fv, pf*unit/(fv*1e-3)/1e12, bn, ld)
					emit(map[string]any{"bench": "prefill_fwd_" + ld + "_bn" + bn, "kind": name, "B": s.B, "H": s.H, "L": s.L, "D": s.D, "fwd_ms": fv})
				}
			}
			// The other backward kernel sets.
			for _, m := range []struct {
				mode string
				env  []string
			}{{"fused", []string{"PARALLAX_CUDA_BWD", "fused"}}, {"dq32", []string{"PARALLAX_CUDA_DQ_BN", "32"}},
				{"cp.async", []string{"PARALLAX_CUDA_BWD", "wgmma"}}, {"tma", []string{"PARALLAX_CUDA_BWD", "tma"}},
				{"mma", []string{"PARALLAX_CUDA_WGMMA", "0"}}} {
				if m.mode == "dq32" && s.D != 128 {
					continue
				}
				bm := medianWith(t, d, fwdbwd, m.env...)
				t.Logf("%-9s %3d %3d %6d %4d %10s %9s %12.3f %9.0f   (%s backward kernels)", name, s.B, s.H, s.L, s.D, "", "", bm, pb*unit/(bm*1e-3)/1e12, m.mode)
				emit(map[string]any{"bench": "prefill_bwd_" + m.mode, "kind": name, "B": s.B, "H": s.H, "L": s.L, "D": s.D, "fwdbwd_ms": bm})
			}
		}
		for _, x := range []*engine.Tensor{q, k, v, r, g, o, vb, dq, dk, dv, dr, lse, tb} {
			d.Free(x)
		}
		must(t, cuda.ReleaseCache(d))
	}
}

// medianWith is f's median time in ms (2 warm-up runs, 10 timed) under
// the kernel options the overrides env (name, value, ...) set; the
// device's own options are restored after.
func medianWith(t *testing.T, d *cuda.Device, f func() error, env ...string) float64 {
	o, err := cuda.ParseOptions(func(name string) string {
		for i := 0; i+1 < len(env); i += 2 {
			if env[i] == name {
				return env[i+1]
			}
		}
		return ""
	})
	must(t, err)
	prev := d.Options()
	must(t, d.SetOptions(o))
	defer d.SetOptions(prev)
	ms, err := cuda.Median(d, 2, 10, nil, f)
	must(t, err)
	return ms
}
