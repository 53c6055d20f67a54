// Package ref holds float64 reference implementations of every engine op in
// their most direct (naive, O(L^2) for attention) form. They are slow on
// purpose: the conformance suite (engine/enginetest) judges every backend
// against them, and their backward functions are themselves checked against
// finite differences.
//
// Tensors are plain []float64 in row-major order with the layouts documented
// on engine.Ops.
package ref

// Dims are the sizes and options of an attention-family op (see
// engine.AttnDims). Scale is the effective q.k scale (already resolved).
type Dims struct {
	B, Hq, Hkv, Lq, Lk, D int
	Scale                 float64
	Causal                bool
	Window                int
}

// G is the GQA group size Hq/Hkv.
func (d Dims) G() int { return d.Hq / d.Hkv }

// Visible returns the half-open key range [lo, hi) query row i attends to:
// causal with the KV-cache convention j <= i + (Lk - Lq), and with a window
// also j > i + (Lk - Lq) - Window.
func (d Dims) Visible(i int) (lo, hi int) {
	hi = d.Lk
	if d.Causal {
		off := d.Lk - d.Lq
		hi = min(d.Lk, i+off+1)
		if d.Window > 0 {
			lo = max(0, i+off+1-d.Window)
		}
	}
	return lo, hi
}
