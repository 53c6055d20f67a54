#version 450
// Embedding gather: out[n, :] = table[ids[n], :] (raw bits when the dtypes
// match). An id outside [0, V) raises an error for Sync; its row is left
// untouched.
#include "common.glsl"


IN(0, table)
INDEX(1, ids)
OUT(2, y)
STATUS(3)

layout(push_constant) uniform PC {
	uint n; // ids
	uint d;
	uint V;
} pc;

void main() {
	uint total = pc.n * pc.d;
	uint stride = WG * px_groups();
	for (uint e = WG * px_group() + gl_LocalInvocationID.x; e < total; e += stride) {
		uint row = e / pc.d, x = e % pc.d;
		int id = ids[row];
		if (id < 0 || uint(id) >= pc.V) {
			if (x == 0u) {
				px_raise(PX_ERR_ID_RANGE, row, uint(id), pc.V, 0u);
			}
			continue;
		}
		uint src = uint(id) * pc.d + x;
		if (table_dt == y_dt) {
			y_strw(e, table_raw(src));
		} else {
			y_st(e, table_ld(src));
		}
	}
}
