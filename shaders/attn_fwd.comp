#version 450
// Attention forward, the streaming algorithm of docs/MATH.md section 3, for every
// member of the family (MODE, see attn.glsl) and for decode over a KV
// cache (DECODE: per-sequence lengths from lens, causal).
//
// A workgroup takes a block of BR rows (over the G heads of one KV head)
// and one split of the keys, keeps Q (pre-scaled) and R of the block in
// shared memory, and walks the keys in tiles of BC rows of K and V staged
// in shared memory. Per tile: scores S1 = scale Q K^T and S2 = R K^T; per
// row the running max m, alpha = exp(m_old - m), P1 = exp(S1 - m),
// P2 = P1 S2, d1 = alpha d1 + rowsum P1, d2 = alpha d2 + rowsum P2; and
// O1 = alpha O1 + P1 V, O2 = alpha O2 + P2 V (each invocation owns NE
// elements of the block's accumulators, in registers). Uniform weights are
// the same with every score 0. At the end, o = vbar (1 + tbar) - O2/d1
// with vbar = O1/d1, tbar = d2/d1 (softmax without R: o = vbar; plain
// linear: o = O2), or, with PARTIAL (split-KV decode), the states
// (m, d1, d2, O1, O2) go to part for attn_combine.
#include "common.glsl"
#include "attn.glsl"

layout(constant_id = 1) const uint D = 64;
layout(constant_id = 2) const uint BR = 8;
layout(constant_id = 3) const uint BC = 16;
layout(constant_id = 4) const uint MODE = 0;
layout(constant_id = 5) const uint HAS_R = 0;
layout(constant_id = 6) const uint DECODE = 0;
layout(constant_id = 7) const uint PARTIAL = 0;

const uint NE = (BR * D + WG - 1u) / WG; // accumulator elements per invocation (<= 16)
const uint QSZ = MODE == MODE_SOFTMAX ? BR * D : 1u;
const uint RSZ = HAS_R != 0u ? BR * D : 1u;

IN(0, Q)
IN(1, K)
IN(2, V)
IN(3, R)
OUT(4, O)
F32BUF(5, LSE)
OUT(6, VB)
F32BUF(7, TB)
INDEX(8, lens)
F32BUF(9, part)
STATUS(10)

shared float sQ[QSZ];
shared float sR[RSZ];
shared float sK[BC * D];
shared float sV[BC * D];
shared float sP[BR * BC];
shared float sPT[BR * BC];
shared float sM[BR], sD1[BR], sD2[BR], sAlpha[BR];
shared uint sLo[BR], sHi[BR];

