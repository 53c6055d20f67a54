#version 450
// Matrix-vector products for decoding: out_i[m, n] (+)= sum_k x[m, k] W_i[n, k]
// for the few activation rows m of a decode step (ROWS <= 8) against up to
// four weights W_i [N_i, K] in the model's layout (a linear layer's
// x W^T), or the SwiGLU of two: act[m, n] = silu(x Wg^T) * (x Wu^T).
//
// A decode step reads every weight once, so a product is bound by the
// weight's bytes. One subgroup computes one output column at a time: its
// invocations stream the weight row with 16-byte loads (8 halves or, for
// f32, 8 floats as two loads), four loads in flight per invocation, each
// piece multiplied against the same 8 elements of every activation row
// (x is small and stays in the caches), and the column's sums are reduced
// across the subgroup in f32 (subgroupAdd). The host sizes a workgroup's
// CPW columns for the device's smallest subgroup; a wider subgroup takes
// several of them in turn. Workgroup g belongs to one weight: weight i
// owns the groups [first[i], first[i+1]).
//
// VEC = 1 needs K % 8 == 0 and every element offset a multiple of 8 (the
// host checks); VEC = 0 loads element by element (any K, any offset).
// Accumulation is f32 throughout: 16-bit inputs widen exactly (so their
// products are exact in f32), and each product enters its sum through one
// FMA. A NaN or an infinity propagates as IEEE arithmetic puts it: no
// element is skipped or padded.
//
// NORM = 1 folds in the RMSNorm that precedes the products in a pre-norm
// block (engine.NormLinear): with h = x rstd g (rstd = 1/sqrt(mean(x^2) +
// eps) per row, g [K] the norm weight G), h W^T = rstd (x (g W)^T). Every
// workgroup first sums the squares of its ROWS rows of x (a subgroup a row,
// f32) into shared memory, multiplies each weight piece by g as it arrives
// and scales the reduced sums by rstd, so h is never stored nor rounded.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"

layout(constant_id = 1) const uint ROWS = 1;   // activation rows, 1..8
layout(constant_id = 2) const uint NWT = 1;    // weights, 1..4 (SWIGLU: 2, gate and up)
layout(constant_id = 3) const uint SWIGLU = 0; // act = silu(x W0^T) * (x W1^T) into O0
layout(constant_id = 4) const uint VEC = 1;    // 16-byte loads
layout(constant_id = 5) const uint CPW = 8;    // output columns per workgroup
layout(constant_id = 6) const uint NORM = 0;   // h = RMSNorm(x, G) in place of x

IN(0, X)
IN(1, W0)
IN(2, W1)
IN(3, W2)
IN(4, W3)
OUT(5, O0)
OUT(6, O1)
OUT(7, O2)
OUT(8, O3)
IN(9, G) // the norm weight [K] (NORM; else unused)

// 16-byte views of x and the weights (aliases of bindings 0-4).
layout(std430, binding = 0) readonly buffer X4_ { uvec4 X4[]; };
layout(std430, binding = 1) readonly buffer W04_ { uvec4 W04[]; };
layout(std430, binding = 2) readonly buffer W14_ { uvec4 W14[]; };
layout(std430, binding = 3) readonly buffer W24_ { uvec4 W24[]; };
layout(std430, binding = 4) readonly buffer W34_ { uvec4 W34[]; };
layout(std430, binding = 9) readonly buffer G4_ { uvec4 G4[]; };

layout(push_constant) uniform PC {
	uint K, accumulate, xoff, groups;
	uvec4 n;     // columns of each weight
	uvec4 first; // first workgroup of each weight (first.x = 0)
	uvec4 woff;  // element offset of each weight
	uvec4 ooff;  // element offset of each output
	float eps;   // the norm's epsilon (NORM)
} pc;

// rstd of each activation row (NORM).
shared float gv_rstd[8];

bool is16(uint dt) { return dt == DT_BF16 || dt == DT_F16; }

// Every weight has W0's dtype and every output O0's (the host checks).
uint wdt(uint i) { return W0_dt; }

uvec4 wpiece(uint i, uint p) {
	if (i == 0u) {
		return W04[p];
	}
	if (i == 1u) {
		return W14[p];
	}
	if (i == 2u) {
		return W24[p];
	}
	return W34[p];
}

float wld(uint i, uint e) {
	if (i == 0u) {
		return W0_ld(e);
	}
	if (i == 1u) {
		return W1_ld(e);
	}
	if (i == 2u) {
		return W2_ld(e);
	}
	return W3_ld(e);
}

float old(uint i, uint e) {
	if (i == 0u) {
		return O0_ld(e);
	}
	if (i == 1u) {
		return O1_ld(e);
	}
	if (i == 2u) {
		return O2_ld(e);
	}
	return O3_ld(e);
}

