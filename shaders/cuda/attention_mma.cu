// Parallax (and softmax) attention on the tensor cores: bf16 operands,
// f32 accumulators, mma.sync.m16n8k16 with ldmatrix fragments and cp.async
// tiles (docs/MATH.md sections 3, 4 and 8).
//
// Notation inside a warp: each warp owns 16 rows of an m16 tile; lane l
// holds accumulator elements of rows g = l/4 and g + 8, columns 2 (l%4) and
// 2 (l%4) + 1 of every 8-column n-tile. Shared-memory rows are padded to
// D + 8 elements so ldmatrix reads of 8 consecutive rows hit distinct banks.
//
// Stacking (the paper's joint QK/RK instruction): every K fragment loaded
// from shared memory feeds two MMAs, one with the Q rows and one with the
// R rows as the A operand; every V fragment feeds P1 and P2 = P1 * (R K^T).
// In the decode kernel the stacking is literal: rows 0-7 of the single m16
// A tile are the queries of a GQA group and rows 8-15 their probes, so one
// MMA yields both S = Q K^T and T = R K^T, and a thread holds s and t of the
// same (query, key) pair, and one MMA against V yields O1 and O2.
#include "common.cuh"

// Fragment addressing (element offsets into a row-major tile with row
// stride SD):
// A operand 16x16 at (r0, c0):  row r0 + (l & 15), col c0 + (l >> 4) * 8.
// B operand from rows-as-n (K for Q K^T): two n-tiles of 8 rows at n0,
//   row n0 + (l & 7) + ((l >> 4) << 3), col k0 + ((l >> 3) & 1) * 8.
// B operand from rows-as-k (V for P V), transposed: keys k0.., cols n0..,
//   row k0 + (l & 7) + ((l >> 3) & 1) * 8, col n0 + (l >> 4) * 8.
__device__ __forceinline__ int a_off(int lane, int SD) { return (lane & 15) * SD + (lane >> 4) * 8; }
__device__ __forceinline__ int bn_off(int lane, int SD) { return ((lane & 7) + ((lane >> 4) << 3)) * SD + ((lane >> 3) & 1) * 8; }
__device__ __forceinline__ int bk_off(int lane, int SD) { return ((lane & 7) + ((lane >> 3) & 1) * 8) * SD + (lane >> 4) * 8; }

// load_rows copies rows [r0, r0 + R) of a [n, D] bf16 matrix into a tile
// (rows past n are zero-filled) with 16-byte cp.async, nt threads.
template <int D>
__device__ __forceinline__ void load_rows(u16 *tile, const u16 *src, int r0, int R, int n, int tid, int nt) {
	constexpr int SD = D + 8, CPR = D / 8;
	for (int c = tid; c < R * CPR; c += nt) {
		int rr = c / CPR, cc = (c % CPR) * 8;
		int gr = r0 + rr;
		bool ok = gr >= 0 && gr < n;
		cp_async16(tile + rr * SD + cc, src + (i64)(ok ? gr : 0) * D + cc, ok ? 16 : 0);
	}
}

