package engine_test

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/cpu"
)

// TestQuantizeInt8RoundTrip: every element of a quantized matrix comes
// back within half its group's scale, s / 2 = max|group| / 254, and the
// scales are max|group| / 127 (rounded to f32), for group sizes that
// divide K, leave a partial last group, exceed K (per-channel) and are 1;
// for weights of several magnitudes and a group of zeros.
func TestQuantizeInt8RoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct {
		n, k, group int
		scale       float64
	}{
		{4, 256, 128, 1}, {3, 100, 32, 0.02}, {5, 64, 1000, 3e-5}, {2, 17, 1, 1}, {6, 48, 16, 1e3},
	} {
		w := make([]float32, c.n*c.k)
		for i := range w {
			w[i] = float32(rng.NormFloat64() * c.scale)
		}
		for i := range min(c.group, c.k) { // a group of zeros: row 0, group 0
			w[i] = 0
		}
		q, s, err := engine.QuantizeInt8(w, c.n, c.k, c.group)
		if err != nil {
			t.Fatal(err)
		}
		ng := engine.Int8Groups(c.k, c.group)
		if len(q) != c.n*c.k || len(s) != c.n*ng {
			t.Fatalf("%+v: %d values, %d scales, want %d and %d", c, len(q), len(s), c.n*c.k, c.n*ng)
		}
		back, err := engine.DequantizeInt8(q, s, c.n, c.k, c.group)
		if err != nil {
			t.Fatal(err)
		}
		for r := range c.n {
			for g := range ng {
				lo, hi := g*c.group, min((g+1)*c.group, c.k)
				var amax float64
				for j := lo; j < hi; j++ {
					amax = max(amax, math.Abs(float64(w[r*c.k+j])))
				}
				sc := float64(s[r*ng+g])
				if want := float64(float32(amax / 127)); sc != want {
					t.Errorf("%+v: scale (%d, %d) = %g, want max|w|/127 = %g", c, r, g, sc, want)
				}
				for j := lo; j < hi; j++ {
					i := r*c.k + j
					if q[i] < -127 || q[i] > 127 {
						t.Fatalf("%+v: q[%d] = %d outside [-127, 127]", c, i, q[i])
					}
					// half a scale, and the rounding of q s to f32
					bound := sc/2*(1+1e-6) + math.Abs(float64(back[i]))*0x1p-24
					if e := math.Abs(float64(back[i]) - float64(w[i])); e > bound {
						t.Errorf("%+v: element %d: %g came back as %g (error %g > s/2 = %g)", c, i, w[i], back[i], e, sc/2)
					}
				}
			}
		}
	}
}

// TestQuantizeInt8Errors: bad group sizes, a matrix the values do not fill
// and non-finite weights are errors that say so.
func TestQuantizeInt8Errors(t *testing.T) {
	w := make([]float32, 12)
	for _, c := range []struct {
		vals        []float32
		n, k, group int
		want        string
	}{
		{w, 3, 4, 0, "group size 0 must be >= 1"},
		{w, 3, 4, -128, "group size -128"},
		{w, 3, 5, 4, "12 values do not fill a 3x5 matrix"},
		{append(make([]float32, 5), float32(math.NaN()), 0), 1, 7, 4, "element (0, 5) is NaN"},
		{[]float32{0, float32(math.Inf(-1))}, 2, 1, 1, "element (1, 0) is -Inf"},
	} {
		if _, _, err := engine.QuantizeInt8(c.vals, c.n, c.k, c.group); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("QuantizeInt8(%d values, %dx%d, group %d): %v, want %q", len(c.vals), c.n, c.k, c.group, err, c.want)
		}
	}
	if _, err := engine.DequantizeInt8(make([]int8, 12), make([]float32, 3), 3, 4, 2); err == nil {
		t.Error("DequantizeInt8 with 3 scales for 6 groups: no error")
	}
	if _, err := engine.NewInt8Weight(cpu.New(), make([]int8, 12), make([]float32, 3), 3, 4, 0); err == nil {
		t.Error("NewInt8Weight with group 0: no error")
	}
}

// TestLinearInt8MatchesDequantizedMatMul: the CPU backend's LinearInt8
// equals dequantize-then-MatMul of the same weight (both multiply the f32
// dequantized values in f32), and EmbeddingInt8 with no ids is that
// dequantized matrix exactly.
func TestLinearInt8MatchesDequantizedMatMul(t *testing.T) {
	dev := cpu.New()
	rng := rand.New(rand.NewPCG(3, 4))
	for _, c := range []struct{ m, n, k, group int }{{1, 33, 256, 128}, {7, 12, 100, 32}, {20, 5, 64, 64}, {3, 9, 45, 7}} {
		wv := make([]float32, c.n*c.k)
		for i := range wv {
			wv[i] = float32(rng.NormFloat64())
		}
		q, s, err := engine.QuantizeInt8(wv, c.n, c.k, c.group)
		if err != nil {
			t.Fatal(err)
		}
		w, err := engine.NewInt8Weight(dev, q, s, c.n, c.k, c.group)
		if err != nil {
			t.Fatal(err)
		}
		deq, _ := engine.DequantizeInt8(q, s, c.n, c.k, c.group)
		xv := make([]float32, c.m*c.k)
		for i := range xv {
			xv[i] = float32(rng.NormFloat64())
		}
		x, _ := engine.FromFloat32(dev, engine.F32, xv, c.m, c.k)
		wd, _ := engine.FromFloat32(dev, engine.F32, deq, c.n, c.k)
		got, _ := dev.Alloc(engine.F32, c.m, c.n)
		want, _ := dev.Alloc(engine.F32, c.m, c.n)
		whole, _ := dev.Alloc(engine.F32, c.n, c.k)
		if err := dev.LinearInt8(got, x, w, false); err != nil {
			t.Fatal(err)
		}
		if err := dev.MatMul(want, x, wd, engine.MatMulOpts{TransB: true}); err != nil {
			t.Fatal(err)
		}
		if err := dev.EmbeddingInt8(whole, w, nil); err != nil {
			t.Fatal(err)
		}
		g, _ := engine.Float32s(got)
		wt, _ := engine.Float32s(want)
		var worst, scale float64
		for i := range g {
			worst = max(worst, math.Abs(float64(g[i]-wt[i])))
			scale = max(scale, math.Abs(float64(wt[i])))
		}
		if worst > 1e-5*scale {
			t.Errorf("%+v: LinearInt8 differs from the dequantized MatMul by %g (of %g)", c, worst, scale)
		}
		wh, _ := engine.Float32s(whole)
		for i := range wh {
			if wh[i] != deq[i] {
				t.Fatalf("%+v: EmbeddingInt8 element %d = %g, DequantizeInt8 %g", c, i, wh[i], deq[i])
			}
		}
	}
}
