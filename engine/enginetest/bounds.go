package enginetest

import (
	"math"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/ref"
)

// Rounding-model bounds for outputs whose conditioning varies with the
// inputs (docs/ENGINE.md, "Conformance bounds", derives them).
//
// A fixed relative tolerance such as Tol(BF16) = 1.6e-2 assumes the error
// of an output is a few unit roundoffs of the output itself. That holds for
// a product or a sum of same-signed terms, but not for an output that is a
// small difference of large rounded terms: the attention backward's
// dS_ij = p_ij (a_ij - T_i + ...) subtracts T_i = dO_i . o_i, formed from
// the forward output o stored at the dtype under test, from a_ij = dO_i . v_j;
// when p concentrates on one key the two nearly cancel, and the rounding of o
// (which no backend can avoid: o is the backward's input) leaves an error
// that is small next to the terms but not next to the result.
//
// The bound is first order in the unit roundoff u of the dtype: every
// operand rounded to the dtype on the way to an output (the stored forward
// outputs, the weights and pair gradients a tensor-core kernel rounds
// before its products, the output itself) carries a relative error of at
// most u, so the output's error is at most u E, where E sums the magnitudes
// of every rounded operand times the magnitude of its path to the output
// (the componentwise condition of the output with respect to those
// operands). The relative max-norm error of an output is then at most
// u max(E) / max|ref|; errBoundTol turns that into a tolerance.

// unitRoundoff is the unit roundoff of dt: 2^-8 for bf16 (8 significand
// bits), 2^-11 for f16, 2^-24 for f32.
func unitRoundoff(dt engine.DType) float64 {
	switch dt {
	case engine.BF16:
		return 0x1p-8
	case engine.F16:
		return 0x1p-11
	}
	return 0x1p-24
}

// errBoundTol is the tolerance of an output whose rounding-error magnitude
// is e (u * e bounds its absolute error elementwise) and whose reference is
// want: the larger of the fixed tolerance floor and u max(e) / max|want|,
// the relative max-norm error the rounding model allows.
func errBoundTol(dt engine.DType, floor float64, e, want []float64) float64 {
	var em, wm float64
	for i := range e {
		em = max(em, e[i])
		wm = max(wm, math.Abs(want[i]))
	}
	if wm == 0 {
		return floor
	}
	return max(floor, unitRoundoff(dt)*em/wm)
}

// attnForwardErr returns the rounding-error magnitudes E of the attention
// forward's o and vbar, elementwise (docs/ENGINE.md): a kernel may round
// the softmax weights p and the Parallax weights p t to the dtype before
// their products with v (u each: o = (1 + tbar) sum p v - sum (p t) v),
// and it rounds its outputs (u):
//
//	E_o    = |o| + sum_j p (|1 + tbar| + |t|) |v|
//	E_vbar = |vbar| + sum_j p |v|
func attnForwardErr(d ref.Dims, q, k, v, r []float64) (eo, evbar []float64) {
	o, vbar, tbar, lse := ref.Attention(d, q, k, v, r)
	eo, evbar = absAll(o), absAll(vbar)
	D := d.D
	attnEach(d, q, k, r, lse, func(n, m int, p, t float64) {
		w := p * (math.Abs(1+tbar[n]) + math.Abs(t))
		for x := range D {
			eo[n*D+x] += w * math.Abs(v[m*D+x])
			evbar[n*D+x] += p * math.Abs(v[m*D+x])
		}
	})
	return eo, evbar
}

