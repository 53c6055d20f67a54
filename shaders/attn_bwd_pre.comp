#version 450
// Attention backward pre-pass (spec section 4): per row, T = g.o and
// Bv = g.vbar (g = dO), stored as stats[row] and stats[rows + row].
#include "common.glsl"

IN(0, O)
IN(1, G)
IN(2, VB)
F32BUF(3, stats)

layout(push_constant) uniform PC {
	uint rows;
	uint D;
	uint needT;
	uint needBv;
} pc;

void main() {
	uint stride = WG * px_groups();
	for (uint row = WG * px_group() + gl_LocalInvocationID.x; row < pc.rows; row += stride) {
		float tt = 0.0, bv = 0.0;
		for (uint x = 0u; x < pc.D; x++) {
			uint off = row * pc.D + x;
			float g = G_ld(off);
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
}
