// common.glsl: what every Parallax compute shader shares.
//
// Tensors are bound as storage buffers, one binding per operand, and may
// hold any engine dtype; the dtype of binding B is specialization constant
// 100 + B (1 f32, 2 bf16, 3 f16, 4 i32, the engine.DType values), so one
// SPIR-V module serves every dtype combination and the driver folds the
// branches below away. Arithmetic is f32. 16-bit values are converted with
// integer operations (round to nearest even, subnormals kept), which behave
// the same on every device; no 16-bit arithmetic is needed.
//
// Compiled twice: by default 16-bit elements are loaded and stored as
// uint16_t (storageBuffer16BitAccess); with PX_NO16 through 32-bit words,
// stores with atomicAnd/atomicOr so that neighbouring 16-bit elements
// written by different invocations never race.

#ifndef PX_NO16
#extension GL_EXT_shader_16bit_storage : require
#endif
#extension GL_EXT_control_flow_attributes : require

// PX_LOOP marks inner loops over tile and head dimensions that must stay
// loops: fully unrolled (their trip counts are specialization constants)
// they made lavapipe's LLVM take up to a minute per pipeline. Loops over
// register arrays (the accumulators) are left to unroll.
// Variants for GPUs may define it empty (-DPX_LOOP=) and let the driver
// unroll.
#ifndef PX_LOOP
#define PX_LOOP [[dont_unroll]]
#endif

// PX_UNROLL marks loops over register arrays (accumulators, prefetched
// pieces) with literal trip counts. They must unroll so that the arrays
// stay in registers: NVIDIA's compiler does not unroll unmarked loops
// and then keeps the arrays in local memory, a tenfold slowdown.
#define PX_UNROLL [[unroll]]

// Every kernel is one-dimensional: WG invocations per workgroup. WG is the
// specialization constant the host sets together with the workgroup size
// (constant 0); use it, not gl_WorkGroupSize, in constant expressions
// (array sizes, loop bounds): lavapipe (Mesa 22.3) folds expressions of
// gl_WorkGroupSize with its unspecialised default.
layout(local_size_x_id = 0) in;
layout(constant_id = 9) const uint WG = 64;

#define DT_F32 1u
#define DT_BF16 2u
#define DT_F16 3u
#define DT_I32 4u

#define PX_NEG_INF uintBitsToFloat(0xff800000u)
#define PX_NAN uintBitsToFloat(0x7fc00000u)

// px_max is max(a, b) with a NaN operand giving NaN: GLSL's max leaves that
// undefined (implementations return either operand), and a running maximum
// that drops a NaN score lets a NaN row pass for an empty one.
float px_max(float a, float b) { return (a > b || isnan(a)) ? a : b; }

// ---- Conversions ----

float px_bf16_to_f32(uint h) { return uintBitsToFloat(h << 16); }

uint px_f32_to_bf16(float f) {
	uint b = floatBitsToUint(f);
	if ((b & 0x7fffffffu) > 0x7f800000u) {
		return (b >> 16) | 0x40u; // NaN stays a quiet NaN
	}
	b += 0x7fffu + ((b >> 16) & 1u);
	return b >> 16;
}

float px_f16_to_f32(uint h) {
	uint s = (h & 0x8000u) << 16;
	uint e = (h >> 10) & 0x1fu;
	uint m = h & 0x3ffu;
	if (e == 0x1fu) {
		return uintBitsToFloat(s | 0x7f800000u | (m != 0u ? 0x400000u : 0u) | (m << 13));
	}
	if (e == 0u) {
		if (m == 0u) {
			return uintBitsToFloat(s);
		}
		// m * 2^-24, normalised: the top bit of m becomes the implicit one.
		int top = findMSB(m);
		uint mant = (m << uint(23 - top)) & 0x7fffffu;
		return uintBitsToFloat(s | (uint(top + 103) << 23) | mant);
	}
	return uintBitsToFloat(s | ((e + 112u) << 23) | (m << 13));
}

uint px_f32_to_f16(float f) {
	uint u = floatBitsToUint(f);
	uint s = (u >> 16) & 0x8000u;
	uint e = (u >> 23) & 0xffu;
	uint m = u & 0x7fffffu;
	if (e == 0xffu) {
		return s | 0x7c00u | (m != 0u ? (0x200u | (m >> 13)) : 0u);
	}
	int he = int(e) - 112; // the binary16 biased exponent
	if (he >= 31) {
		return s | 0x7c00u;
	}
	if (he <= 0) {
		uint shift = uint(14 - he);
		if (shift > 24u) {
			return s;
		}
		uint full = m | 0x800000u;
		uint h = full >> shift;
		uint rem = full & ((1u << shift) - 1u);
		uint halfway = 1u << (shift - 1u);
		if (rem > halfway || (rem == halfway && (h & 1u) != 0u)) {
			h++;
		}
		return s | h;
	}
	uint h = (uint(he) << 10) | (m >> 13);
	uint rem = m & 0x1fffu;
	if (rem > 0x1000u || (rem == 0x1000u && (h & 1u) != 0u)) {
		h++; // a carry into the exponent is correct, up to infinity
	}
	return s | h;
}

// px_f32_to_i32 truncates toward zero, saturating; NaN gives 0.
int px_f32_to_i32(float f) {
	uint u = floatBitsToUint(f);
	if ((u & 0x7fffffffu) > 0x7f800000u) {
		return 0;
	}
	if (f >= 2147483648.0) {
		return 2147483647;
	}
	if (f <= -2147483648.0) {
		return int(0x80000000u);
	}
	return int(f);
}

// ---- Tensor bindings ----

