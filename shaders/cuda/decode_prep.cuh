// decode_prep.cuh: the row work of decode_prep (decode_prep.cu), shared
// with the gemv kernel that runs it after a decode step's projections
// (gemv_norm_prep_m*, gemv.cu). See decode_prep.cu for the layout.
#pragma once
#include "common.cuh"

struct dp_set {
	const void *x[4]; // q, k, v, r [B, L, H_s, D]
	const void *w[4]; // their norm weights [D] (v: none)
	void *out[4];     // qOut, kCache, vCache, rOut
	void *out2[4];    // k and v again as [B, Hkv, L, D] (KeepKV), else null
	int dtx[4], dtw[4], dto[4], dto2[4];
	int heads[4];
	int first[5]; // first row of each segment; first[4] = every row
};

// dp_freq is RoPE's frequency table f_i, i < D/2.
struct dp_freq {
	double f[128];
};

// dp_sincos is rope_sincos (common.cuh), so decode and prefill rotate
// alike bit for bit.
__device__ __forceinline__ void dp_sincos(int p, double f, float *c, float *s) { rope_sincos((double)p, f, c, s); }

// dp_ld8 is ld8f, through the L2 only (ld.global.cg) with CG: for rows
// other blocks of the same launch wrote, which this SM's L1 must not
// serve.
template <bool CG>
__device__ __forceinline__ void dp_ld8(const void *p, int dt, i64 i, float *v) {
	if (!CG) {
		ld8f(p, dt, i, v);
		return;
	}
	if (dt == DT_F32) {
		const uint4 *q = (const uint4 *)p + (i >> 2);
		uint4 a = __ldcg(q), b = __ldcg(q + 1);
		v[0] = __uint_as_float(a.x), v[1] = __uint_as_float(a.y), v[2] = __uint_as_float(a.z), v[3] = __uint_as_float(a.w);
		v[4] = __uint_as_float(b.x), v[5] = __uint_as_float(b.y), v[6] = __uint_as_float(b.z), v[7] = __uint_as_float(b.w);
		return;
	}
	cvt8h(__ldcg((const uint4 *)p + (i >> 3)), dt, v);
}

// dp_row prepares row `row` of s's index space (ok false: a lane past the
// end, which still takes part in the shuffles), this lane owning pairs
// 8 sub.. of it; every lane of the warp calls it.
template <bool CG>
__device__ __forceinline__ void dp_row(const dp_set &s, const dp_freq &fr, const int *pos, const int *starts, int L,
                                       int D, int Cap, int per_seq, float eps, int lpr, int *err, int row, bool ok,
                                       int sub) {
	const int half = D >> 1, i0 = 8 * sub;
	int seg = 0, b = 0, l = 0, h = 0, p = 0, start = 0;
	float a[8], bb[8], w1[8], w2[8], ss = 0;
	if (ok) {
		while (seg < 3 && row >= s.first[seg + 1]) seg++;
		const int local = row - s.first[seg], H = s.heads[seg], bl = local / H;
		h = local - bl * H, l = bl % L, b = bl / L;
		dp_ld8<CG>(s.x[seg], s.dtx[seg], (i64)local * D + i0, a);
		dp_ld8<CG>(s.x[seg], s.dtx[seg], (i64)local * D + i0 + half, bb);
		if (seg != 2) {
			ld8f(s.w[seg], s.dtw[seg], i0, w1);
			ld8f(s.w[seg], s.dtw[seg], i0 + half, w2);
			p = pos[per_seq ? (i64)b * L + l : l];
		}
		if (seg == 1 || seg == 2) start = starts[b];
#pragma unroll
		for (int k = 0; k < 8; k++) ss += a[k] * a[k] + bb[k] * bb[k];
	}
	for (int o = lpr >> 1; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
	if (!ok) return;
	int t = l, T = L;
	if (seg == 1 || seg == 2) {
		if (start < 0 || start > Cap - L) {
			if (seg == 1 && h == 0 && l == 0 && sub == 0) raise_error(err, 5, b, start, Cap);
			return;
		}
		t = start + l, T = Cap;
	}
	const i64 o = (((i64)b * s.heads[seg] + h) * T + t) * D + i0;
	const i64 ol = (((i64)b * s.heads[seg] + h) * L + l) * D + i0;
	if (seg == 2) {
		st8f(s.out[seg], s.dto[seg], o, a);
		st8f(s.out[seg], s.dto[seg], o + half, bb);
		if (s.out2[2]) {
			st8f(s.out2[2], s.dto2[2], ol, a);
			st8f(s.out2[2], s.dto2[2], ol + half, bb);
		}
		return;
	}
	const float sc = rms_rstd(ss, D, eps);
	float o1[8], o2[8];
#pragma unroll
	for (int k = 0; k < 8; k++) {
		float c, sn;
		dp_sincos(p, fr.f[i0 + k], &c, &sn);
		const float y1 = a[k] * sc * w1[k], y2 = bb[k] * sc * w2[k];
		o1[k] = y1 * c - y2 * sn;
		o2[k] = y2 * c + y1 * sn;
	}
	st8f(s.out[seg], s.dto[seg], o, o1);
	st8f(s.out[seg], s.dto[seg], o + half, o2);
	if (seg == 1 && s.out2[1]) {
		st8f(s.out2[1], s.dto2[1], ol, o1);
		st8f(s.out2[1], s.dto2[1], ol + half, o2);
	}
}

// gemv_prep_tail ends a gemv_norm_prep or qgemv_norm_prep launch (gemv.cu,
// qgemv.cu: 8 output columns a block): after its block's columns of
// weight seg (q, k, v, r: ps's segments) are out, the last of the D / 8
// blocks of a head to finish, counted in cnt (one int per head of every
// segment, 0 between launches: the last block puts it back), prepares
// that head's MM rows as decode_prep does (dp_row), reading the raw rows
// the other blocks wrote through the L2. Every thread reaches the
// barriers: the row kernels return nothing early when N is a multiple of
// 8.
template <int MM>
__device__ __forceinline__ void gemv_prep_tail(int seg, int n0, const dp_set &ps, const dp_freq &fr, const int *pos,
                                               const int *starts, int L, int D, int Cap, int per_seq, float eps,
                                               int lpr, int *err, int *cnt) {
	__shared__ int last;
	__threadfence(); // this block's outputs before its count
	__syncthreads();
	const int h = n0 / D;
	int base = 0;
	for (int j = 0; j < seg; j++) base += ps.heads[j];
	if (threadIdx.x == 0) {
		last = atomicAdd(cnt + base + h, 1) == D / 8 - 1;
		if (last) cnt[base + h] = 0;
	}
	__syncthreads();
	if (!last) return;
	__threadfence(); // the other blocks' outputs, counted, before reading them
	const int lane = threadIdx.x & 31, sub = lane & (lpr - 1), gpw = 32 / lpr, warp = threadIdx.x >> 5;
	if (warp * gpw >= MM) return; // warp-uniform: the shuffles need whole warps
	const int m = warp * gpw + lane / lpr;
	dp_row<true>(ps, fr, pos, starts, L, D, Cap, per_seq, eps, lpr, err, ps.first[seg] + m * ps.heads[seg] + h, m < MM,
	             sub);
}
