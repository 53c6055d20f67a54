#version 450
// Decode attention over a KV cache on tensor cores for up to 4 query rows
// per KV head (G Lq <= 4; GQA groups of 2 and 4 in one-token decode), in
// the transposed form whose accumulators are half as large as
// attn_decode_coop's: 16 x 8 x 16 products (GL_NV_cooperative_matrix, f16
// operands, f32 accumulation), so more workgroups fit a multiprocessor and
// more of the cache is in flight. What it shares with attn_decode_coop is
// in decode_coop.glsl.
//
// The 8 columns of the stacked operand A^T are the queries (columns 0-3,
// scaled after the product, in f32) and the probes r (columns 4-7). Per
// tile of BC keys (16 or 32), for each 16 keys:
//   S^T = K A^T            (16 x 8, D/16 products): query scores and the
//                          probe scores t = r.k;
//   softmax                (scalar, eight invocations per row): P1 =
//                          exp(s - m) and P2 = P1 t in f16, as the columns
//                          of [P1 P2]^T;
//   [O1 O2]^T += V^T [P1 P2]^T  (D x 8, D/16 products).
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_vote : require
#extension GL_KHR_shader_subgroup_clustered : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"
#include "attn.glsl"
#include "coop.glsl"
#include "decode_coop.glsl"

const uint KPL = BC / 8u; // keys per invocation in the softmax: 2 or 4

shared float16_t sA[8u * SD]; // [column][x]: queries, then probes
shared float sS[BC * 8u];     // S^T [key][column]; at the end m, d1, d2
shared float16_t sP[BC * 8u]; // [P1 P2]^T [key][column]
shared float sO[D * 8u];      // [O1 O2]^T [x][column], for rescaling and the output
shared float sAl[4];          // per-row rescale factors

#define FA fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define FB fcoopmatNV<16, gl_ScopeSubgroup, 16, 8>
#define FC fcoopmatNV<32, gl_ScopeSubgroup, 16, 8>

