package vulkan

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/cpu"
)

// The GEMV kernel's tests compare it with the CPU backend on the same
// inputs under the rounding model of docs/ENGINE.md ("Conformance
// bounds"), elementwise. The inputs are exact in their dtype and the
// products exact in f32 (widened 16-bit values, or f32 values whose
// product is rounded once by an FMA), so a backend's result y1 of the
// exact y = sum_k x_k w_k (+ c) differs from it by the f32 sum's
// rounding, at most delta = gamma_{K+1} E with E = sum_k |x_k w_k| (+ |c|)
// and gamma_n = n u32 / (1 - n u32) (any summation order: no term passes
// more than K additions, and one product rounding), and then by the
// rounding to the output dtype, at most u (|y| + delta). Two backends
// differ by at most twice that:
//
//	|vulkan - cpu| <= 2 (u (|y| + delta) + delta).

const u32 = 0x1p-24

// unitRound is the unit roundoff of an output dtype.
func unitRound(dt engine.DType) float64 {
	switch dt {
	case engine.BF16:
		return 0x1p-8
	case engine.F16:
		return 0x1p-11
	}
	return u32
}

func gammaN(n int) float64 { return float64(n) * u32 / (1 - float64(n)*u32) }

// gemvRef is the exact product in float64 (y) and its condition E.
func gemvRef(x, w, c []float64, m, n, k int) (y, e []float64) {
	y, e = make([]float64, m*n), make([]float64, m*n)
	for i := range m {
		for j := range n {
			var s, a float64
			for kk := range k {
				p := x[i*k+kk] * w[j*k+kk]
				s += p
				a += math.Abs(p)
			}
			if c != nil {
				s += c[i*n+j]
				a += math.Abs(c[i*n+j])
			}
			y[i*n+j], e[i*n+j] = s, a
		}
	}
	return y, e
}

// checkBound fails unless |got - want| <= bound elementwise, NaN where
// want is NaN and nowhere else.
func checkBound(t *testing.T, what string, got, want, bound []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	worst := 0.0
	for i := range want {
		g, w := got[i], want[i]
		if math.IsNaN(w) || math.IsNaN(g) {
			if math.IsNaN(w) != math.IsNaN(g) {
				t.Fatalf("%s[%d] = %v, want %v", what, i, g, w)
			}
			continue
		}
		if math.IsInf(w, 0) || math.IsInf(g, 0) {
			if g != w {
				t.Fatalf("%s[%d] = %v, want %v", what, i, g, w)
			}
			continue
		}
		d := math.Abs(g - w)
		if !(d <= bound[i]) {
			t.Fatalf("%s[%d] = %v, want %v: |difference| %.3g exceeds the rounding bound %.3g", what, i, g, w, d, bound[i])
		}
		if bound[i] > 0 {
			worst = max(worst, d/bound[i])
		}
	}
	t.Logf("%s: at most %.2f of the bound", what, worst)
}

// pairBound is the bound between two backends for outputs of dtype dt.
func pairBound(dt engine.DType, y, e []float64, k int) []float64 {
	u, g := unitRound(dt), gammaN(k+1)
	b := make([]float64, len(y))
	for i := range y {
		delta := g * e[i]
		b[i] = 2 * (u*(math.Abs(y[i])+delta) + delta)
	}
	return b
}

// heldValues returns a tensor's values as the device holds them.
func heldValues(t *testing.T, x *engine.Tensor) []float64 {
	t.Helper()
	v := download(t, x)
	out := make([]float64, len(v))
	for i, f := range v {
		out[i] = float64(f)
	}
	return out
}

func randVals(rng *rand.Rand, dt engine.DType, n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = dt.Round(float32(rng.NormFloat64() * scale))
	}
	return v
}

// kernelsRun returns the names of the dispatches fn records (a profile).
func kernelsRun(t *testing.T, d *Device, fn func() error) string {
	t.Helper()
	if err := d.StartProfile(); err != nil {
		t.Fatal(err)
	}
	err := fn()
	p, perr := d.StopProfile()
	if err != nil {
		t.Fatal(err)
	}
	if perr != nil {
		t.Fatal(perr)
	}
	var names []string
	for _, e := range p {
		names = append(names, e.Name)
	}
	return strings.Join(names, "; ")
}

