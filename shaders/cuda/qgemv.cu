// Weight-only int8 products (engine/cuda/quant.go, docs/ENGINE.md,
// "Weight-only int8"): out[m, n] (+)= sum_k x[m, k] W[n, k] with
// W[n, k] = q[n, k] s[n, k / G], q int8 [N, K] and s f32 [N, ceil(K/G)],
// for a few rows m (M <= 8: a decode step's tokens). A decode step reads
// each weight once, so the product is bound by the weight's bytes, half of
// bf16's: one warp streams one weight row with 16-byte loads (16 int8
// weights, which lie in one scale group when G is a multiple of 16), four
// in flight per lane, converts them to f32 exactly, dots each with the M
// activation rows (small: they stay in L1), scales the 16-term sum by its
// group's scale and reduces across the warp in f32.
//
// The qgemv_norm_* kernels also apply the RMSNorm that precedes the
// products in a pre-norm block (engine.Int8NormLinear), as gemv_norm_* do
// for 16-bit weights: with h = x rstd g (rstd = 1/sqrt(mean(x^2) + eps)
// per row, g the norm's weight), h W^T = rstd (x (g W)^T): each warp
// multiplies each 16-weight chunk by g as it is converted, sums the squares
// of the x chunks its dot products load anyway, and scales its reduced sums
// by the rstd its own reduced squares give (no pass over x, no barrier).
// h is never stored, and never rounded.
//
// dequant_i8 writes dequantized rows (q s in f32, rounded to the output's
// dtype): the tied embedding's lookup, and the whole matrix for products
// of many rows, which then run as a tensor-core MatMul over it.
#include "int8.cuh"
#include "decode_prep.cuh"


// i8x4f converts four packed int8 to f32 exactly: the XOR offsets each byte
// to b + 128, __byte_perm makes it the low byte of the float 2^23 + b + 128,
// and the subtraction leaves b. (A cvt per weight would run at a quarter
// of the rate this kernel needs to keep up with the memory.)
__device__ __forceinline__ void i8x4f(u32 w, float *f) {
	u32 u = w ^ 0x80808080u;
	f[0] = __uint_as_float(__byte_perm(u, 0x4b000000u, 0x7650)) - 8388736.0f;
	f[1] = __uint_as_float(__byte_perm(u, 0x4b000000u, 0x7651)) - 8388736.0f;
	f[2] = __uint_as_float(__byte_perm(u, 0x4b000000u, 0x7652)) - 8388736.0f;
	f[3] = __uint_as_float(__byte_perm(u, 0x4b000000u, 0x7653)) - 8388736.0f;
}

// i8x16f converts the 16 int8 of a 16-byte load.
__device__ __forceinline__ void i8x16f(uint4 v, float *f) {
	i8x4f(v.x, f);
	i8x4f(v.y, f + 4);
	i8x4f(v.z, f + 8);
	i8x4f(v.w, f + 12);
}

// qgemv_prefetch asks the L2 for rows n0.. (rows at most, those below N)
// of the int8 weight q [N, K] and their scales s [N, ng]: this block's.
// Under programmatic dependent launch (the host launches this module with
// it, pdl.go) every kernel here asks for them before pdl_wait: the weights
// are constant while a model runs, so the L2 may hold them early, while
// x, out and the ids come from the kernels before.
__device__ __forceinline__ void qgemv_prefetch(const i8 *q, const float *s, int n0, int rows, int N, int K, int ng) {
	if (threadIdx.x != 0 || n0 >= N) return;
	const int r = min(rows, N - n0);
	l2_prefetch(q + (i64)n0 * K, (u32)((i64)r * K) & ~15u);
	const u32 sb = (u32)(r * ng * 4) & ~15u;
	if (sb) l2_prefetch(s + (i64)n0 * ng, sb);
}

// dot16 is sum_j x[j] w[j] over 16 terms in two interleaved f32 chains.
__device__ __forceinline__ float dot16(const float *x, const float *w) {
	float a = 0.0f, b = 0.0f;
#pragma unroll
	for (int j = 0; j < 16; j += 2) a = fmaf(x[j], w[j], a), b = fmaf(x[j + 1], w[j + 1], b);
	return a + b;
}

// ld16f loads x[i..i+15] (i a multiple of 16, x 16-byte aligned) as f32.
__device__ __forceinline__ void ld16f(const void *x, int dt, i64 i, float *v) {
	ld8f(x, dt, i, v);
	ld8f(x, dt, i + 8, v + 8);
}

