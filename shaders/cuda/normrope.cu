// The fused per-head RMSNorm and RoPE of the attention inputs (q, k and
// Parallax's r), engine.NormRoPE: row (b, l, h) of x [B, L, H, D] is
// normed, y = x rstd w with rstd = 1/sqrt(mean(x^2) + eps), and its pairs
// (y_i, y_{i+D/2}) turned by a = pos theta^(-2i/D) into row (b, h, l) of
// out [B, H, L, D]:
//
//	out_i = y_i cos a - y_{i+D/2} sin a,  out_{i+D/2} = y_{i+D/2} cos a + y_i sin a
//
// and the backward rotates dOut back (g = R(-a) dOut) and applies the
// RMSNorm backward, dX = rstd (g w - xhat mean(g w xhat)), xhat = x rstd,
// while summing dW += g xhat in f32. pos is I32 [L], or [B, L] (per_seq)
// with one position vector per sequence.
//
// Each row is one pass: read once, written once in the other layout, so
// the norm, the transpose and the rotation are one launch. The angle is
// formed in double and reduced modulo 2 pi there (two-constant
// Cody-Waite), then sincosf of the reduced f32 angle: accurate for any
// position at f32 cost.
#include "common.cuh"

// nr_sincos returns cos and sin of p f (f the pair's frequency in double).
__device__ __forceinline__ void nr_sincos(int p, double f, float *c, float *s) { rope_sincos((double)p, f, c, s); }

