package ref

import "math"

// The attention family in its most direct form: every row materialises its
// probabilities over all visible keys, and every formula is written as in
// docs/MATH.md, with no streaming and no shared code with the
// backends. Layouts: q and r [B, Hq, Lq, D], k and v [B, Hkv, Lk, D].

func (d Dims) qRow(x []float64, b, h, i int) []float64 {
	o := ((b*d.Hq+h)*d.Lq + i) * d.D
	return x[o : o+d.D]
}

func (d Dims) kRow(x []float64, b, h, j int) []float64 {
	o := ((b*d.Hkv+h)*d.Lk + j) * d.D
	return x[o : o+d.D]
}

func (d Dims) rowStat(b, h, i int) int { return (b*d.Hq+h)*d.Lq + i }

func attnDot(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

func attnAxpy(y []float64, a float64, x []float64) {
	for i := range y {
		y[i] += a * x[i]
	}
}

// attnSoftmaxRow returns the visible key range of query (b, h, i) and the
// probabilities p[j-lo] = softmax_j(scale q.k_j) with the row's log-sum-exp.
// An empty range gives lse = -Inf.
func attnSoftmaxRow(d Dims, q, k []float64, b, h, i int) (lo, hi int, p []float64, lse float64) {
	lo, hi = d.Visible(i)
	if hi <= lo {
		return lo, lo, nil, math.Inf(-1)
	}
	qi := d.qRow(q, b, h, i)
	hk := h / d.G()
	p = make([]float64, hi-lo)
	m := math.Inf(-1)
	for j := lo; j < hi; j++ {
		p[j-lo] = d.Scale * attnDot(qi, d.kRow(k, b, hk, j))
		m = max(m, p[j-lo])
	}
	var z float64
	for n := range p {
		p[n] = math.Exp(p[n] - m)
		z += p[n]
	}
	for n := range p {
		p[n] /= z
	}
	return lo, hi, p, m + math.Log(z)
}

// Attention is softmax attention (r == nil) or Parallax attention. It returns
// o [B, Hq, Lq, D], vbar = sum_j p v (the softmax output), tbar = sum_j p t
// with t = r.k (zeros for softmax) and the per-row log-sum-exp of the scaled
// scores. o is computed as sum_j p_ij (1 + tbar_i - t_ij) v_j.
func Attention(d Dims, q, k, v, r []float64) (o, vbar, tbar, lse []float64) {
	rows := d.B * d.Hq * d.Lq
	o = make([]float64, rows*d.D)
	vbar = make([]float64, rows*d.D)
	tbar = make([]float64, rows)
	lse = make([]float64, rows)
	for b := 0; b < d.B; b++ {
		for h := 0; h < d.Hq; h++ {
			hk := h / d.G()
			for i := 0; i < d.Lq; i++ {
				lo, hi, p, l := attnSoftmaxRow(d, q, k, b, h, i)
				n := d.rowStat(b, h, i)
				lse[n] = l
				t := make([]float64, len(p))
				if r != nil {
					ri := d.qRow(r, b, h, i)
					for j := lo; j < hi; j++ {
						t[j-lo] = attnDot(ri, d.kRow(k, b, hk, j))
						tbar[n] += p[j-lo] * t[j-lo]
					}
				}
				oi, vi := d.qRow(o, b, h, i), d.qRow(vbar, b, h, i)
				for j := lo; j < hi; j++ {
					vj := d.kRow(v, b, hk, j)
					attnAxpy(vi, p[j-lo], vj)
					attnAxpy(oi, p[j-lo]*(1+tbar[n]-t[j-lo]), vj)
				}
			}
		}
	}
	return o, vbar, tbar, lse
}

// AttentionBackward returns the gradients of L = sum(o * dO) for Attention
// (dr is nil when r is), by the direct formulas of docs/MATH.md section 4:
// dS = p (a - T + (tbar - t)(a - Bv)), dT = -p (a - Bv) with a = g.v,
// T = g.o, Bv = g.vbar; dq = scale sum dS k, dr = sum dT k,
// dk = sum (scale dS q + dT r), dv = sum p (1 + tbar - t) g.
func AttentionBackward(d Dims, q, k, v, r, dO []float64) (dq, dk, dv, dr []float64) {
	o, vbar, tbar, _ := Attention(d, q, k, v, r)
	dq = make([]float64, len(q))
	dk = make([]float64, len(k))
	dv = make([]float64, len(v))
	if r != nil {
		dr = make([]float64, len(r))
	}
	for b := 0; b < d.B; b++ {
		for h := 0; h < d.Hq; h++ {
			hk := h / d.G()
			for i := 0; i < d.Lq; i++ {
				lo, hi, p, _ := attnSoftmaxRow(d, q, k, b, h, i)
				g := d.qRow(dO, b, h, i)
				qi := d.qRow(q, b, h, i)
				T := attnDot(g, d.qRow(o, b, h, i))
				Bv := attnDot(g, d.qRow(vbar, b, h, i))
				tb := tbar[d.rowStat(b, h, i)]
				for j := lo; j < hi; j++ {
					pj := p[j-lo]
					kj, vj := d.kRow(k, b, hk, j), d.kRow(v, b, hk, j)
					a := attnDot(g, vj)
					var t float64
					if r != nil {
						t = attnDot(d.qRow(r, b, h, i), kj)
					}
					// Softmax has no (tbar - t)(a - Bv) term at all (not
					// 0 times it: an infinite a - Bv would make that NaN).
					dS := pj * (a - T)
					if r != nil {
						dS = pj * (a - T + (tb-t)*(a-Bv))
					}
					attnAxpy(d.qRow(dq, b, h, i), d.Scale*dS, kj)
					attnAxpy(d.kRow(dk, b, hk, j), d.Scale*dS, qi)
					attnAxpy(d.kRow(dv, b, hk, j), pj*(1+tb-t), g)
					if r != nil {
						dT := -pj * (a - Bv)
						attnAxpy(d.qRow(dr, b, h, i), dT, kj)
						attnAxpy(d.kRow(dk, b, hk, j), dT, d.qRow(r, b, h, i))
					}
				}
			}
		}
	}
	return dq, dk, dv, dr
}

// attnRowMoments returns, for query (b, h, i) under the softmax weights p over
// its visible keys, kbar = sum p k, vbar = sum p v and the explicit matrices
// Sigma_KV = sum p (v - vbar)(k - kbar)^T and Sigma_KK = sum p (k - kbar)(k -
// kbar)^T (D x D, row-major). ok is false for a row with no visible key.
func attnRowMoments(d Dims, q, k, v []float64, b, h, i int) (kbar, vbar, sKV, sKK []float64, ok bool) {
	lo, hi, p, _ := attnSoftmaxRow(d, q, k, b, h, i)
	if hi <= lo {
		return nil, nil, nil, nil, false
	}
	D, hk := d.D, h/d.G()
	kbar, vbar = make([]float64, D), make([]float64, D)
	for j := lo; j < hi; j++ {
		attnAxpy(kbar, p[j-lo], d.kRow(k, b, hk, j))
		attnAxpy(vbar, p[j-lo], d.kRow(v, b, hk, j))
	}
	sKV, sKK = make([]float64, D*D), make([]float64, D*D)
	dk, dv := make([]float64, D), make([]float64, D)
	for j := lo; j < hi; j++ {
		kj, vj := d.kRow(k, b, hk, j), d.kRow(v, b, hk, j)
		for x := range D {
			dk[x], dv[x] = kj[x]-kbar[x], vj[x]-vbar[x]
		}
		for x := range D {
			for y := range D {
				sKV[x*D+y] += p[j-lo] * dv[x] * dk[y]
				sKK[x*D+y] += p[j-lo] * dk[x] * dk[y]
			}
		}
	}
	return kbar, vbar, sKV, sKK, true
}

func attnMatVec(m []float64, x []float64) []float64 {
	n := len(x)
	y := make([]float64, n)
	for a := range n {
		y[a] = attnDot(m[a*n:(a+1)*n], x)
	}
	return y
}

// SigmaKVForm is Parallax attention computed as o = o_SA - Sigma_KV r with
// the D x D matrix Sigma_KV formed explicitly per row (docs/MATH.md section 2).
func SigmaKVForm(d Dims, q, k, v, r []float64) []float64 {
	o := make([]float64, d.B*d.Hq*d.Lq*d.D)
	for b := 0; b < d.B; b++ {
		for h := 0; h < d.Hq; h++ {
			for i := 0; i < d.Lq; i++ {
				_, vbar, sKV, _, ok := attnRowMoments(d, q, k, v, b, h, i)
				if !ok {
					continue
				}
				c := attnMatVec(sKV, d.qRow(r, b, h, i))
				oi := d.qRow(o, b, h, i)
				for x := range oi {
					oi[x] = vbar[x] - c[x]
				}
			}
		}
	}
	return o
}

// solveDense solves the n x n system a x = rhs (a row-major) by Gaussian
// elimination with partial pivoting, in float64. ok is false when a is
// singular to working precision. a and rhs are not modified.
func solveDense(a []float64, rhs []float64) (x []float64, ok bool) {
	n := len(rhs)
	m := append([]float64(nil), a...)
	x = append([]float64(nil), rhs...)
	var scale float64
	for _, e := range m {
		scale = max(scale, math.Abs(e))
	}
	for c := 0; c < n; c++ {
		piv := c
		for r := c + 1; r < n; r++ {
			if math.Abs(m[r*n+c]) > math.Abs(m[piv*n+c]) {
				piv = r
			}
		}
		if math.Abs(m[piv*n+c]) <= 1e-14*scale || scale == 0 {
			return nil, false
		}
		if piv != c {
			for y := range n {
				m[c*n+y], m[piv*n+y] = m[piv*n+y], m[c*n+y]
			}
			x[c], x[piv] = x[piv], x[c]
		}
		for r := c + 1; r < n; r++ {
			f := m[r*n+c] / m[c*n+c]
			if f == 0 {
				continue
			}
			for y := c; y < n; y++ {
				m[r*n+y] -= f * m[c*n+y]
			}
			x[r] -= f * x[c]
		}
	}
	for c := n - 1; c >= 0; c-- {
		s := x[c]
		for y := c + 1; y < n; y++ {
			s -= m[c*n+y] * x[y]
		}
		x[c] = s / m[c*n+c]
	}
	return x, true
}

// LLA is exact local linear attention (docs/MATH.md section 5) by a dense solve per
// row: w = exp(s - m), omega = sum w, mu = sum w (k - q),
// Sig = sum w (k - q)(k - q)^T + lambda omega I, rho* = Sig^-1 mu and
// o = sum w (1 - rho*.(k - q)) v / (omega - mu.rho*). eta is computed
// directly as (kbar - q)^T (Sigma_KK + lambda I)^-1 (kbar - q). Rows whose
// system is singular get NaN.
func LLA(d Dims, q, k, v []float64, lambda float64) (o, rhoStar, eta []float64) {
	D := d.D
	rows := d.B * d.Hq * d.Lq
	o = make([]float64, rows*D)
	rhoStar = make([]float64, rows*D)
	eta = make([]float64, rows)
	for b := 0; b < d.B; b++ {
		for h := 0; h < d.Hq; h++ {
			hk := h / d.G()
			for i := 0; i < d.Lq; i++ {
				lo, hi, p, _ := attnSoftmaxRow(d, q, k, b, h, i)
				if hi <= lo {
					continue
				}
				qi := d.qRow(q, b, h, i)
				// w = p * omega with any omega > 0; rho* and o do not
				// depend on it. Use the unnormalised exp(s - m) of the spec.
				pmax := 0.0
				for _, x := range p {
					pmax = max(pmax, x)
				}
				var omega float64
				w := make([]float64, len(p))
				for n := range p {
					w[n] = p[n] / pmax
					omega += w[n]
				}
				mu := make([]float64, D)
				sig := make([]float64, D*D)
				dk := make([]float64, D)
				for j := lo; j < hi; j++ {
					kj := d.kRow(k, b, hk, j)
					for x := range D {
						dk[x] = kj[x] - qi[x]
					}
					attnAxpy(mu, w[j-lo], dk)
					for x := range D {
						for y := range D {
							sig[x*D+y] += w[j-lo] * dk[x] * dk[y]
						}
					}
				}
				for x := range D {
					sig[x*D+x] += lambda * omega
				}
				n := d.rowStat(b, h, i)
				oi := d.qRow(o, b, h, i)
				rho, ok := solveDense(sig, mu)
				if !ok {
					for x := range oi {
						oi[x] = math.NaN()
					}
					eta[n] = math.NaN()
					continue
				}
				copy(d.qRow(rhoStar, b, h, i), rho)
				den := omega - attnDot(mu, rho)
				for j := lo; j < hi; j++ {
					kj := d.kRow(k, b, hk, j)
					for x := range D {
						dk[x] = kj[x] - qi[x]
					}
					attnAxpy(oi, w[j-lo]*(1-attnDot(rho, dk))/den, d.kRow(v, b, hk, j))
				}
				kbar, _, _, sKK, _ := attnRowMoments(d, q, k, v, b, h, i)
				for x := range D {
					sKK[x*D+x] += lambda
					dk[x] = kbar[x] - qi[x]
				}
				if y, ok := solveDense(sKK, dk); ok {
					eta[n] = attnDot(dk, y)
				} else {
					eta[n] = math.NaN()
				}
			}
		}
	}
	return o, rhoStar, eta
}

// LLAClosedForm is LLA written as o = vbar + Sigma_KV (Sigma_KK + lambda I)^-1
// (q - kbar), with the moments of the normalised softmax weights.
func LLAClosedForm(d Dims, q, k, v []float64, lambda float64) []float64 {
	D := d.D
	o := make([]float64, d.B*d.Hq*d.Lq*D)
	for b := 0; b < d.B; b++ {
		for h := 0; h < d.Hq; h++ {
			for i := 0; i < d.Lq; i++ {
				kbar, vbar, sKV, sKK, ok := attnRowMoments(d, q, k, v, b, h, i)
				if !ok {
					continue
				}
				qi := d.qRow(q, b, h, i)
				delta := make([]float64, D)
				for x := range D {
					sKK[x*D+x] += lambda
					delta[x] = qi[x] - kbar[x]
				}
				oi := d.qRow(o, b, h, i)
				y, ok := solveDense(sKK, delta)
				if !ok {
					for x := range oi {
						oi[x] = math.NaN()
					}
					continue
				}
				c := attnMatVec(sKV, y)
				for x := range oi {
					oi[x] = vbar[x] + c[x]
				}
			}
		}
	}
	return o
}

// LinearAttention is the uniform-weight branch of the family with probe r
// (layout of q). Plain: o_i = sum_j (r_i.k_j) v_j over the visible j.
// Affine: with n_i visible keys, kbar and vbar their means and
// Sigma_KV = (1/n) sum (v_j - vbar)(k_j - kbar)^T, o_i = vbar - Sigma_KV r_i.
// Rows with no visible key are 0.
func LinearAttention(d Dims, r, k, v []float64, affine bool) []float64 {
	D := d.D
	o := make([]float64, d.B*d.Hq*d.Lq*D)
	for b := 0; b < d.B; b++ {
		for h := 0; h < d.Hq; h++ {
			hk := h / d.G()
			for i := 0; i < d.Lq; i++ {
				lo, hi := d.Visible(i)
				if hi <= lo {
					continue
				}
				ri, oi := d.qRow(r, b, h, i), d.qRow(o, b, h, i)
				if !affine {
					for j := lo; j < hi; j++ {
						attnAxpy(oi, attnDot(ri, d.kRow(k, b, hk, j)), d.kRow(v, b, hk, j))
					}
					continue
				}
				kbar, vbar := linUniformMeans(d, k, v, b, hk, lo, hi)
				copy(oi, vbar)
				inv := 1 / float64(hi-lo)
				for j := lo; j < hi; j++ {
					kj, vj := d.kRow(k, b, hk, j), d.kRow(v, b, hk, j)
					var c float64
					for x := range D {
						c += (kj[x] - kbar[x]) * ri[x]
					}
					for x := range D {
						oi[x] -= inv * c * (vj[x] - vbar[x])
					}
				}
			}
		}
	}
	return o
}

func linUniformMeans(d Dims, k, v []float64, b, hk, lo, hi int) (kbar, vbar []float64) {
	kbar, vbar = make([]float64, d.D), make([]float64, d.D)
	inv := 1 / float64(hi-lo)
	for j := lo; j < hi; j++ {
		attnAxpy(kbar, inv, d.kRow(k, b, hk, j))
		attnAxpy(vbar, inv, d.kRow(v, b, hk, j))
	}
	return kbar, vbar
}

// LinearAttentionBackward returns the gradients of L = sum(o * dO) for
// LinearAttention, summed over the query heads of each GQA group. Plain:
// dr_i = sum_j (g_i.v_j) k_j, dk_j = sum_i (g_i.v_j) r_i,
// dv_j = sum_i (r_i.k_j) g_i. Affine (n_i, kbar_i, vbar_i of row i):
// dr_i = -(1/n_i) sum_j ((v_j - vbar_i).g_i) (k_j - kbar_i),
// dk_j = sum_i (1/n_i) (g_i.(vbar_i - v_j)) r_i,
// dv_j = sum_i (1/n_i) (1 - (k_j - kbar_i).r_i) g_i.
func LinearAttentionBackward(d Dims, r, k, v, dO []float64, affine bool) (dr, dk, dv []float64) {
	D := d.D
	dr = make([]float64, len(r))
	dk = make([]float64, len(k))
	dv = make([]float64, len(v))
	for b := 0; b < d.B; b++ {
		for h := 0; h < d.Hq; h++ {
			hk := h / d.G()
			for i := 0; i < d.Lq; i++ {
				lo, hi := d.Visible(i)
				if hi <= lo {
					continue
				}
				ri, gi, dri := d.qRow(r, b, h, i), d.qRow(dO, b, h, i), d.qRow(dr, b, h, i)
				if !affine {
					for j := lo; j < hi; j++ {
						kj, vj := d.kRow(k, b, hk, j), d.kRow(v, b, hk, j)
						a := attnDot(gi, vj)
						attnAxpy(dri, a, kj)
						attnAxpy(d.kRow(dk, b, hk, j), a, ri)
						attnAxpy(d.kRow(dv, b, hk, j), attnDot(ri, kj), gi)
					}
					continue
				}
				kbar, vbar := linUniformMeans(d, k, v, b, hk, lo, hi)
				inv := 1 / float64(hi-lo)
				gv := attnDot(gi, vbar)
				for j := lo; j < hi; j++ {
					kj, vj := d.kRow(k, b, hk, j), d.kRow(v, b, hk, j)
					a := attnDot(gi, vj)
					for x := range D {
						dri[x] -= inv * (a - gv) * (kj[x] - kbar[x])
					}
					attnAxpy(d.kRow(dk, b, hk, j), inv*(gv-a), ri)
					var c float64
					for x := range D {
						c += (kj[x] - kbar[x]) * ri[x]
					}
					attnAxpy(d.kRow(dv, b, hk, j), inv*(1-c), gi)
				}
			}
		}
	}
	return dr, dk, dv
}

// DecodeAttention is attention over KV caches kc, vc [B, Hkv, cap, D] whose
// sequence b holds lens[b] valid entries: query i of Lq attends causally to
// keys j <= i + lens[b] - Lq (and j > i + lens[b] - Lq - Window when
// d.Window > 0). d gives B, Hq, Hkv, Lq, D, Scale and Window; d.Lk and
// d.Causal are ignored. r nil is softmax attention.
func DecodeAttention(d Dims, q, r, kc, vc []float64, capacity int, lens []int) []float64 {
	D := d.D
	o := make([]float64, d.B*d.Hq*d.Lq*D)
	per := d.Hq * d.Lq * D
	for b := 0; b < d.B; b++ {
		n := lens[b]
		db := Dims{B: 1, Hq: d.Hq, Hkv: d.Hkv, Lq: d.Lq, Lk: n, D: D, Scale: d.Scale, Causal: true, Window: d.Window}
		kb, vb := make([]float64, d.Hkv*n*D), make([]float64, d.Hkv*n*D)
		for h := 0; h < d.Hkv; h++ {
			src := ((b*d.Hkv + h) * capacity) * D
			copy(kb[h*n*D:(h+1)*n*D], kc[src:src+n*D])
			copy(vb[h*n*D:(h+1)*n*D], vc[src:src+n*D])
		}
		var rb []float64
		if r != nil {
			rb = r[b*per : (b+1)*per]
		}
		ob, _, _, _ := Attention(db, q[b*per:(b+1)*per], kb, vb, rb)
		copy(o[b*per:(b+1)*per], ob)
	}
	return o
}

// CorrectionRatio is the mean over rows (length D) of ||vbar - o|| / ||vbar||,
// rows with vbar = 0 counting 0.
func CorrectionRatio(o, vbar []float64, D int) float64 {
	rows := len(o) / D
	if rows == 0 {
		return 0
	}
	var sum float64
	for n := range rows {
		var num, den float64
		for x := n * D; x < (n+1)*D; x++ {
			num += (vbar[x] - o[x]) * (vbar[x] - o[x])
			den += vbar[x] * vbar[x]
		}
		if den > 0 {
			sum += math.Sqrt(num / den)
		}
	}
	return sum / float64(rows)
}
