// The non-attention ops: elementwise formulas, copies and casts, embedding,
// RMSNorm, RoPE, cross entropy, reductions and optimizer updates. Every
// tensor arrives as an untyped pointer and a dtype code; the per-element
// switch in ldf/stf is uniform across a warp and these kernels are bound by
// memory, so one kernel serves every dtype combination. Sums that need it
// accumulate in double.
#include "common.cuh"

#define GRID_STRIDE(i, n) for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (i64)gridDim.x * blockDim.x)

extern "C" __global__ void fill(void *t, int dt, i64 n, float v) {
	GRID_STRIDE(i, n) stf(t, dt, i, v);
}

// The elementwise kernels below move two elements an access when n is even
// (every tensor starts aligned, so pairs never straddle), halving the
// memory instructions of 16-bit tensors; GRID_STRIDE2 walks the pairs.
#define GRID_STRIDE8(i, n) for (i64 i = 8 * ((i64)blockIdx.x * blockDim.x + threadIdx.x); i < (n); i += 8 * (i64)gridDim.x * blockDim.x)
#define GRID_STRIDE2(i, n) for (i64 i = 2 * ((i64)blockIdx.x * blockDim.x + threadIdx.x); i < (n); i += 2 * (i64)gridDim.x * blockDim.x)

extern "C" __global__ void add_scaled(void *out, int dto, const void *a, int dta, const void *b, int dtb, i64 n,
                                      float alpha, float beta) {
	if (n & 1) {
		GRID_STRIDE(i, n) stf(out, dto, i, alpha * ldf(a, dta, i) + beta * ldf(b, dtb, i));
		return;
	}
	if ((n & 7) == 0 && dto != DT_I32 && dta != DT_I32 && dtb != DT_I32) {
		GRID_STRIDE8(i, n) {
			float x[8], y[8];
			ld8f(a, dta, i, x);
			ld8f(b, dtb, i, y);
#pragma unroll
			for (int k = 0; k < 8; k++) x[k] = alpha * x[k] + beta * y[k];
			st8f(out, dto, i, x);
		}
		return;
	}
	GRID_STRIDE2(i, n) {
		pair x = ld2f(a, dta, i), y = ld2f(b, dtb, i);
		st2f(out, dto, i, alpha * x.x + beta * y.x, alpha * x.y + beta * y.y);
	}
}

extern "C" __global__ void cast(void *dst, int dtd, const void *src, int dts, i64 n) {
	GRID_STRIDE(i, n) {
		if (dts == DT_I32 && dtd == DT_I32) ((int *)dst)[i] = ((const int *)src)[i];
		else stf(dst, dtd, i, ldf(src, dts, i));
	}
}

// swap12: dst[a, c, b, :] = src[a, b, c, :], moving each row of D elements
// as Dv units of `unit` bytes (16, 4 or the element size, as the row's
// length and the pointers' alignment allow). Reads are contiguous; writes
// are runs of one row. 32-bit index arithmetic when the tensor allows it
// (64-bit division costs tens of instructions an element).
template <typename U>
__device__ __forceinline__ void swap12_units(U *dst, const U *src, int A, int B, int C, int Dv) {
	i64 n = (i64)A * B * C * Dv;
	if (n < 0x7fffffffLL) {
		unsigned inner = (unsigned)C * Dv, un = (unsigned)n;
		for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < un; i += gridDim.x * blockDim.x) {
			unsigned ab = i / inner, j = i - ab * inner;
			unsigned a = ab / B, b = ab - a * B;
			unsigned c = j / Dv, dv = j - c * Dv;
			dst[(((i64)a * C + c) * B + b) * Dv + dv] = src[i];
		}
		return;
	}
	GRID_STRIDE(i, n) {
		i64 dv = i % Dv, r = i / Dv;
		i64 c = r % C;
		r /= C;
		i64 b = r % B, a = r / B;
		dst[((a * C + c) * B + b) * Dv + dv] = src[i];
	}
}

struct u128 {
	u32 a, b, c, d;
};

extern "C" __global__ void swap12(void *dst, const void *src, int unit, int A, int B, int C, int Dv) {
	switch (unit) {
	case 16: swap12_units((u128 *)dst, (const u128 *)src, A, B, C, Dv); break;
	case 4: swap12_units((u32 *)dst, (const u32 *)src, A, B, C, Dv); break;
	default: swap12_units((u16 *)dst, (const u16 *)src, A, B, C, Dv); break;
	}
}

// kv_append writes x [B, H, n, D] into cache [B, H, Cap, D] at start.
extern "C" __global__ void kv_append(void *cache, int dtc, const void *x, int dtx, int B, int H, int n, int Cap,
                                     int D, int start) {
	i64 total = (i64)B * H * n * D;
	GRID_STRIDE(i, total) {
		int d = (int)(i % D);
		i64 r = i / D;
		int p = (int)(r % n);
		i64 bh = r / n;
		i64 o = (bh * Cap + start + p) * D + d;
		if (dtc == DT_I32) ((int *)cache)[o] = ((const int *)x)[i];
		else stf(cache, dtc, o, ldf(x, dtx, i));
	}
}

// kv_append8 is kv_append for D a multiple of 8 and 16-byte aligned
// tensors of floating dtypes, fewer than 2^31 groups of 8: a thread moves
// 8 elements with 16-byte accesses and splits its index with 32-bit
// divisions. The scalar kernel's four 64-bit divisions an element made a
// 2048-token prefill's appends instruction-bound at a tenth of the
// bandwidth.
extern "C" __global__ void kv_append8(void *cache, int dtc, const void *x, int dtx, int B, int H, int n, int Cap,
                                      int D, int start) {
	unsigned D8 = (unsigned)D >> 3, total = (unsigned)B * H * n * D8;
	for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
		unsigned r = i / D8, d8 = i - r * D8;
		unsigned bh = r / n, p = r - bh * n;
		float v[8];
		ld8f(x, dtx, (i64)i * 8, v);
		st8f(cache, dtc, ((i64)bh * Cap + start + p) * D + (i64)d8 * 8, v);
	}
}

