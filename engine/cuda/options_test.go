//go:build cgo

package cuda_test

import (
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/engine/cuda"
)

// Every override sets its field, none leaves the defaults, and a value
// outside a variable's choices is an error naming the variable.
func TestParseOptions(t *testing.T) {
	all := map[string]string{cuda.EnvWGMMA: "0", cuda.EnvTMA: "0", cuda.EnvForward: "cp.async", cuda.EnvForwardKeyTile: "128",
		cuda.EnvBackward: "fused", cuda.EnvDQKeyTile: "32", cuda.EnvDecodeSplitKeys: "256", cuda.EnvPDL: "0",
		cuda.EnvNormRoPEHeads: "4", cuda.EnvSmallHeads: "1", cuda.EnvSmallV4: "0", cuda.EnvFusedPrep: "1"}
	want := cuda.Options{NoWGMMA: true, NoTMA: true, ForwardLoads: "cp.async", ForwardKeyTile: 128, Backward: "fused",
		DQKeyTile: 32, DecodeSplitKeys: 256, NoPDL: true, NormRoPEHeads: 4, SmallHeads: true, NoSmallV4: true, FusedPrep: true}
	if got, err := cuda.ParseOptions(func(k string) string { return all[k] }); err != nil || got != want {
		t.Errorf("every override: %+v, %v; want %+v", got, err, want)
	}
	on := map[string]string{cuda.EnvWGMMA: "1", cuda.EnvTMA: "1", cuda.EnvPDL: "1", cuda.EnvSmallHeads: "0", cuda.EnvSmallV4: "1", cuda.EnvFusedPrep: "0"}
	if got, err := cuda.ParseOptions(func(k string) string { return on[k] }); err != nil || got != (cuda.Options{}) {
		t.Errorf("switches on (the defaults): %+v, %v; want the zero Options", got, err)
	}
	for _, bad := range [][2]string{{cuda.EnvBackward, "fast"}, {cuda.EnvForward, "tmaa"}, {cuda.EnvForwardKeyTile, "big"},
		{cuda.EnvDQKeyTile, "128"}, {cuda.EnvDecodeSplitKeys, "8"}, {cuda.EnvWGMMA, "off"}, {cuda.EnvPDL, "yes"},
		{cuda.EnvNormRoPEHeads, "-1"}, {cuda.EnvNormRoPEHeads, "two"}, {cuda.EnvSmallHeads, "on"}, {cuda.EnvSmallV4, "no"}, {cuda.EnvFusedPrep, "yes"}} {
		_, err := cuda.ParseOptions(func(k string) string { return map[string]string{bad[0]: bad[1]}[k] })
		if err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("%s=%s: error %v, want one naming the variable", bad[0], bad[1], err)
		}
	}
}
