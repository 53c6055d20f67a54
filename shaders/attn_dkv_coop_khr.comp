#version 450
// Softmax and Parallax attention backward, column-parallel part (docs/MATH.md
// section 4: dk and dv), through GL_KHR_cooperative_matrix: attn_dkv_coop's
// algorithm (the NV kernel) with the fragment edge F and the subgroup size
// SG specialization constants, as attn_fwd_coop_khr.
//
// A workgroup is two subgroups and owns 2 F keys of one (sequence, KV
// head), F per subgroup, with K and V in shared memory as f16. It walks
// the rows of all G query heads of the group in blocks of F (q, r and
// g = dO staged as f16, with the rows' lse, T = g.o, Bv = g.vbar and
// tbar), skipping blocks that see none of its keys. Per block and
// subgroup, in the transposed form (keys as rows):
//   S^T = K Q^T, T^T = K R^T, A^T = V G^T   (F x F each, D/F products)
//   scalar, SG / F invocations a key:  p = exp(scale s - lse),
//     dS = p (a - T + (tbar - t)(a - Bv)), dT = -p (a - Bv),
//     W = p (1 + tbar - t)               (f16 operands)
//   dV += W^T G,  dK += (scale dS)^T Q + dT^T R   (F x D each)
// and at the end dk and dv go through shared memory one fragment at a time.
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
OUT(8, DK)
OUT(9, DV)
STATUS(10)

layout(std430, binding = 0) readonly buffer Q4_ { uvec4 Q4[]; };
layout(std430, binding = 1) readonly buffer K4_ { uvec4 K4[]; };
layout(std430, binding = 2) readonly buffer V4_ { uvec4 V4[]; };
layout(std430, binding = 3) readonly buffer R4_ { uvec4 R4[]; };
layout(std430, binding = 4) readonly buffer G4_ { uvec4 G4[]; };

const uint NSG = 2u, BK = NSG * F, BR = F;
const uint NF = D / F; // <= 16
const uint SD = D + 8u;
const uint NP = D / 8u;
const uint FF = F * F;
const uint LPR = SG / F;  // invocations a key in the scalar step
const uint KPL = F / LPR; // rows each of them takes (<= 8)
const uint NQ = HAS_R != 0u ? 3u : 2u; // staged row operands: q, g (, r)

shared float16_t sK[BK * SD]; // [key][x]
shared float16_t sV[BK * SD];
shared float16_t sQ[3u * BR * SD];  // q, g, r of the row block: [which][row][x]
shared float sS[NSG * 3u * FF];     // per subgroup: S^T, A^T, T^T [key][row]; output scratch
shared float16_t sP[NSG * 3u * FF]; // per subgroup: (scale dS)^T, W^T, dT^T
shared float sLse[BR], sT[BR], sBv[BR], sTb[BR];
shared uint sLo[BR], sHi[BR];
shared uint sFirst[64], sLast[64]; // per head of the group (G <= 64): its row blocks that see the keys

#define PX_ODECL(n) FRAG_C dk##n = FRAG_C(0.0), dv##n = FRAG_C(0.0);
// Products over D: A = this subgroup's keys, B = the block's rows
// transposed (column-major views of sQ).
#define PX_SCORE(n)                                                      \
	if (n < NF) {                                                        \
		FRAG_A ka, va;                                                   \
		FRAG_B xb;                                                       \
		coopMatLoad(ka, sK, koff + F * n, SD, ROW_MAJOR);                \
		coopMatLoad(va, sV, koff + F * n, SD, ROW_MAJOR);                \
		coopMatLoad(xb, sQ, F * n, SD, COL_MAJOR);                       \
		s = coopMatMulAdd(ka, xb, s);                                    \
		coopMatLoad(xb, sQ, BR * SD + F * n, SD, COL_MAJOR);             \
		av = coopMatMulAdd(va, xb, av);                                  \
		if (HAS_R != 0u) {                                               \
			coopMatLoad(xb, sQ, 2u * BR * SD + F * n, SD, COL_MAJOR);    \
			tt = coopMatMulAdd(ka, xb, tt);                              \
		}                                                                \
	}
