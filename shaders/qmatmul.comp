#version 450
// Weight-only int8 matrix-vector product for decoding (engine/vulkan/
// ops_quant.go, docs/ENGINE.md, "Weight-only int8"):
//
//	out[m, n] (+)= sum_k x[m, k] q[n, k] s[n, k / G]
//
// for the few rows of a decode step (M <= 8 a pass, from row m0), q int8
// [N, K] (bytes, little-endian in 32-bit words) and s f32 [N, ceil(K/G)].
// A decode step
// reads every weight once, so the product is bound by the weight's bytes,
// half of bf16's. A team of 32 invocations computes one output column:
// with FAST (K and G multiples of 16, or G >= K) each invocation loads 16
// weights as one 16-byte vector, which lie in one scale group, dots them
// with the same 16 elements of every row of x (small: it stays in the
// caches) and scales the sum by its group's scale; otherwise it reads
// weight by weight (any K, any G). The team's sums are reduced through
// shared memory in f32. A workgroup holds WG / 32 teams, one column each.
//
// NORM = 1 folds in the RMSNorm that precedes the products in a pre-norm
// block (engine.Int8NormLinear), as gemv.comp's NORM: with h = x rstd g
// (rstd = 1/sqrt(mean(x^2) + eps) per row, g [K] the norm weight GN),
// h W^T = rstd (x (g W)^T). Every workgroup first sums the squares of its
// M rows from x (the whole workgroup, reduced through shared memory), then
// multiplies each weight by g as it is read and scales the reduced sums by
// rstd, so h is never stored nor rounded.
#include "common.glsl"

layout(constant_id = 1) const uint NORM = 0; // h = RMSNorm(x, GN) in place of x

IN(0, X)
layout(std430, binding = 1) readonly buffer Q_W_ { uint Q_w[]; };
layout(std430, binding = 1) readonly buffer Q_V_ { uvec4 Q_v[]; };
layout(std430, binding = 2) readonly buffer S_F_ { float S[]; };
OUT(3, Y)
IN(4, GN) // the norm weight [K] (NORM; else unused)

layout(push_constant) uniform PC {
	uint M, m0; // this pass's rows: m0 .. m0 + M - 1 of x and out
	uint N, K, G, ng;
	uint accumulate, fast;
	float eps; // the norm's epsilon (NORM)
} pc;

const uint TEAM = 32u;

shared float red[8u * WG];

// rstd of each row of the pass (NORM).
shared float q_rstd[8];

// unpack4 sign-extends the four int8 of a word.
vec4 unpack4(uint w) {
	int v = int(w);
	return vec4(bitfieldExtract(v, 0, 8), bitfieldExtract(v, 8, 8), bitfieldExtract(v, 16, 8), bitfieldExtract(v, 24, 8));
}

// x4 loads x[i..i+3] as f32.
vec4 x4(uint i) { return vec4(X_ld(i), X_ld(i + 1u), X_ld(i + 2u), X_ld(i + 3u)); }

// g4 loads the norm weight's g[k..k+3] as f32.
vec4 g4(uint k) { return vec4(GN_ld(k), GN_ld(k + 1u), GN_ld(k + 2u), GN_ld(k + 3u)); }

// normRows writes q_rstd[m] = 1/sqrt(mean(x_m^2) + eps) for the pass's M
// rows: each invocation sums a strided share of every row, the workgroup
// reduces them through red (WG a power of two). Every invocation calls it
// (barriers).
void normRows(uint t, uint M, uint K) {
	PX_UNROLL for (uint m = 0u; m < 8u; m++) {
		float ss = 0.0;
		if (m < M) {
			for (uint k = t; k < K; k += WG) {
				float v = X_ld((pc.m0 + m) * K + k);
				ss = fma(v, v, ss);
			}
		}
		red[m * WG + t] = ss;
	}
	barrier();
	for (uint s = WG / 2u; s > 0u; s >>= 1u) {
		if (t < s) {
			PX_UNROLL for (uint m = 0u; m < 8u; m++) {
				red[m * WG + t] += red[m * WG + t + s];
			}
		}
		barrier();
	}
	if (t < 8u) {
		q_rstd[t] = 1.0 / sqrt(red[t * WG] / float(K) + pc.eps);
	}
	barrier();
}

void main() {
	uint t = gl_LocalInvocationID.x;
	uint lane = t % TEAM;
	uint n = px_group() * (WG / TEAM) + t / TEAM;
	uint M = pc.M, K = pc.K;
	if (NORM != 0u) {
		normRows(t, M, K);
	}
	float acc[8];
	PX_UNROLL for (uint m = 0u; m < 8u; m++) {
		acc[m] = 0.0;
	}
	if (n < pc.N) {
		if (pc.fast != 0u) {
			uint row4 = n * (K / 16u);
			for (uint k = lane * 16u; k < K; k += TEAM * 16u) {
				uvec4 v = Q_v[row4 + k / 16u];
				vec4 w0 = unpack4(v.x), w1 = unpack4(v.y), w2 = unpack4(v.z), w3 = unpack4(v.w);
				float sc = S[n * pc.ng + k / pc.G];
				if (NORM != 0u) {
					w0 *= g4(k);
					w1 *= g4(k + 4u);
					w2 *= g4(k + 8u);
					w3 *= g4(k + 12u);
				}
				PX_UNROLL for (uint m = 0u; m < 8u; m++) {
					if (m < M) {
						uint i = (pc.m0 + m) * K + k;
						float p = dot(x4(i), w0) + dot(x4(i + 4u), w1) + dot(x4(i + 8u), w2) + dot(x4(i + 12u), w3);
						acc[m] += sc * p;
					}
				}
			}
		} else {
			for (uint k = lane; k < K; k += TEAM) {
				uint idx = n * K + k;
				float wv = float(bitfieldExtract(int(Q_w[idx >> 2]), int((idx & 3u) * 8u), 8)) * S[n * pc.ng + k / pc.G];
				if (NORM != 0u) {
					wv *= GN_ld(k);
				}
				PX_UNROLL for (uint m = 0u; m < 8u; m++) {
					if (m < M) {
						acc[m] += X_ld((pc.m0 + m) * K + k) * wv;
					}
				}
			}
		}
	}
	PX_UNROLL for (uint m = 0u; m < 8u; m++) {
		red[m * WG + t] = acc[m];
	}
	barrier();
	for (uint s = TEAM / 2u; s > 0u; s >>= 1u) {
		if (lane < s) {
			PX_UNROLL for (uint m = 0u; m < 8u; m++) {
				if (m < M) {
					red[m * WG + t] += red[m * WG + t + s];
				}
			}
		}
		barrier();
	}
	if (lane == 0u && n < pc.N) {
		for (uint m = 0u; m < M; m++) {
			uint o = (pc.m0 + m) * pc.N + n;
			float v = red[m * WG + t];
			if (NORM != 0u) {
				v *= q_rstd[m];
			}
			if (pc.accumulate != 0u) {
				v += Y_ld(o);
			}
			Y_st(o, v);
		}
	}
}