// ---------------------------------------------------------------------
// Forward: one block of 4 warps per 64 query rows of one (batch, head);
// K/V tiles of BN keys double-buffered.
// ---------------------------------------------------------------------
template <int D, int BN, bool PX>
__device__ __forceinline__ void fwd_impl(const u16 *Q, const u16 *R, const u16 *K, const u16 *V, u16 *O, u16 *Vb,
                                         float *LSE, float *TB, int Hq, int Hkv, int Lq, int Lk, float scale, int causal,
                                         int window) {
	constexpr int BM = 64, SD = D + 8;
	extern __shared__ __align__(16) unsigned char smem[];
	u16 *sQ = (u16 *)smem, *sR = sQ + BM * SD, *sK = sR + (PX ? BM * SD : 0), *sV = sK + 2 * BN * SD;
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3;
	const int m0 = (gridDim.x - 1 - blockIdx.x) * BM; // long causal blocks first
	const int h = blockIdx.y, b = blockIdx.z, hk = h / (Hq / Hkv);
	const i64 qo = ((i64)b * Hq + h) * Lq * D, ko = ((i64)b * Hkv + hk) * Lk * D;
	const int off = Lk - Lq, rowEnd = min(m0 + BM, Lq);
	const int hiB = causal ? min(Lk, rowEnd + off) : Lk;
	const int loB = (causal && window > 0) ? max(0, m0 + off + 1 - window) : 0;
	const int firstHi = causal ? min(Lk, m0 + off + 1) : Lk;
	const int lastLo = (causal && window > 0) ? max(0, rowEnd + off - window) : 0;
	const int t0 = loB / BN * BN;
	const int ntiles = hiB > loB ? (hiB - t0 + BN - 1) / BN : 0;

	load_rows<D>(sQ, Q + qo, m0, BM, Lq, tid, 128);
	if (PX) load_rows<D>(sR, R + qo, m0, BM, Lq, tid, 128);
	if (ntiles > 0) {
		load_rows<D>(sK, K + ko, t0, BN, Lk, tid, 128);
		load_rows<D>(sV, V + ko, t0, BN, Lk, tid, 128);
	}
	cp_async_commit();

	float o1[D / 8][4], o2[PX ? D / 8 : 1][4];
#pragma unroll
	for (int n = 0; n < D / 8; n++)
#pragma unroll
		for (int e = 0; e < 4; e++) {
			o1[n][e] = 0;
			if (PX) o2[n][e] = 0;
		}
	float mr[2] = {NEG_INF, NEG_INF}, d1[2] = {0, 0}, d2[2] = {0, 0};
	const float sl2 = scale * LOG2E;
	const int i0 = m0 + warp * 16 + g;
	int hiR[2], loR[2];
	row_keys(i0, off, Lk, causal, window, hiR, loR);

	for (int t = 0; t < ntiles; t++) {
		if (t + 1 < ntiles) {
			int buf = (t + 1) & 1;
			load_rows<D>(sK + buf * BN * SD, K + ko, t0 + (t + 1) * BN, BN, Lk, tid, 128);
			load_rows<D>(sV + buf * BN * SD, V + ko, t0 + (t + 1) * BN, BN, Lk, tid, 128);
		}
		cp_async_commit();
		cp_async_wait<1>();
		__syncthreads();
		const u16 *ks = sK + (t & 1) * BN * SD, *vs = sV + (t & 1) * BN * SD;
		float s[BN / 8][4], tt[PX ? BN / 8 : 1][4];
#pragma unroll
		for (int n = 0; n < BN / 8; n++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				s[n][e] = 0;
				if (PX) tt[n][e] = 0;
			}
#pragma unroll
		for (int kk = 0; kk < D / 16; kk++) {
			u32 aq[4], ar[4];
			ldsm4(aq, sQ + warp * 16 * SD + kk * 16 + a_off(lane, SD));
			if (PX) ldsm4(ar, sR + warp * 16 * SD + kk * 16 + a_off(lane, SD));
#pragma unroll
			for (int n2 = 0; n2 < BN / 16; n2++) {
				u32 bk[4];
				ldsm4(bk, ks + n2 * 16 * SD + kk * 16 + bn_off(lane, SD));
				mma16816(s[2 * n2], aq, bk);
				mma16816(s[2 * n2 + 1], aq, bk + 2);
				if (PX) {
					mma16816(tt[2 * n2], ar, bk);
					mma16816(tt[2 * n2 + 1], ar, bk + 2);
				}
			}
		}
		const int j0 = t0 + t * BN;
		const bool edge = j0 + BN > firstHi || j0 < lastLo;
		float mx[2] = {NEG_INF, NEG_INF};
#pragma unroll
		for (int n = 0; n < BN / 8; n++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				int r = e >> 1, j = j0 + n * 8 + tq * 2 + (e & 1);
				float x = s[n][e] * sl2;
				if (edge && (j >= hiR[r] || j < loR[r])) x = NEG_INF;
				s[n][e] = x;
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
#pragma unroll
		for (int n = 0; n < BN / 8; n++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				int r = e >> 1;
				float p = exp2f(s[n][e] - mu[r]);
				s[n][e] = p;
				d1[r] += p;
				if (PX) {
					float pt = p * tt[n][e];
					tt[n][e] = pt;
					d2[r] += pt;
				}
			}
#pragma unroll
		for (int n = 0; n < D / 8; n++) {
			o1[n][0] *= alpha[0];
			o1[n][1] *= alpha[0];
			o1[n][2] *= alpha[1];
			o1[n][3] *= alpha[1];
			if (PX) {
				o2[n][0] *= alpha[0];
				o2[n][1] *= alpha[0];
				o2[n][2] *= alpha[1];
				o2[n][3] *= alpha[1];
			}
		}
#pragma unroll
		for (int k2 = 0; k2 < BN / 16; k2++) {
			u32 ap[4] = {pack2(s[2 * k2][0], s[2 * k2][1]), pack2(s[2 * k2][2], s[2 * k2][3]),
			             pack2(s[2 * k2 + 1][0], s[2 * k2 + 1][1]), pack2(s[2 * k2 + 1][2], s[2 * k2 + 1][3])};
			u32 at[4];
			if (PX) {
				at[0] = pack2(tt[2 * k2][0], tt[2 * k2][1]);
				at[1] = pack2(tt[2 * k2][2], tt[2 * k2][3]);
				at[2] = pack2(tt[2 * k2 + 1][0], tt[2 * k2 + 1][1]);
				at[3] = pack2(tt[2 * k2 + 1][2], tt[2 * k2 + 1][3]);
			}
#pragma unroll
			for (int n2 = 0; n2 < D / 16; n2++) {
				u32 bv[4];
				ldsm4t(bv, vs + k2 * 16 * SD + n2 * 16 + bk_off(lane, SD));
				mma16816(o1[2 * n2], ap, bv);
				mma16816(o1[2 * n2 + 1], ap, bv + 2);
				if (PX) {
					mma16816(o2[2 * n2], at, bv);
					mma16816(o2[2 * n2 + 1], at, bv + 2);
				}
			}
		}
		__syncthreads();
	}
	cp_async_wait<0>();
	fwd_store<D, PX>(&o1[0][0], &o2[0][0], d1, d2, mr, i0, tq, Lq, O, Vb, LSE, TB, qo, ((i64)b * Hq + h) * Lq);
}

#define FWD(D, BN) FWDN(D, BN, )
#define FWDN(D, BN, SUF)                                                                                                \
	extern "C" __global__ void __launch_bounds__(128) attn_fwd_mma_d##D##SUF##_px(                                             \
	    const u16 *Q, const u16 *R, const u16 *K, const u16 *V, u16 *O, u16 *Vb, float *LSE, float *TB, int Hq, int Hkv, \
	    int Lq, int Lk, float scale, int causal, int window) {                                                          \
		fwd_impl<D, BN, true>(Q, R, K, V, O, Vb, LSE, TB, Hq, Hkv, Lq, Lk, scale, causal, window);                   \
	}                                                                                                                   \
	extern "C" __global__ void __launch_bounds__(128) attn_fwd_mma_d##D##SUF##_sm(                                             \
	    const u16 *Q, const u16 *R, const u16 *K, const u16 *V, u16 *O, u16 *Vb, float *LSE, float *TB, int Hq, int Hkv, \
	    int Lq, int Lk, float scale, int causal, int window) {                                                          \
		fwd_impl<D, BN, false>(Q, R, K, V, O, Vb, LSE, TB, Hq, Hkv, Lq, Lk, scale, causal, window);                  \
	}
FWD(32, 64)
FWD(64, 64)
FWD(128, 32)
FWDN(128, 64, _bn64) // the default for D = 128; PARALLAX_CUDA_FWD_BN=32 selects the one above

