#version 450
// Split-KV combine: merges each row's S partial states (m, d1, d2, O1, O2)
// exactly (each rescaled by w_s = exp(m_s - max m)) and finishes the output
// as attn_fwd does. One workgroup per row; sequences whose length failed
// the decode check are skipped (the decode kernel raised the error).
//
// Decode of a few long sequences splits each row hundreds of ways, so the
// splits are spread over the invocations: the max and the weighted sums
// d1, d2 are reductions over the workgroup (WG a power of two), and the
// weights of up to CH splits at a time are kept in shared memory for the
// columns' sums, whose loads are then independent of one another.
#include "common.glsl"
#include "attn.glsl"

layout(constant_id = 1) const uint D = 64;
layout(constant_id = 5) const uint HAS_R = 0;

F32BUF(0, part)
OUT(1, O)
INDEX(2, lens)

const uint CH = 256u;
shared float sW[CH];
shared float sRed[WG];
shared float sRed2[WG];
shared float sAcc[2u * D];

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
	uint t = gl_LocalInvocationID.x;
	uint S = pc.splits, PS = 3u + 2u * D;
	uint base = row * S * PS;

	// M = the largest m of the splits with weight (d1 != 0: positive, or
	// NaN from a NaN or +inf score, which must reach the output); NaN if
	// any m is.
	float M = PX_NEG_INF;
	for (uint s = t; s < S; s += WG) {
		if (part[base + s * PS + 1u] != 0.0) {
			M = px_max(M, part[base + s * PS]);
		}
	}
	sRed[t] = M;
	barrier();
	for (uint h = WG / 2u; h > 0u; h >>= 1u) {
		if (t < h) {
			sRed[t] = px_max(sRed[t], sRed[t + h]);
		}
		barrier();
	}
	M = sRed[0];
	barrier();

	float l1 = 0.0, l2 = 0.0;
	for (uint c0 = 0u; c0 < S; c0 += CH) {
		uint nc = min(CH, S - c0);
		for (uint s = t; s < nc; s += WG) {
			uint ps = base + (c0 + s) * PS;
			float ds = part[ps + 1u], w = 0.0;
			if (ds != 0.0) {
				w = exp(part[ps] - M);
				l1 += w * ds;
				l2 += w * part[ps + 2u];
			}
			sW[s] = w;
		}
		barrier();
		for (uint x = t; x < D; x += WG) {
			float a1 = c0 == 0u ? 0.0 : sAcc[x];
			float a2 = c0 == 0u ? 0.0 : sAcc[D + x];
			// Four splits per step, their loads issued together: the loop
			// is bound by load latency, not bandwidth. A split without
			// keys has weight 0 and zero accumulators (the decode kernels
			// write every partial state of a valid sequence).
			uint s = 0u;
			for (; s + 4u <= nc; s += 4u) {
				uint p = base + (c0 + s) * PS + 3u + x;
				vec4 u = vec4(part[p], part[p + PS], part[p + 2u * PS], part[p + 3u * PS]);
				vec4 v = vec4(part[p + D], part[p + PS + D], part[p + 2u * PS + D], part[p + 3u * PS + D]);
				vec4 w = vec4(sW[s], sW[s + 1u], sW[s + 2u], sW[s + 3u]);
				a1 += dot(w, u);
				a2 += dot(w, v);
			}
			for (; s < nc; s++) {
				uint p = base + (c0 + s) * PS + 3u + x;
				a1 += sW[s] * part[p];
				a2 += sW[s] * part[p + D];
			}
			sAcc[x] = a1; // column x is this invocation's alone
			sAcc[D + x] = a2;
		}
		barrier();
	}
	sRed[t] = l1;
	sRed2[t] = l2;
	barrier();
	for (uint h = WG / 2u; h > 0u; h >>= 1u) {
		if (t < h) {
			sRed[t] += sRed[t + h];
			sRed2[t] += sRed2[t + h];
		}
		barrier();
	}
	// A valid sequence's rows see at least one key: d1 = 0 means every
	// score was -inf, and 0/0 = NaN is the answer, as exp(-inf - -inf) is.
	float d1 = sRed[0], d2 = sRed2[0];
	for (uint x = t; x < D; x += WG) {
		float vb = sAcc[x] / d1;
		float o = HAS_R != 0u ? vb * (1.0 + d2 / d1) - sAcc[D + x] / d1 : vb;
		O_st(row * D + x, o);
	}
}