#define PX_GRAD(n)                                                       \
	if (n < NF) {                                                        \
		FRAG_B xb;                                                       \
		coopMatLoad(xb, sQ, BR * SD + F * n, SD, ROW_MAJOR);             \
		dv##n = coopMatMulAdd(wt, xb, dv##n);                            \
		coopMatLoad(xb, sQ, F * n, SD, ROW_MAJOR);                       \
		dk##n = coopMatMulAdd(dst, xb, dk##n);                           \
		if (HAS_R != 0u) {                                               \
			coopMatLoad(xb, sQ, 2u * BR * SD + F * n, SD, ROW_MAJOR);    \
			dk##n = coopMatMulAdd(dtt, xb, dk##n);                       \
		}                                                                \
	}
#define PX_OUT(n)                                                                   \
	if (n < NF) {                                                                   \
		coopMatStore(dk##n, sS, sbase, F, ROW_MAJOR);                               \
		coopMatStore(dv##n, sS, sbase + FF, F, ROW_MAJOR);                          \
		subgroupMemoryBarrierShared();                                              \
		subgroupBarrier();                                                          \
		for (uint e = lane; e < FF; e += SG) {                                      \
			uint key = k0 + e / F;                                                  \
			if (key < nk) {                                                         \
				uint off = (kvbase + key) * D + F * n + e % F;                      \
				float gk = sS[sbase + e] * ginv;                                    \
				float gv = sS[sbase + FF + e] * ginv;                               \
				DK_st(off, gk);                                                     \
				DV_st(off, gv);                                                     \
				notFinite = notFinite || isinf(gk) || isnan(gk) || isinf(gv) || isnan(gv); \
			}                                                                       \
		}                                                                           \
		subgroupMemoryBarrierShared();                                              \
		subgroupBarrier();                                                          \
	}

// headBlocks returns the row blocks [first, last) in which head h of the
// group (rows h Lq .. h Lq + Lq - 1) sees a key of [j0, j1): a row's
// visible keys [lo, hi) move monotonically with its position, so the
// positions that see the keys are an interval found by bisection.
void headBlocks(uint h, uint nk, bool causal, uint j0, uint j1, uint nrb, out uint first, out uint last) {
	uint a = 0u, z = pc.Lq;
	while (a < z) { // the first position with hi > j0
		uint mid = (a + z) / 2u, lo, hi;
		visible(mid, nk, causal, lo, hi);
		if (hi > j0) {
			z = mid;
		} else {
			a = mid + 1u;
		}
	}
	uint pa = a;
	a = pa;
	z = pc.Lq;
	while (a < z) { // the first position with lo >= j1
		uint mid = (a + z) / 2u, lo, hi;
		visible(mid, nk, causal, lo, hi);
		if (lo >= j1) {
			z = mid;
		} else {
			a = mid + 1u;
		}
	}
	first = nrb;
	last = 0u;
	if (pa < a) {
		first = (h * pc.Lq + pa) / BR;
		last = (h * pc.Lq + a - 1u) / BR + 1u;
	}
}

// nextBlock is the first row block from rb on in which a row sees a key of
// this workgroup's, or nrb.
uint nextBlock(uint rb, uint nrb) {
	uint best = nrb;
	for (uint h = 0u; h < pc.G; h++) {
		if (rb < sLast[h]) {
			best = min(best, max(rb, sFirst[h]));
		}
	}
	return best;
}

void main() {
	uint t = gl_LocalInvocationID.x, sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
	uint g = px_group();
	uint kb = g % pc.nblocks, bh = g / pc.nblocks;
	if (bh >= pc.B * pc.Hkv) {
		return;
	}
	uint b = bh / pc.Hkv, hk = bh % pc.Hkv;
	uint nk = pc.Lk, rows = pc.G * pc.Lq, nrows = pc.B * pc.Hq * pc.Lq;
	bool causal = pc.causal != 0u;
	uint j0 = kb * BK, j1 = min(j0 + BK, nk);
	// dO enters scaled by gs (a power of two) and the results leave divided
	// by it (coop.glsl).
	float gs = px_grad_scale(uintBitsToFloat(statsU[2u * nrows])), ginv = 1.0 / gs;
	uint kvbase = (b * pc.Hkv + hk) * pc.Lk;
	PX_STAGE(sK, K4, j0, BK, j1)
	PX_STAGE(sV, V4, j0, BK, j1)
	// This subgroup's keys k0 .. k0 + F - 1; in the scalar step invocation
	// lane owns key kk = lane / LPR and rows KPL (lane % LPR) ...
	uint k0 = j0 + F * sg, koff = F * sg * SD, sbase = sg * 3u * FF, pbase = sg * 3u * FF;
	uint kk = lane / LPR, r0 = (lane % LPR) * KPL, key = k0 + kk;
	PX_FRAGS(PX_ODECL)
	uint nrb = (rows + BR - 1u) / BR;
	for (uint h = t; h < pc.G; h += WG) {
		headBlocks(h, nk, causal, j0, j1, nrb, sFirst[h], sLast[h]);
	}
	barrier();
	for (uint rb = nextBlock(0u, nrb); rb < nrb; rb = nextBlock(rb + 1u, nrb)) {
		barrier(); // the previous block's rows are no longer read
		for (uint e = t; e < NQ * BR * NP; e += WG) {
			uint which = e / (BR * NP), rr = rb * BR + (e / NP) % BR;
			uvec4 w = uvec4(0u);
			if (rr < rows) {
				uint p = qrow(b, hk, rr) * NP + e % NP;
				if (which == 0u) {
					w = px_half8(Q4[p], Q_dt == DT_BF16);
				} else if (which == 1u) {
					w = px_half8s(G4[p], G_dt == DT_BF16, gs);
				} else {
					w = px_half8(R4[p], R_dt == DT_BF16);
				}
			}
			uint base = (e / NP) * SD + 8u * (e % NP);
			PX_UNROLL for (uint i = 0u; i < 4u; i++) {
				vec2 hv = unpackHalf2x16(w[i]);
				sQ[base + 2u * i] = float16_t(hv.x);
				sQ[base + 2u * i + 1u] = float16_t(hv.y);
			}
		}
		if (t < BR) {
			uint rr = rb * BR + t, lo = 0u, hi = 0u;
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
				uint r = r0 + c, e = kk * F + r;
				float ds = 0.0, dt = 0.0, w = 0.0;
				if (key < j1 && key >= sLo[r] && key < sHi[r]) {
					float a = sS[sbase + FF + e];
					float tv = HAS_R != 0u ? sS[sbase + 2u * FF + e] : 0.0;
					float p = exp(pc.scale * sS[sbase + e] - sLse[r]);
					ds = p * (a - sT[r] + (sTb[r] - tv) * (a - sBv[r]));
					dt = -p * (a - sBv[r]);
					w = p * (1.0 + sTb[r] - tv);
				}
				sP[pbase + e] = float16_t(pc.scale * ds);
				sP[pbase + FF + e] = float16_t(w);
				if (HAS_R != 0u) {
					sP[pbase + 2u * FF + e] = float16_t(dt);
				}
			}
		}
		subgroupMemoryBarrierShared();
		subgroupBarrier();
		FRAG_A dst, wt, dtt;
		coopMatLoad(dst, sP, pbase, F, ROW_MAJOR);
		coopMatLoad(wt, sP, pbase + FF, F, ROW_MAJOR);
		if (HAS_R != 0u) {
			coopMatLoad(dtt, sP, pbase + 2u * FF, F, ROW_MAJOR);
		}
		PX_FRAGS(PX_GRAD)
	}
	bool notFinite = false;
	PX_FRAGS(PX_OUT)
	if (subgroupAny(notFinite) && lane == 0u) {
		px_raise(PX_ERR_F16_RANGE, b, hk, kb, 2u);
	}
}