// kv_append_at writes x [B, H, n, D] into cache [B, H, Cap, D] at
// starts[b].. of each sequence b; a start outside [0, Cap - n] writes
// nothing for its sequence and raises error 5 (sequence, start, Cap).
extern "C" __global__ void kv_append_at(void *cache, int dtc, const void *x, int dtx, const int *starts, int B, int H,
                                        int n, int Cap, int D, int *err) {
	i64 total = (i64)B * H * n * D;
	GRID_STRIDE(i, total) {
		int d = (int)(i % D);
		i64 r = i / D;
		int p = (int)(r % n);
		i64 bh = r / n;
		int b = (int)(bh / H);
		int start = starts[b];
		if (start < 0 || start > Cap - n) {
			if (d == 0 && p == 0 && bh % H == 0) raise_error(err, 5, b, start, Cap);
			continue;
		}
		i64 o = (bh * Cap + start + p) * D + d;
		if (dtc == DT_I32) ((int *)cache)[o] = ((const int *)x)[i];
		else stf(cache, dtc, o, ldf(x, dtx, i));
	}
}

__device__ __forceinline__ float sigmoidf(float z) { return 1.0f / (1.0f + expf(-z)); }

extern "C" __global__ void swiglu(void *out, int dto, const void *g, int dtg, const void *u, int dtu, i64 n) {
	if (n & 1) {
		GRID_STRIDE(i, n) {
			float z = ldf(g, dtg, i);
			stf(out, dto, i, z * sigmoidf(z) * ldf(u, dtu, i));
		}
		return;
	}
	if ((n & 7) == 0) {
		GRID_STRIDE8(i, n) {
			float z[8], up[8];
			ld8f(g, dtg, i, z);
			ld8f(u, dtu, i, up);
#pragma unroll
			for (int k = 0; k < 8; k++) z[k] = z[k] * sigmoidf(z[k]) * up[k];
			st8f(out, dto, i, z);
		}
		return;
	}
	GRID_STRIDE2(i, n) {
		pair z = ld2f(g, dtg, i), up = ld2f(u, dtu, i);
		st2f(out, dto, i, z.x * sigmoidf(z.x) * up.x, z.y * sigmoidf(z.y) * up.y);
	}
}

extern "C" __global__ void swiglu_bwd(void *dg, int dtdg, void *du, int dtdu, const void *dout, int dtdo,
                                      const void *g, int dtg, const void *u, int dtu, i64 n) {
	if (n & 1) {
		GRID_STRIDE(i, n) {
			float z = ldf(g, dtg, i), up = ldf(u, dtu, i), dy = ldf(dout, dtdo, i);
			float s = sigmoidf(z);
			stf(dg, dtdg, i, dy * up * s * (1.0f + z * (1.0f - s)));
			stf(du, dtdu, i, dy * z * s);
		}
		return;
	}
	if ((n & 7) == 0) {
		GRID_STRIDE8(i, n) {
			float z[8], up[8], dy[8], a[8];
			ld8f(g, dtg, i, z);
			ld8f(u, dtu, i, up);
			ld8f(dout, dtdo, i, dy);
#pragma unroll
			for (int k = 0; k < 8; k++) {
				float sg = sigmoidf(z[k]);
				a[k] = dy[k] * up[k] * sg * (1.0f + z[k] * (1.0f - sg));
				up[k] = dy[k] * z[k] * sg;
			}
			st8f(dg, dtdg, i, a);
			st8f(du, dtdu, i, up);
		}
		return;
	}
	GRID_STRIDE2(i, n) {
		pair z = ld2f(g, dtg, i), up = ld2f(u, dtu, i), dy = ld2f(dout, dtdo, i);
		float s0 = sigmoidf(z.x), s1 = sigmoidf(z.y);
		st2f(dg, dtdg, i, dy.x * up.x * s0 * (1.0f + z.x * (1.0f - s0)), dy.y * up.y * s1 * (1.0f + z.y * (1.0f - s1)));
		st2f(du, dtdu, i, dy.x * z.x * s0, dy.y * z.y * s1);
	}
}

// head_gate: out[r, :] = sigmoid(z[r]) x[r, :] over rows of length D (one row
// per token and head).
extern "C" __global__ void head_gate(void *out, int dto, const void *x, int dtx, const void *z, int dtz, i64 n,
                                     int D) {
	GRID_STRIDE(i, n) stf(out, dto, i, sigmoidf(ldf(z, dtz, i / D)) * ldf(x, dtx, i));
}

// head_gate_bwd: one thread per row; dX = s dOut, dZ = s (1 - s) sum dOut x.
extern "C" __global__ void head_gate_bwd(void *dx, int dtdx, void *dz, int dtdz, const void *dout, int dtdo,
                                         const void *x, int dtx, const void *z, int dtz, i64 rows, int D) {
	GRID_STRIDE(r, rows) {
		float s = sigmoidf(ldf(z, dtz, r));
		double dot = 0;
		for (int j = 0; j < D; j++) {
			i64 i = r * D + j;
			float g = ldf(dout, dtdo, i);
			dot += (double)g * ldf(x, dtx, i);
			stf(dx, dtdx, i, s * g);
		}
		stf(dz, dtdz, r, (float)(s * (1.0f - s) * dot));
	}
}

// adamw: decoupled decay, moments, bias-corrected step (step = lr/(1-b1^t),
// bc2 = sqrt(1-b2^t)), in double, of the gradient scaled by gs (the clip
// factor, rounded to f32 as a separate scaling pass would store it; 1 is
// exact).
extern "C" __global__ void adamw(void *p, int dtp, const void *g, int dtg, float *m, float *v, i64 n, double decay,
                                 double step, double bc2, double b1, double b2, double eps, float gs) {
	GRID_STRIDE(i, n) {
		double x = gs * ldf(g, dtg, i);
		double mi = b1 * (double)m[i] + (1 - b1) * x;
		double vi = b2 * (double)v[i] + (1 - b2) * x * x;
		m[i] = (float)mi;
		v[i] = (float)vi;
		double pi = (double)ldf(p, dtp, i);
		stf(p, dtp, i, (float)(pi * decay - step * mi / (sqrt(vi) / bc2 + eps)));
	}
}

extern "C" __global__ void muon_apply(void *p, int dtp, const void *o, int dto, i64 n, float lr, float wd, float scale) {
	GRID_STRIDE(i, n) {
		double pi = ldf(p, dtp, i), oi = ldf(o, dto, i);
		stf(p, dtp, i, (float)(pi * (1.0 - (double)lr * wd) - (double)lr * scale * oi));
	}
}