// ---------------------------------------------------------------------
// Backward, row-parallel: dq = scale sum dS k, dr = sum dT k. One block of
// 4 warps per 64 query rows; S = Q K^T, T = R K^T and A = dO V^T are
// recomputed per K/V tile; [dS; dT] are then multiplied by the same K
// fragments.
// ---------------------------------------------------------------------
template <int D, int BN, bool PX>
__device__ __forceinline__ void dq_impl(const u16 *Q, const u16 *R, const u16 *K, const u16 *V, const u16 *G_,
                                        const float *LSE, const float *T, const float *BV, const float *TB, u16 *DQ,
                                        u16 *DR, int Hq, int Hkv, int Lq, int Lk, float scale, int causal, int window) {
	constexpr int BM = 64, SD = D + 8;
	extern __shared__ __align__(16) unsigned char smem[];
	u16 *sQ = (u16 *)smem, *sG = sQ + BM * SD, *sR = sG + BM * SD, *sK = sR + (PX ? BM * SD : 0), *sV = sK + 2 * BN * SD;
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3;
	const int m0 = (gridDim.x - 1 - blockIdx.x) * BM;
	const int h = blockIdx.y, b = blockIdx.z, hk = h / (Hq / Hkv);
	const i64 qo = ((i64)b * Hq + h) * Lq * D, ko = ((i64)b * Hkv + hk) * Lk * D, so = ((i64)b * Hq + h) * Lq;
	const int off = Lk - Lq, rowEnd = min(m0 + BM, Lq);
	const int hiB = causal ? min(Lk, rowEnd + off) : Lk;
	const int loB = (causal && window > 0) ? max(0, m0 + off + 1 - window) : 0;
	const int firstHi = causal ? min(Lk, m0 + off + 1) : Lk;
	const int lastLo = (causal && window > 0) ? max(0, rowEnd + off - window) : 0;
	const int t0 = loB / BN * BN;
	const int ntiles = hiB > loB ? (hiB - t0 + BN - 1) / BN : 0;

	load_rows<D>(sQ, Q + qo, m0, BM, Lq, tid, 128);
	load_rows<D>(sG, G_ + qo, m0, BM, Lq, tid, 128);
	if (PX) load_rows<D>(sR, R + qo, m0, BM, Lq, tid, 128);
	if (ntiles > 0) {
		load_rows<D>(sK, K + ko, t0, BN, Lk, tid, 128);
		load_rows<D>(sV, V + ko, t0, BN, Lk, tid, 128);
	}
	cp_async_commit();

	const float sl2 = scale * LOG2E;
	const int i0 = m0 + warp * 16 + g;
	int hiR[2], loR[2];
	row_keys(i0, off, Lk, causal, window, hiR, loR);
	float lse2[2], Ti[2], Bi[2], tbi[2];
#pragma unroll
	for (int r = 0; r < 2; r++) {
		int i = i0 + 8 * r;
		bool ok = i < Lq;
		lse2[r] = ok ? LSE[so + i] * LOG2E : 0.0f;
		Ti[r] = ok ? T[so + i] : 0.0f;
		Bi[r] = ok && PX ? BV[so + i] : 0.0f;
		tbi[r] = ok && PX ? TB[so + i] : 0.0f;
	}
	float aq[D / 8][4], ar[PX ? D / 8 : 1][4];
#pragma unroll
	for (int n = 0; n < D / 8; n++)
#pragma unroll
		for (int e = 0; e < 4; e++) {
			aq[n][e] = 0;
			if (PX) ar[n][e] = 0;
		}

	for (int t = 0; t < ntiles; t++) {
		if (t + 1 < ntiles) {
			int buf = (t + 1) & 1;
			load_rows<D>(sK + buf * BN * SD, K + ko, t0 + (t + 1) * BN, BN, Lk, tid, 128);
			load_rows<D>(sV + buf * BN * SD, V + ko, t0 + (t + 1) * BN, BN, Lk, tid, 128);
		}
		cp_async_commit();
		cp_async_wait<1>();
		__syncthreads();
		const u16 *ks = sK + (t & 1) * BN * SD, *vs = sV + (t & 1) * BN * SD;
		float s[BN / 8][4], tt[PX ? BN / 8 : 1][4], aa[BN / 8][4];
#pragma unroll
		for (int n = 0; n < BN / 8; n++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				s[n][e] = 0;
				aa[n][e] = 0;
				if (PX) tt[n][e] = 0;
			}
#pragma unroll
		for (int kk = 0; kk < D / 16; kk++) {
			u32 fq[4], fg[4], fr[4];
			ldsm4(fq, sQ + warp * 16 * SD + kk * 16 + a_off(lane, SD));
			ldsm4(fg, sG + warp * 16 * SD + kk * 16 + a_off(lane, SD));
			if (PX) ldsm4(fr, sR + warp * 16 * SD + kk * 16 + a_off(lane, SD));
#pragma unroll
			for (int n2 = 0; n2 < BN / 16; n2++) {
				u32 bk[4], bv[4];
				ldsm4(bk, ks + n2 * 16 * SD + kk * 16 + bn_off(lane, SD));
				ldsm4(bv, vs + n2 * 16 * SD + kk * 16 + bn_off(lane, SD));
				mma16816(s[2 * n2], fq, bk);
				mma16816(s[2 * n2 + 1], fq, bk + 2);
				mma16816(aa[2 * n2], fg, bv);
				mma16816(aa[2 * n2 + 1], fg, bv + 2);
				if (PX) {
					mma16816(tt[2 * n2], fr, bk);
					mma16816(tt[2 * n2 + 1], fr, bk + 2);
				}
			}
		}
		const int j0 = t0 + t * BN;
		const bool edge = j0 + BN > firstHi || j0 < lastLo;
#pragma unroll
		for (int n = 0; n < BN / 8; n++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				int r = e >> 1, j = j0 + n * 8 + tq * 2 + (e & 1);
				bool ok = !(edge && (j >= hiR[r] || j < loR[r])) && i0 + 8 * r < Lq;
				float p = ok ? exp2f(s[n][e] * sl2 - lse2[r]) : 0.0f;
				float a = aa[n][e];
				if (PX) {
					float ab = a - Bi[r];
					s[n][e] = p * (a - Ti[r] + (tbi[r] - tt[n][e]) * ab);
					tt[n][e] = -p * ab;
				} else {
					s[n][e] = p * (a - Ti[r]);
				}
			}
#pragma unroll
		for (int k2 = 0; k2 < BN / 16; k2++) {
			u32 as[4] = {pack2(s[2 * k2][0], s[2 * k2][1]), pack2(s[2 * k2][2], s[2 * k2][3]),
			             pack2(s[2 * k2 + 1][0], s[2 * k2 + 1][1]), pack2(s[2 * k2 + 1][2], s[2 * k2 + 1][3])};
			u32 at[4];
			if (PX) {
				at[0] = pack2(tt[2 * k2][0], tt[2 * k2][1]);
				at[1] = pack2(tt[2 * k2][2], tt[2 * k2][3]);
				at[2] = pack2(tt[2 * k2 + 1][0], tt[2 * k2 + 1][1]);
				at[3] = pack2(tt[2 * k2 + 1][2], tt[2 * k2 + 1][3]);
			}
#pragma unroll
			for (int n2 = 0; n2 < D / 16; n2++) {
				u32 bk[4];
				ldsm4t(bk, ks + k2 * 16 * SD + n2 * 16 + bk_off(lane, SD));
				mma16816(aq[2 * n2], as, bk);
				mma16816(aq[2 * n2 + 1], as, bk + 2);
				if (PX) {
					mma16816(ar[2 * n2], at, bk);
					mma16816(ar[2 * n2 + 1], at, bk + 2);
				}
			}
		}
		__syncthreads();
	}
	cp_async_wait<0>();
	store_rows<D>(DQ + qo, aq[0], scale, i0, Lq, tq);
	if (PX) store_rows<D>(DR + qo, ar[0], 1.0f, i0, Lq, tq);
}

