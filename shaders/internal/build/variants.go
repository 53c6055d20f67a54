// Package build compiles the GLSL sources of package shaders into SPIR-V
// (glslc; the KHR cooperative-matrix variants with a pinned newer glslc)
// and finds committed SPIR-V that no longer matches its sources.
package build

// Variant is one SPIR-V module: a source file compiled with some defines.
type Variant struct {
	Name    string   // spv/Name.spv
	Source  string   // Source.comp
	Defines []string // -D options
	Target  string   // glslc --target-env
	// KHR marks a module on GL_KHR_cooperative_matrix: compiled with the
	// pinned newer compiler (KHRGlslc), since the machine's glslc cannot.
	KHR bool
}

// kernels are the portable compute kernels; each is compiled twice: with
// 16-bit storage access (NAME) and without (NAME.no16, for devices that
// lack storageBuffer16BitAccess).
var kernels = []string{
	"elementwise",
	"copy",
	"kv_append_at",
	"rmsnorm",
	"rope",
	"normrope",
	"decode_prep",
	"embedding",
	"embedding_bwd",
	"cross_entropy",
	"reduce",
	"cor",
	"matmul",
	"attn_fwd",
	"attn_combine",
	"attn_decode",
	"attn_bwd_pre",
	"attn_dq",
	"attn_dkv",
	"lla",
	"gate",
	"view_attn",
	"gemv",
	"argmax",
	"rownorm",
	"qmatmul",
	"qdequant",
}

// Variants lists every module `go generate` builds.
var Variants = func() []Variant {
	var vs []Variant
	for _, k := range kernels {
		vs = append(vs,
			Variant{Name: k, Source: k, Target: "vulkan1.1"},
			Variant{Name: k + ".no16", Source: k, Defines: []string{"PX_NO16"}, Target: "vulkan1.1"})
	}
	// attn_decode loading each tile during the previous one's arithmetic.
	vs = append(vs,
		Variant{Name: "attn_decode.prefetch", Source: "attn_decode", Defines: []string{"PX_PREFETCH"}, Target: "vulkan1.1"},
		Variant{Name: "attn_decode.prefetch.no16", Source: "attn_decode", Defines: []string{"PX_PREFETCH", "PX_NO16"}, Target: "vulkan1.1"})
	// The tensor-core matmul: GL_NV_cooperative_matrix, f16 inputs.
	vs = append(vs, Variant{Name: "matmul_coop", Source: "matmul_coop", Target: "vulkan1.1"})
	// ... and through GL_KHR_cooperative_matrix (AMD, Intel, lavapipe),
	// the fragment shape a specialization constant.
	vs = append(vs, Variant{Name: "matmul_coop_khr", Source: "matmul_coop_khr", Target: "vulkan1.1", KHR: true})
	// Decode on tensor cores (up to 8 and up to 4 rows): K and V staged as
	// 16-byte vectors, or as 16-bit elements (.sh16).
	for _, k := range []string{"attn_decode_coop", "attn_decode_coop8"} {
		vs = append(vs,
			Variant{Name: k, Source: k, Target: "vulkan1.1"},
			Variant{Name: k + ".sh16", Source: k, Defines: []string{"PX_SH16"}, Target: "vulkan1.1"})
	}
	// Prefill / training attention forward on tensor cores.
	vs = append(vs, Variant{Name: "attn_fwd_coop", Source: "attn_fwd_coop", Target: "vulkan1.1"})
	// ... and through GL_KHR_cooperative_matrix, the fragment edge and the
	// subgroup size specialization constants.
	vs = append(vs, Variant{Name: "attn_fwd_coop_khr", Source: "attn_fwd_coop_khr", Target: "vulkan1.1", KHR: true})
	// ... and its backward: the column-parallel (dk, dv) and row-parallel
	// (dq, dr) kernels.
	vs = append(vs,
		Variant{Name: "attn_dkv_coop", Source: "attn_dkv_coop", Target: "vulkan1.1"},
		Variant{Name: "attn_dq_coop", Source: "attn_dq_coop", Target: "vulkan1.1"})
	// ... and through GL_KHR_cooperative_matrix, as the KHR forward.
	vs = append(vs,
		Variant{Name: "attn_dkv_coop_khr", Source: "attn_dkv_coop_khr", Target: "vulkan1.1", KHR: true},
		Variant{Name: "attn_dq_coop_khr", Source: "attn_dq_coop_khr", Target: "vulkan1.1", KHR: true})
	// parallax-view's frame: into the swapchain image in its own format
	// (shaderStorageImageWriteWithoutFormat) or into an RGBA8 image.
	vs = append(vs,
		Variant{Name: "view_draw", Source: "view_draw", Target: "vulkan1.1"},
		Variant{Name: "view_draw.rgba8", Source: "view_draw", Defines: []string{"PX_RGBA8"}, Target: "vulkan1.1"})
	return vs
}()
