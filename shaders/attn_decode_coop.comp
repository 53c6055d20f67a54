#version 450
// Decode attention over a KV cache on tensor cores (GL_NV_cooperative_matrix,
// f16 operands, f32 accumulation): the design of the CUDA decode kernel.
// One workgroup is one 32-wide subgroup and streams one split of one
// (sequence, KV head)'s keys once for every query row of its GQA group
// (G heads x Lq positions, at most 8 rows) and their probes.
//
// The rows are stacked into one 16-row operand A: rows 0-7 the queries
// (scaled after the product, in f32, so that bf16 and f16 inputs stay
// exact), rows 8-15 the probes r. Per tile of 16 keys (K and V converted
// to f16 in shared memory, loaded 16 bytes per invocation a tile ahead):
//   S = A K^T            (16 x 16, D/16 products): query scores and the
//                        probe scores t = r.k of every key at once;
//   softmax              (scalar, four invocations per row): the running
//                        max m, P1 = exp(s - m) and P2 = P1 t, both in f16,
//                        stacked as a 16-row operand [P1; P2];
//   [O1; O2] += [P1; P2] V  (16 x D, D/16 products).
// Accumulators cannot be scaled per row, so when a row's max grows the
// accumulators go through shared memory to be rescaled (exact; after the
// first tiles this is rare). d1 = sum P1 and d2 = sum P2 are kept per
// invocation and summed at the end. Output: the finished o (one split) or
// the partial state (m, d1, d2, O1, O2) that attn_combine merges, laid out
// as attn_fwd's.
//
// f16 limits this path to values below 65504: K and V elements (bf16 caches
// are converted), queries, probes and P2 = P1 t. A result that is not
// finite raises PX_ERR_F16_RANGE instead of passing silently; the scalar
// kernel (attn_decode) has no such limit.
//
// The host uses it only on devices with a 16x16x16 f16 x f16 -> f32
// subgroup shape, 32-wide subgroups and clustered subgroup operations, for
// bf16 or f16 caches (K and V of one dtype) and D a multiple of 16 up to
// 256. Accumulators and prefetched pieces are named variables expanded by
// macros, never arrays (see attn_decode.comp on local memory).
//
// PX_SH16 stages K and V as 16-bit shared elements (eight stores per piece)
// instead of 16-byte vectors: the same arithmetic with the simplest
// operand layout, kept as a tuning and diagnosis variant.
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_vote : require
#extension GL_KHR_shader_subgroup_clustered : require
#include "common.glsl"
#include "attn.glsl"

layout(constant_id = 1) const uint D = 128;
layout(constant_id = 5) const uint HAS_R = 1;
layout(constant_id = 7) const uint PARTIAL = 0;

IN(0, Q)
IN(1, K)
IN(2, V)
IN(3, R)
OUT(4, O)
INDEX(5, lens)
F32BUF(6, part)
STATUS(7)

// 16-byte views of the caches (aliases of bindings 1 and 2).
layout(std430, binding = 1) readonly buffer K4_ { uvec4 K4[]; };
layout(std430, binding = 2) readonly buffer V4_ { uvec4 V4[]; };

const uint BC = 16u;          // keys per tile
const uint NF = D / 16u;      // 16-column fragments of a row (<= 16)
const uint SD = D + 8u;       // shared row stride in halves: rows 16 bytes apart mod 128
const uint SD8 = SD / 8u;     // the same in 16-byte vectors
const uint NP = D / 8u;       // 16-byte pieces of one key row
const uint LDN = BC * NP / WG; // pieces per invocation per tile (WG = 32: D / 16 <= 16)

shared float16_t sA[16u * SD]; // [row][x]: queries, then probes
#ifdef PX_SH16
shared float16_t sK[BC * SD];  // [key][x]
shared float16_t sV[BC * SD];
#define PX_KOFF(x) (x)
#define PX_KSTRIDE SD
#else
shared uvec4 sK[BC * SD8];     // [key][8 halves]
shared uvec4 sV[BC * SD8];
#define PX_KOFF(x) ((x) / 8u)
#define PX_KSTRIDE SD8
#endif
shared float sS[16u * BC];     // scores [row][key]; at the end m, d1, d2
shared float16_t sP[16u * BC]; // [P1; P2] [row][key]
shared float sO[16u * D];      // accumulators for rescaling and the output
shared float sAl[8];           // per-row rescale factors

#define FRAG16 fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define FRAG32 fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>