extern "C" __global__ void embedding(void *out, int dto, const void *table, int dtt, const int *ids, i64 n, int d, int V,
                                     int *err) {
	GRID_STRIDE(e, n * d) {
		i64 r = e / d;
		int c = (int)(e % d);
		int id = ids[r];
		if (id < 0 || id >= V) {
			if (c == 0) raise_error(err, 1, id, (int)r, V);
			stf(out, dto, e, 0.0f);
			continue;
		}
		stf(out, dto, e, ldf(table, dtt, (i64)id * d + c));
	}
}

// embedding_bwd adds dOut rows into an f32 accumulator table.
extern "C" __global__ void embedding_bwd(float *acc, const int *ids, const void *dout, int dtdo, i64 n, int d, int V,
                                         int *err) {
	GRID_STRIDE(e, n * d) {
		i64 r = e / d;
		int c = (int)(e % d);
		int id = ids[r];
		if (id < 0 || id >= V) {
			if (c == 0) raise_error(err, 1, id, (int)r, V);
			continue;
		}
		atomicAdd(&acc[(i64)id * d + c], ldf(dout, dtdo, e));
	}
}

// rmsnorm: one warp per row (blockDim.x a multiple of 32), pairs of
// elements per access when N is even. Sums in f32: each lane adds N/32
// squares, then a tree over the lanes, a relative error of about
// (N/32 + 5) u32 = 3e-6 at N = 2048, far under any bound of the outputs.
extern "C" __global__ void rmsnorm(void *out, int dto, float *rstd, const void *x, int dtx, const void *w, int dtw,
                                   i64 rows, int N, float eps) {
	int lane = threadIdx.x & 31;
	i64 step = (i64)gridDim.x * (blockDim.x >> 5);
	bool pairs = (N & 1) == 0;
	for (i64 r = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); r < rows; r += step) {
		i64 base = r * N;
		float ss = 0;
		if (pairs)
			for (int c = 2 * lane; c < N; c += 64) {
				pair v = ld2f(x, dtx, base + c);
				ss += v.x * v.x + v.y * v.y;
			}
		else
			for (int c = lane; c < N; c += 32) {
				float v = ldf(x, dtx, base + c);
				ss += v * v;
			}
		ss = warp_sum(ss);
		float s = 1.0f / sqrtf(ss / (float)N + eps);
		if (rstd && lane == 0) rstd[r] = s;
		if (pairs)
			for (int c = 2 * lane; c < N; c += 64) {
				pair v = ld2f(x, dtx, base + c), g = ld2f(w, dtw, c);
				st2f(out, dto, base + c, v.x * s * g.x, v.y * s * g.y);
			}
		else
			for (int c = lane; c < N; c += 32) stf(out, dto, base + c, ldf(x, dtx, base + c) * s * ldf(w, dtw, c));
	}
}

// rmsnorm_bwd: dX = rstd (gy - xhat mean(gy xhat)), gy = dOut w, one warp
// per row as rmsnorm (the same f32 sums); with acc, dX += that instead (the
// lane that writes an element reads its old value first, the sum in f32
// rounded once; dX must then not alias dOut or x). Each element is read
// before the same lane writes it, so a plain dX may alias dOut.
extern "C" __global__ void rmsnorm_bwd(void *dx, int dtdx, const void *dout, int dtdo, const void *x, int dtx,
                                       const void *w, int dtw, const float *rstd, i64 rows, int N, int acc) {
	int lane = threadIdx.x & 31;
	i64 step = (i64)gridDim.x * (blockDim.x >> 5);
	bool pairs = (N & 1) == 0;
	for (i64 r = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); r < rows; r += step) {
		i64 base = r * N;
		float s = rstd[r], dot = 0;
		if (pairs)
			for (int c = 2 * lane; c < N; c += 64) {
				pair g = ld2f(dout, dtdo, base + c), wv = ld2f(w, dtw, c), xv = ld2f(x, dtx, base + c);
				dot += g.x * wv.x * xv.x + g.y * wv.y * xv.y;
			}
		else
			for (int c = lane; c < N; c += 32) dot += ldf(dout, dtdo, base + c) * ldf(w, dtw, c) * ldf(x, dtx, base + c);
		float k = warp_sum(dot) * s * s / (float)N; // mean(gy xhat) / x-to-xhat
		if (pairs)
			for (int c = 2 * lane; c < N; c += 64) {
				pair g = ld2f(dout, dtdo, base + c), wv = ld2f(w, dtw, c), xv = ld2f(x, dtx, base + c);
				float ox = s * (g.x * wv.x - xv.x * k), oy = s * (g.y * wv.y - xv.y * k);
				if (acc) {
					pair o = ld2f(dx, dtdx, base + c);
					ox += o.x;
					oy += o.y;
				}
				st2f(dx, dtdx, base + c, ox, oy);
			}
		else
			for (int c = lane; c < N; c += 32) {
				float o = s * (ldf(dout, dtdo, base + c) * ldf(w, dtw, c) - ldf(x, dtx, base + c) * k);
				if (acc) o += ldf(dx, dtdx, base + c);
				stf(dx, dtdx, base + c, o);
			}
	}
}

