package ref

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/parallax-engine/parallax/engine"
)

func randn(rng *rand.Rand, n int, scale float64) []float64 {
	x := make([]float64, n)
	for i := range x {
		x[i] = rng.NormFloat64() * scale
	}
	return x
}

func dotf(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// fdCheck compares the analytic gradient grad of f at x with central finite
// differences on every coordinate, relative to the largest gradient entry.
func fdCheck(t *testing.T, name string, f func(x []float64) float64, x, grad []float64) {
	t.Helper()
	const h = 1e-5
	var worst, scale float64
	for _, g := range grad {
		scale = max(scale, math.Abs(g))
	}
	for i := range x {
		old := x[i]
		x[i] = old + h
		fp := f(x)
		x[i] = old - h
		fm := f(x)
		x[i] = old
		fd := (fp - fm) / (2 * h)
		worst = max(worst, math.Abs(fd-grad[i]))
	}
	if scale == 0 {
		t.Fatalf("%s: zero gradient, nothing checked", name)
	}
	if worst/scale > 1e-7 {
		t.Errorf("%s: analytic vs finite-difference gradient differ by %.3g (relative to %.3g)", name, worst, scale)
	}
}

func TestMatMulGradients(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const m, n, k = 3, 4, 5
	a, b, dc := randn(rng, m*k, 1), randn(rng, k*n, 1), randn(rng, m*n, 1)
	f := func(a, b []float64) float64 { return dotf(MatMul(a, b, 1, m, n, k, false, false, false), dc) }
	// dA = dC B^T, dB = A^T dC, written with the transpose flags.
	dA := MatMul(dc, b, 1, m, k, n, false, true, false)
	dB := MatMul(a, dc, 1, k, n, m, true, false, false)
	fdCheck(t, "dA", func(x []float64) float64 { return f(x, b) }, a, dA)
	fdCheck(t, "dB", func(x []float64) float64 { return f(a, x) }, b, dB)
	// The transposed forms agree with explicit transposes.
	at, bt := Transpose(a, m, k), Transpose(b, k, n)
	want := MatMul(a, b, 1, m, n, k, false, false, false)
	for _, c := range []struct {
		x, y   []float64
		ta, tb bool
	}{{at, b, true, false}, {a, bt, false, true}, {at, bt, true, true}} {
		got := MatMul(c.x, c.y, 1, m, n, k, c.ta, c.tb, false)
		for i := range got {
			if math.Abs(got[i]-want[i]) > 1e-12 {
				t.Fatalf("transA %v transB %v: element %d %v, want %v", c.ta, c.tb, i, got[i], want[i])
			}
		}
	}
}

func TestEmbeddingBackwardFD(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const v, d = 6, 3
	ids := []int{1, 4, 1, 0, 5}
	table, dOut := randn(rng, v*d, 1), randn(rng, len(ids)*d, 1)
	fdCheck(t, "dTable", func(x []float64) float64 { return dotf(Embedding(x, ids, d), dOut) },
		table, EmbeddingBackward(dOut, ids, v, d))
}

func TestRMSNormBackwardFD(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const rows, n, eps = 3, 7, 1e-6
	x, w, dOut := randn(rng, rows*n, 1), randn(rng, n, 1), randn(rng, rows*n, 1)
	dX, dW := RMSNormBackward(dOut, x, w, rows, n, eps)
	f := func(x, w []float64) float64 { o, _ := RMSNorm(x, w, rows, n, eps); return dotf(o, dOut) }
	fdCheck(t, "dX", func(z []float64) float64 { return f(z, w) }, x, dX)
	fdCheck(t, "dW", func(z []float64) float64 { return f(x, z) }, w, dW)
}

func TestRoPEInverseFD(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const b, h, l, d = 2, 2, 3, 8
	pos := []int{0, 5, 17}
	x, dOut := randn(rng, b*h*l*d, 1), randn(rng, b*h*l*d, 1)
	f := func(z []float64) float64 { return dotf(RoPE(z, b, h, l, d, pos, 1e4, false), dOut) }
	fdCheck(t, "dX", f, x, RoPE(dOut, b, h, l, d, pos, 1e4, true))
	// The inverse undoes the rotation, and position 0 is the identity.
	back := RoPE(RoPE(x, b, h, l, d, pos, 1e4, false), b, h, l, d, pos, 1e4, true)
	for i := range x {
		if math.Abs(back[i]-x[i]) > 1e-12 {
			t.Fatalf("inverse(rope(x))[%d] = %v, want %v", i, back[i], x[i])
		}
	}
	y := RoPE(x, b, h, l, d, pos, 1e4, false)
	for i := range d {
		if y[i] != x[i] {
			t.Fatalf("position 0 rotated element %d: %v -> %v", i, x[i], y[i])
		}
	}
}

func TestSwiGLUBackwardFD(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	const n = 11
	g, u, dOut := randn(rng, n, 2), randn(rng, n, 1), randn(rng, n, 1)
	dG, dU := SwiGLUBackward(dOut, g, u)
	fdCheck(t, "dGate", func(z []float64) float64 { return dotf(SwiGLU(z, u), dOut) }, g, dG)
	fdCheck(t, "dUp", func(z []float64) float64 { return dotf(SwiGLU(g, z), dOut) }, u, dU)
}

func TestCrossEntropyFD(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	const n, v, ignore, scale = 4, 9, -100, 0.25
	targets := []int{3, ignore, 0, 8}
	logits := randn(rng, n*v, 3)
	loss, dL := CrossEntropy(logits, targets, n, v, ignore, scale)
	if loss[1] != 0 {
		t.Errorf("ignored row loss %v, want 0", loss[1])
	}
	for j := range v {
		if dL[v+j] != 0 {
			t.Fatalf("ignored row gradient %v at %d, want 0", dL[v+j], j)
		}
	}
	f := func(z []float64) float64 {
		l, _ := CrossEntropy(z, targets, n, v, ignore, scale)
		var s float64
		for _, x := range l {
			s += scale * x
		}
		return s
	}
	fdCheck(t, "dLogits", f, logits, dL)
	// Shifting a row does not change its loss (the max is subtracted), even
	// far beyond exp's range.
	big := append([]float64(nil), logits...)
	for j := range v {
		big[j] += 1000
	}
	lb, _ := CrossEntropy(big, targets, n, v, ignore, scale)
	if math.Abs(lb[0]-loss[0]) > 1e-9 {
		t.Errorf("shifted row loss %v, want %v", lb[0], loss[0])
	}
}

func TestAdamWAndMuonFormulas(t *testing.T) {
	p, g, m, v := []float64{1, -2}, []float64{0.5, -1}, []float64{0.1, 0.2}, []float64{0.3, 0.4}
	const lr, b1, b2, eps, wd, step = 0.1, 0.9, 0.99, 1e-8, 0.01, 3
	pn, mn, vn := AdamW(p, g, m, v, lr, b1, b2, eps, wd, step)
	for i := range p {
		mw := b1*m[i] + (1-b1)*g[i]
		vw := b2*v[i] + (1-b2)*g[i]*g[i]
		mh := mw / (1 - math.Pow(b1, step))
		vh := vw / (1 - math.Pow(b2, step))
		pw := p[i]*(1-lr*wd) - lr*mh/(math.Sqrt(vh)+eps)
		if math.Abs(pn[i]-pw) > 1e-12 || math.Abs(mn[i]-mw) > 1e-15 || math.Abs(vn[i]-vw) > 1e-15 {
			t.Errorf("adamw element %d: got (%v, %v, %v), want (%v, %v, %v)", i, pn[i], mn[i], vn[i], pw, mw, vw)
		}
	}
	u, m2 := MuonMomentum(m, g, 0.95, true)
	for i := range m {
		mw := 0.95*m[i] + 0.05*g[i]
		if math.Abs(m2[i]-mw) > 1e-15 || math.Abs(u[i]-(0.05*g[i]+0.95*mw)) > 1e-15 {
			t.Errorf("muon momentum element %d: got (%v, %v)", i, u[i], m2[i])
		}
	}
}

func TestSymEigen(t *testing.T) {
	// Q diag(1, 2, 5, 9) Q^T for a rotation Q has those eigenvalues.
	rng := rand.New(rand.NewPCG(13, 14))
	const n = 4
	q := NewtonSchulz(randn(rng, n*n, 1), n, n, 40) // nearly orthogonal
	// Orthonormalise q exactly by Gram-Schmidt.
	for i := range n {
		row := q[i*n : (i+1)*n]
		for j := range i {
			prev := q[j*n : (j+1)*n]
			c := dotf(row, prev)
			for k := range row {
				row[k] -= c * prev[k]
			}
		}
		s := math.Sqrt(dotf(row, row))
		for k := range row {
			row[k] /= s
		}
	}
	diag := []float64{9, 1, 5, 2}
	a := make([]float64, n*n)
	for i := range n {
		for j := range n {
			for k := range n {
				a[i*n+j] += q[k*n+i] * diag[k] * q[k*n+j]
			}
		}
	}
	ev := SymEigen(a, n)
	for i, want := range []float64{1, 2, 5, 9} {
		if math.Abs(ev[i]-want) > 1e-10 {
			t.Fatalf("eigenvalues %v, want [1 2 5 9]", ev)
		}
	}
}

func TestNewtonSchulzSingularValues(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	for _, sh := range [][2]int{{24, 48}, {48, 24}} {
		rows, cols := sh[0], sh[1]
		g := randn(rng, rows*cols, 1)
		x := NewtonSchulz(g, rows, cols, 5)
		sv := SingularValues(x, rows, cols)
		if sv[0] < 0.68 || sv[len(sv)-1] > 1.21 {
			t.Errorf("%dx%d: singular values span [%.4f, %.4f], want inside [0.68, 1.21]", rows, cols, sv[0], sv[len(sv)-1])
		}
		// Scaling the input changes nothing (NS starts by normalising).
		g2 := AddScaled(g, g, 7, 0)
		x2 := NewtonSchulz(g2, rows, cols, 5)
		for i := range x {
			if math.Abs(x2[i]-x[i]) > 1e-7 { // only the 1e-7 epsilon differs
				t.Fatalf("%dx%d: NS(7 g) differs from NS(g) at %d: %v vs %v", rows, cols, i, x2[i], x[i])
			}
		}
	}
}

func TestCastAndCopies(t *testing.T) {
	x := []float64{1.5, -2.7, 3e9, math.NaN(), 1 + 1.0/512}
	c := Cast(x, engine.I32)
	for i, want := range []float64{1, -2, math.MaxInt32, 0, 1} {
		if c[i] != want {
			t.Errorf("cast to i32 [%d] = %v, want %v", i, c[i], want)
		}
	}
	if b := Cast(x[4:], engine.BF16); b[0] != 1 {
		t.Errorf("1+2^-9 to bf16 = %v, want 1 (ties to even)", b[0])
	}
	s := SwapAxes12([]float64{0, 1, 2, 3, 4, 5}, 1, 2, 3, 1)
	for i, want := range []float64{0, 3, 1, 4, 2, 5} {
		if s[i] != want {
			t.Fatalf("swapaxes12 = %v", s)
		}
	}
	kv := KVAppend(make([]float64, 8), []float64{7, 8}, 2, 1, 4, 1, 1, 2)
	for i, want := range []float64{0, 0, 7, 0, 0, 0, 8, 0} {
		if kv[i] != want {
			t.Fatalf("kv append = %v", kv)
		}
	}
}