// A 16-byte piece of K or V as eight f16 values.
uvec4 toHalf(uvec4 w) {
	if (K_dt != DT_BF16) {
		return w;
	}
	return uvec4(packHalf2x16(vec2(uintBitsToFloat(w.x << 16), uintBitsToFloat(w.x & 0xffff0000u))),
	             packHalf2x16(vec2(uintBitsToFloat(w.y << 16), uintBitsToFloat(w.y & 0xffff0000u))),
	             packHalf2x16(vec2(uintBitsToFloat(w.z << 16), uintBitsToFloat(w.z & 0xffff0000u))),
	             packHalf2x16(vec2(uintBitsToFloat(w.w << 16), uintBitsToFloat(w.w & 0xffff0000u))));
}

#ifdef PX_SH16
void stPiece(uint kj, uint c, uvec4 kw, uvec4 vw) {
	uint o = kj * SD + 8u * c;
	PX_UNROLL for (uint i = 0u; i < 4u; i++) {
		f16vec2 kh = unpackFloat2x16(kw[i]), vh = unpackFloat2x16(vw[i]);
		sK[o + 2u * i] = kh.x;
		sK[o + 2u * i + 1u] = kh.y;
		sV[o + 2u * i] = vh.x;
		sV[o + 2u * i + 1u] = vh.y;
	}
}
#else
void stPiece(uint kj, uint c, uvec4 kw, uvec4 vw) {
	sK[kj * SD8 + c] = kw;
	sV[kj * SD8 + c] = vw;
}
#endif

// Prefetch registers: piece l of this invocation is piece t + 32 l of the
// tile (key e / NP, column piece e % NP). Keys past the split load zeros
// (their V must be finite: P is 0 there, and 0 * NaN is not 0).
#define PX_DECL(l) uvec4 k##l = uvec4(0u), v##l = uvec4(0u);
#define PX_LOAD(l)                                   \
	if (l < LDN) {                                   \
		uint e = t + WG * l, key = tileStart + e / NP; \
		k##l = uvec4(0u);                            \
		v##l = uvec4(0u);                            \
		if (key < c1) {                              \
			uint p = (kvbase + key) * NP + e % NP;   \
			k##l = K4[p];                            \
			v##l = V4[p];                            \
		}                                            \
	}
