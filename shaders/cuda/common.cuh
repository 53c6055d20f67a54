// Shared helpers of the kernels: dtype codes and conversions (no CUDA
// headers: NVRTC compiles these with its built-ins only), reductions, the
// device error word, and the tensor-core primitives (mma.sync, ldmatrix,
// cp.async) used by the attention kernels.
#pragma once

typedef unsigned short u16;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

// dtype codes, as engine/cuda passes them.
#define DT_F32 0
#define DT_BF16 1
#define DT_F16 2
#define DT_I32 3

#define NEG_INF (__int_as_float(0xff800000))
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

__device__ __forceinline__ float bf2f(u16 h) { return __uint_as_float(((u32)h) << 16); }

// f2bf rounds to the nearest bfloat16, ties to even, keeping NaN a NaN.
__device__ __forceinline__ u16 f2bf(float f) {
	u32 b = __float_as_uint(f);
	if ((b & 0x7fffffffu) > 0x7f800000u) return (u16)((b >> 16) | 0x40u);
	b += 0x7fffu + ((b >> 16) & 1u);
	return (u16)(b >> 16);
}

__device__ __forceinline__ float h2f(u16 h) {
	float f;
	asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
	return f;
}

__device__ __forceinline__ u16 f2h(float f) {
	u16 h;
	asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
	return h;
}

// ldf loads element i of a tensor of dtype dt as float.
__device__ __forceinline__ float ldf(const void *p, int dt, i64 i) {
	switch (dt) {
	case DT_F32: return ((const float *)p)[i];
	case DT_BF16: return bf2f(((const u16 *)p)[i]);
	case DT_F16: return h2f(((const u16 *)p)[i]);
	default: return (float)((const int *)p)[i];
	}
}

// stf stores v (rounded to nearest even; truncated toward zero for I32).
__device__ __forceinline__ void stf(void *p, int dt, i64 i, float v) {
	switch (dt) {
	case DT_F32: ((float *)p)[i] = v; break;
	case DT_BF16: ((u16 *)p)[i] = f2bf(v); break;
	case DT_F16: ((u16 *)p)[i] = f2h(v); break;
	default: ((int *)p)[i] = (int)v; break;
	}
}

// pair is two consecutive elements as floats.
struct pair {
	float x, y;
};

// ld2f loads elements i and i+1 (i even, the tensor's base aligned to its
// element size times two) as one 4-byte (8 for f32) access.
__device__ __forceinline__ pair ld2f(const void *p, int dt, i64 i) {
	pair r;
	switch (dt) {
	case DT_F32: {
		u64 v = ((const u64 *)p)[i >> 1];
		r.x = __uint_as_float((u32)v), r.y = __uint_as_float((u32)(v >> 32));
		break;
	}
	case DT_BF16: {
		u32 v = ((const u32 *)p)[i >> 1];
		r.x = bf2f((u16)(v & 0xffffu)), r.y = bf2f((u16)(v >> 16));
		break;
	}
	case DT_F16: {
		u32 v = ((const u32 *)p)[i >> 1];
		r.x = h2f((u16)(v & 0xffffu)), r.y = h2f((u16)(v >> 16));
		break;
	}
	default: r.x = (float)((const int *)p)[i], r.y = (float)((const int *)p)[i + 1];
	}
	return r;
}

// st2f stores two rounded values at elements i and i+1 (i even) at once.
__device__ __forceinline__ void st2f(void *p, int dt, i64 i, float a, float b) {
	switch (dt) {
	case DT_F32: ((u64 *)p)[i >> 1] = (u64)__float_as_uint(a) | ((u64)__float_as_uint(b) << 32); break;
	case DT_BF16: ((u32 *)p)[i >> 1] = (u32)f2bf(a) | ((u32)f2bf(b) << 16); break;
	case DT_F16: ((u32 *)p)[i >> 1] = (u32)f2h(a) | ((u32)f2h(b) << 16); break;
	default:
		((int *)p)[i] = (int)a;
		((int *)p)[i + 1] = (int)b;
		break;
	}
}

