#version 450
// Softmax and Parallax attention backward, row-parallel part (docs/MATH.md
// section 4: dq and dr), through GL_KHR_cooperative_matrix: attn_dq_coop's
// algorithm (the NV kernel) with the fragment edge F and the subgroup size
// SG specialization constants, as attn_fwd_coop_khr.
//
// A workgroup is two subgroups and takes a block of 2 F rows (F per
// subgroup) of one (sequence, KV head)'s G Lq rows, with their q, r and
// g = dO in shared memory as f16, and walks the keys the block sees in
// tiles of F, K and V staged as f16. Per tile and subgroup:
//   S = Q K^T, T = R K^T, A = G V^T   (F x F each, D/F products)
//   scalar, SG / F invocations a row:  p = exp(scale s - lse),
//     dS = p (a - T + (tbar - t)(a - Bv)), dT = -p (a - Bv)   (f16)
//   dQ += (scale dS) K,  dR += dT K     (F x D each)
// and at the end dq and dr go through shared memory one fragment at a
// time. The host uses it with attn_dkv_coop_khr, on the devices and shapes
// attn_fwd_coop_khr takes.
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_vote : require
#include "common.glsl"
#include "attn.glsl"
#include "coop.glsl"
#include "coop_khr.glsl"

layout(constant_id = 1) const uint D = 128;
layout(constant_id = 2) const uint F = 16;
layout(constant_id = 3) const uint SG = 32;
layout(constant_id = 5) const uint HAS_R = 0;

IN(0, Q)
IN(1, K)
IN(2, V)
IN(3, R)
IN(4, G)
F32BUF(5, LSE)
F32BUF(6, TB)
F32BUF(7, stats)
layout(std430, binding = 7) readonly buffer statsU_ { uint statsU[]; }; // stats' bits
OUT(8, DQ)
OUT(9, DR)
STATUS(10)

layout(std430, binding = 1) readonly buffer K4_ { uvec4 K4[]; };
layout(std430, binding = 2) readonly buffer V4_ { uvec4 V4[]; };

const uint NSG = 2u, BR = NSG * F, BC = F;
const uint NF = D / F; // <= 16
const uint SD = D + 8u;
const uint NP = D / 8u;
const uint FF = F * F;
const uint LPR = SG / F;  // invocations a row in the scalar step
const uint KPL = F / LPR; // keys each of them takes (<= 8)

shared float16_t sQ[3u * BR * SD];    // q, g, r of the block: [which][row][x]
shared float16_t sK[BC * SD];
shared float16_t sV[BC * SD];
shared float sS[NSG * 3u * FF];       // per subgroup: S, A, T [row][key]; output scratch
shared float16_t sP[NSG * 2u * FF];   // per subgroup: scale dS, dT
shared float sLse[BR], sT[BR], sBv[BR], sTb[BR];
shared uint sLo[BR], sHi[BR];

#define PX_ODECL(n) FRAG_C dq##n = FRAG_C(0.0), dr##n = FRAG_C(0.0);
#define PX_SCORE(n)                                                         \
	if (n < NF) {                                                           \
		FRAG_B kb, vb;                                                      \
		FRAG_A xa;                                                          \
		coopMatLoad(kb, sK, F * n, SD, COL_MAJOR);                          \
		coopMatLoad(vb, sV, F * n, SD, COL_MAJOR);                          \
		coopMatLoad(xa, sQ, qoff + F * n, SD, ROW_MAJOR);                   \
		s = coopMatMulAdd(xa, kb, s);                                       \
		coopMatLoad(xa, sQ, BR * SD + qoff + F * n, SD, ROW_MAJOR);         \
		av = coopMatMulAdd(xa, vb, av);                                     \
		if (HAS_R != 0u) {                                                  \
			coopMatLoad(xa, sQ, 2u * BR * SD + qoff + F * n, SD, ROW_MAJOR); \
			tt = coopMatMulAdd(xa, kb, tt);                                 \
		}                                                                   \
	}
#define PX_GRAD(n)                                   \
	if (n < NF) {                                    \
		FRAG_B kb;                                   \
		coopMatLoad(kb, sK, F * n, SD, ROW_MAJOR);   \
		dq##n = coopMatMulAdd(dsa, kb, dq##n);       \
		if (HAS_R != 0u) {                           \
			dr##n = coopMatMulAdd(dta, kb, dr##n);   \
		}                                            \
	}