// TestGEMV checks MatMul's matrix-vector path against the CPU backend:
// every row count 1..8, K a multiple of 8 (16-byte loads) and not (the
// element-wise fallback), N not a multiple of the columns per workgroup,
// accumulation, bf16/f16/f32 weights with x of the same dtype and of f32,
// outputs of x's dtype and f32, a batch sharing the weight.
func TestGEMV(t *testing.T) {
	d := testDevice(t)
	if _, _, ok := d.gemvShape(); !ok {
		t.Skip("no GEMV kernel on this device")
	}
	c := cpu.New()
	rng := rand.New(rand.NewPCG(7, 11))
	type shape struct{ n, k int }
	shapes := []shape{{72, 264}, {33, 16}, {40, 37}, {9, 1030}, {130, 8}, {5, 3}}
	for _, wdt := range []engine.DType{engine.BF16, engine.F16, engine.F32} {
		for _, xdt := range []engine.DType{wdt, engine.F32} {
			for _, odt := range []engine.DType{xdt, engine.F32} {
				for m := 1; m <= gemvMaxRows; m++ {
					s := shapes[(m+int(wdt))%len(shapes)]
					acc := m%2 == 0
					batch := 1
					if m == 4 || m == 6 {
						batch = 2 // [2, m/2, K] against a shared weight
					}
					name := fmt.Sprintf("w %v x %v out %v M%d N%d K%d acc %v batch %d", wdt, xdt, odt, m, s.n, s.k, acc, batch)
					t.Run(name, func(t *testing.T) {
						testGEMVCase(t, d, c, rng, wdt, xdt, odt, m, s.n, s.k, acc, batch)
					})
				}
			}
		}
	}
}

func testGEMVCase(t *testing.T, d *Device, c *cpu.Device, rng *rand.Rand, wdt, xdt, odt engine.DType, m, n, k int, acc bool, batch int) {
	xv, wv := randVals(rng, xdt, m*k, 1), randVals(rng, wdt, n*k, 1)
	cv := randVals(rng, odt, m*n, 1)
	xs, os := []int{m, k}, []int{m, n}
	if batch > 1 {
		xs, os = []int{batch, m / batch, k}, []int{batch, m / batch, n}
	}
	vt := &tensors{t: t, dev: d}
	ct := &tensors{t: t, dev: c}
	defer vt.free()
	defer ct.free()
	x, w, o := vt.make(xdt, xv, xs...), vt.make(wdt, wv, n, k), vt.make(odt, cv, os...)
	cx, cw, co := ct.make(xdt, xv, xs...), ct.make(wdt, wv, n, k), ct.make(odt, cv, os...)
	opts := engine.MatMulOpts{TransB: true, Accumulate: acc}
	ran := kernelsRun(t, d, func() error { return d.MatMul(o, x, w, opts) })
	if !strings.Contains(ran, "gemv") {
		t.Fatalf("the product ran %q, not the GEMV kernel", ran)
	}
	if err := c.MatMul(co, cx, cw, opts); err != nil {
		t.Fatal(err)
	}
	xh, wh, ch := heldValues(t, cx), heldValues(t, cw), []float64(nil)
	if acc {
		ch = make([]float64, len(cv))
		for i, v := range cv {
			ch[i] = float64(v)
		}
	}
	y, e := gemvRef(xh, wh, ch, m, n, k)
	checkBound(t, "out", heldValues(t, o), heldValues(t, co), pairBound(odt, y, e, k))
}

