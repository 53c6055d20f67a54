package vulkan

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/enginetest"
)

// The KHR cooperative-matrix matmul (matmul_coop_khr) is certified on a
// device that offers VK_KHR_cooperative_matrix, forced with
// Options{Coop: "khr"}: in CI, Mesa 26's lavapipe (8x8x8 f16 fragments,
// 8-wide subgroups) through TestKHRCooperativeMatrixDevice's rerun; on a
// GPU that offers both extensions (NVIDIA), with PARALLAX_VULKAN_KHR_RUN
// set to a program that runs its arguments (env) and the GPU's driver.

// khrChild skips the test outside TestKHRCooperativeMatrixDevice's rerun
// and returns the index of the first device offering the KHR matmul path.
func khrChild(t *testing.T) int {
	t.Helper()
	if os.Getenv(khrChildEnv) != "1" {
		t.Skipf("runs in the rerun of TestKHRCooperativeMatrixDevice (set %s)", khrRunEnv)
	}
	rt, err := loadRuntime()
	if err != nil {
		t.Fatalf("loading Vulkan: %v", err)
	}
	for _, p := range rt.phys {
		if _, why := p.coopMatMulKHR(); why == "" {
			return p.index
		}
	}
	t.Fatal("no device can run the KHR cooperative-matrix matmul kernel")
	return -1
}

// openKHR opens device index with the KHR matmul path forced and checks
// that it is the path the device took (the self-check at open passed).
func openKHR(t *testing.T, index int) *Device {
	t.Helper()
	d, err := OpenWith(index, Options{Coop: "khr"})
	if err != nil {
		t.Fatalf("vulkan:%d with %s=khr: %v", index, EnvCoop, err)
	}
	t.Cleanup(func() { d.Close() })
	if d.mm.kind != coopKHR {
		t.Fatalf("vulkan:%d with %s=khr: matmul path %q", index, EnvCoop, d.info.Features["matmul path"])
	}
	t.Logf("vulkan:%d %s: matmul path %s; kernels: %s", index, d.pd.name, d.info.Features["matmul path"], d.info.Kernels["matmul"])
	return d
}

// TestKHRPathChoice checks the path selection on a device that offers
// VK_KHR_cooperative_matrix: the default takes KHR where NV is absent,
// "nv" and "off" leave the scalar kernels with the reason shown, and the
// chosen fragment shape is one the device reports.
func TestKHRPathChoice(t *testing.T) {
	index := khrChild(t)
	p := loadedPhys(t, index)
	_, nvWhy := p.coopMatMulNV()
	for _, tc := range []struct {
		coop string
		want coopKind
		why  string // a piece of the "matmul path" line
	}{
		{"", coopKHR, "VK_KHR_cooperative_matrix"},
		{"auto", coopKHR, "VK_KHR_cooperative_matrix"},
		{"khr", coopKHR, "forced (" + EnvCoop + "=khr)"},
		{"nv", coopNone, "NV forced"},
		{"off", coopNone, EnvCoop + "=off"},
	} {
		if nvWhy == "" && (tc.coop == "" || tc.coop == "auto" || tc.coop == "nv") {
			tc.want, tc.why = coopNV, "VK_NV_cooperative_matrix" // a device with both prefers NV
		}
		d, err := OpenWith(index, Options{Coop: tc.coop})
		if err != nil {
			t.Fatalf("%s=%q: %v", EnvCoop, tc.coop, err)
		}
		line := d.info.Features["matmul path"]
		if d.mm.kind != tc.want || !strings.Contains(line, tc.why) {
			t.Errorf("%s=%q: path %d (%q), want %d naming %q", EnvCoop, tc.coop, d.mm.kind, line, tc.want, tc.why)
		}
		if tc.want == coopKHR {
			s := d.mm.shape
			found := false
			for _, r := range p.coopShapesKHR() {
				found = found || (r.M == s.M && r.N == s.N && r.K == s.K && r.A == khrFloat16 && r.C == khrFloat32)
			}
			if !found {
				t.Errorf("%s=%q: fragment %dx%dx%d is not an f16 -> f32 shape the device reports", EnvCoop, tc.coop, s.M, s.N, s.K)
			}
		}
		d.Close()
	}
}

// loadedPhys returns physical device index of the loaded runtime.
func loadedPhys(t *testing.T, index int) *physDevice {
	t.Helper()
	rt, err := loadRuntime()
	if err != nil {
		t.Fatal(err)
	}
	return rt.phys[index]
}

