#version 450
// Attention backward, column-parallel part (docs/MATH.md section 4): dk and dv. A
// workgroup owns BC keys of one (batch, KV head), keeps their k and v in
// shared memory and walks the rows of all G query heads of the group in
// blocks of BR, skipping blocks that see none of its keys. Per pair (the
// same quantities as attn_dq):
//   dk += scale dS q + dT r,   dv += w g,
// with w = p (1 + tbar - t) (softmax and affine; p without the probe) or
// w = t (plain linear attention).
#include "common.glsl"
#include "attn.glsl"

layout(constant_id = 1) const uint D = 64;
layout(constant_id = 2) const uint BR = 8;
layout(constant_id = 3) const uint BC = 16;
layout(constant_id = 4) const uint MODE = 0;
layout(constant_id = 5) const uint HAS_R = 0;

const uint NE = (BC * D + WG - 1u) / WG;
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
OUT(8, DK)
OUT(9, DV)

shared float sQ[QSZ];
shared float sR[RSZ];
shared float sG[BR * D];
shared float sK[BC * D];
shared float sV[BC * D];
shared float sP[BR * BC];
shared float sPT[BR * BC];
shared float sPW[BR * BC];
shared uint sLo[BR], sHi[BR];
shared float sLse[BR], sT[BR], sBv[BR], sTb[BR], sW[BR];

void main() {
	uint t = gl_LocalInvocationID.x;
	uint g = px_group();
	uint kb = g % pc.nblocks, bh = g / pc.nblocks;
	if (bh >= pc.B * pc.Hkv) {
		return;
	}
	uint b = bh / pc.Hkv, hk = bh % pc.Hkv;
	uint n = pc.Lk, rows = pc.G * pc.Lq, nrows = pc.B * pc.Hq * pc.Lq;
	bool causal = pc.causal != 0u;
	uint j0 = kb * BC, j1 = min(j0 + BC, n);
	uint kvbase = (b * pc.Hkv + hk) * pc.Lk;
	for (uint e = t; e < BC * D; e += WG) {
		uint key = j0 + e / D;
		float kv = 0.0, vv = 0.0;
		if (key < j1) {
			uint off = (kvbase + key) * D + e % D;
			kv = K_ld(off);
			vv = V_ld(off);
		}
		sK[e] = kv;
		sV[e] = vv;
	}
	float dk[16], dv[16];
	PX_UNROLL for (uint k = 0u; k < 16u; k++) {
		if (!(k >= NE)) {
			dk[k] = 0.0;
			dv[k] = 0.0;
		}
	}
	uint nrb = (rows + BR - 1u) / BR;
	for (uint rb = 0u; rb < nrb; rb++) {
		barrier(); // the previous block's shared rows are no longer read
		if (t < BR) {
			uint rr = rb * BR + t, lo = 0u, hi = 0u;
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
		barrier();
		bool any = false;
		PX_LOOP for (uint r = 0u; r < BR; r++) {
			any = any || (max(sLo[r], j0) < min(sHi[r], j1));
		}
		if (!any) {
			continue; // uniform: every invocation skips the block
		}
		for (uint e = t; e < BR * D; e += WG) {
			uint rr = rb * BR + e / D;
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
		barrier();
		for (uint e = t; e < BR * BC; e += WG) {
			uint r = e / BC, j = e % BC, key = j0 + j;
			float ds = 0.0, dt = 0.0, w = 0.0;
			if (key < j1 && key >= sLo[r] && key < sHi[r]) {
				float a = 0.0, s = 0.0, tt = 0.0;
				PX_LOOP for (uint x = 0u; x < D; x++) {
					a += sG[r * D + x] * sV[j * D + x];
				}
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
				if (MODE == MODE_SOFTMAX) {
					float p = exp(pc.scale * s - sLse[r]);
					// Softmax has no (tbar - t)(a - Bv) term (not 0 times
					// it: an infinite a would make that NaN).
					ds = HAS_R != 0u ? p * (a - sT[r] + (sTb[r] - tt) * (a - sBv[r])) : p * (a - sT[r]);
					dt = -p * (a - sBv[r]);
					w = p * (1.0 + sTb[r] - tt);
				} else if (MODE == MODE_AFFINE) {
					float p = sW[r];
					dt = -p * (a - sBv[r]);
					w = p * (1.0 + sTb[r] - tt);
				} else {
					dt = a;
					w = tt;
				}
			}
			sP[e] = pc.scale * ds;
			sPT[e] = dt;
			sPW[e] = w;
		}
		barrier();
		PX_UNROLL for (uint k = 0u; k < 16u; k++) {
			if (!(k >= NE)) {
				uint e = t + WG * k;
				if (e < BC * D) {
					uint j = e / D, x = e % D, key = j0 + j;
					float a1 = 0.0, a2 = 0.0;
					PX_LOOP for (uint r = 0u; r < BR; r++) {
						// Only the rows that see the key: a masked pair adds
						// nothing, not 0 * q (NaN for a non-finite q, r or g).
						if (key < sLo[r] || key >= sHi[r]) {
							continue;
						}
						uint pe = r * BC + j;
						if (MODE == MODE_SOFTMAX) {
							a1 += sP[pe] * sQ[r * D + x];
						}
						if (HAS_R != 0u) {
							a1 += sPT[pe] * sR[r * D + x];
						}
						a2 += sPW[pe] * sG[r * D + x];
					}
					dk[k] += a1;
					dv[k] += a2;
				}
			}
		}
	}
	PX_UNROLL for (uint k = 0u; k < 16u; k++) {
		if (!(k >= NE)) {
			uint e = t + WG * k, key = j0 + e / D;
			if (e < BC * D && key < j1) {
				uint off = (kvbase + key) * D + e % D;
				DK_st(off, dk[k]);
				DV_st(off, dv[k]);
			}
		}
	}
}
