// The attention family on plain CUDA cores, for every dtype and head
// dimension up to 256: the f32 path of Parallax/softmax attention forward,
// backward and decode (f32 arithmetic, f32 accuracy), the fallback for
// shapes the tensor-core kernels do not take, and the simple kernels of
// linear attention and exact LLA (double precision).
//
// Layout conventions: q, r, o [B, Hq, Lq, D]; k, v [B, Hkv, Lk, D] (Lk is
// the cache capacity for decode); query head h reads KV head h / G. With
// causal masking query i sees keys lo_i <= j < hi_i, hi_i = min(n, i + n -
// Lq + 1), lo_i = max(0, hi_i - window) (window > 0), where n = Lk, or
// lens[b] for decode.
#include "common.cuh"

#define MAXE 8 // D <= 32 * MAXE

// Small heads (D <= SMALLD, MAD's 8 among them) take a lane-per-key form
// of each kernel (the ..._small kernels, chosen by the host, so that its
// registers do not lower the occupancy of the others): the lanes spread over D would leave 32 - D of them idle
// in a loop over the chunk's keys one at a time, so instead each lane
// keeps its own key's (or query's) partial sums of all D outputs and the
// warp adds them once per row at the end (simt_reduce).
#define SMALLD 16

// SIMT_PAIR defines kernel NAME, NAME_small and NAME_small_v4 from
// BODY<false>, BODY<true> and BODY<true, true>.
#define SIMT_PAIR(NAME, BODY, PARAMS, ARGS)                                                                        \
	extern "C" __global__ void NAME PARAMS { BODY<false> ARGS; }                                                \
	extern "C" __global__ void NAME##_small PARAMS { BODY<true> ARGS; }                                         \
	extern "C" __global__ void NAME##_small_v4 PARAMS { BODY<true, true> ARGS; }

// ld4 loads elements i .. i+n-1 (n <= 4) of a row into e, zeros past n.
// V4 (the _small_v4 kernels: the host takes them where the rows it loads
// are f32, 16-byte aligned and D % 4 == 0, so i % 4 == 0 and n == 4) is
// one 16-byte load; otherwise ldf per element. The sums that use e are
// the same either way, so both forms give the same bits.
template <bool V4>
__device__ __forceinline__ void ld4(float e[4], const void *p, int dt, i64 i, int n) {
	if constexpr (V4) {
		float4 t = *(const float4 *)((const float *)p + i);
		e[0] = t.x, e[1] = t.y, e[2] = t.z, e[3] = t.w;
	} else {
#pragma unroll
		for (int c = 0; c < 4; c++) e[c] = c < n ? ldf(p, dt, i + c) : 0.0f;
	}
}

// ld4_qrg is ld4 of a query row's q, r and g pieces (r zeros for softmax,
// r null), which dk/dv reads twice.
template <bool V4>
__device__ __forceinline__ void ld4_qrg(float qx[4], float rx[4], float gx[4], const void *q, const void *r,
                                        const void *g, int dtq, int dtr, int dtg, i64 i, int n) {
	ld4<V4>(qx, q, dtq, i, n);
	if (r)
		ld4<V4>(rx, r, dtr, i, n);
	else
		rx[0] = rx[1] = rx[2] = rx[3] = 0;
	ld4<V4>(gx, g, dtg, i, n);
}

// simt_reduce sums each of the D lane partials v over the warp and returns
// the sum of element lane (0 for lanes >= D).
__device__ __forceinline__ float simt_reduce(const float *v, int D, int lane) {
	float mine = 0;
#pragma unroll
	for (int x = 0; x < SMALLD; x++) {
		if (x < D) {
			float t = warp_sum(v[x]);
			if (lane == x) mine = t;
		}
	}
	return mine;
}

struct Rows {
	int B, Hq, Hkv, Lq, Lk, D, G;
};

// visible returns query i's key range given n valid keys.
__device__ __forceinline__ void visible(int i, int n, int Lq, int causal, int window, int &lo, int &hi) {
	if (!causal) {
		lo = 0;
		hi = n;
		return;
	}
	hi = min(n, i + n - Lq + 1);
	lo = window > 0 ? max(0, i + n - Lq + 1 - window) : 0;
	if (hi < lo) hi = lo;
}

// simt_online moves the running max m over a chunk's scores (s, one a
// lane; lanes past the row's keys pass in = false) and returns the factor
// alpha that rescales the sums so far, with p = exp(s - max) (0 off the
// row).
__device__ __forceinline__ float simt_online(float s, bool in, float &m, float &p) {
	float mn = fmaxf(m, warp_max(s));
	float mu = mn == NEG_INF ? 0.0f : mn;
	float alpha = expf(m - mu);
	p = in ? expf(s - mu) : 0.0f;
	m = mn;
	return alpha;
}

// simt_fwd_out stores element i of o = vbar (1 + tbar) - o2 / d1 (and of
// vbar = o1 / d1) from the row's sums, inv = 1 / d1.
__device__ __forceinline__ void simt_fwd_out(void *o, int dto, void *vbar, int dtvb, i64 i, float o1, float o2,
                                             float inv, float tb) {
	float vb = o1 * inv;
	stf(o, dto, i, vb * (1 + tb) - o2 * inv);
	if (vbar) stf(vbar, dtvb, i, vb);
}

// simt_fwd_stats stores the row's log-sum-exp (NaN where d1 = 0) and tbar.
__device__ __forceinline__ void simt_fwd_stats(float *lse, float *tbar, i64 row, float m, float d1, float tb) {
	if (lse) lse[row] = d1 == 0 ? __int_as_float(0x7fc00000) : m + logf(d1);
	if (tbar) tbar[row] = tb;
}

