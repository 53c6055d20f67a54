#version 450
// KV append at per-sequence starts: x [B, H, n, D] goes into cache
// [B, H, Cap, D] at positions starts[b].. of sequence b (raw bits when the
// dtypes match, else converted through f32). A start outside [0, Cap - n]
// writes nothing for its sequence and raises PX_ERR_KV_RANGE (sequence,
// start, Cap).
#include "common.glsl"


IN(0, x)
INDEX(1, starts)
OUT(2, cache)
STATUS(3)

layout(push_constant) uniform PC {
	uint total; // B H n D
	uint H, n, D, cap;
} pc;

void main() {
	uint stride = WG * px_groups();
	for (uint i = WG * px_group() + gl_LocalInvocationID.x; i < pc.total; i += stride) {
		uint e = i % pc.D;
		uint r = i / pc.D;
		uint p = r % pc.n;
		uint bh = r / pc.n;
		uint b = bh / pc.H;
		int s = starts[b];
		if (s < 0 || uint(s) + pc.n > pc.cap) {
			if (e == 0u && p == 0u && bh % pc.H == 0u) {
				px_raise(PX_ERR_KV_RANGE, b, uint(s), pc.cap, 0u);
			}
			continue;
		}
		uint o = (bh * pc.cap + uint(s) + p) * pc.D + e;
		if (x_dt == cache_dt) {
			cache_strw(o, x_raw(i));
		} else {
			cache_st(o, x_ld(i));
		}
	}
}
