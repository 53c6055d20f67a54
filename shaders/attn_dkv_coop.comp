#version 450
// Softmax and Parallax attention backward, column-parallel part (docs/MATH.md
// section 4: dk and dv), on tensor cores (GL_NV_cooperative_matrix, 16 x 16
// x 16 products, f16 operands, f32 accumulation).
//
// A workgroup is two 32-wide subgroups and owns 32 keys of one (sequence,
// KV head), 16 per subgroup, with K and V in shared memory as f16. It walks
// the rows of all G query heads of the group in blocks of 16 (q, r and
// g = dO staged as f16, loaded 16 bytes per invocation one block ahead,
// with the rows' lse, T = g.o, Bv = g.vbar and tbar), skipping blocks that
// see none of its keys. Per block and subgroup, in the
// transposed form (keys as rows):
//   S^T = K Q^T, T^T = K R^T, A^T = V G^T   (16 x 16 each, D/16 products)
//   scalar, two invocations per key:  p = exp(scale s - lse),
//     dS = p (a - T + (tbar - t)(a - Bv)), dT = -p (a - Bv),
//     W = p (1 + tbar - t)               (f16 operands)
//   dV += W^T G,  dK += (scale dS)^T Q + dT^T R   (16 x D each)
// and at the end dk and dv go through shared memory one fragment at a time.
//
// The host uses it for 16-bit Q, K, V, R and dO with D a multiple of 16 up
// to 128, as attn_fwd_coop.
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
OUT(8, DK)
OUT(9, DV)
STATUS(10)

layout(std430, binding = 0) readonly buffer Q4_ { uvec4 Q4[]; };
layout(std430, binding = 1) readonly buffer K4_ { uvec4 K4[]; };
layout(std430, binding = 2) readonly buffer V4_ { uvec4 V4[]; };
layout(std430, binding = 3) readonly buffer R4_ { uvec4 R4[]; };
layout(std430, binding = 4) readonly buffer G4_ { uvec4 G4[]; };

const uint BK = 32u, BR = 16u, NSG = 2u;
const uint NF = D / 16u; // <= 8
const uint SD = D + 8u;
const uint SD8 = SD / 8u;
const uint NP = D / 8u;
const uint NQ = HAS_R != 0u ? 3u : 2u;          // staged row operands: q, g (, r)
const uint LDQ = (NQ * BR * NP + WG - 1u) / WG; // their pieces per invocation (<= 12)

shared uvec4 sK[BK * SD8];          // [key][x], f16
shared uvec4 sV[BK * SD8];
shared uvec4 sQ[3u * BR * SD8];     // q, g, r of the row block: [which][row][x], f16
shared float sS[NSG * 3u * 256u];   // per subgroup: S^T, T^T, A^T [key][row]; output scratch
shared float16_t sP[NSG * 3u * 256u]; // per subgroup: (scale dS)^T, W^T, dT^T
shared float sLse[BR], sT[BR], sBv[BR], sTb[BR];
shared uint sLo[BR], sHi[BR];
shared uint sFirst[64], sLast[64]; // per head of the group (G <= 64): its row blocks that see the keys

#define PX_FRAGS(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7)
#define PX_ALLQ(M) M(0u) M(1u) M(2u) M(3u) M(4u) M(5u) M(6u) M(7u) M(8u) M(9u) M(10u) M(11u)
// Prefetch registers: piece l of this invocation is piece t + WG l of the
// block (operand e / (BR NP), row e / NP % BR, column piece e % NP).
#define PX_QDECL(l) uvec4 q##l = uvec4(0u);
#define PX_QLOAD(l)                                                    \
	if (l < LDQ) {                                                     \
		uint e = t + WG * l, which = e / (BR * NP), rr = nb * BR + (e / NP) % BR; \
		q##l = uvec4(0u);                                              \
		if (which < NQ && rr < rows) {                                 \
			uint p = qrow(b, hk, rr) * NP + e % NP;                    \
			if (which == 0u) {                                         \
				q##l = px_half8(Q4[p], Q_dt == DT_BF16);               \
			} else if (which == 1u) {                                  \
				q##l = px_half8s(G4[p], G_dt == DT_BF16, gs);          \
			} else {                                                   \
				q##l = px_half8(R4[p], R_dt == DT_BF16);               \
			}                                                          \
		}                                                              \
	}
