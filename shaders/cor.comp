#version 450
// Correction-to-output ratio, per row: ratio[row] = ||vbar - o|| / ||vbar||
// (0 where vbar = 0); the mean over rows is a reduce.comp pass.
#include "common.glsl"
#include "reduce.glsl"


IN(0, o)
IN(1, vbar)
F32BUF(2, ratio)

layout(push_constant) uniform PC {
	uint rows;
	uint D;
} pc;

void main() {
	uint row = px_group();
	if (row >= pc.rows) {
		return;
	}
	float num = 0.0, den = 0.0;
	for (uint x = gl_LocalInvocationID.x; x < pc.D; x += WG) {
		float v = vbar_ld(row * pc.D + x);
		float e = v - o_ld(row * pc.D + x);
		num += e * e;
		den += v * v;
	}
	num = wg_sum(num);
	den = wg_sum(den);
	if (gl_LocalInvocationID.x == 0u) {
		ratio[row] = den > 0.0 ? sqrt(num / den) : 0.0;
	}
}
