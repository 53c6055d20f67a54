//go:build cgo

package cuda

import (
	"strings"
	"testing"
)

// h200 is the H200's multiprocessors and per-block shared memory.
var h200 = decodeGPU{sms: 132, smemOptin: 227 << 10}

func TestPlanDecode(t *testing.T) {
	a100 := decodeGPU{sms: 108, smemOptin: 163 << 10}
	small := decodeGPU{sms: 46, smemOptin: 120 << 10} // no room for 4 stages at D = 128
	for _, c := range []struct {
		name                      string
		g                         decodeGPU
		heads, capacity, D, split int
		env                       decodeEnv
		want                      decodePlan
	}{
		// Few sequences (two blocks a multiprocessor would take more than
		// 16 splits): one block a multiprocessor, the 4-stage ring,
		// floor(132 / heads) splits.
		{"B1 Hkv8 L16k", h200, 8, 16384, 128, 0, decodeEnv{}, decodePlan{16, 4, "auto"}},
		{"B1 Hkv8 L4k", h200, 8, 4096, 128, 0, decodeEnv{}, decodePlan{16, 4, "auto"}},
		{"B1 Hkv1 L32k: at most 64", h200, 1, 32768, 128, 0, decodeEnv{}, decodePlan{64, 4, "auto"}},
		// Short caches: 64 keys a split (unless the options set it).
		{"B1 Hkv8 L512: 64 keys a split", h200, 8, 512, 128, 0, decodeEnv{}, decodePlan{8, 4, "auto"}},
		{"B1 Hkv8 L513: 128 keys a split", h200, 8, 513, 128, 0, decodeEnv{}, decodePlan{5, 4, "auto"}},
		{"B1 Hkv8 L272", h200, 8, 272, 128, 0, decodeEnv{}, decodePlan{5, 4, "auto"}},
		{"B1 Hkv8 L272 split keys 128", decodeGPU{sms: 132, smemOptin: 227 << 10, minKeys: 128}, 8, 272, 128, 0,
			decodeEnv{}, decodePlan{3, 4, "auto"}},
		{"B1 Hkv8 L100", h200, 8, 100, 128, 0, decodeEnv{}, decodePlan{2, 4, "auto"}},
		{"B1 Hkv8 L64", h200, 8, 64, 128, 0, decodeEnv{}, decodePlan{1, 4, "auto"}},
		{"B1 Hkv8 L4k split keys 1024", decodeGPU{sms: 132, smemOptin: 227 << 10, minKeys: 1024}, 8, 4096, 128, 0,
			decodeEnv{}, decodePlan{4, 4, "auto"}},
		{"B1 Hkv8 L16k D64", h200, 8, 16384, 64, 0, decodeEnv{}, decodePlan{16, 4, "auto"}},
		// More: the 3-stage kernel, two blocks a multiprocessor, the rule
		// of before.
		{"B2 Hkv8", h200, 16, 16384, 128, 0, decodeEnv{}, decodePlan{16, 3, "auto"}},
		{"B8 Hkv8 L32k", h200, 64, 32768, 128, 0, decodeEnv{}, decodePlan{4, 3, "auto"}},
		{"B16 Hkv8", h200, 128, 16384, 128, 0, decodeEnv{}, decodePlan{2, 3, "auto"}},
		{"B64 Hkv8", h200, 512, 16384, 128, 0, decodeEnv{}, decodePlan{1, 3, "auto"}},
		// One 3-stage block a multiprocessor: 13 splits are few enough.
		{"A100 B1", a100, 8, 16384, 128, 0, decodeEnv{}, decodePlan{13, 3, "auto"}},
		{"sm86 B1", small, 8, 16384, 128, 0, decodeEnv{}, decodePlan{5, 3, "auto"}},
		// Overrides.
		{"old B1", h200, 8, 16384, 128, 0, decodeEnv{old: true}, decodePlan{33, 3, "old"}},
		{"old B8", h200, 64, 16384, 128, 0, decodeEnv{old: true}, decodePlan{4, 3, "old"}},
		{"old B1 L4k", h200, 8, 4096, 128, 0, decodeEnv{old: true}, decodePlan{32, 3, "old"}},
		{"env splits", h200, 8, 16384, 128, 0, decodeEnv{splits: 24}, decodePlan{24, 4, "env"}},
		{"env stages", h200, 8, 16384, 128, 0, decodeEnv{stages: 6}, decodePlan{16, 6, "auto"}},
		{"env both", h200, 64, 16384, 128, 0, decodeEnv{splits: 5, stages: 3}, decodePlan{5, 3, "env"}},
		{"caller", h200, 8, 16384, 128, 3, decodeEnv{splits: 24}, decodePlan{3, 4, "caller"}},
		{"caller large batch", h200, 512, 16384, 128, 2, decodeEnv{}, decodePlan{2, 3, "caller"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := planDecode(c.g, c.heads, c.capacity, c.D, c.split, c.env)
			if err != nil {
				t.Fatal(err)
			}
			if p != c.want {
				t.Errorf("got %+v, want %+v", p, c.want)
			}
			if s := decodeSmem(c.D, p.stages); s > c.g.smemOptin {
				t.Errorf("%d stages at D %d: %d bytes of shared memory, the GPU gives %d", p.stages, c.D, s, c.g.smemOptin)
			}
		})
	}
	if _, err := planDecode(decodeGPU{sms: 46, smemOptin: 99 << 10}, 8, 4096, 128, 0, decodeEnv{stages: 6}); err == nil {
		t.Error("6 stages at D 128 in 99 KiB: no error")
	}
}

