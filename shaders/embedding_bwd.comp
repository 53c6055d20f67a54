#version 450
// Embedding backward, deterministic and without float atomics: workgroup n
// handles token n only if it is the first occurrence of its id; it then
// adds the dOut rows of every occurrence m >= n of that id, in order, to
// dTable[id] (read once, stored once, f32 in between). Out-of-range ids
// raise an error for Sync and are skipped.
#include "common.glsl"


OUT(0, dtable)
INDEX(1, ids)
IN(2, dy)
STATUS(3)

layout(push_constant) uniform PC {
	uint n;
	uint d;
	uint V;
} pc;

shared uint seen;

void main() {
	uint n = px_group();
	if (n >= pc.n) {
		return;
	}
	uint t = gl_LocalInvocationID.x;
	int id = ids[n];
	if (id < 0 || uint(id) >= pc.V) {
		if (t == 0u) {
			px_raise(PX_ERR_ID_RANGE, n, uint(id), pc.V, 1u);
		}
		return;
	}
	if (t == 0u) {
		seen = 0u;
	}
	barrier();
	for (uint m = t; m < n; m += WG) {
		if (ids[m] == id) {
			atomicOr(seen, 1u);
		}
	}
	barrier();
	if (seen != 0u) {
		return; // an earlier token owns this id
	}
	uint base = uint(id) * pc.d;
	for (uint x = t; x < pc.d; x += WG) {
		float acc = dtable_ld(base + x);
		for (uint m = n; m < pc.n; m++) {
			if (ids[m] == id) {
				acc += dy_ld(m * pc.d + x);
			}
		}
		dtable_st(base + x, acc);
	}
}
