package ref

import (
	"math"
	"sort"

	"github.com/parallax-engine/parallax/engine"
)

// References for the non-attention ops: each is the op's formula from
// engine.Ops written out in float64 with explicit sizes, returning fresh
// slices (inputs are never modified).

// MatMul returns op(a) op(b) for batch matrices: a is [batch, m, k] (or
// [batch, k, m] with transA), b is [batch, k, n] (or [batch, n, k] with
// transB), or a single matrix shared by every batch entry if sharedB. The
// result is [batch, m, n].
func MatMul(a, b []float64, batch, m, n, k int, transA, transB, sharedB bool) []float64 {
	out := make([]float64, batch*m*n)
	for bi := range batch {
		ao := bi * m * k
		bo := bi * k * n
		if sharedB {
			bo = 0
		}
		for i := range m {
			for j := range n {
				var s float64
				for p := range k {
					var x, y float64
					if transA {
						x = a[ao+p*m+i]
					} else {
						x = a[ao+i*k+p]
					}
					if transB {
						y = b[bo+j*k+p]
					} else {
						y = b[bo+p*n+j]
					}
					s += x * y
				}
				out[bi*m*n+i*n+j] = s
			}
		}
	}
	return out
}

// Transpose returns the [cols, rows] transpose of the [rows, cols] matrix x.
func Transpose(x []float64, rows, cols int) []float64 {
	out := make([]float64, len(x))
	for i := range rows {
		for j := range cols {
			out[j*rows+i] = x[i*cols+j]
		}
	}
	return out
}

// Embedding returns the rows table[ids[n], :] of a table of width d.
func Embedding(table []float64, ids []int, d int) []float64 {
	out := make([]float64, len(ids)*d)
	for n, id := range ids {
		copy(out[n*d:(n+1)*d], table[id*d:(id+1)*d])
	}
	return out
}

// EmbeddingBackward returns the gradient of sum(Embedding(table) * dOut)
// with respect to a [v, d] table: dTable[ids[n], :] += dOut[n, :].
func EmbeddingBackward(dOut []float64, ids []int, v, d int) []float64 {
	out := make([]float64, v*d)
	for n, id := range ids {
		for j := range d {
			out[id*d+j] += dOut[n*d+j]
		}
	}
	return out
}

// RMSNorm normalises each of rows rows of width n: out = x rstd w with
// rstd = 1/sqrt(mean(x^2) + eps).
func RMSNorm(x, w []float64, rows, n int, eps float64) (out, rstd []float64) {
	out = make([]float64, rows*n)
	rstd = make([]float64, rows)
	for r := range rows {
		xr := x[r*n : (r+1)*n]
		var ss float64
		for _, v := range xr {
			ss += v * v
		}
		s := 1 / math.Sqrt(ss/float64(n)+eps)
		rstd[r] = s
		for i, v := range xr {
			out[r*n+i] = v * s * w[i]
		}
	}
	return out, rstd
}

// RMSNormBackward returns the gradients of sum(RMSNorm(x, w) * dOut): dX
// (rows x n) and dW (n), recomputing rstd from x.
func RMSNormBackward(dOut, x, w []float64, rows, n int, eps float64) (dX, dW []float64) {
	_, rstd := RMSNorm(x, w, rows, n, eps)
	dX = make([]float64, rows*n)
	dW = make([]float64, n)
	for r := range rows {
		s := rstd[r]
		var dot float64
		for i := range n {
			xh := x[r*n+i] * s
			gy := dOut[r*n+i] * w[i]
			dot += gy * xh
			dW[i] += dOut[r*n+i] * xh
		}
		mean := dot / float64(n)
		for i := range n {
			xh := x[r*n+i] * s
			dX[r*n+i] = s * (dOut[r*n+i]*w[i] - xh*mean)
		}
	}
	return dX, dW
}

