package cpu

import (
	"math"

	"github.com/parallax-engine/parallax/engine"
)

// AttentionBackward computes dQ, dK, dV (and dR for Parallax) of
// L = sum(o * dO), docs/MATH.md section 4, in three passes that never hold more than
// one tile of the Lq x Lk probabilities per worker:
//
//  1. per row, T = g.o and Bv = g.vbar (g = dO; softmax: T only);
//  2. row-parallel over (batch, KV head, query block): p is recomputed from
//     the saved log-sum-exp, dS = p (a - T + (tbar - t)(a - Bv)) and
//     dT = -p (a - Bv) with a = g.v, and dq = scale sum dS k, dr = sum dT k;
//  3. column-parallel over (batch, KV head, key block):
//     dk = sum (scale dS q + dT r) and dv = sum p (1 + tbar - t) g, summed
//     over the rows of all G query heads of the group that see the key.
//
// Softmax attention is the same with t = 0: dS = p (a - T), dv = sum p g.
func (d *Device) AttentionBackward(a engine.AttentionBackwardArgs) error {
	dims, err := engine.CheckAttentionBackward(d.own, a)
	if err != nil {
		return err
	}
	in := bwdInputs{
		AttnDims: dims,
		q:        floats(a.Q), k: floats(a.K), v: floats(a.V),
		o: floats(a.O), g: floats(a.DO), lse: floats(a.LSE),
	}
	if a.R != nil {
		in.r, in.vbar, in.tbar = floats(a.R), floats(a.Vbar), floats(a.Tbar)
	}
	d.attnRowStats(&in)
	dq, commitQ := output(a.DQ, false)
	var dr []float32
	commitR := func() {}
	if a.DR != nil {
		dr, commitR = output(a.DR, false)
	}
	d.attnBackwardRows(&in, dq, dr)
	dk, commitK := output(a.DK, false)
	dv, commitV := output(a.DV, false)
	d.attnBackwardCols(&in, dk, dv)
	commitQ()
	commitR()
	commitK()
	commitV()
	return nil
}

// bwdInputs are the backward's operands as float32 rows, plus the per-row
// pre-pass results T = g.o and Bv = g.vbar.
type bwdInputs struct {
	engine.AttnDims
	q, k, v, r, o, g []float32
	lse, vbar, tbar  []float32
	T, Bv            []float32
}

func (in *bwdInputs) rowOff(b, h, i int) int { return (b*in.Hq+h)*in.Lq + i }

// attnRowStats is pass 1: T = g.o and, for Parallax, Bv = g.vbar, each
// accumulated in float64 (they enter differences a - T).
func (d *Device) attnRowStats(in *bwdInputs) {
	rows, D := in.B*in.Hq*in.Lq, in.D
	in.T = make([]float32, rows)
	if in.r != nil {
		in.Bv = make([]float32, rows)
	}
	d.parallelMin(rows, 64, func(lo, hi int) {
		for n := lo; n < hi; n++ {
			g := in.g[n*D : (n+1)*D]
			in.T[n] = attnDot64(g, in.o[n*D:(n+1)*D])
			if in.Bv != nil {
				in.Bv[n] = attnDot64(g, in.vbar[n*D:(n+1)*D])
			}
		}
	})
}

func attnDot64(a, b []float32) float32 {
	b = b[:len(a)]
	var s float64
	for i, x := range a {
		s += float64(x) * float64(b[i])
	}
	return float32(s)
}

// pairGrads turns a run of scores of one row into its pair gradients, in
// place: s (scaled q.k) becomes dS, t (r.k) becomes dT, and a (g.v) becomes
// the effective weight p (1 + tbar - t) when pe is set. For softmax (t nil)
// dS = p (a - T) and the weight is p.
func pairGrads(s, t, a []float32, lse, T, Bv, tbar float32, pe bool) {
	a = a[:len(s)]
	if t == nil {
		for n, x := range s {
			p := float32(math.Exp(float64(x - lse)))
			s[n] = p * (a[n] - T)
			if pe {
				a[n] = p
			}
		}
		return
	}
	t = t[:len(s)]
	for n, x := range s {
		p := float32(math.Exp(float64(x - lse)))
		an, tn := a[n], t[n]
		ab := an - Bv
		s[n] = p * (an - T + (tbar-tn)*ab)
		t[n] = -p * ab
		if pe {
			a[n] = p * (1 + tbar - tn)
		}
	}
}

