#version 450
// Dequantized rows of a weight-only int8 matrix (engine/vulkan/
// ops_quant.go): out[r, c] = q[src, c] s[src, c / G], src = ids[r] (HAS_IDS)
// or r, computed in f32 and rounded to out's dtype. It is EmbeddingInt8
// (the tied embedding's lookup) and, over every row, the dequantized copy
// that products of many rows multiply with MatMul. An id outside [0, N)
// raises an error for Sync; its row is left untouched.
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Q_W_ { uint Q_w[]; };
layout(std430, binding = 1) readonly buffer S_F_ { float S[]; };
INDEX(2, ids)
OUT(3, Y)
STATUS(4)

layout(push_constant) uniform PC {
	uint rows, N, K, G, ng;
	uint hasIDs;
} pc;

void main() {
	uint total = pc.rows * pc.K;
	uint stride = WG * px_groups();
	for (uint e = WG * px_group() + gl_LocalInvocationID.x; e < total; e += stride) {
		uint r = e / pc.K, c = e % pc.K;
		uint src = r;
		if (pc.hasIDs != 0u) {
			int id = ids[r];
			if (id < 0 || uint(id) >= pc.N) {
				if (c == 0u) {
					px_raise(PX_ERR_ID_RANGE, r, uint(id), pc.N, 0u);
				}
				continue;
			}
			src = uint(id);
		}
		uint idx = src * pc.K + c;
		float q = float(bitfieldExtract(int(Q_w[idx >> 2]), int((idx & 3u) * 8u), 8));
		Y_st(e, q * S[src * pc.ng + c / pc.G]);
	}
}
