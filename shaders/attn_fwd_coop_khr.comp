#version 450
// Softmax and Parallax attention forward through GL_KHR_cooperative_matrix
// (AMD, Intel, NVIDIA and Mesa's lavapipe expose it): attn_fwd_coop's
// algorithm (the NV kernel; docs/MATH.md section 3) with the fragment edge
// F (F x F x F, f16 operands, f32 accumulation) and the subgroup size SG
// specialization constants that the host takes from the device: 16 and 32
// on NVIDIA, 16 and 64 on AMD, 8 and 8 on lavapipe.
//
// A workgroup is two subgroups and takes a block of 2 F rows (F per
// subgroup) of one (sequence, KV head)'s G Lq rows, with their queries and
// probes in shared memory as f16, and walks the keys the block sees in
// tiles of F, K and V staged in shared memory as f16 (bf16 converted).
// Per tile and subgroup:
//   S = Q K^T, T = R K^T        (F x F each, D/F products each; the
//                               softmax scale is applied in f32 after)
//   softmax                     (scalar, LPR = SG / F invocations a row,
//                               KPL = F / LPR keys each): P1 = exp(S - m),
//                               P2 = P1 T, in f16
//   O1 += P1 V, O2 += P2 V      (F x D each, D/F products each)
// with the running sums d1 = sum P1, d2 = sum P2, the reference max m
// moving lazily (decode_coop.glsl explains why that is exact) and the
// accumulators rescaled through shared memory when it does (every
// subgroup of the workgroup together, so that all reach the same
// barriers). Output as
// attn_fwd: o = vbar (1 + tbar) - O2 / d1 with vbar = O1 / d1, tbar = d2 /
// d1 (softmax: o = vbar), and on request lse = m + log d1, vbar and tbar.
//
// f16 limits this path to values below 65504 in magnitude (Q, K, V, R and
// P2); a result that is not finite raises PX_ERR_F16_RANGE. The host runs
// it for 16-bit Q, K, V (and R) with D a multiple of 16 up to 128, where
// the subgroup size is fixed at SG, LPR is 1, 2 or 4 and KPL 4 or 8.
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_vote : require
#extension GL_KHR_shader_subgroup_shuffle : require
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
OUT(4, O)
F32BUF(5, LSE)
OUT(6, VB)
F32BUF(7, TB)
STATUS(8)

layout(std430, binding = 1) readonly buffer K4_ { uvec4 K4[]; };
layout(std430, binding = 2) readonly buffer V4_ { uvec4 V4[]; };

const uint NSG = 2u, BR = NSG * F, BC = F;
const uint NF = D / F; // <= 16
const uint SD = D + 8u;
const uint NP = D / 8u;
const uint FF = F * F;
const uint LPR = SG / F; // invocations a row in the softmax
const uint KPL = F / LPR; // keys each of them takes (<= 8)
const uint QR = HAS_R != 0u ? 2u : 1u;

shared float16_t sQ[QR * BR * SD]; // queries, then probes: [row][x]
shared float16_t sK[BC * SD];
shared float16_t sV[BC * SD];
shared float sS[NSG * 2u * FF];       // per subgroup: S, then T ([row][key]); rescale and output scratch
shared float16_t sP[NSG * 2u * FF];   // per subgroup: P1, then P2
shared float sAl[BR], sM[BR], sD1[BR], sD2[BR];
shared uint sLo[BR], sHi[BR];
shared uint sResc[NSG];

#define PX_ODECL(n) FRAG_C o1##n = FRAG_C(0.0), o2##n = FRAG_C(0.0);
// S += Q_n K_n^T (and T += R_n K_n^T): K^T's (d, key) is sK[key SD + d].
#define PX_SCORE(n)                                                \
	if (n < NF) {                                                  \
		FRAG_B kb;                                                 \
		FRAG_A a;                                                  \
		coopMatLoad(kb, sK, F * n, SD, COL_MAJOR);                 \
		coopMatLoad(a, sQ, qoff + F * n, SD, ROW_MAJOR);           \
		s = coopMatMulAdd(a, kb, s);                               \
		if (HAS_R != 0u) {                                         \
			coopMatLoad(a, sQ, BR * SD + qoff + F * n, SD, ROW_MAJOR); \
			tt = coopMatMulAdd(a, kb, tt);                         \
		}                                                          \
	}
#define PX_PV(n)                                      \
	if (n < NF) {                                     \
		FRAG_B vb;                                    \
		coopMatLoad(vb, sV, F * n, SD, ROW_MAJOR);    \
		o1##n = coopMatMulAdd(p1, vb, o1##n);         \
		if (HAS_R != 0u) {                            \
			o2##n = coopMatMulAdd(p2, vb, o2##n);     \
		}                                             \
	}