// attnBackwardErr returns the rounding-error magnitudes E of the attention
// backward's dq, dk, dv (and dr for Parallax, r != nil), elementwise, under
// the model of docs/ENGINE.md. With a = dO.v, T = dO.o, Bv = dO.vbar and
// t = r.k, the backward forms dS = p (a - T + (tbar - t)(a - Bv)),
// dT = -p (a - Bv) and w = p (1 + tbar - t), and then dq = scale sum_j dS k,
// dr = sum_j dT k, dk = sum_i (scale dS q + dT r), dv = sum_i w dO. Its
// inputs o, vbar and tbar come from the forward, which may have rounded p
// and p t before its products and rounds o and vbar when it stores them;
// so, per unit roundoff, a row's T, Bv and tbar are off by at most
//
//	eT = sum|dO o| + sum_j p |a| (|1 + tbar| + |t|)
//	eB = sum|dO vbar| + sum_j p |a|
//	eb = sum_j p |t|
//
// and each of these row errors moves every dS, dT and w of the row
// coherently: dq_i by scale (kbar_i eT + |sum_j p (tbar - t) k_j| eB +
// sum_j p (|Bv| + |a - Bv|) |k_j| eb), with kbar = sum_j p k; dr_i by
// kbar_i eB + sum_j p |k_j| eb... (see the code; the key-side outputs sum
// the same per-pair terms over i). The backward itself may round p and
// then dS, dT and w before its products (2 u |dS|, 2 u |dT|, 2 u |w| per
// pair; products of those with exact operands are accumulated in f32,
// far more precisely), and it rounds its outputs (u |out|).
func attnBackwardErr(d ref.Dims, q, k, v, r, dO []float64) (edq, edk, edv, edr []float64) {
	o, vbar, tbar, lse := ref.Attention(d, q, k, v, r)
	dq, dk, dv, dr := ref.AttentionBackward(d, q, k, v, r, dO)
	edq, edk, edv = absAll(dq), absAll(dk), absAll(dv)
	if r != nil {
		edr = absAll(dr)
	}
	D := d.D
	rows := len(q) / D
	dot := func(a, b []float64) float64 {
		var s float64
		for i := range a {
			s += a[i] * b[i]
		}
		return s
	}
	// Per row: T, Bv, their error magnitudes eT, eB, tbar's eb, and the
	// coherent sums kbar = sum_j p k, kt = sum_j p (tbar - t) k.
	T, Bv := make([]float64, rows), make([]float64, rows)
	eT, eB, eb := make([]float64, rows), make([]float64, rows), make([]float64, rows)
	kbar, kt := make([]float64, rows*D), make([]float64, rows*D)
	for n := range rows {
		for x := n * D; x < (n+1)*D; x++ {
			T[n] += dO[x] * o[x]
			Bv[n] += dO[x] * vbar[x]
			eT[n] += math.Abs(dO[x] * o[x])
			eB[n] += math.Abs(dO[x] * vbar[x])
		}
	}
	attnEach(d, q, k, r, lse, func(n, m int, p, t float64) {
		a := dot(dO[n*D:(n+1)*D], v[m*D:(m+1)*D])
		eT[n] += p * math.Abs(a) * (math.Abs(1+tbar[n]) + math.Abs(t))
		eB[n] += p * math.Abs(a)
		eb[n] += p * math.Abs(t)
		for x := range D {
			kbar[n*D+x] += p * k[m*D+x]
			kt[n*D+x] += p * (tbar[n] - t) * k[m*D+x]
		}
	})
	for n := range rows {
		for x := n * D; x < (n+1)*D; x++ {
			edq[x] += d.Scale * (math.Abs(kbar[x])*eT[n] + math.Abs(kt[x])*eB[n])
			if r != nil {
				edr[x] += math.Abs(kbar[x]) * eB[n]
			}
		}
	}
	attnEach(d, q, k, r, lse, func(n, m int, p, t float64) {
		g, qi, kj := dO[n*D:(n+1)*D], q[n*D:(n+1)*D], k[m*D:(m+1)*D]
		a := dot(g, v[m*D:(m+1)*D])
		dS := p * (a - T[n] + (tbar[n]-t)*(a-Bv[n]))
		dT := -p * (a - Bv[n])
		w := p * (1 + tbar[n] - t)
		// This pair's own roundings (p, then dS, dT, w) and its share of
		// the row errors (tbar's moves dS by p (|Bv| + |a - Bv|) eb).
		eS := 2*math.Abs(dS) + p*(math.Abs(Bv[n])+math.Abs(a-Bv[n]))*eb[n]
		eTp := 2 * math.Abs(dT)
		eW := 2*math.Abs(w) + p*eb[n]
		for x := range D {
			edq[n*D+x] += d.Scale * eS * math.Abs(kj[x])
			edk[m*D+x] += d.Scale*eS*math.Abs(qi[x]) + d.Scale*p*math.Abs(qi[x])*eT[n]
			edv[m*D+x] += eW * math.Abs(g[x])
		}
		if r != nil {
			ri := r[n*D : (n+1)*D]
			for x := range D {
				edr[n*D+x] += eTp * math.Abs(kj[x])
				edk[m*D+x] += eTp*math.Abs(ri[x]) + p*math.Abs(ri[x]-d.Scale*(tbar[n]-t)*qi[x])*eB[n]
			}
		} else {
			_ = eTp
		}
	})
	return edq, edk, edv, edr
}

