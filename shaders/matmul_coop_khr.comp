#version 450
// Tensor-core matrix product through GL_KHR_cooperative_matrix (AMD, Intel,
// NVIDIA and Mesa's lavapipe expose it): C = op(A) op(B) (+ C) with A and
// B in f16, f32 accumulation, C in any dtype. The same algorithm, push
// constants and grid as matmul_coop.comp (the NV kernel), with the
// fragment shape FM x FN x FK a specialization constant that the host
// picks from the shapes the device reports
// (vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR): 16x16x16 on NVIDIA
// and AMD, 8x8x8 on lavapipe.
//
// A workgroup of four subgroups (WG = 4 x the subgroup size) computes a
// BM x BN = 4 FM x 4 FN tile of C, each subgroup a quarter of it as 2 x 2
// fragments. Slices of TK = 2 FK along K are staged in shared memory
// (zero-padded at the edges, so any M, N and K work; transposed operands
// are read transposed), fragments are loaded from there, and the result
// goes through shared memory to be stored with the bounds, accumulation
// and dtype conversion of the scalar kernel. The host runs it only where
// the subgroup size is fixed, so a workgroup has exactly four subgroups;
// the subgroup guard below keeps a device that breaks that from writing
// out of bounds (the self-check at device open then rejects the kernel).
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#include "common.glsl"

layout(constant_id = 1) const uint FM = 16;
layout(constant_id = 2) const uint FN = 16;
layout(constant_id = 3) const uint FK = 16;

const uint BM = 4u * FM, BN = 4u * FN, TK = 2u * FK;

layout(std430, binding = 0) readonly buffer A_ { float16_t A[]; };
layout(std430, binding = 1) readonly buffer B_ { float16_t Bm[]; };
OUT(2, C)

layout(push_constant) uniform PC {
	uint M, N, K;
	uint transA, transB, accumulate;
	uint strideA, strideB, strideC;
	uint zbase;
} pc;

shared float16_t sA[BM * TK];
shared float16_t sB[TK * BN];
shared float sC[BM * BN];

#define FRAG_A coopmat<float16_t, gl_ScopeSubgroup, FM, FK, gl_MatrixUseA>
#define FRAG_B coopmat<float16_t, gl_ScopeSubgroup, FK, FN, gl_MatrixUseB>
#define FRAG_C coopmat<float, gl_ScopeSubgroup, FM, FN, gl_MatrixUseAccumulator>
#define ROW_MAJOR gl_CooperativeMatrixLayoutRowMajor

void main() {
	uint t = gl_LocalInvocationID.x;
	uint sg = gl_SubgroupID;
	bool busy = sg < 4u; // uniform across the subgroup
	uint sm = (sg / 2u) * 2u * FM, sn = (sg % 2u) * 2u * FN;
	uint m0 = gl_WorkGroupID.y * BM, n0 = gl_WorkGroupID.x * BN;
	uint z = gl_WorkGroupID.z + pc.zbase;
	uint aoff = z * pc.strideA, boff = z * pc.strideB, coff = z * pc.strideC;
	uint M = pc.M, N = pc.N, K = pc.K;

	FRAG_C c00 = FRAG_C(0.0), c01 = FRAG_C(0.0), c10 = FRAG_C(0.0), c11 = FRAG_C(0.0);
	for (uint k0 = 0u; k0 < K; k0 += TK) {
		for (uint e = t; e < BM * TK; e += WG) {
			uint mm, kk;
			if (pc.transA == 0u) {
				mm = e / TK;
				kk = e % TK;
			} else {
				kk = e / BM;
				mm = e % BM;
			}
			uint m = m0 + mm, k = k0 + kk;
			float16_t v = float16_t(0.0);
			if (m < M && k < K) {
				v = A[aoff + (pc.transA == 0u ? m * K + k : k * M + m)];
			}
			sA[mm * TK + kk] = v;
		}
		for (uint e = t; e < TK * BN; e += WG) {
			uint nn, kk;
			if (pc.transB == 0u) {
				kk = e / BN;
				nn = e % BN;
			} else {
				nn = e / TK;
				kk = e % TK;
			}
			uint n = n0 + nn, k = k0 + kk;
			float16_t v = float16_t(0.0);
			if (n < N && k < K) {
				v = Bm[boff + (pc.transB == 0u ? k * N + n : n * K + k)];
			}
			sB[kk * BN + nn] = v;
		}
		barrier();
		if (busy) {
			for (uint kk = 0u; kk < TK; kk += FK) {
				FRAG_A a0, a1;
				FRAG_B b0, b1;
				coopMatLoad(a0, sA, sm * TK + kk, TK, ROW_MAJOR);
				coopMatLoad(a1, sA, (sm + FM) * TK + kk, TK, ROW_MAJOR);
				coopMatLoad(b0, sB, kk * BN + sn, BN, ROW_MAJOR);
				coopMatLoad(b1, sB, kk * BN + sn + FN, BN, ROW_MAJOR);
				c00 = coopMatMulAdd(a0, b0, c00);
				c01 = coopMatMulAdd(a0, b1, c01);
				c10 = coopMatMulAdd(a1, b0, c10);
				c11 = coopMatMulAdd(a1, b1, c11);
			}
		}
		barrier();
	}
	if (busy) {
		coopMatStore(c00, sC, sm * BN + sn, BN, ROW_MAJOR);
		coopMatStore(c01, sC, sm * BN + sn + FN, BN, ROW_MAJOR);
		coopMatStore(c10, sC, (sm + FM) * BN + sn, BN, ROW_MAJOR);
		coopMatStore(c11, sC, (sm + FM) * BN + sn + FN, BN, ROW_MAJOR);
	}
	barrier();
	for (uint e = t; e < BM * BN; e += WG) {
		uint m = m0 + e / BN, n = n0 + e % BN;
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
