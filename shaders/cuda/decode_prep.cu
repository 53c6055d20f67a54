// decode_prep: a decode step's attention inputs in one launch
// (engine.DecodePrep). The rows (b, l, h) of four projections, in their
// [B, L, H, D] layout, are one index space of segments:
//
//	0 q: normed per head, rotated (RoPE), written to qOut [B, Hq, L, D]
//	1 k: normed, rotated, written to kCache [B, Hkv, Cap, D] at starts[b] + l
//	2 v: copied to vCache at starts[b] + l
//	3 r: as q, to rOut (no rows without a probe)
//
// which replaces three norm+RoPE launches, a swap and two cache appends.
// With out2 (engine.DecodePrepArgs.KeepKV) the k and v rows are also
// written in attention's layout [B, Hkv, L, D], for a prefill's attention.
// The row math is normrope8's: y = x rstd w with rstd = 1/sqrt(mean(x^2) +
// eps), then (y_i, y_{i+D/2}) turned by pos f_i, the frequencies
// f_i = theta^(-2i/D) coming from the host in double (the kernel computes
// no pow), the angle reduced modulo 2 pi in double and sincosf of the
// reduced f32 angle. A row has D/16 lanes (lpr, a power of two up to 32:
// D = 16..512 with D/2 <= 128 for the table), each owning 8 pairs: 16-byte
// loads and stores, the sum of squares over the row's lanes by shuffles.
// A start outside [0, Cap - L] writes nothing for its sequence's cache rows
// and raises error 5 (sequence, start, Cap), as kv_append_at does.
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

extern "C" __global__ void __launch_bounds__(128) decode_prep(const __grid_constant__ dp_set s, const __grid_constant__ dp_freq fr, const int *pos, const int *starts,
                                                              int B, int L, int D, int Cap, int per_seq, float eps,
                                                              int lpr, int *err) {
	pdl_trigger();
	const int lane = threadIdx.x & 31, sub = lane & (lpr - 1), gpw = 32 / lpr;
	const int half = D >> 1, i0 = 8 * sub, total = s.first[4];
	const i64 warp = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	const i64 nwarps = (i64)gridDim.x * (blockDim.x >> 5);
	pdl_wait();
	// The loop is warp-uniform (the shuffles need every lane); ok masks
	// the groups past the end.
	for (i64 r0 = warp * gpw; r0 < total; r0 += nwarps * gpw) {
		const int row = (int)(r0 + lane / lpr);
		const bool ok = row < total;
		int seg = 0, b = 0, l = 0, h = 0, p = 0, start = 0;
		float a[8], bb[8], w1[8], w2[8], ss = 0;
		if (ok) {
			while (seg < 3 && row >= s.first[seg + 1]) seg++;
			const int local = row - s.first[seg], H = s.heads[seg], bl = local / H;
			h = local - bl * H, l = bl % L, b = bl / L;
			ld8f(s.x[seg], s.dtx[seg], (i64)local * D + i0, a);
			ld8f(s.x[seg], s.dtx[seg], (i64)local * D + i0 + half, bb);
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
		if (!ok) continue;
		int t = l, T = L;
		if (seg == 1 || seg == 2) {
			if (start < 0 || start > Cap - L) {
				if (seg == 1 && h == 0 && l == 0 && sub == 0) raise_error(err, 5, b, start, Cap);
				continue;
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
			continue;
		}
		const float sc = 1.0f / sqrtf(ss / (float)D + eps);
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
}
