//go:build cgo

package cuda_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/cuda"
	"github.com/parallax-engine/parallax/engine/enginetest"
	"github.com/parallax-engine/parallax/engine/ref"
)

// The fused decode-step kernels (gemv_norm_*, decode_prep) at a 0.6B
// model's decode shapes (hidden 1024, 16/8 heads of 128, FFN 3072, bf16):
// against the float64 references, where a fused kernel rounds only its
// outputs (relative max-norm error within the unit roundoff, a little
// over for f32 arithmetic); against the engine's compositions of the
// unfused ops on the same GPU; with programmatic dependent launch on and
// off (bit for bit the same); and recorded in a graph that replays them
// at new positions.

// plain hides a device's optional capabilities (engine.NormLinear,
// engine.DecodePreparer, ...), so the engine's compositions run on it.
type plain struct{ engine.Device }

// roundOnce is the relative max-norm error a bf16 output may have when
// only the output itself is rounded: u = 2^-8, with room for the f32
// arithmetic before it.
const roundOnce = 1.05 * 0x1p-8

// fusedRun runs fn with PDL on and off and returns what read gives after
// each, failing unless the two are bit for bit the same.
func fusedRun(t *testing.T, gpu *cuda.Device, fn func(dev engine.Device) error, read func() []float64) []float64 {
	t.Helper()
	var out [2][]float64
	for i, noPDL := range []bool{false, true} {
		setOptions(t, gpu, cuda.Options{NoPDL: noPDL})
		if err := fn(gpu); err != nil {
			t.Fatal(err)
		}
		out[i] = read()
	}
	for i := range out[0] {
		if math.Float64bits(out[0][i]) != math.Float64bits(out[1][i]) {
			t.Fatalf("element %d: %v with PDL, %v without", i, out[0][i], out[1][i])
		}
	}
	return out[0]
}

func fdown(t *testing.T, x *engine.Tensor) []float64 {
	t.Helper()
	v, err := enginetest.Download(x)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func fup(t *testing.T, dev engine.Device, dt engine.DType, v []float64, shape ...int) *engine.Tensor {
	t.Helper()
	x, err := enginetest.Upload(dev, dt, v, shape...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Free(x) })
	return x
}

func TestFusedNormLinear(t *testing.T) {
	gpu := openGPU(t)
	const K, eps = 1024, 1e-6
	dt := engine.BF16
	rng := rand.New(rand.NewPCG(11, 12))
	ns := []int{2048, 1024, 1024, 2048} // q, k, v, r
	var ws []*engine.Tensor
	var wv [][]float64
	for _, n := range ns {
		v := enginetest.Normal(rng, dt, n*K, 0.05)
		wv = append(wv, v)
		ws = append(ws, fup(t, gpu, dt, v, n, K))
	}
	gv := enginetest.Normal(rng, engine.F32, K, 1)
	g := fup(t, gpu, engine.F32, gv, K)
	for _, m := range []int{1, 2, 8} {
		t.Run(fmt.Sprintf("multi M%d", m), func(t *testing.T) {
			xv := enginetest.Normal(rng, dt, m*K, 3)
			x, h := fup(t, gpu, dt, xv, m, K), fup(t, gpu, dt, make([]float64, m*K), m, K)
			var outs []*engine.Tensor
			for _, n := range ns {
				outs = append(outs, fup(t, gpu, dt, make([]float64, m*n), m, n))
			}
			hv, _ := ref.RMSNorm(xv, gv, m, K, eps)
			read := func() (all []float64) {
				for _, o := range outs {
					all = append(all, fdown(t, o)...)
				}
				return all
			}
			var want []float64
			for i, n := range ns {
				want = append(want, ref.MatMul(hv, wv[i], 1, m, n, K, false, true, false)...)
			}
			fused := fusedRun(t, gpu, func(dev engine.Device) error {
				return engine.NormLinearMulti(dev, outs, ws, x, g, eps, h)
			}, read)
			if err := engine.NormLinearMulti(plain{gpu}, outs, ws, x, g, eps, h); err != nil {
				t.Fatal(err)
			}
			comp := read()
			ef, ec := enginetest.RelErr(fused, want), enginetest.RelErr(comp, want)
			t.Logf("fused %.3g, composition %.3g (relative to the float64 reference)", ef, ec)
			if !(ef <= roundOnce) {
				t.Errorf("fused: relative error %.3g exceeds %.3g", ef, roundOnce)
			}
			if !(ec <= 1.6e-2) {
				t.Errorf("composition: relative error %.3g exceeds 1.6e-2", ec)
			}
		})
	}
	const N = 3072
	wg := fup(t, gpu, dt, enginetest.Normal(rng, dt, N*K, 0.05), N, K)
	wu := fup(t, gpu, dt, enginetest.Normal(rng, dt, N*K, 0.05), N, K)
	gvv, uvv := fdown(t, wg), fdown(t, wu)
	for _, m := range []int{1, 4} {
		t.Run(fmt.Sprintf("swiglu M%d", m), func(t *testing.T) {
			xv := enginetest.Normal(rng, dt, m*K, 3)
			x, act := fup(t, gpu, dt, xv, m, K), fup(t, gpu, dt, make([]float64, m*N), m, N)
			hv, _ := ref.RMSNorm(xv, gv, m, K, eps)
			want := ref.SwiGLU(ref.MatMul(hv, gvv, 1, m, N, K, false, true, false), ref.MatMul(hv, uvv, 1, m, N, K, false, true, false))
			fused := fusedRun(t, gpu, func(dev engine.Device) error {
				return engine.NormLinearSwiGLU(dev, act, x, g, wg, wu, eps, nil, nil, nil)
			}, func() []float64 { return fdown(t, act) })
			if err := engine.NormLinearSwiGLU(plain{gpu}, act, x, g, wg, wu, eps, nil, nil, nil); err != nil {
				t.Fatal(err)
			}
			ef, ec := enginetest.RelErr(fused, want), enginetest.RelErr(fdown(t, act), want)
			t.Logf("fused %.3g, composition %.3g (relative to the float64 reference)", ef, ec)
			if !(ef <= roundOnce) {
				t.Errorf("fused: relative error %.3g exceeds %.3g", ef, roundOnce)
			}
			if !(ec <= 3.2e-2) {
				t.Errorf("composition: relative error %.3g exceeds 3.2e-2", ec)
			}
		})
	}
}

