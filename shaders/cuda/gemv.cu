// Matrix-vector products for decoding: out[m, n] (+)= sum_k x[m, k] w[n, k]
// for a few rows m (M <= 8: the tokens of a decode step), w [N, K] the
// weight in the model's layout (a linear layer's x W^T). A decode step
// reads each weight once, so the product is bound by the weight's bytes:
// one warp streams one weight row with 16-byte loads, four in flight per
// lane, against the M activation rows (small: they stay in L1), and
// reduces across the warp in f32.
//
// The gemv_norm_* kernels also apply the RMSNorm that precedes the
// products in a pre-norm block (engine.NormLinear): with
// h = x rstd g (rstd = 1/sqrt(mean(x^2) + eps) per row, g the norm's
// weight), h w^T = rstd (x (g w)^T): each warp multiplies each weight
// chunk by g as it arrives, sums the squares of the x chunks its dot
// products load anyway (every warp reads all of x: its lanes cover K), and
// scales its reduced dot products by the rstd its own reduced sums give,
// so the norm costs no pass over x and no barrier. h is never stored, and
// never rounded. (Each lane adds its squares in the order of k, as the
// rmsnorm kernels' lanes do.)
//
// Every kernel starts the same way: it lets the next kernel of
// the stream launch (programmatic dependent launch, where the host asked
// for it), asks the L2 for its block's weight rows, which is safe before
// waiting because the L2 is coherent, and only then waits for the kernels
// before it and reads x or out. Under PDL the weights thus stream in while
// the previous kernel finishes.
#include "common.cuh"
#include "decode_prep.cuh"

// gemv_prefetch asks the L2 for rows n0.. (8 at most, those below N) of
// the 16-bit weight w [N, K]: this block's.
__device__ __forceinline__ void gemv_prefetch(const void *w, int n0, int N, int K) {
	if (threadIdx.x == 0 && n0 < N) l2_prefetch((const u16 *)w + (i64)n0 * K, (u32)(min(8, N - n0) * K * 2));
}

// gemv_dot sums, for each of the M rows of x, this lane's share of the
// dot product with the weight row at row (elements k0, k0 + 256 KS, ...
// in 8-element chunks, four loads in flight): KS warps share a row when
// KS > 1, lane offsets k0 = q 256 + 8 lane. NORM multiplies each weight
// chunk by the norm weight g first and sums the squares of this lane's
// elements of each row of x into ss (KS 1: the lanes cover K).
template <int M, bool NORM, int KS>
__device__ __forceinline__ void gemv_dot(float *s, float *ss, const void *x, const void *w, int dt, int K, i64 row,
                                         int k0, const void *g, int dtg) {
#pragma unroll
	for (int m = 0; m < M; m++) s[m] = 0.0f;
	if (NORM) {
#pragma unroll
		for (int m = 0; m < M; m++) ss[m] = 0.0f;
	}
	for (; k0 < K; k0 += 256 * KS * 4) {
		float wv[4][8];
#pragma unroll
		for (int u = 0; u < 4; u++) {
			int k = k0 + u * 256 * KS;
			if (k < K) ld8f(w, dt, row + k, wv[u]);
		}
#pragma unroll
		for (int u = 0; u < 4; u++) {
			int k = k0 + u * 256 * KS;
			if (k >= K) break;
			if (NORM) {
				float gv[8];
				ld8f(g, dtg, k, gv);
#pragma unroll
				for (int j = 0; j < 8; j++) wv[u][j] *= gv[j];
			}
#pragma unroll
			for (int m = 0; m < M; m++) {
				float xv[8];
				ld8f(x, dt, (i64)m * K + k, xv);
#pragma unroll
				for (int j = 0; j < 8; j++) s[m] = fmaf(xv[j], wv[u][j], s[m]);
				if (NORM) {
#pragma unroll
					for (int j = 0; j < 8; j++) ss[m] = fmaf(xv[j], xv[j], ss[m]);
				}
			}
		}
	}
}

// gemv_row computes column n of out for the M rows of x. NORM: the rows
// are normed first (g [K] of dtype dtg, eps the norm's).
template <int M, bool NORM>
__device__ __forceinline__ void gemv_row(void *out, int dto, const void *x, const void *w, int dt, int N, int K,
                                         int accumulate, int n, const void *g, int dtg, float eps) {
	int lane = threadIdx.x & 31;
	if (n >= N) return;
	float s[M], ss[M];
	gemv_dot<M, NORM, 1>(s, ss, x, w, dt, K, (i64)n * K, lane * 8, g, dtg);
#pragma unroll
	for (int m = 0; m < M; m++) {
		float v = warp_sum(s[m]);
		if (NORM) v *= rms_rstd(warp_sum(ss[m]), K, eps);
		if (lane == 0) {
			i64 o = (i64)m * N + n;
			if (accumulate) v += ldf(out, dto, o);
			stf(out, dto, o, v);
		}
	}
}