// attn_fwd_simt: one warp per query row; 32 keys at a time, one per lane
// (q and r staged in shared memory), then the chunk's p and p t are
// broadcast to accumulate o1 = sum p v and o2 = sum p t v, lanes over D.
template <bool SMALL, bool V4 = false>
__device__ __forceinline__ void attn_fwd_body(const void *q, const void *r, const void *k, const void *v, void *o,
                                              void *vbar, float *lse, float *tbar, int dtq, int dtr, int dtk, int dtv,
                                              int dto, int dtvb, int B, int Hq, int Hkv, int Lq, int Lk, int D,
                                              float scale, int causal, int window, const int *lens, int *err) {
	extern __shared__ float sh[]; // per warp: q[D], r[D]
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
	i64 row = (i64)blockIdx.x * nw + warp;
	i64 rows = (i64)B * Hq * Lq;
	if (row >= rows) return;
	float *sq = sh + warp * 2 * D, *sr = sq + D;
	int i = (int)(row % Lq);
	i64 bh = row / Lq;
	int h = (int)(bh % Hq), b = (int)(bh / Hq);
	int G = Hq / Hkv;
	int n = Lk;
	if (lens) {
		n = lens[b];
		if (n < Lq || n > Lk) {
			if (lane == 0 && i == 0 && h == 0) raise_error(err, 2, b, n, Lk);
			n = min(max(n, Lq), Lk);
		}
	}
	int lo, hi;
	visible(i, n, Lq, causal, window, lo, hi);
	for (int x = lane; x < D; x += 32) {
		sq[x] = ldf(q, dtq, row * D + x);
		sr[x] = r ? ldf(r, dtr, row * D + x) : 0.0f;
	}
	__syncwarp();
	i64 kv = ((i64)b * Hkv + h / G) * Lk * D;
	if (SMALL) {
		// Lane-per-key: lane partials of d1, d2, o1 and o2 over its keys,
		// rescaled by the warp's running max like the sums they add into.
		float m = NEG_INF, l1 = 0, l2 = 0, p1[SMALLD], p2[SMALLD];
#pragma unroll
		for (int x = 0; x < SMALLD; x++) p1[x] = p2[x] = 0;
		for (int j0 = lo; j0 < hi; j0 += 32) {
			int j = j0 + lane;
			float s = NEG_INF, t = 0, vr[SMALLD];
#pragma unroll
			for (int x = 0; x < SMALLD; x++) vr[x] = 0;
			if (j < hi) {
				float a = 0, c = 0;
				const i64 kr = kv + (i64)j * D;
#pragma unroll
				for (int x0 = 0; x0 < SMALLD; x0 += 4) {
					if (x0 < D) {
						float kx[4], vx[4];
						ld4<V4>(kx, k, dtk, kr + x0, D - x0);
						ld4<V4>(vx, v, dtv, kr + x0, D - x0);
#pragma unroll
						for (int c4 = 0; c4 < 4; c4++) {
							int x = x0 + c4;
							if (x < D) {
								a += sq[x] * kx[c4];
								if (r) c += sr[x] * kx[c4]; // softmax: no 0 * inf
								vr[x] = vx[c4];
							}
						}
					}
				}
				s = a * scale;
				t = c;
			}
			float p, alpha = simt_online(s, j < hi, m, p), pt = p * t;
			l1 = l1 * alpha + p;
			l2 = l2 * alpha + pt;
#pragma unroll
			for (int x = 0; x < SMALLD; x++) {
				p1[x] = p1[x] * alpha + p * vr[x];
				p2[x] = p2[x] * alpha + pt * vr[x];
			}
		}
		float d1 = warp_sum(l1), d2 = warp_sum(l2);
		float o1 = simt_reduce(p1, D, lane), o2 = simt_reduce(p2, D, lane);
		float inv = 1.0f / d1, tb = d2 * inv;
		if (lane < D) simt_fwd_out(o, dto, vbar, dtvb, row * D + lane, o1, o2, inv, tb);
		if (lane == 0) simt_fwd_stats(lse, tbar, row, m, d1, tb);
		return;
	}
	float m = NEG_INF, d1 = 0, d2 = 0;
	float o1[MAXE], o2[MAXE];
#pragma unroll
	for (int e = 0; e < MAXE; e++) o1[e] = o2[e] = 0;
	for (int j0 = lo; j0 < hi; j0 += 32) {
		int j = j0 + lane;
		float s = NEG_INF, t = 0;
		if (j < hi) {
			float a = 0, c = 0;
			// Softmax (no r) skips the probe's sum: 0 * an infinite key
			// would be NaN where softmax is finite.
			if (r)
				for (int x = 0; x < D; x++) {
					float kx = ldf(k, dtk, kv + (i64)j * D + x);
					a += sq[x] * kx;
					c += sr[x] * kx;
				}
			else
				for (int x = 0; x < D; x++) a += sq[x] * ldf(k, dtk, kv + (i64)j * D + x);
			s = a * scale;
			t = c;
		}
		float p, alpha = simt_online(s, j < hi, m, p), pt = p * t;
		d1 = d1 * alpha + warp_sum(p);
		d2 = d2 * alpha + warp_sum(pt);
#pragma unroll
		for (int e = 0; e < MAXE; e++) {
			o1[e] *= alpha;
			o2[e] *= alpha;
		}
		int cnt = min(32, hi - j0);
		for (int jj = 0; jj < cnt; jj++) {
			float pj = __shfl_sync(0xffffffffu, p, jj), ptj = __shfl_sync(0xffffffffu, pt, jj);
			const i64 vr = kv + (i64)(j0 + jj) * D;
#pragma unroll
			for (int e = 0; e < MAXE; e++) {
				int x = lane + 32 * e;
				if (x < D) {
					float vx = ldf(v, dtv, vr + x);
					o1[e] += pj * vx;
					o2[e] += ptj * vx;
				}
			}
		}
	}
	// Every row sees a key (causal needs Lq <= Lk; decode, lens >= Lq): a
	// d1 that is NaN (a NaN or +inf score) or 0 (every score -inf) makes
	// the row NaN, as in IEEE arithmetic; no guard may turn it into 0.
	float inv = 1.0f / d1, tb = d2 * inv;
#pragma unroll
	for (int e = 0; e < MAXE; e++) {
		int x = lane + 32 * e;
		if (x < D) simt_fwd_out(o, dto, vbar, dtvb, row * D + x, o1[e], o2[e], inv, tb);
	}
	if (lane == 0) simt_fwd_stats(lse, tbar, row, m, d1, tb);
}
SIMT_PAIR(attn_fwd_simt, attn_fwd_body,
          (const void *q, const void *r, const void *k, const void *v, void *o, void *vbar, float *lse, float *tbar,
           int dtq, int dtr, int dtk, int dtv, int dto, int dtvb, int B, int Hq, int Hkv, int Lq, int Lk, int D,
           float scale, int causal, int window, const int *lens, int *err),
          (q, r, k, v, o, vbar, lse, tbar, dtq, dtr, dtk, dtv, dto, dtvb, B, Hq, Hkv, Lq, Lk, D, scale, causal,
           window, lens, err))