// ---------------------------------------------------------------------
// Backward, column-parallel: dk = sum (scale dS q + dT r), dv = sum p (1 +
// tbar - t) g over the rows of all G heads of the group. One block of 4
// warps per 64 keys; each warp owns 16 keys and computes the transposed
// tiles S^T = K Q^T, T^T = K R^T, A^T = V dO^T for BQ queries at a time.
// ---------------------------------------------------------------------
template <int D, int BQ, bool PX>
__device__ __forceinline__ void dkv_impl(const u16 *Q, const u16 *R, const u16 *K, const u16 *V, const u16 *G_,
                                         const float *LSE, const float *T, const float *BV, const float *TB, u16 *DK,
                                         u16 *DV, int Hq, int Hkv, int Lq, int Lk, float scale, int causal, int window) {
	constexpr int BK = 64, SD = D + 8;
	extern __shared__ __align__(16) unsigned char smem[];
	u16 *sK = (u16 *)smem, *sV = sK + BK * SD, *sQ = sV + BK * SD, *sG = sQ + 2 * BQ * SD,
	    *sR = sG + 2 * BQ * SD;
	float *st = (float *)(sR + (PX ? 2 * BQ * SD : 0)); // [2][4][BQ]: lse*log2e, T, Bv, tbar
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3;
	const int j0 = blockIdx.x * BK, hk = blockIdx.y, b = blockIdx.z, G = Hq / Hkv;
	const i64 ko = ((i64)b * Hkv + hk) * Lk * D;
	const ColSpan cs = col_span(j0, BK, BQ, Lq, Lk, causal, window);
	const int off = cs.off, q0 = cs.q0, nq = cs.nq;
	const int ntiles = nq * G;

	load_rows<D>(sK, K + ko, j0, BK, Lk, tid, 128);
	load_rows<D>(sV, V + ko, j0, BK, Lk, tid, 128);
	auto load_tile = [&](int t, int buf) {
		int gg = t / nq, qt = t % nq;
		int h = hk * G + gg, r0 = q0 + qt * BQ;
		i64 qo = ((i64)b * Hq + h) * Lq * D, so = ((i64)b * Hq + h) * Lq;
		load_rows<D>(sQ + buf * BQ * SD, Q + qo, r0, BQ, Lq, tid, 128);
		load_rows<D>(sG + buf * BQ * SD, G_ + qo, r0, BQ, Lq, tid, 128);
		if (PX) load_rows<D>(sR + buf * BQ * SD, R + qo, r0, BQ, Lq, tid, 128);
		float *sb = st + buf * 4 * BQ;
		for (int c = tid; c < BQ; c += 128) {
			int i = r0 + c;
			bool ok = i < Lq;
			float l = ok ? LSE[so + i] : NEG_INF;
			sb[c] = l == NEG_INF ? __int_as_float(0x7f800000) : l * LOG2E; // no key: p = 0
			sb[BQ + c] = ok ? T[so + i] : 0.0f;
			sb[2 * BQ + c] = ok && PX ? BV[so + i] : 0.0f;
			sb[3 * BQ + c] = ok && PX ? TB[so + i] : 0.0f;
		}
	};
	if (ntiles > 0) load_tile(0, 0);
	cp_async_commit();

	const float sl2 = scale * LOG2E;
	float ak[D / 8][4], av[D / 8][4];
#pragma unroll
	for (int n = 0; n < D / 8; n++)
#pragma unroll
		for (int e = 0; e < 4; e++) ak[n][e] = av[n][e] = 0;
	const int jr0 = j0 + warp * 16 + g; // keys of this thread's rows: jr0, jr0 + 8

	for (int t = 0; t < ntiles; t++) {
		if (t + 1 < ntiles) load_tile(t + 1, (t + 1) & 1);
		cp_async_commit();
		cp_async_wait<1>();
		__syncthreads();
		const int buf = t & 1, r0 = q0 + (t % nq) * BQ;
		const u16 *qs = sQ + buf * BQ * SD, *gs = sG + buf * BQ * SD, *rs = sR + buf * BQ * SD;
		const float *sb = st + buf * 4 * BQ;
		float s[BQ / 8][4], tt[PX ? BQ / 8 : 1][4], aa[BQ / 8][4];
#pragma unroll
		for (int n = 0; n < BQ / 8; n++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				s[n][e] = 0;
				aa[n][e] = 0;
				if (PX) tt[n][e] = 0;
			}
#pragma unroll
		for (int kk = 0; kk < D / 16; kk++) {
			u32 fk[4], fv[4];
			ldsm4(fk, sK + warp * 16 * SD + kk * 16 + a_off(lane, SD));
			ldsm4(fv, sV + warp * 16 * SD + kk * 16 + a_off(lane, SD));
#pragma unroll
			for (int n2 = 0; n2 < BQ / 16; n2++) {
				u32 bq[4], bg[4];
				ldsm4(bq, qs + n2 * 16 * SD + kk * 16 + bn_off(lane, SD));
				ldsm4(bg, gs + n2 * 16 * SD + kk * 16 + bn_off(lane, SD));
				mma16816(s[2 * n2], fk, bq);
				mma16816(s[2 * n2 + 1], fk, bq + 2);
				mma16816(aa[2 * n2], fv, bg);
				mma16816(aa[2 * n2 + 1], fv, bg + 2);
				if (PX) {
					u32 br[4];
					ldsm4(br, rs + n2 * 16 * SD + kk * 16 + bn_off(lane, SD));
					mma16816(tt[2 * n2], fk, br);
					mma16816(tt[2 * n2 + 1], fk, br + 2);
				}
			}
		}
		// Elementwise: rows are keys j, columns queries i.
		float pe[BQ / 8][4];
#pragma unroll
		for (int n = 0; n < BQ / 8; n++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				int c = n * 8 + tq * 2 + (e & 1), i = r0 + c, j = jr0 + 8 * (e >> 1);
				bool ok = i < Lq && j < Lk;
				if (causal) ok = ok && j <= i + off && (window <= 0 || j > i + off - window);
				float p = ok ? exp2f(s[n][e] * sl2 - sb[c]) : 0.0f;
				float a = aa[n][e];
				if (PX) {
					float ab = a - sb[2 * BQ + c], tb = sb[3 * BQ + c], tv = tt[n][e];
					s[n][e] = scale * p * (a - sb[BQ + c] + (tb - tv) * ab);
					tt[n][e] = -p * ab;
					pe[n][e] = p * (1 + tb - tv);
				} else {
					s[n][e] = scale * p * (a - sb[BQ + c]);
					pe[n][e] = p;
				}
			}
#pragma unroll
		for (int k2 = 0; k2 < BQ / 16; k2++) {
			u32 as[4] = {pack2(s[2 * k2][0], s[2 * k2][1]), pack2(s[2 * k2][2], s[2 * k2][3]),
			             pack2(s[2 * k2 + 1][0], s[2 * k2 + 1][1]), pack2(s[2 * k2 + 1][2], s[2 * k2 + 1][3])};
			u32 ap[4] = {pack2(pe[2 * k2][0], pe[2 * k2][1]), pack2(pe[2 * k2][2], pe[2 * k2][3]),
			             pack2(pe[2 * k2 + 1][0], pe[2 * k2 + 1][1]), pack2(pe[2 * k2 + 1][2], pe[2 * k2 + 1][3])};
			u32 at[4];
			if (PX) {
				at[0] = pack2(tt[2 * k2][0], tt[2 * k2][1]);
				at[1] = pack2(tt[2 * k2][2], tt[2 * k2][3]);
				at[2] = pack2(tt[2 * k2 + 1][0], tt[2 * k2 + 1][1]);
				at[3] = pack2(tt[2 * k2 + 1][2], tt[2 * k2 + 1][3]);
			}
#pragma unroll
			for (int n2 = 0; n2 < D / 16; n2++) {
				u32 bq[4], bg[4];
				ldsm4t(bq, qs + k2 * 16 * SD + n2 * 16 + bk_off(lane, SD));
				ldsm4t(bg, gs + k2 * 16 * SD + n2 * 16 + bk_off(lane, SD));
				mma16816(ak[2 * n2], as, bq);
				mma16816(ak[2 * n2 + 1], as, bq + 2);
				mma16816(av[2 * n2], ap, bg);
				mma16816(av[2 * n2 + 1], ap, bg + 2);
				if (PX) {
					u32 br[4];
					ldsm4t(br, rs + k2 * 16 * SD + n2 * 16 + bk_off(lane, SD));
					mma16816(ak[2 * n2], at, br);
					mma16816(ak[2 * n2 + 1], at, br + 2);
				}
			}
		}
		__syncthreads();
	}
	cp_async_wait<0>();
	store_rows<D>(DK + ko, ak[0], 1.0f, jr0, Lk, tq);
	store_rows<D>(DV + ko, av[0], 1.0f, jr0, Lk, tq);
}

