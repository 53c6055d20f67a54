package train

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/cpu"
	"github.com/parallax-engine/parallax/engine/enginetest"
	"github.com/parallax-engine/parallax/model"
)

// randVals draws n normal values times scale, read reads a tensor back.
var (
	randVals = enginetest.Normal32
	read     = enginetest.MustFloat32s
)

func to64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

func newParam(t *testing.T, dev engine.Device, name string, kind model.ParamKind, w []float32, shape ...int) *model.Param {
	t.Helper()
	wt := enginetest.MustFromFloat32(t, dev, engine.F32, w, shape...)
	g := enginetest.MustAlloc(t, dev, engine.F32, shape...)
	return &model.Param{Name: name, W: wt, G: g, Kind: kind}
}

// paramSpec is a parameter of an optimizer test: its name, kind and shape.
type paramSpec struct {
	name  string
	kind  model.ParamKind
	shape []int
}

// newParams makes one parameter of each spec on dev, spec i holding init[i].
func newParams(t *testing.T, dev engine.Device, specs []paramSpec, init [][]float32) []*model.Param {
	t.Helper()
	var ps []*model.Param
	for i, s := range specs {
		ps = append(ps, newParam(t, dev, s.name, s.kind, init[i], s.shape...))
	}
	return ps
}

// maxRelErr is max|got - want| / max|scale|.
func maxRelErr(got []float32, want, scale []float64) float64 {
	num, den := 0.0, 0.0
	for i := range want {
		num = math.Max(num, math.Abs(float64(got[i])-want[i]))
		den = math.Max(den, math.Abs(scale[i]))
	}
	return num / den
}

// adamRef is PyTorch's AdamW in float64: decoupled decay, then the
// bias-corrected moment update.
func adamRef(p, m, v, g []float64, lr, b1, b2, eps, wd float64, t int) {
	for i := range p {
		p[i] -= lr * wd * p[i]
		m[i] = b1*m[i] + (1-b1)*g[i]
		v[i] = b2*v[i] + (1-b2)*g[i]*g[i]
		mh := m[i] / (1 - math.Pow(b1, float64(t)))
		vh := v[i] / (1 - math.Pow(b2, float64(t)))
		p[i] -= lr * mh / (math.Sqrt(vh) + eps)
	}
}

