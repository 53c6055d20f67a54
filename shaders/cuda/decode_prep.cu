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
#include "decode_prep.cuh"

extern "C" __global__ void __launch_bounds__(128) decode_prep(const __grid_constant__ dp_set s, const __grid_constant__ dp_freq fr, const int *pos, const int *starts,
                                                              int B, int L, int D, int Cap, int per_seq, float eps,
                                                              int lpr, int *err) {
	pdl_trigger();
	const int lane = threadIdx.x & 31, sub = lane & (lpr - 1), gpw = 32 / lpr, total = s.first[4];
	const i64 warp = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	const i64 nwarps = (i64)gridDim.x * (blockDim.x >> 5);
	pdl_wait();
	// The loop is warp-uniform (the shuffles need every lane); ok masks
	// the groups past the end.
	for (i64 r0 = warp * gpw; r0 < total; r0 += nwarps * gpw) {
		const int row = (int)(r0 + lane / lpr);
		dp_row<false>(s, fr, pos, starts, L, D, Cap, per_seq, eps, lpr, err, row, row < total, sub);
	}
}