// RoPE rotates the pairs (i, i + D/2) of every [D] row of x [B, H, L, D] by
// pos[l] theta^(-2i/D) (by its negative if inverse, which is the backward).
// pos holds L positions shared by every sequence, or B*L (row-major [B, L]),
// one position vector per sequence.
func RoPE(x []float64, b, h, l, d int, pos []int, theta float64, inverse bool) []float64 {
	out := make([]float64, len(x))
	half := d / 2
	for bh := range b * h {
		for li := range l {
			o := (bh*l + li) * d
			p := pos[li]
			if len(pos) == b*l && len(pos) != l {
				p = pos[bh/h*l+li] // per-sequence positions [B, L]
			}
			for i := range half {
				ang := float64(p) * math.Pow(theta, -2*float64(i)/float64(d))
				if inverse {
					ang = -ang
				}
				c, s := math.Cos(ang), math.Sin(ang)
				x1, x2 := x[o+i], x[o+i+half]
				out[o+i] = x1*c - x2*s
				out[o+i+half] = x2*c + x1*s
			}
		}
	}
	return out
}

func sigmoid(z float64) float64 { return 1 / (1 + math.Exp(-z)) }

// SwiGLU returns silu(gate) * up elementwise.
func SwiGLU(gate, up []float64) []float64 {
	out := make([]float64, len(gate))
	for i, g := range gate {
		out[i] = g * sigmoid(g) * up[i]
	}
	return out
}

// SwiGLUBackward returns the gradients of sum(SwiGLU(gate, up) * dOut).
func SwiGLUBackward(dOut, gate, up []float64) (dGate, dUp []float64) {
	dGate = make([]float64, len(gate))
	dUp = make([]float64, len(gate))
	for i, g := range gate {
		s := sigmoid(g)
		dGate[i] = dOut[i] * up[i] * s * (1 + g*(1-s))
		dUp[i] = dOut[i] * g * s
	}
	return dGate, dUp
}

// AddScaled returns alpha a + beta b.
func AddScaled(a, b []float64, alpha, beta float64) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = alpha*a[i] + beta*b[i]
	}
	return out
}

// Cast returns x as stored in a tensor of dtype to: rounded to nearest even
// for the floating dtypes, truncated toward zero for I32 (saturating at the
// int32 range, NaN as 0).
func Cast(x []float64, to engine.DType) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		if to == engine.I32 {
			switch {
			case math.IsNaN(v):
				v = 0
			case v >= math.MaxInt32:
				v = math.MaxInt32
			case v <= math.MinInt32:
				v = math.MinInt32
			}
			out[i] = math.Trunc(v)
			continue
		}
		out[i] = float64(to.Round(float32(v)))
	}
	return out
}

// SwapAxes12 returns the [a, c, b, d] transpose of x [a, b, c, d].
func SwapAxes12(x []float64, a, b, c, d int) []float64 {
	out := make([]float64, len(x))
	for ia := range a {
		for ib := range b {
			for ic := range c {
				for id := range d {
					out[((ia*c+ic)*b+ib)*d+id] = x[((ia*b+ib)*c+ic)*d+id]
				}
			}
		}
	}
	return out
}

// KVAppend returns cache [b, h, capacity, d] with x [b, h, n, d] written at
// positions start..start+n-1.
func KVAppend(cache, x []float64, b, h, capacity, n, d, start int) []float64 {
	out := append([]float64(nil), cache...)
	for bh := range b * h {
		for i := range n {
			for j := range d {
				out[(bh*capacity+start+i)*d+j] = x[(bh*n+i)*d+j]
			}
		}
	}
	return out
}

// KVAppendAt is KVAppend with sequence b's rows written at starts[b].
func KVAppendAt(cache, x []float64, b, h, capacity, n, d int, starts []int) []float64 {
	out := append([]float64(nil), cache...)
	for bh := range b * h {
		for i := range n {
			for j := range d {
				out[(bh*capacity+starts[bh/h]+i)*d+j] = x[(bh*n+i)*d+j]
			}
		}
	}
	return out
}

