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

// nr_ld and nr_st move 8 activation elements: with H16 the tensor is
// known to be 16-bit (bf16 or f16), so the kernel carries no f32 path,
// whose two accesses and their registers the compiler would otherwise keep
// beside the 16-bit one.
template <bool H16> __device__ __forceinline__ void nr_ld(const void *p, int dt, i64 i, float *v) {
	if (H16) ld8h(p, dt, i, v);
	else ld8f(p, dt, i, v);
}

template <bool H16> __device__ __forceinline__ void nr_st(void *p, int dt, i64 i, const float *v) {
	if (H16) st8h(p, dt, i, v);
	else st8f(p, dt, i, v);
}

// NR_AHEAD=1 (-DNR_AHEAD=1 through PARALLAX_CUDA_NVRTC_OPTIONS; off until
// measured faster) makes the 16-bit kernels load the next head's words of
// a unit while the current row is reduced and written: a row is one
// dependent round trip to memory (the group sum needs all of it), so this
// keeps two rows in flight a lane instead of one, for the 8 (forward) or
// 16 (backward) registers of the raw words (ptxas: the backward then
// spills 84 bytes at three blocks a multiprocessor).
#ifndef NR_AHEAD
#define NR_AHEAD 0
#endif

// nr_raw loads a lane's two 16-byte words of a 16-bit row, elements e..e+7
// and e+half..e+half+7, without widening them.
__device__ __forceinline__ void nr_raw(const void *p, i64 e, int half, uint4 *lo, uint4 *hi) {
	const uint4 *q = (const uint4 *)p;
	*lo = q[e >> 3];
	*hi = q[(e + half) >> 3];
}

// nr_lds8 loads 8 f32 from shared memory, elements 0-3 at byte address a
// and 4-7 at b. The loads are volatile so that the compiler does not hoist
// them out of the row loop into 8 registers a lane, which is what it does
// with plain loads of loop-invariant values (the norm weight, the angles).
__device__ __forceinline__ void nr_lds8(u32 a, u32 b, float *v) {
	asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v[0]), "=f"(v[1]), "=f"(v[2]), "=f"(v[3]) : "r"(a));
	asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v[4]), "=f"(v[5]), "=f"(v[6]), "=f"(v[7]) : "r"(b));
}

// nr_w8 reads the norm weight's elements i..i+7 from its f32 copy in
// shared memory.
__device__ __forceinline__ void nr_w8(const float *shw, int i, float *v) {
	u32 a = smem_addr(shw + i);
	nr_lds8(a, a + 16, v);
}

// A lane's slots: per-lane values kept in shared memory rather than
// registers, float4 q of thread t at byte (q blockDim + t) 16 (so a
// warp's accesses are consecutive and conflict-free). Slots 0-3 hold the
// unit's cos and sin (8 each), 4-7 the backward's dW partial sums. Loaded
// through nr_lds8, and stored volatile too so that the stores stay ordered
// with those loads. The slot arrays are sized for 256 threads, the most a
// block of these kernels may have (__launch_bounds__(256, ...)).
__device__ __forceinline__ u32 nr_slot(u32 base, int q) { return base + (u32)(q * blockDim.x + threadIdx.x) * 16u; }
__device__ __forceinline__ void nr_sld8(u32 base, int q, float *v) { nr_lds8(nr_slot(base, q), nr_slot(base, q + 1), v); }
__device__ __forceinline__ void nr_sst8(u32 base, int q, const float *v) {
	u32 a = nr_slot(base, q), b = nr_slot(base, q + 1);
	asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(a), "f"(v[0]), "f"(v[1]), "f"(v[2]), "f"(v[3]));
	asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(b), "f"(v[4]), "f"(v[5]), "f"(v[6]), "f"(v[7]));
}

// nr_angles stores cos and sin of position p times the lane's 8
// frequencies into its slots 0-3.
__device__ __forceinline__ void nr_angles(u32 slots, int p, const double *fr, int i0) {
	float c[8], s[8];
#pragma unroll
	for (int k = 0; k < 8; k++) nr_sincos(p, fr[i0 + k], &c[k], &s[k]);
	nr_sst8(slots, 0, c);
	nr_sst8(slots, 2, s);
}