// bwd_pre: T = g.o and Bv = g.vbar per row (double), one warp per row.
extern "C" __global__ void bwd_pre(const void *g, const void *o, const void *vbar, int dtg, int dto, int dtvb, float *T,
                                   float *Bv, i64 rows, int D) {
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
	i64 row = (i64)blockIdx.x * nw + warp;
	if (row >= rows) return;
	double t = 0, bv = 0;
	for (int x = lane; x < D; x += 32) {
		double gx = ldf(g, dtg, row * D + x);
		t += gx * ldf(o, dto, row * D + x);
		if (vbar) bv += gx * ldf(vbar, dtvb, row * D + x);
	}
	t = warp_sumd(t);
	bv = warp_sumd(bv);
	if (lane == 0) {
		T[row] = (float)t;
		if (Bv) Bv[row] = (float)bv;
	}
}

// bwd_pre_bf16: bwd_pre for bf16 g, o and vbar with D / 8 a power of two
// up to 32: LPR = D / 8 lanes a row, each one 16-byte load of each tensor,
// f32 sums (the tensor-core kernels' precision). The one-warp-a-row
// version reads 2 bytes a lane and ran at a third of the memory bandwidth.
// With st it also writes each row's statistics packed for the TMA dk/dv
// kernel: (lse log2e, or +inf for a row that sees no key; Bv;
// -scale (Bv - T); -scale (1 + tbar)), the forms its elementwise step uses.
extern "C" __global__ void bwd_pre_bf16(const uint4 *g, const uint4 *o, const uint4 *vbar, float *T, float *Bv, i64 rows,
                                        int D, const float *lse, const float *tbar, float4 *st, float scale) {
	const int lpr = D >> 3, sub = threadIdx.x & (lpr - 1);
	const i64 row = ((i64)blockIdx.x * blockDim.x + threadIdx.x) / lpr;
	const bool ok = row < rows;
	float t = 0, bv = 0;
	if (ok) {
		const i64 at = row * lpr + sub;
		uint4 gx = g[at], ox = o[at], vx = vbar ? vbar[at] : make_uint4(0, 0, 0, 0);
		const u32 *gw = &gx.x, *ow = &ox.x, *vw = &vx.x;
#pragma unroll
		for (int w = 0; w < 4; w++) {
			float g0 = __uint_as_float(gw[w] << 16), g1 = __uint_as_float(gw[w] & 0xffff0000u);
			t += g0 * __uint_as_float(ow[w] << 16) + g1 * __uint_as_float(ow[w] & 0xffff0000u);
			bv += g0 * __uint_as_float(vw[w] << 16) + g1 * __uint_as_float(vw[w] & 0xffff0000u);
		}
	}
	for (int m = lpr >> 1; m > 0; m >>= 1) {
		t += __shfl_xor_sync(0xffffffffu, t, m);
		bv += __shfl_xor_sync(0xffffffffu, bv, m);
	}
	if (ok && sub == 0) {
		T[row] = t;
		if (Bv) Bv[row] = bv;
		if (st) {
			float l = lse[row];
			float b = vbar ? bv : 0.0f;
			st[row] = make_float4(l == NEG_INF ? __int_as_float(0x7f800000) : l * LOG2E, b, -scale * (b - t),
			                      -scale * (1.0f + (tbar ? tbar[row] : 0.0f)));
		}
	}
}

// simt_dscore forms a score's gradient terms from p, a = g.v and t = r.k
// with the row's T, Bv and tbar: ds = p (a - T + (tbar - t)(a - Bv)),
// dt = -p (a - Bv) and pe = p (1 + tbar - t), dv's weight; softmax (px
// false): ds = p (a - T), dt = 0, pe = p.
__device__ __forceinline__ void simt_dscore(bool px, float p, float a, float t, float Ti, float Bi, float tb, float &ds,
                                            float &dt, float &pe) {
	if (px) {
		float ab = a - Bi;
		ds = p * (a - Ti + (tb - t) * ab);
		dt = -p * ab;
		pe = p * (1 + tb - t);
	} else {
		ds = p * (a - Ti);
		dt = 0;
		pe = p;
	}
}