// Rescale an accumulator's rows through the subgroup's scratch.
#define PX_RESCALE1(acc)                                 \
	coopMatStore(acc, sS, sbase, F, ROW_MAJOR);          \
	subgroupMemoryBarrierShared();                       \
	subgroupBarrier();                                   \
	for (uint e = lane; e < FF; e += SG) {               \
		sS[sbase + e] *= sAl[sg * F + e / F];            \
	}                                                    \
	subgroupMemoryBarrierShared();                       \
	subgroupBarrier();                                   \
	coopMatLoad(acc, sS, sbase, F, ROW_MAJOR);           \
	subgroupMemoryBarrierShared();                       \
	subgroupBarrier();
#define PX_RESCALE(n)          \
	if (n < NF) {              \
		PX_RESCALE1(o1##n)     \
		if (HAS_R != 0u) {     \
			PX_RESCALE1(o2##n) \
		}                      \
	}
// The finished accumulators go through the scratch one fragment at a time.
#define PX_OUT(n)                                                                     \
	if (n < NF) {                                                                     \
		coopMatStore(o1##n, sS, sbase, F, ROW_MAJOR);                                 \
		if (HAS_R != 0u) {                                                            \
			coopMatStore(o2##n, sS, sbase + FF, F, ROW_MAJOR);                        \
		}                                                                             \
		subgroupMemoryBarrierShared();                                                \
		subgroupBarrier();                                                            \
		for (uint e = lane; e < FF; e += SG) {                                        \
			uint r = e / F, rr = row0 + r;                                            \
			if (rr < rows) {                                                          \
				float d1 = sD1[sg * F + r], a1 = sS[sbase + e], o = 0.0, vb = 0.0;    \
				if (sHi[sg * F + r] > sLo[sg * F + r]) {                              \
					vb = a1 / d1;                                                     \
					o = vb;                                                           \
					if (HAS_R != 0u) {                                                \
						o = vb * (1.0 + sD2[sg * F + r] / d1) - sS[sbase + FF + e] / d1; \
					}                                                                 \
				}                                                                     \
				notFinite = notFinite || isinf(o) || isnan(o);                        \
				uint off = qrow(b, hk, rr) * D + F * n + e % F;                       \
				O_st(off, o);                                                         \
				if ((pc.flags & 2u) != 0u) {                                          \
					VB_st(off, vb);                                                   \
				}                                                                     \
			}                                                                         \
		}                                                                             \
		subgroupMemoryBarrierShared();                                                \
		subgroupBarrier();                                                            \
	}

// rowMax and rowSum reduce over the LPR adjacent invocations of a row.
float rowMax(float v) {
	for (uint o = LPR >> 1u; o > 0u; o >>= 1u) {
		v = max(v, subgroupShuffleXor(v, o));
	}
	return v;
}

float rowSum(float v) {
	for (uint o = LPR >> 1u; o > 0u; o >>= 1u) {
		v += subgroupShuffleXor(v, o);
	}
	return v;
}

void main() {
	uint t = gl_LocalInvocationID.x, sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
	uint g = px_group();
	uint qb = g % pc.nblocks, bh = g / pc.nblocks;
	if (bh >= pc.B * pc.Hkv) {
		return;
	}
	uint b = bh / pc.Hkv, hk = bh % pc.Hkv;
	uint n = pc.Lk, rows = pc.G * pc.Lq;
	bool causal = pc.causal != 0u;
	if (t < BR) {
		uint rr = qb * BR + t, lo = 0u, hi = 0u;
		if (rr < rows) {
			visible(rr % pc.Lq, n, causal, lo, hi);
		}
		sLo[t] = lo;
		sHi[t] = hi;
	}
	for (uint e = t; e < QR * BR * SD; e += WG) {
		uint which = e / (BR * SD), r = (e / SD) % BR, x = e % SD, rr = qb * BR + r;
		float val = 0.0;
		if (x < D && rr < rows) {
			uint off = qrow(b, hk, rr) * D + x;
			val = which == 0u ? Q_ld(off) : R_ld(off);
		}
		sQ[e] = float16_t(val);
	}
	barrier();
	uint kmin = n, kmax = 0u;
	for (uint r = 0u; r < BR; r++) {
		if (sLo[r] < sHi[r]) {
			kmin = min(kmin, sLo[r]);
			kmax = max(kmax, sHi[r]);
		}
	}
	// This subgroup's F rows; in the softmax, invocation lane owns row
	// r = lane / LPR and keys KPL (lane % LPR) .. + KPL - 1 of each tile.
	uint row0 = qb * BR + sg * F, qoff = sg * F * SD, sbase = sg * 2u * FF, pbase = sg * 2u * FF;
	uint r = lane / LPR, kq = (lane % LPR) * KPL;
	uint rlo = sLo[sg * F + r], rhi = sHi[sg * F + r];
	uint kvbase = (b * pc.Hkv + hk) * pc.Lk;

	float m = PX_NEG_INF, d1 = 0.0, d2 = 0.0;
	bool bad = false;
	PX_FRAGS(PX_ODECL)
	for (uint t0 = kmin; t0 < kmax; t0 += BC) {
		PX_STAGE(sK, K4, t0, BC, kmax)
		PX_STAGE(sV, V4, t0, BC, kmax)
		barrier();

		FRAG_C s = FRAG_C(0.0), tt = FRAG_C(0.0);
		PX_FRAGS(PX_SCORE)
		coopMatStore(s, sS, sbase, F, ROW_MAJOR);
		if (HAS_R != 0u) {
			coopMatStore(tt, sS, sbase + FF, F, ROW_MAJOR);
		}
		subgroupMemoryBarrierShared();
		subgroupBarrier();

		uint i0 = sbase + r * F + kq;
		float sv[8], tv[8];
		float mx = PX_NEG_INF;
		PX_UNROLL for (uint c = 0u; c < 8u; c++) {
			sv[c] = PX_NEG_INF;
			tv[c] = 0.0;
			uint key = t0 + kq + c;
			if (c < KPL && key >= rlo && key < rhi) {
				sv[c] = sS[i0 + c] * pc.scale;
				if (HAS_R != 0u) {
					tv[c] = sS[i0 + FF + c];
				}
			}
			mx = max(mx, sv[c]);
		}
		mx = rowMax(mx);
		bool resc = m != PX_NEG_INF && mx > m + PX_SLACK;
		float alpha = 1.0;
		if (resc) {
			alpha = exp(m - mx);
			m = mx;
		} else if (m == PX_NEG_INF) {
			m = mx;
		}
		float s1 = 0.0, s2 = 0.0;
		uint j0 = pbase + r * F + kq;
		PX_UNROLL for (uint c = 0u; c < 8u; c++) {
			if (c < KPL) {
				float p = (m != PX_NEG_INF && sv[c] != PX_NEG_INF) ? exp(sv[c] - m) : 0.0;
				float pt = p * tv[c];
				bad = bad || abs(pt) > 65504.0;
				s1 += p;
				s2 += pt;
				sP[j0 + c] = float16_t(p);
				if (HAS_R != 0u) {
					sP[j0 + FF + c] = float16_t(pt);
				}
			}
		}
		d1 = d1 * alpha + s1;
		d2 = d2 * alpha + s2;
		if (lane % LPR == 0u) {
			sAl[sg * F + r] = alpha;
		}
		// Whether any row of the block rescales, agreed by the whole
		// workgroup: the rescale's subgroup barriers are then reached by
		// every subgroup alike (some implementations, lavapipe among them,
		// run a workgroup's subgroups in step and need that).
		bool mine = subgroupAny(resc);
		if (lane == 0u) {
			sResc[sg] = mine ? 1u : 0u;
		}
		memoryBarrierShared();
		barrier();
		bool anyResc = false;
		for (uint i = 0u; i < NSG; i++) {
			anyResc = anyResc || sResc[i] != 0u;
		}
		if (anyResc) {
			PX_FRAGS(PX_RESCALE)
		}
		FRAG_A p1, p2;
		coopMatLoad(p1, sP, pbase, F, ROW_MAJOR);
		if (HAS_R != 0u) {
			coopMatLoad(p2, sP, pbase + FF, F, ROW_MAJOR);
		}
		PX_FRAGS(PX_PV)
		barrier();
	}

	d1 = rowSum(d1);
	d2 = rowSum(d2);
	if (lane % LPR == 0u) {
		sM[sg * F + r] = m;
		sD1[sg * F + r] = d1;
		sD2[sg * F + r] = d2;
		uint rr = row0 + r;
		if (rr < rows) {
			uint row = qrow(b, hk, rr);
			// A row that sees keys: d1 NaN, or 0 (every score -inf), is
			// NaN (and its o, reported below), never an empty row's -inf.
			bool keys = rhi > rlo;
			if ((pc.flags & 1u) != 0u) {
				LSE[row] = !keys ? PX_NEG_INF : d1 == 0.0 ? PX_NAN : m + log(d1);
			}
			if ((pc.flags & 4u) != 0u) {
				TB[row] = keys ? d2 / d1 : 0.0;
			}
		}
	}
	subgroupMemoryBarrierShared();
	subgroupBarrier();
	bool notFinite = false;
	PX_FRAGS(PX_OUT)
	if (subgroupAny(notFinite || bad) && lane == 0u) {
		px_raise(PX_ERR_F16_RANGE, b, hk, qb, 1u);
	}
}