// qgemv_acc adds row n of x W^T to acc[0..M) in this lane's share: the
// 16-weight chunks lane*16 + 512 j of the row (K a multiple of 16), each
// scaled by its group's scale (G a multiple of 16, or >= K). NORM: each
// chunk is also multiplied by the norm weight g [K] (dtype dtg, 16-byte
// aligned); the caller scales the sums by rstd. SQ: the squares of this
// lane's elements of each row of x are summed into ss (KS 1: every warp's
// lanes cover K, so each warp forms rstd itself from the x it loads anyway).
// KS > 1: KS warps share the row, the warp of part p taking the chunks
// k0 = 512 p + 16 lane, k0 + 512 KS, ... (qgemv_row_split).
template <int M, bool NORM, int KS = 1, bool SQ = NORM>
__device__ __forceinline__ void qgemv_acc(float *acc, float *ss, const void *x, int dtx, const i8 *q, const float *s,
                                          int K, int G, int ng, int n, const void *g, int dtg, int part = 0) {
	if (SQ) {
#pragma unroll
		for (int m = 0; m < M; m++) ss[m] = 0.0f;
	}
	int lane = threadIdx.x & 31;
	const uint4 *qr = (const uint4 *)(q + (i64)n * K);
	const float *sr = s + (i64)n * ng;
	for (int k0 = part * 512 + lane * 16; k0 < K; k0 += 512 * KS * 4) {
		uint4 wv[4];
		float sc[4];
#pragma unroll
		for (int u = 0; u < 4; u++) {
			int k = k0 + u * 512 * KS;
			if (k < K) wv[u] = qr[k >> 4], sc[u] = sr[k / G];
		}
#pragma unroll
		for (int u = 0; u < 4; u++) {
			int k = k0 + u * 512 * KS;
			if (k >= K) break;
			float wf[16];
			i8x16f(wv[u], wf);
			if (NORM) {
				float gv[16];
				ld16f(g, dtg, k, gv);
#pragma unroll
				for (int j = 0; j < 16; j++) wf[j] *= gv[j];
			}
#pragma unroll
			for (int m = 0; m < M; m++) {
				float xv[16];
				ld16f(x, dtx, (i64)m * K + k, xv);
				acc[m] = fmaf(sc[u], dot16(xv, wf), acc[m]);
				if (SQ) {
#pragma unroll
					for (int j = 0; j < 16; j++) ss[m] = fmaf(xv[j], xv[j], ss[m]);
				}
			}
		}
	}
}

// qgemv_row computes column n of out for the M rows of x. NORM: the rows
// are normed first (g [K] of dtype dtg, eps the norm's).
template <int M, bool NORM>
__device__ __forceinline__ void qgemv_row(void *out, int dto, const void *x, int dtx, const i8 *q, const float *s, int N,
                                          int K, int G, int ng, int accumulate, int n, const void *g, int dtg,
                                          float eps) {
	if (n >= N) return;
	float acc[M], ss[M];
#pragma unroll
	for (int m = 0; m < M; m++) acc[m] = 0.0f;
	qgemv_acc<M, NORM>(acc, ss, x, dtx, q, s, K, G, ng, n, g, dtg);
	int lane = threadIdx.x & 31;
#pragma unroll
	for (int m = 0; m < M; m++) {
		float v = warp_sum(acc[m]);
		if (NORM) v *= rms_rstd(warp_sum(ss[m]), K, eps);
		if (lane == 0) {
			i64 o = (i64)m * N + n;
			if (accumulate) v += ldf(out, dto, o);
			stf(out, dto, o, v);
		}
	}
}

// qgemv_row_split is qgemv_row with each column's K split over KS warps
// of the block (8 / KS columns a block), their partial sums added in shared
// memory in a fixed order: a product of few columns (N = 1024: 128 blocks
// of 8 on 132 SMs) otherwise has too few loads in flight to reach the
// bandwidth. Every warp reaches the barrier.
template <int M, int KS>
__device__ __forceinline__ void qgemv_row_split(void *out, int dto, const void *x, int dtx, const i8 *q, const float *s,
                                                int N, int K, int G, int ng, int accumulate) {
	int warp = threadIdx.x >> 5;
	int n = blockIdx.x * (8 / KS) + warp / KS, p = warp % KS;
	float acc[M];
#pragma unroll
	for (int m = 0; m < M; m++) acc[m] = 0.0f;
	if (n < N) qgemv_acc<M, false, KS>(acc, nullptr, x, dtx, q, s, K, G, ng, n, 0, 0, p);
	split_store<M, KS>(acc, out, dto, N, n, p, accumulate);
}

