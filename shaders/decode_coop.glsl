// decode_coop.glsl: what the tensor-core decode kernels (attn_decode_coop,
// attn_decode_coop8) share: bindings, the work item of a workgroup, the
// K/V staging with its register prefetch, and the output.
//
// A workgroup is one 32-wide subgroup and streams one split of one
// (sequence, KV head)'s keys once, for every query row of its GQA group
// and their probes. K and V are staged in shared memory as f16 (a bf16
// cache is converted on the way), BC keys per tile, loaded 16 bytes per
// invocation one tile ahead into named registers (never arrays: see
// attn_decode.comp on local memory).
//
// Rescaling is lazy: a row's reference max m moves only when a tile's max
// exceeds it by more than PX_SLACK (exact either way, as the reference
// cancels between numerator and denominator), so P1 = exp(s - m) stays
// below e^PX_SLACK and the accumulators rarely go through shared memory.
//
// f16 limits this path to values below 65504 in magnitude: K and V
// elements, queries, probes and P2 = P1 t. A result that is not finite
// either comes from a NaN or an infinity among the split's inputs, and then
// the split is recomputed in f32 (decodeFinish, decodeScalar) so that it
// comes out where the reference puts it (f16 products would also turn a
// hidden key's NaN into 0 * NaN), or from f16's range, and then raises
// PX_ERR_F16_RANGE instead of passing silently; the scalar kernel
// (attn_decode) has no such limit.

layout(constant_id = 1) const uint D = 128;
layout(constant_id = 3) const uint BC = 16; // keys per tile: 16 or 32
layout(constant_id = 5) const uint HAS_R = 1;
layout(constant_id = 7) const uint PARTIAL = 0;

IN(0, Q)
IN(1, K)
IN(2, V)
IN(3, R)
OUT(4, O)
INDEX(5, lens)
F32BUF(6, part)
STATUS(7)

// 16-byte views of the caches (aliases of bindings 1 and 2).
layout(std430, binding = 1) readonly buffer K4_ { uvec4 K4[]; };
layout(std430, binding = 2) readonly buffer V4_ { uvec4 V4[]; };

const uint NF = D / 16u;       // 16-column fragments of a row (<= 16)
const uint SD = D + 8u;        // shared row stride in halves: rows 16 bytes apart mod 128
const uint SD8 = SD / 8u;      // the same in 16-byte vectors
const uint NP = D / 8u;        // 16-byte pieces of one key row
const uint LDN = BC * NP / WG; // pieces per invocation per tile (exact for D a multiple of 16; <= 16)

#ifdef PX_SH16
shared float16_t sK[BC * SD];  // [key][x]
shared float16_t sV[BC * SD];
#define PX_KOFF(x) (x)
#define PX_KSTRIDE SD
#else
shared uvec4 sK[BC * SD8];     // [key][8 halves]
shared uvec4 sV[BC * SD8];
#define PX_KOFF(x) ((x) / 8u)
#define PX_KSTRIDE SD8
#endif

uvec4 toHalf(uvec4 w) { return px_half8(w, K_dt == DT_BF16); }

#ifdef PX_SH16
void stPiece(uint kj, uint c, uvec4 kw, uvec4 vw) {
	uint o = kj * SD + 8u * c;
	PX_UNROLL for (uint i = 0u; i < 4u; i++) {
		f16vec2 kh = unpackFloat2x16(kw[i]), vh = unpackFloat2x16(vw[i]);
		sK[o + 2u * i] = kh.x;
		sK[o + 2u * i + 1u] = kh.y;
		sV[o + 2u * i] = vh.x;
		sV[o + 2u * i + 1u] = vh.y;
	}
}
#else
void stPiece(uint kj, uint c, uvec4 kw, uvec4 vw) {
	sK[kj * SD8 + c] = kw;
	sV[kj * SD8 + c] = vw;
}
#endif

// The workgroup's item: invocation t, sequence b of length n, KV head hk,
// split `split` of S covering keys [c0, c1), rows = G Lq query rows.
uint t, b, hk, split, S, n, rows, c0, c1, kvbase;