// The accumulators [O1 O2]^T, one 16 x 8 fragment per 16 columns of D.
#define PX_ODECL(n) FC o##n = FC(0.0);
#define PX_OSTORE(n) \
	if (n < NF) {    \
		coopMatStoreNV(o##n, sO, 128u * n, 8u, false); \
	}
#define PX_OLOAD(n) \
	if (n < NF) {   \
		coopMatLoadNV(o##n, sO, 128u * n, 8u, false); \
	}
#define PX_SCORE(n)                                                               \
	if (n < NF) {                                                                 \
		FA ka;                                                                    \
		FB qb;                                                                    \
		coopMatLoadNV(ka, sK, PX_KOFF(kc * 16u * SD + 16u * n), PX_KSTRIDE, false); \
		coopMatLoadNV(qb, sA, 16u * n, SD, true);                                 \
		s = coopMatMulAddNV(ka, qb, s);                                           \
	}
#define PX_PV(n)                                                                  \
	if (n < NF) {                                                                 \
		FA va;                                                                    \
		coopMatLoadNV(va, sV, PX_KOFF(kc * 16u * SD + 16u * n), PX_KSTRIDE, true); \
		o##n = coopMatMulAddNV(va, pb, o##n);                                     \
	}

void main() {
	if (!decodeBegin()) {
		return;
	}
	// Invocation t owns row i = t / 8 and keys KPL (t % 8) .. + KPL - 1 of
	// each tile in the softmax.
	uint i = t >> 3u, kq = (t & 7u) * KPL;
	uint rlo, rhi;
	rowKeys(i, rlo, rhi);
	for (uint e = t; e < 8u * SD; e += WG) {
		sA[e] = float16_t(qrLoad(e / SD, e % SD, 4u));
	}

	float m = PX_NEG_INF, d1 = 0.0, d2 = 0.0;
	bool bad = false;
	PX_FRAGS(PX_ODECL)
	PX_ALL(PX_DECL)
	uint tileStart = c0;
	PX_ALL(PX_LOAD)
	for (uint t0 = c0; t0 < c1; t0 += BC) {
		PX_ALL(PX_STORE)
		barrier();
		tileStart = t0 + BC;
		PX_ALL(PX_LOAD)

		PX_UNROLL for (uint kc = 0u; kc < 2u; kc++) {
			if (kc * 16u < BC) {
				FC s = FC(0.0);
				PX_FRAGS(PX_SCORE)
				coopMatStoreNV(s, sS, kc * 128u, 8u, false);
			}
		}
		barrier();

		vec4 s4 = vec4(PX_NEG_INF), t4 = vec4(0.0);
		bvec4 ok = bvec4(false);
		PX_UNROLL for (uint c = 0u; c < 4u; c++) {
			if (c < KPL) {
				uint kj = kq + c, key = t0 + kj;
				ok[c] = key >= rlo && key < rhi;
				s4[c] = ok[c] ? sS[kj * 8u + i] * pc.scale : PX_NEG_INF;
				if (HAS_R != 0u) {
					t4[c] = sS[kj * 8u + 4u + i];
				}
			}
		}
		float mx = subgroupClusteredMax(max(max(s4.x, s4.y), max(s4.z, s4.w)), 8u);
		// The reference max moves on the first visible key, or when the
		// tile's exceeds it by more than the slack (then the columns
		// already accumulated are rescaled).
		bool resc = m != PX_NEG_INF && mx > m + PX_SLACK;
		float alpha = 1.0;
		if (resc) {
			alpha = exp(m - mx);
			m = mx;
		} else if (m == PX_NEG_INF) {
			m = mx;
		}
		vec4 p = vec4(0.0);
		if (m != PX_NEG_INF) {
			p = mix(vec4(0.0), exp(s4 - m), ok);
		}
		vec4 pt = p * t4;
		bad = bad || any(greaterThan(abs(pt), vec4(65504.0)));
		d1 = d1 * alpha + (p.x + p.y + p.z + p.w);
		d2 = d2 * alpha + (pt.x + pt.y + pt.z + pt.w);
		PX_UNROLL for (uint c = 0u; c < 4u; c++) {
			if (c < KPL) {
				sP[(kq + c) * 8u + i] = float16_t(p[c]);
				sP[(kq + c) * 8u + 4u + i] = float16_t(pt[c]);
			}
		}
		if ((t & 7u) == 0u) {
			sAl[i] = alpha;
		}
		bool anyResc = subgroupAny(resc);
		barrier();
		if (anyResc) {
			PX_FRAGS(PX_OSTORE)
			barrier();
			for (uint e = t; e < 8u * D; e += WG) {
				sO[e] *= sAl[e & 3u];
			}
			barrier();
			PX_FRAGS(PX_OLOAD)
		}
		PX_UNROLL for (uint kc = 0u; kc < 2u; kc++) {
			if (kc * 16u < BC) {
				FB pb;
				coopMatLoadNV(pb, sP, kc * 128u, 8u, false);
				PX_FRAGS(PX_PV)
			}
		}
		barrier();
	}

	PX_FRAGS(PX_OSTORE)
	d1 = subgroupClusteredAdd(d1, 8u);
	d2 = subgroupClusteredAdd(d2, 8u);
	if ((t & 7u) == 0u) {
		sS[i] = m;
		sS[4u + i] = d1;
		sS[8u + i] = d2;
	}
	barrier();
	bool notFinite = false;
	for (uint e = t; e < rows * D; e += WG) {
		uint ri = e / D, x = e % D;
		notFinite = decodeOut(ri, x, sO[x * 8u + ri], sO[x * 8u + 4u + ri], sS[ri], sS[4u + ri], sS[8u + ri]) || notFinite;
	}
	decodeFinish(notFinite, bad);
}
