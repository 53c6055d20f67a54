// Weight-only int8 products on the tensor cores, for decode batches
// (engine/cuda/quant.go, docs/CUDA.md "Int8 decode batches"):
// out[m, n] (+)= sum_k x[m, k] W[n, k] with W[n, k] = q[n, k] s[n, k / G],
// q int8 [N, K], s f32 [N, ceil(K/G)], x bf16 or f16 [M, K], M = 1..64.
// The qgemv_m* kernels (qgemv.cu) do a row's arithmetic per weight in f32,
// which at 8 rows already costs more than the weight's bytes; mma.sync
// does 16 weight rows x 8 x rows x 16 columns an instruction.
//
// Layout: the weight rows are the mma's M side (16 a warp, 64 a block),
// the rows of x its N side (NT tiles of 8: M <= 8 NT), so one A fragment,
// converted once from int8, meets every row of x. A block streams its
// 64 weight rows and the NT x 8 rows of x through QG_ST shared-memory
// stages of QG_BK columns with 16-byte cp.async copies (rows past N or M
// and columns past K zero-filled), with the scale of each row for each
// 64-column half of the stage beside them. Under programmatic dependent
// launch the first stages' weights and scales (constant while a model
// runs) are requested before pdl_wait, x and the rest after it.
//
// The k order: within each 64 columns, lane (g, t) of a warp reads the
// 16 bytes of columns 16t..16t+15 of weight rows g and g+8 (one 16-byte
// shared load each) and the 32 bytes of the same columns of x rows g of
// each n8 tile; mma step s of the four takes columns 16t + 4s .. +3 as its
// k slots 2t, 2t+1, 2t+8, 2t+9. A product is a sum over k, so any
// permutation of the columns that A and B share gives the same result,
// and this one needs no ldmatrix and no byte shuffles.
//
// Scales: int8 values are exact in bf16 and f16, and so are their products
// with x in the mma's f32 accumulation, so each group's sum is formed
// unscaled (p) and added to the result times its f32 scale once the group
// ends (G a multiple of 64, so a 64-column half lies in one group; or
// G >= K, one scale a row). The weight is never rounded: the error is the
// f32 accumulation's and the output's rounding, well inside the bound of
// engine/enginetest/quant.go (which lets a kernel round q s to x's dtype).
//
// Split K: the host cuts K into S slices (blockIdx.x = tile S + slice) when
// the output tiles alone would leave SMs idle. Each block of a split tile
// writes its f32 partial to scratch; the last to arrive (a counter, reset
// by it) adds the S partials in slice order, so the result does not depend
// on which block finishes last: no float atomics, the same bits every run.
//
// NORM (engine.Int8NormLinear, bf16 x): h = x rstd g. As a stage of x
// lands, the block sums the squares of its columns in f32 and replaces x
// by x g rounded to bf16 (the one rounding: u sum |h| |W|, the term the
// composition's rounded h carries); rstd = 1/sqrt(mean(x^2) + eps) scales
// the f32 result at the end, from the slices' sums added in slice order.
// SW (the MLP): a tile is 32 gate rows (warps 0, 1) and the same 32 up rows
// (warps 2, 3), and the epilogue writes silu(gate) * up from f32.
#include "int8.cuh"


#define QG_BN 64           // weight rows a block: 4 warps of 16
#define QG_BK 128          // columns a stage
#define QG_ST 4            // stages in flight
#define QG_XLD (QG_BK + 8) // x row stride in shared memory (elements): conflict-free fragment loads
#define QG_CLD (QG_BN + 4) // row stride of the f32 result tile (floats): conflict-free fragment stores