// decodeBegin sets the item up; false when the workgroup has nothing to do
// (its sequence's length is out of range: raised once per sequence).
bool decodeBegin() {
	t = gl_LocalInvocationID.x;
	uint g = px_group();
	S = pc.splits;
	split = g % S;
	uint bh = g / S;
	if (bh >= pc.B * pc.Hkv) {
		return false;
	}
	b = bh / pc.Hkv;
	hk = bh % pc.Hkv;
	int nb = lens[b];
	if (nb < int(pc.Lq) || nb > int(pc.Lk)) {
		if (t == 0u && hk == 0u && split == 0u) {
			px_raise(PX_ERR_LENS_RANGE, b, uint(nb), pc.Lk, pc.Lq);
		}
		return false;
	}
	n = uint(nb);
	rows = pc.G * pc.Lq;
	uint lo0, hi0;
	visible(0u, n, true, lo0, hi0);
	c0 = lo0 + (n - lo0) * split / S;
	c1 = lo0 + (n - lo0) * (split + 1u) / S;
	kvbase = (b * pc.Hkv + hk) * pc.Lk;
	return true;
}

// rowKeys is row i's visible keys within this split ([0, 0) past rows).
void rowKeys(uint i, out uint lo, out uint hi) {
	lo = 0u;
	hi = 0u;
	if (i < rows) {
		visible(i % pc.Lq, n, true, lo, hi);
		lo = max(lo, c0);
		hi = max(min(hi, c1), lo);
	}
}

// qrLoad is element x of stacked row r: query row r (r < RS) or the probe
// of row r - RS; zero past the rows and past D.
float qrLoad(uint r, uint x, uint RS) {
	uint ri = r % RS;
	if (x >= D || ri >= rows) {
		return 0.0;
	}
	uint off = qrow(b, hk, ri) * D + x;
	if (r < RS) {
		return Q_ld(off); // scaled in f32 after the product: exact operands
	}
	return HAS_R != 0u ? R_ld(off) : 0.0;
}

// Prefetch registers: piece l of this invocation is piece t + WG l of the
// tile (key e / NP, column piece e % NP). Keys past the split load zeros
// (their V must be finite: P is 0 there, and 0 * NaN is not 0).
#define PX_DECL(l) uvec4 k##l = uvec4(0u), v##l = uvec4(0u);
#define PX_LOAD(l)                                     \
	if (l < LDN) {                                     \
		uint e = t + WG * l, key = tileStart + e / NP; \
		k##l = uvec4(0u);                              \
		v##l = uvec4(0u);                              \
		if (key < c1) {                                \
			uint p = (kvbase + key) * NP + e % NP;     \
			k##l = K4[p];                              \
			v##l = V4[p];                              \
		}                                              \
	}
