// coop.glsl: what the tensor-core (GL_NV_cooperative_matrix) kernels share:
// the fragment types and the conversion of 16-byte pieces to f16.

// 16 x 16 f16 operands and f32 accumulators.
#define FRAG16 fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define FRAG32 fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>

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
