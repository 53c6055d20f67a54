package vulkan

import (
	"fmt"
	"os"

	"github.com/parallax-engine/parallax/engine"
)

// Options are a Vulkan device's kernel and feature choices. The zero value
// is the default: the fastest kernels the device supports for each shape.
// Open takes them from the environment (ParseOptions(os.Getenv), the
// overrides listed in docs/ENGINE.md, "Options and overrides"); tests and
// benchmarks set them with OpenWith or Device.SetOptions instead.
type Options struct {
	// Attention is "" (the tensor-core attention kernels where they apply)
	// or "scalar" (attn_fwd and the scalar backward kernels always)
	// (PARALLAX_VULKAN_ATTN).
	Attention string
	// Decode forces a decode kernel: "" (the fastest that applies), "wide"
	// (attn_decode_coop, not attn_decode_coop8), "scalar" (attn_decode,
	// no tensor cores) or "generic" (the attn_fwd path)
	// (PARALLAX_VULKAN_DECODE).
	Decode string
	// DecodeVariant is "" (the defaults: attn_decode.prefetch and the
	// tensor-core kernels staging K and V as f32), "plain" (attn_decode
	// without prefetching) or "sh16" (the tensor-core kernels staging 16-bit
	// K and V) (PARALLAX_VULKAN_DECODE_VARIANT).
	DecodeVariant string
	// DecodeKeyTile is the decode kernels' key tile: 0 for the default,
	// else 16, 32 or 64 (attn_decode), 16 (attn_decode_coop8)
	// (PARALLAX_VULKAN_DECODE_BC).
	DecodeKeyTile int
	// DecodeSplits is the split count of a decode whose caller leaves it
	// to the device: 0 chooses by the kernel's target workgroup count
	// (PARALLAX_VULKAN_DECODE_SPLITS).
	DecodeSplits int
	// NoPushDescriptors binds through a descriptor pool per batch even
	// where VK_KHR_push_descriptor exists
	// (PARALLAX_VULKAN_PUSH_DESCRIPTORS=0). Read at open only.
	NoPushDescriptors bool
	// No16BitStorage runs the 16-bit tensors through 32-bit words and
	// atomics (the no16 shader variants) even where 16-bit storage exists
	// (PARALLAX_VULKAN_NO16=1). Read at open only.
	No16BitStorage bool
	// PipelineStats captures the pipelines' executable statistics
	// (registers, spills) where VK_KHR_pipeline_executable_properties
	// exists (PARALLAX_VULKAN_PIPELINE_STATS=1). Read at open only.
	PipelineStats bool
	// NoGEMV runs the decode products (1 to 8 rows against a weight) on
	// the tiled matmul kernels instead of the matrix-vector kernel, and
	// turns LinearMulti and LinearSwiGLU into separate products
	// (PARALLAX_VULKAN_GEMV=0).
	NoGEMV bool
	// Coop picks the cooperative-matrix (tensor-core) matmul kernel: ""
	// or "auto" (matmul_coop on VK_NV_cooperative_matrix where the device
	// offers it, else matmul_coop_khr on VK_KHR_cooperative_matrix), "nv"
	// or "khr" (that one only, the scalar kernels where it cannot run) or
	// "off" (the scalar kernels). The tensor-core attention kernels are
	// NV-only: "khr" and "off" run the scalar attention kernels
	// (PARALLAX_VULKAN_COOP). Read at open only: it chooses the device
	// extensions.
	Coop string
}

// Environment variables ParseOptions reads, in Options' field order.
const (
	EnvAttention       = "PARALLAX_VULKAN_ATTN"
	EnvDecode          = "PARALLAX_VULKAN_DECODE"
	EnvDecodeVariant   = "PARALLAX_VULKAN_DECODE_VARIANT"
	EnvDecodeKeyTile   = "PARALLAX_VULKAN_DECODE_BC"
	EnvDecodeSplits    = "PARALLAX_VULKAN_DECODE_SPLITS"
	EnvPushDescriptors = "PARALLAX_VULKAN_PUSH_DESCRIPTORS"
	EnvNo16BitStorage  = "PARALLAX_VULKAN_NO16"
	EnvPipelineStats   = "PARALLAX_VULKAN_PIPELINE_STATS"
	EnvGEMV            = "PARALLAX_VULKAN_GEMV"
	EnvCoop            = "PARALLAX_VULKAN_COOP"
)

// ParseOptions reads Options from the environment through getenv
// (os.Getenv in a program). An unset or empty variable keeps the default;
// a value outside a variable's choices is an error that names it.
func ParseOptions(getenv func(string) string) (Options, error) {
	e := engine.Env{Get: getenv}
	o := Options{
		Attention:         e.String(EnvAttention),
		Decode:            e.String(EnvDecode),
		DecodeVariant:     e.String(EnvDecodeVariant),
		DecodeKeyTile:     e.Int(EnvDecodeKeyTile),
		DecodeSplits:      e.Int(EnvDecodeSplits),
		NoPushDescriptors: e.Switch(EnvPushDescriptors, "0", "1"),
		No16BitStorage:    e.Switch(EnvNo16BitStorage, "1", "0"),
		PipelineStats:     e.Switch(EnvPipelineStats, "1", "0"),
		NoGEMV:            e.Switch(EnvGEMV, "0", "1"),
		Coop:              e.String(EnvCoop),
	}
	if e.Err != nil {
		return o, fmt.Errorf("vulkan: %w", e.Err)
	}
	return o, o.Validate()
}