// attn_dq_simt: dq = scale sum dS k and dr = sum dT k, one warp per row.
template <bool SMALL, bool V4 = false>
__device__ __forceinline__ void attn_dq_body(const void *q, const void *r, const void *k, const void *v, const void *g,
                                             const float *lse, const float *T, const float *Bv, const float *tbar,
                                             void *dq, void *dr, int dtq, int dtr, int dtk, int dtv, int dtg, int dtdq,
                                             int dtdr, int B, int Hq, int Hkv, int Lq, int Lk, int D, float scale,
                                             int causal, int window) {
	extern __shared__ float sh[]; // per warp: q, r, g
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
	i64 row = (i64)blockIdx.x * nw + warp;
	if (row >= (i64)B * Hq * Lq) return;
	float *sq = sh + warp * 3 * D, *sr = sq + D, *sg = sr + D;
	int i = (int)(row % Lq);
	i64 bh = row / Lq;
	int h = (int)(bh % Hq), b = (int)(bh / Hq), G = Hq / Hkv;
	int lo, hi;
	visible(i, Lk, Lq, causal, window, lo, hi);
	for (int x = lane; x < D; x += 32) {
		sq[x] = ldf(q, dtq, row * D + x);
		sr[x] = r ? ldf(r, dtr, row * D + x) : 0.0f;
		sg[x] = ldf(g, dtg, row * D + x);
	}
	__syncwarp();
	float L = lse[row], Ti = T[row], Bi = r ? Bv[row] : 0.0f, tb = r ? tbar[row] : 0.0f;
	i64 kv = ((i64)b * Hkv + h / G) * Lk * D;
	if (SMALL) {
		// Lane-per-key: each lane adds its key's ds k and dt k.
		float q1[SMALLD], q2[SMALLD];
#pragma unroll
		for (int x = 0; x < SMALLD; x++) q1[x] = q2[x] = 0;
		for (int j0 = lo; j0 < hi; j0 += 32) {
			int j = j0 + lane;
			if (j >= hi) continue;
			float kr[SMALLD], s = 0, t = 0, a = 0;
			const i64 kb = kv + (i64)j * D;
#pragma unroll
			for (int x0 = 0; x0 < SMALLD; x0 += 4) {
				float vx[4] = {0, 0, 0, 0};
				if (x0 < D) {
					ld4<V4>(kr + x0, k, dtk, kb + x0, D - x0);
					ld4<V4>(vx, v, dtv, kb + x0, D - x0);
				} else {
					kr[x0] = kr[x0 + 1] = kr[x0 + 2] = kr[x0 + 3] = 0;
				}
#pragma unroll
				for (int c4 = 0; c4 < 4; c4++) {
					int x = x0 + c4;
					if (x < D) {
						s += sq[x] * kr[x];
						t += sr[x] * kr[x];
						a += sg[x] * vx[c4];
					}
				}
			}
			float ds, dt, pe;
			simt_dscore(r, expf(s * scale - L), a, t, Ti, Bi, tb, ds, dt, pe);
#pragma unroll
			for (int x = 0; x < SMALLD; x++) {
				q1[x] += ds * kr[x];
				q2[x] += dt * kr[x];
			}
		}
		float aq = simt_reduce(q1, D, lane), ar = simt_reduce(q2, D, lane);
		if (lane < D) {
			stf(dq, dtdq, row * D + lane, aq * scale);
			if (dr) stf(dr, dtdr, row * D + lane, ar);
		}
		return;
	}
	float aq[MAXE], ar[MAXE];
#pragma unroll
	for (int e = 0; e < MAXE; e++) aq[e] = ar[e] = 0;
	for (int j0 = lo; j0 < hi; j0 += 32) {
		int j = j0 + lane;
		float ds = 0, dt = 0;
		if (j < hi) {
			float s = 0, t = 0, a = 0;
			for (int x = 0; x < D; x++) {
				float kx = ldf(k, dtk, kv + (i64)j * D + x), vx = ldf(v, dtv, kv + (i64)j * D + x);
				s += sq[x] * kx;
				t += sr[x] * kx;
				a += sg[x] * vx;
			}
			float pe;
			simt_dscore(r, expf(s * scale - L), a, t, Ti, Bi, tb, ds, dt, pe);
		}
		int cnt = min(32, hi - j0);
		for (int jj = 0; jj < cnt; jj++) {
			float dsj = __shfl_sync(0xffffffffu, ds, jj), dtj = __shfl_sync(0xffffffffu, dt, jj);
			const i64 kr = kv + (i64)(j0 + jj) * D;
#pragma unroll
			for (int e = 0; e < MAXE; e++) {
				int x = lane + 32 * e;
				if (x < D) {
					float kx = ldf(k, dtk, kr + x);
					aq[e] += dsj * kx;
					ar[e] += dtj * kx;
				}
			}
		}
	}
#pragma unroll
	for (int e = 0; e < MAXE; e++) {
		int x = lane + 32 * e;
		if (x < D) {
			stf(dq, dtdq, row * D + x, aq[e] * scale);
			if (dr) stf(dr, dtdr, row * D + x, ar[e]);
		}
	}
}
SIMT_PAIR(attn_dq_simt, attn_dq_body,
          (const void *q, const void *r, const void *k, const void *v, const void *g, const float *lse,
           const float *T, const float *Bv, const float *tbar, void *dq, void *dr, int dtq, int dtr, int dtk,
           int dtv, int dtg, int dtdq, int dtdr, int B, int Hq, int Hkv, int Lq, int Lk, int D, float scale,
           int causal, int window),
          (q, r, k, v, g, lse, T, Bv, tbar, dq, dr, dtq, dtr, dtk, dtv, dtg, dtdq, dtdr, B, Hq, Hkv, Lq, Lk, D,
           scale, causal, window))