#define PX_STORE(l)                                           \
	if (l < LDN) {                                            \
		uint e = t + WG * l;                                  \
		stPiece(e / NP, e % NP, toHalf(k##l), toHalf(v##l)); \
	}
#define PX_ALL(M) M(0u) M(1u) M(2u) M(3u) M(4u) M(5u) M(6u) M(7u) M(8u) M(9u) M(10u) M(11u) M(12u) M(13u) M(14u) M(15u)
#define PX_FRAGS(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11) M(12) M(13) M(14) M(15)

// decodeOut writes column x of row ri: the finished o, or the partial
// state (m, d1, d2 with x = 0; O1, O2); it reports a value that is not
// finite.
bool decodeOut(uint ri, uint x, float a1, float a2, float m, float d1, float d2) {
	uint row = qrow(b, hk, ri);
	if (PARTIAL != 0u) {
		uint base = (row * S + split) * (3u + 2u * D);
		part[base + 3u + x] = a1;
		part[base + 3u + D + x] = a2;
		if (x == 0u) {
			part[base] = m;
			part[base + 1u] = d1;
			part[base + 2u] = d2;
		}
		return isinf(a1) || isnan(a1) || isinf(a2) || isnan(a2) || isinf(d1) || isnan(d1) || isinf(d2) || isnan(d2);
	}
	// Every row of a valid sequence sees a key: a d1 that is NaN or 0
	// (every score -inf) makes o NaN, which is reported, never zeroed.
	float vb = a1 / d1;
	float o = HAS_R != 0u ? vb * (1.0 + d2 / d1) - a2 / d1 : vb;
	O_st(row * D + x, o);
	return isinf(o) || isnan(o);
}

// splitInputsNonFinite: whether a query or probe row of the item, or a key
// or value row of its split [c0, c1), holds a NaN or an infinity.
bool splitInputsNonFinite() {
	bool nf = false;
	for (uint e = t; e < 2u * rows * D; e += WG) {
		float a = qrLoad(e / D, e % D, rows);
		nf = nf || isnan(a) || isinf(a);
	}
	for (uint e = t; e < (c1 - c0) * D; e += WG) {
		uint off = (kvbase + c0 + e / D) * D + e % D;
		float k = K_ld(off), v = V_ld(off);
		nf = nf || isnan(k) || isinf(k) || isnan(v) || isinf(v);
	}
	return subgroupAny(nf);
}

// decodeScalar recomputes the item's result in f32 from the caches and
// writes it as decodeOut does: one row at a time, the invocations sharing
// its columns and the subgroup its dot products, a streaming softmax over
// the keys the row sees and no others (so a NaN the row does not see stays
// out of it, where a product with p = 0 would let it in). Only split items
// whose inputs are not finite take it.
#define PX_SC 8u // columns per invocation: D <= 8 WG
void decodeScalar() {
	for (uint ri = 0u; ri < rows; ri++) {
		uint lo, hi;
		rowKeys(ri, lo, hi);
		float q[PX_SC], r[PX_SC], a1[PX_SC], a2[PX_SC];
		PX_UNROLL for (uint c = 0u; c < PX_SC; c++) {
			uint x = t + WG * c;
			q[c] = qrLoad(ri, x, rows); // 0 past D
			r[c] = qrLoad(rows + ri, x, rows);
			a1[c] = 0.0;
			a2[c] = 0.0;
		}
		float m = PX_NEG_INF, d1 = 0.0, d2 = 0.0;
		for (uint j = lo; j < hi; j++) {
			uint off = (kvbase + j) * D;
			float sq = 0.0, sr = 0.0;
			PX_UNROLL for (uint c = 0u; c < PX_SC; c++) {
				uint x = t + WG * c;
				if (x < D) {
					float k = K_ld(off + x);
					sq += q[c] * k;
					if (HAS_R != 0u) {
						sr += r[c] * k;
					}
				}
			}
			float s = subgroupAdd(sq) * pc.scale;
			float tt = HAS_R != 0u ? subgroupAdd(sr) : 0.0;
			float mn = max(m, s);
			float mu = mn == PX_NEG_INF ? 0.0 : mn;
			float al = exp(m - mu), pj = exp(s - mu), ptj = pj * tt;
			d1 = d1 * al + pj;
			d2 = d2 * al + ptj;
			PX_UNROLL for (uint c = 0u; c < PX_SC; c++) {
				uint x = t + WG * c;
				if (x < D) {
					float v = V_ld(off + x);
					a1[c] = a1[c] * al + pj * v;
					a2[c] = HAS_R != 0u ? a2[c] * al + ptj * v : 0.0;
				}
			}
			m = mn;
		}
		PX_UNROLL for (uint c = 0u; c < PX_SC; c++) {
			uint x = t + WG * c;
			if (x < D) {
				decodeOut(ri, x, a1[c], a2[c], m, d1, d2);
			}
		}
	}
}

// decodeFinish handles a result that is not finite (notFinite: some
// invocation's output, bad: a P2 past f16's range): recomputed in f32 when
// the split's inputs are not finite, else raised as PX_ERR_F16_RANGE.
void decodeFinish(bool notFinite, bool bad) {
	if (!subgroupAny(notFinite || bad)) {
		return;
	}
	if (splitInputsNonFinite()) {
		decodeScalar();
	} else if (t == 0u) {
		px_raise(PX_ERR_F16_RANGE, b, hk, split, 0u);
	}
}
