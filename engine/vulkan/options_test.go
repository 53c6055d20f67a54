package vulkan

import (
	"strings"
	"testing"
)

// Every override sets its field, none leaves the defaults, and a value
// outside a variable's choices is an error naming the variable.
func TestParseOptions(t *testing.T) {
	all := map[string]string{EnvAttention: "scalar", EnvDecode: "wide", EnvDecodeVariant: "sh16", EnvDecodeKeyTile: "16",
		EnvDecodeSplits: "4", EnvPushDescriptors: "0", EnvNo16BitStorage: "1", EnvPipelineStats: "1", EnvGEMV: "0", EnvCoop: "khr"}
	want := Options{Attention: "scalar", Decode: "wide", DecodeVariant: "sh16", DecodeKeyTile: 16, DecodeSplits: 4,
		NoPushDescriptors: true, No16BitStorage: true, PipelineStats: true, NoGEMV: true, Coop: "khr"}
	if got, err := ParseOptions(func(k string) string { return all[k] }); err != nil || got != want {
		t.Errorf("every override: %+v, %v; want %+v", got, err, want)
	}
	if got, err := ParseOptions(func(string) string { return "" }); err != nil || got != (Options{}) {
		t.Errorf("no overrides: %+v, %v; want the zero Options", got, err)
	}
	for _, bad := range [][2]string{{EnvDecode, "fast"}, {EnvAttention, "coop"}, {EnvDecodeKeyTile, "x"},
		{EnvDecodeKeyTile, "48"}, {EnvDecodeSplits, "-1"}, {EnvNo16BitStorage, "yes"}, {EnvPushDescriptors, "2"}, {EnvGEMV, "off"},
		{EnvCoop, "amd"}} {
		_, err := ParseOptions(func(k string) string { return map[string]string{bad[0]: bad[1]}[k] })
		if err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("%s=%s: error %v, want one naming the variable", bad[0], bad[1], err)
		}
	}
}

// The kernel report follows the options: every op family is named, and a
// forced choice shows.
func TestOptionsKernels(t *testing.T) {
	nv := matmulPath{kind: coopNV}
	khr := matmulPath{kind: coopKHR, shape: coopShape{M: 8, N: 8, K: 8}}
	khr16 := matmulPath{kind: coopKHR, shape: coopShape{M: 16, N: 16, K: 16}}
	none := matmulPath{}
	for _, tc := range []struct {
		o      Options
		mm     matmulPath
		sg     int
		family string
		has    string
	}{
		{Options{}, nv, 32, "attention forward", "attn_fwd_coop"},
		{Options{Attention: "scalar"}, nv, 32, "attention forward", "attn_fwd (scalar)"},
		{Options{}, none, 32, "attention backward", "attn_dq + attn_dkv"},
		{Options{}, nv, 32, "decode", "attn_decode_coop8"},
		{Options{Decode: "generic"}, nv, 32, "decode", "generic"},
		{Options{Decode: "wide", DecodeVariant: "sh16"}, nv, 32, "decode", "attn_decode_coop.sh16"},
		{Options{DecodeVariant: "plain"}, none, 8, "decode", "attn_decode (at most"},
		{Options{}, nv, 8, "matmul", "matmul_coop"},
		{Options{}, none, 8, "matmul", "gemv"},
		{Options{NoGEMV: true}, none, 8, "matmul", "matmul (scalar)"},
		{Options{}, none, 8, "linear int8", "qmatmul"},
		{Options{NoGEMV: true}, none, 8, "linear int8", "qdequant + matmul"},
		{Options{}, khr, 8, "matmul", "matmul_coop_khr (f16 inputs, 8x8x8 fragments)"},
		{Options{}, khr, 32, "attention forward", "attn_fwd (scalar)"}, // 2 keys an invocation: not taken
		{Options{}, khr, 8, "attention forward", "attn_fwd_coop_khr (16-bit, 8x8x8 fragments"},
		{Options{}, khr, 8, "attention backward", "attn_dq_coop_khr + attn_dkv_coop_khr"},
		{Options{Attention: "scalar"}, khr, 8, "attention backward", "attn_dq + attn_dkv (scalar)"},
		{Options{Attention: "scalar"}, khr, 8, "attention forward", "attn_fwd (scalar)"},
		{Options{}, khr16, 32, "attention forward", "attn_fwd_coop_khr (16-bit, 16x16x16 fragments"},
		{Options{}, khr16, 64, "attention forward", "attn_fwd_coop_khr"},
		{Options{}, khr16, 16, "attention forward", "attn_fwd (scalar)"}, // 16 keys an invocation: not taken
	} {
		k := tc.o.kernels(tc.mm, tc.sg)
		for _, f := range []string{"matmul", "linear int8", "attention forward", "attention backward", "decode"} {
			if k[f] == "" {
				t.Errorf("%+v: no %q entry in %v", tc.o, f, k)
			}
		}
		if !strings.Contains(k[tc.family], tc.has) {
			t.Errorf("%+v (matmul path %v, %d-wide subgroups): %s = %q, want it to name %q", tc.o, tc.mm.kind, tc.sg, tc.family, k[tc.family], tc.has)
		}
	}
}