// attn_dkv_simt: dk = sum (scale dS q + dT r), dv = sum p (1 + tbar - t) g
// over the rows of all G heads that see the key; one warp per key.
template <bool SMALL, bool V4 = false>
__device__ __forceinline__ void attn_dkv_body(const void *q, const void *r, const void *k, const void *v, const void *g,
                                              const float *lse, const float *T, const float *Bv, const float *tbar,
                                              void *dk, void *dv, int dtq, int dtr, int dtk, int dtv, int dtg, int dtdk,
                                              int dtdv, int B, int Hq, int Hkv, int Lq, int Lk, int D, float scale,
                                              int causal, int window) {
	extern __shared__ float sh[]; // per warp: k, v
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
	i64 key = (i64)blockIdx.x * nw + warp;
	if (key >= (i64)B * Hkv * Lk) return;
	float *sk = sh + warp * 2 * D, *sv = sk + D;
	int j = (int)(key % Lk);
	i64 bh = key / Lk;
	int hk = (int)(bh % Hkv), b = (int)(bh / Hkv), G = Hq / Hkv;
	for (int x = lane; x < D; x += 32) {
		sk[x] = ldf(k, dtk, key * D + x);
		sv[x] = ldf(v, dtv, key * D + x);
	}
	__syncwarp();
	int off = Lk - Lq, ilo = 0, ihi = Lq;
	if (causal) {
		ilo = max(0, j - off);
		if (window > 0) ihi = min(Lq, j - off + window);
	}
	if (SMALL) {
		// Lane-per-query: each lane adds its row's dS q + dT r and
		// p (1 + tbar - t) g. The row's q, r and g are read again for the
		// sums (from L1) rather than held: 3 D more registers a lane
		// halved the resident warps.
		float k1[SMALLD], v1[SMALLD];
#pragma unroll
		for (int x = 0; x < SMALLD; x++) k1[x] = v1[x] = 0;
		for (int gg = 0; gg < G; gg++) {
			i64 rbase = ((i64)b * Hq + hk * G + gg) * Lq;
			for (int i0 = ilo; i0 < ihi; i0 += 32) {
				int i = i0 + lane;
				if (i >= ihi) continue;
				i64 row = rbase + i;
				float s = 0, t = 0, a = 0;
#pragma unroll
				for (int x0 = 0; x0 < SMALLD; x0 += 4) {
					if (x0 < D) {
						float qx[4], rx[4], gx[4];
						ld4_qrg<V4>(qx, rx, gx, q, r, g, dtq, dtr, dtg, row * D + x0, D - x0);
#pragma unroll
						for (int c4 = 0; c4 < 4; c4++) {
							int x = x0 + c4;
							if (x < D) {
								s += qx[c4] * sk[x];
								if (r) t += rx[c4] * sk[x];
								a += gx[c4] * sv[x];
							}
						}
					}
				}
				float ds, dt, pe;
				simt_dscore(r, expf(s * scale - lse[row]), a, t, T[row], r ? Bv[row] : 0.0f, r ? tbar[row] : 0.0f, ds, dt,
				            pe);
				ds *= scale;
#pragma unroll
				for (int x0 = 0; x0 < SMALLD; x0 += 4) {
					if (x0 < D) {
						float qx[4], rx[4], gx[4];
						ld4_qrg<V4>(qx, rx, gx, q, r, g, dtq, dtr, dtg, row * D + x0, D - x0);
#pragma unroll
						for (int c4 = 0; c4 < 4; c4++) {
							int x = x0 + c4;
							if (x < D) {
								float kk = ds * qx[c4];
								if (r) kk += dt * rx[c4];
								k1[x] += kk;
								v1[x] += pe * gx[c4];
							}
						}
					}
				}
			}
		}
		float ak = simt_reduce(k1, D, lane), av = simt_reduce(v1, D, lane);
		if (lane < D) {
			stf(dk, dtdk, key * D + lane, ak);
			stf(dv, dtdv, key * D + lane, av);
		}
		return;
	}
	float ak[MAXE], av[MAXE];
#pragma unroll
	for (int e = 0; e < MAXE; e++) ak[e] = av[e] = 0;
	for (int gg = 0; gg < G; gg++) {
		int h = hk * G + gg;
		i64 rbase = ((i64)b * Hq + h) * Lq;
		for (int i0 = ilo; i0 < ihi; i0 += 32) {
			int i = i0 + lane;
			float ds = 0, dt = 0, pe = 0;
			if (i < ihi) {
				i64 row = rbase + i;
				float s = 0, t = 0, a = 0;
				for (int x = 0; x < D; x++) {
					s += ldf(q, dtq, row * D + x) * sk[x];
					if (r) t += ldf(r, dtr, row * D + x) * sk[x];
					a += ldf(g, dtg, row * D + x) * sv[x];
				}
				simt_dscore(r, expf(s * scale - lse[row]), a, t, T[row], r ? Bv[row] : 0.0f, r ? tbar[row] : 0.0f, ds, dt,
				            pe);
			}
			int cnt = min(32, ihi - i0);
			for (int ii = 0; ii < cnt; ii++) {
				float dsi = __shfl_sync(0xffffffffu, ds, ii) * scale, dti = __shfl_sync(0xffffffffu, dt, ii),
				      pei = __shfl_sync(0xffffffffu, pe, ii);
				i64 row = rbase + i0 + ii;
#pragma unroll
				for (int e = 0; e < MAXE; e++) {
					int x = lane + 32 * e;
					if (x < D) {
						float kk = dsi * ldf(q, dtq, row * D + x);
						if (r) kk += dti * ldf(r, dtr, row * D + x);
						ak[e] += kk;
						av[e] += pei * ldf(g, dtg, row * D + x);
					}
				}
			}
		}
	}
#pragma unroll
	for (int e = 0; e < MAXE; e++) {
		int x = lane + 32 * e;
		if (x < D) {
			stf(dk, dtdk, key * D + x, ak[e]);
			stf(dv, dtdv, key * D + x, av[e]);
		}
	}
}
SIMT_PAIR(attn_dkv_simt, attn_dkv_body,
          (const void *q, const void *r, const void *k, const void *v, const void *g, const float *lse,
           const float *T, const float *Bv, const float *tbar, void *dk, void *dv, int dtq, int dtr, int dtk,
           int dtv, int dtg, int dtdk, int dtdv, int B, int Hq, int Hkv, int Lq, int Lk, int D, float scale,
           int causal, int window),
          (q, r, k, v, g, lse, T, Bv, tbar, dk, dv, dtq, dtr, dtk, dtv, dtg, dtdk, dtdv, B, Hq, Hkv, Lq, Lk, D,
           scale, causal, window))

// ---- linear attention (uniform weights), direct O(L^2 D) in double ----

