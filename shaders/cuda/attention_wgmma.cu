// Parallax (and softmax) attention on Hopper's warpgroup tensor-core
// instructions (wgmma, sm_90a): bf16 operands, f32 accumulators (spec
// sections 3 and 8). Compiled only for sm_90a; elsewhere this module is
// empty and the host uses attention_mma.cu.
//
// Why wgmma: a warpgroup's 64x64 S tile is one instruction chain that reads
// its B operand (K, or V) straight from shared memory, so a K/V byte read
// from shared memory feeds 64 query rows instead of mma.sync's 16, and the
// Parallax forward's doubled accumulators (O1 and O2) are spread over 128
// threads. Shared tiles use the 128-byte swizzle: a tile of R rows and D
// columns is stored as D/64 panels of R rows x 128 bytes, the 16-byte chunk
// c of row r at chunk c ^ (r % 8), every panel 1024-byte aligned.
#include "common.cuh"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#include "wgmma.cuh"

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wg_wait() {
	asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// async_fence orders this thread's generic-proxy shared memory writes (and
// the cp.async writes it waited for) before later wgmma reads.
__device__ __forceinline__ void async_fence() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// sw_desc is the wgmma descriptor of a 128-byte-swizzled operand at shared
// address addr: lbo is the byte distance between 64-column panels (used by
// MN-major operands wider than 64), 8-row groups are 1024 bytes apart.
__device__ __forceinline__ u64 sw_desc(u32 addr, u32 lbo) {
	return (u64)((addr & 0x3ffff) >> 4) | ((u64)(lbo >> 4) << 16) | ((u64)(1024 >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void cp_async16s(u32 dst, const void *src, int src_bytes) {
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes));
}

// load_sw copies rows [r0, r0 + R) of a [n, D] bf16 matrix into a swizzled
// tile at shared address tile (rows past n are zero-filled).
template <int D>
__device__ __forceinline__ void load_sw(u32 tile, const u16 *src, int r0, int R, int n, int tid, int nt) {
	constexpr int CPR = D / 8;
	for (int c = tid; c < R * CPR; c += nt) {
		int rr = c / CPR, ch = c % CPR, gr = r0 + rr;
		bool ok = gr >= 0 && gr < n;
		u32 dst = tile + (ch >> 3) * R * 128 + rr * 128 + (((ch & 7) ^ (rr & 7)) << 4);
		cp_async16s(dst, src + (i64)(ok ? gr : 0) * D + ch * 8, ok ? 16 : 0);
	}
}

// S (64 x N) = A B^T over D = 16 k-steps, A and B K-major swizzled tiles.
template <int N, int D>
__device__ __forceinline__ void mma_qk(float *s, u32 a, int arows, u32 b) {
#pragma unroll
	for (int kk = 0; kk < D / 16; kk++) {
		u32 pa = a + (kk >> 2) * arows * 128 + (kk & 3) * 32, pb = b + (kk >> 2) * N * 128 + (kk & 3) * 32;
		if (N == 64) wgmma_ss_n64_t00(s, sw_desc(pa, 16), sw_desc(pb, 16), kk > 0);
		else if (N == 128) wgmma_ss_n128_t00(s, sw_desc(pa, 16), sw_desc(pb, 16), kk > 0);
		else wgmma_ss_n32_t00(s, sw_desc(pa, 16), sw_desc(pb, 16), kk > 0);
	}
}

// O (64 x D) += P V over the BN keys of a V tile (MN-major B), P in
// registers as the A fragments of BN/16 k-steps.
template <int D, int BN>
__device__ __forceinline__ void mma_pv(float *o, const u32 (*p)[4], u32 v) {
#pragma unroll
	for (int k2 = 0; k2 < BN / 16; k2++) {
		u64 dv = sw_desc(v + k2 * 16 * 128, BN * 128);
		if (D == 128) wgmma_rs_n128_t1(o, p[k2], dv, 1);
		else wgmma_rs_n64_t1(o, p[k2], dv, 1);
	}
}

// ---------------------------------------------------------------------
// Forward: one block of two warpgroups per 128 query rows of one
// (batch, head), each warpgroup 64 rows; K/V tiles of BN keys
// double-buffered with cp.async by all 256 threads. Per tile a warpgroup
// issues S = Q K^T and T = R K^T (D/16 wgmma each), waits, does the
// online softmax in registers (same statistics as attention_mma.cu), and
// issues O1 += P1 V and O2 += P2 V with P1, P2 = P1 * T rounded to bf16 as
// register A operands. The two warpgroups overlap each other's softmax
// with their matrix products.
// ---------------------------------------------------------------------
template <int D, int BN, bool PX>
__device__ __forceinline__ void wfwd_impl(const u16 *Q, const u16 *R, const u16 *K, const u16 *V, u16 *O, u16 *Vb,
                                          float *LSE, float *TB, int Hq, int Hkv, int Lq, int Lk, float scale,
                                          int causal, int window) {
	constexpr int BM = 128, QB = BM * D * 2, KB = BN * D * 2;
	extern __shared__ __align__(1024) unsigned char smem[];
	const u32 base = (smem_addr(smem) + 1023) & ~1023u;
	const u32 aQ = base, aR = aQ + QB, aK = aR + (PX ? QB : 0), aV = aK + 2 * KB;
	const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, tq = lane & 3;
	const int m0 = (gridDim.x - 1 - blockIdx.x) * BM; // long causal blocks first
	const int h = blockIdx.y, b = blockIdx.z, hk = h / (Hq / Hkv);
	const i64 qo = ((i64)b * Hq + h) * Lq * D, ko = ((i64)b * Hkv + hk) * Lk * D;
	const int off = Lk - Lq, rowEnd = min(m0 + BM, Lq);
	const int hiB = causal ? min(Lk, rowEnd + off) : Lk;
	const int loB = (causal && window > 0) ? max(0, m0 + off + 1 - window) : 0;
	const int t0 = loB / BN * BN;
	const int ntiles = hiB > loB ? (hiB - t0 + BN - 1) / BN : 0;
	// this warpgroup's rows [w0, w0 + 64): the keys any of them sees
	const int w0 = m0 + wg * 64, wEnd = min(w0 + 64, Lq);
	const int wHi = causal ? min(Lk, wEnd + off) : Lk;
	const int wLo = (causal && window > 0) ? max(0, w0 + off + 1 - window) : 0;
	const int firstHi = causal ? min(Lk, w0 + off + 1) : Lk;
	const int lastLo = (causal && window > 0) ? max(0, wEnd + off - window) : 0;

	load_sw<D>(aQ, Q + qo, m0, BM, Lq, tid, 256);
	if (PX) load_sw<D>(aR, R + qo, m0, BM, Lq, tid, 256);
	if (ntiles > 0) {
		load_sw<D>(aK, K + ko, t0, BN, Lk, tid, 256);
		load_sw<D>(aV, V + ko, t0, BN, Lk, tid, 256);
	}
	cp_async_commit();

	float o1[D / 2], o2[PX ? D / 2 : 1];
#pragma unroll
	for (int i = 0; i < D / 2; i++) {
		o1[i] = 0;
		if (PX) o2[i] = 0;
	}
	float mr[2] = {NEG_INF, NEG_INF}, d1[2] = {0, 0}, d2[2] = {0, 0};
	const float sl2 = scale * LOG2E;
	const int i0 = w0 + warp * 16 + g;
	int hiR[2], loR[2];
#pragma unroll
	for (int r = 0; r < 2; r++) {
		int i = i0 + 8 * r;
		hiR[r] = causal ? min(Lk, i + off + 1) : Lk;
		loR[r] = (causal && window > 0) ? i + off + 1 - window : 0;
	}
	const u32 wQ = aQ + wg * 64 * 128, wR = aR + wg * 64 * 128;

	for (int t = 0; t < ntiles; t++) {
		if (t + 1 < ntiles) {
			u32 nb = ((t + 1) & 1) * KB;
			load_sw<D>(aK + nb, K + ko, t0 + (t + 1) * BN, BN, Lk, tid, 256);
			load_sw<D>(aV + nb, V + ko, t0 + (t + 1) * BN, BN, Lk, tid, 256);
		}
		cp_async_commit();
		cp_async_wait<1>();
		async_fence();
		__syncthreads();
		const int j0 = t0 + t * BN;
		if (j0 < wHi && j0 + BN > wLo) { // uniform per warpgroup
			const u32 ks = aK + (t & 1) * KB, vs = aV + (t & 1) * KB;
			float s[BN / 2], tt[PX ? BN / 2 : 1];
			wg_fence();
			mma_qk<BN, D>(s, wQ, BM, ks);
			if (PX) mma_qk<BN, D>(tt, wR, BM, ks);
			wg_commit();
			wg_wait<0>();
			const bool edge = j0 + BN > firstHi || j0 < lastLo;
			float mx[2] = {NEG_INF, NEG_INF};
#pragma unroll
			for (int i = 0; i < BN / 2; i++) {
				int r = (i >> 1) & 1, j = j0 + (i >> 2) * 8 + tq * 2 + (i & 1);
				float x = s[i] * sl2;
				if (edge && (j >= hiR[r] || j < loR[r])) x = NEG_INF;
				s[i] = x;
				mx[r] = fmaxf(mx[r], x);
			}
			quad_max2(mx);
			float alpha[2], mu[2];
#pragma unroll
			for (int r = 0; r < 2; r++) {
				float mn = fmaxf(mr[r], mx[r]);
				mu[r] = mn == NEG_INF ? 0.0f : mn;
				alpha[r] = exp2f(mr[r] - mu[r]);
				mr[r] = mn;
				d1[r] *= alpha[r];
				if (PX) d2[r] *= alpha[r];
			}
			u32 ap[BN / 16][4], at[PX ? BN / 16 : 1][4];
#pragma unroll
			for (int i = 0; i < BN / 2; i += 2) {
				int r = (i >> 1) & 1;
				float p0 = exp2f(s[i] - mu[r]), p1 = exp2f(s[i + 1] - mu[r]);
				d1[r] += p0 + p1;
				// A fragment of k-step i/8: regs {row g, row g+8} x {cols 0-7, 8-15}
				int k2 = i >> 3, q = ((i >> 1) & 1) | (((i >> 2) & 1) << 1);
				ap[k2][q] = pack2(p0, p1);
				if (PX) {
					float q0 = p0 * tt[i], q1 = p1 * tt[i + 1];
					d2[r] += q0 + q1;
					at[k2][q] = pack2(q0, q1);
				}
			}
#pragma unroll
			for (int i = 0; i < D / 2; i++) {
				float a = alpha[(i >> 1) & 1];
				o1[i] *= a;
				if (PX) o2[i] *= a;
			}
			wg_fence();
			mma_pv<D, BN>(o1, ap, vs);
			if (PX) mma_pv<D, BN>(o2, at, vs);
			wg_commit();
			wg_wait<0>();
		}
		__syncthreads();
	}
	cp_async_wait<0>();
#pragma unroll
	for (int r = 0; r < 2; r++) {
		d1[r] = quad_sum(d1[r]);
		if (PX) d2[r] = quad_sum(d2[r]);
		int i = i0 + 8 * r;
		if (i >= Lq) continue;
		float inv = d1[r] > 0 ? 1.0f / d1[r] : 0.0f, tb = PX ? d2[r] * inv : 0.0f;
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
			i64 si = ((i64)b * Hq + h) * Lq + i;
			if (LSE) LSE[si] = d1[r] > 0 ? (mr[r] + log2f(d1[r])) * LN2 : NEG_INF;
			if (TB) TB[si] = tb;
		}
	}
}

#define WFWD(D, BN)                                                                                                     \
	extern "C" __global__ void __launch_bounds__(256, 1) attn_fwd_wgmma_d##D##_px(                                      \
	    const u16 *Q, const u16 *R, const u16 *K, const u16 *V, u16 *O, u16 *Vb, float *LSE, float *TB, int Hq, int Hkv, \
	    int Lq, int Lk, float scale, int causal, int window) {                                                          \
		wfwd_impl<D, BN, true>(Q, R, K, V, O, Vb, LSE, TB, Hq, Hkv, Lq, Lk, scale, causal, window);                  \
	}                                                                                                                   \
	extern "C" __global__ void __launch_bounds__(256, 1) attn_fwd_wgmma_d##D##_sm(                                      \
	    const u16 *Q, const u16 *R, const u16 *K, const u16 *V, u16 *O, u16 *Vb, float *LSE, float *TB, int Hq, int Hkv, \
	    int Lq, int Lk, float scale, int causal, int window) {                                                          \
		wfwd_impl<D, BN, false>(Q, R, K, V, O, Vb, LSE, TB, Hq, Hkv, Lq, Lk, scale, causal, window);                 \
	}
WFWD(64, 64)
WFWD(128, 64)

#endif // __CUDA_ARCH_FEAT_SM90_ALL