void ost(uint i, uint e, float v) {
	if (i == 0u) {
		O0_st(e, v);
	} else if (i == 1u) {
		O1_st(e, v);
	} else if (i == 2u) {
		O2_st(e, v);
	} else {
		O3_st(e, v);
	}
}

// unpack8 widens 8 elements held in a (16-bit dtypes) or in a and b (f32)
// to f32: element 2j in the low half of word j, 2j+1 in its high half.
void unpack8(uint dt, uvec4 a, uvec4 b, out vec4 lo, out vec4 hi) {
	if (dt == DT_BF16) {
		lo = uintBitsToFloat(uvec4(a.x << 16, a.x & 0xffff0000u, a.y << 16, a.y & 0xffff0000u));
		hi = uintBitsToFloat(uvec4(a.z << 16, a.z & 0xffff0000u, a.w << 16, a.w & 0xffff0000u));
	} else if (dt == DT_F16) {
		lo = vec4(unpackHalf2x16(a.x), unpackHalf2x16(a.y));
		hi = vec4(unpackHalf2x16(a.z), unpackHalf2x16(a.w));
	} else {
		lo = uintBitsToFloat(a);
		hi = uintBitsToFloat(b);
	}
}

// x8 returns elements 8u .. 8u+7 of activation row m.
void x8(uint m, uint u, out vec4 lo, out vec4 hi) {
	uint e = pc.xoff + m * pc.K + 8u * u;
	uvec4 a, b = uvec4(0u);
	if (is16(X_dt)) {
		a = X4[e >> 3];
	} else {
		a = X4[e >> 2];
		b = X4[(e >> 2) + 1u];
	}
	unpack8(X_dt, a, b, lo, hi);
}

// g8 returns elements 8u .. 8u+7 of the norm weight.
void g8(uint u, out vec4 lo, out vec4 hi) {
	uint e = 8u * u;
	uvec4 a, b = uvec4(0u);
	if (is16(G_dt)) {
		a = G4[e >> 3];
	} else {
		a = G4[e >> 2];
		b = G4[(e >> 2) + 1u];
	}
	unpack8(G_dt, a, b, lo, hi);
}

// normRows writes gv_rstd[m] = 1/sqrt(mean(x_m^2) + eps) for the ROWS
// rows (subgroup s sums rows s, s + NumSubgroups, ...) and synchronises
// the workgroup. Every invocation calls it (a barrier).
void normRows() {
	uint lane = gl_SubgroupInvocationID, S = gl_SubgroupSize, K = pc.K;
	for (uint m = gl_SubgroupID; m < ROWS; m += gl_NumSubgroups) {
		vec4 a = vec4(0.0);
		if (VEC != 0u) {
			for (uint u = lane; u < (K >> 3); u += S) {
				vec4 lo, hi;
				x8(m, u, lo, hi);
				a = fma(lo, lo, a);
				a = fma(hi, hi, a);
			}
		} else {
			for (uint k = lane; k < K; k += S) {
				float v = X_ld(pc.xoff + m * K + k);
				a.x = fma(v, v, a.x);
			}
		}
		float ss = subgroupAdd((a.x + a.y) + (a.z + a.w));
		if (lane == 0u) {
			gv_rstd[m] = 1.0 / sqrt(ss / float(K) + pc.eps);
		}
	}
	barrier();
}

// The invocation's partial sums of the current column: acc[m] for row m of
// weight i (SWIGLU: the gate), accU[m] the up weight's. Indexed only by
// unrolled loops with literal bounds, so they stay in registers.
vec4 acc[8], accU[8];

// GEMV_LOAD(j, A, B) loads piece j of the step (of weight i, or with
// SWIGLU pieces 0-1 of the gate and 2-3 of up) into A (and B for f32);
// GEMV_FMA(j, A, B) multiplies it into every row's sums.
#define GEMV_LOAD(j, A, B)                                       \
	uvec4 A = uvec4(0u), B = uvec4(0u);                          \
	{                                                            \
		uint wi = SWIGLU != 0u ? (j) / PER : i;                  \
		uint u = u0 + S * ((j) % PER);                           \
		if (u < units) {                                         \
			uint e = pc.woff[wi] + n * K + 8u * u;               \
			if (is16(wdt(wi))) {                                 \
				A = wpiece(wi, e >> 3);                          \
			} else {                                             \
				A = wpiece(wi, e >> 2);                          \
				B = wpiece(wi, (e >> 2) + 1u);                   \
			}                                                    \
		}                                                        \
	}