// lin_fwd: plain o = sum (r.k) v; affine o = (sv (1 + C/n) - sum (r.k) v)/n
// with sv = sum v, C = sum r.k over the n visible keys. One warp per row.
extern "C" __global__ void lin_fwd(const void *r, const void *k, const void *v, void *o, int dtr, int dtk, int dtv, int dto,
                                   int B, int Hq, int Hkv, int Lq, int Lk, int D, int causal, int window, int affine) {
	extern __shared__ float sh[];
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
	i64 row = (i64)blockIdx.x * nw + warp;
	if (row >= (i64)B * Hq * Lq) return;
	float *sr = sh + warp * D;
	int i = (int)(row % Lq);
	i64 bh = row / Lq;
	int h = (int)(bh % Hq), b = (int)(bh / Hq), G = Hq / Hkv;
	int lo, hi;
	visible(i, Lk, Lq, causal, window, lo, hi);
	for (int x = lane; x < D; x += 32) sr[x] = ldf(r, dtr, row * D + x);
	__syncwarp();
	i64 kv = ((i64)b * Hkv + h / G) * Lk * D;
	double s1[MAXE], s2[MAXE], C = 0;
#pragma unroll
	for (int e = 0; e < MAXE; e++) s1[e] = s2[e] = 0;
	for (int j0 = lo; j0 < hi; j0 += 32) {
		int j = j0 + lane;
		double c = 0;
		if (j < hi)
			for (int x = 0; x < D; x++) c += (double)sr[x] * ldf(k, dtk, kv + (i64)j * D + x);
		C += warp_sumd(c);
		int cnt = min(32, hi - j0);
		for (int jj = 0; jj < cnt; jj++) {
			double cj = __shfl_sync(0xffffffffu, c, jj);
#pragma unroll
			for (int e = 0; e < MAXE; e++) {
				int x = lane + 32 * e;
				if (x < D) {
					double vx = ldf(v, dtv, kv + (i64)(j0 + jj) * D + x);
					s1[e] += vx;
					s2[e] += cj * vx;
				}
			}
		}
	}
	int n = hi - lo;
#pragma unroll
	for (int e = 0; e < MAXE; e++) {
		int x = lane + 32 * e;
		if (x < D) {
			double out = 0;
			if (n > 0) out = affine ? (s1[e] * (1 + C / n) - s2[e]) / n : s2[e];
			stf(o, dto, row * D + x, (float)out);
		}
	}
}

// lin_stats: per row inv = 1/n (0 without keys), kr = kbar.r, gv = g.vbar.
extern "C" __global__ void lin_stats(const void *r, const void *k, const void *v, const void *g, int dtr, int dtk, int dtv,
                                     int dtg, double *st, int B, int Hq, int Hkv, int Lq, int Lk, int D, int causal,
                                     int window) {
	extern __shared__ float sh[];
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
	i64 row = (i64)blockIdx.x * nw + warp;
	if (row >= (i64)B * Hq * Lq) return;
	float *sr = sh + warp * 2 * D, *sg = sr + D;
	int i = (int)(row % Lq);
	i64 bh = row / Lq;
	int h = (int)(bh % Hq), b = (int)(bh / Hq), G = Hq / Hkv;
	int lo, hi;
	visible(i, Lk, Lq, causal, window, lo, hi);
	for (int x = lane; x < D; x += 32) {
		sr[x] = ldf(r, dtr, row * D + x);
		sg[x] = ldf(g, dtg, row * D + x);
	}
	__syncwarp();
	i64 kv = ((i64)b * Hkv + h / G) * Lk * D;
	double C = 0, GV = 0;
	for (int j = lo + lane; j < hi; j += 32)
		for (int x = 0; x < D; x++) {
			C += (double)sr[x] * ldf(k, dtk, kv + (i64)j * D + x);
			GV += (double)sg[x] * ldf(v, dtv, kv + (i64)j * D + x);
		}
	C = warp_sumd(C);
	GV = warp_sumd(GV);
	if (lane == 0) {
		int n = hi - lo;
		double inv = n > 0 ? 1.0 / n : 0.0;
		st[3 * row] = inv;
		st[3 * row + 1] = C * inv;
		st[3 * row + 2] = GV * inv;
	}
}

// lin_dr: plain dr = sum (g.v) k; affine dr = inv (gv sum k - sum (g.v) k).
extern "C" __global__ void lin_dr(const void *k, const void *v, const void *g, void *dr, int dtk, int dtv, int dtg, int dtdr,
                                  const double *st, int B, int Hq, int Hkv, int Lq, int Lk, int D, int causal, int window,
                                  int affine) {
	extern __shared__ float sh[];
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
	i64 row = (i64)blockIdx.x * nw + warp;
	if (row >= (i64)B * Hq * Lq) return;
	float *sg = sh + warp * D;
	int i = (int)(row % Lq);
	i64 bh = row / Lq;
	int h = (int)(bh % Hq), b = (int)(bh / Hq), G = Hq / Hkv;
	int lo, hi;
	visible(i, Lk, Lq, causal, window, lo, hi);
	for (int x = lane; x < D; x += 32) sg[x] = ldf(g, dtg, row * D + x);
	__syncwarp();
	i64 kv = ((i64)b * Hkv + h / G) * Lk * D;
	double sk[MAXE], sa[MAXE];
#pragma unroll
	for (int e = 0; e < MAXE; e++) sk[e] = sa[e] = 0;
	for (int j0 = lo; j0 < hi; j0 += 32) {
		int j = j0 + lane;
		double a = 0;
		if (j < hi)
			for (int x = 0; x < D; x++) a += (double)sg[x] * ldf(v, dtv, kv + (i64)j * D + x);
		int cnt = min(32, hi - j0);
		for (int jj = 0; jj < cnt; jj++) {
			double aj = __shfl_sync(0xffffffffu, a, jj);
#pragma unroll
			for (int e = 0; e < MAXE; e++) {
				int x = lane + 32 * e;
				if (x < D) {
					double kx = ldf(k, dtk, kv + (i64)(j0 + jj) * D + x);
					sk[e] += kx;
					sa[e] += aj * kx;
				}
			}
		}
	}
	double inv = st[3 * row], gv = st[3 * row + 2];
#pragma unroll
	for (int e = 0; e < MAXE; e++) {
		int x = lane + 32 * e;
		if (x < D) stf(dr, dtdr, row * D + x, (float)(affine ? inv * (gv * sk[e] - sa[e]) : sa[e]));
	}
}