// CrossEntropy returns the per-row loss logsumexp(logits[r]) -
// logits[r, t_r] of logits [n, v] (0 where t_r == ignore) and dLogits =
// gradScale (softmax(logits[r]) - onehot(t_r)) (zero rows where ignored):
// CrossEntropyPadded with every column a class.
func CrossEntropy(logits []float64, targets []int, n, v, ignore int, gradScale float64) (loss, dLogits []float64) {
	return CrossEntropyPadded(logits, targets, n, v, v, ignore, gradScale)
}

// CrossEntropyPadded is CrossEntropy over rows of width w of which only the
// first c columns are classes: loss[r] = logsumexp(logits[r, :c]) -
// logits[r, t_r] (0 where t_r == ignore) and, for j < c, dLogits[r, j] =
// gradScale (softmax(logits[r, :c])_j - [j == t_r]); dLogits is 0 in the
// pad columns c <= j < w and in ignored rows. The pad logits are never
// read. Every target other than ignore must lie in [0, c).
func CrossEntropyPadded(logits []float64, targets []int, n, w, c, ignore int, gradScale float64) (loss, dLogits []float64) {
	loss = make([]float64, n)
	dLogits = make([]float64, n*w)
	for r := range n {
		t := targets[r]
		if t == ignore {
			continue
		}
		x := logits[r*w : r*w+c]
		m := math.Inf(-1)
		for _, z := range x {
			m = max(m, z)
		}
		var s float64
		for _, z := range x {
			s += math.Exp(z - m)
		}
		lse := m + math.Log(s)
		loss[r] = lse - x[t]
		var others float64 // p_t - 1 = -others, without cancellation
		for j, z := range x {
			p := math.Exp(z - lse)
			if j != t {
				others += p
				dLogits[r*w+j] = gradScale * p
			}
		}
		dLogits[r*w+t] = -gradScale * others
	}
	return loss, dLogits
}

// SumSquares returns sum x^2.
func SumSquares(x []float64) float64 {
	var s float64
	for _, v := range x {
		s += v * v
	}
	return s
}

// AdamW returns p, m and v after one AdamW step (PyTorch's order: decoupled
// decay first, then the bias-corrected update at 1-based step).
func AdamW(p, g, m, v []float64, lr, beta1, beta2, eps, wd float64, step int) (pn, mn, vn []float64) {
	pn = make([]float64, len(p))
	mn = make([]float64, len(p))
	vn = make([]float64, len(p))
	bc1 := 1 - math.Pow(beta1, float64(step))
	bc2 := 1 - math.Pow(beta2, float64(step))
	for i := range p {
		x := p[i] - lr*wd*p[i]
		mn[i] = beta1*m[i] + (1-beta1)*g[i]
		vn[i] = beta2*v[i] + (1-beta2)*g[i]*g[i]
		pn[i] = x - lr*(mn[i]/bc1)/(math.Sqrt(vn[i]/bc2)+eps)
	}
	return pn, mn, vn
}

// MuonMomentum returns the direction u = (1-beta) g + beta m' (Nesterov) or
// u = m', and the new momentum m' = beta m + (1-beta) g.
func MuonMomentum(m, g []float64, beta float64, nesterov bool) (u, mn []float64) {
	u = make([]float64, len(m))
	mn = make([]float64, len(m))
	for i := range m {
		mn[i] = beta*m[i] + (1-beta)*g[i]
		if nesterov {
			u[i] = (1-beta)*g[i] + beta*mn[i]
		} else {
			u[i] = mn[i]
		}
	}
	return u, mn
}

