#version 450
// Tensor-core matrix product through GL_NV_cooperative_matrix: C = op(A)
// op(B) (+ C) with A and B in f16, f32 accumulation, C in any dtype. A
// workgroup of four 32-wide subgroups computes a 64 x 64 tile of C, each
// subgroup a 32 x 32 quarter as 2 x 2 fragments of 16 x 16 x 16 products.
// Slices of TK = 32 along K are staged in shared memory (zero-padded at the
// edges, transposed operands read transposed), fragments are loaded from
// there, and the result goes through shared memory to be stored with the
// bounds, accumulation and dtype conversion of the scalar kernel. Same
// push constants and grid as matmul.comp. Used only on devices that report
// a 16x16x16 f16 x f16 -> f32 subgroup shape and a subgroup size of 32.
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#include "common.glsl"

const uint TM = 64u, TN = 64u, TK = 32u;

layout(std430, binding = 0) readonly buffer A_ { float16_t A[]; };
layout(std430, binding = 1) readonly buffer B_ { float16_t Bm[]; };
OUT(2, C)

layout(push_constant) uniform PC {
	uint M, N, K;
	uint transA, transB, accumulate;
	uint strideA, strideB, strideC;
	uint zbase;
} pc;

shared float16_t sA[TM * TK];
shared float16_t sB[TK * TN];
shared float sC[TM * TN];

#define FRAG16 fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define FRAG32 fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>

void main() {
	uint t = gl_LocalInvocationID.x;
	uint sg = gl_SubgroupID;
	uint sm = (sg / 2u) * 32u, sn = (sg % 2u) * 32u;
	uint m0 = gl_WorkGroupID.y * TM, n0 = gl_WorkGroupID.x * TN;
	uint z = gl_WorkGroupID.z + pc.zbase;
	uint aoff = z * pc.strideA, boff = z * pc.strideB, coff = z * pc.strideC;
	uint M = pc.M, N = pc.N, K = pc.K;

	FRAG32 c00 = FRAG32(0.0), c01 = FRAG32(0.0), c10 = FRAG32(0.0), c11 = FRAG32(0.0);
	for (uint k0 = 0u; k0 < K; k0 += TK) {
		for (uint e = t; e < TM * TK; e += WG) {
			uint mm, kk;
			if (pc.transA == 0u) {
				mm = e / TK;
				kk = e % TK;
			} else {
				kk = e / TM;
				mm = e % TM;
			}
			uint m = m0 + mm, k = k0 + kk;
			float16_t v = float16_t(0.0);
			if (m < M && k < K) {
				v = A[aoff + (pc.transA == 0u ? m * K + k : k * M + m)];
			}
			sA[mm * TK + kk] = v;
		}
		for (uint e = t; e < TK * TN; e += WG) {
			uint nn, kk;
			if (pc.transB == 0u) {
				kk = e / TN;
				nn = e % TN;
			} else {
				nn = e / TK;
				kk = e % TK;
			}
			uint n = n0 + nn, k = k0 + kk;
			float16_t v = float16_t(0.0);
			if (n < N && k < K) {
				v = Bm[boff + (pc.transB == 0u ? k * N + n : n * K + k)];
			}
			sB[kk * TN + nn] = v;
		}
		barrier();
		for (uint kk = 0u; kk < TK; kk += 16u) {
			FRAG16 a0, a1, b0, b1;
			coopMatLoadNV(a0, sA, sm * TK + kk, TK, false);
			coopMatLoadNV(a1, sA, (sm + 16u) * TK + kk, TK, false);
			coopMatLoadNV(b0, sB, kk * TN + sn, TN, false);
			coopMatLoadNV(b1, sB, kk * TN + sn + 16u, TN, false);
			c00 = coopMatMulAddNV(a0, b0, c00);
			c01 = coopMatMulAddNV(a0, b1, c01);
			c10 = coopMatMulAddNV(a1, b0, c10);
			c11 = coopMatMulAddNV(a1, b1, c11);
		}
		barrier();
	}
	coopMatStoreNV(c00, sC, sm * TN + sn, TN, false);
	coopMatStoreNV(c01, sC, sm * TN + sn + 16u, TN, false);
	coopMatStoreNV(c10, sC, (sm + 16u) * TN + sn, TN, false);
	coopMatStoreNV(c11, sC, (sm + 16u) * TN + sn + 16u, TN, false);
	barrier();
	for (uint e = t; e < TM * TN; e += WG) {
		uint m = m0 + e / TN, n = n0 + e % TN;
		if (m < M && n < N) {
			uint idx = coff + m * N + n;
			float v = sC[e];
			if (pc.accumulate != 0u) {
				v += C_ld(idx);
			}
			C_st(idx, v);
		}
	}
}