void main() {
	uint t = gl_LocalInvocationID.x;
	uint g = px_group();
	uint S = pc.splits;
	uint split = g % S, rest = g / S;
	uint qb = rest % pc.nblocks, bh = rest / pc.nblocks;
	if (bh >= pc.B * pc.Hkv) {
		return;
	}
	uint b = bh / pc.Hkv, hk = bh % pc.Hkv;
	uint n = pc.Lk;
	bool causal = pc.causal != 0u;
	if (DECODE != 0u) {
		int nb = lens[b];
		if (nb < int(pc.Lq) || nb > int(pc.Lk)) {
			if (t == 0u && hk == 0u && qb == 0u && split == 0u) {
				px_raise(PX_ERR_LENS_RANGE, b, uint(nb), pc.Lk, pc.Lq);
			}
			return;
		}
		n = uint(nb);
		causal = true;
	}
	// This split's keys: a 1/S share of what the sequence's queries see.
	uint lo0, hi0;
	visible(0u, n, causal, lo0, hi0);
	uint c0 = lo0 + (n - lo0) * split / S;
	uint c1 = lo0 + (n - lo0) * (split + 1u) / S;

	uint rows = pc.G * pc.Lq;
	if (t < BR) {
		uint rr = qb * BR + t, lo = 0u, hi = 0u;
		if (rr < rows) {
			visible(rr % pc.Lq, n, causal, lo, hi);
			lo = max(lo, c0);
			hi = max(min(hi, c1), lo);
		}
		sLo[t] = lo;
		sHi[t] = hi;
		sM[t] = PX_NEG_INF;
		sD1[t] = 0.0;
		sD2[t] = 0.0;
	}
	for (uint e = t; e < BR * D; e += WG) {
		uint r = e / D, rr = qb * BR + r;
		float q = 0.0, rv = 0.0;
		if (rr < rows) {
			uint off = qrow(b, hk, rr) * D + e % D;
			if (MODE == MODE_SOFTMAX) {
				q = Q_ld(off) * pc.scale;
			}
			if (HAS_R != 0u) {
				rv = R_ld(off);
			}
		}
		if (MODE == MODE_SOFTMAX) {
			sQ[e] = q;
		}
		if (HAS_R != 0u) {
			sR[e] = rv;
		}
	}
	float o1[16], o2[16];
	PX_UNROLL for (uint k = 0u; k < 16u; k++) {
		if (!(k >= NE)) {
			o1[k] = 0.0;
			o2[k] = 0.0;
		}
	}
	barrier();
	uint kmin = n, kmax = 0u;
	PX_LOOP for (uint r = 0u; r < BR; r++) {
		if (sLo[r] < sHi[r]) {
			kmin = min(kmin, sLo[r]);
			kmax = max(kmax, sHi[r]);
		}
	}
	uint kvbase = (b * pc.Hkv + hk) * pc.Lk;
	for (uint t0 = kmin; t0 < kmax; t0 += BC) {
		for (uint e = t; e < BC * D; e += WG) {
			uint key = t0 + e / D;
			float kv = 0.0, vv = 0.0;
			if (key < kmax) {
				uint off = (kvbase + key) * D + e % D;
				kv = K_ld(off);
				vv = V_ld(off);
			}
			sK[e] = kv;
			sV[e] = vv;
		}
		barrier();
		for (uint e = t; e < BR * BC; e += WG) {
			uint r = e / BC, j = e % BC, key = t0 + j;
			float s = PX_NEG_INF, tt = 0.0;
			if (key >= sLo[r] && key < sHi[r]) {
				s = 0.0;
				if (MODE == MODE_SOFTMAX) {
					PX_LOOP for (uint x = 0u; x < D; x++) {
						s += sQ[r * D + x] * sK[j * D + x];
					}
				}
				if (HAS_R != 0u) {
					PX_LOOP for (uint x = 0u; x < D; x++) {
						tt += sR[r * D + x] * sK[j * D + x];
					}
				}
			}
			sP[e] = s;
			sPT[e] = tt;
		}
		barrier();
		if (t < BR) {
			// Row t's visible keys of the tile are [jlo, jhi): whether the
			// tile holds any is decided by the mask, never by the scores
			// (a NaN or -inf score is a score). A score of -inf weighs 0;
			// if every score of the row is -inf, d1 stays 0 and the row
			// comes out NaN, as exp(-inf - -inf) makes it.
			uint jlo = uint(clamp(int(sLo[t]) - int(t0), 0, int(BC))), jhi = uint(clamp(int(sHi[t]) - int(t0), 0, int(BC)));
			float alpha = 1.0;
			if (jlo < jhi) {
				float m = sM[t], mx = m;
				PX_LOOP for (uint j = jlo; j < jhi; j++) {
					mx = px_max(mx, sP[t * BC + j]);
				}
				alpha = m == PX_NEG_INF ? 0.0 : exp(m - mx);
				float d1 = sD1[t] * alpha, d2 = sD2[t] * alpha;
				PX_LOOP for (uint j = jlo; j < jhi; j++) {
					uint e = t * BC + j;
					float s = sP[e];
					float p = s == PX_NEG_INF ? 0.0 : exp(s - mx);
					float pt = p * sPT[e];
					sP[e] = p;
					sPT[e] = pt;
					d1 += p;
					d2 += pt;
				}
				sD1[t] = d1;
				sD2[t] = d2;
				sM[t] = mx;
			}
			sAlpha[t] = alpha;
		}
		barrier();
		PX_UNROLL for (uint k = 0u; k < 16u; k++) {
			if (!(k >= NE)) {
				uint e = t + WG * k;
				if (e < BR * D) {
					uint r = e / D, x = e % D;
					float s1 = 0.0, s2 = 0.0;
					// Only the keys row r sees: a masked key adds nothing,
					// not 0 * v (NaN for a non-finite v).
					uint jlo = uint(clamp(int(sLo[r]) - int(t0), 0, int(BC))), jhi = uint(clamp(int(sHi[r]) - int(t0), 0, int(BC)));
					PX_LOOP for (uint j = jlo; j < jhi; j++) {
						float v = sV[j * D + x];
						s1 += sP[r * BC + j] * v;
						s2 += sPT[r * BC + j] * v;
					}
					float a = sAlpha[r];
					o1[k] = a * o1[k] + s1;
					o2[k] = a * o2[k] + s2;
				}
			}
		}
		barrier();
	}

	if (PARTIAL != 0u) {
		uint PS = 3u + 2u * D;
		PX_UNROLL for (uint k = 0u; k < 16u; k++) {
			if (!(k >= NE)) {
				uint e = t + WG * k, rr = qb * BR + e / D;
				if (e < BR * D && rr < rows) {
					uint base = (qrow(b, hk, rr) * S + split) * PS;
					part[base + 3u + e % D] = o1[k];
					part[base + 3u + D + e % D] = o2[k];
				}
			}
		}
		if (t < BR && qb * BR + t < rows) {
			uint base = (qrow(b, hk, qb * BR + t) * S + split) * PS;
			part[base] = sM[t];
			part[base + 1u] = sD1[t];
			part[base + 2u] = sD2[t];
		}
		return;
	}
	PX_UNROLL for (uint k = 0u; k < 16u; k++) {
		if (!(k >= NE)) {
			uint e = t + WG * k, r = e / D, rr = qb * BR + r;
			if (!(e >= BR * D || rr >= rows)) {
				// A row that sees keys divides by d1 whatever it is: NaN
				// (a NaN or +inf score) and 0 (every score -inf) give NaN.
				float d1 = sD1[r], o = 0.0, vb = 0.0;
				if (MODE == MODE_PLAIN) {
					o = o2[k];
				} else if (sHi[r] > sLo[r]) {
					vb = o1[k] / d1;
					o = vb;
					if (HAS_R != 0u) {
						o = vb * (1.0 + sD2[r] / d1) - o2[k] / d1;
					}
				}
				uint off = qrow(b, hk, rr) * D + e % D;
				O_st(off, o);
				if ((pc.flags & 2u) != 0u) {
					VB_st(off, vb);
				}
			}
		}
	}
	if (t < BR && qb * BR + t < rows) {
		uint row = qrow(b, hk, qb * BR + t);
		float d1 = sD1[t];
		bool keys = sHi[t] > sLo[t];
		if ((pc.flags & 1u) != 0u) {
			LSE[row] = !keys ? PX_NEG_INF : d1 == 0.0 ? PX_NAN : sM[t] + log(d1);
		}
		if ((pc.flags & 4u) != 0u) {
			TB[row] = keys ? sD2[t] / d1 : 0.0;
		}
	}
}
