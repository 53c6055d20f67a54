// coop.glsl: what the tensor-core (GL_NV_cooperative_matrix) kernels share:
// the fragment types and the conversion of 16-byte pieces to f16.

// 16 x 16 f16 operands and f32 accumulators.
#define FRAG16 fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define FRAG32 fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>

// PX_SLACK is how far a tile's max may exceed a row's reference max before
// the reference moves and the accumulators are rescaled (decode_coop.glsl
// explains why lazy rescaling is exact): P1 = exp(s - m) stays below e^2.
const float PX_SLACK = 2.0;

// px_half8 returns a 16-byte piece of eight bf16 (bf16 true) or f16 values
// as eight f16 values. bf16 to f16 is exact within f16's range.
uvec4 px_half8(uvec4 w, bool bf16) {
	if (!bf16) {
		return w;
	}
	return uvec4(packHalf2x16(vec2(uintBitsToFloat(w.x << 16), uintBitsToFloat(w.x & 0xffff0000u))),
	             packHalf2x16(vec2(uintBitsToFloat(w.y << 16), uintBitsToFloat(w.y & 0xffff0000u))),
	             packHalf2x16(vec2(uintBitsToFloat(w.z << 16), uintBitsToFloat(w.z & 0xffff0000u))),
	             packHalf2x16(vec2(uintBitsToFloat(w.w << 16), uintBitsToFloat(w.w & 0xffff0000u))));
}

// px_half8s is px_half8 with every value multiplied by s (a power of two).
uvec4 px_half8s(uvec4 w, bool bf16, float s) {
	uvec4 o;
	PX_UNROLL for (uint i = 0u; i < 4u; i++) {
		vec2 f = bf16 ? vec2(uintBitsToFloat(w[i] << 16), uintBitsToFloat(w[i] & 0xffff0000u)) : unpackHalf2x16(w[i]);
		o[i] = packHalf2x16(f * s);
	}
	return o;
}

// px_grad_scale is the power of two that brings the largest |dO| (gmax,
// from attn_bwd_pre) below 2^8: small gradients then stay normal f16
// numbers (f16's normal range starts at 2^-14), and the products with V
// stay far below 65504. The backward is linear in dO, so the kernels
// divide their results by it exactly.
float px_grad_scale(float gmax) {
	if (!(gmax > 0.0) || isinf(gmax)) {
		return 1.0;
	}
	int e;
	frexp(gmax, e); // gmax < 2^e
	return ldexp(1.0, clamp(8 - e, -100, 100));
}

// The prefill kernels' K/V staging (attn_fwd_coop, attn_dq_coop): a
// tile of BC keys as NP 16-byte pieces per key, piece l of this invocation
// being piece t + WG l, loaded into named registers a tile ahead
// (PX_KV_LOAD, keys from tileStart, zeros at and past kmax) and stored to
// sK and sV as f16 (PX_KV_STORE). They use the kernel's t, WG, LDN, BC, NP,
// SD8, tileStart, kmax, kvbase, K4, V4, sK, sV and K_dt.
#define PX_KV_DECL(l) uvec4 k##l = uvec4(0u), v##l = uvec4(0u);
#define PX_KV_LOAD(l)                                  \
	if (l < LDN) {                                     \
		uint e = t + WG * l, key = tileStart + e / NP; \
		k##l = uvec4(0u);                              \
		v##l = uvec4(0u);                              \
		if (e < BC * NP && key < kmax) {               \
			uint p = (kvbase + key) * NP + e % NP;     \
			k##l = K4[p];                              \
			v##l = V4[p];                              \
		}                                              \
	}
#define PX_KV_STORE(l)                                                  \
	if (l < LDN && t + WG * l < BC * NP) {                              \
		uint e = t + WG * l;                                            \
		sK[(e / NP) * SD8 + e % NP] = px_half8(k##l, K_dt == DT_BF16); \
		sV[(e / NP) * SD8 + e % NP] = px_half8(v##l, K_dt == DT_BF16); \
	}