// Registers decide these kernels' speed: a row is one dependent round trip
// to memory, so the bytes in flight a multiprocessor, which must cover the
// memory's latency, are the resident lanes times their loads. At 120
// (forward) and 165 (backward) registers, with the frequencies, the norm
// weight, the angles and the dW sums held a lane, only two and one blocks
// of 256 fitted and the kernels ran at a quarter of the bandwidth. So the
// frequencies, the f32 norm weight (D elements), the angles and the dW
// partial sums live in shared memory and are read where they are used.
template <bool H16>
__device__ __forceinline__ void normrope8_body(void *out, int dto, float *rstd, const void *x, int dtx, const void *w,
                                               int dtw, const int *pos, int B, int L, int H, int D, int hpu,
                                               int per_seq, float eps, float theta, int lpr, const double *ftab) {
	int lane = threadIdx.x & 31, sub = lane & (lpr - 1), gpw = 32 / lpr;
	int half = D >> 1, i0 = 8 * sub;
	int chunks = (H + hpu - 1) / hpu;
	i64 units = (i64)B * L * chunks;
	i64 warp = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), nwarps = (i64)gridDim.x * (blockDim.x >> 5);
	__shared__ double fr[ROPE_FMAX];
	__shared__ __align__(16) float shw[2 * ROPE_FMAX];
	__shared__ __align__(16) float4 cs[4 * 256];
	u32 slots = smem_addr(cs);
	for (int i = threadIdx.x; i < D; i += blockDim.x) shw[i] = ldf(w, dtw, i);
	rope_freqs(fr, theta, D, ftab); // its barrier also orders shw
	for (i64 u0 = warp * gpw; u0 < units; u0 += nwarps * gpw) {
		i64 u = u0 + lane / lpr;
		bool ok = u < units;
		int b = 0, l = 0, h0 = 0;
		if (ok) nr_unit(u, L, chunks, hpu, &b, &l, &h0);
		uint4 pa = make_uint4(0, 0, 0, 0), pb = pa; // the next row's words (NR_AHEAD)
		if (H16 && NR_AHEAD && ok) nr_raw(x, (((i64)b * L + l) * H + h0) * D + i0, half, &pa, &pb);
		for (int j = 0; j < hpu; j++) {
			int h = h0 + j;
			bool okh = ok && h < H;
			i64 row = ((i64)b * L + l) * H + h;
			float a[8], bb[8], ss = 0;
			if (okh) {
				if (H16 && NR_AHEAD) {
					uint4 ca = pa, cb = pb;
					if (j + 1 < hpu && h + 1 < H) nr_raw(x, (row + 1) * D + i0, half, &pa, &pb);
					cvt8h(ca, dtx, a);
					cvt8h(cb, dtx, bb);
				} else {
					nr_ld<H16>(x, dtx, row * D + i0, a);
					nr_ld<H16>(x, dtx, row * D + i0 + half, bb);
				}
				// The angles while the first row's loads are in flight.
				if (j == 0) nr_angles(slots, pos[per_seq ? (i64)b * L + l : l], fr, i0);
#pragma unroll
				for (int k = 0; k < 8; k++) ss += a[k] * a[k] + bb[k] * bb[k];
			}
			ss = nr_group_sum(ss, lpr);
			if (!okh) continue;
			float sc = 1.0f / sqrtf(ss / (float)D + eps);
			if (rstd && sub == 0) rstd[row] = sc;
			float wv[8], c[8];
			nr_w8(shw, i0, wv);
#pragma unroll
			for (int k = 0; k < 8; k++) a[k] *= sc * wv[k];
			nr_w8(shw, i0 + half, wv);
#pragma unroll
			for (int k = 0; k < 8; k++) bb[k] *= sc * wv[k];
			nr_sld8(slots, 0, c);
			float r1[8], r2[8];
#pragma unroll
			for (int k = 0; k < 8; k++) r1[k] = a[k] * c[k], r2[k] = bb[k] * c[k];
			nr_sld8(slots, 2, c); // sin
#pragma unroll
			for (int k = 0; k < 8; k++) r1[k] -= bb[k] * c[k], r2[k] += a[k] * c[k];
			i64 orow = ((i64)b * H + h) * L + l;
			nr_st<H16>(out, dto, orow * D + i0, r1);
			nr_st<H16>(out, dto, orow * D + i0 + half, r2);
		}
	}
}

