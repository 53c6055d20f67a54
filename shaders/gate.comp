#version 450
// Per-head gate: out[n, h, :] = sigmoid(z[n, h]) x[n, h, :].
//   MODE 0 (forward, grid-stride over elements).
//   MODE 1 (backward, one workgroup per head vector): dX = s dOut and
//          dZ = s (1 - s) sum_d dOut x, s = sigmoid(z).
#include "common.glsl"
#include "reduce.glsl"

layout(constant_id = 1) const uint MODE = 0;

IN(0, x)
IN(1, z)
OUT(2, y)  // out (MODE 0) or dX (MODE 1)
IN(3, dy)  // dOut
OUT(4, dz)

layout(push_constant) uniform PC {
	uint rows; // head vectors
	uint D;
} pc;

float sigmoid(float v) { return 1.0 / (1.0 + exp(-v)); }

void main() {
	if (MODE == 0u) {
		uint n = pc.rows * pc.D;
		uint stride = WG * px_groups();
		for (uint i = WG * px_group() + gl_LocalInvocationID.x; i < n; i += stride) {
			y_st(i, sigmoid(z_ld(i / pc.D)) * x_ld(i));
		}
		return;
	}
	uint row = px_group();
	if (row >= pc.rows) {
		return;
	}
	float s = sigmoid(z_ld(row));
	float dot = 0.0;
	for (uint j = gl_LocalInvocationID.x; j < pc.D; j += WG) {
		uint i = row * pc.D + j;
		float g = dy_ld(i);
		dot += g * x_ld(i);
		y_st(i, s * g);
	}
	dot = wg_sum(dot);
	if (gl_LocalInvocationID.x == 0u) {
		dz_st(row, s * (1.0 - s) * dot);
	}
}