// rmsnorm8 and rmsnorm_bwd8 are rmsnorm and rmsnorm_bwd for rows whose
// width N is a multiple of 8 (every tensor 16-byte aligned): lpr lanes a
// row (a power of two, N/8 or 32), 32/lpr rows a warp, 16-byte accesses,
// sums over the row's lanes by shuffles. Per-head norms (N = 64: 8 lanes,
// 4 rows a warp) thus keep every lane busy with wide loads.
__device__ __forceinline__ float group_sum(float v, int lpr) {
	for (int o = lpr >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

extern "C" __global__ void rmsnorm8(void *out, int dto, float *rstd, const void *x, int dtx, const void *w, int dtw,
                                    i64 rows, int N, float eps, int lpr) {
	int lane = threadIdx.x & 31, sub = lane & (lpr - 1), rpw = 32 / lpr;
	i64 warp = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), nwarps = (i64)gridDim.x * (blockDim.x >> 5);
	for (i64 r0 = warp * rpw; r0 < rows; r0 += nwarps * rpw) {
		i64 r = r0 + lane / lpr;
		bool ok = r < rows;
		i64 base = r * N;
		float ss = 0;
		if (ok)
#pragma unroll 4
			for (int c = 8 * sub; c < N; c += 8 * lpr) {
				float v[8];
				ld8f(x, dtx, base + c, v);
#pragma unroll
				for (int k = 0; k < 8; k++) ss += v[k] * v[k];
			}
		ss = group_sum(ss, lpr);
		float sc = 1.0f / sqrtf(ss / (float)N + eps);
		if (!ok) continue;
		if (rstd && sub == 0) rstd[r] = sc;
		for (int c = 8 * sub; c < N; c += 8 * lpr) {
			float v[8], g[8];
			ld8f(x, dtx, base + c, v);
			ld8f(w, dtw, c, g);
#pragma unroll
			for (int k = 0; k < 8; k++) v[k] = v[k] * sc * g[k];
			st8f(out, dto, base + c, v);
		}
	}
}

extern "C" __global__ void rmsnorm_bwd8(void *dx, int dtdx, const void *dout, int dtdo, const void *x, int dtx,
                                        const void *w, int dtw, const float *rstd, i64 rows, int N, int lpr, int acc) {
	int lane = threadIdx.x & 31, sub = lane & (lpr - 1), rpw = 32 / lpr;
	i64 warp = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), nwarps = (i64)gridDim.x * (blockDim.x >> 5);
	for (i64 r0 = warp * rpw; r0 < rows; r0 += nwarps * rpw) {
		i64 r = r0 + lane / lpr;
		bool ok = r < rows;
		i64 base = r * N;
		float sc = ok ? rstd[r] : 0.0f, dot = 0;
		if (ok)
#pragma unroll 4
			for (int c = 8 * sub; c < N; c += 8 * lpr) {
				float g[8], wv[8], xv[8];
				ld8f(dout, dtdo, base + c, g);
				ld8f(w, dtw, c, wv);
				ld8f(x, dtx, base + c, xv);
#pragma unroll
				for (int k = 0; k < 8; k++) dot += g[k] * wv[k] * xv[k];
			}
		float kk = group_sum(dot, lpr) * sc * sc / (float)N;
		if (!ok) continue;
		for (int c = 8 * sub; c < N; c += 8 * lpr) {
			float g[8], wv[8], xv[8];
			ld8f(dout, dtdo, base + c, g);
			ld8f(w, dtw, c, wv);
			ld8f(x, dtx, base + c, xv);
#pragma unroll
			for (int k = 0; k < 8; k++) g[k] = sc * (g[k] * wv[k] - xv[k] * kk);
			if (acc) {
				ld8f(dx, dtdx, base + c, xv); // the old dX (x is read no more)
#pragma unroll
				for (int k = 0; k < 8; k++) g[k] += xv[k];
			}
			st8f(dx, dtdx, base + c, g);
		}
	}
}

// rmsnorm_dw adds sum over rows of dOut xhat into acc [N]: blocks of 32
// columns x 8 row lanes, rows split over gridDim.y.
extern "C" __global__ void rmsnorm_dw(float *acc, const void *dout, int dtdo, const void *x, int dtx, const float *rstd,
                                      i64 rows, int N) {
	__shared__ float sh[8][33];
	int c = blockIdx.x * 32 + threadIdx.x;
	float s = 0;
	if (c < N)
		for (i64 r = (i64)blockIdx.y * 8 + threadIdx.y; r < rows; r += (i64)gridDim.y * 8)
			s += ldf(dout, dtdo, r * N + c) * ldf(x, dtx, r * N + c) * rstd[r];
	sh[threadIdx.y][threadIdx.x] = s;
	__syncthreads();
	if (threadIdx.y == 0 && c < N) {
		for (int y = 1; y < 8; y++) s += sh[y][threadIdx.x];
		atomicAdd(&acc[c], s);
	}
}

// add_f32: dst += acc.
extern "C" __global__ void add_f32(void *dst, int dtd, const float *acc, i64 n) {
	GRID_STRIDE(i, n) stf(dst, dtd, i, ldf(dst, dtd, i) + acc[i]);
}

// rope rotates (x_i, x_{i+D/2}) of each row by pos[l] theta^(-2i/D) (the
// inverse rotation for the backward). A thread owns one (l, i) and applies
// its rotation, formed once (rope_sincos), to the rows of ROPE_ROWS (b, h)
// pairs (blockIdx.y), so the trigonometry costs 1/ROPE_ROWS of an element.
// One thread per pair of elements, so out may alias x.
#define ROPE_ROWS 16
extern "C" __global__ void rope(void *out, int dto, const void *x, int dtx, const int *pos, int B, int H, int L, int D,
                                float theta, int inverse) {
	__shared__ double fr[ROPE_FMAX];
	rope_freqs(fr, theta, D);
	int half = D / 2;
	i64 per = (i64)L * half, bhs = (i64)B * H;
	for (i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x; e < per; e += (i64)gridDim.x * blockDim.x) {
		int l = (int)(e / half), i = (int)(e - (i64)l * half);
		float c, s;
		rope_sincos((double)pos[l], rope_freq(fr, i, theta, D), &c, &s);
		if (inverse) s = -s;
		for (i64 bh0 = (i64)blockIdx.y * ROPE_ROWS; bh0 < bhs; bh0 += (i64)gridDim.y * ROPE_ROWS) {
			// Every row's pair is loaded before any is stored (the rows are
			// disjoint, so this holds when out aliases x): 2 ROPE_ROWS
			// loads in flight a thread.
			float a[ROPE_ROWS], b[ROPE_ROWS];
#pragma unroll
			for (int k = 0; k < ROPE_ROWS; k++)
				if (bh0 + k < bhs) {
					i64 base = ((bh0 + k) * L + l) * D;
					a[k] = ldf(x, dtx, base + i), b[k] = ldf(x, dtx, base + i + half);
				}
#pragma unroll
			for (int k = 0; k < ROPE_ROWS; k++)
				if (bh0 + k < bhs) {
					i64 base = ((bh0 + k) * L + l) * D;
					stf(out, dto, base + i, a[k] * c - b[k] * s);
					stf(out, dto, base + i + half, b[k] * c + a[k] * s);
				}
		}
	}
}