// TestGEMVViews runs the kernel on matrices at element offsets inside
// larger tensors: offsets that are multiples of 8 with K % 8 == 0 take the
// 16-byte loads, odd ones the element-wise path.
func TestGEMVViews(t *testing.T) {
	d := testDevice(t)
	if _, _, ok := d.gemvShape(); !ok {
		t.Skip("no GEMV kernel on this device")
	}
	rng := rand.New(rand.NewPCG(3, 5))
	for _, tc := range []struct {
		dt               engine.DType
		m, n, k          int
		xoff, woff, ooff int
		acc              bool
	}{
		{engine.BF16, 3, 21, 64, 8, 16, 5, true},
		{engine.BF16, 2, 17, 64, 3, 5, 7, false},
		{engine.F16, 5, 12, 40, 1, 8, 3, true},
		{engine.F32, 8, 9, 24, 8, 24, 1, false},
		{engine.F32, 1, 30, 33, 7, 2, 0, true},
	} {
		t.Run(fmt.Sprintf("%v M%d N%d K%d offsets %d,%d,%d", tc.dt, tc.m, tc.n, tc.k, tc.xoff, tc.woff, tc.ooff), func(t *testing.T) {
			xv := randVals(rng, tc.dt, tc.xoff+tc.m*tc.k+3, 1)
			wv := randVals(rng, tc.dt, tc.woff+tc.n*tc.k+5, 1)
			ov := randVals(rng, tc.dt, tc.ooff+tc.m*tc.n+2, 1)
			vt := &tensors{t: t, dev: d}
			defer vt.free()
			x, w, o := vt.make(tc.dt, xv, len(xv)), vt.make(tc.dt, wv, len(wv)), vt.make(tc.dt, ov, len(ov))
			err := d.gemv(gemvCall{rows: tc.m, k: tc.k,
				x: gemvOperand{in(x), tc.xoff}, ws: []gemvOperand{{in(w), tc.woff}}, outs: []gemvOperand{{out(o), tc.ooff}},
				ns: []int{tc.n}, accumulate: tc.acc})
			if err != nil {
				t.Fatal(err)
			}
			got := heldValues(t, o)
			f64 := func(v []float32) []float64 {
				out := make([]float64, len(v))
				for i, x := range v {
					out[i] = float64(x)
				}
				return out
			}
			xs, ws, os := f64(xv), f64(wv), f64(ov)
			var c []float64
			if tc.acc {
				c = os[tc.ooff : tc.ooff+tc.m*tc.n]
			}
			y, e := gemvRef(xs[tc.xoff:], ws[tc.woff:], c, tc.m, tc.n, tc.k)
			// Against the exact product: one backend's bound (half the pair's).
			b := pairBound(tc.dt, y, e, tc.k)
			want := append([]float64(nil), os...)
			bound := make([]float64, len(os))
			for i := range y {
				want[tc.ooff+i] = y[i]
				bound[tc.ooff+i] = b[i] / 2
			}
			checkBound(t, "out", got, want, bound)
		})
	}
}

