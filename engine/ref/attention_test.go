package ref

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

func attnRandn(rng *rand.Rand, n int, scale float64) []float64 {
	x := make([]float64, n)
	for i := range x {
		x[i] = rng.NormFloat64() * scale
	}
	return x
}

func attnRelErr(got, want []float64) float64 {
	var num, den float64
	for i := range got {
		if math.IsNaN(got[i]) {
			return math.Inf(1)
		}
		num = max(num, math.Abs(got[i]-want[i]))
		den = max(den, math.Abs(want[i]))
	}
	if den == 0 {
		return num
	}
	return num / den
}

func attnName(d Dims) string {
	s := fmt.Sprintf("B%d Hq%d Hkv%d Lq%d Lk%d D%d", d.B, d.Hq, d.Hkv, d.Lq, d.Lk, d.D)
	if d.Causal {
		s += " causal"
	}
	if d.Window > 0 {
		s += fmt.Sprintf(" w%d", d.Window)
	}
	return s
}

func attnTestDims(b, hq, hkv, lq, lk, dd int, causal bool, w int) Dims {
	return Dims{B: b, Hq: hq, Hkv: hkv, Lq: lq, Lk: lk, D: dd, Scale: 1 / math.Sqrt(float64(dd)), Causal: causal, Window: w}
}

// attnShapes covers causal (square, with a cache offset, decode), windows, GQA
// and the non-causal case.
var attnShapes = []Dims{
	attnTestDims(1, 1, 1, 5, 5, 4, true, 0),
	attnTestDims(2, 4, 2, 4, 7, 3, true, 0),
	attnTestDims(1, 2, 1, 6, 6, 4, true, 3),
	attnTestDims(1, 3, 3, 1, 6, 4, true, 0),
	attnTestDims(2, 2, 1, 3, 5, 3, false, 0),
}

type attnInputs struct{ q, k, v, r, dO []float64 }

func newAttnInputs(rng *rand.Rand, d Dims) attnInputs {
	nq, nk := d.B*d.Hq*d.Lq*d.D, d.B*d.Hkv*d.Lk*d.D
	return attnInputs{
		q: attnRandn(rng, nq, 1), k: attnRandn(rng, nk, 1), v: attnRandn(rng, nk, 1),
		r: attnRandn(rng, nq, 1/math.Sqrt(float64(d.D))), dO: attnRandn(rng, nq, 1),
	}
}

// attnFDCheck compares an analytic gradient with central finite differences of
// loss at every coordinate of x.
func attnFDCheck(t *testing.T, name string, loss func() float64, x, grad []float64) {
	t.Helper()
	const h = 1e-5
	fd := make([]float64, len(x))
	for i := range x {
		old := x[i]
		x[i] = old + h
		fp := loss()
		x[i] = old - h
		fm := loss()
		x[i] = old
		fd[i] = (fp - fm) / (2 * h)
	}
	if e := attnRelErr(grad, fd); e > 1e-6 {
		t.Errorf("%s: analytic gradient differs from finite differences by %.3g (relative max-norm)", name, e)
	}
}

func attnDotAll(a, b []float64) float64 { return attnDot(a, b) }

func TestAttentionBackwardMatchesFiniteDifferences(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, d := range attnShapes {
		for _, parallax := range []bool{false, true} {
			name := attnName(d) + " softmax"
			if parallax {
				name = attnName(d) + " parallax"
			}
			t.Run(name, func(t *testing.T) {
				in := newAttnInputs(rng, d)
				r := in.r
				if !parallax {
					r = nil
				}
				loss := func() float64 {
					o, _, _, _ := Attention(d, in.q, in.k, in.v, r)
					return attnDotAll(o, in.dO)
				}
				dq, dk, dv, dr := AttentionBackward(d, in.q, in.k, in.v, r, in.dO)
				attnFDCheck(t, "dq", loss, in.q, dq)
				attnFDCheck(t, "dk", loss, in.k, dk)
				attnFDCheck(t, "dv", loss, in.v, dv)
				if parallax {
					attnFDCheck(t, "dr", loss, r, dr)
				} else if dr != nil {
					t.Errorf("softmax backward returned a dr")
				}
			})
		}
	}
}