// qg_layout is one stage of shared memory: the weight tile [64][QG_BK]
// int8 (16-byte units XOR-swizzled by row parity, so that lanes g and g+1
// read different banks), x [8 NT][QG_XLD], the scales [64][2] (one per
// 64-column half) and, NORM, the stage's QG_BK norm weights (up to f32).
// rec is the floats of a split partial: the [8 NT][64] tile and the rows'
// sums of squares. engine/cuda/quant.go mirrors both.
template <int NT, bool NORM> struct qg_layout {
	static constexpr int W = QG_BN * QG_BK, X = 8 * NT * QG_XLD * 2, S = QG_BN * 2 * 4, G = NORM ? QG_BK * 4 : 0;
	static constexpr int stage = W + X + S + G;
	static constexpr int rec = 8 * NT * QG_BN + 8 * NT;
};

// qg_cp4 copies 4 bytes global -> shared through L1 (cp.async.cg takes
// only 16), reading src_bytes of them (0 or 4) and zero-filling the rest.
__device__ __forceinline__ void qg_cp4(void *dst, const void *src, int src_bytes) {
	asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}

// qg_ld4 loads four floats through L2 only: partials other blocks wrote,
// ordered by their fence and the counter.
__device__ __forceinline__ float4 qg_ld4(const float *p) {
	float4 v;
	asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
	return v;
}

// qg_cvt converts the four int8 of w to two pairs of x's type, exactly:
// lo = bytes 0, 1 and hi = bytes 2, 3 (low element first).
//
// bf16 (7 stored significand bits) holds 128 consecutive integers at one
// exponent, not 256, so the sign is split off: with b = -128 s + l
// (s the sign bit, l the low 7 bits), the byte under 0x43 is the bf16
// 128 + l once bit 7 is cleared, and the same byte under 0x43 with only
// bit 7 kept is 128 + 128 s (bit 7 is the exponent's low bit); one bf16x2
// fma subtracts the second from the first, an exact difference. f16 holds
// 1024 + u for any byte u: with u = b + 128 (the XOR), 0x64 over u is
// 1024 + u, minus 1152 is b.
template <bool F16> __device__ __forceinline__ void qg_cvt(u32 w, u32 &lo, u32 &hi) {
	if (F16) {
		const u32 u = w ^ 0x80808080u;
		asm("sub.f16x2 %0, %1, %2;" : "=r"(lo) : "r"(__byte_perm(u, 0x64646464u, 0x4140)), "r"(0x64806480u));
		asm("sub.f16x2 %0, %1, %2;" : "=r"(hi) : "r"(__byte_perm(u, 0x64646464u, 0x4342)), "r"(0x64806480u));
	} else {
		const u32 p0 = __byte_perm(w, 0x43434343u, 0x4140), p1 = __byte_perm(w, 0x43434343u, 0x4342);
		asm("fma.rn.bf16x2 %0, %1, %2, %3;"
		    : "=r"(lo)
		    : "r"(p0 & 0xff7fff7fu), "r"(0x3f803f80u), "r"((p0 & 0x00800080u) | 0xc300c300u));
		asm("fma.rn.bf16x2 %0, %1, %2, %3;"
		    : "=r"(hi)
		    : "r"(p1 & 0xff7fff7fu), "r"(0x3f803f80u), "r"((p1 & 0x00800080u) | 0xc300c300u));
	}
}