// cvt8h widens the 8 16-bit (bf16 or f16) elements of a 16-byte word, as
// ld8h loads them; kernels that load ahead keep the raw words (4
// registers, not 8) until they need the values.
__device__ __forceinline__ void cvt8h(uint4 a, int dt, float *v) {
	u32 w[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
	for (int k = 0; k < 4; k++) {
		u16 lo = (u16)(w[k] & 0xffffu), hi = (u16)(w[k] >> 16);
		v[2 * k] = dt == DT_BF16 ? bf2f(lo) : h2f(lo);
		v[2 * k + 1] = dt == DT_BF16 ? bf2f(hi) : h2f(hi);
	}
}

// ld8h loads elements i..i+7 of a 16-bit (bf16 or f16) tensor as one
// 16-byte access; kernels that know their tensors are 16-bit call it
// directly and carry no f32 path (and none of its registers).
__device__ __forceinline__ void ld8h(const void *p, int dt, i64 i, float *v) { cvt8h(((const uint4 *)p)[i >> 3], dt, v); }

// ld8f loads elements i..i+7 (i a multiple of 8, the tensor's base 16-byte
// aligned) as 16-byte accesses: one for 16-bit dtypes, two for f32. The
// wide accesses put four to eight times the bytes of a 2-byte load in
// flight per instruction, which streaming kernels need to reach the memory
// bandwidth.
__device__ __forceinline__ void ld8f(const void *p, int dt, i64 i, float *v) {
	if (dt == DT_F32) {
		const uint4 *q = (const uint4 *)p + (i >> 2);
		uint4 a = q[0], b = q[1];
		v[0] = __uint_as_float(a.x), v[1] = __uint_as_float(a.y), v[2] = __uint_as_float(a.z), v[3] = __uint_as_float(a.w);
		v[4] = __uint_as_float(b.x), v[5] = __uint_as_float(b.y), v[6] = __uint_as_float(b.z), v[7] = __uint_as_float(b.w);
		return;
	}
	ld8h(p, dt, i, v);
}

// st8h stores v[0..7] rounded into a 16-bit tensor at elements i..i+7
// (one 16-byte access; the counterpart of ld8h).
__device__ __forceinline__ void st8h(void *p, int dt, i64 i, const float *v) {
	u32 w[4];
#pragma unroll
	for (int k = 0; k < 4; k++) {
		u16 lo = dt == DT_BF16 ? f2bf(v[2 * k]) : f2h(v[2 * k]);
		u16 hi = dt == DT_BF16 ? f2bf(v[2 * k + 1]) : f2h(v[2 * k + 1]);
		w[k] = (u32)lo | ((u32)hi << 16);
	}
	((uint4 *)p)[i >> 3] = make_uint4(w[0], w[1], w[2], w[3]);
}

// st8f stores v[0..7] rounded at elements i..i+7 (aligned as for ld8f).
__device__ __forceinline__ void st8f(void *p, int dt, i64 i, const float *v) {
	if (dt == DT_F32) {
		uint4 *q = (uint4 *)p + (i >> 2);
		q[0] = make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]), __float_as_uint(v[3]));
		q[1] = make_uint4(__float_as_uint(v[4]), __float_as_uint(v[5]), __float_as_uint(v[6]), __float_as_uint(v[7]));
		return;
	}
	st8h(p, dt, i, v);
}

// Device error word: [code, a, b, c], the first error wins. Codes:
// 1 embedding id out of range (id, position, V); 2 decode lens out of range
// (b, lens[b], Cap); 3 singular LLA row (row, position, D); 4 cross entropy
// target out of range (target, row, number of classes C).
__device__ __forceinline__ void raise_error(int *err, int code, int a, int b, int c) {
	if (atomicCAS(err, 0, code) == 0) {
		err[1] = a;
		err[2] = b;
		err[3] = c;
	}
}

