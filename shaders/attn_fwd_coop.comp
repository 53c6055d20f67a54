#version 450
// Softmax and Parallax attention forward on tensor cores (GL_NV_cooperative_
// matrix, 16 x 16 x 16 products, f16 operands, f32 accumulation): the
// streaming algorithm of docs/MATH.md section 3 as attn_fwd computes it, for
// prefill and training (no KV cache, one split).
//
// A workgroup is two 32-wide subgroups and takes a block of 32 rows (16 per
// subgroup) of one (sequence, KV head)'s G Lq rows, with their queries and
// probes in shared memory as f16, and walks the keys the block sees in
// tiles of 16, K and V staged in shared memory as f16 (bf16 converted;
// loaded 16 bytes per invocation one tile ahead into registers). Per tile
// and subgroup:
//   S = Q K^T, T = R K^T        (16 x 16 each, D/16 products each; the
//                               softmax scale is applied in f32 after)
//   softmax                     (scalar, two invocations per row): P1 =
//                               exp(S - m), P2 = P1 T, in f16
//   O1 += P1 V, O2 += P2 V      (16 x D each, D/16 products each)
// with the running sums d1 = sum P1, d2 = sum P2. The reference max m of a
// row moves lazily (decode_coop.glsl explains why that is exact); when it
// does, the subgroup rescales its accumulators through shared memory one
// fragment at a time. Output as attn_fwd: o = vbar (1 + tbar) - O2 / d1
// with vbar = O1 / d1, tbar = d2 / d1 (softmax: o = vbar), and on request
// lse = m + log d1, vbar and tbar.
//
// f16 limits this path to values below 65504 in magnitude (Q, K, V, R and
// P2); a result that is not finite raises PX_ERR_F16_RANGE. The host uses
// it for 16-bit Q, K, V (and R) with D a multiple of 16 up to 128, on
// devices with the 16x16x16 f16 -> f32 shape and 32-wide subgroups.
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_vote : require
#extension GL_KHR_shader_subgroup_clustered : require
#include "common.glsl"
#include "attn.glsl"
#include "coop.glsl"

layout(constant_id = 1) const uint D = 128;
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

const uint BR = 32u, BC = 16u, NSG = 2u;
const uint NF = D / 16u;      // <= 8
const uint SD = D + 8u;
const uint SD8 = SD / 8u;
const uint NP = D / 8u;
const uint LDN = (BC * NP + WG - 1u) / WG; // pieces per invocation per tile (<= 4)
const uint QR = HAS_R != 0u ? 2u : 1u;

shared float16_t sQ[QR * BR * SD]; // queries, then probes: [row][x]
shared uvec4 sK[BC * SD8];
shared uvec4 sV[BC * SD8];
shared float sS[NSG * 2u * 256u];    // per subgroup: S, then T ([row][key]); rescale scratch
shared float16_t sP[NSG * 2u * 256u]; // per subgroup: P1, then P2
shared float sAl[NSG * 16u];
shared float sM[NSG * 16u], sD1[NSG * 16u], sD2[NSG * 16u];
shared uint sLo[BR], sHi[BR];

// K/V staging: coop.glsl's prefill macros, four pieces per invocation at most.
#define PX_ALL(M) M(0u) M(1u) M(2u) M(3u)
#define PX_FRAGS(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7)

#define PX_ODECL(n) FRAG32 o1##n = FRAG32(0.0), o2##n = FRAG32(0.0);
#define PX_SCORE(n)                                                        \
	if (n < NF) {                                                          \
		FRAG16 kb, a;                                                      \
		coopMatLoadNV(kb, sK, 2u * n, SD8, true);                          \
		coopMatLoadNV(a, sQ, qoff + 16u * n, SD, false);                   \
		s = coopMatMulAddNV(a, kb, s);                                     \
		if (HAS_R != 0u) {                                                 \
			coopMatLoadNV(a, sQ, BR * SD + qoff + 16u * n, SD, false);     \
			tt = coopMatMulAddNV(a, kb, tt);                               \
		}                                                                  \
	}