// lin_dkv: over the rows i (all G heads) that see key j, plain dk = sum
// (g.v) r, dv = sum (r.k) g; affine dk = sum inv (gv - g.v) r, dv = sum inv
// (1 + kr - r.k) g. One warp per key.
extern "C" __global__ void lin_dkv(const void *r, const void *k, const void *v, const void *g, void *dk, void *dv, int dtr,
                                   int dtk, int dtv, int dtg, int dtdk, int dtdv, const double *st, int B, int Hq, int Hkv,
                                   int Lq, int Lk, int D, int causal, int window, int affine) {
	extern __shared__ float sh[];
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
	i64 key = (i64)blockIdx.x * nw + warp;
	if (key >= (i64)B * Hkv * Lk) return;
	float *sk = sh + warp * 2 * D, *sv = sk + D;
	int j = (int)(key % Lk);
	i64 bh = key / Lk;
	int hk = (int)(bh % Hkv), b = (int)(bh / Hkv), G = Hq / Hkv;
	for (int x = lane; x < D; x += 32) {
		sk[x] = ldf(k, dtk, key * D + x);
		sv[x] = ldf(v, dtv, key * D + x);
	}
	__syncwarp();
	int off = Lk - Lq, ilo = 0, ihi = Lq;
	if (causal) {
		ilo = max(0, j - off);
		if (window > 0) ihi = min(Lq, j - off + window);
	}
	double ak[MAXE], av[MAXE];
#pragma unroll
	for (int e = 0; e < MAXE; e++) ak[e] = av[e] = 0;
	for (int gg = 0; gg < G; gg++) {
		i64 rbase = ((i64)b * Hq + hk * G + gg) * Lq;
		for (int i0 = ilo; i0 < ihi; i0 += 32) {
			int i = i0 + lane;
			double ck = 0, cv = 0;
			if (i < ihi) {
				i64 row = rbase + i;
				double c = 0, a = 0;
				for (int x = 0; x < D; x++) {
					c += (double)ldf(r, dtr, row * D + x) * sk[x];
					a += (double)ldf(g, dtg, row * D + x) * sv[x];
				}
				if (affine) {
					double inv = st[3 * row];
					ck = inv * (st[3 * row + 2] - a);
					cv = inv * (1 + st[3 * row + 1] - c);
				} else {
					ck = a;
					cv = c;
				}
			}
			int cnt = min(32, ihi - i0);
			for (int ii = 0; ii < cnt; ii++) {
				double cki = __shfl_sync(0xffffffffu, ck, ii), cvi = __shfl_sync(0xffffffffu, cv, ii);
				i64 row = rbase + i0 + ii;
#pragma unroll
				for (int e = 0; e < MAXE; e++) {
					int x = lane + 32 * e;
					if (x < D) {
						ak[e] += cki * ldf(r, dtr, row * D + x);
						av[e] += cvi * ldf(g, dtg, row * D + x);
					}
				}
			}
		}
	}
#pragma unroll
	for (int e = 0; e < MAXE; e++) {
		int x = lane + 32 * e;
		if (x < D) {
			stf(dk, dtdk, key * D + x, (float)ak[e]);
			stf(dv, dtdv, key * D + x, (float)av[e]);
		}
	}
}