// nr_group_sum sums v over the lpr lanes of a row group (lpr a power of
// two dividing 32; every lane of the warp calls it).
__device__ __forceinline__ float nr_group_sum(float v, int lpr) {
	for (int o = lpr >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

// The 16-byte kernels need D/2 a multiple of 8 and lpr = D/16 lanes a row
// (a power of two up to 32, so D <= 512): lane sub of a group owns pairs
// i0..i0+7, i0 = 8 sub, i.e. elements i0.. and i0+D/2.. of the row, as two
// 16-byte accesses each. 32/lpr groups a warp. A group's unit is hpu heads
// of one (b, l): their rows share the position, so the angles (8 a lane)
// are computed once per unit; units run l fastest, so the groups of a warp
// write consecutive rows of out. Loops are warp-uniform (the shuffles
// need every lane); ok masks the groups past the end.

// nr_unit splits unit u into (b, l, first head) for units ordered
// ((b * chunks + hc) * L + l).
__device__ __forceinline__ void nr_unit(i64 u, int L, int chunks, int hpu, int *b, int *l, int *h0) {
	i64 bc = u / L;
	*l = (int)(u - bc * L);
	*b = (int)(bc / chunks);
	*h0 = (int)(bc - (i64)*b * chunks) * hpu;
}

extern "C" __global__ void normrope8(void *out, int dto, float *rstd, const void *x, int dtx, const void *w, int dtw,
                                     const int *pos, int B, int L, int H, int D, int hpu, int per_seq, float eps,
                                     float theta, int lpr, const double *ftab) {
	int lane = threadIdx.x & 31, sub = lane & (lpr - 1), gpw = 32 / lpr;
	int half = D >> 1, i0 = 8 * sub;
	int chunks = (H + hpu - 1) / hpu;
	i64 units = (i64)B * L * chunks;
	i64 warp = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), nwarps = (i64)gridDim.x * (blockDim.x >> 5);
	__shared__ double fr[ROPE_FMAX];
	rope_freqs(fr, theta, D, ftab);
	double f[8];
	float w1[8], w2[8];
#pragma unroll
	for (int k = 0; k < 8; k++) f[k] = fr[i0 + k];
	ld8f(w, dtw, i0, w1);
	ld8f(w, dtw, i0 + half, w2);
	for (i64 u0 = warp * gpw; u0 < units; u0 += nwarps * gpw) {
		i64 u = u0 + lane / lpr;
		bool ok = u < units;
		int b = 0, l = 0, h0 = 0;
		float c[8], s[8];
		if (ok) {
			nr_unit(u, L, chunks, hpu, &b, &l, &h0);
			int p = pos[per_seq ? (i64)b * L + l : l];
#pragma unroll
			for (int k = 0; k < 8; k++) nr_sincos(p, f[k], &c[k], &s[k]);
		}
		for (int j = 0; j < hpu; j++) {
			int h = h0 + j;
			bool okh = ok && h < H;
			i64 row = ((i64)b * L + l) * H + h;
			float a[8], bb[8], ss = 0;
			if (okh) {
				ld8f(x, dtx, row * D + i0, a);
				ld8f(x, dtx, row * D + i0 + half, bb);
#pragma unroll
				for (int k = 0; k < 8; k++) ss += a[k] * a[k] + bb[k] * bb[k];
			}
			ss = nr_group_sum(ss, lpr);
			if (!okh) continue;
			float sc = 1.0f / sqrtf(ss / (float)D + eps);
			if (rstd && sub == 0) rstd[row] = sc;
			float o1[8], o2[8];
#pragma unroll
			for (int k = 0; k < 8; k++) {
				float y1 = a[k] * sc * w1[k], y2 = bb[k] * sc * w2[k];
				o1[k] = y1 * c[k] - y2 * s[k];
				o2[k] = y2 * c[k] + y1 * s[k];
			}
			i64 orow = ((i64)b * H + h) * L + l;
			st8f(out, dto, orow * D + i0, o1);
			st8f(out, dto, orow * D + i0 + half, o2);
		}
	}
}

// normrope_bwd8: the backward over the same units. Each lane keeps its 16
// columns' dW partial sums in registers over all its rows; at the end the
// row groups of a warp are summed by shuffles, the block's warps in shared
// memory (dynamic, 8 D floats) in warp order, and the block writes its
// partial row part[blockIdx.x] [D], which colsum_add (elementwise.cu) adds
// into dW: fixed-order sums, no atomics (a block of atomics onto D
// addresses serialises, and made this kernel slower than the four it
// replaces).
extern "C" __global__ void normrope_bwd8(void *dx, int dtdx, float *part, const void *dout, int dtdo, const void *x,
                                         int dtx, const void *w, int dtw, const float *rstd, const int *pos, int B,
                                         int L, int H, int D, int hpu, int per_seq, float theta, int lpr,
                                         const double *ftab) {
	extern __shared__ float sh[];
	int lane = threadIdx.x & 31, sub = lane & (lpr - 1), gpw = 32 / lpr;
	int half = D >> 1, i0 = 8 * sub;
	int chunks = (H + hpu - 1) / hpu;
	i64 units = (i64)B * L * chunks;
	i64 warp = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), nwarps = (i64)gridDim.x * (blockDim.x >> 5);
	__shared__ double fr[ROPE_FMAX];
	rope_freqs(fr, theta, D, ftab);
	double f[8];
	float w1[8], w2[8], dw1[8], dw2[8];
#pragma unroll
	for (int k = 0; k < 8; k++) f[k] = fr[i0 + k], dw1[k] = 0, dw2[k] = 0;
	ld8f(w, dtw, i0, w1);
	ld8f(w, dtw, i0 + half, w2);
	for (i64 u0 = warp * gpw; u0 < units; u0 += nwarps * gpw) {
		i64 u = u0 + lane / lpr;
		bool ok = u < units;
		int b = 0, l = 0, h0 = 0;
		float c[8], s[8];
		if (ok) {
			nr_unit(u, L, chunks, hpu, &b, &l, &h0);
			int p = pos[per_seq ? (i64)b * L + l : l];
#pragma unroll
			for (int k = 0; k < 8; k++) nr_sincos(p, f[k], &c[k], &s[k]);
		}
		for (int j = 0; j < hpu; j++) {
			int h = h0 + j;
			bool okh = ok && h < H;
			i64 row = ((i64)b * L + l) * H + h, orow = ((i64)b * H + h) * L + l;
			float g1[8], g2[8], a[8], bb[8], sc = 0, dot = 0;
			if (okh) {
				float d1[8], d2[8];
				ld8f(dout, dtdo, orow * D + i0, d1);
				ld8f(dout, dtdo, orow * D + i0 + half, d2);
				ld8f(x, dtx, row * D + i0, a);
				ld8f(x, dtx, row * D + i0 + half, bb);
				sc = rstd[row];
#pragma unroll
				for (int k = 0; k < 8; k++) {
					g1[k] = d1[k] * c[k] + d2[k] * s[k]; // R(-a) dOut
					g2[k] = d2[k] * c[k] - d1[k] * s[k];
					dot += g1[k] * w1[k] * a[k] + g2[k] * w2[k] * bb[k];
				}
			}
			float kk = nr_group_sum(dot, lpr) * sc * sc / (float)D; // mean(g w xhat) / x-to-xhat
			if (!okh) continue;
			float o1[8], o2[8];
#pragma unroll
			for (int k = 0; k < 8; k++) {
				o1[k] = sc * (g1[k] * w1[k] - a[k] * kk);
				o2[k] = sc * (g2[k] * w2[k] - bb[k] * kk);
				dw1[k] += g1[k] * a[k] * sc;
				dw2[k] += g2[k] * bb[k] * sc;
			}
			st8f(dx, dtdx, row * D + i0, o1);
			st8f(dx, dtdx, row * D + i0 + half, o2);
		}
	}
	for (int o = lpr; o < 32; o <<= 1)
#pragma unroll
		for (int k = 0; k < 8; k++) {
			dw1[k] += __shfl_xor_sync(0xffffffffu, dw1[k], o);
			dw2[k] += __shfl_xor_sync(0xffffffffu, dw2[k], o);
		}
	int wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
	if (lane < lpr)
#pragma unroll
		for (int k = 0; k < 8; k++) {
			sh[wid * D + i0 + k] = dw1[k];
			sh[wid * D + i0 + half + k] = dw2[k];
		}
	__syncthreads();
	for (int i = threadIdx.x; i < D; i += blockDim.x) {
		float t = 0;
		for (int k = 0; k < nw; k++) t += sh[k * D + i];
		part[(i64)blockIdx.x * D + i] = t;
	}
}