// gemv_row_split is gemv_row with each output column's K split over KS
// warps of the block (8 / KS columns a block): warp w takes column
// n0 + w / KS and the 256-element chunks k with k / 256 = w mod KS (mod KS),
// and the KS partial sums meet in shared memory, added in a fixed order.
// For a product of few columns (N = 1024 is 128 blocks of 8 columns: one
// block an SM, too few loads in flight to reach the bandwidth) it puts KS
// times the blocks in flight. No early return: every warp reaches the
// barrier.
template <int M, int KS>
__device__ __forceinline__ void gemv_row_split(void *out, int dto, const void *x, const void *w, int dt, int N, int K,
                                               int accumulate) {
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	int n = blockIdx.x * (8 / KS) + warp / KS, q = warp % KS;
	float s[M];
	gemv_dot<M, false, KS>(s, nullptr, x, w, dt, n < N ? K : 0, (i64)n * K, q * 256 + lane * 8, 0, 0);
	split_store<M, KS>(s, out, dto, N, n, q, accumulate);
}

// gemv_multi: up to four weights w_i [N_i, K] against the same x, in one
// launch: block b works on weight i for b in [b_i, b_{i+1}), the blocks of
// each weight ceil(N_i / 8) (a warp per output column).
struct gemv_set {
	void *out0, *out1, *out2, *out3;
	const void *w0, *w1, *w2, *w3;
	int n_0, n_1, n_2, n_3;
	int first0, first1, first2, first3, first4; // first block of each weight; first[count] = the grid
};

// gemv_swiglu_row computes column n of act = silu(x wg^T) * (x wu^T) for
// the M rows of x: the gate and up rows of the MLP read together, the
// products kept in f32 up to the activation. NORM as for gemv_row.
template <int M, bool NORM>
__device__ __forceinline__ void gemv_swiglu_row(void *act, int dto, const void *x, const void *wg, const void *wu,
                                                int dt, int N, int K, int n, const void *g, int dtg, float eps) {
	int lane = threadIdx.x & 31;
	if (n >= N) return;
	float gs[M], us[M], ss[M];
#pragma unroll
	for (int m = 0; m < M; m++) gs[m] = 0.0f, us[m] = 0.0f, ss[m] = 0.0f;
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
			if (NORM) {
				float nv[8];
				ld8f(g, dtg, k, nv);
#pragma unroll
				for (int j = 0; j < 8; j++) gv[q][j] *= nv[j], uv[q][j] *= nv[j];
			}
#pragma unroll
			for (int m = 0; m < M; m++) {
				float xv[8];
				ld8f(x, dt, (i64)m * K + k, xv);
#pragma unroll
				for (int j = 0; j < 8; j++) gs[m] = fmaf(xv[j], gv[q][j], gs[m]), us[m] = fmaf(xv[j], uv[q][j], us[m]);
				if (NORM) {
#pragma unroll
					for (int j = 0; j < 8; j++) ss[m] = fmaf(xv[j], xv[j], ss[m]);
				}
			}
		}
	}
#pragma unroll
	for (int m = 0; m < M; m++) {
		float a = warp_sum(gs[m]), b = warp_sum(us[m]);
		if (NORM) {
			const float r = rms_rstd(warp_sum(ss[m]), K, eps);
			a *= r, b *= r;
		}
		if (lane == 0) {
			stf(act, dto, (i64)m * N + n, a / (1.0f + expf(-a)) * b);
		}
	}
}

// GEMV_WEIGHT declares the weight (out, w, N) of this block of a gemv_set
// launch s and its first column n0. The fields are named, not arrays: a
// kernel parameter indexed by a variable is copied to the stack first.
#define PICK4(a, i) ((i) == 0 ? s.a##0 : (i) == 1 ? s.a##1 : (i) == 2 ? s.a##2 : s.a##3)
#define GEMV_WEIGHT(s)                                                                                             \
	const int b_ = blockIdx.x, i_ = (b_ >= s.first1) + (b_ >= s.first2) + (b_ >= s.first3);                       \
	void *out = PICK4(out, i_);                                                                                    \
	const void *w = PICK4(w, i_);                                                                                  \
	const int N = PICK4(n_, i_), n0 = (b_ - PICK4(first, i_)) * 8

// GEMV_NORM_MULTI is gemv_norm_multi's body (its block's columns of the
// products of the normed rows), which gemv_norm_prep shares.
#define GEMV_NORM_MULTI(MM)                                                                                        \
	GEMV_WEIGHT(s);                                                                                                \
	pdl_trigger();                                                                                                 \
	gemv_prefetch(w, n0, N, K);                                                                                    \
	pdl_wait();                                                                                                    \
	gemv_row<MM, true>(out, dto, x, w, dt, N, K, 0, n0 + (threadIdx.x >> 5), g, dtg, eps)

