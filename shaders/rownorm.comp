#version 450
// RMSNorm forward of rows of at most 8 WG elements (a decode step's
// hidden rows), one workgroup per row: out = x rstd w, rstd =
// 1 / sqrt(mean(x^2) + eps). Every invocation issues its (up to 8) loads
// of x and w before any arithmetic and keeps them in registers, so a row
// costs one round trip to memory and one reduction; rmsnorm.comp's
// strided loop waited for each load in turn (8 us a row on the H200).
#include "common.glsl"
#include "reduce.glsl"

IN(0, x)
IN(1, w)
OUT(2, y)
F32BUF(3, rstd)

layout(push_constant) uniform PC {
	uint rows;
	uint N;
	float eps;
	uint hasRstd;
} pc;

void main() {
	uint row = px_group();
	if (row >= pc.rows) {
		return; // uniform: the whole workgroup leaves before the barriers
	}
	uint t = gl_LocalInvocationID.x;
	uint N = pc.N;
	// Named registers (x0..x7, w0..w7), never an array indexed by a variable.
#define RN_LOAD(j)                                    \
	float x##j = 0.0, w##j = 0.0;                     \
	if (t + WG * j < N) {                             \
		x##j = x_ld(row * N + t + WG * j);            \
		w##j = w_ld(t + WG * j);                      \
	}
	RN_LOAD(0u) RN_LOAD(1u) RN_LOAD(2u) RN_LOAD(3u) RN_LOAD(4u) RN_LOAD(5u) RN_LOAD(6u) RN_LOAD(7u)
	float ss = ((x0u * x0u + x1u * x1u) + (x2u * x2u + x3u * x3u)) + ((x4u * x4u + x5u * x5u) + (x6u * x6u + x7u * x7u));
	ss = wg_sum(ss);
	float r = 1.0 / sqrt(ss / float(N) + pc.eps);
#define RN_STORE(j)                                   \
	if (t + WG * j < N) {                             \
		y_st(row * N + t + WG * j, x##j * r * w##j);  \
	}
	RN_STORE(0u) RN_STORE(1u) RN_STORE(2u) RN_STORE(3u) RN_STORE(4u) RN_STORE(5u) RN_STORE(6u) RN_STORE(7u)
	if (t == 0u && pc.hasRstd != 0u) {
		rstd[row] = r;
	}
}