// rope8 is rope for half = D/2 a multiple of 8 (16-byte aligned rows): a
// thread owns 8 consecutive pairs (i..i+7, i+half..i+half+7) of one
// position, 16-byte accesses and angles reduced in double, and turns ROPE8_ROWS (b, h)
// rows at a time (blockIdx.y picks the first): all of their loads are
// issued before any store, so each thread has 2 ROPE8_ROWS 16-byte loads in
// flight (one row at a time left the kernel waiting on memory at a third of
// the bandwidth).
#define ROPE8_ROWS 4
extern "C" __global__ void rope8(void *out, int dto, const void *x, int dtx, const int *pos, int B, int H, int L, int D,
                                 float theta, int inverse, const double *ftab) {
	__shared__ double fr[ROPE_FMAX];
	rope_freqs(fr, theta, D, ftab);
	int half = D / 2, groups = half / 8;
	i64 per = (i64)L * groups, bhs = (i64)B * H;
	for (i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x; e < per; e += (i64)gridDim.x * blockDim.x) {
		int l = (int)(e / groups), i0 = 8 * (int)(e - (i64)l * groups);
		float c[8], s[8];
#pragma unroll
		for (int k = 0; k < 8; k++) {
			rope_sincos((double)pos[l], rope_freq(fr, i0 + k, theta, D), &c[k], &s[k]);
			if (inverse) s[k] = -s[k];
		}
		for (i64 bh0 = (i64)blockIdx.y * ROPE8_ROWS; bh0 < bhs; bh0 += (i64)gridDim.y * ROPE8_ROWS) {
			float a[ROPE8_ROWS][8], b[ROPE8_ROWS][8];
#pragma unroll
			for (int r = 0; r < ROPE8_ROWS; r++)
				if (bh0 + r < bhs) {
					i64 base = ((bh0 + r) * L + l) * D;
					ld8f(x, dtx, base + i0, a[r]);
					ld8f(x, dtx, base + i0 + half, b[r]);
				}
#pragma unroll
			for (int r = 0; r < ROPE8_ROWS; r++)
				if (bh0 + r < bhs) {
					i64 base = ((bh0 + r) * L + l) * D;
					float oa[8], ob[8];
#pragma unroll
					for (int k = 0; k < 8; k++)
						oa[k] = a[r][k] * c[k] - b[r][k] * s[k], ob[k] = b[r][k] * c[k] + a[r][k] * s[k];
					st8f(out, dto, base + i0, oa);
					st8f(out, dto, base + i0 + half, ob);
				}
		}
	}
}

// cross_entropy: one block per row of logits [N, W] (row stride W), whose
// first C columns are the classes; loss = logsumexp(x[:C]) - x_t, dLogits =
// scale (softmax(x[:C]) - onehot) in [0, C) and 0 in the pad columns
// [C, W), which are never read. dLogits may alias logits: each element is
// read before the same thread writes it. A target outside [0, C) that is
// not ignored raises error 4 (target, row, C) and the row gets loss 0 and a
// zero gradient.
//
// One pass for the statistics: each thread keeps a running max and a sum
// of exp(x - max) (f32, rescaled when the max grows: about C/blockDim
// terms, a relative error of some 1e-6), combined over the block in double.
// NaN propagates through the sums. A second pass writes the gradient.
__device__ __forceinline__ void ce_add(float v, float &m, float &s) {
	if (v > m) {
		s = s * expf(m - v) + 1.0f;
		m = v;
	} else {
		float d = v - m; // NaN for a NaN logit, and for -inf (or +inf) met again
		s += d == d ? expf(d) : (v != v ? v : 0.0f);
	}
}

// ce_merge folds the running pair (m2, s2) into (m, s).
__device__ __forceinline__ void ce_merge(float &m, float &s, float m2, float s2) {
	if (s2 == 0.0f && m2 == NEG_INF) return;
	if (m2 > m) {
		s = (s == 0.0f ? 0.0f : s * expf(m - m2)) + s2;
		m = m2;
	} else {
		s += m2 == m ? s2 : s2 * expf(m2 - m);
	}
}

