// Matrix-vector products for decoding: out[m, n] (+)= sum_k x[m, k] w[n, k]
// for a few rows m (M <= 8: the tokens of a decode step), w [N, K] the
// weight in the model's layout (a linear layer's x W^T). A decode step
// reads each weight once, so the product is bound by the weight's bytes:
// one warp streams one weight row with 16-byte loads, four in flight per
// lane, against the M activation rows (small: they stay in L1), and
// reduces across the warp in f32.
#include "common.cuh"

// gemv_row computes column n of out for the M rows of x.
template <int M>
__device__ __forceinline__ void gemv_row(void *out, int dto, const void *x, const void *w, int dt, int N, int K,
                                         int accumulate, int n) {
	int lane = threadIdx.x & 31;
	if (n >= N) return;
	float s[M];
#pragma unroll
	for (int m = 0; m < M; m++) s[m] = 0.0f;
	const i64 row = (i64)n * K;
	for (int k0 = lane * 8; k0 < K; k0 += 32 * 8 * 4) {
		float wv[4][8];
#pragma unroll
		for (int u = 0; u < 4; u++) {
			int k = k0 + u * 256;
			if (k < K) ld8f(w, dt, row + k, wv[u]);
		}
#pragma unroll
		for (int u = 0; u < 4; u++) {
			int k = k0 + u * 256;
			if (k >= K) break;
#pragma unroll
			for (int m = 0; m < M; m++) {
				float xv[8];
				ld8f(x, dt, (i64)m * K + k, xv);
#pragma unroll
				for (int j = 0; j < 8; j++) s[m] = fmaf(xv[j], wv[u][j], s[m]);
			}
		}
	}
#pragma unroll
	for (int m = 0; m < M; m++) {
		float v = warp_sum(s[m]);
		if (lane == 0) {
			i64 o = (i64)m * N + n;
			if (accumulate) v += ldf(out, dto, o);
			stf(out, dto, o, v);
		}
	}
}

// gemv_multi: up to four weights w_i [N_i, K] against the same x, in one
// launch: block b works on weight i for b in [b_i, b_{i+1}), the blocks of
// each weight ceil(N_i / 8) (a warp per output column).
struct gemv_set {
	void *out[4];
	const void *w[4];
	int n[4];
	int first[5]; // first block of each weight; first[count] = the grid
};

// gemv_swiglu_row computes column n of act = silu(x wg^T) * (x wu^T) for
// the M rows of x: the gate and up rows of the MLP read together, the
// products kept in f32 up to the activation.
template <int M>
__device__ __forceinline__ void gemv_swiglu_row(void *act, int dto, const void *x, const void *wg, const void *wu,
                                                int dt, int N, int K, int n) {
	int lane = threadIdx.x & 31;
	if (n >= N) return;
	float g[M], u[M];
#pragma unroll
	for (int m = 0; m < M; m++) g[m] = 0.0f, u[m] = 0.0f;
	const i64 row = (i64)n * K;
	for (int k0 = lane * 8; k0 < K; k0 += 32 * 8 * 2) {
		float gv[2][8], uv[2][8];
#pragma unroll
		for (int q = 0; q < 2; q++) {
			int k = k0 + q * 256;
			if (k < K) ld8f(wg, dt, row + k, gv[q]), ld8f(wu, dt, row + k, uv[q]);
		}
#pragma unroll
		for (int q = 0; q < 2; q++) {
			int k = k0 + q * 256;
			if (k >= K) break;
#pragma unroll
			for (int m = 0; m < M; m++) {
				float xv[8];
				ld8f(x, dt, (i64)m * K + k, xv);
#pragma unroll
				for (int j = 0; j < 8; j++) g[m] = fmaf(xv[j], gv[q][j], g[m]), u[m] = fmaf(xv[j], uv[q][j], u[m]);
			}
		}
	}
#pragma unroll
	for (int m = 0; m < M; m++) {
		float gs = warp_sum(g[m]), us = warp_sum(u[m]);
		if (lane == 0) stf(act, dto, (i64)m * N + n, gs / (1.0f + expf(-gs)) * us);
	}
}

#define GEMV(MM)                                                                                                   \
	extern "C" __global__ void __launch_bounds__(256) gemv_m##MM(void *out, int dto, const void *x, const void *w, \
	                                                            int dt, int N, int K, int accumulate) {           \
		gemv_row<MM>(out, dto, x, w, dt, N, K, accumulate, (int)((blockIdx.x * (i64)blockDim.x + threadIdx.x) >> 5)); \
	}                                                                                                              \
	extern "C" __global__ void __launch_bounds__(256) gemv_multi_m##MM(gemv_set s, int dto, const void *x, int dt, \
	                                                                  int K) {                                    \
		int i = 0;                                                                                                 \
		while (i < 3 && (int)blockIdx.x >= s.first[i + 1]) i++;                                                    \
		int n = ((int)blockIdx.x - s.first[i]) * 8 + (threadIdx.x >> 5);                                           \
		gemv_row<MM>(s.out[i], dto, x, s.w[i], dt, s.n[i], K, 0, n);                                               \
	}                                                                                                              \
	extern "C" __global__ void __launch_bounds__(256) gemv_swiglu_m##MM(void *act, int dto, const void *x,         \
	                                                                   const void *wg, const void *wu, int dt,    \
	                                                                   int N, int K) {                            \
		gemv_swiglu_row<MM>(act, dto, x, wg, wu, dt, N, K, (int)((blockIdx.x * (i64)blockDim.x + threadIdx.x) >> 5)); \
	}
GEMV(1)
GEMV(2)
GEMV(3)
GEMV(4)
GEMV(5)
GEMV(6)
GEMV(7)
GEMV(8)
