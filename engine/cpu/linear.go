package cpu

import (
	"github.com/parallax-engine/parallax/engine"
)

// Linear attention, the uniform-weight branch of the family (spec section
// 6), in its streaming form: a query row only needs sums over its visible
// keys, S = sum v k^T, sk = sum k, sv = sum v and their count n, so each
// (batch, KV head) walks its rows in order and slides the key window
// [lo, hi) along (adding entering keys, subtracting leaving ones), O(L D^2)
// work and O(D^2) memory per head for every mask. The sums are float64.
//
//	plain:  o = S r
//	affine: o = vbar - Sigma_KV r = (sv/n) (1 + (sk/n).r) - (S r)/n
//
// (Sigma_KV r = (1/n) sum (v - vbar)((k - kbar).r) = (S r)/n - vbar (kbar.r).)

// linSums are the running sums over a window of keys.
type linSums struct {
	D      int
	S      []float64 // S[x*D+y] = sum v_x k_y (plain, affine) or U for the backward
	a, b   []float64 // sk and sv (or the backward's C and E)
	lo, hi int       // the window
}

func newLinSums(D int) *linSums {
	return &linSums{D: D, S: make([]float64, D*D), a: make([]float64, D), b: make([]float64, D)}
}

func (s *linSums) clear() {
	clear(s.S)
	clear(s.a)
	clear(s.b)
}

// rank1 adds c u w^T to S, ca u to a and cb w to b.
func (s *linSums) rank1(u, w []float32, c, ca, cb float64) {
	D := s.D
	w = w[:D]
	for x, ux := range u[:D] {
		cu := c * float64(ux)
		row := s.S[x*D : (x+1)*D]
		for y, wy := range w {
			row[y] += cu * float64(wy)
		}
	}
	if ca != 0 {
		for x, ux := range u[:D] {
			s.a[x] += ca * float64(ux)
		}
	}
	if cb != 0 {
		for y, wy := range w {
			s.b[y] += cb * float64(wy)
		}
	}
}

// slide moves the window to [lo, hi), given that neither end moves down,
// calling add(j, +1) for entering and add(j, -1) for leaving items.
func (s *linSums) slide(lo, hi int, add func(j int, sign float64)) {
	for s.lo < min(lo, s.hi) {
		add(s.lo, -1)
		s.lo++
	}
	if s.lo == s.hi {
		s.clear() // an empty window holds exact zeros, not rounding residue
		s.lo, s.hi = lo, lo
	}
	for s.hi < hi {
		add(s.hi, +1)
		s.hi++
	}
}

// slideDown moves the window to [lo, hi) given that neither end moves up.
func (s *linSums) slideDown(lo, hi int, add func(j int, sign float64)) {
	for s.hi > max(hi, s.lo) {
		s.hi--
		add(s.hi, -1)
	}
	if s.lo == s.hi {
		s.clear()
		s.lo, s.hi = hi, hi
	}
	for s.lo > lo {
		s.lo--
		add(s.lo, +1)
	}
}

// mulVec sets y = S x; mulVecT sets y = S^T x.
func (s *linSums) mulVec(y []float64, x []float32) {
	D := s.D
	x = x[:D]
	for a := range y[:D] {
		row := s.S[a*D : (a+1)*D]
		var t float64
		for c, xc := range x {
			t += row[c] * float64(xc)
		}
		y[a] = t
	}
}

func (s *linSums) mulVecT(y []float64, x []float32) {
	D := s.D
	clear(y[:D])
	for a, xa := range x[:D] {
		row := s.S[a*D : (a+1)*D]
		xv := float64(xa)
		for c := range y[:D] {
			y[c] += row[c] * xv
		}
	}
}

// linRowsSeeing returns the query rows [lo, hi) whose visible range holds
// key j (both ends move down with j).
func linRowsSeeing(d engine.AttnDims, j int) (lo, hi int) {
	if !d.Causal {
		return 0, d.Lq
	}
	lo = min(max(0, j-d.Offset), d.Lq)
	hi = d.Lq
	if d.Window > 0 {
		hi = min(d.Lq, j-d.Offset+d.Window)
	}
	return lo, max(lo, hi)
}

func linDot(a []float32, b []float64) float64 {
	b = b[:len(a)]
	var s float64
	for i, x := range a {
		s += float64(x) * b[i]
	}
	return s
}

// LinearAttention computes plain or affine linear attention with probe R.
func (d *Device) LinearAttention(a engine.LinearAttentionArgs) error {
	dims, err := engine.CheckLinearAttention(a)
	if err != nil {
		return err
	}
	if err := d.own("linear attention", a.R, a.K, a.V, a.O); err != nil {
		return err
	}
	r, k, v := floats(a.R), floats(a.K), floats(a.V)
	o, commit := output(a.O, false)
	D, G := dims.D, dims.G
	attnDynamic(d, dims.B*dims.Hkv, func(int) *linSums { return newLinSums(D) }, func(st *linSums, bh int) {
		b, hk := bh/dims.Hkv, bh%dims.Hkv
		kvOff := bh * dims.Lk * D
		st.clear()
		st.lo, st.hi = 0, 0
		add := func(j int, sign float64) {
			kj, vj := k[kvOff+j*D:kvOff+(j+1)*D], v[kvOff+j*D:kvOff+(j+1)*D]
			if a.Affine {
				st.rank1(vj, kj, sign, sign, sign) // S += v k^T, a = sv, b = sk
			} else {
				st.rank1(vj, kj, sign, 0, 0)
			}
		}
		y := make([]float64, D)
		for i := 0; i < dims.Lq; i++ {
			lo, hi := dims.Visible(i)
			st.slide(lo, hi, add)
			n := st.hi - st.lo
			for g := range G {
				row := ((b*dims.Hq+hk*G+g)*dims.Lq + i) * D
				ri, oi := r[row:row+D], o[row:row+D]
				if n == 0 {
					clear(oi)
					continue
				}
				st.mulVec(y, ri)
				if !a.Affine {
					for x := range oi {
						oi[x] = float32(y[x])
					}
					continue
				}
				inv := 1 / float64(n)
				c := inv * (1 + inv*linDot(ri, st.b))
				for x := range oi {
					oi[x] = float32(c*st.a[x] - inv*y[x])
				}
			}
		}
	})
	commit()
	return nil
}