// Validate reports a choice outside its field's values.
func (o Options) Validate() error {
	switch o.Attention {
	case "", "scalar":
	default:
		return fmt.Errorf("vulkan: attention kernels %q (%s): want scalar or nothing", o.Attention, EnvAttention)
	}
	switch o.Decode {
	case "", "wide", "scalar", "generic":
	default:
		return fmt.Errorf("vulkan: decode kernel %q (%s): want wide, scalar or generic", o.Decode, EnvDecode)
	}
	switch o.DecodeVariant {
	case "", "plain", "sh16":
	default:
		return fmt.Errorf("vulkan: decode variant %q (%s): want plain or sh16", o.DecodeVariant, EnvDecodeVariant)
	}
	switch o.DecodeKeyTile {
	case 0, 16, 32, 64:
	default:
		return fmt.Errorf("vulkan: decode key tile %d (%s): want 16, 32 or 64", o.DecodeKeyTile, EnvDecodeKeyTile)
	}
	switch o.Coop {
	case "", "auto", "nv", "khr", "off":
	default:
		return fmt.Errorf("vulkan: cooperative-matrix path %q (%s): want auto, nv, khr or off", o.Coop, EnvCoop)
	}
	if o.DecodeSplits < 0 {
		return fmt.Errorf("vulkan: decode splits %d (%s): want 0 (automatic) or more", o.DecodeSplits, EnvDecodeSplits)
	}
	return nil
}

// optionsFromEnv is what Devices and Open use.
func optionsFromEnv() (Options, error) { return ParseOptions(os.Getenv) }

// kernels describes the kernels a device runs under o, given its
// cooperative-matrix matmul path (mm) and its subgroup size sg (the NV
// tensor-core attention kernels need 32; the KHR forward, khrAttention):
// DeviceInfo.Kernels.
func (o Options) kernels(mm matmulPath, sg int) map[string]string {
	coop := mm.kind == coopNV
	tc := coop && sg == 32
	m := map[string]string{
		"matmul":             "matmul (scalar)",
		"attention forward":  "attn_fwd (scalar)",
		"attention backward": "attn_bwd_pre, then attn_dq + attn_dkv (scalar)",
	}
	switch mm.kind {
	case coopNV:
		m["matmul"] = "matmul_coop (16-bit inputs) + matmul"
	case coopKHR:
		m["matmul"] = fmt.Sprintf("matmul_coop_khr (f16 inputs, %dx%dx%d fragments) + matmul", mm.shape.M, mm.shape.N, mm.shape.K)
	}
	m["linear int8"] = "qdequant + matmul"
	if !o.NoGEMV {
		m["matmul"] = "gemv (1 to 8 rows against a weight), " + m["matmul"]
		m["linear int8"] = "qmatmul (1 to 8 rows; up to four weights, or gate and up with the SwiGLU, the RMSNorm folded in), else " + m["linear int8"]
	}
	if f, why := khrAttention(mm, sg); mm.kind == coopKHR && why == "" && o.Attention != "scalar" {
		m["attention forward"] = fmt.Sprintf("attn_fwd_coop_khr (16-bit, %dx%dx%d fragments, D%%16 = 0 up to 128) + attn_fwd", f, f, f)
		m["attention backward"] = "attn_bwd_pre, then attn_dq_coop_khr + attn_dkv_coop_khr (16-bit, D%16 = 0 up to 128) or attn_dq + attn_dkv"
	}
	if tc && o.Attention != "scalar" {
		m["attention forward"] = "attn_fwd_coop (16-bit, D%16 = 0 up to 128) + attn_fwd"
		m["attention backward"] = "attn_bwd_pre, then attn_dq_coop + attn_dkv_coop (16-bit, D%16 = 0 up to 128) or attn_dq + attn_dkv"
	}
	scalar := "attn_decode.prefetch"
	if o.DecodeVariant == "plain" {
		scalar = "attn_decode"
	}
	sh := ""
	if o.DecodeVariant == "sh16" {
		sh = ".sh16"
	}
	var dec string
	switch {
	case o.Decode == "generic":
		dec = "attn_fwd (generic, forced)"
	case o.Decode == "scalar" || !tc:
		dec = scalar + " (at most 8 rows a KV head) + attn_fwd"
	case o.Decode == "wide":
		dec = "attn_decode_coop" + sh + " (at most 8 rows) + " + scalar + " + attn_fwd"
	default:
		dec = "attn_decode_coop8" + sh + " (at most 4 rows), attn_decode_coop" + sh + " (8), " + scalar + " + attn_fwd"
	}
	if o.DecodeKeyTile != 0 {
		dec += fmt.Sprintf(", %d-key tiles", o.DecodeKeyTile)
	}
	if o.DecodeSplits != 0 {
		dec += fmt.Sprintf(", %d splits", o.DecodeSplits)
	}
	m["decode"] = dec + "; attn_combine merges splits"
	return m
}