func TestDecodeSmem(t *testing.T) {
	// Every ring the host may pick fits Hopper's 227 KiB, and the block
	// merge (4 warps' m, d1, d2, O1, O2 in floats) fits in the rings.
	for _, D := range []int{16, 32, 64, 128} {
		for _, s := range decodeStageChoices {
			smem := decodeSmem(D, s)
			if smem > 227<<10 {
				t.Errorf("D %d, %d stages: %d bytes", D, s, smem)
			}
			if merge, rings := 4*(24+16*D)*4, 2*s*decKeys*(D+8)*2; merge > rings {
				t.Errorf("D %d, %d stages: merge needs %d bytes, the rings have %d", D, s, merge, rings)
			}
		}
	}
	for _, c := range []struct{ D, stages, want int }{{128, 3, 2}, {128, 4, 1}, {128, 6, 1}, {64, 6, 2}, {16, 6, 2}} {
		if got := decodeBlocksPerSM(decodeSmem(c.D, c.stages), 227<<10); got != c.want {
			t.Errorf("D %d, %d stages: %d blocks a multiprocessor, want %d", c.D, c.stages, got, c.want)
		}
	}
}

func TestParseDecodeEnv(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want decodeEnv
		err  string
	}{
		{nil, decodeEnv{}, ""},
		{map[string]string{EnvDecodeSplits: "old"}, decodeEnv{old: true}, ""},
		{map[string]string{EnvDecodeSplits: "16", EnvDecodeStages: "4", EnvDecodeReport: "1"}, decodeEnv{splits: 16, stages: 4, report: true}, ""},
		{map[string]string{EnvDecodeReport: "0"}, decodeEnv{}, ""},
		{map[string]string{EnvDecodeSplits: "0"}, decodeEnv{}, EnvDecodeSplits},
		{map[string]string{EnvDecodeSplits: "new"}, decodeEnv{}, EnvDecodeSplits},
		{map[string]string{EnvDecodeStages: "5"}, decodeEnv{}, EnvDecodeStages},
		{map[string]string{EnvDecodeReport: "yes"}, decodeEnv{}, EnvDecodeReport},
		{map[string]string{EnvDecodeTiles: "1"}, decodeEnv{tiles: 1}, ""},
		{map[string]string{EnvDecodeTiles: "0"}, decodeEnv{}, EnvDecodeTiles},
		{map[string]string{EnvDecodeTiles: "65"}, decodeEnv{}, EnvDecodeTiles},
	} {
		got, err := parseDecodeEnv(func(k string) string { return c.env[k] })
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%v: error %v, want one naming %s", c.env, err, c.err)
		case c.err == "" && err != nil:
			t.Errorf("%v: %v", c.env, err)
		case c.err == "" && got != c.want:
			t.Errorf("%v: got %+v, want %+v", c.env, got, c.want)
		}
	}
}

func TestDecodeKernelNames(t *testing.T) {
	for _, c := range []struct {
		D, stages int
		px        bool
		want      string
	}{{128, 3, true, "attn_dec_mma_d128_px"}, {64, 6, false, "attn_dec_mma_s6_d64_sm"}, {16, 4, true, "attn_dec_mma_s4_d16_px"}} {
		if got := decodeKernel(c.D, c.stages, c.px); got != c.want {
			t.Errorf("got %s, want %s", got, c.want)
		}
		if !pdlKernel(mmaMod, decodeKernel(c.D, c.stages, c.px)) {
			t.Errorf("%s is not launched with PDL", c.want)
		}
	}
}
