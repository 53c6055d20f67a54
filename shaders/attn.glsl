// attn.glsl: what the attention-family kernels share: the push constants,
// the causal / sliding-window mask and the row bookkeeping.
//
// Masking (docs/MATH.md section 1): with n keys and Lq queries, causal query i sees
// keys j <= i + n - Lq, and with a window W also j > i + n - Lq - W. A
// decode kernel takes n per sequence from lens[b] (always causal).
//
// Rows: a block is BR consecutive rows of the G * Lq rows that share one
// KV head (head-major: row rr is query head hk G + rr / Lq, position
// rr % Lq), so each K/V tile read from memory serves every head of a GQA
// group.
//
// MODE selects the weighting of the family (docs/MATH.md section 6): 0 softmax
// (softmax attention, Parallax with the probe R), 1 uniform weights with
// the intercept (affine linear attention), 2 uniform, no intercept and no
// normalisation (plain linear attention: o = sum (r.k) v).

#define MODE_SOFTMAX 0u
#define MODE_AFFINE 1u
#define MODE_PLAIN 2u

layout(push_constant) uniform PC {
	uint B, Hq, Hkv, G, Lq, Lk; // Lk: keys, or the cache capacity (decode)
	uint causal, window;
	float scale;
	uint splits;  // split-KV chunks (forward / decode)
	uint nblocks; // row blocks (forward, dq/dr) or key blocks (dk/dv) per (b, kv head)
	uint flags;   // forward: 1 lse, 2 vbar, 4 tbar; lla: 1 rho, 2 eta
	// lla only:
	float lambda, tol;
	uint maxIter, rowBase, rowCount;
} pc;

// visible returns the keys [lo, hi) query position i sees among n keys.
void visible(uint i, uint n, bool causal, out uint lo, out uint hi) {
	lo = 0u;
	hi = n;
	if (causal) {
		int h = clamp(int(i) + int(n) - int(pc.Lq) + 1, 0, int(n));
		hi = uint(h);
		if (pc.window > 0u) {
			lo = uint(max(h - int(pc.window), 0));
		}
	}
}

// qrow is the flat row index (b, head, position) of block row rr.
uint qrow(uint b, uint hk, uint rr) {
	return (b * pc.Hq + hk * pc.G + rr / pc.Lq) * pc.Lq + rr % pc.Lq;
}
