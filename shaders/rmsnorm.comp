#version 450
// RMSNorm over rows of width N.
//   MODE 0 (forward, one workgroup per row):
//       rstd = 1 / sqrt(mean(x^2) + eps); out = x rstd w.
//   MODE 1 (dX, one workgroup per row): with xhat = x rstd, gy = dOut w:
//       dX = rstd (gy - xhat mean(gy xhat)).
//   MODE 2 (dW partials): workgroup (column block, row chunk) writes
//       parts[chunk * N + col] = sum over its rows of dOut xhat.
//   MODE 3 (dW): dW[col] += sum over chunks of parts[chunk * N + col], in
//       chunk order (deterministic).
#include "common.glsl"
#include "reduce.glsl"

layout(constant_id = 1) const uint MODE = 0;

IN(0, x)
IN(1, w)
OUT(2, y)     // out (MODE 0) or dX (MODE 1)
F32BUF(3, rstd)
IN(4, dy)     // dOut
F32BUF(5, parts)
OUT(6, dw)

layout(push_constant) uniform PC {
	uint rows;
	uint N;
	float eps;
	uint chunk;  // rows per chunk (MODE 2)
	uint chunks; // number of chunks
	uint hasRstd;
} pc;

void main() {
	uint g = px_group();
	uint t = gl_LocalInvocationID.x;
	uint N = pc.N;
	if (MODE == 0u) {
		uint row = g;
		if (row >= pc.rows) {
			return;
		}
		float ss = 0.0;
		for (uint i = t; i < N; i += WG) {
			float v = x_ld(row * N + i);
			ss += v * v;
		}
		ss = wg_sum(ss);
		float r = 1.0 / sqrt(ss / float(N) + pc.eps);
		for (uint i = t; i < N; i += WG) {
			y_st(row * N + i, x_ld(row * N + i) * r * w_ld(i));
		}
		if (t == 0u && pc.hasRstd != 0u) {
			rstd[row] = r;
		}
	} else if (MODE == 1u) {
		uint row = g;
		if (row >= pc.rows) {
			return;
		}
		float r = rstd[row];
		float dot = 0.0;
		for (uint i = t; i < N; i += WG) {
			dot += dy_ld(row * N + i) * w_ld(i) * x_ld(row * N + i) * r;
		}
		float mean = wg_sum(dot) / float(N);
		for (uint i = t; i < N; i += WG) {
			float xh = x_ld(row * N + i) * r;
			y_st(row * N + i, r * (dy_ld(row * N + i) * w_ld(i) - xh * mean));
		}
	} else if (MODE == 2u) {
		uint blocks = (N + WG - 1u) / WG;
		uint col = (g % blocks) * WG + t;
		uint c = g / blocks;
		if (c >= pc.chunks || col >= N) {
			return;
		}
		uint r1 = min((c + 1u) * pc.chunk, pc.rows);
		float s = 0.0;
		for (uint row = c * pc.chunk; row < r1; row++) {
			s += dy_ld(row * N + col) * x_ld(row * N + col) * rstd[row];
		}
		parts[c * N + col] = s;
	} else {
		uint col = g * WG + t;
		if (col >= N) {
			return;
		}
		float s = 0.0;
		for (uint c = 0u; c < pc.chunks; c++) {
			s += parts[c * N + col];
		}
		dw_st(col, dw_ld(col) + s);
	}
}