func TestAdamWMatchesReference(t *testing.T) {
	dev := cpu.New()
	rng := rand.New(rand.NewPCG(1, 2))
	const rows, cols = 7, 5
	w0 := randVals(rng, rows*cols, 1)
	emb := newParam(t, dev, "emb", model.Embedding, w0, rows, cols)
	gain := newParam(t, dev, "gain", model.Gain, w0[:cols], cols)
	mat := newParam(t, dev, "mat", model.Matrix, w0, rows, cols)
	cfg := DefaultOptimConfig(OptAdamW)
	cfg.AdamW.LR = 0.01
	cfg.AdamW.WeightDecay, cfg.AdamW.EmbedWeightDecay, cfg.AdamW.GainWeightDecay = 0.1, 0.05, 0.02
	opt, err := NewOptimizer(dev, []*model.Param{emb, gain, mat}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	type ref struct {
		p       *model.Param
		w, m, v []float64
		wd      float64
	}
	refs := []*ref{
		{p: emb, w: to64(w0), wd: 0.05},
		{p: gain, w: to64(w0[:cols]), wd: 0.02},
		{p: mat, w: to64(w0), wd: 0.1},
	}
	for _, r := range refs {
		r.m, r.v = make([]float64, len(r.w)), make([]float64, len(r.w))
	}
	factors := []float64{1, 0.5, 1, 0.25, 0.8} // a schedule's multipliers
	for step, fac := range factors {
		for _, r := range refs {
			g := randVals(rng, len(r.w), 0.1)
			if err := engine.WriteFloat32(r.p.G, g); err != nil {
				t.Fatal(err)
			}
			adamRef(r.w, r.m, r.v, to64(g), 0.01*fac, 0.9, 0.95, 1e-8, r.wd, step+1)
		}
		if err := opt.Step(fac); err != nil {
			t.Fatal(err)
		}
		for _, r := range refs {
			if e := maxRelErr(read(t, r.p.W), r.w, r.w); e > 1e-6 {
				t.Errorf("step %d %s: weights differ from the float64 reference by %.2e (relative)", step+1, r.p.Name, e)
			}
			st := opt.State()
			if e := maxRelErr(read(t, st[r.p.Name+".exp_avg"]), r.m, r.m); e > 1e-5 {
				t.Errorf("step %d %s: first moment off by %.2e", step+1, r.p.Name, e)
			}
			if e := maxRelErr(read(t, st[r.p.Name+".exp_avg_sq"]), r.v, r.v); e > 1e-5 {
				t.Errorf("step %d %s: second moment off by %.2e", step+1, r.p.Name, e)
			}
		}
	}
	if opt.Steps() != len(factors) {
		t.Errorf("Steps() = %d", opt.Steps())
	}
}

// matmul64 returns A (n x k) times B (k x m).
func matmul64(a, b []float64, n, k, m int) []float64 {
	out := make([]float64, n*m)
	for i := range n {
		for p := range k {
			x := a[i*k+p]
			for j := range m {
				out[i*m+j] += x * b[p*m+j]
			}
		}
	}
	return out
}

func transpose64(a []float64, n, m int) []float64 {
	out := make([]float64, n*m)
	for i := range n {
		for j := range m {
			out[j*n+i] = a[i*m+j]
		}
	}
	return out
}

// ns5Ref is the reference Newton-Schulz quintic in float64.
func ns5Ref(g []float64, rows, cols, steps int) []float64 {
	x := append([]float64(nil), g...)
	n, m := rows, cols
	if rows > cols {
		x, n, m = transpose64(x, rows, cols), cols, rows
	}
	fro := 0.0
	for _, v := range x {
		fro += v * v
	}
	fro = math.Sqrt(fro) + 1e-7
	for i := range x {
		x[i] /= fro
	}
	const a, b, c = 3.4445, -4.7750, 2.0315
	for range steps {
		A := matmul64(x, transpose64(x, n, m), n, m, n)
		AA := matmul64(A, A, n, n, n)
		B := make([]float64, n*n)
		for i := range B {
			B[i] = b*A[i] + c*AA[i]
		}
		BX := matmul64(B, x, n, n, m)
		for i := range x {
			x[i] = a*x[i] + BX[i]
		}
	}
	if rows > cols {
		x = transpose64(x, n, m)
	}
	return x
}

func TestMuonMatchesReference(t *testing.T) {
	for _, tc := range []struct {
		name       string
		rows, cols int
		scaling    string
		nesterov   bool
		wantScale  float64
	}{
		{"wide keller", 16, 48, ScaleKeller, true, 1},
		{"tall keller", 48, 16, ScaleKeller, true, math.Sqrt(3)},
		{"tall moonlight", 48, 16, ScaleMoonlight, true, 0.2 * math.Sqrt(48)},
		{"wide moonlight", 16, 40, ScaleMoonlight, true, 0.2 * math.Sqrt(40)},
		{"square no nesterov", 24, 24, ScaleKeller, false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if s := MuonScale(tc.scaling, tc.rows, tc.cols); math.Abs(s-tc.wantScale) > 1e-12 {
				t.Fatalf("MuonScale = %v, want %v", s, tc.wantScale)
			}
			dev := cpu.New()
			rng := rand.New(rand.NewPCG(3, uint64(tc.rows)))
			n := tc.rows * tc.cols
			w0 := randVals(rng, n, 0.05)
			p := newParam(t, dev, "m", model.Matrix, w0, tc.rows, tc.cols)
			cfg := DefaultOptimConfig(OptMuon)
			cfg.Muon.Scaling, cfg.Muon.Nesterov = tc.scaling, tc.nesterov
			cfg.Muon.LR, cfg.Muon.WeightDecay = 0.02, 0.1
			opt, err := NewOptimizer(dev, []*model.Param{p}, cfg)
			if err != nil {
				t.Fatal(err)
			}
			w, mom := to64(w0), make([]float64, n)
			const beta = 0.95
			for step, fac := range []float64{1, 0.5, 1} {
				g := randVals(rng, n, 1)
				engine.WriteFloat32(p.G, g)
				u := make([]float64, n)
				for i := range mom {
					mom[i] = beta*mom[i] + (1-beta)*float64(g[i])
					u[i] = mom[i]
					if tc.nesterov {
						u[i] = (1-beta)*float64(g[i]) + beta*mom[i]
					}
				}
				o := ns5Ref(u, tc.rows, tc.cols, 5)
				lr := 0.02 * fac
				before := append([]float64(nil), w...)
				for i := range w {
					w[i] = w[i]*(1-lr*0.1) - lr*tc.wantScale*o[i]
				}
				if err := opt.Step(fac); err != nil {
					t.Fatal(err)
				}
				got := read(t, p.W)
				upd := make([]float64, n)
				for i := range upd {
					upd[i] = w[i] - before[i]
				}
				// Compare the update (not the weights, which hide its error).
				gotUpd := make([]float32, n)
				for i := range gotUpd {
					gotUpd[i] = float32(float64(got[i]) - before[i])
				}
				if e := maxRelErr(gotUpd, upd, upd); e > 2e-4 {
					t.Errorf("step %d: update differs from the float64 reference by %.2e (relative)", step+1, e)
				}
				if e := maxRelErr(read(t, opt.State()["m.momentum"]), mom, mom); e > 1e-6 {
					t.Errorf("step %d: momentum off by %.2e", step+1, e)
				}
				w = to64(got) // continue from the device's weights
			}
		})
	}
}

