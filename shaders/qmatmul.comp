#version 450
// Weight-only int8 matrix-vector products for decoding (engine/vulkan/
// ops_quant.go, docs/ENGINE.md, "Weight-only int8"):
//
//	out_i[m, n] (+)= sum_k x[m, k] q_i[n, k] s_i[n, k / G]
//
// for the few rows m of a decode step (ROWS <= 8) against up to four int8
// weights q_i [N_i, K] (bytes, little-endian in 32-bit words) with their
// f32 scales s_i [N_i, ceil(K/G)], or the SwiGLU of two:
// act[m, n] = silu(x Wg^T) * (x Wu^T). It is gemv.comp for int8 weights:
// a decode step reads every weight once, so a product is bound by the
// weight's bytes, half of bf16's.
//
// One subgroup computes one output column at a time: its invocations
// stream the weight row with 16-byte loads (16 int8 weights, which lie in
// one scale group when G is a multiple of 16 or G >= K), four loads in
// flight per invocation (two of the gate and two of up with SWIGLU),
// convert them to f32 exactly (i8x4), dot each piece with the same 16
// elements of every row of x (small: it stays in the caches), scale the
// 16-term sum by its group's scale and add it to the row's f32 sum; the
// column's sums are reduced across the subgroup (subgroupAdd). The host
// sizes a workgroup's CPW columns for the device's smallest subgroup; a
// wider subgroup takes several of them in turn. Workgroup g belongs to
// one weight: weight i owns the groups [first[i], first[i+1]).
//
// VEC = 1 needs K % 16 == 0 and G % 16 == 0 or G >= K (the host checks);
// VEC = 0 reads weight by weight (any K, any G), the dequantized weight
// q s rounded to f32. A NaN or an infinity in x propagates as IEEE
// arithmetic puts it: no element is skipped or padded.
//
// NORM = 1 folds in the RMSNorm that precedes the products in a pre-norm
// block (engine.Int8NormLinear), as gemv.comp's NORM: with h = x rstd g
// (rstd = 1/sqrt(mean(x^2) + eps) per row, g [K] the norm weight GN),
// h W^T = rstd (x (g W)^T). Every workgroup first sums the squares of its
// ROWS rows of x (a subgroup a row, f32) into shared memory, multiplies
// each converted weight by g and scales the reduced sums by rstd, so h is
// never stored nor rounded.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"

layout(constant_id = 1) const uint ROWS = 1;   // activation rows, 1..8
layout(constant_id = 2) const uint NWT = 1;    // weights, 1..4 (SWIGLU: 2, gate and up)
layout(constant_id = 3) const uint SWIGLU = 0; // act = silu(x W0^T) * (x W1^T) into O0
layout(constant_id = 4) const uint VEC = 1;    // 16-byte loads
layout(constant_id = 5) const uint CPW = 8;    // output columns per workgroup
layout(constant_id = 6) const uint NORM = 0;   // h = RMSNorm(x, GN) in place of x

IN(0, X)
// The int8 weights, as words (VEC = 0) and as 16-byte pieces.
layout(std430, binding = 1) readonly buffer Q0W_ { uint Q0w[]; };
layout(std430, binding = 2) readonly buffer Q1W_ { uint Q1w[]; };
layout(std430, binding = 3) readonly buffer Q2W_ { uint Q2w[]; };
layout(std430, binding = 4) readonly buffer Q3W_ { uint Q3w[]; };
layout(std430, binding = 1) readonly buffer Q0V_ { uvec4 Q0v[]; };
layout(std430, binding = 2) readonly buffer Q1V_ { uvec4 Q1v[]; };
layout(std430, binding = 3) readonly buffer Q2V_ { uvec4 Q2v[]; };
layout(std430, binding = 4) readonly buffer Q3V_ { uvec4 Q3v[]; };
// Their scales.
layout(std430, binding = 5) readonly buffer S0_ { float S0[]; };
layout(std430, binding = 6) readonly buffer S1_ { float S1[]; };
layout(std430, binding = 7) readonly buffer S2_ { float S2[]; };
layout(std430, binding = 8) readonly buffer S3_ { float S3[]; };
OUT(9, O0)
OUT(10, O1)
OUT(11, O2)
OUT(12, O3)
IN(13, GN) // the norm weight [K] (NORM; else unused)

