// Greedy sampling on the device: each row's first largest value among its
// first C columns (-1 for a row holding a NaN), one block per row.
#include "common.cuh"

extern "C" __global__ void __launch_bounds__(256) argmax_rows(int *out, const void *x, int dt, int W, int C) {
	const i64 row = (i64)blockIdx.x * W;
	float bv = NEG_INF;
	int bi = 0x7fffffff, nan = 0;
	for (int c = threadIdx.x; c < C; c += blockDim.x) {
		float v = ldf(x, dt, row + c);
		if (v != v) nan = 1;
		else if (v > bv || (v == bv && c < bi)) bv = v, bi = c;
	}
	// Warp, then block reduction of (value, index): larger value, then
	// lower index.
	for (int o = 16; o > 0; o >>= 1) {
		float ov = __shfl_xor_sync(0xffffffffu, bv, o);
		int oi = __shfl_xor_sync(0xffffffffu, bi, o);
		if (ov > bv || (ov == bv && oi < bi)) bv = ov, bi = oi;
	}
	nan = __any_sync(0xffffffffu, nan);
	__shared__ float sv[8];
	__shared__ int si[8], sn[8];
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	if (lane == 0) sv[warp] = bv, si[warp] = bi, sn[warp] = nan;
	__syncthreads();
	if (threadIdx.x == 0) {
		int nw = (blockDim.x + 31) >> 5;
		for (int w = 1; w < nw; w++) {
			if (sv[w] > bv || (sv[w] == bv && si[w] < bi)) bv = sv[w], bi = si[w];
			nan |= sn[w];
		}
		// Every value -Inf: the first column, as the host's argmax gives.
		out[blockIdx.x] = nan ? -1 : (bi == 0x7fffffff ? 0 : bi);
	}
}