// TestKHRMatMul checks matmul_coop_khr against a float64 reference on
// fresh random inputs, element by element, for shapes that fill whole
// tiles, leave ragged edges in M, N and K (K below one fragment too),
// batch with and without a shared B, take each transpose, accumulate, and
// store f16. The inputs are N(0, 1) samples rounded to f16 (what the
// kernel reads); two references are compared:
//
// Notation: u = 2^-24 (f32 unit roundoff), uh = 2^-11 (f16),
// gamma_n = n u / (1 - n u), for output (i, j) over the K terms:
// x, y the unrounded inputs, x~ = fl16(x), y~ = fl16(y) what the kernel
// reads, S~ = sum |x~ y~|, S = sum |x y|, c the accumulated output.
//
//  1. The kernel's own error, against the exact product of x~ and y~ (in
//     float64). A product of two f16 values has at most 22 significant
//     bits, and |x~ y~| >= 2^-48 unless zero, so every product is exact
//     in f32 (no rounding, no underflow); the sum of K exact terms in f32
//     in any order, fused or not (per fragment, across fragments, across
//     K slices), is within gamma_(K-1) S~ of the exact sum (Higham,
//     Accuracy and Stability, eq. 4.4 holds for every summation order);
//     adding c is one more rounding, so |got - want| <= gamma_(K+1) (S~ +
//     |c|). Storing f16 adds uh |want| (plus uh times the bound). Devices
//     may flush f32 subnormals: at most 2^-126 per operation, K+1 of
//     them. The float64 reference itself errs by at most gamma64_K S~,
//     added too. A kernel that rounded products or partial sums to f16 or
//     bf16 would exceed this bound by ~2^13: this is the check that the
//     accumulation is really f32.
//  2. End to end, against the exact product of x and y: rounding each
//     input to f16 moves each product by at most (2 uh + uh^2) |x y|, so
//     |got - want| <= (2 uh + uh^2) S + bound 1 (with S~ <= (1 + uh)^2 S).
//
// NaN never passes: the comparisons are written so that a NaN fails them.
func TestKHRMatMul(t *testing.T) {
	index := khrChild(t)
	d := openKHR(t, index)
	seed := enginetest.Seed(enginetest.Options{})
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	s := d.mm.shape
	tm, tn, tk := 4*s.M, 4*s.N, 2*s.K // the kernel's tile and K slice
	type shape struct {
		batch, m, n, k int
		ta, tb, shared bool
		acc            bool
		out            engine.DType
	}
	shapes := []shape{
		{1, tm, tn, tk, false, false, false, false, engine.F32},             // exactly one tile
		{1, 2 * tm, 3 * tn, 4 * tk, false, false, false, false, engine.F32}, // whole tiles
		{1, 37, 29, 45, false, false, false, false, engine.F32},             // ragged M, N, K
		{1, 37, 29, 45, true, false, false, false, engine.F32},
		{1, 37, 29, 45, false, true, false, false, engine.F32},
		{1, 37, 29, 45, true, true, false, true, engine.F32},
		{1, 5, 7, 3, false, false, false, false, engine.F32}, // smaller than one fragment
		{1, tm + 1, tn - 1, s.K + 1, true, false, false, true, engine.F32},
		{3, 19, 24, 16, false, true, true, false, engine.F32}, // a shared B
		{2, 70, 83, 33, true, true, false, true, engine.F32},
		{1, 130, 67, 300, false, true, false, false, engine.F32}, // a deep K
		{1, 45, 50, 61, false, false, false, true, engine.F16},   // f16 output
	}
	for _, sh := range shapes {
		name := fmt.Sprintf("batch %d %dx%dx%d transA=%v transB=%v shared=%v accumulate=%v out=%v",
			sh.batch, sh.m, sh.k, sh.n, sh.ta, sh.tb, sh.shared, sh.acc, sh.out)
		t.Run(name, func(t *testing.T) {
			nb := sh.batch
			if sh.shared {
				nb = 1
			}
			x, xr := khrInputs(rng, sh.batch*sh.m*sh.k)
			y, yr := khrInputs(rng, nb*sh.k*sh.n)
			c0, c0r := khrInputs(rng, sh.batch*sh.m*sh.n)
			if sh.out != engine.F16 {
				for i, v := range c0 { // an f32 output holds f32 values
					c0r[i] = float64(float32(v))
				}
			}
			aShape, bShape := []int{sh.batch, sh.m, sh.k}, []int{nb, sh.k, sh.n}
			if sh.ta {
				aShape = []int{sh.batch, sh.k, sh.m}
			}
			if sh.tb {
				bShape = []int{nb, sh.n, sh.k}
			}
			if sh.shared {
				bShape = bShape[1:]
			}
			ts := tensors{t: t, dev: d}
			defer ts.free()
			a, b := ts.make(engine.F16, f32s(xr), aShape...), ts.make(engine.F16, f32s(yr), bShape...)
			o := ts.make(sh.out, f32s(c0r), sh.batch, sh.m, sh.n)
			opts := engine.MatMulOpts{TransA: sh.ta, TransB: sh.tb, Accumulate: sh.acc}
			dims, err := engine.CheckMatMul(o, a, b, opts)
			if err != nil {
				t.Fatal(err)
			}
			if !d.useCoop(a, b, dims) {
				t.Fatal("the f16 product does not take the cooperative-matrix kernel")
			}
			// The kernel itself, not MatMul: MatMul sends some of these
			// shapes to the matrix-vector kernel.
			if err := d.matmulCoop(o, a, b, opts, dims); err != nil {
				t.Fatal(err)
			}
			got := download(t, o)
			var c []float64
			if sh.acc {
				c = c0r
			}
			kernel, sumR := khrReference(xr, yr, c, sh.batch, sh.m, sh.n, sh.k, sh.ta, sh.tb, sh.shared)
			exact, sum := khrReference(x, y, c, sh.batch, sh.m, sh.n, sh.k, sh.ta, sh.tb, sh.shared)
			const u, uh = 0x1p-24, 0x1p-11
			gamma := func(n int, u float64) float64 { return float64(n) * u / (1 - float64(n)*u) }
			uOut := 0.0
			if sh.out == engine.F16 {
				uOut = uh
			}
			var worst1, worst2 float64
			for i := range got {
				g := float64(got[i])
				cAbs := 0.0
				if c != nil {
					cAbs = math.Abs(c[i])
				}
				e1 := gamma(sh.k+1, u)*(sumR[i]+cAbs) + gamma(sh.k, 0x1p-53)*sumR[i] + float64(sh.k+1)*0x1p-126
				b1 := e1 + uOut*(math.Abs(kernel[i])+e1)
				b2 := (2*uh+uh*uh)*sum[i] + b1
				d1, d2 := math.Abs(g-kernel[i]), math.Abs(g-exact[i])
				if !(d1 <= b1) || !(d2 <= b2) {
					t.Fatalf("out[%d] = %v: kernel reference %v (|diff| %.3g, bound %.3g), exact %v (|diff| %.3g, bound %.3g); seed %d",
						i, g, kernel[i], d1, b1, exact[i], d2, b2, seed)
				}
				if b1 > 0 {
					worst1 = max(worst1, d1/b1)
				}
				if b2 > 0 {
					worst2 = max(worst2, d2/b2)
				}
			}
			t.Logf("worst |diff| / bound: %.3g (kernel), %.3g (end to end)", worst1, worst2)
		})
	}
}