#define PX_PV(n)                                           \
	if (n < NF) {                                          \
		FRAG16 vb;                                         \
		coopMatLoadNV(vb, sV, 2u * n, SD8, false);         \
		o1##n = coopMatMulAddNV(p1, vb, o1##n);            \
		if (HAS_R != 0u) {                                 \
			o2##n = coopMatMulAddNV(p2, vb, o2##n);        \
		}                                                  \
	}
// Rescale fragment n of both accumulators through the subgroup's scratch.
#define PX_RESCALE1(acc)                                  \
	coopMatStoreNV(acc, sS, sbase, 16u, false);           \
	subgroupMemoryBarrierShared();                        \
	subgroupBarrier();                                    \
	for (uint e = lane; e < 256u; e += 32u) {             \
		sS[sbase + e] *= sAl[sg * 16u + e / 16u];         \
	}                                                     \
	subgroupMemoryBarrierShared();                        \
	subgroupBarrier();                                    \
	coopMatLoadNV(acc, sS, sbase, 16u, false);            \
	subgroupMemoryBarrierShared();                        \
	subgroupBarrier();
#define PX_RESCALE(n)            \
	if (n < NF) {                \
		PX_RESCALE1(o1##n)       \
		if (HAS_R != 0u) {       \
			PX_RESCALE1(o2##n)   \
		}                        \
	}
// The finished accumulators go through the scratch one fragment at a time.
#define PX_OUT(n)                                                     \
	if (n < NF) {                                                     \
		coopMatStoreNV(o1##n, sS, sbase, 16u, false);                 \
		if (HAS_R != 0u) {                                            \
			coopMatStoreNV(o2##n, sS, sbase + 256u, 16u, false);      \
		}                                                             \
		subgroupMemoryBarrierShared();                                \
		subgroupBarrier();                                            \
		for (uint e = lane; e < 256u; e += 32u) {                     \
			uint r = e / 16u, rr = row0 + r;                          \
			if (rr < rows) {                                          \
				float d1 = sD1[sg * 16u + r], a1 = sS[sbase + e], o = 0.0, vb = 0.0; \
				if (sHi[sg * 16u + r] > sLo[sg * 16u + r]) {          \
					vb = a1 / d1;                                     \
					o = vb;                                           \
					if (HAS_R != 0u) {                                \
						o = vb * (1.0 + sD2[sg * 16u + r] / d1) - sS[sbase + 256u + e] / d1; \
					}                                                 \
				}                                                     \
				notFinite = notFinite || isinf(o) || isnan(o);        \
				uint off = qrow(b, hk, rr) * D + 16u * n + e % 16u;   \
				O_st(off, o);                                         \
				if ((pc.flags & 2u) != 0u) {                          \
					VB_st(off, vb);                                   \
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
	// This subgroup's 16 rows; in the softmax, invocation lane owns row
	// r = lane / 2 and keys 8 (lane % 2) .. + 7 of each tile.
	uint row0 = qb * BR + sg * 16u, qoff = sg * 16u * SD, sbase = sg * 512u, pbase = sg * 512u;
	uint r = lane >> 1u, kq = (lane & 1u) * 8u;
	uint rlo = sLo[sg * 16u + r], rhi = sHi[sg * 16u + r];
	uint kvbase = (b * pc.Hkv + hk) * pc.Lk;

	float m = PX_NEG_INF, d1 = 0.0, d2 = 0.0;
	bool bad = false;
	PX_FRAGS(PX_ODECL)
	PX_ALL(PX_KV_DECL)
	uint tileStart = kmin;
	PX_ALL(PX_KV_LOAD)
	for (uint t0 = kmin; t0 < kmax; t0 += BC) {
		PX_ALL(PX_KV_STORE)
		barrier();
		tileStart = t0 + BC;
		PX_ALL(PX_KV_LOAD)

		FRAG32 s = FRAG32(0.0), tt = FRAG32(0.0);
		PX_FRAGS(PX_SCORE)
		coopMatStoreNV(s, sS, sbase, 16u, false);
		if (HAS_R != 0u) {
			coopMatStoreNV(tt, sS, sbase + 256u, 16u, false);
		}
		subgroupMemoryBarrierShared();
		subgroupBarrier();

		uint i0 = sbase + r * 16u + kq;
		vec4 sa = vec4(sS[i0], sS[i0 + 1u], sS[i0 + 2u], sS[i0 + 3u]) * pc.scale;
		vec4 sb = vec4(sS[i0 + 4u], sS[i0 + 5u], sS[i0 + 6u], sS[i0 + 7u]) * pc.scale;
		vec4 ta = vec4(0.0), tb = vec4(0.0);
		if (HAS_R != 0u) {
			ta = vec4(sS[i0 + 256u], sS[i0 + 257u], sS[i0 + 258u], sS[i0 + 259u]);
			tb = vec4(sS[i0 + 260u], sS[i0 + 261u], sS[i0 + 262u], sS[i0 + 263u]);
		}
		uvec4 ka = uvec4(t0 + kq) + uvec4(0u, 1u, 2u, 3u), kb = ka + uvec4(4u);
		bvec4 oka = bvec4(uvec4(greaterThanEqual(ka, uvec4(rlo))) * uvec4(lessThan(ka, uvec4(rhi))));
		bvec4 okb = bvec4(uvec4(greaterThanEqual(kb, uvec4(rlo))) * uvec4(lessThan(kb, uvec4(rhi))));
		vec4 neg = vec4(PX_NEG_INF);
		sa = mix(neg, sa, oka);
		sb = mix(neg, sb, okb);
		vec4 mm = max(sa, sb);
		float mx = subgroupClusteredMax(max(max(mm.x, mm.y), max(mm.z, mm.w)), 2u);
		bool resc = m != PX_NEG_INF && mx > m + PX_SLACK;
		float alpha = 1.0;
		if (resc) {
			alpha = exp(m - mx);
			m = mx;
		} else if (m == PX_NEG_INF) {
			m = mx;
		}
		vec4 pa = vec4(0.0), pb = vec4(0.0);
		if (m != PX_NEG_INF) {
			pa = mix(vec4(0.0), exp(sa - m), oka);
			pb = mix(vec4(0.0), exp(sb - m), okb);
		}
		vec4 pta = pa * ta, ptb = pb * tb;
		bad = bad || any(greaterThan(max(abs(pta), abs(ptb)), vec4(65504.0)));
		d1 = d1 * alpha + dot(pa + pb, vec4(1.0));
		d2 = d2 * alpha + dot(pta + ptb, vec4(1.0));
		uint j0 = pbase + r * 16u + kq;
		PX_UNROLL for (uint c = 0u; c < 4u; c++) {
			sP[j0 + c] = float16_t(pa[c]);
			sP[j0 + 4u + c] = float16_t(pb[c]);
			if (HAS_R != 0u) {
				sP[j0 + 256u + c] = float16_t(pta[c]);
				sP[j0 + 260u + c] = float16_t(ptb[c]);
			}
		}
		if ((lane & 1u) == 0u) {
			sAl[sg * 16u + r] = alpha;
		}
		bool anyResc = subgroupAny(resc);
		subgroupMemoryBarrierShared();
		subgroupBarrier();
		if (anyResc) {
			PX_FRAGS(PX_RESCALE)
		}
		FRAG16 p1, p2;
		coopMatLoadNV(p1, sP, pbase, 16u, false);
		if (HAS_R != 0u) {
			coopMatLoadNV(p2, sP, pbase + 256u, 16u, false);
		}
		PX_FRAGS(PX_PV)
		barrier();
	}

	d1 = subgroupClusteredAdd(d1, 2u);
	d2 = subgroupClusteredAdd(d2, 2u);
	if ((lane & 1u) == 0u) {
		sM[sg * 16u + r] = m;
		sD1[sg * 16u + r] = d1;
		sD2[sg * 16u + r] = d2;
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