extern "C" __global__ void cross_entropy(float *loss, void *dl, int dtdl, const void *logits, int dtl,
                                         const int *targets, int N, int W, int C, int ignore, float scale, int *err) {
	__shared__ float shm[32];
	__shared__ double shs[33];
	int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
	bool pairs = (W & 1) == 0 && (C & 1) == 0;
	// 16-byte accesses when every row starts 16-byte aligned (logits and
	// dLogits of one dtype class; the pad columns past C give the room).
	bool wide = (W & 7) == 0 && dtl != DT_I32 && (!dl || dtdl != DT_I32);
	for (int r = blockIdx.x; r < N; r += gridDim.x) {
		int t = targets[r];
		i64 base = (i64)r * W;
		bool bad = t != ignore && (t < 0 || t >= C);
		if (t == ignore || bad) {
			if (bad && threadIdx.x == 0) raise_error(err, 4, t, r, C);
			if (threadIdx.x == 0) loss[r] = 0;
			if (dl)
				for (int c = threadIdx.x; c < W; c += blockDim.x) stf(dl, dtdl, base + c, 0.0f);
			continue;
		}
		float m = NEG_INF, s = 0.0f;
		if (wide) {
			// Two running (max, sum) pairs halve the dependent chain.
			float m1 = NEG_INF, s1 = 0.0f;
			for (int c = 8 * threadIdx.x; c < C; c += 8 * blockDim.x) {
				float v[8];
				ld8f(logits, dtl, base + c, v);
#pragma unroll
				for (int k = 0; k < 8; k += 2) {
					if (c + k < C) ce_add(v[k], m, s);
					if (c + k + 1 < C) ce_add(v[k + 1], m1, s1);
				}
			}
			ce_merge(m, s, m1, s1);
		} else if (pairs)
			for (int c = 2 * threadIdx.x; c < C; c += 2 * blockDim.x) {
				pair v = ld2f(logits, dtl, base + c);
				ce_add(v.x, m, s);
				ce_add(v.y, m, s);
			}
		else
			for (int c = threadIdx.x; c < C; c += blockDim.x) ce_add(ldf(logits, dtl, base + c), m, s);
		// Block max, then every thread's sum rescaled to it and summed in
		// double. A thread that saw no class has m = -inf and s = 0.
		float bm = warp_max(m);
		__syncthreads();
		if (lane == 0) shm[wid] = bm;
		__syncthreads();
		bm = NEG_INF;
		for (int k = 0; k < nw; k++) bm = fmaxf(bm, shm[k]);
		double part = s == 0.0f ? 0.0 : (double)s * (m == bm ? 1.0 : exp((double)m - (double)bm));
		double tot = block_sumd(part, shs);
		// An infinite max makes the reference's exp(x - max) NaN for that
		// logit, so its logsumexp (and the loss) is NaN; so is ours.
		double lse = bm == -NEG_INF ? (double)__int_as_float(0x7fc00000) : (double)bm + log(tot);
		if (threadIdx.x == 0) loss[r] = (float)(lse - (double)ldf(logits, dtl, base + t));
		__syncthreads(); // every thread has read x_t before any write
		if (dl) {
			float fl = (float)lse;
			if (wide)
				for (int c = 8 * threadIdx.x; c < W; c += 8 * blockDim.x) {
					float v[8] = {0, 0, 0, 0, 0, 0, 0, 0}, g[8];
					if (c < C) ld8f(logits, dtl, base + c, v);
#pragma unroll
					for (int k = 0; k < 8; k++)
						g[k] = c + k < C ? scale * (expf(v[k] - fl) - (c + k == t ? 1.0f : 0.0f)) : 0.0f;
					st8f(dl, dtdl, base + c, g);
				}
			else if (pairs)
				for (int c = 2 * threadIdx.x; c < W; c += 2 * blockDim.x) {
					float g0 = 0.0f, g1 = 0.0f;
					if (c < C) {
						pair v = ld2f(logits, dtl, base + c);
						g0 = scale * (expf(v.x - fl) - (c == t ? 1.0f : 0.0f));
						g1 = scale * (expf(v.y - fl) - (c + 1 == t ? 1.0f : 0.0f));
					}
					st2f(dl, dtdl, base + c, g0, g1);
				}
			else
				for (int c = threadIdx.x; c < W; c += blockDim.x) {
					float g = 0.0f;
					if (c < C) g = scale * (expf(ldf(logits, dtl, base + c) - fl) - (c == t ? 1.0f : 0.0f));
					stf(dl, dtdl, base + c, g);
				}
		}
	}
}

// sumsq adds sum x^2 of each matrix b (per elements, blockIdx.y = b) into
// acc[b].
extern "C" __global__ void sumsq(double *acc, const void *x, int dt, i64 per) {
	__shared__ double sh[33];
	i64 base = (i64)blockIdx.y * per;
	double s = 0;
	GRID_STRIDE(i, per) {
		double v = ldf(x, dt, base + i);
		s += v * v;
	}
	s = block_sumd(s, sh);
	if (threadIdx.x == 0) atomicAdd(&acc[blockIdx.y], s);
}

extern "C" __global__ void sumsq_final(float *out, const double *acc, int accumulate) {
	if (threadIdx.x == 0 && blockIdx.x == 0) out[0] = (float)((accumulate ? (double)out[0] : 0.0) + acc[0]);
}

// frob_scale: out = x / (sqrt(ss[b]) + eps), b = i / per.
extern "C" __global__ void frob_scale(void *out, int dto, const void *x, int dtx, const double *ss, i64 per, i64 n,
                                      float eps) {
	GRID_STRIDE(i, n) {
		double inv = 1.0 / (sqrt(ss[i / per]) + (double)eps);
		stf(out, dto, i, (float)((double)ldf(x, dtx, i) * inv));
	}
}

// frob_scale8 is frob_scale for per a multiple of 8 (16-byte aligned
// operands): 8 elements a thread, so the matrix index (a 64-bit division)
// and the double square root and reciprocal are formed once per 8 rather
// than per element, which at the FP64 rate of some GPUs was most of the
// kernel's time. The arithmetic per element is frob_scale's, bit for bit.
extern "C" __global__ void frob_scale8(void *out, int dto, const void *x, int dtx, const double *ss, i64 per, i64 n,
                                       float eps) {
	GRID_STRIDE(e, n / 8) {
		i64 i = 8 * e;
		double inv = 1.0 / (sqrt(ss[i / per]) + (double)eps);
		float v[8];
		ld8f(x, dtx, i, v);
#pragma unroll
		for (int k = 0; k < 8; k++) v[k] = (float)((double)v[k] * inv);
		st8f(out, dto, i, v);
	}
}

// cor_rows adds, per block, the sum over its rows of ||vbar - o|| /
// ||vbar|| (0 where vbar = 0) into acc; one warp per row.
extern "C" __global__ void cor_rows(double *acc, const void *o, int dto, const void *vbar, int dtv, i64 rows, int D) {
	__shared__ double sh[33];
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	double tot = 0;
	for (i64 r = (i64)blockIdx.x * nw + w; r < rows; r += (i64)gridDim.x * nw) {
		double num = 0, den = 0;
		for (int c = lane; c < D; c += 32) {
			double v = ldf(vbar, dtv, r * D + c), e = v - (double)ldf(o, dto, r * D + c);
			num += e * e;
			den += v * v;
		}
		num = warp_sumd(num);
		den = warp_sumd(den);
		if (lane == 0 && den > 0) tot += sqrt(num / den);
	}
	tot = block_sumd(tot, sh);
	if (threadIdx.x == 0) atomicAdd(acc, tot);
}

extern "C" __global__ void cor_final(float *out, const double *acc, i64 rows) {
	if (threadIdx.x == 0 && blockIdx.x == 0) out[0] = rows > 0 ? (float)(acc[0] / (double)rows) : 0.0f;
}

// rand_fill writes uniform values in [-scale, scale) from a counter hash
// (benchmarks and tests fill large tensors on the device).
extern "C" __global__ void rand_fill(void *t, int dt, i64 n, unsigned seed, float scale) {
	GRID_STRIDE(i, n) {
		u64 x = (u64)i * 0x9E3779B97F4A7C15ull + ((u64)seed << 32 | seed);
		x ^= x >> 31;
		x *= 0xBF58476D1CE4E5B9ull;
		x ^= x >> 29;
		x *= 0x94D049BB133111EBull;
		x ^= x >> 32;
		float u = (float)(x & 0xffffff) * (1.0f / 16777216.0f);
		stf(t, dt, i, (2.0f * u - 1.0f) * scale);
	}
}

