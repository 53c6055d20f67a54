#version 450
// Rotary position embedding ("rotate half") of x [B, H, L, D]: pair i of
// row (b, h, l) turns by pos[l] freq[i] (freq[i] = theta^(-2i/D), from the
// host in f32), or by pos[b, l] freq[i] with per-sequence positions
// (pos [B, L], seq_pos = L), or by minus that angle (sign -1, the backward). The
// angle is reduced modulo 2 pi in two steps (Cody-Waite) before sin/cos so
// large positions keep their accuracy. out may alias x.
#include "common.glsl"


IN(0, x)
OUT(1, y)
INDEX(2, pos)
F32BUF(3, freq)

layout(push_constant) uniform PC {
	uint rows; // B H L
	uint L;
	uint half_; // D / 2
	float sign; // 1 forward, -1 inverse
	uint HL;      // H L: rows per sequence
	uint seq_pos; // L for per-sequence positions pos [B, L], 0 for pos [L]
} pc;

const float TWO_PI_HI = 6.28125;
const float TWO_PI_LO = 1.9353071795864769e-3;
const float INV_TWO_PI = 0.15915494309189535;

void main() {
	uint n = pc.rows * pc.half_;
	uint stride = WG * px_groups();
	for (uint e = WG * px_group() + gl_LocalInvocationID.x; e < n; e += stride) {
		uint row = e / pc.half_, i = e % pc.half_;
		uint l = row % pc.L;
		float a = float(pos[(row / pc.HL) * pc.seq_pos + l]) * freq[i];
		float k = roundEven(a * INV_TWO_PI);
		float r = (a - k * TWO_PI_HI) - k * TWO_PI_LO;
		float c = cos(r), s = pc.sign * sin(r);
		uint D = 2u * pc.half_;
		uint o1 = row * D + i, o2 = o1 + pc.half_;
		float x1 = x_ld(o1), x2 = x_ld(o2);
		y_st(o1, x1 * c - x2 * s);
		y_st(o2, x2 * c + x1 * s);
	}
}