// prepCase is DecodePrep's operands on the GPU and their values.
type prepCase struct {
	a                          engine.DecodePrepArgs
	q, k, v, r, qn, kn, rn     []float64
	kc, vc                     []float64 // the caches' initial contents
	b, l, hq, hkv, d, capacity int
}

func newPrepCase(t *testing.T, gpu engine.Device, rng *rand.Rand, b, l, capacity int) *prepCase {
	const hq, hkv, d = 16, 8, 128
	dt := engine.BF16
	c := &prepCase{b: b, l: l, hq: hq, hkv: hkv, d: d, capacity: capacity}
	c.q, c.k, c.v, c.r = enginetest.Normal(rng, dt, b*l*hq*d, 2), enginetest.Normal(rng, dt, b*l*hkv*d, 2),
		enginetest.Normal(rng, dt, b*l*hkv*d, 1), enginetest.Normal(rng, dt, b*l*hq*d, 2)
	c.qn, c.kn, c.rn = enginetest.Normal(rng, engine.F32, d, 1), enginetest.Normal(rng, engine.F32, d, 1),
		enginetest.Normal(rng, engine.F32, d, 0.5)
	c.kc, c.vc = enginetest.Normal(rng, dt, b*hkv*capacity*d, 1), enginetest.Normal(rng, dt, b*hkv*capacity*d, 1)
	c.a = engine.DecodePrepArgs{
		Q: fup(t, gpu, dt, c.q, b, l, hq, d), K: fup(t, gpu, dt, c.k, b, l, hkv, d), V: fup(t, gpu, dt, c.v, b, l, hkv, d),
		R: fup(t, gpu, dt, c.r, b, l, hq, d), QNorm: fup(t, gpu, engine.F32, c.qn, d), KNorm: fup(t, gpu, engine.F32, c.kn, d),
		RNorm: fup(t, gpu, engine.F32, c.rn, d), QOut: fup(t, gpu, dt, make([]float64, b*l*hq*d), b, hq, l, d),
		ROut: fup(t, gpu, dt, make([]float64, b*l*hq*d), b, hq, l, d), KCache: fup(t, gpu, dt, c.kc, b, hkv, capacity, d),
		VCache: fup(t, gpu, dt, c.vc, b, hkv, capacity, d), Pos: fup(t, gpu, engine.I32, make([]float64, b*l), b, l),
		Starts: fup(t, gpu, engine.I32, make([]float64, b), b), Eps: 1e-6, Theta: 1e6,
	}
	return c
}