#define PX_QSTORE(l)                                                   \
	if (l < LDQ) {                                                     \
		uint e = t + WG * l;                                           \
		if (e < NQ * BR * NP) {                                        \
			sQ[(e / NP) * SD8 + e % NP] = q##l;                        \
		}                                                              \
	}
#define PX_ODECL(n) FRAG32 dk##n = FRAG32(0.0), dv##n = FRAG32(0.0);
// Products over D: A = this subgroup's keys, B = the block's rows
// transposed (column-major views of sQ).
#define PX_SCORE(n)                                                   \
	if (n < NF) {                                                     \
		FRAG16 ka, va, xb;                                            \
		coopMatLoadNV(ka, sK, koff + 2u * n, SD8, false);             \
		coopMatLoadNV(va, sV, koff + 2u * n, SD8, false);             \
		coopMatLoadNV(xb, sQ, 2u * n, SD8, true);                     \
		s = coopMatMulAddNV(ka, xb, s);                               \
		coopMatLoadNV(xb, sQ, BR * SD8 + 2u * n, SD8, true);           \
		av = coopMatMulAddNV(va, xb, av);                             \
		if (HAS_R != 0u) {                                            \
			coopMatLoadNV(xb, sQ, 2u * BR * SD8 + 2u * n, SD8, true);  \
			tt = coopMatMulAddNV(ka, xb, tt);                         \
		}                                                             \
	}
#define PX_GRAD(n)                                                    \
	if (n < NF) {                                                     \
		FRAG16 xb;                                                    \
		coopMatLoadNV(xb, sQ, BR * SD8 + 2u * n, SD8, false);          \
		dv##n = coopMatMulAddNV(wt, xb, dv##n);                       \
		coopMatLoadNV(xb, sQ, 2u * n, SD8, false);                    \
		dk##n = coopMatMulAddNV(dst, xb, dk##n);                      \
		if (HAS_R != 0u) {                                            \
			coopMatLoadNV(xb, sQ, 2u * BR * SD8 + 2u * n, SD8, false); \
			dk##n = coopMatMulAddNV(dtt, xb, dk##n);                  \
		}                                                             \
	}
