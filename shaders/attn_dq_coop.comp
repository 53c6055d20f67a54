#version 450
// Softmax and Parallax attention backward, row-parallel part (docs/MATH.md section
// 4: dq and dr), on tensor cores (GL_NV_cooperative_matrix, 16 x 16 x 16
// products, f16 operands, f32 accumulation).
//
// A workgroup is two 32-wide subgroups and takes a block of 32 rows (16 per
// subgroup) of one (sequence, KV head)'s G Lq rows, with their q, r and
// g = dO in shared memory as f16, and walks the keys the block sees in
// tiles of 16, K and V staged as f16 one tile ahead (as attn_fwd_coop). Per
// tile and subgroup:
//   S = Q K^T, T = R K^T, A = G V^T   (16 x 16 each, D/16 products)
//   scalar, two invocations per row:  p = exp(scale s - lse),
//     dS = p (a - T + (tbar - t)(a - Bv)), dT = -p (a - Bv)   (f16)
//   dQ += (scale dS) K,  dR += dT K     (16 x D each)
// and at the end dq and dr go through shared memory one fragment at a
// time. The host uses it as attn_dkv_coop.
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_vote : require
#include "common.glsl"
#include "attn.glsl"
#include "coop.glsl"

layout(constant_id = 1) const uint D = 128;
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

const uint BR = 32u, BC = 16u, NSG = 2u;
const uint NF = D / 16u; // <= 8
const uint SD = D + 8u;
const uint SD8 = SD / 8u;
const uint NP = D / 8u;
const uint LDN = (BC * NP + WG - 1u) / WG; // pieces per invocation per tile (<= 4)

shared float16_t sQ[3u * BR * SD];    // q, g, r of the block: [which][row][x]
shared uvec4 sK[BC * SD8];
shared uvec4 sV[BC * SD8];
shared float sS[NSG * 3u * 256u];     // per subgroup: S, A, T [row][key]; output scratch
shared float16_t sP[NSG * 2u * 256u]; // per subgroup: scale dS, dT
shared float sLse[BR], sT[BR], sBv[BR], sTb[BR];
shared uint sLo[BR], sHi[BR];

// K/V staging: coop.glsl's prefill macros, four pieces per invocation at most.
#define PX_ALL(M) M(0u) M(1u) M(2u) M(3u)
#define PX_FRAGS(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7)

#define PX_ODECL(n) FRAG32 dq##n = FRAG32(0.0), dr##n = FRAG32(0.0);
#define PX_SCORE(n)                                                     \
	if (n < NF) {                                                       \
		FRAG16 kb, vb, xa;                                              \
		coopMatLoadNV(kb, sK, 2u * n, SD8, true);                       \
		coopMatLoadNV(vb, sV, 2u * n, SD8, true);                       \
		coopMatLoadNV(xa, sQ, qoff + 16u * n, SD, false);               \
		s = coopMatMulAddNV(xa, kb, s);                                 \
		coopMatLoadNV(xa, sQ, BR * SD + qoff + 16u * n, SD, false);     \
		av = coopMatMulAddNV(xa, vb, av);                               \
		if (HAS_R != 0u) {                                              \
			coopMatLoadNV(xa, sQ, 2u * BR * SD + qoff + 16u * n, SD, false); \
			tt = coopMatMulAddNV(xa, kb, tt);                           \
		}                                                               \
	}
#define PX_GRAD(n)                                      \
	if (n < NF) {                                       \
		FRAG16 kb;                                      \
		coopMatLoadNV(kb, sK, 2u * n, SD8, false);      \
		dq##n = coopMatMulAddNV(dsa, kb, dq##n);        \
		if (HAS_R != 0u) {                              \
			dr##n = coopMatMulAddNV(dta, kb, dr##n);    \
		}                                               \
	}
#define PX_OUT(n)                                                     \
	if (n < NF) {                                                     \
		coopMatStoreNV(dq##n, sS, sbase, 16u, false);                 \
		if (HAS_R != 0u) {                                            \
			coopMatStoreNV(dr##n, sS, sbase + 256u, 16u, false);      \
		}                                                             \
		subgroupMemoryBarrierShared();                                \
		subgroupBarrier();                                            \
		for (uint e = lane; e < 256u; e += 32u) {                     \
			uint rr = row0 + e / 16u;                                 \
			if (rr < rows) {                                          \
				uint off = qrow(b, hk, rr) * D + 16u * n + e % 16u;   \
				float gq = sS[sbase + e] * ginv;                      \
				DQ_st(off, gq);                                       \
				notFinite = notFinite || isinf(gq) || isnan(gq);      \
				if (HAS_R != 0u) {                                    \
					float gr = sS[sbase + 256u + e] * ginv;           \
					DR_st(off, gr);                                   \
					notFinite = notFinite || isinf(gr) || isnan(gr);  \
				}                                                     \
			}                                                         \
		}                                                             \
		subgroupMemoryBarrierShared();                                \
		subgroupBarrier();                                            \
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
	// r = lane / 2 (of the subgroup's 16) and keys 8 (lane % 2) .. + 7.
	uint row0 = qb * BR + sg * 16u, qoff = sg * 16u * SD, sbase = sg * 768u, pbase = sg * 512u;
	uint r = lane >> 1u, kq = (lane & 1u) * 8u, rs = sg * 16u + r;
	uint rlo = sLo[rs], rhi = sHi[rs];
	float lse = sLse[rs], tr = sT[rs], bvr = sBv[rs], tbr = sTb[rs];
	uint kvbase = (b * pc.Hkv + hk) * pc.Lk;

	PX_FRAGS(PX_ODECL)
	PX_ALL(PX_KV_DECL)
	uint tileStart = kmin;
	PX_ALL(PX_KV_LOAD)
	for (uint t0 = kmin; t0 < kmax; t0 += BC) {
		PX_ALL(PX_KV_STORE)
		barrier();
		tileStart = t0 + BC;
		PX_ALL(PX_KV_LOAD)

		FRAG32 s = FRAG32(0.0), tt = FRAG32(0.0), av = FRAG32(0.0);
		PX_FRAGS(PX_SCORE)
		coopMatStoreNV(s, sS, sbase, 16u, false);
		coopMatStoreNV(av, sS, sbase + 256u, 16u, false);
		if (HAS_R != 0u) {
			coopMatStoreNV(tt, sS, sbase + 512u, 16u, false);
		}
		subgroupMemoryBarrierShared();
		subgroupBarrier();
		PX_UNROLL for (uint c = 0u; c < 8u; c++) {
			uint e = r * 16u + kq + c, key = t0 + kq + c;
			float ds = 0.0, dt = 0.0;
			if (key >= rlo && key < rhi) {
				float a = sS[sbase + 256u + e];
				float tv = HAS_R != 0u ? sS[sbase + 512u + e] : 0.0;
				float p = exp(pc.scale * sS[sbase + e] - lse);
				ds = p * (a - tr + (tbr - tv) * (a - bvr));
				dt = -p * (a - bvr);
			}
			sP[pbase + e] = float16_t(pc.scale * ds);
			if (HAS_R != 0u) {
				sP[pbase + 256u + e] = float16_t(dt);
			}
		}
		subgroupMemoryBarrierShared();
		subgroupBarrier();
		FRAG16 dsa, dta;
		coopMatLoadNV(dsa, sP, pbase, 16u, false);
		if (HAS_R != 0u) {
			coopMatLoadNV(dta, sP, pbase + 256u, 16u, false);
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