// TestGEMVNonFinite: a NaN in x makes its row NaN, an infinity in a
// weight row makes its column infinite (x of one sign) or NaN (both), as
// IEEE arithmetic in the CPU backend puts them, on both load paths.
func TestGEMVNonFinite(t *testing.T) {
	d := testDevice(t)
	if _, _, ok := d.gemvShape(); !ok {
		t.Skip("no GEMV kernel on this device")
	}
	c := cpu.New()
	rng := rand.New(rand.NewPCG(9, 1))
	for _, dt := range []engine.DType{engine.BF16, engine.F16, engine.F32} {
		for _, k := range []int{64, 45} {
			t.Run(fmt.Sprintf("%v K%d", dt, k), func(t *testing.T) {
				const m, n = 3, 20
				xv, wv := randVals(rng, dt, m*k, 1), randVals(rng, dt, n*k, 1)
				xv[1*k+k/2] = float32(math.NaN())
				for kk := range k {
					xv[2*k+kk] = float32(math.Abs(float64(xv[2*k+kk]))) + 0.5 // row 2 positive
				}
				// Column 7 holds two +Inf weights: +Inf for the positive row 2,
				// Inf - Inf = NaN for row 0, whose x there are 1 and -1.
				wv[7*k+3], wv[7*k+4] = float32(math.Inf(1)), float32(math.Inf(1))
				xv[0*k+3], xv[0*k+4] = 1, -1
				vt := &tensors{t: t, dev: d}
				ct := &tensors{t: t, dev: c}
				defer vt.free()
				defer ct.free()
				x, w, o := vt.make(dt, xv, m, k), vt.make(dt, wv, n, k), vt.make(engine.F32, make([]float32, m*n), m, n)
				cx, cw, co := ct.make(dt, xv, m, k), ct.make(dt, wv, n, k), ct.make(engine.F32, make([]float32, m*n), m, n)
				opts := engine.MatMulOpts{TransB: true}
				if err := d.MatMul(o, x, w, opts); err != nil {
					t.Fatal(err)
				}
				if err := c.MatMul(co, cx, cw, opts); err != nil {
					t.Fatal(err)
				}
				got, want := heldValues(t, o), heldValues(t, co)
				for j := range n {
					if !math.IsNaN(got[1*n+j]) {
						t.Errorf("row 1 (NaN in x), column %d = %v, want NaN", j, got[1*n+j])
					}
				}
				if got[2*n+7] != math.Inf(1) || !math.IsNaN(got[0*n+7]) {
					t.Errorf("column 7 (+Inf weights): row 2 = %v (want +Inf), row 0 = %v (want NaN)", got[2*n+7], got[0*n+7])
				}
				xh, wh := heldValues(t, cx), heldValues(t, cw)
				y, e := gemvRef(xh, wh, nil, m, n, k)
				checkBound(t, "out", got, want, pairBound(engine.F32, y, e, k))
			})
		}
	}
}

// TestLinearMulti checks LinearMulti's one dispatch against a product
// per weight on the CPU backend, and that it declines what the kernel
// does not take (more than 8 rows, outputs of different dtypes) without
// touching the outputs.
func TestLinearMulti(t *testing.T) {
	d := testDevice(t)
	if _, _, ok := d.gemvShape(); !ok {
		t.Skip("no GEMV kernel on this device")
	}
	c := cpu.New()
	rng := rand.New(rand.NewPCG(5, 8))
	for _, tc := range []struct {
		dt, odt engine.DType
		m, k    int
		ns      []int
	}{
		{engine.BF16, engine.BF16, 1, 128, []int{64, 32, 32, 64}},
		{engine.BF16, engine.F32, 4, 264, []int{40, 24, 24}},
		{engine.F16, engine.F16, 8, 32, []int{9, 33}},
		{engine.F32, engine.F32, 2, 21, []int{17, 3, 50}},
		{engine.BF16, engine.BF16, 3, 1024, []int{1}},
	} {
		t.Run(fmt.Sprintf("%v>%v M%d K%d N%v", tc.dt, tc.odt, tc.m, tc.k, tc.ns), func(t *testing.T) {
			vt := &tensors{t: t, dev: d}
			ct := &tensors{t: t, dev: c}
			defer vt.free()
			defer ct.free()
			xv := randVals(rng, tc.dt, tc.m*tc.k, 1)
			x, cx := vt.make(tc.dt, xv, tc.m, tc.k), ct.make(tc.dt, xv, tc.m, tc.k)
			var outs, ws, couts, cws []*engine.Tensor
			for _, n := range tc.ns {
				wv := randVals(rng, tc.dt, n*tc.k, 1)
				ws, cws = append(ws, vt.make(tc.dt, wv, n, tc.k)), append(cws, ct.make(tc.dt, wv, n, tc.k))
				outs = append(outs, vt.make(tc.odt, make([]float32, tc.m*n), tc.m, n))
				couts = append(couts, ct.make(tc.odt, make([]float32, tc.m*n), tc.m, n))
			}
			ran := kernelsRun(t, d, func() error {
				done, err := d.LinearMulti(outs, ws, x)
				if err == nil && !done {
					err = fmt.Errorf("LinearMulti declined the operands")
				}
				return err
			})
			if strings.Count(ran, "gemv multi") != 1 || strings.Contains(ran, ";") {
				t.Fatalf("ran %q, want one gemv multi dispatch", ran)
			}
			xh := heldValues(t, cx)
			for i, n := range tc.ns {
				if err := c.MatMul(couts[i], cx, cws[i], engine.MatMulOpts{TransB: true}); err != nil {
					t.Fatal(err)
				}
				y, e := gemvRef(xh, heldValues(t, cws[i]), nil, tc.m, n, tc.k)
				checkBound(t, fmt.Sprintf("out %d", i), heldValues(t, outs[i]), heldValues(t, couts[i]), pairBound(tc.odt, y, e, tc.k))
			}
		})
	}
	t.Run("declined", func(t *testing.T) {
		vt := &tensors{t: t, dev: d}
		defer vt.free()
		x9 := vt.make(engine.BF16, make([]float32, 9*8), 9, 8)
		w := vt.make(engine.BF16, make([]float32, 4*8), 4, 8)
		o9 := vt.make(engine.BF16, make([]float32, 9*4), 9, 4)
		if done, err := d.LinearMulti([]*engine.Tensor{o9}, []*engine.Tensor{w}, x9); done || err != nil {
			t.Errorf("9 rows: done %v, err %v; want declined", done, err)
		}
		x := vt.make(engine.BF16, make([]float32, 2*8), 2, 8)
		oa, ob := vt.make(engine.BF16, make([]float32, 8), 2, 4), vt.make(engine.F32, make([]float32, 8), 2, 4)
		if done, err := d.LinearMulti([]*engine.Tensor{oa, ob}, []*engine.Tensor{w, w}, x); done || err != nil {
			t.Errorf("outputs of two dtypes: done %v, err %v; want declined", done, err)
		}
		bad := vt.make(engine.BF16, make([]float32, 2*3), 2, 3)
		if _, err := d.LinearMulti([]*engine.Tensor{bad}, []*engine.Tensor{w}, x); err == nil {
			t.Error("an output of the wrong shape: no error")
		}
	})
}

