#version 450
// Strided copy with conversion: element i of src, a [d0, d1, d2, d3]
// array, goes to dst[base + i0 s0 + i1 s1 + i2 s2 + i3 s3]. Cast (identity
// strides), SwapAxes12 and KVAppend are this kernel. Equal dtypes copy raw
// bits (exact for every dtype, i32 included); otherwise the value is
// converted through f32 (rounded to nearest even; to i32 truncated and
// saturated).
#include "common.glsl"


IN(0, src)
OUT(1, dst)

layout(push_constant) uniform PC {
	uint n;
	uint d1, d2, d3;
	uint s0, s1, s2, s3;
	uint base;
} pc;

void main() {
	uint stride = WG * px_groups();
	for (uint i = WG * px_group() + gl_LocalInvocationID.x; i < pc.n; i += stride) {
		uint e = i % pc.d3;
		uint t = i / pc.d3;
		uint c = t % pc.d2;
		t /= pc.d2;
		uint b = t % pc.d1;
		uint a = t / pc.d1;
		uint o = pc.base + a * pc.s0 + b * pc.s1 + c * pc.s2 + e * pc.s3;
		if (src_dt == dst_dt) {
			dst_strw(o, src_raw(i));
		} else {
			dst_st(o, src_ld(i));
		}
	}
}