// ---- multi-tensor ops: one launch over a list of tensors (multi.cuh) ----
#include "multi.cuh"

// mt_fill: p[0] (dtype dt[0]) = v.
extern "C" __global__ void mt_fill(const mt_entry *tab, int T, float v) {
	MT_LOOP(tab, T, stf((void *)e.p[0], e.dt[0], i, v););
}

// mt_cast: p[0] (dtype dt[0]) = p[1] (dtype dt[1]), as cast (never I32).
extern "C" __global__ void mt_cast(const mt_entry *tab, int T) {
	MT_LOOP(tab, T, stf((void *)e.p[0], e.dt[0], i, ldf((const void *)e.p[1], e.dt[1], i)););
}

// mt_scale: p[0] *= s (as add_scaled(t, t, t, s, 0)).
extern "C" __global__ void mt_scale(const mt_entry *tab, int T, float s) {
	MT_LOOP(tab, T, {
		float x = ldf((const void *)e.p[0], e.dt[0], i);
		stf((void *)e.p[0], e.dt[0], i, s * x + 0.0f * x);
	});
}

// mt_sumsq adds sum p[0]^2 over every tensor into acc[0] (double).
// mt_cast8, mt_scale8 and mt_adamw8 are mt_cast, mt_scale and mt_adamw
// eight elements a thread (MT_LOOP8), bit for bit the same per element.
extern "C" __global__ void mt_cast8(const mt_entry *tab, int T) {
	MT_LOOP8(tab, T, {
		float v[8];
		ld8f((const void *)e.p[1], e.dt[1], i, v);
		st8f((void *)e.p[0], e.dt[0], i, v);
	});
}
extern "C" __global__ void mt_scale8(const mt_entry *tab, int T, float s) {
	MT_LOOP8(tab, T, {
		float v[8];
		ld8f((const void *)e.p[0], e.dt[0], i, v);
#pragma unroll
		for (int k = 0; k < 8; k++) v[k] = s * v[k] + 0.0f * v[k];
		st8f((void *)e.p[0], e.dt[0], i, v);
	});
}
extern "C" __global__ void mt_sumsq(double *acc, const mt_entry *tab, int T) {
	__shared__ double sh[33];
	double s = 0;
	MT_LOOP(tab, T, {
		double v = ldf((const void *)e.p[0], e.dt[0], i);
		s += v * v;
	});
	s = block_sumd(s, sh);
	if (threadIdx.x == 0) atomicAdd(acc, s);
}

// mt_adamw: the adamw kernel's update on (p[0] dt[0], g p[1] dt[1], m p[2],
// v p[3]) of every tensor, in double, with the same options (the gradient
// scale gs included, so gradient clipping costs no pass of its own).
extern "C" __global__ void mt_adamw(const mt_entry *tab, int T, double decay, double step, double bc2, double b1,
                                    double b2, double eps, float gs) {
	MT_LOOP(tab, T, {
		float *m = (float *)e.p[2], *v = (float *)e.p[3];
		double x = gs * ldf((const void *)e.p[1], e.dt[1], i);
		double mi = b1 * (double)m[i] + (1 - b1) * x;
		double vi = b2 * (double)v[i] + (1 - b2) * x * x;
		m[i] = (float)mi;
		v[i] = (float)vi;
		double pi = (double)ldf((const void *)e.p[0], e.dt[0], i);
		stf((void *)e.p[0], e.dt[0], i, (float)(pi * decay - step * mi / (sqrt(vi) / bc2 + eps)));
	});
}

extern "C" __global__ void mt_adamw8(const mt_entry *tab, int T, double decay, double step, double bc2, double b1,
                                     double b2, double eps, float gs) {
	MT_LOOP8(tab, T, {
		float *m = (float *)e.p[2], *v = (float *)e.p[3];
		float g[8], mv[8], vv[8], pv[8];
		ld8f((const void *)e.p[1], e.dt[1], i, g);
		ld8f(m, DT_F32, i, mv);
		ld8f(v, DT_F32, i, vv);
		ld8f((const void *)e.p[0], e.dt[0], i, pv);
#pragma unroll
		for (int k = 0; k < 8; k++) {
			double x = gs * g[k];
			double mi = b1 * (double)mv[k] + (1 - b1) * x;
			double vi = b2 * (double)vv[k] + (1 - b2) * x * x;
			mv[k] = (float)mi;
			vv[k] = (float)vi;
			pv[k] = (float)((double)pv[k] * decay - step * mi / (sqrt(vi) / bc2 + eps));
		}
		st8f(m, DT_F32, i, mv);
		st8f(v, DT_F32, i, vv);
		st8f((void *)e.p[0], e.dt[0], i, pv);
	});
}

// ---- 16-byte gathers, the one-pass norm backward, the column sum ----

// embedding8 and embedding_bwd8 are embedding and embedding_bwd for rows
// of d = 8 d8 elements (16-byte aligned tensors): one thread eight
// elements, its row found by a 32-bit division (the host keeps n d8 under
// 2^31), where the generic kernels pay a 64-bit division an element.
extern "C" __global__ void embedding8(void *out, int dto, const void *table, int dtt, const int *ids, int n, int d8,
                                      int V, int *err) {
	const int total = n * d8, d = 8 * d8;
	for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
		int r = e / d8, c = 8 * (e - r * d8);
		int id = ids[r];
		float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
		if (id < 0 || id >= V) {
			if (c == 0) raise_error(err, 1, id, r, V);
		} else
			ld8f(table, dtt, (i64)id * d + c, v);
		st8f(out, dto, (i64)r * d + c, v);
	}
}

