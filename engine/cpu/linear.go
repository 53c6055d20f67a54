package cpu

import (
	"github.com/parallax-engine/parallax/engine"
)

// Linear attention, the uniform-weight branch of the family (docs/MATH.md section
// 6), in its streaming form. A query row only needs sums over its visible
// keys, S = sum v k^T, sk = sum k, sv = sum v and their count n:
//
//	plain:  o = S r
//	affine: o = vbar - Sigma_KV r = (sv/n) (1 + (sk/n).r) - (S r)/n
//
// (Sigma_KV r = (1/n) sum (v - vbar)((k - kbar).r) = (S r)/n - vbar (kbar.r)).
// Each work item walks the rows of one (batch, KV head) in order and slides
// the key window [lo, hi) along, adding entering keys and subtracting
// leaving ones: O(L D^2) work and O(D^2) memory per head for every mask. To
// use every core when B * Hkv is small, an item owns only a slab of rows of
// the D x D matrix (the outputs o_x it produces need only row x of S), so
// (batch, KV head, slab) items stream the sequence independently. A first
// cheap pass computes the per-row scalars that need whole vectors (n,
// kbar.r, g.vbar). Sums are float64.

// linSlab is rows [x0, x1) of a matrix M = sum c u w^T (D columns) and of
// the vector a = sum ca u, over a sliding window of terms.
type linSlab struct {
	D, x0, x1 int
	M         []float64 // (x1 - x0) x D
	a         []float64 // x1 - x0
	lo, hi    int       // the window of terms
}

func newLinSlab(D int) *linSlab {
	return &linSlab{D: D, M: make([]float64, D*D), a: make([]float64, D)}
}

// reset empties the slab and selects rows [x0, x1).
func (s *linSlab) reset(x0, x1, at int) {
	s.x0, s.x1 = x0, x1
	clear(s.M[:(x1-x0)*s.D])
	clear(s.a[:x1-x0])
	s.lo, s.hi = at, at
}

// rank1 adds c u w^T to M and ca u to a (rows of the slab only).
func (s *linSlab) rank1(u, w []float32, c, ca float64) {
	D := s.D
	w = w[:D]
	for x, ux := range u[s.x0:s.x1] {
		cu := c * float64(ux)
		row := s.M[x*D : (x+1)*D]
		for y, wy := range w {
			row[y] += cu * float64(wy)
		}
		s.a[x] += ca * float64(ux)
	}
}

// row returns M_x . w for slab row x (relative to x0).
func (s *linSlab) row(x int, w []float32) float64 {
	return linDot(w, s.M[x*s.D:(x+1)*s.D])
}

// slide moves the window to [lo, hi), given that neither end moves down,
// calling add(j, +1) for entering terms and add(j, -1) for leaving ones.
func (s *linSlab) slide(lo, hi int, add func(j int, sign float64)) {
	for s.lo < min(lo, s.hi) {
		add(s.lo, -1)
		s.lo++
	}
	if s.lo == s.hi {
		s.reset(s.x0, s.x1, lo) // an empty window holds exact zeros
	}
	for s.hi < hi {
		add(s.hi, +1)
		s.hi++
	}
}

