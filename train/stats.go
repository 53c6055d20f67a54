package train

import (
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/model"
)

// StableRank is ||W||_F^2 / ||W||_2^2 of the rows x cols row-major matrix
// w: between 1 (rank one) and min(rows, cols) (all singular values equal).
// The spectral norm comes from power iteration on W^T W in float64.
func StableRank(w []float32, rows, cols int) float64 {
	fro := 0.0
	for _, v := range w {
		fro += float64(v) * float64(v)
	}
	if fro == 0 {
		return 0
	}
	apply := func(dst, v []float64) { // dst = W^T W v
		tmp := make([]float64, rows)
		for i := range rows {
			s := 0.0
			row := w[i*cols : (i+1)*cols]
			for j, x := range row {
				s += float64(x) * v[j]
			}
			tmp[i] = s
		}
		clear(dst)
		for i := range rows {
			row := w[i*cols : (i+1)*cols]
			for j, x := range row {
				dst[j] += float64(x) * tmp[i]
			}
		}
	}
	return fro / topEigen(cols, apply)
}

// CircuitStableRank is the stable rank of the d x d matrix M = A^T B for
// A, B of shape [D, d] (row-major), computed without forming M:
// ||M||_F^2 = sum (A A^T) .* (B B^T) and ||M||_2^2 = the top eigenvalue of
// M^T M = B^T A A^T B, applied as four thin products.
func CircuitStableRank(a, b []float32, dh, d int) float64 {
	gram := func(x []float32) []float64 {
		g := make([]float64, dh*dh)
		for i := range dh {
			for j := range dh {
				s := 0.0
				for k := range d {
					s += float64(x[i*d+k]) * float64(x[j*d+k])
				}
				g[i*dh+j] = s
			}
		}
		return g
	}
	ga, gb := gram(a), gram(b)
	fro := 0.0
	for i := range ga {
		fro += ga[i] * gb[i]
	}
	if fro <= 0 {
		return 0
	}
	mul := func(dst []float64, x []float32, v []float64) { // dst[D] = X v
		for i := range dh {
			s := 0.0
			for k := range d {
				s += float64(x[i*d+k]) * v[k]
			}
			dst[i] = s
		}
	}
	mulT := func(dst []float64, x []float32, u []float64) { // dst[d] = X^T u
		clear(dst)
		for i := range dh {
			for k := range d {
				dst[k] += float64(x[i*d+k]) * u[i]
			}
		}
	}
	u, t := make([]float64, dh), make([]float64, d)
	apply := func(dst, v []float64) { // dst = B^T A A^T B v
		mul(u, b, v)
		mulT(t, a, u)
		mul(u, a, t)
		mulT(dst, b, u)
	}
	return fro / topEigen(d, apply)
}

// topEigen returns the largest eigenvalue of a symmetric positive
// semi-definite operator on R^n by power iteration from a fixed start.
func topEigen(n int, apply func(dst, v []float64)) float64 {
	v, w := make([]float64, n), make([]float64, n)
	for i := range v {
		v[i] = 1 + 0.01*float64(i%7) // fixed, not orthogonal to a generic top vector
	}
	normalize(v)
	lam := 0.0
	for it := range 200 {
		apply(w, v)
		next := 0.0
		for i := range w {
			next += w[i] * v[i] // Rayleigh quotient
		}
		if normalize(w) == 0 {
			return lam
		}
		v, w = w, v
		if it > 5 && math.Abs(next-lam) <= 1e-9*math.Abs(next) {
			return next
		}
		lam = next
	}
	return lam
}

func normalize(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x * x
	}
	s = math.Sqrt(s)
	if s == 0 {
		return 0
	}
	for i := range v {
		v[i] /= s
	}
	return s
}

// LayerRanks are the stable ranks of one layer's attention weights.
type LayerRanks struct {
	Q, K, R float64
	// Circuit is the stable rank of W_R,h^T W_K,g (d x d) for each query
	// head h and its key/value head g = h / (Hq/Hkv): the bilinear form the
	// probe scores r.k apply to the residual stream.
	Circuit []float64
}

// StableRanks computes the stable ranks of every layer's W_Q, W_K and (for
// a Parallax model) W_R and the per-head W_R^T W_K circuits on the host.
// The weights are read from the device one after another; the layers'
// power iterations then run in parallel.
func StableRanks(m *model.Model) ([]LayerRanks, error) {
	c := m.Config
	type weights struct{ q, k, r []float32 }
	ws := make([]weights, c.Layers)
	for l := range ws {
		b := &m.Blocks[l]
		var err error
		if ws[l].q, err = engine.Float32s(b.Q.W); err != nil {
			return nil, fmt.Errorf("stable rank: %w", err)
		}
		if ws[l].k, err = engine.Float32s(b.K.W); err != nil {
			return nil, fmt.Errorf("stable rank: %w", err)
		}
		if b.R != nil {
			if ws[l].r, err = engine.Float32s(b.R.W); err != nil {
				return nil, fmt.Errorf("stable rank: %w", err)
			}
		}
	}
	out := make([]LayerRanks, c.Layers)
	parallelLayers(c.Layers, func(l int) {
		w := ws[l]
		out[l].Q = StableRank(w.q, c.QDim(), c.Dim)
		out[l].K = StableRank(w.k, c.KVDim(), c.Dim)
		if w.r == nil {
			return
		}
		out[l].R = StableRank(w.r, c.QDim(), c.Dim)
		g := c.Heads / c.KVHeads
		hd := c.HeadDim * c.Dim
		for h := range c.Heads {
			kv := h / g
			out[l].Circuit = append(out[l].Circuit,
				CircuitStableRank(w.r[h*hd:(h+1)*hd], w.k[kv*hd:(kv+1)*hd], c.HeadDim, c.Dim))
		}
	})
	return out, nil
}

// parallelLayers runs f(0..n-1), at most GOMAXPROCS at a time.
func parallelLayers(n int, f func(l int)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(1, runtime.GOMAXPROCS(0)))
	for l := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			f(l)
		}()
	}
	wg.Wait()
}

// FLOPsPerToken estimates the training FLOPs per token of a model at
// sequence length t: 6 per parameter taking part in a matrix product (every
// matrix and the head; the embedding lookup is free) plus attention,
// 6 Hq D t per layer for causal softmax (the q.k and p.v products, 2 t D
// per head forward at an average of t/2 keys, tripled for the backward),
// twice that for Parallax (its r.k scores and sum p t v products double
// every attention product).
func FLOPsPerToken(c model.Config, t int) float64 {
	// Tied: the table is used once as the head's matrix (the lookup is
	// free). Untied: the head is a matrix, the embedding table is not.
	n := float64(c.NumParams())
	if !c.TiedEmbeddings {
		n -= float64(c.Vocab) * float64(c.Dim)
	}
	att := 6 * float64(c.Layers*c.Heads*c.HeadDim*t)
	if c.Parallax() {
		att *= 2
	}
	return 6*n + att
}