func TestLinearAttentionBackwardMatchesFiniteDifferences(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, d := range attnShapes {
		for _, affine := range []bool{false, true} {
			name := attnName(d) + " plain"
			if affine {
				name = attnName(d) + " affine"
			}
			t.Run(name, func(t *testing.T) {
				in := newAttnInputs(rng, d)
				loss := func() float64 { return attnDotAll(LinearAttention(d, in.r, in.k, in.v, affine), in.dO) }
				dr, dk, dv := LinearAttentionBackward(d, in.r, in.k, in.v, in.dO, affine)
				attnFDCheck(t, "dr", loss, in.r, dr)
				attnFDCheck(t, "dk", loss, in.k, dk)
				attnFDCheck(t, "dv", loss, in.v, dv)
			})
		}
	}
}

func TestZeroProbeIsSoftmaxExactly(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, d := range attnShapes {
		in := newAttnInputs(rng, d)
		zero := make([]float64, len(in.r))
		oSA, vbarSA, _, lseSA := Attention(d, in.q, in.k, in.v, nil)
		o, vbar, tbar, lse := Attention(d, in.q, in.k, in.v, zero)
		for i := range o {
			if o[i] != oSA[i] || vbar[i] != vbarSA[i] || o[i] != vbar[i] {
				t.Fatalf("%v: r = 0 output %v differs from softmax %v at %d", attnName(d), o[i], oSA[i], i)
			}
		}
		for i := range tbar {
			if tbar[i] != 0 || lse[i] != lseSA[i] {
				t.Fatalf("%v: r = 0 gives tbar %v, lse %v (softmax lse %v)", attnName(d), tbar[i], lse[i], lseSA[i])
			}
		}
	}
}

func TestParallaxEqualsSigmaKVForm(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, d := range attnShapes {
		in := newAttnInputs(rng, d)
		o, _, _, _ := Attention(d, in.q, in.k, in.v, in.r)
		if e := attnRelErr(SigmaKVForm(d, in.q, in.k, in.v, in.r), o); e > 1e-13 {
			t.Errorf("%v: o_SA - Sigma_KV r differs from the effective-weight form by %.3g", attnName(d), e)
		}
	}
}

// llaTestShapes have at least D+1 keys per row or a positive ridge, so every
// system is non-singular.
var llaTestShapes = []Dims{
	attnTestDims(1, 2, 1, 6, 6, 3, true, 0),
	attnTestDims(2, 2, 2, 3, 7, 4, true, 0),
	attnTestDims(1, 2, 1, 4, 9, 4, true, 5),
	attnTestDims(1, 1, 1, 4, 5, 3, false, 0),
}

func TestLLALargeRidgeIsSoftmax(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, d := range llaTestShapes {
		in := newAttnInputs(rng, d)
		o, _, _ := LLA(d, in.q, in.k, in.v, 1e8)
		oSA, _, _, _ := Attention(d, in.q, in.k, in.v, nil)
		if e := attnRelErr(o, oSA); e > 1e-6 {
			t.Errorf("%v: LLA with lambda 1e8 differs from softmax attention by %.3g", attnName(d), e)
		}
	}
}

func TestLLAEqualsClosedForm(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, d := range llaTestShapes {
		for _, lambda := range []float64{0.05, 1} {
			in := newAttnInputs(rng, d)
			o, _, _ := LLA(d, in.q, in.k, in.v, lambda)
			if e := attnRelErr(o, LLAClosedForm(d, in.q, in.k, in.v, lambda)); e > 1e-10 {
				t.Errorf("%v lambda %v: LLA differs from vbar + Sigma_KV (Sigma_KK + lambda I)^-1 (q - kbar) by %.3g", attnName(d), lambda, e)
			}
		}
	}
}