// qg_mma is c += A B for a 16x16 A (row) and 16x8 B (col) of x's type.
template <bool F16> __device__ __forceinline__ void qg_mma(float *c, const u32 *a, u32 b0, u32 b1) {
	if (F16)
		asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
		    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
	else
		asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
		    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// qgemm_body is one block: output tile blockIdx.x / S (64 rows of one
// weight, or 32 gate and up rows), K slice blockIdx.x % S. NT n8 tiles of
// x rows; F16: x is f16, else bf16; nw [K] (dtype dtg, 16-byte aligned) is
// the norm weight of NORM.
template <int NT, bool SW, bool NORM, bool F16>
__device__ __forceinline__ void qgemm_body(const i8_set &st, int dto, const void *x, int M, int K, int G, int ng,
                                           int S, int accumulate, float *part, int *cnt, const void *nw, int dtg,
                                           float eps) {
	typedef qg_layout<NT, NORM> L;
	extern __shared__ __align__(16) unsigned char qg_sm[];
	__shared__ float rows[64]; // NORM: the rows' sums of squares, then rstd
	__shared__ int last;
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
	const int tile = blockIdx.x / S, slice = blockIdx.x - tile * S;
	// The tile's weight; fields by constant index (a parameter indexed by a
	// variable is copied to local memory first).
	const int wi = SW ? 0 : (tile >= st.first[1]) + (tile >= st.first[2]) + (tile >= st.first[3]);
	void *out = wi == 0 ? st.out[0] : wi == 1 ? st.out[1] : wi == 2 ? st.out[2] : st.out[3];
	const i8 *q = wi == 0 ? st.q[0] : wi == 1 ? st.q[1] : wi == 2 ? st.q[2] : st.q[3];
	const float *s = wi == 0 ? st.s[0] : wi == 1 ? st.s[1] : wi == 2 ? st.s[2] : st.s[3];
	const int N = wi == 0 ? st.n[0] : wi == 1 ? st.n[1] : wi == 2 ? st.n[2] : st.n[3];
	const int n0 = SW ? tile * 32 : (tile - (wi == 0 ? st.first[0] : wi == 1 ? st.first[1] : wi == 2 ? st.first[2] : st.first[3])) * QG_BN;
	// This thread's copies of a stage: 16-byte unit wu of weight rows
	// wr + 16 i, unit xu of x rows xm + 8 i, and the scale of row tid / 2 for
	// half tid % 2. Tile row r is weight row n0 + r (SW: gate rows n0 + r
	// for r < 32, up rows n0 + r - 32 above).
	const int wu = tid & 7, wr = tid >> 3, xu = tid & 15, xm = tid >> 4;
	const int woff = wr * QG_BK + ((wu ^ ((wr & 1) << 2)) << 4); // row wr + 16 i: + 16 i QG_BK (same parity)
	const i8 *wq = q + (i64)(n0 + wr) * K, *wq1 = SW ? st.q[1] + (i64)(n0 + wr) * K : wq;
	const float *ssrc;
	{
		const int r = tid >> 1, n = n0 + (SW ? (r & 31) : r);
		const float *sb = SW && r >= 32 ? st.s[1] : s;
		ssrc = n < N ? sb + (i64)n * ng : nullptr;
	}
	const int gsz = dtg == DT_F32 ? 4 : 2; // the norm weight's element size (NORM)
	// A stage's weights and scales (constant while a model runs), then its
	// x and norm weights.
	auto load_w = [&](int c, int b) {
		unsigned char *base = qg_sm + b * L::stage;
		const int kb = c * QG_BK;
#pragma unroll
		for (int i = 0; i < 4; i++) {
			const int dr = SW ? 16 * (i & 1) : 16 * i, col = kb + 16 * wu; // weight row n0 + wr + dr
			const bool ok = n0 + wr + dr < N && col < K;
			const i8 *src = (SW && i >= 2 ? wq1 : wq) + (i64)dr * K + col;
			cp_async16(base + woff + 16 * i * QG_BK, ok ? (const void *)src : x, ok ? 16 : 0);
		}
		const int col = kb + 64 * (tid & 1);
		const bool ok = ssrc && col < K;
		qg_cp4((float *)(base + L::W + L::X) + tid, ok ? (const void *)(ssrc + col / G) : x, ok ? 4 : 0);
	};
	auto load_x = [&](int c, int b) {
		unsigned char *base = qg_sm + b * L::stage;
		const int kb = c * QG_BK;
		u16 *sx = (u16 *)(base + L::W);
#pragma unroll
		for (int i = 0; i < NT; i++) {
			const int m = xm + 8 * i, col = kb + 8 * xu;
			const bool ok = m < M && col < K;
			cp_async16(sx + m * QG_XLD + 8 * xu, ok ? (const void *)((const u16 *)x + (i64)m * K + col) : x, ok ? 16 : 0);
		}
		if (NORM && tid < QG_BK * gsz / 16) {
			const int gc = kb + tid * (16 / gsz);
			const bool gok = gc < K;
			cp_async16(base + L::W + L::X + L::S + 16 * tid, gok ? (const void *)((const char *)nw + (i64)gc * gsz) : x,
			           gok ? 16 : 0);
		}
	};

	float acc[NT][4], p[NT][4], ssq[NT];
#pragma unroll
	for (int j = 0; j < NT; j++) {
		ssq[j] = 0.0f;
#pragma unroll
		for (int e = 0; e < 4; e++) acc[j][e] = 0.0f, p[j][e] = 0.0f;
	}
	const int nch = (K + QG_BK - 1) / QG_BK;
	const int c0 = (int)((i64)slice * nch / S), nc = (int)((i64)(slice + 1) * nch / S) - c0;
	// Programmatic dependent launch (common.cuh; a no-op unless the host
	// launches this module with it): the next kernel may start, and the
	// first stages' weights are on their way before waiting for the
	// kernels before this one, whose outputs x, out and the split scratch
	// are. (Commit group 0 thus holds them all: the first wait waits for
	// them together.)
	pdl_trigger();
#pragma unroll
	for (int i = 0; i < QG_ST - 1; i++)
		if (i < nc) load_w(c0 + i, i);
	pdl_wait();
#pragma unroll
	for (int i = 0; i < QG_ST - 1; i++) {
		if (i < nc) load_x(c0 + i, i);
		cp_async_commit();
	}
	for (int i = 0; i < nc; i++) {
		cp_async_wait<QG_ST - 2>();
		__syncthreads(); // stage i landed; every warp is done with stage i - 1, which the next load reuses
		if (i + QG_ST - 1 < nc) {
			load_w(c0 + i + QG_ST - 1, (i + QG_ST - 1) % QG_ST);
			load_x(c0 + i + QG_ST - 1, (i + QG_ST - 1) % QG_ST);
		}
		cp_async_commit();
		unsigned char *base = qg_sm + (i % QG_ST) * L::stage;
		u16 *sx = (u16 *)(base + L::W);
		const float *sc = (const float *)(base + L::W + L::X);
		const int kb = (c0 + i) * QG_BK;
		if (NORM) {
			float gv[8];
			ld8f(base + L::W + L::X + L::S, dtg, 8 * xu, gv);
#pragma unroll
			for (int j = 0; j < NT; j++) {
				uint4 *px = (uint4 *)(sx + (xm + 8 * j) * QG_XLD + 8 * xu);
				const uint4 v = *px;
				u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
				for (int e = 0; e < 4; e++) {
					const float lo = bf2f((u16)(w[e] & 0xffffu)), hi = bf2f((u16)(w[e] >> 16));
					ssq[j] = fmaf(lo, lo, ssq[j]);
					ssq[j] = fmaf(hi, hi, ssq[j]);
					w[e] = pack2(lo * gv[2 * e], hi * gv[2 * e + 1]);
				}
				*px = make_uint4(w[0], w[1], w[2], w[3]);
			}
			__syncthreads();
		}
#pragma unroll
		for (int h = 0; h < 2; h++) {
			const int k = kb + 64 * h;
			if (k >= K) break; // the last stage's zero-filled half (its group ended with the first)
			const int wo = ((4 * h + t) ^ ((g & 1) << 2)) << 4;
			const uint4 wa = *(const uint4 *)(base + (16 * warp + g) * QG_BK + wo);
			const uint4 wb = *(const uint4 *)(base + (16 * warp + g + 8) * QG_BK + wo);
			u32 a[4][4]; // step s: rows g, g + 8 at k slots 2t, 2t+1 (lo) and 2t+8, 2t+9 (hi)
			qg_cvt<F16>(wa.x, a[0][0], a[0][2]);
			qg_cvt<F16>(wb.x, a[0][1], a[0][3]);
			qg_cvt<F16>(wa.y, a[1][0], a[1][2]);
			qg_cvt<F16>(wb.y, a[1][1], a[1][3]);
			qg_cvt<F16>(wa.z, a[2][0], a[2][2]);
			qg_cvt<F16>(wb.z, a[2][1], a[2][3]);
			qg_cvt<F16>(wa.w, a[3][0], a[3][2]);
			qg_cvt<F16>(wb.w, a[3][1], a[3][3]);
#pragma unroll
			for (int j = 0; j < NT; j++) {
				const u16 *xr = sx + (8 * j + g) * QG_XLD + 64 * h + 16 * t;
				const uint4 x0 = *(const uint4 *)xr, x1 = *(const uint4 *)(xr + 8);
				qg_mma<F16>(p[j], a[0], x0.x, x0.y);
				qg_mma<F16>(p[j], a[1], x0.z, x0.w);
				qg_mma<F16>(p[j], a[2], x1.x, x1.y);
				qg_mma<F16>(p[j], a[3], x1.z, x1.w);
			}
			// The group ends here (or the data, or the slice): add its sum
			// times the scale of rows g and g + 8.
			if (k + 64 >= K || (k + 64) % G == 0 || (i == nc - 1 && h == 1)) {
				const float sa = sc[2 * (16 * warp + g) + h], sb = sc[2 * (16 * warp + g + 8) + h];
#pragma unroll
				for (int j = 0; j < NT; j++) {
					acc[j][0] = fmaf(sa, p[j][0], acc[j][0]);
					acc[j][1] = fmaf(sa, p[j][1], acc[j][1]);
					acc[j][2] = fmaf(sb, p[j][2], acc[j][2]);
					acc[j][3] = fmaf(sb, p[j][3], acc[j][3]);
					p[j][0] = p[j][1] = p[j][2] = p[j][3] = 0.0f;
				}
			}
		}
	}
	cp_async_wait<0>();
	__syncthreads(); // the stages are free: the result tile cs [8 NT][QG_CLD] takes their place
	float *cs = (float *)qg_sm;
#pragma unroll
	for (int j = 0; j < NT; j++) {
		const int m = 8 * j + 2 * t, r = 16 * warp + g;
		cs[m * QG_CLD + r] = acc[j][0];
		cs[(m + 1) * QG_CLD + r] = acc[j][1];
		cs[m * QG_CLD + r + 8] = acc[j][2];
		cs[(m + 1) * QG_CLD + r + 8] = acc[j][3];
	}
	if (NORM) {
#pragma unroll
		for (int j = 0; j < NT; j++) {
			float v = ssq[j]; // row xm + 8 j, over the 16 lanes of this half-warp
			for (int o = 1; o < 16; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
			if (xu == 0) rows[xm + 8 * j] = v;
		}
	}
	__syncthreads();
	if (S > 1) {
		float *rec = part + ((i64)tile * S + slice) * L::rec;
		for (int e = tid; e < M * (QG_BN / 4); e += 128) {
			const int m = e / (QG_BN / 4), c = (e % (QG_BN / 4)) * 4;
			*(float4 *)(rec + m * QG_BN + c) = *(const float4 *)(cs + m * QG_CLD + c);
		}
		if (NORM && tid < M) rec[8 * NT * QG_BN + tid] = rows[tid];
		__threadfence();
		__syncthreads();
		if (tid == 0) last = atomicAdd(cnt + tile, 1) == S - 1;
		__syncthreads();
		if (!last) return;
		__threadfence();
		// The last block adds the partials in slice order, four loads in flight.
		const float *rs = part + (i64)tile * S * L::rec;
		for (int e = tid; e < M * (QG_BN / 4); e += 128) {
			const int m = e / (QG_BN / 4), c = (e % (QG_BN / 4)) * 4;
			float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
			for (int s0 = 0; s0 < S; s0 += 4) {
				float4 u[4];
#pragma unroll
				for (int z = 0; z < 4; z++)
					if (s0 + z < S) u[z] = qg_ld4(rs + (i64)(s0 + z) * L::rec + m * QG_BN + c);
#pragma unroll
				for (int z = 0; z < 4; z++)
					if (s0 + z < S) v.x += u[z].x, v.y += u[z].y, v.z += u[z].z, v.w += u[z].w;
			}
			*(float4 *)(cs + m * QG_CLD + c) = v;
		}
		if (NORM && tid < M) {
			float v = 0.0f;
			for (int z = 0; z < S; z++) v += ld_cg(rs + (i64)z * L::rec + 8 * NT * QG_BN + tid);
			rows[tid] = v;
		}
		if (tid == 0) cnt[tile] = 0; // for the next launch
		__syncthreads();
	}
	if (NORM) {
		if (tid < M) rows[tid] = 1.0f / sqrtf(rows[tid] / (float)K + eps);
		__syncthreads();
	}
	if (SW) {
		for (int e = tid; e < M * 32; e += 128) {
			const int m = e >> 5, r = e & 31, n = n0 + r;
			if (n >= N) continue;
			float gt = cs[m * QG_CLD + r], up = cs[m * QG_CLD + 32 + r];
			if (NORM) gt *= rows[m], up *= rows[m];
			stf(out, dto, (i64)m * N + n, gt / (1.0f + expf(-gt)) * up);
		}
	} else {
		for (int e = tid; e < M * QG_BN; e += 128) {
			const int m = e / QG_BN, r = e % QG_BN, n = n0 + r;
			if (n >= N) continue;
			float v = cs[m * QG_CLD + r];
			if (NORM) v *= rows[m];
			const i64 o = (i64)m * N + n;
			if (accumulate) v += ldf(out, dto, o);
			stf(out, dto, o, v);
		}
	}
}

// The kernels, by n8 tiles of x rows (t1 .. t8: M <= 8 t): qgemm_{bf16,f16}
// (outs[i] (+)= x W_i^T, accumulate with one weight), qgemm_swiglu_* (the
// MLP's activation), and for bf16 x the RMSNorm-folded qgemm_norm_* and
// qgemm_norm_swiglu_*. Every one takes the same arguments (nw, dtg and eps
// unused without the norm; part and cnt unused at S = 1).
#define QGEMM_ARGS                                                                                                     \
	i8_set st, int dto, const void *x, int M, int K, int G, int ng, int S, int accumulate, float *part, int *cnt, \
	    const void *nw, int dtg, float eps
#define QGEMM_PASS st, dto, x, M, K, G, ng, S, accumulate, part, cnt, nw, dtg, eps
#define QGEMM(NT)                                                                                                      \
	extern "C" __global__ void __launch_bounds__(128) qgemm_bf16_t##NT(QGEMM_ARGS) {                                   \
		qgemm_body<NT, false, false, false>(QGEMM_PASS);                                                               \
	}                                                                                                                  \
	extern "C" __global__ void __launch_bounds__(128) qgemm_f16_t##NT(QGEMM_ARGS) {                                    \
		qgemm_body<NT, false, false, true>(QGEMM_PASS);                                                                \
	}                                                                                                                  \
	extern "C" __global__ void __launch_bounds__(128) qgemm_swiglu_bf16_t##NT(QGEMM_ARGS) {                            \
		qgemm_body<NT, true, false, false>(QGEMM_PASS);                                                                \
	}                                                                                                                  \
	extern "C" __global__ void __launch_bounds__(128) qgemm_swiglu_f16_t##NT(QGEMM_ARGS) {                             \
		qgemm_body<NT, true, false, true>(QGEMM_PASS);                                                                 \
	}                                                                                                                  \
	extern "C" __global__ void __launch_bounds__(128) qgemm_norm_bf16_t##NT(QGEMM_ARGS) {                              \
		qgemm_body<NT, false, true, false>(QGEMM_PASS);                                                                \
	}                                                                                                                  \
	extern "C" __global__ void __launch_bounds__(128) qgemm_norm_swiglu_bf16_t##NT(QGEMM_ARGS) {                       \
		qgemm_body<NT, true, true, false>(QGEMM_PASS);                                                                 \
	}
QGEMM(1)
QGEMM(2)
QGEMM(3)
QGEMM(4)
QGEMM(5)
QGEMM(6)
QGEMM(7)
QGEMM(8)
