#version 450
// Split-KV combine: merges each row's S partial states (m, d1, d2, O1, O2)
// exactly (each rescaled by exp(m_s - max m)) and finishes the output as
// attn_fwd does. One workgroup per row; sequences whose length failed the
// decode check are skipped (attn_fwd raised the error).
#include "common.glsl"
#include "attn.glsl"

layout(constant_id = 1) const uint D = 64;
layout(constant_id = 5) const uint HAS_R = 0;

F32BUF(0, part)
OUT(1, O)
INDEX(2, lens)

void main() {
	uint row = px_group();
	uint rows = pc.B * pc.Hq * pc.Lq;
	if (row >= rows) {
		return;
	}
	uint b = row / (pc.Hq * pc.Lq);
	int nb = lens[b];
	if (nb < int(pc.Lq) || nb > int(pc.Lk)) {
		return;
	}
	uint S = pc.splits, PS = 3u + 2u * D;
	uint base = row * S * PS;
	float M = PX_NEG_INF;
	for (uint s = 0u; s < S; s++) {
		if (part[base + s * PS + 1u] > 0.0) {
			M = max(M, part[base + s * PS]);
		}
	}
	float d1 = 0.0, d2 = 0.0;
	if (M != PX_NEG_INF) {
		for (uint s = 0u; s < S; s++) {
			float ds = part[base + s * PS + 1u];
			if (ds > 0.0) {
				float w = exp(part[base + s * PS] - M);
				d1 += w * ds;
				d2 += w * part[base + s * PS + 2u];
			}
		}
	}
	for (uint x = gl_LocalInvocationID.x; x < D; x += WG) {
		float o = 0.0;
		if (d1 > 0.0) {
			float a1 = 0.0, a2 = 0.0;
			for (uint s = 0u; s < S; s++) {
				uint ps = base + s * PS;
				if (part[ps + 1u] > 0.0) {
					float w = exp(part[ps] - M);
					a1 += w * part[ps + 3u + x];
					a2 += w * part[ps + 3u + D + x];
				}
			}
			float vb = a1 / d1;
			o = HAS_R != 0u ? vb * (1.0 + d2 / d1) - a2 / d1 : vb;
		}
		O_st(row * D + x, o);
	}
}