#define GEMV(MM)                                                                                                   \
	extern "C" __global__ void __launch_bounds__(256) gemv_m##MM(void *out, int dto, const void *x, const void *w, \
	                                                            int dt, int N, int K, int accumulate) {           \
		pdl_trigger();                                                                                             \
		gemv_prefetch(w, blockIdx.x * 8, N, K);                                                                    \
		pdl_wait();                                                                                                \
		gemv_row<MM, false>(out, dto, x, w, dt, N, K, accumulate,                                                  \
		                    (int)((blockIdx.x * (i64)blockDim.x + threadIdx.x) >> 5), 0, 0, 0);                    \
	}                                                                                                              \
	extern "C" __global__ void __launch_bounds__(256) gemv_multi_m##MM(gemv_set s, int dto, const void *x, int dt, \
	                                                                  int K) {                                    \
		GEMV_WEIGHT(s);                                                                                            \
		pdl_trigger();                                                                                             \
		gemv_prefetch(w, n0, N, K);                                                                                \
		pdl_wait();                                                                                                \
		gemv_row<MM, false>(out, dto, x, w, dt, N, K, 0, n0 + (threadIdx.x >> 5), 0, 0, 0);                        \
	}                                                                                                              \
	extern "C" __global__ void __launch_bounds__(256) gemv_swiglu_m##MM(void *act, int dto, const void *x,         \
	                                                                   const void *wg, const void *wu, int dt,    \
	                                                                   int N, int K) {                            \
		pdl_trigger();                                                                                             \
		gemv_prefetch(wg, blockIdx.x * 8, N, K);                                                                   \
		gemv_prefetch(wu, blockIdx.x * 8, N, K);                                                                   \
		pdl_wait();                                                                                                \
		gemv_swiglu_row<MM, false>(act, dto, x, wg, wu, dt, N, K,                                                  \
		                           (int)((blockIdx.x * (i64)blockDim.x + threadIdx.x) >> 5), 0, 0, 0);             \
	}                                                                                                              \
	extern "C" __global__ void __launch_bounds__(256) gemv_norm_multi_m##MM(                                       \
	    gemv_set s, int dto, const void *x, int dt, int K, const void *g, int dtg, float eps) {                    \
		GEMV_NORM_MULTI(MM);                                                                                       \
	}                                                                                                              \
	extern "C" __global__ void __launch_bounds__(256) gemv_norm_prep_m##MM(                                        \
	    gemv_set s, int dto, const void *x, int dt, int K, const void *g, int dtg, float eps,                      \
	    const __grid_constant__ dp_set ps, const __grid_constant__ dp_freq fr, const int *pos, const int *starts,  \
	    int B, int L, int D, int Cap, int per_seq, float heps, int lpr, int *err, int *cnt) {                      \
		GEMV_NORM_MULTI(MM);                                                                                       \
		gemv_prep_tail<MM>(i_, n0, ps, fr, pos, starts, L, D, Cap, per_seq, heps, lpr, err, cnt);                  \
	}                                                                                                              \
	extern "C" __global__ void __launch_bounds__(256) gemv_norm_swiglu_m##MM(                                      \
	    void *act, int dto, const void *x, const void *wg, const void *wu, int dt, int N, int K, const void *g,    \
	    int dtg, float eps) {                                                                                      \
		pdl_trigger();                                                                                             \
		gemv_prefetch(wg, blockIdx.x * 8, N, K);                                                                   \
		gemv_prefetch(wu, blockIdx.x * 8, N, K);                                                                   \
		pdl_wait();                                                                                                \
		gemv_swiglu_row<MM, true>(act, dto, x, wg, wu, dt, N, K,                                                   \
		                          (int)((blockIdx.x * (i64)blockDim.x + threadIdx.x) >> 5), g, dtg, eps);          \
	}
// gemv_k2_m*, gemv_k4_m*: gemv_m* with K split over 2 or 4 warps a column
// (gemv_row_split).
#define GEMV_SPLIT(MM, KS)                                                                                         \
	extern "C" __global__ void __launch_bounds__(256) gemv_k##KS##_m##MM(void *out, int dto, const void *x,        \
	                                                                   const void *w, int dt, int N, int K,       \
	                                                                   int accumulate) {                          \
		pdl_trigger();                                                                                             \
		if (threadIdx.x == 0 && blockIdx.x * (8 / KS) < N)                                                         \
			l2_prefetch((const u16 *)w + (i64)blockIdx.x * (8 / KS) * K,                                           \
			            (u32)(min(8 / KS, N - (int)blockIdx.x * (8 / KS)) * K * 2));                               \
		pdl_wait();                                                                                                \
		gemv_row_split<MM, KS>(out, dto, x, w, dt, N, K, accumulate);                                              \
	}
#define GEMV_SPLITS(MM) GEMV_SPLIT(MM, 2) GEMV_SPLIT(MM, 4)
GEMV_SPLITS(1)
GEMV_SPLITS(2)
GEMV_SPLITS(3)
GEMV_SPLITS(4)
GEMV_SPLITS(5)
GEMV_SPLITS(6)
GEMV_SPLITS(7)
GEMV_SPLITS(8)

GEMV(1)
GEMV(2)
GEMV(3)
GEMV(4)
GEMV(5)
GEMV(6)
GEMV(7)
GEMV(8)