#define BWD(D, BN, BQ)                                                                                                  \
	extern "C" __global__ void __launch_bounds__(128) attn_dq_mma_d##D##_px(                                              \
	    const u16 *Q, const u16 *R, const u16 *K, const u16 *V, const u16 *G, const float *LSE, const float *T,        \
	    const float *BV, const float *TB, u16 *DQ, u16 *DR, int Hq, int Hkv, int Lq, int Lk, float scale, int causal, \
	    int window) {                                                                                                   \
		dq_impl<D, BN, true>(Q, R, K, V, G, LSE, T, BV, TB, DQ, DR, Hq, Hkv, Lq, Lk, scale, causal, window);          \
	}                                                                                                                   \
	extern "C" __global__ void __launch_bounds__(128) attn_dq_mma_d##D##_sm(                                              \
	    const u16 *Q, const u16 *R, const u16 *K, const u16 *V, const u16 *G, const float *LSE, const float *T,        \
	    const float *BV, const float *TB, u16 *DQ, u16 *DR, int Hq, int Hkv, int Lq, int Lk, float scale, int causal, \
	    int window) {                                                                                                   \
		dq_impl<D, BN, false>(Q, R, K, V, G, LSE, T, BV, TB, DQ, DR, Hq, Hkv, Lq, Lk, scale, causal, window);         \
	}                                                                                                                   \
	extern "C" __global__ void __launch_bounds__(128) attn_dkv_mma_d##D##_px(                                             \
	    const u16 *Q, const u16 *R, const u16 *K, const u16 *V, const u16 *G, const float *LSE, const float *T,        \
	    const float *BV, const float *TB, u16 *DK, u16 *DV, int Hq, int Hkv, int Lq, int Lk, float scale, int causal, \
	    int window) {                                                                                                   \
		dkv_impl<D, BQ, true>(Q, R, K, V, G, LSE, T, BV, TB, DK, DV, Hq, Hkv, Lq, Lk, scale, causal, window);         \
	}                                                                                                                   \
	extern "C" __global__ void __launch_bounds__(128) attn_dkv_mma_d##D##_sm(                                             \
	    const u16 *Q, const u16 *R, const u16 *K, const u16 *V, const u16 *G, const float *LSE, const float *T,        \
	    const float *BV, const float *TB, u16 *DK, u16 *DV, int Hq, int Hkv, int Lq, int Lk, float scale, int causal, \
	    int window) {                                                                                                   \
		dkv_impl<D, BQ, false>(Q, R, K, V, G, LSE, T, BV, TB, DK, DV, Hq, Hkv, Lq, Lk, scale, causal, window);        \
	}
BWD(32, 64, 64)
BWD(64, 64, 64)
BWD(128, 32, 32)