#define GEMV_FMA(j, A, B)                                        \
	{                                                            \
		uint u = u0 + S * ((j) % PER);                           \
		if (u < units) {                                         \
			vec4 wl, wh;                                         \
			unpack8(W0_dt, A, B, wl, wh);                        \
			if (NORM != 0u) {                                    \
				vec4 nl, nh;                                     \
				g8(u, nl, nh);                                   \
				wl *= nl;                                        \
				wh *= nh;                                        \
			}                                                    \
			PX_UNROLL for (uint m = 0u; m < 8u; m++) {           \
				if (m < ROWS) {                                  \
					vec4 xl, xh;                                 \
					x8(m, u, xl, xh);                            \
					if (SWIGLU != 0u && (j) >= PER) {            \
						accU[m] = fma(xl, wl, accU[m]);          \
						accU[m] = fma(xh, wh, accU[m]);          \
					} else {                                     \
						acc[m] = fma(xl, wl, acc[m]);            \
						acc[m] = fma(xh, wh, acc[m]);            \
					}                                            \
				}                                                \
			}                                                    \
		}                                                        \
	}

// column accumulates column n of weight i (SWIGLU: of weights 0 and 1)
// into acc and accU: invocation lane takes the 16-byte pieces lane,
// lane + S, ... of the row, four loads in flight.
void column(uint i, uint n, uint lane, uint S) {
	PX_UNROLL for (uint m = 0u; m < 8u; m++) {
		acc[m] = vec4(0.0);
		accU[m] = vec4(0.0);
	}
	uint K = pc.K;
	// Four pieces per step: of weight i, or two of the gate and two of up.
	const uint PER = SWIGLU != 0u ? 2u : 4u;
	if (VEC != 0u) {
		uint units = K >> 3;
		for (uint u0 = lane; u0 < units; u0 += S * PER) {
			// Named registers, not arrays: every load is issued before the
			// first product (see attn_decode.comp).
			GEMV_LOAD(0u, wa0, wb0)
			GEMV_LOAD(1u, wa1, wb1)
			GEMV_LOAD(2u, wa2, wb2)
			GEMV_LOAD(3u, wa3, wb3)
			GEMV_FMA(0u, wa0, wb0)
			GEMV_FMA(1u, wa1, wb1)
			GEMV_FMA(2u, wa2, wb2)
			GEMV_FMA(3u, wa3, wb3)
		}
	} else {
		// Element by element (the fallback: any K, any offset).
		for (uint k = lane; k < K; k += S) {
			float w = wld(i, pc.woff[i] + n * K + k);
			float wu = SWIGLU != 0u ? wld(1u, pc.woff[1] + n * K + k) : 0.0;
			if (NORM != 0u) {
				float gn = G_ld(k);
				w *= gn;
				wu *= gn;
			}
			PX_UNROLL for (uint m = 0u; m < 8u; m++) {
				if (m < ROWS) {
					float xv = X_ld(pc.xoff + m * K + k);
					acc[m].x = fma(xv, w, acc[m].x);
					if (SWIGLU != 0u) {
						accU[m].x = fma(xv, wu, accU[m].x);
					}
				}
			}
		}
	}
}

float sigmoid(float z) { return 1.0 / (1.0 + exp(-z)); }

// finish reduces the column's sums across the subgroup and stores them:
// invocation m of the subgroup stores row m.
void finish(uint i, uint n, uint lane) {
	float mine = 0.0;
	PX_UNROLL for (uint m = 0u; m < 8u; m++) {
		if (m < ROWS) {
			vec4 a = acc[m];
			float s = subgroupAdd((a.x + a.y) + (a.z + a.w));
			if (NORM != 0u) {
				s *= gv_rstd[m];
			}
			if (SWIGLU != 0u) {
				vec4 b = accU[m];
				float su = subgroupAdd((b.x + b.y) + (b.z + b.w));
				if (NORM != 0u) {
					su *= gv_rstd[m];
				}
				s = s * sigmoid(s) * su;
			}
			if (lane == m) {
				mine = s;
			}
		}
	}
	if (lane < ROWS) {
		uint e = pc.ooff[i] + lane * pc.n[i] + n;
		if (SWIGLU == 0u && pc.accumulate != 0u) {
			mine += old(i, e);
		}
		ost(i, e, mine);
	}
}

// block computes the columns of workgroup block nb of weight i.
void block(uint i, uint nb) {
	uint lane = gl_SubgroupInvocationID, S = gl_SubgroupSize;
	uint N = pc.n[i];
	for (uint c = gl_SubgroupID; c < CPW; c += gl_NumSubgroups) {
		uint n = nb * CPW + c;
		if (n >= N) {
			break;
		}
		column(i, n, lane, S);
		finish(i, n, lane);
	}
}

void main() {
	if (NORM != 0u) {
		normRows(); // before the return below: every invocation reaches its barrier
	}
	uint g = px_group();
	if (g >= pc.groups) {
		return;
	}
	// The weight of this workgroup (uniform; a constant with one weight).
	uint i = 0u;
	if (NWT > 1u && SWIGLU == 0u) {
		i = g >= pc.first.w ? 3u : g >= pc.first.z ? 2u : g >= pc.first.y ? 1u : 0u;
		i = min(i, NWT - 1u);
	}
	block(i, g - pc.first[i]);
}