// TestLinearSwiGLU checks the fused gate/up/SwiGLU dispatch against the
// composition on the CPU backend: the two products into f32 there, the
// activation in float64 from them. Bound: with products g and u off by
// at most dg, du (the pair bound of each at f32), silu(z) = z s(z) moved
// by |silu'(g)| dg, silu' = s (1 + g (1 - s)), its f32 evaluation (exp to
// 3 + 2|g| ulp as Vulkan allows, the division, the products: 2|g| + 8 ulp
// in all) and the rounding of act to its dtype:
//
//	|d act| <= u (|act| + D) + D, D = |silu'(g)| dg |u| + |silu(g)| du + (2|g| + 8) u32 |act|.
func TestLinearSwiGLU(t *testing.T) {
	d := testDevice(t)
	if _, _, ok := d.gemvShape(); !ok {
		t.Skip("no GEMV kernel on this device")
	}
	c := cpu.New()
	rng := rand.New(rand.NewPCG(2, 2))
	for _, tc := range []struct {
		dt, odt engine.DType
		m, k, n int
	}{
		{engine.BF16, engine.BF16, 1, 1024, 96},
		{engine.BF16, engine.F32, 3, 264, 40},
		{engine.F16, engine.F16, 8, 32, 24},
		{engine.F32, engine.F32, 5, 19, 7},
	} {
		t.Run(fmt.Sprintf("%v>%v M%d K%d N%d", tc.dt, tc.odt, tc.m, tc.k, tc.n), func(t *testing.T) {
			vt := &tensors{t: t, dev: d}
			ct := &tensors{t: t, dev: c}
			defer vt.free()
			defer ct.free()
			scale := 1 / math.Sqrt(float64(tc.k))
			xv, gv, uv := randVals(rng, tc.dt, tc.m*tc.k, 1), randVals(rng, tc.dt, tc.n*tc.k, 2*scale), randVals(rng, tc.dt, tc.n*tc.k, 2*scale)
			x, wg, wu := vt.make(tc.dt, xv, tc.m, tc.k), vt.make(tc.dt, gv, tc.n, tc.k), vt.make(tc.dt, uv, tc.n, tc.k)
			act := vt.make(tc.odt, make([]float32, tc.m*tc.n), tc.m, tc.n)
			cx, cg, cu := ct.make(tc.dt, xv, tc.m, tc.k), ct.make(tc.dt, gv, tc.n, tc.k), ct.make(tc.dt, uv, tc.n, tc.k)
			gate, up := ct.make(engine.F32, make([]float32, tc.m*tc.n), tc.m, tc.n), ct.make(engine.F32, make([]float32, tc.m*tc.n), tc.m, tc.n)
			ran := kernelsRun(t, d, func() error {
				done, err := d.LinearSwiGLU(act, x, wg, wu)
				if err == nil && !done {
					err = fmt.Errorf("LinearSwiGLU declined the operands")
				}
				return err
			})
			if !strings.Contains(ran, "gemv swiglu") || strings.Contains(ran, ";") {
				t.Fatalf("ran %q, want one gemv swiglu dispatch", ran)
			}
			for _, p := range [][2]*engine.Tensor{{gate, cg}, {up, cu}} {
				if err := c.MatMul(p[0], cx, p[1], engine.MatMulOpts{TransB: true}); err != nil {
					t.Fatal(err)
				}
			}
			xh := heldValues(t, cx)
			gy, ge := gemvRef(xh, heldValues(t, cg), nil, tc.m, tc.n, tc.k)
			uy, ue := gemvRef(xh, heldValues(t, cu), nil, tc.m, tc.n, tc.k)
			dg, du := pairBound(engine.F32, gy, ge, tc.k), pairBound(engine.F32, uy, ue, tc.k)
			gs, us := heldValues(t, gate), heldValues(t, up)
			want, bound := make([]float64, len(gs)), make([]float64, len(gs))
			u := unitRound(tc.odt)
			for i, g := range gs {
				s := 1 / (1 + math.Exp(-g))
				a := g * s * us[i]
				want[i] = a
				dsilu := math.Abs(s * (1 + g*(1-s)))
				// dg and du bound the difference of the two backends' products,
				// which is what moves act (the CPU's are the reference here).
				D := dsilu*dg[i]*math.Abs(us[i]) + math.Abs(g*s)*du[i] + (2*math.Abs(g)+8)*u32*math.Abs(a)
				bound[i] = u*(math.Abs(a)+D) + D
			}
			checkBound(t, "act", heldValues(t, act), want, bound)
		})
	}
}