// qgemv_k2_m1: qgemv_m1 with K split over 2 warps a column.
extern "C" __global__ void __launch_bounds__(256) qgemv_k2_m1(void *out, int dto, const void *x, int dtx, const i8 *q,
                                                              const float *s, int N, int K, int G, int ng,
                                                              int accumulate) {
	pdl_trigger();
	qgemv_prefetch(q, s, blockIdx.x * 4, 4, N, K, ng);
	pdl_wait();
	qgemv_row_split<1, 2>(out, dto, x, dtx, q, s, N, K, G, ng, accumulate);
}


// qgemv_swiglu_row computes column n of act = silu(x Wg^T) * (x Wu^T) for
// the M rows of x, the gate and up rows read together and the products
// kept in f32 up to the activation. NORM as for qgemv_row.
template <int M, bool NORM>
__device__ __forceinline__ void qgemv_swiglu_row(void *act, int dto, const void *x, int dtx, const i8 *qg,
                                                 const float *sg, const i8 *qu, const float *su, int N, int K, int G,
                                                 int ng, int n, const void *nw, int dtg, float eps) {
	if (n >= N) return;
	float g[M], u[M], ss[M];
#pragma unroll
	for (int m = 0; m < M; m++) g[m] = 0.0f, u[m] = 0.0f;
	qgemv_acc<M, NORM>(g, ss, x, dtx, qg, sg, K, G, ng, n, nw, dtg);
	qgemv_acc<M, NORM, 1, false>(u, nullptr, x, dtx, qu, su, K, G, ng, n, nw, dtg);
	int lane = threadIdx.x & 31;
#pragma unroll
	for (int m = 0; m < M; m++) {
		float gs = warp_sum(g[m]), us = warp_sum(u[m]);
		if (NORM) {
			const float r = rms_rstd(warp_sum(ss[m]), K, eps);
			gs *= r, us *= r;
		}
		if (lane == 0) stf(act, dto, (i64)m * N + n, gs / (1.0f + expf(-gs)) * us);
	}
}

// QGEMV_SEGMENT finds the weight i_ of the set st that this block's 8
// columns (n0..) belong to, lets the next kernel launch and asks the L2
// for the block's rows before waiting for the kernels before it: the
// start of every multi-weight kernel.
#define QGEMV_SEGMENT(st)                                                                                            \
	int i_ = 0;                                                                                                      \
	while (i_ < 3 && (int)blockIdx.x >= st.first[i_ + 1]) i_++;                                                      \
	const int n0 = ((int)blockIdx.x - st.first[i_]) * 8;                                                             \
	pdl_trigger();                                                                                                   \
	qgemv_prefetch(st.q[i_], st.s[i_], n0, 8, st.n[i_], K, ng);                                                      \
	pdl_wait()

// QGEMV_NORM_MULTI is qgemv_norm_multi's body (its block's columns of the
// products of the normed rows), which qgemv_norm_prep shares.
#define QGEMV_NORM_MULTI(MM)                                                                                         \
	QGEMV_SEGMENT(st);                                                                                               \
	qgemv_row<MM, true>(st.out[i_], dto, x, dtx, st.q[i_], st.s[i_], st.n[i_], K, G, ng, 0, n0 + (threadIdx.x >> 5), \
	                    g, dtg, eps)

