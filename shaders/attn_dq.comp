#version 450
// Attention backward, row-parallel part (docs/MATH.md section 4): dq and dr. A
// workgroup takes a block of BR rows (over the G heads of one KV head),
// keeps their q, r and g = dO in shared memory and walks the keys they see
// in tiles of BC. Per pair, with p recomputed from the saved log-sum-exp
// (uniform weights: 1/n or 1), a = g.v, t = r.k:
//   softmax: dS = p (a - T + (tbar - t)(a - Bv)), dT = -p (a - Bv)
//   affine:  dS = 0,                             dT = -p (a - Bv)
//   plain:   dS = 0,                             dT = a
// and dq = scale sum dS k, dr = sum dT k (accumulated in registers).
#include "common.glsl"
#include "attn.glsl"

layout(constant_id = 1) const uint D = 64;
layout(constant_id = 2) const uint BR = 8;
layout(constant_id = 3) const uint BC = 16;
layout(constant_id = 4) const uint MODE = 0;
layout(constant_id = 5) const uint HAS_R = 0;

const uint NE = (BR * D + WG - 1u) / WG;
const uint QSZ = MODE == MODE_SOFTMAX ? BR * D : 1u;
const uint RSZ = HAS_R != 0u ? BR * D : 1u;

IN(0, Q)
IN(1, K)
IN(2, V)
IN(3, R)
IN(4, G)
F32BUF(5, LSE)
F32BUF(6, TB)
F32BUF(7, stats)
OUT(8, DQ)
OUT(9, DR)

shared float sQ[QSZ];
shared float sR[RSZ];
shared float sG[BR * D];
shared float sK[BC * D];
shared float sV[BC * D];
shared float sP[BR * BC];
shared float sPT[BR * BC];
shared uint sLo[BR], sHi[BR];
shared float sLse[BR], sT[BR], sBv[BR], sTb[BR], sW[BR];

void main() {
	uint t = gl_LocalInvocationID.x;
	uint g = px_group();
	uint qb = g % pc.nblocks, bh = g / pc.nblocks;
	if (bh >= pc.B * pc.Hkv) {
		return;
	}
	uint b = bh / pc.Hkv, hk = bh % pc.Hkv;
	uint n = pc.Lk, rows = pc.G * pc.Lq, nrows = pc.B * pc.Hq * pc.Lq;
	bool causal = pc.causal != 0u;
	if (t < BR) {
		uint rr = qb * BR + t, lo = 0u, hi = 0u;
		float lse = 0.0, tt = 0.0, bv = 0.0, tb = 0.0, w = 1.0;
		if (rr < rows) {
			visible(rr % pc.Lq, n, causal, lo, hi);
			uint row = qrow(b, hk, rr);
			if (MODE == MODE_SOFTMAX) {
				lse = LSE[row];
				tt = stats[row];
			}
			if (HAS_R != 0u && MODE != MODE_PLAIN) {
				bv = stats[nrows + row];
				tb = TB[row];
			}
			if (MODE == MODE_AFFINE && hi > lo) {
				w = 1.0 / float(hi - lo);
			}
		}
		sLo[t] = lo;
		sHi[t] = hi;
		sLse[t] = lse;
		sT[t] = tt;
		sBv[t] = bv;
		sTb[t] = tb;
		sW[t] = w;
	}
	for (uint e = t; e < BR * D; e += WG) {
		uint rr = qb * BR + e / D;
		float q = 0.0, rv = 0.0, gv = 0.0;
		if (rr < rows) {
			uint off = qrow(b, hk, rr) * D + e % D;
			if (MODE == MODE_SOFTMAX) {
				q = Q_ld(off);
			}
			if (HAS_R != 0u) {
				rv = R_ld(off);
			}
			gv = G_ld(off);
		}
		if (MODE == MODE_SOFTMAX) {
			sQ[e] = q;
		}
		if (HAS_R != 0u) {
			sR[e] = rv;
		}
		sG[e] = gv;
	}
	float dq[16], dr[16];
	PX_UNROLL for (uint k = 0u; k < 16u; k++) {
		if (!(k >= NE)) {
			dq[k] = 0.0;
			dr[k] = 0.0;
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
			float ds = 0.0, dt = 0.0;
			if (key >= sLo[r] && key < sHi[r]) {
				float a = 0.0, s = 0.0, tt = 0.0;
				PX_LOOP for (uint x = 0u; x < D; x++) {
					a += sG[r * D + x] * sV[j * D + x];
				}
				if (MODE == MODE_SOFTMAX) {
					PX_LOOP for (uint x = 0u; x < D; x++) {
						s += sQ[r * D + x] * sK[j * D + x];
					}
				}
				if (HAS_R != 0u && MODE == MODE_SOFTMAX) {
					PX_LOOP for (uint x = 0u; x < D; x++) {
						tt += sR[r * D + x] * sK[j * D + x];
					}
				}
				if (MODE == MODE_SOFTMAX) {
					float p = exp(pc.scale * s - sLse[r]);
					// Softmax has no (tbar - t)(a - Bv) term (not 0 times
					// it: an infinite a would make that NaN).
					ds = HAS_R != 0u ? p * (a - sT[r] + (sTb[r] - tt) * (a - sBv[r])) : p * (a - sT[r]);
					dt = -p * (a - sBv[r]);
				} else if (MODE == MODE_AFFINE) {
					dt = -sW[r] * (a - sBv[r]);
				} else {
					dt = a;
				}
			}
			sP[e] = pc.scale * ds;
			sPT[e] = dt;
		}
		barrier();
		PX_UNROLL for (uint k = 0u; k < 16u; k++) {
			if (!(k >= NE)) {
				uint e = t + WG * k;
				if (e < BR * D) {
					uint r = e / D, x = e % D;
					float s1 = 0.0, s2 = 0.0;
					// Only the keys row r sees: a masked pair adds nothing,
					// not 0 * k (NaN for a non-finite k).
					uint jlo = uint(clamp(int(sLo[r]) - int(t0), 0, int(BC))), jhi = uint(clamp(int(sHi[r]) - int(t0), 0, int(BC)));
					PX_LOOP for (uint j = jlo; j < jhi; j++) {
						float kv = sK[j * D + x];
						s1 += sP[r * BC + j] * kv;
						s2 += sPT[r * BC + j] * kv;
					}
					dq[k] += s1;
					dr[k] += s2;
				}
			}
		}
		barrier();
	}
	PX_UNROLL for (uint k = 0u; k < 16u; k++) {
		if (!(k >= NE)) {
			uint e = t + WG * k, rr = qb * BR + e / D;
			if (!(e >= BR * D || rr >= rows)) {
				uint off = qrow(b, hk, rr) * D + e % D;
				if (MODE == MODE_SOFTMAX) {
					DQ_st(off, dq[k]);
				}
				if (HAS_R != 0u) {
					DR_st(off, dr[k]);
				}
			}
		}
	}
}