// symEigen returns the eigenvalues of a symmetric n x n matrix (Jacobi).
func symEigen(a []float64, n int) []float64 {
	a = append([]float64(nil), a...)
	for sweep := 0; sweep < 100; sweep++ {
		off := 0.0
		for i := range n {
			for j := i + 1; j < n; j++ {
				off += a[i*n+j] * a[i*n+j]
			}
		}
		if off < 1e-22 {
			break
		}
		for p := range n {
			for q := p + 1; q < n; q++ {
				if math.Abs(a[p*n+q]) < 1e-300 {
					continue
				}
				theta := (a[q*n+q] - a[p*n+p]) / (2 * a[p*n+q])
				tt := math.Copysign(1, theta) / (math.Abs(theta) + math.Sqrt(theta*theta+1))
				c := 1 / math.Sqrt(tt*tt+1)
				s := tt * c
				for k := range n {
					akp, akq := a[k*n+p], a[k*n+q]
					a[k*n+p], a[k*n+q] = c*akp-s*akq, s*akp+c*akq
				}
				for k := range n {
					apk, aqk := a[p*n+k], a[q*n+k]
					a[p*n+k], a[q*n+k] = c*apk-s*aqk, s*apk+c*aqk
				}
			}
		}
	}
	ev := make([]float64, n)
	for i := range n {
		ev[i] = a[i*n+i]
	}
	return ev
}

// TestNewtonSchulzSingularValues checks the property the spec states: five
// quintic steps map a random matrix's singular values into [0.68, 1.21].
func TestNewtonSchulzSingularValues(t *testing.T) {
	dev := cpu.New()
	rng := rand.New(rand.NewPCG(5, 6))
	const rows, cols = 32, 96
	g, _ := engine.FromFloat32(dev, engine.F32, randVals(rng, rows*cols, 1), rows, cols)
	o, _ := dev.Alloc(engine.F32, rows, cols)
	if err := engine.NewtonSchulz(dev, o, g, 5); err != nil {
		t.Fatal(err)
	}
	x := to64(read(t, o))
	gram := matmul64(x, transpose64(x, rows, cols), rows, cols, rows)
	for _, ev := range symEigen(gram, rows) {
		s := math.Sqrt(math.Max(ev, 0))
		if s < 0.68 || s > 1.21 {
			t.Errorf("singular value %.4f outside [0.68, 1.21]", s)
		}
	}
}

