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
	none := matmulPath{}
	for _, tc := range []struct {
		o      Options
		mm     matmulPath
		sg32   bool
		family string
		has    string
	}{
		{Options{}, nv, true, "attention forward", "attn_fwd_coop"},
		{Options{Attention: "scalar"}, nv, true, "attention forward", "attn_fwd (scalar)"},
		{Options{}, none, true, "attention backward", "attn_dq + attn_dkv"},
		{Options{}, nv, true, "decode", "attn_decode_coop8"},
		{Options{Decode: "generic"}, nv, true, "decode", "generic"},
		{Options{Decode: "wide", DecodeVariant: "sh16"}, nv, true, "decode", "attn_decode_coop.sh16"},
		{Options{DecodeVariant: "plain"}, none, false, "decode", "attn_decode (at most"},
		{Options{}, nv, false, "matmul", "matmul_coop"},
		{Options{}, none, false, "matmul", "gemv"},
		{Options{NoGEMV: true}, none, false, "matmul", "matmul (scalar)"},
		{Options{}, none, false, "linear int8", "qmatmul"},
		{Options{NoGEMV: true}, none, false, "linear int8", "qdequant + matmul"},
		{Options{}, khr, false, "matmul", "matmul_coop_khr (f16 inputs, 8x8x8 fragments)"},
		{Options{}, khr, true, "attention forward", "attn_fwd (scalar)"},
	} {
		k := tc.o.kernels(tc.mm, tc.sg32)
		for _, f := range []string{"matmul", "linear int8", "attention forward", "attention backward", "decode"} {
			if k[f] == "" {
				t.Errorf("%+v: no %q entry in %v", tc.o, f, k)
			}
		}
		if !strings.Contains(k[tc.family], tc.has) {
			t.Errorf("%+v (matmul path %v, 32-wide %v): %s = %q, want it to name %q", tc.o, tc.mm.kind, tc.sg32, tc.family, k[tc.family], tc.has)
		}
	}
}
