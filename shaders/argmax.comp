#version 450
// Greedy sampling on the device: ids[r] = the first index of the largest
// of the first C values of row r of x [rows, W] (-1 for a row holding a
// NaN among them).
//
//   MODE 0: one workgroup per row takes the whole row.
//   MODE 1: workgroup (row, part) takes columns [part L, (part + 1) L) of
//           its row (L = 4 WG: four loads per invocation, issued together)
//           and writes its best (value, index, NaN flag) to parts.
//   MODE 2: one workgroup per row combines the row's P parts.
//
// Each invocation keeps its best (value, index); a shared-memory tree then
// keeps the larger value, and the lower index among equal ones, so ties go
// to the lowest index whatever the order of the walk. A vocabulary-sized
// row (50k logits) is a few hundred kilobytes: one workgroup walking it
// alone took 60 us on the H200, the two passes take a few.
#include "common.glsl"

layout(constant_id = 1) const uint MODE = 0;

IN(0, X)
layout(std430, binding = 1) buffer Ids_ { int ids[]; };
layout(std430, binding = 2) buffer Parts_ { uint parts[]; }; // [row][part][value bits, index, NaN]

layout(push_constant) uniform PC {
	uint W, C, rows, P;
} pc;

shared float sv[WG];
shared uint si[WG];
shared uint sn[WG];

const uint NONE = 0xffffffffu;

// better reports whether (v, i) beats (bv, bi): a larger value, or an
// equal one at a lower index (a missing entry, index NONE, loses to any).
bool better(float v, uint i, float bv, uint bi) {
	return i != NONE && (bi == NONE || v > bv || (v == bv && i < bi));
}

void main() {
	uint t = gl_LocalInvocationID.x;
	uint g = px_group();
	uint row = MODE == 1u ? g / pc.P : g;
	if (row >= pc.rows) {
		return;
	}
	float bv = PX_NEG_INF;
	uint bi = NONE, nan = 0u;
	if (MODE == 0u) {
		for (uint c = t; c < pc.C; c += WG) {
			float v = X_ld(row * pc.W + c);
			if (isnan(v)) {
				nan = 1u;
			} else if (better(v, c, bv, bi)) {
				bv = v;
				bi = c;
			}
		}
	} else if (MODE == 1u) {
		uint lo = (g % pc.P) * 4u * WG;
		float v0 = PX_NEG_INF, v1 = PX_NEG_INF, v2 = PX_NEG_INF, v3 = PX_NEG_INF;
		uint c0 = lo + t, c1 = c0 + WG, c2 = c1 + WG, c3 = c2 + WG;
		if (c0 < pc.C) {
			v0 = X_ld(row * pc.W + c0);
		}
		if (c1 < pc.C) {
			v1 = X_ld(row * pc.W + c1);
		}
		if (c2 < pc.C) {
			v2 = X_ld(row * pc.W + c2);
		}
		if (c3 < pc.C) {
			v3 = X_ld(row * pc.W + c3);
		}
		nan = uint(isnan(v0) || isnan(v1) || isnan(v2) || isnan(v3));
		// In column order, so the first of equal values stays.
		if (c0 < pc.C && better(v0, c0, bv, bi)) {
			bv = v0;
			bi = c0;
		}
		if (c1 < pc.C && better(v1, c1, bv, bi)) {
			bv = v1;
			bi = c1;
		}
		if (c2 < pc.C && better(v2, c2, bv, bi)) {
			bv = v2;
			bi = c2;
		}
		if (c3 < pc.C && better(v3, c3, bv, bi)) {
			bv = v3;
			bi = c3;
		}
	} else {
		for (uint p = t; p < pc.P; p += WG) {
			uint e = 3u * (row * pc.P + p);
			uint i = parts[e + 1u];
			float v = uintBitsToFloat(parts[e]);
			nan |= parts[e + 2u];
			if (better(v, i, bv, bi)) {
				bv = v;
				bi = i;
			}
		}
	}
	sv[t] = bv;
	si[t] = bi;
	sn[t] = nan;
	barrier();
	for (uint s = WG >> 1; s > 0u; s >>= 1) {
		if (t < s) {
			if (better(sv[t + s], si[t + s], sv[t], si[t])) {
				sv[t] = sv[t + s];
				si[t] = si[t + s];
			}
			sn[t] |= sn[t + s];
		}
		barrier();
	}
	if (t == 0u) {
		if (MODE == 1u) {
			parts[3u * g] = floatBitsToUint(sv[0]);
			parts[3u * g + 1u] = si[0];
			parts[3u * g + 2u] = sn[0];
		} else {
			ids[row] = sn[0] != 0u ? -1 : (si[0] == NONE ? 0 : int(si[0]));
		}
	}
}