// bwdScratch is one worker's scratch for the backward passes.
type bwdScratch struct {
	s, t, a []float32 // one tile row (row pass) or a block x tile (column pass)
	acc1    []float32 // the column pass's dk accumulators for one key block
	acc2    []float32 // and its dv accumulators
	lo, hi  []int     // the column pass: each row's visible keys [lo, hi) in the tile
}

func (in *bwdInputs) rowArgs(b, h, i int) (q, r, g []float32, lse, T, Bv, tbar float32) {
	n := in.rowOff(b, h, i)
	D := in.D
	q, g = in.q[n*D:(n+1)*D], in.g[n*D:(n+1)*D]
	lse, T = in.lse[n], in.T[n]
	if in.r != nil {
		r = in.r[n*D : (n+1)*D]
		Bv, tbar = in.Bv[n], in.tbar[n]
	}
	return
}

// attnBackwardRows is pass 2: dq and dr, row-parallel.
func (d *Device) attnBackwardRows(in *bwdInputs, dq, dr []float32) {
	D, G := in.D, in.G
	bq := attnBlockRows(G)
	nqb := (in.Lq + bq - 1) / bq
	heads := in.B * in.Hkv
	parallax := in.r != nil
	attnDynamic(d, heads*nqb, func(int) *bwdScratch {
		return &bwdScratch{s: make([]float32, attnBk), t: make([]float32, attnBk), a: make([]float32, attnBk)}
	}, func(w *bwdScratch, item int) {
		qb := nqb - 1 - item/heads
		bh := item % heads
		b, hk := bh/in.Hkv, bh%in.Hkv
		i0, i1 := attnRowBlock(qb, bq, in.Lq)
		kvOff := (b*in.Hkv + hk) * in.Lk * D
		kh, vh := in.k[kvOff:kvOff+in.Lk*D], in.v[kvOff:kvOff+in.Lk*D]
		// Tiles outermost, so that a K/V tile serves every row of the
		// block; each row accumulates straight into its own dq (and dr).
		lo0, hi1 := in.Lk, 0
		for i := i0; i < i1; i++ {
			lo, hi := in.Visible(i)
			lo0, hi1 = min(lo0, lo), max(hi1, hi)
		}
		for g := range G {
			h := hk*G + g
			for i := i0; i < i1; i++ {
				n := in.rowOff(b, h, i) * D
				clear(dq[n : n+D])
				if parallax {
					clear(dr[n : n+D])
				}
			}
		}
		for t0 := lo0; t0 < hi1; t0 += attnBk {
			t1 := min(t0+attnBk, hi1)
			for g := range G {
				h := hk*G + g
				for i := i0; i < i1; i++ {
					lo, hi := in.Visible(i)
					j0, j1 := max(lo, t0), min(hi, t1)
					if j0 >= j1 {
						continue
					}
					q, r, gr, lse, T, Bv, tbar := in.rowArgs(b, h, i)
					nk := j1 - j0
					s, a := w.s[:nk], w.a[:nk]
					var t []float32
					if parallax {
						t = w.t[:nk]
					}
					kt := kh[j0*D : j1*D]
					scoresBackward(s, t, a, q, r, gr, kt, vh[j0*D:j1*D], in.Scale)
					pairGrads(s, t, a, lse, T, Bv, tbar, false)
					n := in.rowOff(b, h, i) * D
					if parallax {
						attnAccum2(dq[n:n+D], dr[n:n+D], s, t, kt)
					} else {
						attnAccum(dq[n:n+D], s, kt)
					}
				}
			}
		}
		for g := range G {
			h := hk*G + g
			for i := i0; i < i1; i++ {
				n := in.rowOff(b, h, i) * D
				attnScale(dq[n:n+D], in.Scale)
			}
		}
	})
}