// normrope_bwd8: the backward over the same units. Each lane sums its 16
// columns' dW partials over all its rows in its shared-memory slots; at the
// end each column is summed over the block's lanes that own it, in lane
// order, and the block writes its partial row part[blockIdx.x] [D], which
// colsum_add (elementwise.cu) adds into dW: fixed-order sums, no atomics
// (a block of atomics onto D addresses serialises, and made this kernel
// slower than the four it replaces). The rotated gradient overwrites dOut's
// values in place.
template <bool H16>
__device__ __forceinline__ void normrope_bwd8_body(void *dx, int dtdx, float *part, const void *dout, int dtdo,
                                                   const void *x, int dtx, const void *w, int dtw, const float *rstd,
                                                   const int *pos, int B, int L, int H, int D, int hpu, int per_seq,
                                                   float theta, int lpr, const double *ftab) {
	int lane = threadIdx.x & 31, sub = lane & (lpr - 1), gpw = 32 / lpr;
	int half = D >> 1, i0 = 8 * sub;
	int chunks = (H + hpu - 1) / hpu;
	i64 units = (i64)B * L * chunks;
	i64 warp = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), nwarps = (i64)gridDim.x * (blockDim.x >> 5);
	__shared__ double fr[ROPE_FMAX];
	__shared__ __align__(16) float shw[2 * ROPE_FMAX];
	__shared__ __align__(16) float4 sl[8 * 256];
	u32 slots = smem_addr(sl);
	for (int i = threadIdx.x; i < D; i += blockDim.x) shw[i] = ldf(w, dtw, i);
	{
		float z[8] = {0, 0, 0, 0, 0, 0, 0, 0};
		nr_sst8(slots, 4, z);
		nr_sst8(slots, 6, z);
	}
	rope_freqs(fr, theta, D, ftab); // its barrier also orders shw
	for (i64 u0 = warp * gpw; u0 < units; u0 += nwarps * gpw) {
		i64 u = u0 + lane / lpr;
		bool ok = u < units;
		int b = 0, l = 0, h0 = 0;
		if (ok) nr_unit(u, L, chunks, hpu, &b, &l, &h0);
		uint4 pg1 = make_uint4(0, 0, 0, 0), pg2 = pg1, pa = pg1, pb = pg1; // the next row's words (NR_AHEAD)
		float psc = 0;
		if (H16 && NR_AHEAD && ok) {
			i64 r0 = ((i64)b * L + l) * H + h0, o0 = ((i64)b * H + h0) * L + l;
			nr_raw(dout, o0 * D + i0, half, &pg1, &pg2);
			nr_raw(x, r0 * D + i0, half, &pa, &pb);
			psc = rstd[r0];
		}
		for (int j = 0; j < hpu; j++) {
			int h = h0 + j;
			bool okh = ok && h < H;
			i64 row = ((i64)b * L + l) * H + h, orow = ((i64)b * H + h) * L + l;
			float g1[8], g2[8], a[8], bb[8], sc = 0, dot = 0;
			if (okh) {
				if (H16 && NR_AHEAD) {
					uint4 c1 = pg1, c2 = pg2, c3 = pa, c4 = pb;
					sc = psc;
					if (j + 1 < hpu && h + 1 < H) {
						nr_raw(dout, (orow + L) * D + i0, half, &pg1, &pg2);
						nr_raw(x, (row + 1) * D + i0, half, &pa, &pb);
						psc = rstd[row + 1];
					}
					cvt8h(c1, dtdo, g1);
					cvt8h(c2, dtdo, g2);
					cvt8h(c3, dtx, a);
					cvt8h(c4, dtx, bb);
				} else {
					nr_ld<H16>(dout, dtdo, orow * D + i0, g1);
					nr_ld<H16>(dout, dtdo, orow * D + i0 + half, g2);
					nr_ld<H16>(x, dtx, row * D + i0, a);
					nr_ld<H16>(x, dtx, row * D + i0 + half, bb);
					sc = rstd[row];
				}
				if (j == 0) nr_angles(slots, pos[per_seq ? (i64)b * L + l : l], fr, i0);
				float t[8];
				nr_sld8(slots, 0, t); // cos
				float r1[8], r2[8];
#pragma unroll
				for (int k = 0; k < 8; k++) r1[k] = g1[k] * t[k], r2[k] = g2[k] * t[k];
				nr_sld8(slots, 2, t); // sin; R(-a) dOut
#pragma unroll
				for (int k = 0; k < 8; k++) {
					r1[k] += g2[k] * t[k];
					r2[k] -= g1[k] * t[k];
					g1[k] = r1[k], g2[k] = r2[k];
				}
				nr_w8(shw, i0, t);
#pragma unroll
				for (int k = 0; k < 8; k++) dot += g1[k] * t[k] * a[k];
				nr_w8(shw, i0 + half, t);
#pragma unroll
				for (int k = 0; k < 8; k++) dot += g2[k] * t[k] * bb[k];
			}
			float kk = nr_group_sum(dot, lpr) * sc * sc / (float)D; // mean(g w xhat) / x-to-xhat
			if (!okh) continue;
			float wv[8], dw[8];
			nr_w8(shw, i0, wv);
			nr_sld8(slots, 4, dw);
#pragma unroll
			for (int k = 0; k < 8; k++) {
				dw[k] += g1[k] * a[k] * sc;
				g1[k] = sc * (g1[k] * wv[k] - a[k] * kk);
			}
			nr_sst8(slots, 4, dw);
			nr_st<H16>(dx, dtdx, row * D + i0, g1);
			nr_w8(shw, i0 + half, wv);
			nr_sld8(slots, 6, dw);
#pragma unroll
			for (int k = 0; k < 8; k++) {
				dw[k] += g2[k] * bb[k] * sc;
				g2[k] = sc * (g2[k] * wv[k] - bb[k] * kk);
			}
			nr_sst8(slots, 6, dw);
			nr_st<H16>(dx, dtdx, row * D + i0 + half, g2);
		}
	}
	__syncthreads();
	// Column i is element k of slot q of the lanes t with t mod lpr = sub.
	const float *f = (const float *)sl;
	for (int i = threadIdx.x; i < D; i += blockDim.x) {
		int hi = i >= half, ii = i - hi * half, sb = ii >> 3, k = ii & 7;
		int q = 4 + 2 * hi + (k >> 2);
		float t = 0;
		for (int th = sb; th < (int)blockDim.x; th += lpr) t += f[((i64)q * blockDim.x + th) * 4 + (k & 3)];
		part[(i64)blockIdx.x * D + i] = t;
	}
}