// 16-byte views of x and the norm weight (aliases of bindings 0 and 13).
layout(std430, binding = 0) readonly buffer X4_ { uvec4 X4[]; };
layout(std430, binding = 13) readonly buffer GN4_ { uvec4 GN4[]; };

layout(push_constant) uniform PC {
	uint K, G, ng, accumulate; // ng: scales a row, ceil(K / G)
	uvec4 n;                   // columns of each weight
	uvec4 first;               // first workgroup of each weight (first.x = 0)
	uint groups;
	float eps; // the norm's epsilon (NORM)
} pc;

// rstd of each activation row (NORM).
shared float q_rstd[8];

bool is16(uint dt) { return dt == DT_BF16 || dt == DT_F16; }

uvec4 qpiece(uint i, uint p) {
	if (i == 0u) {
		return Q0v[p];
	}
	if (i == 1u) {
		return Q1v[p];
	}
	if (i == 2u) {
		return Q2v[p];
	}
	return Q3v[p];
}

uint qword(uint i, uint p) {
	if (i == 0u) {
		return Q0w[p];
	}
	if (i == 1u) {
		return Q1w[p];
	}
	if (i == 2u) {
		return Q2w[p];
	}
	return Q3w[p];
}

float scale(uint i, uint e) {
	if (i == 0u) {
		return S0[e];
	}
	if (i == 1u) {
		return S1[e];
	}
	if (i == 2u) {
		return S2[e];
	}
	return S3[e];
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

// i8x4 converts the four int8 of a word to f32 exactly, with integer
// operations and one subtraction instead of a conversion per weight
// (slower than the memory on NVIDIA): the XOR makes byte b the unsigned
// b + 128, the low byte of the float 2^23 + b + 128, and subtracting
// 2^23 + 128 leaves b.
vec4 i8x4(uint w) {
	uint u = w ^ 0x80808080u;
	uvec4 b = (uvec4(u, u >> 8, u >> 16, u >> 24) & 0xffu) | 0x4b000000u;
	return uintBitsToFloat(b) - 8388736.0;
}

// i8at is the int8 weight e of weight i (element by element, VEC = 0).
float i8at(uint i, uint e) {
	return float(bitfieldExtract(int(qword(i, e >> 2)), int((e & 3u) * 8u), 8));
}

// unpack8 widens 8 elements held in a (16-bit dtypes) or in a and b (f32)
// to f32, as gemv.comp's.
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

// x8 returns elements e .. e+7 of x (e a multiple of 8).
void x8(uint e, out vec4 lo, out vec4 hi) {
	uvec4 a, b = uvec4(0u);
	if (is16(X_dt)) {
		a = X4[e >> 3];
	} else {
		a = X4[e >> 2];
		b = X4[(e >> 2) + 1u];
	}
	unpack8(X_dt, a, b, lo, hi);
}

// g8 returns elements e .. e+7 of the norm weight.
void g8(uint e, out vec4 lo, out vec4 hi) {
	uvec4 a, b = uvec4(0u);
	if (is16(GN_dt)) {
		a = GN4[e >> 3];
	} else {
		a = GN4[e >> 2];
		b = GN4[(e >> 2) + 1u];
	}
	unpack8(GN_dt, a, b, lo, hi);
}

// normRows writes q_rstd[m] = 1/sqrt(mean(x_m^2) + eps) for the ROWS
// rows (subgroup s sums rows s, s + NumSubgroups, ...) and synchronises
// the workgroup. Every invocation calls it (a barrier).
void normRows() {
	uint lane = gl_SubgroupInvocationID, S = gl_SubgroupSize, K = pc.K;
	for (uint m = gl_SubgroupID; m < ROWS; m += gl_NumSubgroups) {
		vec4 a = vec4(0.0);
		if (VEC != 0u) {
			for (uint u = lane; u < (K >> 3); u += S) {
				vec4 lo, hi;
				x8(m * K + 8u * u, lo, hi);
				a = fma(lo, lo, a);
				a = fma(hi, hi, a);
			}
		} else {
			for (uint k = lane; k < K; k += S) {
				float v = X_ld(m * K + k);
				a.x = fma(v, v, a.x);
			}
		}
		float ss = subgroupAdd((a.x + a.y) + (a.z + a.w));
		if (lane == 0u) {
			q_rstd[m] = 1.0 / sqrt(ss / float(K) + pc.eps);
		}
	}
	barrier();
}

// The invocation's partial sums of the current column: acc[m] for row m of
// weight i (SWIGLU: the gate), accU[m] the up weight's. Indexed only by
// unrolled loops with literal bounds, so they stay in registers.
float acc[8], accU[8];

// QLOAD(j, A, SC) loads piece j of the step (of weight i, or with SWIGLU
// pieces 0-1 of the gate and 2-3 of up) into A and its scale into SC;
// QFMA(j, A, SC) multiplies it into every row's sums.
#define QLOAD(j, A, SC)                                          \
	uvec4 A = uvec4(0u);                                         \
	float SC = 0.0;                                              \
	{                                                            \
		uint wi = SWIGLU != 0u ? (j) / PER : i;                  \
		uint u = u0 + S * ((j) % PER);                           \
		if (u < units) {                                         \
			A = qpiece(wi, n * units + u);                       \
			SC = scale(wi, n * pc.ng + (16u * u) / pc.G);        \
		}                                                        \
	}
#define QFMA(j, A, SC)                                           \
	{                                                            \
		uint u = u0 + S * ((j) % PER);                           \
		if (u < units) {                                         \
			vec4 w0 = i8x4(A.x), w1 = i8x4(A.y);                 \
			vec4 w2 = i8x4(A.z), w3 = i8x4(A.w);                 \
			if (NORM != 0u) {                                    \
				vec4 g0, g1, g2, g3;                             \
				g8(16u * u, g0, g1);                             \
				g8(16u * u + 8u, g2, g3);                        \
				w0 *= g0;                                        \
				w1 *= g1;                                        \
				w2 *= g2;                                        \
				w3 *= g3;                                        \
			}                                                    \
			PX_UNROLL for (uint m = 0u; m < 8u; m++) {           \
				if (m < ROWS) {                                  \
					vec4 x0, x1, x2, x3;                         \
					x8(m * K + 16u * u, x0, x1);                 \
					x8(m * K + 16u * u + 8u, x2, x3);            \
					float p = (dot(x0, w0) + dot(x1, w1)) +      \
					          (dot(x2, w2) + dot(x3, w3));       \
					if (SWIGLU != 0u && (j) >= PER) {            \
						accU[m] = fma(SC, p, accU[m]);           \
					} else {                                     \
						acc[m] = fma(SC, p, acc[m]);             \
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
		acc[m] = 0.0;
		accU[m] = 0.0;
	}
	uint K = pc.K;
	// Four pieces per step: of weight i, or two of the gate and two of up.
	const uint PER = SWIGLU != 0u ? 2u : 4u;
	if (VEC != 0u) {
		uint units = K >> 4;
		for (uint u0 = lane; u0 < units; u0 += S * PER) {
			// Named registers, not arrays: every load is issued before the
			// first product (see attn_decode.comp).
			QLOAD(0u, qa0, sc0)
			QLOAD(1u, qa1, sc1)
			QLOAD(2u, qa2, sc2)
			QLOAD(3u, qa3, sc3)
			QFMA(0u, qa0, sc0)
			QFMA(1u, qa1, sc1)
			QFMA(2u, qa2, sc2)
			QFMA(3u, qa3, sc3)
		}
	} else {
		// Weight by weight (the fallback: any K, any G).
		uint wu = SWIGLU != 0u ? 1u : i;
		for (uint k = lane; k < K; k += S) {
			uint e = n * K + k, se = n * pc.ng + k / pc.G;
			float w = i8at(i, e) * scale(i, se);
			float wv = SWIGLU != 0u ? i8at(wu, e) * scale(wu, se) : 0.0;
			if (NORM != 0u) {
				float gn = GN_ld(k);
				w *= gn;
				wv *= gn;
			}
			PX_UNROLL for (uint m = 0u; m < 8u; m++) {
				if (m < ROWS) {
					float xv = X_ld(m * K + k);
					acc[m] = fma(xv, w, acc[m]);
					if (SWIGLU != 0u) {
						accU[m] = fma(xv, wv, accU[m]);
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
			float s = subgroupAdd(acc[m]);
			if (NORM != 0u) {
				s *= q_rstd[m];
			}
			if (SWIGLU != 0u) {
				float su = subgroupAdd(accU[m]);
				if (NORM != 0u) {
					su *= q_rstd[m];
				}
				s = s * sigmoid(s) * su;
			}
			if (lane == m) {
				mine = s;
			}
		}
	}
	if (lane < ROWS) {
		uint e = lane * pc.n[i] + n;
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
