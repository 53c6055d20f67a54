package cpu

import (
	"fmt"
	"math"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/enginetest"
	"github.com/parallax-engine/parallax/engine/ref"
)

// sizes cover a partial block, several blocks and several worker chunks.
var ewSizes = []int{1, 37, 3*ewBlock + 5, 3*elemChunk + 11}

func TestSwiGLU(t *testing.T) {
	for _, n := range ewSizes {
		for _, dt := range []engine.DType{engine.F32, engine.BF16} {
			for _, d := range testDevices() {
				t.Run(fmt.Sprintf("n=%d/%v/threads=%d", n, dt, d.threads), func(t *testing.T) {
					rng := newRng(uint64(n))
					gv, uv, dv := enginetest.Normal(rng, dt, n, 3), enginetest.Normal(rng, dt, n, 1), enginetest.Normal(rng, dt, n, 1)
					g, u, dy := up(t, d, dt, gv, n), up(t, d, dt, uv, n), up(t, d, dt, dv, n)
					out, dg, du := alloc(t, d, dt, n), alloc(t, d, dt, n), alloc(t, d, dt, n)
					if err := d.SwiGLU(out, g, u); err != nil {
						t.Fatal(err)
					}
					near(t, "out", down(t, out), ref.SwiGLU(gv, uv), tolFor(dt, 4))
					if err := d.SwiGLUBackward(dg, du, dy, g, u); err != nil {
						t.Fatal(err)
					}
					wg, wu := ref.SwiGLUBackward(dv, gv, uv)
					near(t, "dGate", down(t, dg), wg, tolFor(dt, 8))
					near(t, "dUp", down(t, du), wu, tolFor(dt, 4))
				})
			}
		}
	}
}

func TestSwiGLUExtremes(t *testing.T) {
	d := New()
	gv := []float64{-1e30, -200, -90, 0, 90, 200, 1e30}
	g, u := up(t, d, engine.F32, gv, 7), up(t, d, engine.F32, []float64{1, 1, 1, 1, 1, 1, 1}, 7)
	out, dg, du := alloc(t, d, engine.F32, 7), alloc(t, d, engine.F32, 7), alloc(t, d, engine.F32, 7)
	if err := d.SwiGLU(out, g, u); err != nil {
		t.Fatal(err)
	}
	if err := d.SwiGLUBackward(dg, du, u, g, u); err != nil {
		t.Fatal(err)
	}
	o, a, b := down(t, out), down(t, dg), down(t, du)
	if !isFinite(o) || !isFinite(a) || !isFinite(b) {
		t.Fatalf("non-finite results for large |gate|: out %v dGate %v dUp %v", o, a, b)
	}
	if o[0] != 0 || o[6] != float64(float32(1e30)) {
		t.Errorf("silu(-1e30) = %v (want 0), silu(1e30) = %v (want 1e30)", o[0], o[6])
	}
}

func TestExp32(t *testing.T) {
	var worst float64
	for x := float32(-103); x < 88.7; x += 0.0137 {
		got := float64(exp32(x))
		want := math.Exp(float64(x))
		if want < 0x1p-126 { // subnormal results: absolute error only
			if math.Abs(got-want) > 0x1p-149 {
				t.Fatalf("exp32(%v) = %v, want %v", x, got, want)
			}
			continue
		}
		worst = max(worst, math.Abs(got-want)/want)
	}
	if worst > 1.2e-7 {
		t.Errorf("exp32 relative error %.3g, want <= 1.2e-7 (about one ulp)", worst)
	}
	if !math.IsInf(float64(exp32(89)), 1) || exp32(-105) != 0 || exp32(0) != 1 || !math.IsNaN(float64(exp32(float32(math.NaN())))) {
		t.Errorf("exp32 specials: exp(89) %v exp(-105) %v exp(0) %v", exp32(89), exp32(-105), exp32(0))
	}
}

func TestAddScaled(t *testing.T) {
	for _, n := range ewSizes {
		for _, dt := range []engine.DType{engine.F32, engine.BF16} {
			for _, d := range testDevices() {
				t.Run(fmt.Sprintf("n=%d/%v/threads=%d", n, dt, d.threads), func(t *testing.T) {
					rng := newRng(uint64(n))
					av, bv := enginetest.Normal(rng, dt, n, 1), enginetest.Normal(rng, engine.F32, n, 1)
					a, b := up(t, d, dt, av, n), up(t, d, engine.F32, bv, n)
					out := alloc(t, d, dt, n)
					if err := d.AddScaled(out, a, b, 0.5, -1.25); err != nil {
						t.Fatal(err)
					}
					want := ref.AddScaled(av, bv, 0.5, -1.25)
					near(t, "out", down(t, out), want, tolFor(dt, 2))
					// Aliasing out with a, and with b.
					if err := d.AddScaled(a, a, b, 0.5, -1.25); err != nil {
						t.Fatal(err)
					}
					near(t, "out=a", down(t, a), want, tolFor(dt, 2))
					if err := d.AddScaled(b, out, b, 2, 3); err != nil {
						t.Fatal(err)
					}
					near(t, "out=b", down(t, b), ref.AddScaled(down(t, out), bv, 2, 3), tolFor(engine.F32, 2))
				})
			}
		}
	}
	d := New()
	wantArgError(t, "counts", d.AddScaled(alloc(t, d, engine.F32, 4), alloc(t, d, engine.F32, 2, 2), alloc(t, d, engine.F32, 5), 1, 1), "add scaled")
	wantArgError(t, "int", d.AddScaled(alloc(t, d, engine.I32, 4), alloc(t, d, engine.F32, 4), alloc(t, d, engine.F32, 4), 1, 1), "add scaled")
	wantArgError(t, "swiglu counts", d.SwiGLU(alloc(t, d, engine.F32, 4), alloc(t, d, engine.F32, 4), alloc(t, d, engine.F32, 3)), "swiglu")
	wantArgError(t, "swiglu backward nil", d.SwiGLUBackward(nil, alloc(t, d, engine.F32, 4), alloc(t, d, engine.F32, 4), alloc(t, d, engine.F32, 4), alloc(t, d, engine.F32, 4)), "swiglu backward")
}

func TestFill(t *testing.T) {
	d := New()
	for _, dt := range []engine.DType{engine.F32, engine.BF16, engine.F16, engine.I32} {
		x := alloc(t, d, dt, 3, elemChunk+1)
		if err := d.Fill(x, -2.7); err != nil {
			t.Fatal(err)
		}
		want := float64(dt.Round(-2.7))
		if dt == engine.I32 {
			want = -2
		}
		for i, v := range down(t, x) {
			if v != want {
				t.Fatalf("%v: element %d = %v, want %v", dt, i, v, want)
			}
		}
	}
	wantArgError(t, "nil", d.Fill(nil, 1), "fill")
	foreign, _ := New().Alloc(engine.F32, 2)
	wantArgError(t, "foreign", d.Fill(foreign, 1), "fill")
}