func TestLLAIsParallaxWithAmplifiedProbe(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, d := range llaTestShapes {
		in := newAttnInputs(rng, d)
		o, rho, eta := LLA(d, in.q, in.k, in.v, 0.3)
		r := make([]float64, len(rho))
		for n := range eta {
			if !(eta[n] >= 0) {
				t.Fatalf("%v: eta %v of row %d is not >= 0", attnName(d), eta[n], n)
			}
			for x := range d.D {
				r[n*d.D+x] = (1 + eta[n]) * rho[n*d.D+x]
			}
		}
		op, _, _, _ := Attention(d, in.q, in.k, in.v, r)
		if e := attnRelErr(op, o); e > 1e-10 {
			t.Errorf("%v: Parallax with r = (1 + eta) rho* differs from LLA by %.3g", attnName(d), e)
		}
	}
}

func TestLLASingularRowIsNaN(t *testing.T) {
	// Two keys in D = 4 with lambda = 0: Sig has rank 2.
	d := attnTestDims(1, 1, 1, 1, 2, 4, true, 0)
	in := newAttnInputs(rand.New(rand.NewPCG(15, 16)), d)
	o, _, _ := LLA(d, in.q, in.k, in.v, 0)
	if !math.IsNaN(o[0]) {
		t.Errorf("singular system gave %v, want NaN", o[:4])
	}
}

func TestSolve(t *testing.T) {
	a := []float64{0, 2, 1, 1, 1, 0, 3, 0, 1}
	want := []float64{1, -2, 3}
	x, ok := solveDense(a, attnMatVec(a, want))
	if !ok || attnRelErr(x, want) > 1e-14 {
		t.Errorf("Solve = %v, %v; want %v", x, ok, want)
	}
	if _, ok := solveDense([]float64{1, 2, 2, 4}, []float64{1, 2}); ok {
		t.Errorf("Solve accepted a singular matrix")
	}
}

func TestDecodeAttentionMatchesCausalAttention(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	const capacity, D = 9, 4
	lens := []int{9, 3, 6}
	d := Dims{B: 3, Hq: 4, Hkv: 2, Lq: 2, D: D, Scale: 0.5, Window: 4}
	q := attnRandn(rng, d.B*d.Hq*d.Lq*D, 1)
	r := attnRandn(rng, len(q), 0.5)
	kc := attnRandn(rng, d.B*d.Hkv*capacity*D, 1)
	vc := attnRandn(rng, len(kc), 1)
	o := DecodeAttention(d, q, r, kc, vc, capacity, lens)
	per := d.Hq * d.Lq * D
	for b, n := range lens {
		// Rebuild sequence b's keys by hand and run causal attention.
		db := Dims{B: 1, Hq: d.Hq, Hkv: d.Hkv, Lq: d.Lq, Lk: n, D: D, Scale: d.Scale, Causal: true, Window: d.Window}
		var k, v []float64
		for h := 0; h < d.Hkv; h++ {
			for j := 0; j < n; j++ {
				off := ((b*d.Hkv+h)*capacity + j) * D
				k = append(k, kc[off:off+D]...)
				v = append(v, vc[off:off+D]...)
			}
		}
		want, _, _, _ := Attention(db, q[b*per:(b+1)*per], k, v, r[b*per:(b+1)*per])
		if e := attnRelErr(o[b*per:(b+1)*per], want); e != 0 {
			t.Errorf("sequence %d (len %d): decode differs from causal attention by %.3g", b, n, e)
		}
	}
}

func TestCorrectionRatio(t *testing.T) {
	vbar := []float64{3, 4, 0, 0, 1, 0}
	o := []float64{0, 4, 5, 5, 1, 1}
	// Rows: |(3,0)|/5 = 0.6; vbar = 0 counts 0; |(0,-1)|/1 = 1.
	if got, want := CorrectionRatio(o, vbar, 2), (0.6+0+1)/3; math.Abs(got-want) > 1e-15 {
		t.Errorf("CorrectionRatio = %v, want %v", got, want)
	}
}