// TestGEMVColumnsPerWorkgroup covers column counts around the columns a
// workgroup takes (one, part of a block, whole blocks and one more): every
// column is written once, and only those.
func TestGEMVColumnsPerWorkgroup(t *testing.T) {
	d := testDevice(t)
	if _, _, ok := d.gemvShape(); !ok {
		t.Skip("no GEMV kernel on this device")
	}
	rng := rand.New(rand.NewPCG(4, 4))
	const m, k = 2, 48
	vt := &tensors{t: t, dev: d}
	defer vt.free()
	for _, n := range []int{1, 7, 31, 32, 33, 257} {
		xv, wv := randVals(rng, engine.F32, m*k, 1), randVals(rng, engine.F32, n*k, 1)
		x, w, o := vt.make(engine.F32, xv, m, k), vt.make(engine.F32, wv, n, k), vt.make(engine.F32, make([]float32, m*n), m, n)
		if err := d.MatMul(o, x, w, engine.MatMulOpts{TransB: true}); err != nil {
			t.Fatal(err)
		}
		f64 := func(v []float32) []float64 {
			out := make([]float64, len(v))
			for i, x := range v {
				out[i] = float64(x)
			}
			return out
		}
		y, e := gemvRef(f64(xv), f64(wv), nil, m, n, k)
		b := pairBound(engine.F32, y, e, k)
		checkBound(t, fmt.Sprintf("N %d", n), heldValues(t, o), y, b)
	}
}