#ifdef PX_NO16
#define PX_DECL16(B, NAME, QUAL)
#define PX_LD16(NAME, i) ((NAME##_w[(i) >> 1] >> (((i) & 1u) << 4)) & 0xffffu)
#define PX_ST16(NAME, i, bits)                                 \
	{                                                          \
		uint sh_ = ((i) & 1u) << 4;                            \
		atomicAnd(NAME##_w[(i) >> 1], ~(0xffffu << sh_));      \
		atomicOr(NAME##_w[(i) >> 1], ((bits) & 0xffffu) << sh_); \
	}
#else
#define PX_DECL16(B, NAME, QUAL) \
	layout(std430, binding = B) QUAL buffer NAME##_H_ { uint16_t NAME##_h[]; };
#define PX_LD16(NAME, i) uint(NAME##_h[i])
#define PX_ST16(NAME, i, bits) NAME##_h[i] = uint16_t(bits);
#endif

// Functions every tensor gets: NAME_dt (its dtype), NAME_ld(i) (element i
// as f32), NAME_raw(i) (its bits: 32 or 16).
#define PX_TENSOR_COMMON(B, NAME)                                          \
	layout(constant_id = 100 + B) const uint NAME##_dt = DT_F32;           \
	bool NAME##_is16() { return NAME##_dt == DT_BF16 || NAME##_dt == DT_F16; } \
	float NAME##_ld(uint i) {                                              \
		if (NAME##_dt == DT_F32) {                                         \
			return uintBitsToFloat(NAME##_w[i]);                           \
		}                                                                  \
		if (NAME##_dt == DT_I32) {                                         \
			return float(int(NAME##_w[i]));                                \
		}                                                                  \
		uint h_ = PX_LD16(NAME, i);                                        \
		return NAME##_dt == DT_BF16 ? px_bf16_to_f32(h_) : px_f16_to_f32(h_); \
	}                                                                      \
	uint NAME##_raw(uint i) {                                              \
		if (NAME##_is16()) {                                               \
			return PX_LD16(NAME, i);                                       \
		}                                                                  \
		return NAME##_w[i];                                                \
	}

// IN(B, NAME) declares a read-only tensor at binding B.
#define IN(B, NAME)                                                             \
	layout(std430, binding = B) readonly buffer NAME##_W_ { uint NAME##_w[]; }; \
	PX_DECL16(B, NAME, readonly)                                                \
	PX_TENSOR_COMMON(B, NAME)

// OUT(B, NAME) declares a read-write tensor: NAME_st(i, v) stores v rounded
// to the dtype (i32: truncated, saturating), NAME_strw(i, bits) raw bits.
#define OUT(B, NAME)                                                   \
	layout(std430, binding = B) buffer NAME##_W_ { uint NAME##_w[]; }; \
	PX_DECL16(B, NAME, )                                               \
	PX_TENSOR_COMMON(B, NAME)                                          \
	void NAME##_strw(uint i, uint bits) {                              \
		if (NAME##_is16()) {                                           \
			PX_ST16(NAME, i, bits)                                     \
		} else {                                                       \
			NAME##_w[i] = bits;                                        \
		}                                                              \
	}                                                                  \
	void NAME##_st(uint i, float v) {                                  \
		if (NAME##_dt == DT_F32) {                                     \
			NAME##_w[i] = floatBitsToUint(v);                          \
		} else if (NAME##_dt == DT_I32) {                              \
			NAME##_w[i] = uint(px_f32_to_i32(v));                      \
		} else {                                                       \
			uint b_ = NAME##_dt == DT_BF16 ? px_f32_to_bf16(v) : px_f32_to_f16(v); \
			PX_ST16(NAME, i, b_)                                       \
		}                                                              \
	}

// INDEX(B, NAME) declares a read-only i32 tensor (ids, positions, lengths).
#define INDEX(B, NAME) \
	layout(std430, binding = B) readonly buffer NAME##_I_ { int NAME[]; };

// F32BUF(B, NAME) declares an f32 scratch or statistics buffer.
#define F32BUF(B, NAME) \
	layout(std430, binding = B) buffer NAME##_F_ { float NAME[]; };

// STATUS(B) declares the device's error flags: px_raise records the first
// error of a batch (code, three details and an op number); the host turns
// it into the error Sync returns.
#define STATUS(B)                                                                  \
	layout(std430, binding = B) buffer px_status_ { uint px_status[]; };          \
	void px_raise(uint code, uint a, uint b, uint c, uint op) {                    \
		if (atomicCompSwap(px_status[0], 0u, code) == 0u) {                       \
			px_status[1] = a;                                                      \
			px_status[2] = b;                                                      \
			px_status[3] = c;                                                      \
			px_status[4] = op;                                                     \
		}                                                                          \
	}

#define PX_ERR_ID_RANGE 1u
#define PX_ERR_TARGET_RANGE 2u
#define PX_ERR_LENS_RANGE 3u
#define PX_ERR_LLA_SINGULAR 4u
#define PX_ERR_F16_RANGE 5u
#define PX_ERR_KV_RANGE 6u

// ---- Work decomposition ----

// px_group is the flat workgroup index of a 1-3D grid (the host splits
// large counts over y and z to respect maxComputeWorkGroupCount).
uint px_group() {
	return gl_WorkGroupID.x + gl_NumWorkGroups.x * (gl_WorkGroupID.y + gl_NumWorkGroups.y * gl_WorkGroupID.z);
}

// px_groups is the number of workgroups in the grid.
uint px_groups() { return gl_NumWorkGroups.x * gl_NumWorkGroups.y * gl_NumWorkGroups.z; }