// LinearAttentionBackward computes dR, dK, dV of L = sum(o * dO) for
// LinearAttention, summed over the G query heads of each group, with
// g = dO:
//
//	plain:  dr_i = S_i^T g_i,  dk_j = U_j^T v_j,  dv_j = U_j k_j,
//	        U_j = sum_{i sees j} g_i r_i^T;
//	affine: dr_i = (g_i.vbar_i) kbar_i - S_i^T g_i / n_i,
//	        dk_j = E_j - U_j^T v_j,  dv_j = C_j - U_j k_j,
//	        U_j = sum g_i r_i^T / n_i,  C_j = sum (1 + kbar_i.r_i) g_i / n_i,
//	        E_j = sum (g_i.vbar_i) r_i / n_i
//
// (from o_i = vbar_i (1 + kbar_i.r_i) - S_i r_i / n_i). The first pass walks
// the rows upward with the key sums of the forward, the second walks the
// keys downward with the sums U, C, E over the rows that see each key.
func (d *Device) LinearAttentionBackward(a engine.LinearAttentionBackwardArgs) error {
	dims, err := engine.CheckLinearAttentionBackward(a)
	if err != nil {
		return err
	}
	if err := d.own("linear attention backward", a.R, a.K, a.V, a.DO, a.DR, a.DK, a.DV); err != nil {
		return err
	}
	r, k, v, g := floats(a.R), floats(a.K), floats(a.V), floats(a.DO)
	dr, commitR := output(a.DR, false)
	dk, commitK := output(a.DK, false)
	dv, commitV := output(a.DV, false)
	D, G := dims.D, dims.G
	attnDynamic(d, dims.B*dims.Hkv, func(int) *linSums { return newLinSums(D) }, func(st *linSums, bh int) {
		b, hk := bh/dims.Hkv, bh%dims.Hkv
		kvOff := bh * dims.Lk * D
		rowOff := func(g, i int) int { return ((b*dims.Hq+hk*G+g)*dims.Lq + i) * D }
		// Per (g, i): 1/n and, for affine, the coefficients of g in C and
		// of r in E.
		inv := make([]float64, G*dims.Lq)
		cC := make([]float64, G*dims.Lq)
		cE := make([]float64, G*dims.Lq)
		y := make([]float64, D)

		// Pass 1: rows upward, dr.
		st.clear()
		st.lo, st.hi = 0, 0
		addKey := func(j int, sign float64) {
			kj, vj := k[kvOff+j*D:kvOff+(j+1)*D], v[kvOff+j*D:kvOff+(j+1)*D]
			if a.Affine {
				st.rank1(vj, kj, sign, sign, sign)
			} else {
				st.rank1(vj, kj, sign, 0, 0)
			}
		}
		for i := 0; i < dims.Lq; i++ {
			lo, hi := dims.Visible(i)
			st.slide(lo, hi, addKey)
			n := st.hi - st.lo
			for h := range G {
				off := rowOff(h, i)
				ri, gi, dri := r[off:off+D], g[off:off+D], dr[off:off+D]
				if n == 0 {
					clear(dri)
					continue
				}
				st.mulVecT(y, gi)
				if !a.Affine {
					inv[h*dims.Lq+i] = 1
					for x := range dri {
						dri[x] = float32(y[x])
					}
					continue
				}
				in := 1 / float64(n)
				gv := in * linDot(gi, st.a) // g.vbar
				kr := in * linDot(ri, st.b) // kbar.r
				inv[h*dims.Lq+i] = in
				cC[h*dims.Lq+i] = in * (1 + kr)
				cE[h*dims.Lq+i] = in * gv
				for x := range dri {
					dri[x] = float32(gv*in*st.b[x] - in*y[x])
				}
			}
		}

		// Pass 2: keys downward, dk and dv.
		st.clear()
		st.lo, st.hi = dims.Lq, dims.Lq
		addRow := func(i int, sign float64) {
			for h := range G {
				off := rowOff(h, i)
				n := h*dims.Lq + i
				if inv[n] == 0 {
					continue // the row sees no key
				}
				// U += g r^T / n, a = C += cC g, b = E += cE r.
				st.rank1(g[off:off+D], r[off:off+D], sign*inv[n], sign*cC[n], sign*cE[n])
			}
		}
		for j := dims.Lk - 1; j >= 0; j-- {
			lo, hi := linRowsSeeing(dims, j)
			st.slideDown(lo, hi, addRow)
			kj, vj := k[kvOff+j*D:kvOff+(j+1)*D], v[kvOff+j*D:kvOff+(j+1)*D]
			dkj, dvj := dk[kvOff+j*D:kvOff+(j+1)*D], dv[kvOff+j*D:kvOff+(j+1)*D]
			// Plain: C = E = 0 and the signs flip.
			sgn := 1.0
			if !a.Affine {
				sgn = -1
			}
			st.mulVec(y, kj)
			for x := range dvj {
				dvj[x] = float32(sgn * (st.a[x] - y[x]))
			}
			st.mulVecT(y, vj)
			for x := range dkj {
				dkj[x] = float32(sgn * (st.b[x] - y[x]))
			}
		}
	})
	commitR()
	commitK()
	commitV()
	return nil
}