// normrope and normrope_bwd are the kernels for any even D: one warp a row
// (rows in x's order), lanes striding over the pairs, the row read twice
// (the second time from cache) and the angles computed per element.
extern "C" __global__ void normrope(void *out, int dto, float *rstd, const void *x, int dtx, const void *w, int dtw,
                                    const int *pos, int B, int L, int H, int D, int per_seq, float eps, float theta) {
	__shared__ double fr[ROPE_FMAX];
	rope_freqs(fr, theta, D);
	int lane = threadIdx.x & 31, half = D >> 1;
	i64 rows = (i64)B * L * H;
	i64 step = (i64)gridDim.x * (blockDim.x >> 5);
	for (i64 row = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); row < rows; row += step) {
		int h = (int)(row % H);
		i64 bl = row / H;
		int l = (int)(bl % L), b = (int)(bl / L);
		int p = pos[per_seq ? bl : l];
		float ss = 0;
		for (int i = lane; i < D; i += 32) {
			float v = ldf(x, dtx, row * D + i);
			ss += v * v;
		}
		float sc = 1.0f / sqrtf(warp_sum(ss) / (float)D + eps);
		if (rstd && lane == 0) rstd[row] = sc;
		i64 orow = ((i64)b * H + h) * L + l;
		for (int i = lane; i < half; i += 32) {
			float c, s;
			nr_sincos(p, rope_freq(fr, i, theta, D), &c, &s);
			float y1 = ldf(x, dtx, row * D + i) * sc * ldf(w, dtw, i);
			float y2 = ldf(x, dtx, row * D + i + half) * sc * ldf(w, dtw, i + half);
			stf(out, dto, orow * D + i, y1 * c - y2 * s);
			stf(out, dto, orow * D + i + half, y2 * c + y1 * s);
		}
	}
}

extern "C" __global__ void normrope_bwd(void *dx, int dtdx, float *acc, const void *dout, int dtdo, const void *x,
                                        int dtx, const void *w, int dtw, const float *rstd, const int *pos, int B,
                                        int L, int H, int D, int per_seq, float theta) {
	extern __shared__ float sh[];
	__shared__ double fr[ROPE_FMAX];
	int lane = threadIdx.x & 31, half = D >> 1;
	for (int i = threadIdx.x; i < D; i += blockDim.x) sh[i] = 0;
	rope_freqs(fr, theta, D); // its barrier also orders the zeroing
	i64 rows = (i64)B * L * H;
	i64 step = (i64)gridDim.x * (blockDim.x >> 5);
	for (i64 row = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); row < rows; row += step) {
		int h = (int)(row % H);
		i64 bl = row / H;
		int l = (int)(bl % L), b = (int)(bl / L);
		int p = pos[per_seq ? bl : l];
		i64 orow = ((i64)b * H + h) * L + l;
		float sc = rstd[row], dot = 0;
		for (int i = lane; i < half; i += 32) {
			float c, s;
			nr_sincos(p, rope_freq(fr, i, theta, D), &c, &s);
			float d1 = ldf(dout, dtdo, orow * D + i), d2 = ldf(dout, dtdo, orow * D + i + half);
			float g1 = d1 * c + d2 * s, g2 = d2 * c - d1 * s;
			dot += g1 * ldf(w, dtw, i) * ldf(x, dtx, row * D + i) + g2 * ldf(w, dtw, i + half) * ldf(x, dtx, row * D + i + half);
		}
		float kk = warp_sum(dot) * sc * sc / (float)D;
		for (int i = lane; i < half; i += 32) {
			float c, s;
			nr_sincos(p, rope_freq(fr, i, theta, D), &c, &s);
			float d1 = ldf(dout, dtdo, orow * D + i), d2 = ldf(dout, dtdo, orow * D + i + half);
			float g1 = d1 * c + d2 * s, g2 = d2 * c - d1 * s;
			float a = ldf(x, dtx, row * D + i), bb = ldf(x, dtx, row * D + i + half);
			stf(dx, dtdx, row * D + i, sc * (g1 * ldf(w, dtw, i) - a * kk));
			stf(dx, dtdx, row * D + i + half, sc * (g2 * ldf(w, dtw, i + half) - bb * kk));
			atomicAdd(&sh[i], g1 * a * sc);
			atomicAdd(&sh[i + half], g2 * bb * sc);
		}
	}
	__syncthreads();
	for (int i = threadIdx.x; i < D; i += blockDim.x) atomicAdd(&acc[i], sh[i]);
}