// ---- exact LLA: one block per query row, double precision ----
//
// Per row (docs/MATH.md section 5): w_j = exp(s_j - m), omega = sum w,
// mu = sum w (k - q), Sig = sum w (k - q)(k - q)^T + lambda omega I,
// rho* = Sig^-1 mu (CG or Cholesky), o = sum w (1 - rho*.(k - q)) v / den,
// den = omega - mu.rho*, eta = (omega - den) / den. Sig and the weights of
// each row live in a global scratch (row - row0) * (D*D + Lk) doubles.
extern "C" __global__ void lla_row(const void *q, const void *k, const void *v, void *o, void *rho, float *eta, int dtq,
                                   int dtk, int dtv, int dto, int dtrho, int B, int Hq, int Hkv, int Lq, int Lk, int D,
                                   float scale, int causal, int window, double lambda, int direct, double tol, int maxIter,
                                   double *scratch, i64 row0, int *err) {
	extern __shared__ double sd[]; // q, mu, x, r, p, u, dk: 7 D
	__shared__ double red[33];
	__shared__ int fail;
	i64 row = row0 + blockIdx.x;
	if (row >= (i64)B * Hq * Lq) return;
	int tid = threadIdx.x, nt = blockDim.x;
	double *sq = sd, *mu = sq + D, *xs = mu + D, *rs = xs + D, *ps = rs + D, *us = ps + D, *dk = us + D;
	double *sig = scratch + (i64)blockIdx.x * ((i64)D * D + Lk), *w = sig + (i64)D * D;
	int i = (int)(row % Lq);
	i64 bh = row / Lq;
	int h = (int)(bh % Hq), b = (int)(bh / Hq), G = Hq / Hkv;
	int lo, hi;
	visible(i, Lk, Lq, causal, window, lo, hi);
	i64 kv = ((i64)b * Hkv + h / G) * Lk * D;
	for (int x = tid; x < D; x += nt) {
		sq[x] = ldf(q, dtq, row * D + x);
		mu[x] = 0;
	}
	for (i64 e = tid; e < (i64)D * D; e += nt) sig[e] = 0;
	if (tid == 0) fail = 0;
	__syncthreads();
	if (hi <= lo) {
		for (int x = tid; x < D; x += nt) {
			stf(o, dto, row * D + x, 0.0f);
			if (rho) stf(rho, dtrho, row * D + x, 0.0f);
		}
		if (eta && tid == 0) eta[row] = 0;
		return;
	}
	// weights
	double mloc = -1e300;
	for (int j = lo + tid; j < hi; j += nt) {
		double s = 0;
		for (int x = 0; x < D; x++) s += sq[x] * ldf(k, dtk, kv + (i64)j * D + x);
		s *= scale;
		w[j - lo] = s;
		mloc = fmax(mloc, s);
	}
	// block max via the sum helper's storage
	{
		double vmax = mloc;
		for (int o2 = 16; o2 > 0; o2 >>= 1) vmax = fmax(vmax, __shfl_xor_sync(0xffffffffu, vmax, o2));
		__syncthreads();
		if ((tid & 31) == 0) red[tid >> 5] = vmax;
		__syncthreads();
		if (tid == 0) {
			double mm = red[0];
			for (int wv = 1; wv < (nt >> 5); wv++) mm = fmax(mm, red[wv]);
			red[32] = mm;
		}
		__syncthreads();
		mloc = red[32];
		__syncthreads();
	}
	double om = 0;
	for (int j = lo + tid; j < hi; j += nt) {
		double wj = exp(w[j - lo] - mloc);
		w[j - lo] = wj;
		om += wj;
	}
	double omega = block_sumd(om, red);
	// mu and Sig
	for (int j = lo; j < hi; j++) {
		__syncthreads();
		for (int x = tid; x < D; x += nt) dk[x] = (double)ldf(k, dtk, kv + (i64)j * D + x) - sq[x];
		__syncthreads();
		double wj = w[j - lo];
		for (int x = tid; x < D; x += nt) mu[x] += wj * dk[x];
		for (i64 e = tid; e < (i64)D * D; e += nt) sig[e] += wj * dk[e / D] * dk[e % D];
	}
	__syncthreads();
	for (int x = tid; x < D; x += nt) sig[(i64)x * D + x] += lambda * omega;
	__syncthreads();
	if (!direct) {
		// conjugate gradients from 0
		for (int x = tid; x < D; x += nt) {
			xs[x] = 0;
			rs[x] = mu[x];
			ps[x] = mu[x];
		}
		__syncthreads();
		double rr = 0;
		for (int x = tid; x < D; x += nt) rr += rs[x] * rs[x];
		rr = block_sumd(rr, red);
		double stop = tol * tol * rr;
		for (int it = 0; it < maxIter && rr > stop; it++) {
			for (int x = tid; x < D; x += nt) {
				double a = 0;
				for (int y = 0; y < D; y++) a += sig[(i64)x * D + y] * ps[y];
				us[x] = a;
			}
			__syncthreads();
			double pu = 0;
			for (int x = tid; x < D; x += nt) pu += ps[x] * us[x];
			pu = block_sumd(pu, red);
			if (!(pu > 0)) break;
			double alpha = rr / pu;
			double rn = 0;
			for (int x = tid; x < D; x += nt) {
				xs[x] += alpha * ps[x];
				rs[x] -= alpha * us[x];
				rn += rs[x] * rs[x];
			}
			rn = block_sumd(rn, red);
			double beta = rn / rr;
			rr = rn;
			for (int x = tid; x < D; x += nt) ps[x] = rs[x] + beta * ps[x];
			__syncthreads();
		}
	} else {
		// Cholesky in place (lower triangle), then two triangular solves
		double dmax = 0;
		for (int x = 0; x < D; x++) dmax = fmax(dmax, sig[(i64)x * D + x]);
		double floor = 1e-13 * dmax;
		if (!(dmax > 0) && tid == 0) fail = 1;
		for (int jc = 0; jc < D; jc++) {
			__syncthreads();
			if (fail) break;
			double s = 0;
			for (int c = tid; c < jc; c += nt) s += sig[(i64)jc * D + c] * sig[(i64)jc * D + c];
			s = sig[(i64)jc * D + jc] - block_sumd(s, red);
			if (!(s > floor)) {
				if (tid == 0) fail = 1;
				__syncthreads();
				break;
			}
			double ljj = sqrt(s);
			for (int ii = jc + 1 + tid; ii < D; ii += nt) {
				double a = sig[(i64)ii * D + jc];
				for (int c = 0; c < jc; c++) a -= sig[(i64)ii * D + c] * sig[(i64)jc * D + c];
				sig[(i64)ii * D + jc] = a / ljj;
			}
			__syncthreads();
			if (tid == 0) sig[(i64)jc * D + jc] = ljj;
		}
		__syncthreads();
		if (!fail && tid == 0) {
			for (int x = 0; x < D; x++) {
				double a = mu[x];
				for (int c = 0; c < x; c++) a -= sig[(i64)x * D + c] * xs[c];
				xs[x] = a / sig[(i64)x * D + x];
			}
			for (int x = D - 1; x >= 0; x--) {
				double a = xs[x];
				for (int c = x + 1; c < D; c++) a -= sig[(i64)c * D + x] * xs[c];
				xs[x] = a / sig[(i64)x * D + x];
			}
		}
		__syncthreads();
		if (fail) {
			if (tid == 0) raise_error(err, 3, (int)row, i, D);
			return;
		}
	}
	__syncthreads();
	double mr = 0, qr = 0;
	for (int x = tid; x < D; x += nt) {
		mr += mu[x] * xs[x];
		qr += xs[x] * sq[x];
	}
	mr = block_sumd(mr, red);
	qr = block_sumd(qr, red);
	double den = omega - mr;
	if (!(den > 1e-9 * omega)) {
		if (tid == 0) raise_error(err, 3, (int)row, i, D);
		return;
	}
	for (int j = lo + tid; j < hi; j += nt) {
		double rk = 0;
		for (int x = 0; x < D; x++) rk += xs[x] * ldf(k, dtk, kv + (i64)j * D + x);
		w[j - lo] = w[j - lo] * (1 - (rk - qr)) / den;
	}
	__syncthreads();
	for (int x = tid; x < D; x += nt) {
		double a = 0;
		for (int j = lo; j < hi; j++) a += w[j - lo] * ldf(v, dtv, kv + (i64)j * D + x);
		if (!isfinite(a) && atomicCAS(&fail, 0, 1) == 0) raise_error(err, 3, (int)row, i, D);
		stf(o, dto, row * D + x, (float)a);
		if (rho) stf(rho, dtrho, row * D + x, (float)xs[x]);
	}
	if (eta && tid == 0) eta[row] = (float)((omega - den) / den);
}