// Programmatic dependent launch (sm_90; no-ops elsewhere). A kernel that
// the host launches with programmatic stream serialization (PDL, see
// engine/cuda/pdl.go) may start while the kernel before it in the stream
// is still running: pdl_trigger lets the next kernel start, and pdl_wait
// waits until every kernel before this one has finished and its writes
// are visible. A PDL kernel calls pdl_wait before its first access to
// memory another kernel may write; launched without PDL both return at
// once. l2_prefetch (a hint: the L2 is coherent, so warming it before
// pdl_wait cannot make a later load stale) asks for bytes (a multiple of
// 16, p 16-byte aligned) to be brought into the L2.
__device__ __forceinline__ void pdl_trigger() {
#if __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void l2_prefetch(const void *p, u32 bytes) {
#if __CUDA_ARCH__ >= 900
	asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#endif
}

__device__ __forceinline__ float warp_sum(float v) {
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}
// rms_rstd is RMSNorm's 1/sqrt(mean(x^2) + eps) from the f32 sum of
// squares ss of a row of n elements.
__device__ __forceinline__ float rms_rstd(float ss, int n, float eps) { return 1.0f / sqrtf(ss / (float)n + eps); }
__device__ __forceinline__ double warp_sumd(double v) {
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}
__device__ __forceinline__ float warp_max(float v) {
	for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

// block_sumd sums v over the block (blockDim.x a multiple of 32, at most
// 1024); every thread gets the result. sh must hold 33 doubles.
__device__ __forceinline__ double block_sumd(double v, double *sh) {
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	v = warp_sumd(v);
	__syncthreads();
	if (lane == 0) sh[w] = v;
	__syncthreads();
	if (w == 0) {
		double x = lane < nw ? sh[lane] : 0.0;
		x = warp_sumd(x);
		if (lane == 0) sh[32] = x;
	}
	__syncthreads();
	return sh[32];
}

// split_store ends a matrix-vector product whose output columns are
// split over KS warps of a block (8 / KS columns a block, warp w on column
// n = block's first + w / KS, part q = w mod KS): each warp reduces its M
// partial sums, the parts meet in shared memory and the warp of part 0
// adds them in part order and writes (or adds to) out[m, n]. Every warp
// of the block must call it (it synchronises the block).
template <int M, int KS>
__device__ __forceinline__ void split_store(const float *acc, void *out, int dto, int N, int n, int q, int accumulate) {
	__shared__ float part[8][M];
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
	for (int m = 0; m < M; m++) {
		float v = warp_sum(acc[m]);
		if (lane == 0) part[warp][m] = v;
	}
	__syncthreads();
	if (q == 0 && lane < M && n < N) {
		float v = part[warp][lane];
#pragma unroll
		for (int j = 1; j < KS; j++) v += part[warp + j][lane];
		i64 o = (i64)lane * N + n;
		if (accumulate) v += ldf(out, dto, o);
		stf(out, dto, o, v);
	}
}

__device__ __forceinline__ float block_maxf(float v, float *sh) {
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	v = warp_max(v);
	__syncthreads();
	if (lane == 0) sh[w] = v;
	__syncthreads();
	if (w == 0) {
		float x = lane < nw ? sh[lane] : NEG_INF;
		x = warp_max(x);
		if (lane == 0) sh[32] = x;
	}
	__syncthreads();
	return sh[32];
}

// ---- tensor-core primitives (sm_80+) ----

__device__ __forceinline__ u32 smem_addr(const void *p) {
	u32 a;
	asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
	return a;
}

// pack2 packs two floats as bf16 (lo in the low half).
__device__ __forceinline__ u32 pack2(float lo, float hi) {
	u32 r;
	asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
	return r;
}

// mma16816 is D = A B + D for a 16x16 bf16 A (row), 16x8 bf16 B (col) and a
// 16x8 f32 accumulator.
__device__ __forceinline__ void mma16816(float *c, const u32 *a, const u32 *b) {
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
	             : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void ldsm4(u32 *r, const void *p) {
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
	             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
	             : "r"(smem_addr(p)));
}

__device__ __forceinline__ void ldsm4t(u32 *r, const void *p) {
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
	             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
	             : "r"(smem_addr(p)));
}