// qgemv_norm_prep_m* keeps qgemv_norm_multi_m*'s three blocks a
// multiprocessor (__launch_bounds__(256, 3)): the preparation's registers
// would otherwise take it to two.
#define QGEMV(MM)                                                                                                    \
	extern "C" __global__ void __launch_bounds__(256)                                                                \
	    qgemv_m##MM(void *out, int dto, const void *x, int dtx, const i8 *q, const float *s, int N, int K, int G,    \
	                int ng, int accumulate) {                                                                        \
		pdl_trigger();                                                                                               \
		qgemv_prefetch(q, s, blockIdx.x * 8, 8, N, K, ng);                                                           \
		pdl_wait();                                                                                                  \
		qgemv_row<MM, false>(out, dto, x, dtx, q, s, N, K, G, ng, accumulate,                                        \
		                     (int)((blockIdx.x * (i64)blockDim.x + threadIdx.x) >> 5), 0, 0, 0);                     \
	}                                                                                                                \
	extern "C" __global__ void __launch_bounds__(256)                                                                \
	    qgemv_multi_m##MM(i8_set st, int dto, const void *x, int dtx, int K, int G, int ng) {                     \
		QGEMV_SEGMENT(st);                                                                                           \
		qgemv_row<MM, false>(st.out[i_], dto, x, dtx, st.q[i_], st.s[i_], st.n[i_], K, G, ng, 0,                     \
		                     n0 + (threadIdx.x >> 5), 0, 0, 0);                                                      \
	}                                                                                                                \
	extern "C" __global__ void __launch_bounds__(256)                                                                \
	    qgemv_swiglu_m##MM(void *act, int dto, const void *x, int dtx, const i8 *qg, const float *sg, const i8 *qu, \
	                       const float *su, int N, int K, int G, int ng) {                                           \
		pdl_trigger();                                                                                               \
		qgemv_prefetch(qg, sg, blockIdx.x * 8, 8, N, K, ng);                                                         \
		qgemv_prefetch(qu, su, blockIdx.x * 8, 8, N, K, ng);                                                         \
		pdl_wait();                                                                                                  \
		qgemv_swiglu_row<MM, false>(act, dto, x, dtx, qg, sg, qu, su, N, K, G, ng,                                   \
		                            (int)((blockIdx.x * (i64)blockDim.x + threadIdx.x) >> 5), 0, 0, 0);              \
	}                                                                                                                \
	extern "C" __global__ void __launch_bounds__(256) qgemv_norm_multi_m##MM(                                        \
	    i8_set st, int dto, const void *x, int dtx, int K, int G, int ng, const void *g, int dtg, float eps) {    \
		QGEMV_NORM_MULTI(MM);                                                                                        \
	}                                                                                                                \
	extern "C" __global__ void __launch_bounds__(256, 3) qgemv_norm_prep_m##MM(                                      \
	    i8_set st, int dto, const void *x, int dtx, int K, int G, int ng, const void *g, int dtg, float eps,       \
	    const __grid_constant__ dp_set ps, const __grid_constant__ dp_freq fr, const int *pos, const int *starts,  \
	    int B, int L, int D, int Cap, int per_seq, float heps, int lpr, int *err, int *cnt) {                      \
		QGEMV_NORM_MULTI(MM);                                                                                        \
		gemv_prep_tail<MM>(i_, n0, ps, fr, pos, starts, L, D, Cap, per_seq, heps, lpr, err, cnt);                    \
	}                                                                                                                \
	extern "C" __global__ void __launch_bounds__(256) qgemv_norm_swiglu_m##MM(                                       \
	    void *act, int dto, const void *x, int dtx, const i8 *qg, const float *sg, const i8 *qu, const float *su,    \
	    int N, int K, int G, int ng, const void *g, int dtg, float eps) {                                            \
		pdl_trigger();                                                                                               \
		qgemv_prefetch(qg, sg, blockIdx.x * 8, 8, N, K, ng);                                                         \
		qgemv_prefetch(qu, su, blockIdx.x * 8, 8, N, K, ng);                                                         \
		pdl_wait();                                                                                                  \
		qgemv_swiglu_row<MM, true>(act, dto, x, dtx, qg, sg, qu, su, N, K, G, ng,                                    \
		                           (int)((blockIdx.x * (i64)blockDim.x + threadIdx.x) >> 5), g, dtg, eps);           \
	}
QGEMV(1)
QGEMV(2)
QGEMV(3)
QGEMV(4)
QGEMV(5)
QGEMV(6)
QGEMV(7)
QGEMV(8)

// dequant_i8 writes rows of the dequantized weight: block r (of rows, over
// x and y) writes out[r, :] = q[src, :] s[src, :/G] with src = ids[r], or
// r when ids is null. An id outside [0, N) raises error 1 (as the
// embedding does) and leaves its row zero.
extern "C" __global__ void __launch_bounds__(256) dequant_i8(void *out, int dto, const i8 *q, const float *s,
                                                             const int *ids, i64 rows, int N, int K, int G, int ng,
                                                             int *err) {
	pdl_trigger();
	pdl_wait(); // ids and out belong to the kernels before
	i64 r = (i64)blockIdx.y * gridDim.x + blockIdx.x;
	if (r >= rows) return;
	i64 src = r;
	if (ids) {
		int id = ids[r];
		if (id < 0 || id >= N) {
			if (threadIdx.x == 0) raise_error(err, 1, id, (int)r, N);
			for (int c = threadIdx.x; c < K; c += blockDim.x) stf(out, dto, r * K + c, 0.0f);
			return;
		}
		src = id;
	}
	const i8 *qr = q + src * K;
	const float *sr = s + src * ng;
	for (int c = threadIdx.x; c < K; c += blockDim.x) stf(out, dto, r * K + c, (float)qr[c] * sr[c / G]);
}
