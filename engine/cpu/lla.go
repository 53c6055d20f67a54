package cpu

import (
	"fmt"
	"math"

	"github.com/parallax-engine/parallax/engine"
)

// LLA is exact local linear attention (docs/MATH.md section 5), one query row per
// work item, in float64 throughout (the inputs are widened; O(Lk D + D^2)
// scratch per worker). Per row: w = exp(s - m) over the visible keys,
// omega = sum w, mu = sum w (k - q), Sig = sum w (k - q)(k - q)^T +
// lambda omega I, rho* = Sig^-1 mu, o = sum w (1 - rho*.(k - q)) v / den with
// den = omega - mu.rho*. eta = mu.rho* / den: with delta = kbar - q and
// A = Sigma_KK + lambda I, Sig/omega = A + delta delta^T, so by
// Sherman-Morrison rho* = A^-1 delta / (1 + eta) and delta.rho* =
// eta / (1 + eta).
//
// The solvers: SolveCG runs conjugate gradients from rho = 0 until
// ||mu - Sig rho|| <= Tol ||mu|| or MaxIter iterations (then the last
// iterate is used, as a fixed-iteration GPU kernel would). SolveDirect is a
// Cholesky factorisation.
//
// Singular systems: with lambda = 0, a row that sees at most D keys has a
// singular Sig and no defined output (the local linear fit through its keys
// has no unique intercept: den = 0); LLA reports such a row as an error
// before computing anything, rather than return arbitrary values. Otherwise
// SolveDirect reports any row whose Sig is not positive definite to working
// precision (a pivot <= 1e-13 of the largest diagonal entry). SolveCG on a
// singular but consistent system converges to the minimum-norm solution;
// every solution gives the same o as long as den > 0, so CG reports a row
// only when den <= 1e-9 omega (eta > 1e9: the query lies outside the span
// of its keys' differences) or the output is not finite. Errors name the
// row and are also returned by Sync; no output is written then.
func (d *Device) LLA(a engine.LLAArgs) error {
	dims, err := engine.CheckLLA(d.own, a)
	if err != nil {
		return err
	}
	if err := engine.CheckLLASolvable(dims, a.Lambda); err != nil {
		return d.fail(err)
	}
	tol, maxIter := a.CGLimits(dims.D)
	q, k, v := floats(a.Q), floats(a.K), floats(a.V)
	rows, D := dims.B*dims.Hq*dims.Lq, dims.D
	// Results are buffered and stored only when every row succeeded.
	res := make([]float32, rows*D)
	var rho, eta []float32
	if a.RhoStar != nil {
		rho = make([]float32, rows*D)
	}
	if a.Eta != nil {
		eta = make([]float32, rows)
	}
	// Each worker keeps the first failing row it met; the error reported is
	// that of the lowest row, whatever the scheduling.
	errs := make([]error, max(d.threads, 1))
	errRow := make([]int, len(errs))
	type llaWorker struct {
		id                 int
		s, sig, chol       []float64
		mu, dk, x, r, p, u []float64
		o                  []float64
	}
	attnDynamic(d, rows, func(id int) *llaWorker {
		return &llaWorker{o: make([]float64, D), id: id, s: make([]float64, dims.Lk), sig: make([]float64, D*D), chol: make([]float64, D*D),
			mu: make([]float64, D), dk: make([]float64, D), x: make([]float64, D), r: make([]float64, D),
			p: make([]float64, D), u: make([]float64, D)}
	}, func(w *llaWorker, row int) {
		if errs[w.id] != nil {
			return
		}
		fail := func(err error) {
			errs[w.id], errRow[w.id] = err, row
		}
		i := row % dims.Lq
		bh := row / dims.Lq
		b, h := bh/dims.Hq, bh%dims.Hq
		hk := h / dims.G
		lo, hi := dims.Visible(i)
		qi := q[row*D : (row+1)*D]
		kh := k[(b*dims.Hkv+hk)*dims.Lk*D:]
		vh := v[(b*dims.Hkv+hk)*dims.Lk*D:]
		oi := w.o
		if hi <= lo {
			return
		}
		// Weights.
		s := w.s[:hi-lo]
		m := math.Inf(-1)
		for j := lo; j < hi; j++ {
			s[j-lo] = float64(dims.Scale) * llaDotF(qi, kh[j*D:(j+1)*D])
			m = max(m, s[j-lo])
		}
		var omega float64
		for n := range s {
			s[n] = math.Exp(s[n] - m)
			omega += s[n]
		}
		// mu and Sig (upper triangle, then mirrored).
		clear(w.mu)
		clear(w.sig)
		for j := lo; j < hi; j++ {
			wj := s[j-lo]
			kj := kh[j*D : (j+1)*D]
			for x := range D {
				w.dk[x] = float64(kj[x]) - float64(qi[x])
			}
			for x := range D {
				c := wj * w.dk[x]
				w.mu[x] += c
				row := w.sig[x*D : (x+1)*D]
				dk := w.dk[x:D]
				row = row[x:D]
				for y := range row {
					row[y] += c * dk[y]
				}
			}
		}
		for x := range D {
			w.sig[x*D+x] += float64(a.Lambda) * omega
			for y := x + 1; y < D; y++ {
				w.sig[y*D+x] = w.sig[x*D+y]
			}
		}
		// Solve Sig rho = mu.
		if a.Solver == engine.SolveDirect {
			if !llaCholesky(w.chol, w.sig, D) {
				fail(llaRowErr(b, h, i, hi-lo, D, a.Lambda, "Sig is not positive definite (singular to working precision)"))
				return
			}
			llaCholSolve(w.x, w.chol, w.mu, D)
		} else {
			llaCG(w.x, w.sig, w.mu, w.r, w.p, w.u, D, tol, maxIter)
		}
		den := omega - llaDot(w.mu, w.x)
		if !(den > llaMinDen*omega) {
			fail(llaRowErr(b, h, i, hi-lo, D, a.Lambda, fmt.Sprintf(
				"omega - mu.rho* = %.3g: Sig is singular and the query lies outside the span of its keys (eta unbounded)", den)))
			return
		}
		var qr float64
		for x := range D {
			qr += w.x[x] * float64(qi[x])
		}
		clear(oi)
		for j := lo; j < hi; j++ {
			kj := kh[j*D : (j+1)*D]
			var rk float64
			for x, kx := range kj {
				rk += w.x[x] * float64(kx)
			}
			c := s[j-lo] * (1 - (rk - qr)) / den
			vj := vh[j*D : (j+1)*D]
			for x, vx := range vj {
				oi[x] += c * float64(vx)
			}
		}
		for _, x := range oi {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				fail(llaRowErr(b, h, i, hi-lo, D, a.Lambda, "the output is not finite (Sig is near singular)"))
				return
			}
		}
		for x, ox := range oi {
			res[row*D+x] = float32(ox)
		}
		if rho != nil {
			for x := range D {
				rho[row*D+x] = float32(w.x[x])
			}
		}
		if eta != nil {
			eta[row] = float32((omega - den) / den)
		}
	})
	first := -1
	for n, err := range errs {
		if err != nil && (first < 0 || errRow[n] < errRow[first]) {
			first = n
		}
	}
	if first >= 0 {
		return d.fail(errs[first])
	}
	store(a.O, res)
	if rho != nil {
		store(a.RhoStar, rho)
	}
	if eta != nil {
		store(a.Eta, eta)
	}
	return nil
}

