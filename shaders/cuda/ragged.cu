// Kernels for batches whose sequences sit at different positions (ragged
// decoding): RoPE with one position vector per sequence.
#include "common.cuh"

// rope_seq rotates (x_i, x_{i+D/2}) of row (b, h, l) of x [B, H, L, D] by
// pos[b, l] theta^(-2i/D) (pos I32 [B, L]; the inverse rotation for the
// backward). One thread per (row, pair), so out may alias x; the angle is
// formed and reduced in double (rope_sincos in common.cuh).
extern "C" __global__ void rope_seq(void *out, int dto, const void *x, int dtx, const int *pos, int B, int H, int L,
                                    int D, float theta, int inverse) {
	__shared__ double fr[ROPE_FMAX];
	rope_freqs(fr, theta, D);
	int half = D / 2;
	i64 n = (i64)B * H * L * half;
	for (i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (i64)gridDim.x * blockDim.x) {
		i64 row = e / half;
		int i = (int)(e - row * half);
		int l = (int)(row % L);
		i64 b = row / ((i64)H * L);
		float c, s;
		rope_sincos((double)pos[b * L + l], rope_freq(fr, i, theta, D), &c, &s);
		if (inverse) s = -s;
		i64 base = row * D;
		float a = ldf(x, dtx, base + i), bb = ldf(x, dtx, base + i + half);
		stf(out, dto, base + i, a * c - bb * s);
		stf(out, dto, base + i + half, bb * c + a * s);
	}
}