// The kernels: normrope8 and normrope_bwd8 for 16-bit activations (x,
// out, dOut, dX), the ...w variants for any other mix.
#define NR_FWD(NAME, H16, MINB)                                                                                        \
	extern "C" __global__ void __launch_bounds__(256, MINB)                                                         \
	    NAME(void *out, int dto, float *rstd, const void *x, int dtx, const void *w, int dtw, const int *pos, int B, \
	         int L, int H, int D, int hpu, int per_seq, float eps, float theta, int lpr, const double *ftab) {      \
		normrope8_body<H16>(out, dto, rstd, x, dtx, w, dtw, pos, B, L, H, D, hpu, per_seq, eps, theta, lpr, ftab); \
	}
#define NR_BWD(NAME, H16, MINB)                                                                                        \
	extern "C" __global__ void __launch_bounds__(256, MINB)                                                         \
	    NAME(void *dx, int dtdx, float *part, const void *dout, int dtdo, const void *x, int dtx, const void *w,     \
	         int dtw, const float *rstd, const int *pos, int B, int L, int H, int D, int hpu, int per_seq,          \
	         float theta, int lpr, const double *ftab) {                                                         \
		normrope_bwd8_body<H16>(dx, dtdx, part, dout, dtdo, x, dtx, w, dtw, rstd, pos, B, L, H, D, hpu, per_seq,   \
		                        theta, lpr, ftab);                                                                \
	}
// NR_FWD_MINB and NR_BWD_MINB are the blocks of 256 a multiprocessor must
// hold (so registers <= 65536 / (256 MINB)); -D switches (through
// PARALLAX_CUDA_NVRTC_OPTIONS) measure others.
#ifndef NR_FWD_MINB
#define NR_FWD_MINB 3
#endif
#ifndef NR_BWD_MINB
#define NR_BWD_MINB 3
#endif
NR_FWD(normrope8, true, NR_FWD_MINB)
NR_FWD(normrope8w, false, NR_FWD_MINB)
NR_BWD(normrope_bwd8, true, NR_BWD_MINB)
NR_BWD(normrope_bwd8w, false, NR_BWD_MINB)

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