#define PX_OUT(n)                                                     \
	if (n < NF) {                                                     \
		coopMatStoreNV(dk##n, sS, sbase, 16u, false);                 \
		coopMatStoreNV(dv##n, sS, sbase + 256u, 16u, false);          \
		subgroupMemoryBarrierShared();                                \
		subgroupBarrier();                                            \
		for (uint e = lane; e < 256u; e += 32u) {                     \
			uint key = k0 + e / 16u;                                  \
			if (key < nk) {                                           \
				uint off = (kvbase + key) * D + 16u * n + e % 16u;    \
				float gk = sS[sbase + e] * ginv;                      \
				float gv = sS[sbase + 256u + e] * ginv;               \
				DK_st(off, gk);                                       \
				DV_st(off, gv);                                       \
				notFinite = notFinite || isinf(gk) || isnan(gk) || isinf(gv) || isnan(gv); \
			}                                                         \
		}                                                             \
		subgroupMemoryBarrierShared();                                \
		subgroupBarrier();                                            \
	}

// rowStats loads row rr's visible keys, lse, T, Bv and tbar (zeros past
// the rows; only the first BR invocations load).
void rowStats(uint rr, uint rows, uint nk, uint nrows, bool causal, uint b, uint hk, float gs,
              out uint lo, out uint hi, out float lse, out float tv, out float bv, out float tb) {
	lo = 0u;
	hi = 0u;
	lse = 0.0;
	tv = 0.0;
	bv = 0.0;
	tb = 0.0;
	if (gl_LocalInvocationID.x < BR && rr < rows) {
		visible(rr % pc.Lq, nk, causal, lo, hi);
		uint row = qrow(b, hk, rr);
		lse = LSE[row];
		tv = stats[row] * gs;
		if (HAS_R != 0u) {
			bv = stats[nrows + row] * gs;
			tb = TB[row];
		}
	}
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
	for (uint e = t; e < BK * NP; e += WG) {
		uint key = j0 + e / NP;
		uvec4 kw = uvec4(0u), vw = uvec4(0u);
		if (key < j1) {
			uint p = (kvbase + key) * NP + e % NP;
			kw = px_half8(K4[p], K_dt == DT_BF16);
			vw = px_half8(V4[p], K_dt == DT_BF16);
		}
		sK[(e / NP) * SD8 + e % NP] = kw;
		sV[(e / NP) * SD8 + e % NP] = vw;
	}
	// This subgroup's keys k0 .. k0 + 15; in the scalar step invocation
	// lane owns key kk = lane / 2 and rows 8 (lane % 2) .. + 7.
	uint k0 = j0 + 16u * sg, koff = 16u * sg * SD8, sbase = sg * 768u, pbase = sg * 768u;
	uint kk = lane >> 1u, r0 = (lane & 1u) * 8u, key = k0 + kk;
	PX_FRAGS(PX_ODECL)
	uint nrb = (rows + BR - 1u) / BR;
	for (uint h = t; h < pc.G; h += WG) {
		headBlocks(h, nk, causal, j0, j1, nrb, sFirst[h], sLast[h]);
	}
	barrier();
	uint nb = nextBlock(0u, nrb);
	PX_ALLQ(PX_QDECL)
	PX_ALLQ(PX_QLOAD)
	// The next block's row statistics, loaded with its pieces.
	uint plo = 0u, phi = 0u;
	float plse = 0.0, ptv = 0.0, pbv = 0.0, ptb = 0.0;
	rowStats(nb * BR + t, rows, nk, nrows, causal, b, hk, gs, plo, phi, plse, ptv, pbv, ptb);
	for (uint rb = nb; rb < nrb; rb = nb) {
		barrier(); // the previous block's rows are no longer read
		PX_ALLQ(PX_QSTORE)
		if (t < BR) {
			sLo[t] = plo;
			sHi[t] = phi;
			sLse[t] = plse;
			sT[t] = ptv;
			sBv[t] = pbv;
			sTb[t] = ptb;
		}
		barrier();
		nb = nextBlock(rb + 1u, nrb);
		PX_ALLQ(PX_QLOAD)
		rowStats(nb * BR + t, rows, nk, nrows, causal, b, hk, gs, plo, phi, plse, ptv, pbv, ptb);

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
			uint r = r0 + c, e = kk * 16u + r;
			float ds = 0.0, dt = 0.0, w = 0.0;
			if (key < j1 && key >= sLo[r] && key < sHi[r]) {
				float a = sS[sbase + 256u + e];
				float tv = HAS_R != 0u ? sS[sbase + 512u + e] : 0.0;
				float p = exp(pc.scale * sS[sbase + e] - sLse[r]);
				ds = p * (a - sT[r] + (sTb[r] - tv) * (a - sBv[r]));
				dt = -p * (a - sBv[r]);
				w = p * (1.0 + sTb[r] - tv);
			}
			sP[pbase + e] = float16_t(pc.scale * ds);
			sP[pbase + 256u + e] = float16_t(w);
			if (HAS_R != 0u) {
				sP[pbase + 512u + e] = float16_t(dt);
			}
		}
		subgroupMemoryBarrierShared();
		subgroupBarrier();
		FRAG16 dst, wt, dtt;
		coopMatLoadNV(dst, sP, pbase, 16u, false);
		coopMatLoadNV(wt, sP, pbase + 256u, 16u, false);
		if (HAS_R != 0u) {
			coopMatLoadNV(dtt, sP, pbase + 512u, 16u, false);
		}
		PX_FRAGS(PX_GRAD)
	}
	bool notFinite = false;
	PX_FRAGS(PX_OUT)
	if (subgroupAny(notFinite) && lane == 0u) {
		px_raise(PX_ERR_F16_RANGE, b, hk, kb, 2u);
	}
}