// attnBackwardCols is pass 3: dk and dv, column-parallel over key blocks.
// For each block of query rows that sees the key block, the pair gradients
// of the (rows x keys) tile are formed first, then every key row gathers
// its contributions four query rows at a time.
func (d *Device) attnBackwardCols(in *bwdInputs, dk, dv []float32) {
	D, G := in.D, in.G
	nkb := (in.Lk + attnBk - 1) / attnBk
	heads := in.B * in.Hkv
	parallax := in.r != nil
	const bq = attnRows
	attnDynamic(d, heads*nkb, func(int) *bwdScratch {
		return &bwdScratch{
			s: make([]float32, bq*attnBk), t: make([]float32, bq*attnBk), a: make([]float32, bq*attnBk),
			acc1: make([]float32, attnBk*D), acc2: make([]float32, attnBk*D),
			lo: make([]int, bq), hi: make([]int, bq),
		}
	}, func(w *bwdScratch, item int) {
		kb := item / heads // causal: early keys are seen by the most rows
		bh := item % heads
		b, hk := bh/in.Hkv, bh%in.Hkv
		j0, j1 := kb*attnBk, min((kb+1)*attnBk, in.Lk)
		nk := j1 - j0
		kvOff := (b*in.Hkv+hk)*in.Lk*D + j0*D
		kt, vt := in.k[kvOff:kvOff+nk*D], in.v[kvOff:kvOff+nk*D]
		dkt, dvt := w.acc1[:nk*D], w.acc2[:nk*D]
		clear(dkt)
		clear(dvt)
		// The rows that see any key of the block form one range [iLo, iHi)
		// since both ends of the visible range grow with i.
		iLo, iHi := in.Lq, 0
		for i := 0; i < in.Lq; i++ {
			lo, hi := in.Visible(i)
			if max(lo, j0) < min(hi, j1) {
				iLo, iHi = min(iLo, i), i+1
			}
		}
		for g := range G {
			h := hk*G + g
			for r0 := iLo; r0 < iHi; r0 += bq {
				r1 := min(r0+bq, iHi)
				S, T, A := w.s[:(r1-r0)*nk], w.t[:(r1-r0)*nk], w.a[:(r1-r0)*nk]
				clear(S)
				clear(T)
				clear(A)
				vlo, vhi := w.lo[:r1-r0], w.hi[:r1-r0]
				for i := r0; i < r1; i++ {
					lo, hi := in.Visible(i)
					c0, c1 := max(lo, j0), min(hi, j1)
					vlo[i-r0], vhi[i-r0] = c0-j0, c1-j0
					if c0 >= c1 {
						continue
					}
					q, r, gr, lse, Ti, Bv, tbar := in.rowArgs(b, h, i)
					row := (i - r0) * nk
					s, a := S[row+c0-j0:row+c1-j0], A[row+c0-j0:row+c1-j0]
					var t []float32
					if parallax {
						t = T[row+c0-j0 : row+c1-j0]
					}
					scoresBackward(s, t, a, q, r, gr, kt[(c0-j0)*D:(c1-j0)*D], vt[(c0-j0)*D:(c1-j0)*D], in.Scale)
					pairGrads(s, t, a, lse, Ti, Bv, tbar, true)
				}
				off := in.rowOff(b, h, r0) * D
				qs := in.q[off : off+(r1-r0)*D]
				gs := in.g[off : off+(r1-r0)*D]
				var rs []float32
				if parallax {
					rs = in.r[off : off+(r1-r0)*D]
				}
				gatherKeyGrads(dkt, dvt, S, T, A, qs, rs, gs, vlo, vhi, nk, in.Scale)
			}
		}
		copy(dk[kvOff:kvOff+nk*D], dkt)
		copy(dv[kvOff:kvOff+nk*D], dvt)
	})
}

