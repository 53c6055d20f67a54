#version 450
// Elementwise ops over n elements (grid-stride loop). OP selects the
// formula; the five bindings t0..t4 are the op's operands (unused ones are
// bound to a dummy buffer). Each element is read before it is written by
// the same invocation, so outputs may alias inputs.
#include "common.glsl"

layout(constant_id = 1) const uint OP = 0;

#define OP_ADD_SCALED 0u   // t0 = c0 t1 + c1 t2
#define OP_SWIGLU 1u       // t0 = silu(t1) t2
#define OP_SWIGLU_BWD 2u   // t0 = dGate, t1 = dUp of t2 = dOut, t3 = gate, t4 = up
#define OP_ADAMW 3u        // t0 = p, t1 = g, t2 = m, t3 = v, per = scale bits (see below)
#define OP_MUON_MOM 4u     // t0 = u, t1 = m, t2 = g; c0 = beta, c1 = grad scale, flag = nesterov
#define OP_MUON_APPLY 5u   // t0 = p, t1 = o: p = c0 p - c1 o
#define OP_SCALE_BLOCKS 6u // t0 = t1 * t2[i / per] (t2: f32 factors)

OUT(0, t0)
OUT(1, t1)
OUT(2, t2)
OUT(3, t3)
OUT(4, t4)

layout(push_constant) uniform PC {
	uint n;
	uint per;
	uint flag;
	float c0, c1, c2, c3, c4, c5;
} pc;

float sigmoid(float z) { return 1.0 / (1.0 + exp(-z)); }

void main() {
	uint stride = WG * px_groups();
	for (uint i = WG * px_group() + gl_LocalInvocationID.x; i < pc.n; i += stride) {
		if (OP == OP_ADD_SCALED) {
			t0_st(i, pc.c0 * t1_ld(i) + pc.c1 * t2_ld(i));
		} else if (OP == OP_SWIGLU) {
			float z = t1_ld(i);
			t0_st(i, z * sigmoid(z) * t2_ld(i));
		} else if (OP == OP_SWIGLU_BWD) {
			float y = t2_ld(i), z = t3_ld(i), v = t4_ld(i);
			float s = sigmoid(z);
			t0_st(i, y * v * s * (1.0 + z * (1.0 - s)));
			t1_st(i, y * z * s);
		} else if (OP == OP_ADAMW) {
			// c0 = 1 - lr wd, c1 = beta1, c2 = beta2, c3 = lr / (1 - beta1^t),
			// c4 = sqrt(1 - beta2^t), c5 = eps; per holds the bits of the
			// gradient scale (clipping's factor, 1 when none).
			float g = uintBitsToFloat(pc.per) * t1_ld(i);
			float m = pc.c1 * t2_ld(i) + (1.0 - pc.c1) * g;
			float v = pc.c2 * t3_ld(i) + (1.0 - pc.c2) * g * g;
			t2_st(i, m);
			t3_st(i, v);
			t0_st(i, t0_ld(i) * pc.c0 - pc.c3 * m / (sqrt(v) / pc.c4 + pc.c5));
		} else if (OP == OP_MUON_MOM) {
			// c1 scales the gradient (clipping's factor, 1 when none).
			float g = pc.c1 * t2_ld(i);
			float m = pc.c0 * t1_ld(i) + (1.0 - pc.c0) * g;
			t1_st(i, m);
			t0_st(i, pc.flag != 0u ? (1.0 - pc.c0) * g + pc.c0 * m : m);
		} else if (OP == OP_MUON_APPLY) {
			t0_st(i, t0_ld(i) * pc.c0 - pc.c1 * t1_ld(i));
		} else if (OP == OP_SCALE_BLOCKS) {
			t0_st(i, t1_ld(i) * t2_ld(i / pc.per));
		}
	}
}
