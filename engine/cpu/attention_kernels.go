package cpu

// Inner kernels of the attention family: dot products of one query row with
// a run of key rows, and weighted sums of a run of value (or key) rows into
// one accumulator row. Keys and values are contiguous rows of length D. Each
// kernel works on four rows at a time so that one load of the query (or
// accumulator) element serves four products, and keeps independent partial
// sums so the additions do not wait on each other.

// scoresQK sets s[n] = scale * (q . k_n) for the len(s) key rows of k.
func scoresQK(s, q, k []float32, scale float32) {
	D := len(q)
	n := 0
	for ; n+4 <= len(s); n += 4 {
		k0 := k[n*D:]
		k0 = k0[:D]
		k1 := k[(n+1)*D:]
		k1 = k1[:D]
		k2 := k[(n+2)*D:]
		k2 = k2[:D]
		k3 := k[(n+3)*D:]
		k3 = k3[:D]
		var a0, a1, a2, a3 float32
		for x, qx := range q {
			a0 += qx * k0[x]
			a1 += qx * k1[x]
			a2 += qx * k2[x]
			a3 += qx * k3[x]
		}
		s[n], s[n+1], s[n+2], s[n+3] = scale*a0, scale*a1, scale*a2, scale*a3
	}
	for ; n < len(s); n++ {
		s[n] = scale * attnDotSeq(q, k[n*D:(n+1)*D])
	}
}

// scoresQRK sets s[n] = scale * (q . k_n) and t[n] = r . k_n, reading each
// key row once for both. It takes three keys at a time: with four, the
// eight partial sums and their pointers no longer fit the registers.
func scoresQRK(s, t, q, r, k []float32, scale float32) {
	D := len(q)
	r = r[:D]
	t = t[:len(s)]
	n := 0
	for ; n+3 <= len(s); n += 3 {
		k0 := k[n*D:]
		k0 = k0[:D]
		k1 := k[(n+1)*D:]
		k1 = k1[:D]
		k2 := k[(n+2)*D:]
		k2 = k2[:D]
		var a0, a1, a2, b0, b1, b2 float32
		for x, qx := range q {
			rx := r[x]
			a0 += qx * k0[x]
			b0 += rx * k0[x]
			a1 += qx * k1[x]
			b1 += rx * k1[x]
			a2 += qx * k2[x]
			b2 += rx * k2[x]
		}
		s[n], s[n+1], s[n+2] = scale*a0, scale*a1, scale*a2
		t[n], t[n+1], t[n+2] = b0, b1, b2
	}
	for ; n < len(s); n++ {
		kn := k[n*D : (n+1)*D]
		s[n] = scale * attnDotSeq(q, kn)
		t[n] = attnDotSeq(r, kn)
	}
}

// scoresBackward sets, for the len(s) key rows of k and v,
// s[n] = scale * (q . k_n), a[n] = g . v_n and, when r is not nil (then t is
// too), t[n] = r . k_n. (Two passes of four rows at a time load less per
// product than one fused pass, which could only take two rows at a time
// before running out of registers.)
func scoresBackward(s, t, a, q, r, g, k, v []float32, scale float32) {
	if r == nil {
		scoresQK(s, q, k, scale)
	} else {
		scoresQRK(s, t, q, r, k, scale)
	}
	scoresQK(a, g, v, 1)
}

// attnDotSeq returns a . b summed in order, as the multi-row score loops
// sum each product, so that a key's score does not depend on which loop
// computed it (softmax and Parallax with r = 0 then agree bit for bit).
func attnDotSeq(a, b []float32) float32 {
	b = b[:len(a)]
	var s float32
	for i, x := range a {
		s += x * b[i]
	}
	return s
}

// attnAccum adds sum_n p[n] x_n to o, x_n the len(p) rows of x (row length
// len(o)).
func attnAccum(o, p, x []float32) {
	D := len(o)
	n := 0
	for ; n+4 <= len(p); n += 4 {
		p0, p1, p2, p3 := p[n], p[n+1], p[n+2], p[n+3]
		x0 := x[n*D:]
		x0 = x0[:D]
		x1 := x[(n+1)*D:]
		x1 = x1[:D]
		x2 := x[(n+2)*D:]
		x2 = x2[:D]
		x3 := x[(n+3)*D:]
		x3 = x3[:D]
		for c := range o {
			o[c] += p0*x0[c] + p1*x1[c] + p2*x2[c] + p3*x3[c]
		}
	}
	for ; n < len(p); n++ {
		pn := p[n]
		xn := x[n*D:]
		xn = xn[:D]
		for c := range o {
			o[c] += pn * xn[c]
		}
	}
}

// attnAccum2 adds sum_n p[n] x_n to o and sum_n u[n] x_n to w, reading each row
// of x once. Its update of o is the same expression as attnAccum's, so the two
// agree bit for bit.
func attnAccum2(o, w, p, u, x []float32) {
	D := len(o)
	w = w[:D]
	u = u[:len(p)]
	n := 0
	for ; n+4 <= len(p); n += 4 {
		p0, p1, p2, p3 := p[n], p[n+1], p[n+2], p[n+3]
		u0, u1, u2, u3 := u[n], u[n+1], u[n+2], u[n+3]
		x0 := x[n*D:]
		x0 = x0[:D]
		x1 := x[(n+1)*D:]
		x1 = x1[:D]
		x2 := x[(n+2)*D:]
		x2 = x2[:D]
		x3 := x[(n+3)*D:]
		x3 = x3[:D]
		for c := range o {
			e0, e1, e2, e3 := x0[c], x1[c], x2[c], x3[c]
			o[c] += p0*e0 + p1*e1 + p2*e2 + p3*e3
			w[c] += u0*e0 + u1*e1 + u2*e2 + u3*e3
		}
	}
	for ; n < len(p); n++ {
		pn, un := p[n], u[n]
		xn := x[n*D:]
		xn = xn[:D]
		for c := range o {
			o[c] += pn * xn[c]
			w[c] += un * xn[c]
		}
	}
}
