#version 450
// Two-stage deterministic sums over `batch` segments of `per` elements.
//   STAGE 0: workgroup (part, seg) sums f(x) over its chunk of segment seg
//            (f = x^2 when SQUARE, else x) into parts[seg * P + part].
//   STAGE 1: workgroup seg sums parts[seg * P ...] in order and finishes:
//            FIN 0: out[seg] = s (+ out[seg] when accumulate)
//            FIN 1: out[seg] = 1 / (sqrt(s) + eps)   (Frobenius scale)
//            FIN 2: out[seg] = s / count             (mean)
#include "common.glsl"
#include "reduce.glsl"

layout(constant_id = 1) const uint STAGE = 0;
layout(constant_id = 2) const uint SQUARE = 1;
layout(constant_id = 3) const uint FIN = 0;

IN(0, x)
F32BUF(1, parts)
F32BUF(2, res)

layout(push_constant) uniform PC {
	uint per;
	uint P;
	uint chunk;
	uint batch;
	uint accumulate;
	float eps;
	float count;
} pc;

void main() {
	uint g = px_group();
	uint t = gl_LocalInvocationID.x;
	if (STAGE == 0u) {
		uint seg = g / pc.P, part = g % pc.P;
		if (seg >= pc.batch) {
			return;
		}
		uint lo = part * pc.chunk;
		uint hi = min(lo + pc.chunk, pc.per);
		float s = 0.0;
		for (uint i = lo + t; i < hi; i += WG) {
			float v = x_ld(seg * pc.per + i);
			s += SQUARE != 0u ? v * v : v;
		}
		s = wg_sum(s);
		if (t == 0u) {
			parts[g] = s;
		}
		return;
	}
	uint seg = g;
	if (seg >= pc.batch) {
		return;
	}
	float s = 0.0;
	for (uint i = t; i < pc.P; i += WG) {
		s += parts[seg * pc.P + i];
	}
	s = wg_sum(s);
	if (t == 0u) {
		if (FIN == 0u) {
			res[seg] = pc.accumulate != 0u ? res[seg] + s : s;
		} else if (FIN == 1u) {
			res[seg] = 1.0 / (sqrt(s) + pc.eps);
		} else {
			res[seg] = pc.count > 0.0 ? s / pc.count : 0.0;
		}
	}
}