#define PX_OUT(n)                                                    \
	if (n < NF) {                                                    \
		coopMatStore(dq##n, sS, sbase, F, ROW_MAJOR);                \
		if (HAS_R != 0u) {                                           \
			coopMatStore(dr##n, sS, sbase + FF, F, ROW_MAJOR);       \
		}                                                            \
		subgroupMemoryBarrierShared();                               \
		subgroupBarrier();                                           \
		for (uint e = lane; e < FF; e += SG) {                       \
			uint rr = row0 + e / F;                                  \
			if (rr < rows) {                                         \
				uint off = qrow(b, hk, rr) * D + F * n + e % F;      \
				float gq = sS[sbase + e] * ginv;                     \
				DQ_st(off, gq);                                      \
				notFinite = notFinite || isinf(gq) || isnan(gq);     \
				if (HAS_R != 0u) {                                   \
					float gr = sS[sbase + FF + e] * ginv;            \
					DR_st(off, gr);                                  \
					notFinite = notFinite || isinf(gr) || isnan(gr); \
				}                                                    \
			}                                                        \
		}                                                            \
		subgroupMemoryBarrierShared();                               \
		subgroupBarrier();                                           \
	}

void main() {
	uint t = gl_LocalInvocationID.x, sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
	uint g = px_group();
	uint qb = g % pc.nblocks, bh = g / pc.nblocks;
	if (bh >= pc.B * pc.Hkv) {
		return;
	}
	uint b = bh / pc.Hkv, hk = bh % pc.Hkv;
	uint nk = pc.Lk, rows = pc.G * pc.Lq, nrows = pc.B * pc.Hq * pc.Lq;
	bool causal = pc.causal != 0u;
	// dO enters scaled by gs (a power of two) and the results leave divided
	// by it (coop.glsl).
	float gs = px_grad_scale(uintBitsToFloat(statsU[2u * nrows])), ginv = 1.0 / gs;
	if (t < BR) {
		uint rr = qb * BR + t, lo = 0u, hi = 0u;
		float lse = 0.0, tv = 0.0, bv = 0.0, tb = 0.0;
		if (rr < rows) {
			visible(rr % pc.Lq, nk, causal, lo, hi);
			uint row = qrow(b, hk, rr);
			lse = LSE[row];
			tv = stats[row] * gs;
			if (HAS_R != 0u) {
				bv = stats[nrows + row] * gs;
				tb = TB[row];
			}
		}
		sLo[t] = lo;
		sHi[t] = hi;
		sLse[t] = lse;
		sT[t] = tv;
		sBv[t] = bv;
		sTb[t] = tb;
	}
	uint nq = HAS_R != 0u ? 3u : 2u;
	for (uint e = t; e < nq * BR * SD; e += WG) {
		uint which = e / (BR * SD), r = (e / SD) % BR, x = e % SD, rr = qb * BR + r;
		float val = 0.0;
		if (x < D && rr < rows) {
			uint off = qrow(b, hk, rr) * D + x;
			val = which == 0u ? Q_ld(off) : (which == 1u ? G_ld(off) * gs : R_ld(off));
		}
		sQ[e] = float16_t(val);
	}
	barrier();
	uint kmin = nk, kmax = 0u;
	for (uint r = 0u; r < BR; r++) {
		if (sLo[r] < sHi[r]) {
			kmin = min(kmin, sLo[r]);
			kmax = max(kmax, sHi[r]);
		}
	}
	// This subgroup's rows; in the scalar step invocation lane owns row
	// r = lane / LPR (of the subgroup's F) and keys KPL (lane % LPR) ...
	uint row0 = qb * BR + sg * F, qoff = sg * F * SD, sbase = sg * 3u * FF, pbase = sg * 2u * FF;
	uint r = lane / LPR, kq = (lane % LPR) * KPL, rs = sg * F + r;
	uint rlo = sLo[rs], rhi = sHi[rs];
	float lse = sLse[rs], tr = sT[rs], bvr = sBv[rs], tbr = sTb[rs];
	uint kvbase = (b * pc.Hkv + hk) * pc.Lk;

	PX_FRAGS(PX_ODECL)
	for (uint t0 = kmin; t0 < kmax; t0 += BC) {
		PX_STAGE(sK, K4, t0, BC, kmax)
		PX_STAGE(sV, V4, t0, BC, kmax)
		barrier();

		FRAG_C s = FRAG_C(0.0), tt = FRAG_C(0.0), av = FRAG_C(0.0);
		PX_FRAGS(PX_SCORE)
		coopMatStore(s, sS, sbase, F, ROW_MAJOR);
		coopMatStore(av, sS, sbase + FF, F, ROW_MAJOR);
		if (HAS_R != 0u) {
			coopMatStore(tt, sS, sbase + 2u * FF, F, ROW_MAJOR);
		}
		subgroupMemoryBarrierShared();
		subgroupBarrier();
		PX_UNROLL for (uint c = 0u; c < 8u; c++) {
			if (c < KPL) {
				uint e = r * F + kq + c, key = t0 + kq + c;
				float ds = 0.0, dt = 0.0;
				if (key >= rlo && key < rhi) {
					float a = sS[sbase + FF + e];
					float tv = HAS_R != 0u ? sS[sbase + 2u * FF + e] : 0.0;
					float p = exp(pc.scale * sS[sbase + e] - lse);
					ds = p * (a - tr + (tbr - tv) * (a - bvr));
					dt = -p * (a - bvr);
				}
				sP[pbase + e] = float16_t(pc.scale * ds);
				if (HAS_R != 0u) {
					sP[pbase + FF + e] = float16_t(dt);
				}
			}
		}
		subgroupMemoryBarrierShared();
		subgroupBarrier();
		FRAG_A dsa, dta;
		coopMatLoad(dsa, sP, pbase, F, ROW_MAJOR);
		if (HAS_R != 0u) {
			coopMatLoad(dta, sP, pbase + FF, F, ROW_MAJOR);
		}
		PX_FRAGS(PX_GRAD)
		barrier();
	}
	bool notFinite = false;
	PX_FRAGS(PX_OUT)
	if (subgroupAny(notFinite) && lane == 0u) {
		px_raise(PX_ERR_F16_RANGE, b, hk, qb, 2u);
	}
}