// ---------------------------------------------------------------------
// Decode over a KV cache, split-KV with the combine fused (one launch).
// Grid (splits x tiles, Hkv, B), 4 warps; the block streams its chunk of
// keys in stages of 64 (16 per warp) through an S-deep cp.async ring (S - 1
// stages in flight). The G*Lq query rows of the group are cut into tiles of
// 8 (rows 8t..8t+7; more than one tile when several tokens are decoded at
// once, a chunk of prompt over a cache): a tile's queries sit in rows 0-7
// of one m16 A tile and their probes in rows 8-15. The tiles of a split are
// adjacent blocks, so the K and V they share come from DRAM once and from
// L2 after that. Each warp keeps its own running state; the block merges
// its warps and, with one split, writes o; otherwise it writes a partial
// (m, d1, d2, O1, O2 of its rows) and the last block of the (batch, KV
// head) to finish, found by an atomic counter that it resets, merges every
// split and writes o. S = 3 (two blocks a multiprocessor) is the large-batch
// kernel; S = 4 and 6 (one block a multiprocessor, 96-160 KiB in flight at
// D = 128) are for few sequences (engine/cuda/attention.go, planDecode).
// ---------------------------------------------------------------------
#define DEC_KEYS 64

// dec_ld4 loads four floats through L2 only (partials of other blocks,
// ordered by their fence and the counter); volatile keeps it after the
// fence, and a batch issued before its uses is in flight together.
__device__ __forceinline__ float4 dec_ld4(const float *p) {
	float4 v;
	asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
	return v;
}