// attnEach calls f for every visible (query row n, key row m) pair of an
// attention with dims d, with the softmax weight p = exp(scale q.k - lse)
// and the probe score t = r.k (0 without r). n indexes the [B, Hq, Lq]
// rows, m the [B, Hkv, Lk] rows.
func attnEach(d ref.Dims, q, k, r, lse []float64, f func(n, m int, p, t float64)) {
	D, G := d.D, d.Hq/d.Hkv
	dot := func(a, b []float64) float64 {
		var s float64
		for i := range a {
			s += a[i] * b[i]
		}
		return s
	}
	for b := range d.B {
		for h := range d.Hq {
			for i := range d.Lq {
				n := (b*d.Hq+h)*d.Lq + i
				qi := q[n*D : (n+1)*D]
				lo, hi := d.Visible(i)
				for j := lo; j < hi; j++ {
					m := (b*d.Hkv+h/G)*d.Lk + j
					kj := k[m*D : (m+1)*D]
					var t float64
					if r != nil {
						t = dot(r[n*D:(n+1)*D], kj)
					}
					f(n, m, math.Exp(d.Scale*dot(qi, kj)-lse[n]), t)
				}
			}
		}
	}
}

func absAll(x []float64) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = math.Abs(v)
	}
	return out
}

// adamwErr returns the rounding-error magnitudes of AdamW's new parameter
// p' and first moment m' (ref.AdamW's pn, mn, vn) for a device that
// computes the update in f32 (docs/ENGINE.md, "Conformance bounds"):
// m' = b1 m + (1 - b1) g rounds both products and their sum, so
//
//	E_m = 2 (|b1 m| + |(1 - b1) g| + |m'|),
//
// large next to |m'| where the two terms nearly cancel; the step
// s = lr m' / (bc1 (sqrt(v' / bc2) + eps)) inherits m”s error through its
// factor f = s / m' and adds a few roundings of its own, and p' = x - s
// with x = p (1 - lr wd):
//
//	E_p = 2 (|x| + |p'| + 4 |s| + f E_m / 2).
//
// The factor 2 covers a fused or an unfused multiply-add.
func adamwErr(p, g, m, pn, mn, vn []float64, o engine.AdamWOpts) (ep, em []float64) {
	b1, b2, lr := float64(o.Beta1), float64(o.Beta2), float64(o.LR)
	bc1 := 1 - math.Pow(b1, float64(o.Step))
	bc2 := 1 - math.Pow(b2, float64(o.Step))
	ep, em = make([]float64, len(p)), make([]float64, len(p))
	for i := range p {
		em[i] = 2 * (math.Abs(b1*m[i]) + math.Abs((1-b1)*g[i]) + math.Abs(mn[i]))
		f := lr / (bc1 * (math.Sqrt(vn[i]/bc2) + float64(o.Eps)))
		x := p[i] - lr*float64(o.WeightDecay)*p[i]
		s := f * mn[i]
		ep[i] = 2*(math.Abs(x)+math.Abs(pn[i])+4*math.Abs(s)) + f*em[i]
	}
	return ep, em
}

// accumTol is the tolerance of want = a + p for an addend a exact in dt
// (an input: a residual stream or its gradient) and a computed term p of
// relative max-norm tolerance tolP (max|p err| <= tolP max|p|), the sum
// rounded to dt: once where the term is added in f32 (a fused pass), or
// after p itself is rounded to dt (a composition through a scratch), u
// each. The absolute error is then at most tolP max|p| + u max|p| +
// u max|want|, which is returned relative to max|want| (with the
// elementwise floor Tol(dt, 1)).
func accumTol(dt engine.DType, tolP float64, p, want []float64) float64 {
	var pm, wm float64
	for i := range p {
		pm = max(pm, math.Abs(p[i]))
		wm = max(wm, math.Abs(want[i]))
	}
	if wm == 0 {
		return Tol(dt, 1)
	}
	u := unitRoundoff(dt)
	return max(Tol(dt, 1), ((tolP+u)*pm+u*wm)/wm)
}