#define PX_STORE(l)                                            \
	if (l < LDN) {                                             \
		uint e = t + WG * l;                                   \
		stPiece(e / NP, e % NP, toHalf(k##l), toHalf(v##l));  \
	}
#define PX_ALL(M) M(0u) M(1u) M(2u) M(3u) M(4u) M(5u) M(6u) M(7u) M(8u) M(9u) M(10u) M(11u) M(12u) M(13u) M(14u) M(15u)

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
#define PX_SCORE(n)                                          \
	if (n < NF) {                                            \
		FRAG16 a, kb;                                        \
		coopMatLoadNV(a, sA, 16u * n, SD, false);            \
		coopMatLoadNV(kb, sK, PX_KOFF(16u * n), PX_KSTRIDE, true); \
		s = coopMatMulAddNV(a, kb, s);                       \
	}
#define PX_PV(n)                                                   \
	if (n < NF) {                                                  \
		FRAG16 vb;                                                 \
		coopMatLoadNV(vb, sV, PX_KOFF(16u * n), PX_KSTRIDE, false); \
		o##n = coopMatMulAddNV(pf, vb, o##n);                      \
	}
#define PX_FRAGS(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11) M(12) M(13) M(14) M(15)

void main() {
	uint t = gl_LocalInvocationID.x;
	uint g = px_group();
	uint S = pc.splits;
	uint split = g % S, bh = g / S;
	if (bh >= pc.B * pc.Hkv) {
		return;
	}
	uint b = bh / pc.Hkv, hk = bh % pc.Hkv;
	int nb = lens[b];
	if (nb < int(pc.Lq) || nb > int(pc.Lk)) {
		if (t == 0u && hk == 0u && split == 0u) {
			px_raise(PX_ERR_LENS_RANGE, b, uint(nb), pc.Lk, pc.Lq);
		}
		return;
	}
	uint n = uint(nb);
	uint rows = pc.G * pc.Lq;
	uint lo0, hi0;
	visible(0u, n, true, lo0, hi0);
	uint c0 = lo0 + (n - lo0) * split / S;
	uint c1 = lo0 + (n - lo0) * (split + 1u) / S;

	// Invocation t owns row i = t / 4 and keys 4 (t % 4) .. + 3 of each
	// tile in the softmax; its row's visible keys within this split:
	uint i = t >> 2u, kq = (t & 3u) * 4u;
	uint rlo = 0u, rhi = 0u;
	if (i < rows) {
		visible(i % pc.Lq, n, true, rlo, rhi);
		rlo = max(rlo, c0);
		rhi = max(min(rhi, c1), rlo);
	}

	for (uint e = t; e < 16u * SD; e += WG) {
		uint r = e / SD, x = e % SD, ri = r & 7u;
		float val = 0.0;
		if (x < D && ri < rows) {
			uint off = qrow(b, hk, ri) * D + x;
			if (r < 8u) {
				val = Q_ld(off); // scaled in f32 after the product: exact operands
			} else if (HAS_R != 0u) {
				val = R_ld(off);
			}
		}
		sA[e] = float16_t(val);
	}

	uint kvbase = (b * pc.Hkv + hk) * pc.Lk; // first key row of this (b, hk)
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
		coopMatStoreNV(s, sS, 0u, BC, false);
		barrier();

		vec4 s4 = vec4(sS[i * BC + kq], sS[i * BC + kq + 1u], sS[i * BC + kq + 2u], sS[i * BC + kq + 3u]) * pc.scale;
		vec4 t4 = vec4(0.0);
		if (HAS_R != 0u) {
			uint r8 = (8u + i) * BC + kq;
			t4 = vec4(sS[r8], sS[r8 + 1u], sS[r8 + 2u], sS[r8 + 3u]);
		}
		uvec4 key = uvec4(t0 + kq) + uvec4(0u, 1u, 2u, 3u);
		bvec4 ok = bvec4(uvec4(greaterThanEqual(key, uvec4(rlo))) * uvec4(lessThan(key, uvec4(rhi))));
		vec4 neg = vec4(PX_NEG_INF);
		s4 = mix(neg, s4, ok);
		float mx = subgroupClusteredMax(max(max(s4.x, s4.y), max(s4.z, s4.w)), 4u);
		float mNew = max(m, mx);
		// O rows are zero until the first visible key: no rescale then.
		bool resc = m != PX_NEG_INF && mNew > m;
		float alpha = resc ? exp(m - mNew) : 1.0;
		m = mNew;
		vec4 p = vec4(0.0);
		if (mNew != PX_NEG_INF) {
			p = mix(vec4(0.0), exp(s4 - mNew), ok);
		}
		vec4 pt = p * t4;
		bad = bad || any(greaterThan(abs(pt), vec4(65504.0)));
		d1 = d1 * alpha + (p.x + p.y + p.z + p.w);
		d2 = d2 * alpha + (pt.x + pt.y + pt.z + pt.w);
		PX_UNROLL for (uint c = 0u; c < 4u; c++) {
			sP[i * BC + kq + c] = float16_t(p[c]);
			sP[(8u + i) * BC + kq + c] = float16_t(pt[c]);
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
		coopMatLoadNV(pf, sP, 0u, BC, false);
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
	bad = subgroupAny(bad);
	barrier();
	bool notFinite = false;
	for (uint e = t; e < rows * D; e += WG) {
		uint ri = e / D, x = e % D;
		float a1 = sO[ri * D + x], a2 = sO[(8u + ri) * D + x];
		float dd1 = sS[8u + ri], dd2 = sS[16u + ri];
		uint row = qrow(b, hk, ri);
		if (PARTIAL != 0u) {
			uint base = (row * S + split) * (3u + 2u * D);
			part[base + 3u + x] = a1;
			part[base + 3u + D + x] = a2;
			if (x == 0u) {
				part[base] = sS[ri];
				part[base + 1u] = dd1;
				part[base + 2u] = dd2;
			}
			notFinite = notFinite || isinf(a1) || isnan(a1) || isinf(a2) || isnan(a2) ||
			            isinf(dd1) || isnan(dd1) || isinf(dd2) || isnan(dd2);
		} else {
			float o = 0.0;
			if (dd1 > 0.0) {
				float vb = a1 / dd1;
				o = HAS_R != 0u ? vb * (1.0 + dd2 / dd1) - a2 / dd1 : vb;
			}
			O_st(row * D + x, o);
			notFinite = notFinite || isinf(o) || isnan(o);
		}
	}
	if (subgroupAny(notFinite || bad) && t == 0u) {
		px_raise(PX_ERR_F16_RANGE, b, hk, split, 0u);
	}
}
