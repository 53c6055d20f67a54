#version 450
// Attention backward pre-pass (docs/MATH.md section 4): per row, T = g.o and
// Bv = g.vbar (g = dO), stored as stats[row] and stats[rows + row]; with
// needMax also the largest |g| of the whole tensor, as float bits in
// stats[2 rows] (which the host zeroes first), for the tensor-core
// kernels' scaling of g into f16's range.
#include "common.glsl"

IN(0, O)
IN(1, G)
IN(2, VB)
F32BUF(3, stats)
layout(std430, binding = 3) buffer statsU_ { uint statsU[]; }; // stats' bits

shared uint sMax;

layout(push_constant) uniform PC {
	uint rows;
	uint D;
	uint needT;
	uint needBv;
	uint needMax;
} pc;

void main() {
	if (gl_LocalInvocationID.x == 0u) {
		sMax = 0u;
	}
	barrier();
	uint stride = WG * px_groups();
	float gmax = 0.0;
	for (uint row = WG * px_group() + gl_LocalInvocationID.x; row < pc.rows; row += stride) {
		float tt = 0.0, bv = 0.0;
		for (uint x = 0u; x < pc.D; x++) {
			uint off = row * pc.D + x;
			float g = G_ld(off);
			gmax = max(gmax, abs(g));
			if (pc.needT != 0u) {
				tt += g * O_ld(off);
			}
			if (pc.needBv != 0u) {
				bv += g * VB_ld(off);
			}
		}
		stats[row] = tt;
		stats[pc.rows + row] = bv;
	}
	if (pc.needMax != 0u) {
		// Non-negative floats order as their bits (NaN above everything).
		atomicMax(sMax, floatBitsToUint(gmax));
		barrier();
		if (gl_LocalInvocationID.x == 0u) {
			atomicMax(statsU[2u * pc.rows], sMax);
		}
	}
}