// quad_max2 and quad_sum reduce over the 4 lanes that share an accumulator
// row (lanes 4g..4g+3).
__device__ __forceinline__ void quad_max2(float *m) {
#pragma unroll
	for (int r = 0; r < 2; r++) {
		m[r] = fmaxf(m[r], __shfl_xor_sync(0xffffffffu, m[r], 1));
		m[r] = fmaxf(m[r], __shfl_xor_sync(0xffffffffu, m[r], 2));
	}
}
__device__ __forceinline__ float quad_sum(float v) {
	v += __shfl_xor_sync(0xffffffffu, v, 1);
	v += __shfl_xor_sync(0xffffffffu, v, 2);
	return v;
}

// row_keys gives rows i0 and i0 + 8 the keys [lo[r], hi[r]) they see
// under the mask of docs/MATH.md section 1 (off = Lk - Lq).
__device__ __forceinline__ void row_keys(int i0, int off, int Lk, int causal, int window, int *hi, int *lo) {
#pragma unroll
	for (int r = 0; r < 2; r++) {
		const int i = i0 + 8 * r;
		hi[r] = causal ? min(Lk, i + off + 1) : Lk;
		lo[r] = (causal && window > 0) ? i + off + 1 - window : 0;
	}
}

// ColSpan is what the dk/dv kernels' block of BK keys [j0, j0 + BK) sees
// of the queries under the mask of docs/MATH.md section 1: nq tiles of BQ rows
// from q0 (a multiple of BQ), per query head; off = Lk - Lq.
struct ColSpan {
	int off, q0, nq;
};
__device__ __forceinline__ ColSpan col_span(int j0, int BK, int BQ, int Lq, int Lk, int causal, int window) {
	ColSpan c;
	c.off = Lk - Lq;
	int iLo = 0, iHi = Lq;
	if (causal) {
		iLo = max(0, j0 - c.off);
		if (window > 0) iHi = min(Lq, min(j0 + BK, Lk) - c.off - 1 + window);
	}
	c.q0 = iLo / BQ * BQ;
	c.nq = iHi > iLo ? (iHi - c.q0 + BQ - 1) / BQ : 0;
	return c;
}

// fwd_store finishes one thread's two rows i0, i0 + 8 of a streaming
// forward (docs/MATH.md section 3): reduces d1, d2 over the row's quad, writes
// o = vbar (1 + tbar) - O2/d1 and vbar = O1/d1 (bf16), and the log-sum-exp
// and tbar (f32) of row i at index so + i. o1 and o2 are the accumulators
// in mma.sync's C layout, element 4 n + e of 8-column tile n (D/2 each).
// RED: d1, d2 are this thread's part of the row sums (else the whole).
template <int D, bool PX, bool RED = true>
__device__ __forceinline__ void fwd_store(const float *o1, const float *o2, float *d1, float *d2, const float *mr,
                                          int i0, int tq, int Lq, u16 *O, u16 *Vb, float *LSE, float *TB, i64 qo,
                                          i64 so) {
#pragma unroll
	for (int r = 0; r < 2; r++) {
		if (RED) {
			d1[r] = quad_sum(d1[r]);
			if (PX) d2[r] = quad_sum(d2[r]);
		}
		int i = i0 + 8 * r;
		if (i >= Lq) continue;
		// Every row sees a key: d1 NaN (a NaN or +inf score) or 0 (every
		// score -inf) makes the row NaN, never 0.
		float inv = 1.0f / d1[r], tb = PX ? d2[r] * inv : 0.0f;
		u16 *orow = O + qo + (i64)i * D;
#pragma unroll
		for (int n = 0; n < D / 8; n++) {
			int c = n * 8 + tq * 2;
			float v0 = o1[n * 4 + 2 * r] * inv, v1 = o1[n * 4 + 2 * r + 1] * inv;
			float y0 = v0, y1 = v1;
			if (PX) {
				y0 = v0 * (1 + tb) - o2[n * 4 + 2 * r] * inv;
				y1 = v1 * (1 + tb) - o2[n * 4 + 2 * r + 1] * inv;
			}
			*(u32 *)(orow + c) = pack2(y0, y1);
			if (Vb) *(u32 *)(Vb + qo + (i64)i * D + c) = pack2(v0, v1);
		}
		if (tq == 0) {
			if (LSE) LSE[so + i] = d1[r] == 0 ? __int_as_float(0x7fc00000) : (mr[r] + log2f(d1[r])) * LN2;
			if (TB) TB[so + i] = tb;
		}
	}
}