// llaMinDen bounds den/omega = 1/(1 + eta) from below: a row with
// eta > 1e9 is treated as singular (an exactly singular system leaves den at
// rounding level, 1e-16 omega).
const llaMinDen = 1e-9

func llaRowErr(b, h, i, n, D int, lambda float32, msg string) error {
	return &engine.ArgError{Op: "lla", Msg: fmt.Sprintf("row (b %d, head %d, position %d; %d visible keys, D %d, lambda %g): %s",
		b, h, i, n, D, lambda, msg)}
}

func llaDotF(a, b []float32) float64 {
	b = b[:len(a)]
	var s float64
	for i, x := range a {
		s += float64(x) * float64(b[i])
	}
	return s
}

func llaDot(a, b []float64) float64 {
	b = b[:len(a)]
	var s float64
	for i, x := range a {
		s += x * b[i]
	}
	return s
}

// llaCG solves the symmetric positive (semi)definite system a x = b (n x n,
// row-major) by conjugate gradients from x = 0, stopping when
// ||b - a x|| <= tol ||b|| or after maxIter iterations. r, p, u are scratch.
func llaCG(x, a, b, r, p, u []float64, n int, tol float64, maxIter int) {
	clear(x)
	copy(r, b)
	copy(p, b)
	rr := llaDot(r, r)
	stop := tol * tol * rr
	for it := 0; it < maxIter && rr > stop; it++ {
		for i := range n {
			u[i] = llaDot(a[i*n:(i+1)*n], p)
		}
		pu := llaDot(p, u)
		if !(pu > 0) {
			break // p lies in the null space: nothing left to reduce
		}
		alpha := rr / pu
		for i := range n {
			x[i] += alpha * p[i]
			r[i] -= alpha * u[i]
		}
		rrNew := llaDot(r, r)
		beta := rrNew / rr
		rr = rrNew
		for i := range n {
			p[i] = r[i] + beta*p[i]
		}
	}
}

// llaCholesky factors the symmetric positive definite a (n x n, row-major)
// into the lower-triangular l with a = l l^T. It reports false when a pivot
// is not above 1e-13 times the largest diagonal entry.
func llaCholesky(l, a []float64, n int) bool {
	var dmax float64
	for i := range n {
		dmax = max(dmax, a[i*n+i])
	}
	floor := 1e-13 * dmax
	if !(dmax > 0) {
		return false
	}
	clear(l)
	for j := range n {
		s := a[j*n+j] - llaDot(l[j*n:j*n+j], l[j*n:j*n+j])
		if !(s > floor) {
			return false
		}
		ljj := math.Sqrt(s)
		l[j*n+j] = ljj
		for i := j + 1; i < n; i++ {
			l[i*n+j] = (a[i*n+j] - llaDot(l[i*n:i*n+j], l[j*n:j*n+j])) / ljj
		}
	}
	return true
}

// llaCholSolve solves l l^T x = b.
func llaCholSolve(x, l, b []float64, n int) {
	for i := range n {
		x[i] = (b[i] - llaDot(l[i*n:i*n+i], x[:i])) / l[i*n+i]
	}
	for i := n - 1; i >= 0; i-- {
		s := x[i]
		for j := i + 1; j < n; j++ {
			s -= l[j*n+i] * x[j]
		}
		x[i] = s / l[i*n+i]
	}
}