// set writes new positions (per sequence) and starts.
func (c *prepCase) set(t *testing.T, pos, starts []int) {
	t.Helper()
	f := func(v []int) []float64 {
		out := make([]float64, len(v))
		for i, x := range v {
			out[i] = float64(x)
		}
		return out
	}
	for _, w := range []struct {
		t *engine.Tensor
		v []int
	}{{c.a.Pos, pos}, {c.a.Starts, starts}} {
		if err := engine.WriteFloat32(w.t, float32s(f(w.v))); err != nil {
			t.Fatal(err)
		}
	}
}

func float32s(v []float64) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}

// reset writes the caches' initial contents back.
func (c *prepCase) reset(t *testing.T) {
	t.Helper()
	for _, w := range []struct {
		t *engine.Tensor
		v []float64
	}{{c.a.KCache, c.kc}, {c.a.VCache, c.vc}} {
		if err := engine.WriteFloat32(w.t, float32s(w.v)); err != nil {
			t.Fatal(err)
		}
	}
}

// want returns the reference outputs (q, r, kCache, vCache) for pos and
// starts, the caches' other rows as they were.
func (c *prepCase) want(pos, starts []int) (q, r, kc, vc []float64) {
	b, l, hkv, d, eps, theta := c.b, c.l, c.hkv, c.d, 1e-6, 1e6
	q, _ = ref.RMSNormRoPE(c.q, c.qn, b, l, c.hq, d, pos, eps, theta)
	r, _ = ref.RMSNormRoPE(c.r, c.rn, b, l, c.hq, d, pos, eps, theta)
	k, _ := ref.RMSNormRoPE(c.k, c.kn, b, l, hkv, d, pos, eps, theta)
	vs := ref.SwapAxes12(c.v, b, l, hkv, d)
	kc, vc = append([]float64(nil), c.kc...), append([]float64(nil), c.vc...)
	for bh := range b * hkv {
		for i := range l {
			src, dst := (bh*l+i)*d, (bh*c.capacity+starts[bh/hkv]+i)*d
			copy(kc[dst:dst+d], k[src:src+d])
			copy(vc[dst:dst+d], vs[src:src+d])
		}
	}
	return q, r, kc, vc
}

func (c *prepCase) read(t *testing.T) []float64 {
	var all []float64
	for _, x := range []*engine.Tensor{c.a.QOut, c.a.ROut, c.a.KCache, c.a.VCache} {
		all = append(all, fdown(t, x)...)
	}
	return all
}

func TestFusedDecodePrep(t *testing.T) {
	gpu := openGPU(t)
	rng := rand.New(rand.NewPCG(21, 22))
	for _, bl := range [][2]int{{1, 1}, {4, 1}, {2, 3}} {
		b, l := bl[0], bl[1]
		t.Run(fmt.Sprintf("B%d L%d", b, l), func(t *testing.T) {
			c := newPrepCase(t, gpu, rng, b, l, 300)
			pos, starts := make([]int, b*l), make([]int, b)
			for i := range starts {
				starts[i] = rng.IntN(300 - l + 1)
				for j := range l {
					pos[i*l+j] = 1000*i + 37*j + starts[i]
				}
			}
			c.set(t, pos, starts)
			q, r, kc, vc := c.want(pos, starts)
			want := append(append(append(q, r...), kc...), vc...)
			fused := fusedRun(t, gpu, func(dev engine.Device) error {
				c.reset(t)
				return engine.DecodePrep(dev, c.a)
			}, func() []float64 { return c.read(t) })
			c.reset(t)
			if err := engine.DecodePrep(plain{gpu}, c.a); err != nil {
				t.Fatal(err)
			}
			comp := c.read(t)
			// The composition (here without the fused norm+RoPE either)
			// rounds the normed rows before rotating them.
			ef, ec := enginetest.RelErr(fused, want), enginetest.RelErr(comp, want)
			t.Logf("fused %.3g, composition %.3g (relative to the float64 reference)", ef, ec)
			if !(ef <= roundOnce) {
				t.Errorf("fused: relative error %.3g exceeds %.3g", ef, roundOnce)
			}
			if !(ec <= 1.6e-2) {
				t.Errorf("composition: relative error %.3g exceeds 1.6e-2", ec)
			}
		})
	}
	t.Run("start out of range", func(t *testing.T) {
		c := newPrepCase(t, gpu, rng, 2, 1, 16)
		c.set(t, []int{3, 4}, []int{5, 16})
		if err := engine.DecodePrep(gpu, c.a); err != nil {
			t.Fatal(err)
		}
		err := gpu.Sync()
		if err == nil || !strings.Contains(err.Error(), "starts[1] = 16") {
			t.Fatalf("a start past the capacity: Sync error %v, want one naming starts[1]", err)
		}
		// Sequence 0 was appended, sequence 1 untouched.
		_, _, kc, _ := c.want([]int{3, 4}, []int{5, 0})
		got := fdown(t, c.a.KCache)
		half := len(kc) / 2
		copy(kc[half:], c.kc[half:])
		if e := enginetest.RelErr(got, kc); !(e <= roundOnce) {
			t.Errorf("kCache after a rejected start: relative error %.3g", e)
		}
	})
}

