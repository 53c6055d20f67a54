#version 450
// Decode attention over a KV cache on tensor cores (GL_NV_cooperative_matrix,
// f16 operands, f32 accumulation) for up to 8 query rows per KV head (G Lq),
// as 16 x 16 x 16 products. What it shares with attn_decode_coop8 (the
// kernel for up to 4 rows) is in decode_coop.glsl.
//
// The rows are stacked into one 16-row operand A: rows 0-7 the queries
// (scaled after the product, in f32, so that bf16 and f16 inputs stay
// exact), rows 8-15 the probes r. Per tile of 16 keys:
//   S = A K^T            (16 x 16, D/16 products): query scores and the
//                        probe scores t = r.k of every key at once;
//   softmax              (scalar, four invocations per row): P1 =
//                        exp(s - m) and P2 = P1 t, both in f16, stacked as
//                        a 16-row operand [P1; P2];
//   [O1; O2] += [P1; P2] V  (16 x D, D/16 products).
// Accumulators cannot be scaled per row in registers: when a row's
// reference max moves they go through shared memory to be rescaled. d1 =
// sum P1 and d2 = sum P2 are kept per invocation and summed at the end.
// Output: the finished o (one split) or the partial state (m, d1, d2, O1,
// O2) that attn_combine merges, laid out as attn_fwd's.
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

shared float16_t sA[16u * SD]; // [row][x]: queries, then probes
shared float sS[16u * 16u];    // scores [row][key]; at the end m, d1, d2
shared float16_t sP[16u * 16u]; // [P1; P2] [row][key]
shared float sO[16u * D];      // accumulators for rescaling and the output
shared float sAl[8];           // per-row rescale factors

// The accumulators [O1; O2], one 16 x 16 fragment per 16 columns.
#define PX_ODECL(n) FRAG32 o##n = FRAG32(0.0);
#define PX_OSTORE(n) \
	if (n < NF) {    \
		coopMatStoreNV(o##n, sO, 16u * n, D, false); \
	}
#define PX_OLOAD(n) \
	if (n < NF) {   \
		coopMatLoadNV(o##n, sO, 16u * n, D, false); \
	}
#define PX_SCORE(n)                                                \
	if (n < NF) {                                                  \
		FRAG16 a, kb;                                              \
		coopMatLoadNV(a, sA, 16u * n, SD, false);                  \
		coopMatLoadNV(kb, sK, PX_KOFF(16u * n), PX_KSTRIDE, true); \
		s = coopMatMulAddNV(a, kb, s);                             \
	}
#define PX_PV(n)                                                    \
	if (n < NF) {                                                   \
		FRAG16 vb;                                                  \
		coopMatLoadNV(vb, sV, PX_KOFF(16u * n), PX_KSTRIDE, false); \
		o##n = coopMatMulAddNV(pf, vb, o##n);                       \
	}

void main() {
	if (!decodeBegin()) {
		return;
	}
	// Invocation t owns row i = t / 4 and keys 4 (t % 4) .. + 3 of each
	// tile in the softmax.
	uint i = t >> 2u, kq = (t & 3u) * 4u;
	uint rlo, rhi;
	rowKeys(i, rlo, rhi);
	for (uint e = t; e < 16u * SD; e += WG) {
		sA[e] = float16_t(qrLoad(e / SD, e % SD, 8u));
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

		FRAG32 s = FRAG32(0.0);
		PX_FRAGS(PX_SCORE)
		coopMatStoreNV(s, sS, 0u, 16u, false);
		barrier();

		vec4 s4 = vec4(sS[i * 16u + kq], sS[i * 16u + kq + 1u], sS[i * 16u + kq + 2u], sS[i * 16u + kq + 3u]) * pc.scale;
		vec4 t4 = vec4(0.0);
		if (HAS_R != 0u) {
			uint r8 = (8u + i) * 16u + kq;
			t4 = vec4(sS[r8], sS[r8 + 1u], sS[r8 + 2u], sS[r8 + 3u]);
		}
		uvec4 key = uvec4(t0 + kq) + uvec4(0u, 1u, 2u, 3u);
		bvec4 ok = bvec4(uvec4(greaterThanEqual(key, uvec4(rlo))) * uvec4(lessThan(key, uvec4(rhi))));
		s4 = mix(vec4(PX_NEG_INF), s4, ok);
		float mx = subgroupClusteredMax(max(max(s4.x, s4.y), max(s4.z, s4.w)), 4u);
		// The reference max moves on the first visible key, or when the
		// tile's exceeds it by more than the slack (then the rows already
		// accumulated are rescaled).
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
			sP[i * 16u + kq + c] = float16_t(p[c]);
			sP[(8u + i) * 16u + kq + c] = float16_t(pt[c]);
		}
		if ((t & 3u) == 0u) {
			sAl[i] = alpha;
		}
		bool anyResc = subgroupAny(resc);
		barrier();
		if (anyResc) {
			PX_FRAGS(PX_OSTORE)
			barrier();
			for (uint e = t; e < 16u * D; e += WG) {
				sO[e] *= sAl[(e / D) & 7u];
			}
			barrier();
			PX_FRAGS(PX_OLOAD)
		}
		FRAG16 pf;
		coopMatLoadNV(pf, sP, 0u, 16u, false);
		PX_FRAGS(PX_PV)
		barrier();
	}

	PX_FRAGS(PX_OSTORE)
	d1 = subgroupClusteredAdd(d1, 4u);
	d2 = subgroupClusteredAdd(d2, 4u);
	if ((t & 3u) == 0u) {
		sS[i] = m;
		sS[8u + i] = d1;
		sS[16u + i] = d2;
	}
	barrier();
	bool notFinite = false;
	for (uint e = t; e < rows * D; e += WG) {
		uint ri = e / D, x = e % D;
		notFinite = decodeOut(ri, x, sO[ri * D + x], sO[(8u + ri) * D + x], sS[ri], sS[8u + ri], sS[16u + ri]) || notFinite;
	}
	decodeFinish(notFinite, bad);
}