// TestKHRMatMulConformance runs the conformance suite's matmul cases (f16
// inputs) on the device with the KHR path forced: the same cases and
// tolerances as every backend, through MatMul (so also through the
// matrix-vector kernel where MatMul sends decode-sized products).
func TestKHRMatMulConformance(t *testing.T) {
	index := khrChild(t)
	d := openKHR(t, index)
	runCases(t, d, `^matmul/`, engine.F16)
}

// khrInputs returns n N(0, 1) samples and the same rounded to f16.
func khrInputs(rng *rand.Rand, n int) (exact, rounded []float64) {
	exact, rounded = make([]float64, n), make([]float64, n)
	for i := range exact {
		exact[i] = rng.NormFloat64()
		rounded[i] = float64(engine.F16.Round(float32(exact[i])))
	}
	return exact, rounded
}

// khrReference returns op(x) op(y) (+ c when c is not nil) in float64
// and, per output, sum |x y| over K.
func khrReference(x, y, c []float64, batch, m, n, k int, ta, tb, shared bool) (out, abs []float64) {
	out, abs = make([]float64, batch*m*n), make([]float64, batch*m*n)
	for z := 0; z < batch; z++ {
		xo, yo := z*m*k, z*k*n
		if shared {
			yo = 0
		}
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				var s, sa float64
				for l := 0; l < k; l++ {
					xi, yi := xo+i*k+l, yo+l*n+j
					if ta {
						xi = xo + l*m + i
					}
					if tb {
						yi = yo + j*k + l
					}
					p := x[xi] * y[yi]
					s += p
					sa += math.Abs(p)
				}
				o := z*m*n + i*n + j
				if c != nil {
					s += c[o]
				}
				out[o], abs[o] = s, sa
			}
		}
	}
	return out, abs
}

// f32s converts to float32 (exact for f16 values).
func f32s(v []float64) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}