// FrobeniusNormalize returns x / (||x||_F + eps) for each of batch matrices
// of per elements.
func FrobeniusNormalize(x []float64, batch, per int, eps float64) []float64 {
	out := make([]float64, len(x))
	for b := range batch {
		xb := x[b*per : (b+1)*per]
		s := math.Sqrt(SumSquares(xb)) + eps
		for i, v := range xb {
			out[b*per+i] = v / s
		}
	}
	return out
}

// MuonApply returns p (1 - lr wd) - lr scale o.
func MuonApply(p, o []float64, lr, wd, scale float64) []float64 {
	out := make([]float64, len(p))
	for i := range p {
		out[i] = p[i]*(1-lr*wd) - lr*scale*o[i]
	}
	return out
}

// NewtonSchulz returns Muon's orthogonalisation of the [rows, cols] matrix
// g: X = g / (||g||_F + 1e-7), then steps times A = X X^T, B = b A + c A A,
// X = a X + B X with the quintic coefficients engine.NSA, NSB, NSC; a tall
// matrix is iterated as its transpose.
func NewtonSchulz(g []float64, rows, cols, steps int) []float64 {
	x := FrobeniusNormalize(g, 1, rows*cols, 1e-7)
	tall := rows > cols
	r, c := rows, cols
	if tall {
		x = Transpose(x, rows, cols)
		r, c = cols, rows
	}
	for range steps {
		a := MatMul(x, x, 1, r, r, c, false, true, false)
		aa := MatMul(a, a, 1, r, r, r, false, false, false)
		b := AddScaled(a, aa, engine.NSB, engine.NSC)
		bx := MatMul(b, x, 1, r, c, r, false, false, false)
		x = AddScaled(x, bx, engine.NSA, 1)
	}
	if tall {
		x = Transpose(x, r, c)
	}
	return x
}

// SymEigen returns the eigenvalues, ascending, of the symmetric n x n matrix
// a by cyclic Jacobi rotations.
func SymEigen(a []float64, n int) []float64 {
	m := append([]float64(nil), a...)
	for sweep := 0; sweep < 100; sweep++ {
		var off, total float64
		for i := range n {
			for j := range n {
				total += m[i*n+j] * m[i*n+j]
				if i != j {
					off += m[i*n+j] * m[i*n+j]
				}
			}
		}
		if off <= 1e-30*total {
			break
		}
		for p := 0; p < n; p++ {
			for q := p + 1; q < n; q++ {
				apq := m[p*n+q]
				if apq == 0 {
					continue
				}
				// Rotate rows/columns p and q so that m[p][q] becomes 0.
				theta := (m[q*n+q] - m[p*n+p]) / (2 * apq)
				t := math.Copysign(1, theta) / (math.Abs(theta) + math.Sqrt(theta*theta+1))
				c := 1 / math.Sqrt(t*t+1)
				s := t * c
				for k := range n {
					mkp, mkq := m[k*n+p], m[k*n+q]
					m[k*n+p] = c*mkp - s*mkq
					m[k*n+q] = s*mkp + c*mkq
				}
				for k := range n {
					mpk, mqk := m[p*n+k], m[q*n+k]
					m[p*n+k] = c*mpk - s*mqk
					m[q*n+k] = s*mpk + c*mqk
				}
			}
		}
	}
	ev := make([]float64, n)
	for i := range n {
		ev[i] = m[i*n+i]
	}
	sort.Float64s(ev)
	return ev
}

// SingularValues returns the min(rows, cols) singular values, ascending, of
// the [rows, cols] matrix x, as square roots of the eigenvalues of its
// smaller Gram matrix.
func SingularValues(x []float64, rows, cols int) []float64 {
	var g []float64
	k := min(rows, cols)
	if rows <= cols {
		g = MatMul(x, x, 1, rows, rows, cols, false, true, false)
	} else {
		g = MatMul(x, x, 1, cols, cols, rows, true, false, false)
	}
	ev := SymEigen(g, k)
	for i, v := range ev {
		ev[i] = math.Sqrt(max(v, 0))
	}
	return ev
}
