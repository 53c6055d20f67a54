#version 450
// Tiled matrix product C = op(A) op(B) (+ C when accumulating), f32
// accumulation, any input and output dtypes. A workgroup of 256
// invocations (16 x 16) computes a TILE_M x TILE_N tile of C, each
// invocation (TILE_M/16) x (TILE_N/16) entries strided by 16 (so shared
// reads and global stores are contiguous across invocations), stepping
// through K in slices of TK staged in shared memory. Transposed operands
// are read transposed while staging. Workgroup (x, y, z) = (column tile,
// row tile, batch entry - zbase); a rank-2 B is shared by every batch entry
// (strideB = 0).
#include "common.glsl"

layout(constant_id = 1) const uint TILE_M = 64;
layout(constant_id = 2) const uint TILE_N = 64;
layout(constant_id = 3) const uint TK = 16;

const uint RM = TILE_M / 16u;
const uint RN = TILE_N / 16u;

IN(0, A)
IN(1, Bm)
OUT(2, C)

layout(push_constant) uniform PC {
	uint M, N, K;
	uint transA, transB, accumulate;
	uint strideA, strideB, strideC;
	uint zbase;
} pc;

shared float sA[TK * TILE_M];
shared float sB[TK * TILE_N];

void main() {
	uint t = gl_LocalInvocationID.x;
	uint tx = t % 16u, ty = t / 16u;
	uint m0 = gl_WorkGroupID.y * TILE_M;
	uint n0 = gl_WorkGroupID.x * TILE_N;
	uint z = gl_WorkGroupID.z + pc.zbase;
	uint aoff = z * pc.strideA, boff = z * pc.strideB, coff = z * pc.strideC;
	uint M = pc.M, N = pc.N, K = pc.K;

	// acc[i * 8 + j]: literal sizes and trip counts keep the register
	// arrays in registers on NVIDIA (see attn_decode.comp).
	float acc[64];
	PX_UNROLL for (uint i = 0u; i < 64u; i++) {
		acc[i] = 0.0;
	}
	for (uint k0 = 0u; k0 < K; k0 += TK) {
		for (uint e = t; e < TK * TILE_M; e += WG) {
			uint mm, kk;
			if (pc.transA == 0u) {
				mm = e / TK;
				kk = e % TK;
			} else {
				kk = e / TILE_M;
				mm = e % TILE_M;
			}
			uint m = m0 + mm, k = k0 + kk;
			float v = 0.0;
			if (m < M && k < K) {
				v = A_ld(aoff + (pc.transA == 0u ? m * K + k : k * M + m));
			}
			sA[kk * TILE_M + mm] = v;
		}
		for (uint e = t; e < TK * TILE_N; e += WG) {
			uint nn, kk;
			if (pc.transB == 0u) {
				kk = e / TILE_N;
				nn = e % TILE_N;
			} else {
				nn = e / TK;
				kk = e % TK;
			}
			uint n = n0 + nn, k = k0 + kk;
			float v = 0.0;
			if (n < N && k < K) {
				v = Bm_ld(boff + (pc.transB == 0u ? k * N + n : n * K + k));
			}
			sB[kk * TILE_N + nn] = v;
		}
		barrier();
		for (uint kk = 0u; kk < TK; kk++) {
			float a[8], b[8];
			PX_UNROLL for (uint i = 0u; i < 8u; i++) {
				a[i] = i < RM ? sA[kk * TILE_M + ty + 16u * i] : 0.0;
			}
			PX_UNROLL for (uint j = 0u; j < 8u; j++) {
				b[j] = j < RN ? sB[kk * TILE_N + tx + 16u * j] : 0.0;
			}
			PX_UNROLL for (uint i = 0u; i < 8u; i++) {
				PX_UNROLL for (uint j = 0u; j < 8u; j++) {
					if (i < RM && j < RN) {
						acc[i * 8u + j] += a[i] * b[j];
					}
				}
			}
		}
		barrier();
	}
	PX_UNROLL for (uint i = 0u; i < 8u; i++) {
		uint m = m0 + ty + 16u * i;
		if (!(i >= RM || m >= M)) {
			PX_UNROLL for (uint j = 0u; j < 8u; j++) {
				uint n = n0 + tx + 16u * j;
				if (!(j >= RN || n >= N)) {
					uint idx = coff + m * N + n;
					float v = acc[i * 8u + j];
					if (pc.accumulate != 0u) {
						v += C_ld(idx);
					}
					C_st(idx, v);
				}
			}
		}
	}
}