// store_rows writes f times a thread's two accumulator rows row0 and
// row0 + 8 (those below n) of a D-column tile in mma.sync's C layout
// (element 4 j + 2 r + e: row half r, column 8 j + 2 tq + e) as bf16 to
// the rows of dst (D elements apart).
template <int D>
__device__ __forceinline__ void store_rows(u16 *dst, const float *acc, float f, int row0, int n, int tq) {
#pragma unroll
	for (int r = 0; r < 2; r++) {
		const int i = row0 + 8 * r;
		if (i >= n) continue;
#pragma unroll
		for (int j = 0; j < D / 8; j++)
			*(u32 *)(dst + (i64)i * D + j * 8 + tq * 2) = pack2(f * acc[j * 4 + 2 * r], f * acc[j * 4 + 2 * r + 1]);
	}
}

// cp_async16 copies 16 bytes global -> shared, reading src_bytes of them
// (0 or 16) and zero-filling the rest.
__device__ __forceinline__ void cp_async16(void *dst, const void *src, int src_bytes) {
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N)); }

// ld_cg loads through L2 only (data other blocks wrote, ordered by a
// fence and an atomic). Volatile keeps it after the fence; a batch of them
// issued before their uses is still in flight together.
__device__ __forceinline__ float ld_cg(const float *p) {
	float v;
	asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p));
	return v;
}

// RoPE's angles. The frequencies f_i = theta^(-2i/D) (i < D/2) are formed
// in double once per block into shared memory by rope_freqs, which every
// thread of the block calls before its loop: a double pow is hundreds of
// FP64 instructions, and at the H200's FP64 rate eight of them per thread
// made the 16-byte RoPE kernels compute-bound at 3-4x their memory time.
// Above ROPE_FMAX pairs nothing is stored and rope_freq computes f_i itself.
// A kernel given tab (the host's f_i in double, engine.RoPEFrequencies,
// uploaded once per theta and D) copies it instead: the pow's latency
// then stays off the start of every block.
#define ROPE_FMAX 256
__device__ __forceinline__ void rope_freqs(double *f, float theta, int D, const double *tab = nullptr) {
	int half = D >> 1;
	if (half <= ROPE_FMAX)
		for (int i = threadIdx.x; i < half; i += blockDim.x) f[i] = tab ? tab[i] : pow((double)theta, -2.0 * i / D);
	__syncthreads();
}

__device__ __forceinline__ double rope_freq(const double *f, int i, float theta, int D) {
	return (D >> 1) <= ROPE_FMAX ? f[i] : pow((double)theta, -2.0 * i / D);
}

// rope_sincos returns cos and sin of the angle p f: formed in double and
// reduced modulo 2 pi there (two-constant Cody-Waite), then turned into
// half-turns x = r / pi in [-1, 1] and sincospif of the f32 x, so any
// position keeps f32 accuracy at f32 cost. sincospif rather than sincosf:
// its argument reduction is exact, so it carries no large-argument
// (Payne-Hanek) path, which sincosf inlines with a local-memory array at
// every call; eight such copies a thread made the 16-byte RoPE kernels run
// at a quarter of the memory bandwidth. The f32 rounding of x moves the
// angle by at most pi 2^-25, as the rounding of r did.
__device__ __forceinline__ void rope_sincos(double p, double f, float *c, float *s) {
	double a = p * f;
	double k = rint(a * 0.15915494309189535);
	double r = fma(-k, 6.283185307179586, a);
	r = fma(-k, 2.4492935982947064e-16, r);
	sincospif((float)(r * 0.3183098861837907), s, c);
}