extern "C" __global__ void embedding_bwd8(float *acc, const int *ids, const void *dout, int dtdo, int n, int d8, int V,
                                          int *err) {
	const int total = n * d8, d = 8 * d8;
	for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
		int r = e / d8, c = 8 * (e - r * d8);
		int id = ids[r];
		if (id < 0 || id >= V) {
			if (c == 0) raise_error(err, 1, id, r, V);
			continue;
		}
		float v[8];
		ld8f(dout, dtdo, (i64)r * d + c, v);
		float *a = acc + (i64)id * d + c;
#if __CUDA_ARCH__ >= 900
		// Two 16-byte reductions in place of eight 4-byte ones.
		asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(a), "f"(v[0]), "f"(v[1]), "f"(v[2]), "f"(v[3])
		             : "memory");
		asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(a + 4), "f"(v[4]), "f"(v[5]), "f"(v[6]),
		             "f"(v[7])
		             : "memory");
#else
#pragma unroll
		for (int k = 0; k < 8; k++) atomicAdd(a + k, v[k]);
#endif
	}
}

// rmsnorm_bwdw8_<CH> is rmsnorm_bwd8 and the dW column sum in one pass for
// rows of N = 8 lpr CH elements: a lane holds its CH groups of eight
// elements of dOut and x in registers between the two steps of its row
// (so each is read once) and adds dOut xhat into per-lane partial sums of
// its columns over every row it visits. At the end the row groups of a
// warp are summed by shuffles, the block's eight warps in shared memory
// (dynamic, 8 N floats) in warp order, and the block writes its partial
// row part[blockIdx.x] [N]; colsum_add then adds the gridDim.x partials
// to dW. Every sum has a fixed order (no atomics), so the result is the
// same run to run.
template <int CH>
__device__ __forceinline__ void rmsnorm_bwdw8_impl(void *dx, int dtdx, float *part, const void *dout, int dtdo,
                                                   const void *x, int dtx, const void *w, int dtw, const float *rstd,
                                                   i64 rows, int N, int lpr, int acc) {
	extern __shared__ float shw[];
	int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, sub = lane & (lpr - 1), rpw = 32 / lpr;
	i64 warp = (i64)blockIdx.x * (blockDim.x >> 5) + wid, nwarps = (i64)gridDim.x * (blockDim.x >> 5);
	float dw[CH][8];
#pragma unroll
	for (int j = 0; j < CH; j++)
#pragma unroll
		for (int k = 0; k < 8; k++) dw[j][k] = 0;
	for (i64 r0 = warp * rpw; r0 < rows; r0 += nwarps * rpw) {
		i64 r = r0 + lane / lpr;
		bool ok = r < rows;
		i64 base = r * N;
		float g[CH][8], xv[CH][8];
		float sc = ok ? rstd[r] : 0.0f, dot = 0;
#pragma unroll
		for (int j = 0; j < CH; j++) {
			int c = 8 * (sub + j * lpr);
			float wv[8];
			if (ok) {
				ld8f(dout, dtdo, base + c, g[j]);
				ld8f(x, dtx, base + c, xv[j]);
			} else
#pragma unroll
				for (int k = 0; k < 8; k++) g[j][k] = 0, xv[j][k] = 0;
			ld8f(w, dtw, c, wv);
#pragma unroll
			for (int k = 0; k < 8; k++) dot += g[j][k] * wv[k] * xv[j][k];
		}
		float kk = group_sum(dot, lpr) * sc * sc / (float)N;
		if (!ok) continue;
#pragma unroll
		for (int j = 0; j < CH; j++) {
			int c = 8 * (sub + j * lpr);
			float wv[8], o[8];
			ld8f(w, dtw, c, wv);
#pragma unroll
			for (int k = 0; k < 8; k++) {
				dw[j][k] += g[j][k] * xv[j][k] * sc;
				o[k] = sc * (g[j][k] * wv[k] - xv[j][k] * kk);
			}
			if (acc) {
				float old[8];
				ld8f(dx, dtdx, base + c, old);
#pragma unroll
				for (int k = 0; k < 8; k++) o[k] += old[k];
			}
			st8f(dx, dtdx, base + c, o);
		}
	}
	// The warp's row groups (lane bits lpr and up) into lanes 0..lpr-1.
	for (int o = lpr; o < 32; o <<= 1)
#pragma unroll
		for (int j = 0; j < CH; j++)
#pragma unroll
			for (int k = 0; k < 8; k++) dw[j][k] += __shfl_xor_sync(0xffffffffu, dw[j][k], o);
	if (lane < lpr)
#pragma unroll
		for (int j = 0; j < CH; j++)
#pragma unroll
			for (int k = 0; k < 8; k++) shw[wid * N + 8 * (sub + j * lpr) + k] = dw[j][k];
	__syncthreads();
	int nw = blockDim.x >> 5;
	for (int c = threadIdx.x; c < N; c += blockDim.x) {
		float s = 0;
		for (int k = 0; k < nw; k++) s += shw[k * N + c];
		part[(i64)blockIdx.x * N + c] = s;
	}
}

#define RMSNORM_BWDW8(CH)                                                                                              \
	extern "C" __global__ void __launch_bounds__(256, 2)                                                               \
	    rmsnorm_bwdw8_##CH(void *dx, int dtdx, float *part, const void *dout, int dtdo, const void *x, int dtx,        \
	                       const void *w, int dtw, const float *rstd, i64 rows, int N, int lpr, int acc) {             \
		rmsnorm_bwdw8_impl<CH>(dx, dtdx, part, dout, dtdo, x, dtx, w, dtw, rstd, rows, N, lpr, acc);               \
	}
RMSNORM_BWDW8(1)
RMSNORM_BWDW8(2)
RMSNORM_BWDW8(3)
RMSNORM_BWDW8(4)

// colsum_add: dst[c] += sum over p < P of part[p][c] (dst of dtype dtd,
// rounded once), blocks of 32 columns x 16 row lanes, each lane summing
// every 16th partial, the lanes then in order: a fixed order, no atomics.
extern "C" __global__ void colsum_add(void *dst, int dtd, const float *part, int P, int N) {
	__shared__ float sh[16][33];
	int c = blockIdx.x * 32 + threadIdx.x;
	float s = 0;
	if (c < N)
		for (int p = threadIdx.y; p < P; p += 16) s += part[(i64)p * N + c];
	sh[threadIdx.y][threadIdx.x] = s;
	__syncthreads();
	if (threadIdx.y == 0 && c < N) {
		for (int y = 1; y < 16; y++) s += sh[y][threadIdx.x];
		stf(dst, dtd, c, ldf(dst, dtd, c) + s);
	}
}