// gatherKeyGrads adds to each of the nk key rows of dk and dv the
// contributions of the query rows i that see it (lo[i] <= j < hi[i]):
// dk_j += sum_i (scale S[i,j] q_i + T[i,j] r_i), dv_j += sum_i A[i,j] g_i,
// with S, T, A [nr x nk] row-major (T and rs unused for softmax: rs nil).
// A masked pair adds nothing, not 0 times its row: a NaN or an infinity in
// q, r or g of a row must not reach the keys the row does not see.
func gatherKeyGrads(dk, dv, S, T, A, qs, rs, gs []float32, lo, hi []int, nk int, scale float32) {
	D := len(dk) / nk
	nr := len(lo)
	for j := range nk {
		dkj := dk[j*D:]
		dkj = dkj[:D]
		dvj := dv[j*D:]
		dvj = dvj[:D]
		// The rows that see key j form one range (both ends of the
		// visible range grow with i): [i0, i1).
		i0, i1 := 0, nr
		for i0 < nr && !(lo[i0] <= j && j < hi[i0]) {
			i0++
		}
		for i1 > i0 && !(lo[i1-1] <= j && j < hi[i1-1]) {
			i1--
		}
		i := i0
		for ; i+4 <= i1; i += 4 {
			c0, c1, c2, c3 := scale*S[i*nk+j], scale*S[(i+1)*nk+j], scale*S[(i+2)*nk+j], scale*S[(i+3)*nk+j]
			p0, p1, p2, p3 := A[i*nk+j], A[(i+1)*nk+j], A[(i+2)*nk+j], A[(i+3)*nk+j]
			q0 := qs[i*D:]
			q0 = q0[:D]
			q1 := qs[(i+1)*D:]
			q1 = q1[:D]
			q2 := qs[(i+2)*D:]
			q2 = q2[:D]
			q3 := qs[(i+3)*D:]
			q3 = q3[:D]
			g0 := gs[i*D:]
			g0 = g0[:D]
			g1 := gs[(i+1)*D:]
			g1 = g1[:D]
			g2 := gs[(i+2)*D:]
			g2 = g2[:D]
			g3 := gs[(i+3)*D:]
			g3 = g3[:D]
			if rs != nil {
				e0, e1, e2, e3 := T[i*nk+j], T[(i+1)*nk+j], T[(i+2)*nk+j], T[(i+3)*nk+j]
				r0 := rs[i*D:]
				r0 = r0[:D]
				r1 := rs[(i+1)*D:]
				r1 = r1[:D]
				r2 := rs[(i+2)*D:]
				r2 = r2[:D]
				r3 := rs[(i+3)*D:]
				r3 = r3[:D]
				for x := range dkj {
					dkj[x] += e0*r0[x] + e1*r1[x] + e2*r2[x] + e3*r3[x]
				}
			}
			// Separate loops over q, r and g keep the operands in
			// registers (one loop over all twelve rows spills).
			for x := range dkj {
				dkj[x] += c0*q0[x] + c1*q1[x] + c2*q2[x] + c3*q3[x]
			}
			for x := range dvj {
				dvj[x] += p0*g0[x] + p1*g1[x] + p2*g2[x] + p3*g3[x]
			}
		}
		for ; i < i1; i++ {
			c, p := scale*S[i*nk+j], A[i*nk+j]
			qi := qs[i*D:]
			qi = qi[:D]
			gi := gs[i*D:]
			gi = gi[:D]
			if rs == nil {
				for x := range dkj {
					dkj[x] += c * qi[x]
					dvj[x] += p * gi[x]
				}
				continue
			}
			e := T[i*nk+j]
			ri := rs[i*D:]
			ri = ri[:D]
			for x := range dkj {
				dkj[x] += c*qi[x] + e*ri[x]
				dvj[x] += p * gi[x]
			}
		}
	}
}