// TestFusedDecodeGraph records a decode step's fused ops (NormLinearMulti
// into q, k, v, r, then DecodePrep over them) with PDL and replays it at
// new positions and starts written between replays: the same as the eager
// ops each time.
func TestFusedDecodeGraph(t *testing.T) {
	gpu := openGPU(t)
	rng := rand.New(rand.NewPCG(31, 32))
	setOptions(t, gpu, cuda.Options{})
	const K, eps = 1024, 1e-6
	dt := engine.BF16
	c := newPrepCase(t, gpu, rng, 1, 1, 64)
	x := fup(t, gpu, dt, enginetest.Normal(rng, dt, K, 3), 1, K)
	g := fup(t, gpu, engine.F32, enginetest.Normal(rng, engine.F32, K, 1), K)
	var ws, outs []*engine.Tensor
	for _, p := range []*engine.Tensor{c.a.Q, c.a.K, c.a.V, c.a.R} {
		n := p.Numel()
		ws = append(ws, fup(t, gpu, dt, enginetest.Normal(rng, dt, n*K, 0.05), n, K))
		v, err := p.Reshape(1, n)
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, v)
	}
	step := func() error {
		if err := engine.NormLinearMulti(gpu, outs, ws, x, g, eps, nil); err != nil {
			return err
		}
		return engine.DecodePrep(gpu, c.a)
	}
	if err := gpu.BeginGraph(); err != nil {
		t.Fatal(err)
	}
	if err := step(); err != nil {
		gpu.EndGraph()
		t.Fatal(err)
	}
	gr, err := gpu.EndGraph()
	if err != nil {
		t.Fatal(err)
	}
	defer gr.Free()
	for i, ps := range [][2]int{{7, 3}, {30000, 41}, {12, 63}} {
		c.set(t, []int{ps[0]}, []int{ps[1]})
		c.reset(t)
		if err := gr.Replay(); err != nil {
			t.Fatal(err)
		}
		replayed := c.read(t)
		c.reset(t)
		if err := step(); err != nil {
			t.Fatal(err)
		}
		eager := c.read(t)
		for j := range eager {
			if math.Float64bits(eager[j]) != math.Float64bits(replayed[j]) {
				t.Fatalf("replay %d (pos %d, start %d): element %d %v replayed, %v eager", i, ps[0], ps[1], j, replayed[j], eager[j])
			}
		}
	}
}

// TestArgMaxWide checks the chunked argmax (argmax_part, argmax_final) on
// a padded 50k vocabulary: a tie across chunks (the lower index wins), a
// NaN in a late chunk, a row of -Inf and a maximum past the classes.
func TestArgMaxWide(t *testing.T) {
	gpu := openGPU(t)
	const n, w, classes = 4, 50304, 50257
	rng := rand.New(rand.NewPCG(41, 42))
	v := make([]float32, n*w)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	row := func(r int) []float32 { return v[r*w : (r+1)*w] }
	row(0)[1500], row(0)[40000] = 9, 9
	row(1)[45000] = float32(math.NaN())
	for c := range row(2) {
		row(2)[c] = float32(math.Inf(-1))
	}
	row(3)[50300], row(3)[50250] = 100, 50
	x, err := engine.FromFloat32(gpu, engine.F32, v, n, w)
	if err != nil {
		t.Fatal(err)
	}
	defer gpu.Free(x)
	out, err := gpu.Alloc(engine.I32, n)
	if err != nil {
		t.Fatal(err)
	}
	defer gpu.Free(out)
	if err := gpu.ArgMaxRows(out, x, classes); err != nil {
		t.Fatal(err)
	}
	got, err := engine.Int32s(out)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int32{1500, -1, 0, 50250}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("argmax rows = %v, want %v", got, want)
	}
}