// frobRel is ||got - want||_F / ||want||_F.
func frobRel(got, want []float32) float64 {
	num, den := 0.0, 0.0
	for i := range want {
		d := float64(got[i]) - float64(want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	return math.Sqrt(num / den)
}

// singularValues returns the singular values of the rows x cols matrix x.
func singularValues(x []float32, rows, cols int) []float64 {
	v := to64(x)
	gram := matmul64(v, transpose64(v, rows, cols), rows, cols, rows)
	n := rows
	if rows > cols {
		gram, n = matmul64(transpose64(v, rows, cols), v, cols, rows, cols), cols
	}
	var out []float64
	for _, ev := range symEigen(gram, n) {
		out = append(out, math.Sqrt(math.Max(ev, 0)))
	}
	return out
}

// TestNewtonSchulzBF16 checks Newton-Schulz iterated in bf16 (the reference
// Muon's precision) against the same iteration in f32, from the same f32
// input.
//
// The bound: bf16 keeps 8 significant bits, so each stored result carries
// a rounding error of at most u = 2^-8 relative (about u/2 rms, independent
// from element to element). A step stores five results: A = X X^T, AA,
// B = b A + c AA, Y = B X and X' = a X + Y. Once the singular values are
// near 1 (the last two or three of five steps), X' = 0.70 X comes out of a
// cancellation, a X = 3.44 X against Y = -2.74 X, so the roundings of Y and
// B count about 2.74 / 0.70 = 3.9 times, AA's (c AA = 2.03 X) 2.9 times,
// A's once (b + 2c = -0.71) and X's once: sqrt(1 + 3.9^2 + 3.9^2 + 2.9^2 + 1)
// = 6.4 u/2, about 1.2e-2 per step in the Frobenius norm; the steps before
// add little, and the iteration carries a relative error on unchanged
// (sigma phi'(sigma) / phi(sigma) is about 1 in magnitude at both ends).
// Three such steps add up, independently, to sqrt(3) 1.2e-2 = 2e-2, which
// is what these matrices measure (1.9-2.3e-2; the worst of 160 random
// matrices from 16x256 to 128x512 was 2.7e-2). 3e-2 bounds the relative
// Frobenius error; the largest elementwise error, relative to the largest
// element, runs higher (3.2-4.0e-2 here, at most 5.0e-2 over the 160) and
// is bounded by 6e-2. The singular values must still lie in [0.68, 1.21] up
// to the slack the conformance suite allows bf16 (0.03).
func TestNewtonSchulzBF16(t *testing.T) {
	dev := cpu.New()
	rng := rand.New(rand.NewPCG(11, 12))
	for _, s := range [][2]int{{32, 96}, {96, 32}, {64, 64}, {48, 80}} {
		rows, cols := s[0], s[1]
		g, err := engine.FromFloat32(dev, engine.F32, randVals(rng, rows*cols, 1), rows, cols)
		if err != nil {
			t.Fatal(err)
		}
		o32, _ := dev.Alloc(engine.F32, rows, cols)
		o16, _ := dev.Alloc(engine.BF16, rows, cols)
		if err := engine.NewtonSchulz(dev, o32, g, 5); err != nil {
			t.Fatal(err)
		}
		if err := engine.NewtonSchulz(dev, o16, g, 5); err != nil {
			t.Fatal(err)
		}
		want, got := read(t, o32), read(t, o16)
		fro := frobRel(got, want)
		worst := maxRelErr(got, to64(want), to64(want))
		t.Logf("%dx%d: bf16 vs f32 relative error %.2e (Frobenius), %.2e (largest element)", rows, cols, fro, worst)
		if fro > 3e-2 || worst > 6e-2 {
			t.Errorf("%dx%d: bf16 Newton-Schulz differs from f32 by %.2e (Frobenius, want <= 3e-2), %.2e (largest element, want <= 6e-2)", rows, cols, fro, worst)
		}
		for _, sv := range singularValues(got, rows, cols) {
			if sv < 0.68-0.03 || sv > 1.21+0.03 {
				t.Errorf("%dx%d: bf16 singular value %.4f outside [0.65, 1.24]", rows, cols, sv)
			}
		}
	}
}

// TestNewtonSchulzBatchedEqualsSingle checks that a [n, rows, cols] stack
// is orthogonalised exactly as its matrices one at a time, in f32 and in
// bf16, in place through a workspace as the optimizer runs it, and with
// matrices large enough (49,152 elements) that the CPU splits each norm
// over two workers.
func TestNewtonSchulzBatchedEqualsSingle(t *testing.T) {
	t.Setenv("PARALLAX_CPU_THREADS", "2")
	dev := cpu.New()
	rng := rand.New(rand.NewPCG(13, 14))
	for _, dt := range []engine.DType{engine.F32, engine.BF16} {
		for _, s := range [][3]int{{5, 24, 40}, {4, 40, 24}, {3, 192, 256}} {
			n, rows, cols := s[0], s[1], s[2]
			per := rows * cols
			vals := randVals(rng, n*per, 1)
			for i := range per {
				vals[i] *= 100 // matrices of different norms
			}
			stack, err := engine.FromFloat32(dev, dt, vals, n, rows, cols)
			if err != nil {
				t.Fatal(err)
			}
			w, err := engine.NewNSWorkspace(dev, dt, n, rows, cols)
			if err != nil {
				t.Fatal(err)
			}
			if err := w.NewtonSchulz(stack, stack, 5); err != nil {
				t.Fatal(err)
			}
			got := read(t, stack)
			for i := range n {
				g, _ := engine.FromFloat32(dev, dt, vals[i*per:(i+1)*per], rows, cols)
				o, _ := dev.Alloc(dt, rows, cols)
				if err := engine.NewtonSchulz(dev, o, g, 5); err != nil {
					t.Fatal(err)
				}
				for j, v := range read(t, o) {
					if got[i*per+j] != v {
						t.Fatalf("%v %dx[%d,%d]: matrix %d element %d: batched %v, alone %v", dt, n, rows, cols, i, j, got[i*per+j], v)
					}
				}
			}
			w.Free()
		}
	}
	w, _ := engine.NewNSWorkspace(dev, engine.F32, 2, 4, 4)
	g, _ := dev.Alloc(engine.F32, 4, 4)
	if err := w.NewtonSchulz(g, g, 5); err == nil {
		t.Error("a workspace for [2,4,4] accepted a [4,4] input")
	}
	if _, err := engine.NewNSWorkspace(dev, engine.F32, 4); err == nil {
		t.Error("a workspace for a vector was made")
	}
}

// muonTestParams builds same-shape groups (three layers of q and o [16,16],
// six matrices; k [8,16], up [32,16], down [16,32], three each), a lone
// [24,16] matrix and an AdamW gain, all from one seed.
func muonTestParams(t *testing.T, dev engine.Device) []*model.Param {
	rng := rand.New(rand.NewPCG(21, 22))
	var ps []*model.Param
	add := func(name string, kind model.ParamKind, shape ...int) {
		ps = append(ps, newParam(t, dev, name, kind, randVals(rng, engine.Shape(shape).Numel(), 0.05), shape...))
	}
	for l := range 3 {
		for _, m := range []struct {
			name       string
			rows, cols int
		}{{"q", 16, 16}, {"k", 8, 16}, {"o", 16, 16}, {"up", 32, 16}, {"down", 16, 32}} {
			add(fmt.Sprintf("layers.%d.%s_proj.weight", l, m.name), model.Matrix, m.rows, m.cols)
		}
	}
	add("lone", model.Matrix, 24, 16)
	add("norm", model.Gain, 16)
	return ps
}

// runMuon makes an optimizer over muonTestParams with the given Newton-Schulz
// settings, applies three steps of seeded gradients and returns the weights
// and momenta.
func runMuon(t *testing.T, nsDType string, nsBatch int, computeDT engine.DType) (w, m [][]float32, opt *Optimizer) {
	t.Helper()
	dev := cpu.New()
	ps := muonTestParams(t, dev)
	cfg := DefaultOptimConfig(OptMuon)
	cfg.Muon.NSDType, cfg.Muon.NSBatch = nsDType, nsBatch
	opt, err := NewOptimizer(dev, ps, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if computeDT != 0 {
		opt.SetComputeDType(computeDT)
	}
	rng := rand.New(rand.NewPCG(23, 24))
	for _, fac := range []float64{1, 0.5, 1} {
		for _, p := range ps {
			if err := engine.WriteFloat32(p.G, randVals(rng, p.G.Numel(), 1)); err != nil {
				t.Fatal(err)
			}
		}
		if err := opt.Step(fac); err != nil {
			t.Fatal(err)
		}
	}
	st := opt.State()
	for _, p := range ps {
		w = append(w, read(t, p.W))
		if mt, ok := st[p.Name+".momentum"]; ok {
			m = append(m, read(t, mt))
		}
	}
	return w, m, opt
}

// TestMuonGroupedEqualsUngrouped checks that batching same-shape matrices
// (the default: five shape groups; and batches of at most two, which leave
// a stale slot in the last batch of each group of three) changes no bit of
// three Muon steps against orthogonalising every matrix on its own, in f32
// and in bf16.
func TestMuonGroupedEqualsUngrouped(t *testing.T) {
	for _, dt := range []string{NSF32, NSBF16} {
		wantW, wantM, alone := runMuon(t, dt, 1, 0)
		if len(alone.nsBatches) != 16 {
			t.Errorf("%s, ns_batch 1: %d Newton-Schulz batches, want 16", dt, len(alone.nsBatches))
		}
		for _, tc := range []struct {
			batch, calls int
		}{{0, 5}, {2, 10}} {
			w, m, opt := runMuon(t, dt, tc.batch, 0)
			if len(opt.nsBatches) != tc.calls {
				t.Errorf("%s, ns_batch %d: %d Newton-Schulz batches, want %d", dt, tc.batch, len(opt.nsBatches), tc.calls)
			}
			for i := range wantW {
				for j := range wantW[i] {
					if w[i][j] != wantW[i][j] {
						t.Fatalf("%s, ns_batch %d: parameter %d element %d: %v grouped, %v alone", dt, tc.batch, i, j, w[i][j], wantW[i][j])
					}
				}
			}
			for i := range wantM {
				for j := range wantM[i] {
					if m[i][j] != wantM[i][j] {
						t.Fatalf("%s, ns_batch %d: momentum %d element %d differs", dt, tc.batch, i, j)
					}
				}
			}
			opt.Free()
		}
	}
}

// TestMuonBF16Step checks the Newton-Schulz dtype choice, and that three
// bf16 steps (auto under a bf16 model, MuonApply reading a bf16 direction)
// stay within TestNewtonSchulzBF16's bound of three f32 steps, the update
// of every matrix relative to its f32 counterpart, with the f32 momentum
// untouched.
func TestMuonBF16Step(t *testing.T) {
	dev := cpu.New()
	for _, tc := range []struct {
		cfg     string
		compute engine.DType
		want    engine.DType
	}{
		{NSAuto, 0, engine.F32}, {"", engine.BF16, engine.BF16}, {NSAuto, engine.BF16, engine.BF16},
		{NSAuto, engine.F16, engine.F32}, {NSAuto, engine.F32, engine.F32},
		{NSF32, engine.BF16, engine.F32}, {NSBF16, 0, engine.BF16},
	} {
		cfg := DefaultOptimConfig(OptMuon)
		cfg.Muon.NSDType = tc.cfg
		opt, err := NewOptimizer(dev, muonTestParams(t, dev), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if tc.compute != 0 {
			opt.SetComputeDType(tc.compute)
		}
		if got := opt.NSDType(); got != tc.want {
			t.Errorf("ns_dtype %q, compute %v: Newton-Schulz in %v, want %v", tc.cfg, tc.compute, got, tc.want)
		}
	}
	init := muonTestParams(t, dev)
	w32, m32, _ := runMuon(t, NSAuto, 0, engine.F32)
	w16, m16, opt := runMuon(t, NSAuto, 0, engine.BF16)
	if !strings.Contains(opt.Groups(), "newton-schulz bf16") {
		t.Errorf("groups: %s", opt.Groups())
	}
	for _, sh := range opt.nsShapes {
		if x := sh.stack.X(); x.DType() != engine.BF16 {
			t.Errorf("Newton-Schulz stack %v under a bf16 model", x)
		}
	}
	for i, p := range init {
		w0 := read(t, p.W)
		u32, u16 := make([]float32, len(w0)), make([]float32, len(w0))
		for j := range w0 {
			u32[j], u16[j] = w32[i][j]-w0[j], w16[i][j]-w0[j]
		}
		if e := frobRel(u16, u32); e > 3e-2 {
			t.Errorf("%s: the bf16 run's total update differs from the f32 run's by %.2e (Frobenius)", p.Name, e)
		} else if p.Kind == model.Matrix && e < 1e-4 {
			t.Errorf("%s: the bf16 run's update equals the f32 run's (%.2e): not in bf16?", p.Name, e)
		}
	}
	// The momentum stays f32 and never sees the orthogonalised direction.
	for i := range m32 {
		for j := range m32[i] {
			if m16[i][j] != m32[i][j] {
				t.Fatalf("momentum %d element %d: %v in the bf16 run, %v in the f32 one", i, j, m16[i][j], m32[i][j])
			}
		}
	}
	// Changing the dtype after a step rebuilds the scratch in the new one.
	opt.SetComputeDType(engine.F32)
	if opt.nsReady || len(opt.nsShapes) != 0 {
		t.Error("the bf16 scratch survived a change to f32")
	}
	if err := opt.Step(1); err != nil {
		t.Fatal(err)
	}
	for _, sh := range opt.nsShapes {
		if x := sh.stack.X(); x.DType() != engine.F32 {
			t.Errorf("Newton-Schulz stack %v after switching to f32", x)
		}
	}
}

func TestParameterGroups(t *testing.T) {
	dev := cpu.New()
	cfg, err := model.PresetConfig("tiny")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Vocab, cfg.Layers, cfg.TiedEmbeddings = 64, 2, false
	m, err := model.New(dev, cfg, model.Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.AllocGrads(); err != nil {
		t.Fatal(err)
	}
	opt, err := NewOptimizer(dev, m.Params(), DefaultOptimConfig(OptMuon))
	if err != nil {
		t.Fatal(err)
	}
	st := opt.State()
	for _, p := range m.Params() {
		_, muon := st[p.Name+".momentum"]
		_, adam := st[p.Name+".exp_avg"]
		isHidden := strings.Contains(p.Name, "_proj.") && p.W.Rank() == 2
		if muon != isHidden || adam == isHidden {
			t.Errorf("%s (%v): muon %v adamw %v", p.Name, p.Kind, muon, adam)
		}
	}
	// q, k, v, r, o, gate, up, down per layer, each its own matrix.
	if got := strings.Count(opt.Groups(), "muon: 16 matrices"); got != 1 {
		t.Errorf("groups: %s", opt.Groups())
	}
	opt2, _ := NewOptimizer(dev, m.Params(), DefaultOptimConfig(OptAdamW))
	for n := range opt2.State() {
		if strings.HasSuffix(n, ".momentum") {
			t.Errorf("adamw-only optimizer has Muon state %s", n)
		}
	}
	if len(opt2.State()) != 2*len(m.Params()) {
		t.Errorf("adamw-only optimizer has %d state tensors for %d parameters", len(opt2.State()), len(m.Params()))
	}
}

func TestOptimConfigValidate(t *testing.T) {
	bad := []func(*OptimConfig){
		func(c *OptimConfig) { c.Name = "sgd" },
		func(c *OptimConfig) { c.Muon.Scaling = "other" },
		func(c *OptimConfig) { c.Muon.Momentum = 1 },
		func(c *OptimConfig) { c.AdamW.Beta2 = 1 },
		func(c *OptimConfig) { c.AdamW.LR = math.NaN() },
		func(c *OptimConfig) { c.Muon.NSSteps = 0 },
		func(c *OptimConfig) { c.Muon.NSDType = "f16" },
		func(c *OptimConfig) { c.Muon.NSBatch = -1 },
	}
	for i, f := range bad {
		c := DefaultOptimConfig(OptMuon)
		f(&c)
		if c.Validate() == nil {
			t.Errorf("bad config %d accepted", i)
		}
	}
	c := DefaultOptimConfig(OptMuon)
	c.Muon.Scaling, c.Muon.LR = ScaleMoonlight, 0
	if got := c.resolved().Muon.LR; got != c.AdamW.LR {
		t.Errorf("moonlight scaling without a Muon lr: lr %v, want AdamW's %v", got, c.AdamW.LR)
	}
}

func TestSchedules(t *testing.T) {
	const eps = 1e-12
	wsd := Schedule{Kind: SchedWSD, Total: 100, Warmup: 10, DecayFrac: 0.2, MinRatio: 0.1}
	for _, c := range []struct {
		step int
		want float64
	}{{0, 0.1}, {4, 0.5}, {9, 1}, {10, 1}, {79, 1}, {80, 1 - 0.9/20}, {89, 1 - 0.9*10/20}, {99, 0.1}, {150, 0.1}} {
		if got := wsd.Factor(c.step); math.Abs(got-c.want) > eps {
			t.Errorf("wsd step %d: %v, want %v", c.step, got, c.want)
		}
	}
	cos := Schedule{Kind: SchedCosine, Total: 110, Warmup: 10, MinRatio: 0.1}
	for _, c := range []struct {
		step int
		want float64
	}{{0, 0.1}, {9, 1}, {10, 1}, {109, 0.1}, {200, 0.1}} {
		if got := cos.Factor(c.step); math.Abs(got-c.want) > eps {
			t.Errorf("cosine step %d: %v, want %v", c.step, got, c.want)
		}
	}
	mid := 10 + 99.0/2
	if got := cos.Factor(int(mid)); math.Abs(got-(0.1+0.9*0.5*(1+math.Cos(math.Pi*float64(int(mid)-10)/99)))) > eps {
		t.Errorf("cosine midpoint: %v", got)
	}
	prev := 2.0
	for s := 10; s < 110; s++ {
		f := cos.Factor(s)
		if f > prev+eps {
			t.Fatalf("cosine rises at step %d", s)
		}
		prev = f
	}
	if c := (Schedule{Kind: SchedConstant, Total: 5, Warmup: 0}); c.Factor(3) != 1 {
		t.Error("constant schedule is not 1")
	}
	if (Schedule{Kind: "linear", Total: 5}).Validate() == nil {
		t.Error("unknown schedule accepted")
	}
	if d := DefaultSchedule(1000); d.Validate() != nil || d.Warmup != 50 {
		t.Errorf("default schedule %+v", d)
	}
}

func TestGradNormAndClip(t *testing.T) {
	dev := cpu.New()
	rng := rand.New(rand.NewPCG(9, 9))
	var ps []*model.Param
	want := 0.0
	for i, n := range []int{10, 33, 7} {
		p := newParam(t, dev, "p"+string(rune('a'+i)), model.Gain, make([]float32, n), n)
		g := randVals(rng, n, 2)
		engine.WriteFloat32(p.G, g)
		for _, x := range g {
			want += float64(x) * float64(x)
		}
		ps = append(ps, p)
	}
	want = math.Sqrt(want)
	acc, _ := dev.Alloc(engine.F32, 1)
	got, err := GradNorm(dev, ps, acc)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(got-want) > 1e-5*want {
		t.Fatalf("grad norm %v, want %v", got, want)
	}
	f := ClipFactor(got, 1)
	if err := ScaleGrads(dev, ps, f); err != nil {
		t.Fatal(err)
	}
	after, _ := GradNorm(dev, ps, acc)
	if math.Abs(after-1) > 1e-5 {
		t.Errorf("norm after clipping to 1: %v", after)
	}
	if ClipFactor(0.5, 1) != 1 || ClipFactor(5, 0) != 1 {
		t.Error("clip factor must be 1 below the threshold or when disabled")
	}
}

func TestStableRank(t *testing.T) {
	// diag(3, 1, 1) padded: ||W||_F^2 = 11, ||W||_2^2 = 9.
	w := []float32{3, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0}
	if got := StableRank(w, 3, 4); math.Abs(got-11.0/9) > 1e-9 {
		t.Errorf("stable rank %v, want %v", got, 11.0/9)
	}
	// Circuit A^T B with explicit formation as the reference.
	rng := rand.New(rand.NewPCG(4, 4))
	const dh, d = 4, 12
	a, b := randVals(rng, dh*d, 1), randVals(rng, dh*d, 1)
	m := matmul64(transpose64(to64(a), dh, d), to64(b), d, dh, d)
	mf := make([]float32, len(m))
	for i := range m {
		mf[i] = float32(m[i])
	}
	want := StableRank(mf, d, d)
	if got := CircuitStableRank(a, b, dh, d); math.Abs(got-want) > 1e-4*want {
		t.Errorf("circuit stable rank %v, want %v", got, want)
	}
	if StableRank(make([]float32, 6), 2, 3) != 0 {
		t.Error("zero matrix")
	}
}

// TestStepScaledEqualsScaleThenStep checks that StepScaled, which folds the
// clip factor into AdamW's update and Muon's momentum, gives bit for bit
// the parameters and state of ScaleGrads followed by Step, and leaves the
// gradients as they were.
func TestStepScaledEqualsScaleThenStep(t *testing.T) {
	specs := []paramSpec{
		{"embed", model.Embedding, []int{40, 16}},
		{"q", model.Matrix, []int{16, 16}},
		{"k", model.Matrix, []int{8, 16}},
		{"up", model.Matrix, []int{32, 16}},
		{"norm", model.Gain, []int{16}},
	}
	for _, tc := range []struct {
		optim string
		scale float64
	}{{OptMuon, 0.37}, {OptMuon, 1}, {OptAdamW, 0.61}} {
		t.Run(fmt.Sprintf("%s-scale%g", tc.optim, tc.scale), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(5, 6))
			var init, grads [][]float32
			for _, s := range specs {
				n := engine.Shape(s.shape).Numel()
				init, grads = append(init, randVals(rng, n, 0.1)), append(grads, randVals(rng, n, 1))
			}
			// run applies two steps, folded or not, and returns the parameters,
			// the optimizer state and the gradients afterwards.
			run := func(folded bool) (ws, state map[string][]float32, gs [][]float32) {
				dev := cpu.New()
				ps := newParams(t, dev, specs, init)
				o, err := NewOptimizer(dev, ps, DefaultOptimConfig(tc.optim))
				if err != nil {
					t.Fatal(err)
				}
				defer o.Free()
				for range 2 {
					for i, p := range ps {
						if err := engine.WriteFloat32(p.G, grads[i]); err != nil {
							t.Fatal(err)
						}
					}
					if folded {
						err = o.StepScaled(0.5, tc.scale)
					} else if err = ScaleGrads(dev, ps, tc.scale); err == nil {
						err = o.Step(0.5)
					}
					if err != nil {
						t.Fatal(err)
					}
				}
				ws, state = map[string][]float32{}, map[string][]float32{}
				for _, p := range ps {
					ws[p.Name] = read(t, p.W)
					gs = append(gs, read(t, p.G))
				}
				for n, s := range o.State() {
					state[n] = read(t, s)
				}
				return ws, state, gs
			}
			wantW, wantS, _ := run(false)
			gotW, gotS, gotG := run(true)
			same := func(what string, got, want map[string][]float32) {
				for n, w := range want {
					for j := range w {
						if math.Float32bits(got[n][j]) != math.Float32bits(w[j]) {
							t.Errorf("%s %s[%d]: %v folded, %v scaled first", what, n, j, got[n][j], w[j])
							break
						}
					}
				}
			}
			same("weights", gotW, wantW)
			same("state", gotS, wantS)
			for i, g := range gotG {
				for j := range g {
					if g[j] != grads[i][j] {
						t.Errorf("gradient of %s changed by the step", specs[i].name)
						break
					}
				}
			}
		})
	}
}
