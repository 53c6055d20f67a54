// coop_khr.glsl: what the GL_KHR_cooperative_matrix attention kernels
// share (after coop.glsl): fragment types of edge F (the kernel's
// specialization constant), the fragment-list macro and the K/V staging.

#define FRAG_A coopmat<float16_t, gl_ScopeSubgroup, F, F, gl_MatrixUseA>
#define FRAG_B coopmat<float16_t, gl_ScopeSubgroup, F, F, gl_MatrixUseB>
#define FRAG_C coopmat<float, gl_ScopeSubgroup, F, F, gl_MatrixUseAccumulator>
#define ROW_MAJOR gl_CooperativeMatrixLayoutRowMajor
#define COL_MAJOR gl_CooperativeMatrixLayoutColumnMajor

// PX_FRAGS applies M to the fragment indices of a row of D (D / F <= 16);
// M guards n < NF itself.
#define PX_FRAGS(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11) M(12) M(13) M(14) M(15)

// PX_STAGE stores keys first .. first + count - 1 of this (sequence, KV
// head) from src (K4 or V4: 16-byte pieces, bf16 or f16 as K_dt says) into
// buf [key][x] (row stride SD) as f16, zeros at and past kmax. It uses the
// kernel's t, WG, NP, SD, kvbase and K_dt.
#define PX_STAGE(buf, src, first, count, kmax)                                \
	for (uint e = t; e < (count) * NP; e += WG) {                             \
		uint key = (first) + e / NP;                                          \
		uvec4 w = uvec4(0u);                                                  \
		if (key < (kmax)) {                                                   \
			w = px_half8(src[(kvbase + key) * NP + e % NP], K_dt == DT_BF16); \
		}                                                                     \
		uint base = (e / NP) * SD + 8u * (e % NP);                            \
		PX_UNROLL for (uint i = 0u; i < 4u; i++) {                            \
			vec2 h = unpackHalf2x16(w[i]);                                    \
			buf[base + 2u * i] = float16_t(h.x);                              \
			buf[base + 2u * i + 1u] = float16_t(h.y);                         \
		}                                                                     \
	}