template <int D, bool PX, int STAGES>
__device__ __forceinline__ void dec_impl(const u16 *Q, const u16 *R, const u16 *K, const u16 *V, u16 *O, const int *lens,
                                         int Hq, int Hkv, int Lq, int Cap, float scale, int window, int splits,
                                         int tiles, float *part, int *counters, int *err) {
	constexpr int SD = D + 8;
	constexpr int PST = 24 + 16 * D; // floats per partial: m[8], d1[8], d2[8], O1[8][D], O2[8][D]
	extern __shared__ __align__(16) unsigned char smem[];
	u16 *sA = (u16 *)smem, *sK = sA + 16 * SD, *sV = sK + STAGES * DEC_KEYS * SD;
	__shared__ int last;
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3;
	const int split = blockIdx.x / tiles, tile = blockIdx.x % tiles, hk = blockIdx.y, b = blockIdx.z, G = Hq / Hkv;
	const int row0 = tile * 8, nrows = min(8, G * Lq - row0); // the tile's rows of the group
	const int grp = (b * Hkv + hk) * tiles + tile;              // its partials and counter
	const i64 ko = ((i64)b * Hkv + hk) * Cap * D;
	// Under programmatic dependent launch (engine/cuda/pdl.go) the kernel
	// may start before the one that appended the step's keys has finished:
	// everything below reads what earlier kernels wrote.
	pdl_trigger();
	pdl_wait();
	// The A tile first (rows 0..nrows-1 queries, 8.. probes, the rest
	// zero-filled): it does not depend on the length, so its loads fly
	// while the length is read.
	for (int c = tid; c < 16 * (D / 8); c += 128) {
		int rr = c / (D / 8), cc = (c % (D / 8)) * 8, qr = rr & 7;
		bool ok = qr < nrows && (rr < 8 || PX);
		const u16 *src = Q;
		if (ok) src = (rr < 8 ? Q : R) + (((i64)b * Hq + hk * G + (row0 + qr) / Lq) * Lq + (row0 + qr) % Lq) * D + cc;
		cp_async16(sA + rr * SD + cc, src, ok ? 16 : 0);
	}
	cp_async_commit();
	int n = lens[b];
	if (n < Lq || n > Cap) {
		if (tid == 0 && blockIdx.x == 0 && hk == 0) raise_error(err, 2, b, n, Cap);
		n = min(max(n, Lq), Cap);
	}
	const int uLo = window > 0 ? max(0, n - Lq + 1 - window) : 0;
	const int total = n - uLo;
	const int per = ((total + splits - 1) / splits + DEC_KEYS - 1) / DEC_KEYS * DEC_KEYS;
	const int c0 = uLo + split * per, c1 = min(n, c0 + per);
	const int nst = c1 > c0 ? (c1 - c0 + DEC_KEYS - 1) / DEC_KEYS : 0;

	auto load = [&](int stg, int buf) {
		load_rows<D>(sK + buf * DEC_KEYS * SD, K + ko, c0 + stg * DEC_KEYS, DEC_KEYS, c1, tid, 128);
		load_rows<D>(sV + buf * DEC_KEYS * SD, V + ko, c0 + stg * DEC_KEYS, DEC_KEYS, c1, tid, 128);
	};
#pragma unroll
	for (int s = 0; s < STAGES - 1; s++) {
		if (s < nst) load(s, s);
		cp_async_commit();
	}
	cp_async_wait<STAGES - 1>(); // the A tile's group
	__syncthreads();
	u32 fa[D / 16][4];
#pragma unroll
	for (int kk = 0; kk < D / 16; kk++) ldsm4(fa[kk], sA + kk * 16 + a_off(lane, SD));

	const float sl2 = scale * LOG2E;
	const int qi = (row0 + g) % Lq; // query index of row g
	const int hiq = qi + n - Lq + 1, loq = window > 0 ? max(0, hiq - window) : 0;
	const bool rowok = g < nrows;
	float acc[D / 8][4];
#pragma unroll
	for (int x = 0; x < D / 8; x++)
#pragma unroll
		for (int e = 0; e < 4; e++) acc[x][e] = 0;
	float m = NEG_INF, d1 = 0, d2 = 0;

	for (int stg = 0; stg < nst; stg++) {
		cp_async_wait<STAGES - 2>();
		__syncthreads();
		{
			// Refill the buffer every warp finished with in the last
			// iteration before computing on this one.
			int nx = stg + STAGES - 1;
			if (nx < nst) load(nx, nx % STAGES);
			cp_async_commit();
		}
		const int buf = stg % STAGES;
		const u16 *ks = sK + buf * DEC_KEYS * SD + warp * 16 * SD, *vs = sV + buf * DEC_KEYS * SD + warp * 16 * SD;
		float s[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
#pragma unroll
		for (int kk = 0; kk < D / 16; kk++) {
			u32 bk[4];
			ldsm4(bk, ks + kk * 16 + bn_off(lane, SD));
			mma16816(s[0], fa[kk], bk);
			mma16816(s[1], fa[kk], bk + 2);
		}
		const int jb = c0 + stg * DEC_KEYS + warp * 16;
		float mx = NEG_INF;
		bool okm[2][2];
#pragma unroll
		for (int nt = 0; nt < 2; nt++)
#pragma unroll
			for (int e = 0; e < 2; e++) {
				int j = jb + nt * 8 + tq * 2 + e;
				bool ok = rowok && j < c1 && j < hiq && j >= loq;
				okm[nt][e] = ok;
				float x = ok ? s[nt][e] * sl2 : NEG_INF;
				s[nt][e] = x;
				mx = fmaxf(mx, x);
			}
		mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
		mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
		float mn = fmaxf(m, mx), mu = mn == NEG_INF ? 0.0f : mn, alpha = exp2f(m - mu);
		m = mn;
		d1 *= alpha;
		d2 *= alpha;
		float p[2][2], pt[2][2];
#pragma unroll
		for (int nt = 0; nt < 2; nt++)
#pragma unroll
			for (int e = 0; e < 2; e++) {
				p[nt][e] = exp2f(s[nt][e] - mu);
				// A masked pair's p t is 0, not 0 * t (NaN for an infinite t).
				pt[nt][e] = PX && okm[nt][e] ? p[nt][e] * s[nt][2 + e] : 0.0f;
				d1 += p[nt][e];
				d2 += pt[nt][e];
			}
#pragma unroll
		for (int x = 0; x < D / 8; x++)
#pragma unroll
			for (int e = 0; e < 4; e++) acc[x][e] *= alpha;
		// Keys hidden from some rows but not all (the causal edge, the last
		// Lq - 1 keys; a window's left edge) still enter the P V product
		// with p = 0, and 0 times a non-finite V is NaN where the reference
		// skips the key. Such a key with a non-finite V row leaves the
		// product (its shared row is zeroed) and each row that sees it adds
		// p v for it alone. The test costs nothing away from the edges.
		if (jb + 16 > n - Lq + 1 || window > 0) {
			const int kl0 = lane & 15, jl = jb + kl0;
			bool bad = false;
			if (lane < 16 && jl < c1) {
				int vis = 0;
				for (int rr = 0; rr < nrows; rr++) {
					int hr = (row0 + rr) % Lq + n - Lq + 1, lr = window > 0 ? max(0, hr - window) : 0;
					vis += jl < hr && jl >= lr;
				}
				if (vis > 0 && vis < nrows) {
					const u16 *vr = vs + kl0 * SD;
					for (int c = 0; c < D; c++) bad |= (vr[c] & 0x7f80u) == 0x7f80u;
				}
			}
			for (unsigned badm = __ballot_sync(0xffffffffu, bad); badm; badm &= badm - 1) {
				const int kl = __ffs(badm) - 1, ntk = kl >> 3, ek = kl & 1, src = (lane & ~3) | ((kl & 7) >> 1);
				float pk = ntk ? (ek ? p[1][1] : p[1][0]) : (ek ? p[0][1] : p[0][0]);
				float ptk = ntk ? (ek ? pt[1][1] : pt[1][0]) : (ek ? pt[0][1] : pt[0][0]);
				int okk = ntk ? (ek ? okm[1][1] : okm[1][0]) : (ek ? okm[0][1] : okm[0][0]);
				pk = __shfl_sync(0xffffffffu, pk, src);
				ptk = __shfl_sync(0xffffffffu, ptk, src);
				okk = __shfl_sync(0xffffffffu, okk, src);
				u16 *vr = (u16 *)vs + kl * SD;
				if (okk)
#pragma unroll
					for (int x = 0; x < D / 8; x++) {
						int c = x * 8 + tq * 2;
						float v0 = bf2f(vr[c]), v1 = bf2f(vr[c + 1]);
						acc[x][0] += pk * v0;
						acc[x][1] += pk * v1;
						acc[x][2] += ptk * v0;
						acc[x][3] += ptk * v1;
					}
				__syncwarp();
				for (int c = lane; c < D; c += 32) vr[c] = 0;
				__syncwarp();
			}
		}
		u32 ap[4] = {pack2(p[0][0], p[0][1]), pack2(pt[0][0], pt[0][1]), pack2(p[1][0], p[1][1]), pack2(pt[1][0], pt[1][1])};
#pragma unroll
		for (int n2 = 0; n2 < D / 16; n2++) {
			u32 bv[4];
			ldsm4t(bv, vs + n2 * 16 + bk_off(lane, SD));
			mma16816(acc[2 * n2], ap, bv);
			mma16816(acc[2 * n2 + 1], ap, bv + 2);
		}
	}
	cp_async_wait<0>();
	__syncthreads();

	// Merge the 4 warps in shared memory: per warp m[8], d1[8], d2[8],
	// O1[8][D], O2[8][D].
	float *wp = (float *)sK;
	d1 = quad_sum(d1);
	d2 = quad_sum(d2);
	float *mine = wp + warp * PST;
	if (tq == 0) {
		mine[g] = m;
		mine[8 + g] = d1;
		mine[16 + g] = d2;
	}
#pragma unroll
	for (int x = 0; x < D / 8; x++) {
		int c = x * 8 + tq * 2;
		mine[24 + g * D + c] = acc[x][0];
		mine[24 + g * D + c + 1] = acc[x][1];
		mine[24 + 8 * D + g * D + c] = acc[x][2];
		mine[24 + 8 * D + g * D + c + 1] = acc[x][3];
	}
	__syncthreads();
	// o of row r from its merged state: a valid sequence's rows see a key,
	// so D1 NaN or 0 (every score -inf) makes o NaN, never 0.
	auto orow = [&](int r) { return O + (((i64)b * Hq + hk * G + (row0 + r) / Lq) * Lq + (row0 + r) % Lq) * D; };
	auto fin = [](float D1, float D2, float A1, float A2) {
		float inv = 1.0f / D1, tb = D2 * inv;
		return A1 * inv * (1 + tb) - A2 * inv;
	};
	// The block's state of its rows: o itself with one split, else the
	// block's partial, written straight to global memory.
	float *pp = part + ((i64)grp * splits + split) * PST;
	for (int e = tid; e < nrows * D; e += 128) {
		int r = e / D, c = e % D;
		float M = NEG_INF;
#pragma unroll
		for (int w = 0; w < 4; w++) M = fmaxf(M, wp[w * PST + r]);
		float Mu = M == NEG_INF ? 0.0f : M, D1 = 0, D2 = 0, A1 = 0, A2 = 0;
#pragma unroll
		for (int w = 0; w < 4; w++) {
			float f = exp2f(wp[w * PST + r] - Mu);
			D1 += f * wp[w * PST + 8 + r];
			D2 += f * wp[w * PST + 16 + r];
			A1 += f * wp[w * PST + 24 + r * D + c];
			if (PX) A2 += f * wp[w * PST + 24 + 8 * D + r * D + c];
		}
		if (splits == 1) {
			orow(r)[c] = f2bf(fin(D1, D2, A1, A2));
			continue;
		}
		if (c == 0) {
			pp[r] = M;
			pp[8 + r] = D1;
			pp[16 + r] = D2;
		}
		pp[24 + r * D + c] = A1;
		if (PX) pp[24 + 8 * D + r * D + c] = A2;
	}
	if (splits == 1) return;
	__threadfence();
	__syncthreads();
	if (tid == 0) last = atomicAdd(&counters[grp], 1) == splits - 1;
	__syncthreads();
	if (!last) return;
	__threadfence();
	// The combine: items of 4 columns of one row, TPI threads an item (a
	// power of two, lanes of one warp) taking every TPI-th split, eight
	// splits' loads in flight at a time, then merged across the TPI lanes.
	const float *ps = part + (i64)grp * splits * PST;
	constexpr int C4 = D / 4;
	const int nitems = nrows * C4;
	int tpi = 1;
	while (tpi < 32 && 2 * tpi * nitems <= 128) tpi *= 2;
	const int sub = tid & (tpi - 1), ipb = 128 / tpi;
	for (int i0 = 0; i0 < nitems; i0 += ipb) { // uniform over the block: the shuffles below see every lane
		const int it = min(i0 + tid / tpi, nitems - 1), r = it / C4, c = (it % C4) * 4;
		float M = NEG_INF, D1 = 0, D2 = 0;
		float4 A1 = make_float4(0, 0, 0, 0), A2 = A1;
		for (int s0 = sub; s0 < splits; s0 += 8 * tpi) {
			float pm[8], pd1[8], pd2[8];
			float4 pa1[8], pa2[8];
#pragma unroll
			for (int u = 0; u < 8; u++) {
				const int s = s0 + u * tpi;
				const float *q = ps + (i64)min(s, splits - 1) * PST; // past the end: a valid split, weighted 0
				const bool ok = s < splits;
				pm[u] = ok ? ld_cg(q + r) : NEG_INF;
				pd1[u] = ld_cg(q + 8 + r);
				pd2[u] = PX ? ld_cg(q + 16 + r) : 0.0f;
				pa1[u] = dec_ld4(q + 24 + r * D + c);
				pa2[u] = PX ? dec_ld4(q + 24 + 8 * D + r * D + c) : make_float4(0, 0, 0, 0);
				if (!ok) {
					pd1[u] = pd2[u] = 0.0f;
					pa1[u] = pa2[u] = make_float4(0, 0, 0, 0);
				}
			}
			float Mn = M;
#pragma unroll
			for (int u = 0; u < 8; u++) Mn = fmaxf(Mn, pm[u]);
			const float Mu = Mn == NEG_INF ? 0.0f : Mn, f = exp2f(M - Mu);
			D1 *= f;
			D2 *= f;
			A1.x *= f, A1.y *= f, A1.z *= f, A1.w *= f;
			A2.x *= f, A2.y *= f, A2.z *= f, A2.w *= f;
#pragma unroll
			for (int u = 0; u < 8; u++) {
				const float w = exp2f(pm[u] - Mu);
				D1 += w * pd1[u];
				D2 += w * pd2[u];
				A1.x += w * pa1[u].x, A1.y += w * pa1[u].y, A1.z += w * pa1[u].z, A1.w += w * pa1[u].w;
				A2.x += w * pa2[u].x, A2.y += w * pa2[u].y, A2.z += w * pa2[u].z, A2.w += w * pa2[u].w;
			}
			M = Mn;
		}
		for (int o = 1; o < tpi; o <<= 1) {
			const float Mo = __shfl_xor_sync(0xffffffffu, M, o);
			const float Mn = fmaxf(M, Mo), Mu = Mn == NEG_INF ? 0.0f : Mn;
			const float f = exp2f(M - Mu), fo = exp2f(Mo - Mu);
			auto mix = [&](float v) { return f * v + fo * __shfl_xor_sync(0xffffffffu, v, o); };
			D1 = mix(D1), D2 = mix(D2);
			A1.x = mix(A1.x), A1.y = mix(A1.y), A1.z = mix(A1.z), A1.w = mix(A1.w);
			A2.x = mix(A2.x), A2.y = mix(A2.y), A2.z = mix(A2.z), A2.w = mix(A2.w);
			M = Mn;
		}
		if (sub == 0 && i0 + tid / tpi < nitems) {
			const u32 lo = (u32)f2bf(fin(D1, D2, A1.x, A2.x)) | ((u32)f2bf(fin(D1, D2, A1.y, A2.y)) << 16);
			const u32 hi = (u32)f2bf(fin(D1, D2, A1.z, A2.z)) | ((u32)f2bf(fin(D1, D2, A1.w, A2.w)) << 16);
			*(uint2 *)(orow(r) + c) = make_uint2(lo, hi);
		}
	}
	if (tid == 0) counters[grp] = 0; // ready for the next call
}

// attn_dec_mma_d<D>_<px|sm>: 3 stages; attn_dec_mma_s<S>_d<D>_<px|sm>: S.
#define DECK(D, S, NAME, PXV, KIND)                                                                                    \
	extern "C" __global__ void __launch_bounds__(128) NAME##KIND(                                                      \
	    const u16 *Q, const u16 *R, const u16 *K, const u16 *V, u16 *O, const int *lens, int Hq, int Hkv, int Lq, int Cap, \
	    float scale, int window, int splits, int tiles, float *part, int *counters, int *err) {                          \
		dec_impl<D, PXV, S>(Q, R, K, V, O, lens, Hq, Hkv, Lq, Cap, scale, window, splits, tiles, part, counters, err);  \
	}
#define DEC(D)                                                                                                           \
	DECK(D, 3, attn_dec_mma_d##D, true, _px)                                                                         \
	DECK(D, 3, attn_dec_mma_d##D, false, _sm)                                                                        \
	DECK(D, 4, attn_dec_mma_s4_d##D, true, _px)                                                                      \
	DECK(D, 4, attn_dec_mma_s4_d##D, false, _sm)                                                                     \
	DECK(D, 6, attn_dec_mma_s6_d##D, true, _px)                                                                      \
	DECK(D, 6, attn_dec_mma_s6_d##D, false, _sm)
DEC(16)
DEC(32)
DEC(64)
DEC(128)