// slideDown moves the window to [lo, hi), given that neither end moves up.
func (s *linSlab) slideDown(lo, hi int, add func(j int, sign float64)) {
	for s.hi > max(hi, s.lo) {
		s.hi--
		add(s.hi, -1)
	}
	if s.lo == s.hi {
		s.reset(s.x0, s.x1, hi)
	}
	for s.lo > lo {
		s.lo--
		add(s.lo, +1)
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

// linPlan splits the work of one op into (batch, KV head, slab) items.
type linPlan struct {
	dims         engine.AttnDims
	heads, slabs int
}

func (d *Device) linPlan(dims engine.AttnDims) linPlan {
	heads := dims.B * dims.Hkv
	slabs := max(1, min((2*d.threads+heads-1)/max(heads, 1), dims.D/16))
	return linPlan{dims, heads, slabs}
}

// item returns the batch, KV head and slab rows [x0, x1) of item n.
func (p linPlan) item(n int) (b, hk, x0, x1 int) {
	bh, sl := n/p.slabs, n%p.slabs
	return bh / p.dims.Hkv, bh % p.dims.Hkv, p.dims.D * sl / p.slabs, p.dims.D * (sl + 1) / p.slabs
}

// linRowStats is the first pass: for every row (b, h, i), with n its
// visible key count, inv = 1/n (0 for no key), kr = kbar.r and, when g is
// not nil, gv = g.vbar.
func (d *Device) linRowStats(dims engine.AttnDims, r, k, v, g []float32) (inv, kr, gv []float64) {
	D, G := dims.D, dims.G
	rows := dims.B * dims.Hq * dims.Lq
	inv, kr = make([]float64, rows), make([]float64, rows)
	if g != nil {
		gv = make([]float64, rows)
	}
	attnDynamic(d, dims.B*dims.Hkv, func(int) []float64 { return make([]float64, 2*D) }, func(sums []float64, bh int) {
		sk, sv := sums[:D], sums[D:]
		clear(sums)
		b, hk := bh/dims.Hkv, bh%dims.Hkv
		kvOff := bh * dims.Lk * D
		wlo, whi := 0, 0 // the window of keys in sk, sv
		add := func(j int, sign float64) {
			kj, vj := k[kvOff+j*D:kvOff+(j+1)*D], v[kvOff+j*D:kvOff+(j+1)*D]
			for x := range sk {
				sk[x] += sign * float64(kj[x])
				sv[x] += sign * float64(vj[x])
			}
		}
		for i := 0; i < dims.Lq; i++ {
			lo, hi := dims.Visible(i)
			for wlo < min(lo, whi) {
				add(wlo, -1)
				wlo++
			}
			if wlo == whi {
				clear(sums)
				wlo, whi = lo, lo
			}
			for whi < hi {
				add(whi, +1)
				whi++
			}
			n := whi - wlo
			if n == 0 {
				continue
			}
			in := 1 / float64(n)
			for h := hk * G; h < (hk+1)*G; h++ {
				row := (b*dims.Hq+h)*dims.Lq + i
				inv[row] = in
				kr[row] = in * linDot(r[row*D:(row+1)*D], sk)
				if g != nil {
					gv[row] = in * linDot(g[row*D:(row+1)*D], sv)
				}
			}
		}
	})
	return inv, kr, gv
}

// LinearAttention computes plain or affine linear attention with probe R.
func (d *Device) LinearAttention(a engine.LinearAttentionArgs) error {
	dims, err := engine.CheckLinearAttention(d.own, a)
	if err != nil {
		return err
	}
	r, k, v := floats(a.R), floats(a.K), floats(a.V)
	o, commit := output(a.O, false)
	D, G := dims.D, dims.G
	var inv, kr []float64
	if a.Affine {
		inv, kr, _ = d.linRowStats(dims, r, k, v, nil)
	}
	p := d.linPlan(dims)
	attnDynamic(d, p.heads*p.slabs, func(int) *linSlab { return newLinSlab(D) }, func(st *linSlab, n int) {
		b, hk, x0, x1 := p.item(n)
		kvOff := (b*dims.Hkv + hk) * dims.Lk * D
		st.reset(x0, x1, 0)
		// M = S = sum v k^T (rows x of the slab), a = sv.
		add := func(j int, sign float64) {
			st.rank1(v[kvOff+j*D:kvOff+(j+1)*D], k[kvOff+j*D:kvOff+(j+1)*D], sign, sign)
		}
		for i := 0; i < dims.Lq; i++ {
			lo, hi := dims.Visible(i)
			st.slide(lo, hi, add)
			for h := hk * G; h < (hk+1)*G; h++ {
				row := (b*dims.Hq+h)*dims.Lq + i
				ri, oi := r[row*D:(row+1)*D], o[row*D+x0:row*D+x1]
				if st.hi == st.lo {
					clear(oi)
					continue
				}
				if !a.Affine {
					for x := range oi {
						oi[x] = float32(st.row(x, ri))
					}
					continue
				}
				in := inv[row]
				c := in * (1 + kr[row])
				for x := range oi {
					oi[x] = float32(c*st.a[x] - in*st.row(x, ri))
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
// (from o_i = vbar_i (1 + kbar_i.r_i) - S_i r_i / n_i). dr walks the rows
// upward with slabs of S^T = sum k v^T; dv and dk walk the keys downward
// with slabs of U and of U^T over the rows that see each key.
func (d *Device) LinearAttentionBackward(a engine.LinearAttentionBackwardArgs) error {
	dims, err := engine.CheckLinearAttentionBackward(d.own, a)
	if err != nil {
		return err
	}
	r, k, v, g := floats(a.R), floats(a.K), floats(a.V), floats(a.DO)
	dr, commitR := output(a.DR, false)
	dk, commitK := output(a.DK, false)
	dv, commitV := output(a.DV, false)
	D, G := dims.D, dims.G
	inv, kr, gv := d.linRowStats(dims, r, k, v, g)
	p := d.linPlan(dims)

	// dr: rows upward, M = S^T = sum k v^T, a = sk.
	attnDynamic(d, p.heads*p.slabs, func(int) *linSlab { return newLinSlab(D) }, func(st *linSlab, n int) {
		b, hk, y0, y1 := p.item(n)
		kvOff := (b*dims.Hkv + hk) * dims.Lk * D
		st.reset(y0, y1, 0)
		add := func(j int, sign float64) {
			st.rank1(k[kvOff+j*D:kvOff+(j+1)*D], v[kvOff+j*D:kvOff+(j+1)*D], sign, sign)
		}
		for i := 0; i < dims.Lq; i++ {
			lo, hi := dims.Visible(i)
			st.slide(lo, hi, add)
			for h := hk * G; h < (hk+1)*G; h++ {
				row := (b*dims.Hq+h)*dims.Lq + i
				gi, dri := g[row*D:(row+1)*D], dr[row*D+y0:row*D+y1]
				if st.hi == st.lo {
					clear(dri)
					continue
				}
				if !a.Affine {
					for y := range dri {
						dri[y] = float32(st.row(y, gi))
					}
					continue
				}
				in := inv[row]
				for y := range dri {
					dri[y] = float32(gv[row]*in*st.a[y] - in*st.row(y, gi))
				}
			}
		}
	})

	// dv and dk: keys downward over the rows that see each key. Items with
	// dvPart set hold rows x of U = sum g r^T / n and C = sum cC g; the
	// others rows y of U^T = sum r g^T / n and E = sum cE r.
	attnDynamic(d, 2*p.heads*p.slabs, func(int) *linSlab { return newLinSlab(D) }, func(st *linSlab, n int) {
		dvPart := n%2 == 0
		b, hk, x0, x1 := p.item(n / 2)
		kvOff := (b*dims.Hkv + hk) * dims.Lk * D
		st.reset(x0, x1, dims.Lq)
		add := func(i int, sign float64) {
			for h := hk * G; h < (hk+1)*G; h++ {
				row := (b*dims.Hq+h)*dims.Lq + i
				in := inv[row]
				if in == 0 {
					continue // the row sees no key
				}
				c := 1.0 // plain: U = sum g r^T, C = E = 0
				var cc, ce float64
				if a.Affine {
					c, cc, ce = in, in*(1+kr[row]), in*gv[row]
				}
				gi, ri := g[row*D:(row+1)*D], r[row*D:(row+1)*D]
				if dvPart {
					st.rank1(gi, ri, sign*c, sign*cc)
				} else {
					st.rank1(ri, gi, sign*c, sign*ce)
				}
			}
		}
		for j := dims.Lk - 1; j >= 0; j-- {
			lo, hi := linRowsSeeing(dims, j)
			st.slideDown(lo, hi, add)
			// out = a - M w (affine), M w (plain).
			w, out := v[kvOff+j*D:kvOff+(j+1)*D], dk[kvOff+j*D+x0:kvOff+j*D+x1]
			if dvPart {
				w, out = k[kvOff+j*D:kvOff+(j+1)*D], dv[kvOff+j*D+x0:kvOff+j*D+x1]
			}
			for x := range out {
				if a.Affine {
					out[x] = float32(st.a[x] - st.row(x, w))
				} else {
					out[x] = float32(st.row(x, w))
				}
			}
		}
	})
	commitR()
	commitK()
	commitV()
	return nil
}
