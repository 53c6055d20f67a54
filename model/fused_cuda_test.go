//go:build cgo

package model

import (
	"math"
	"os"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/cuda"
)

// TestDecodeFusionOnCUDA decodes on cuda:0 with head dimensions the fused
// kernels take (D = 64, hidden 128): in f32 (only DecodePrep is fused
// there) within f32 rounding of the CPU; in bf16 the fused step within the
// rounding of h that the unfused one adds; and with programmatic dependent
// launch on and off, eagerly and recorded, bit for bit the same. It skips
// without a GPU unless PARALLAX_REQUIRE_CUDA=1.
func TestDecodeFusionOnCUDA(t *testing.T) {
	const B, P, steps = 2, 5, 6
	dev, err := engine.Open("cuda:0")
	if err != nil {
		if os.Getenv("PARALLAX_REQUIRE_CUDA") == "1" {
			t.Fatalf("PARALLAX_REQUIRE_CUDA=1 but %v", err)
		}
		t.Skipf("no CUDA device: %v", err)
	}
	defer dev.Close()
	gpu := dev.(*cuda.Device)
	for _, v := range []variant{variants[1], variants[3], variants[4]} {
		cfg := Config{Vocab: 61, Dim: 128, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 64, FFN: 256,
			RopeTheta: 1e4, NormEps: 1e-6, TiedEmbeddings: v.tied, Attention: v.attention, RInit: RInitLikeQ,
			MaxSeq: 32, ProbeGate: v.gate}
		ref := newTestModel(t, cfg, 43)
		var want [][]float32
		withFusion(false, func() { want = decodeSteps(t, ref, B, P, steps) })
		for _, dt := range []engine.DType{engine.F32, engine.BF16} {
			t.Run(v.name+"/"+dt.String(), func(t *testing.T) {
				m, err := New(dev, cfg, Options{Seed: 1, DType: dt})
				if err != nil {
					t.Fatal(err)
				}
				defer m.Free()
				for i, p := range m.Params() {
					w, err := engine.Float32s(ref.Params()[i].W)
					if err != nil {
						t.Fatal(err)
					}
					if err := engine.WriteFloat32(p.W, w); err != nil {
						t.Fatal(err)
					}
				}
				m.MarkWeightsChanged()
				run := func(fusion, graphs, pdl bool) [][]float32 {
					o := gpu.Options()
					o.NoPDL = !pdl
					if err := gpu.SetOptions(o); err != nil {
						t.Fatal(err)
					}
					defer gpu.SetOptions(cuda.Options{})
					m.SetGraphs(graphs)
					var out [][]float32
					withFusion(fusion, func() { out = decodeSteps(t, m, B, P, steps) })
					return out
				}
				unfused := run(false, false, false)
				fused := run(true, false, false)
				for _, c := range []struct {
					name        string
					graphs, pdl bool
				}{{"recorded", true, false}, {"pdl", false, true}, {"recorded pdl", true, true}} {
					got := run(true, c.graphs, c.pdl)
					for s := range fused {
						for j := range fused[s] {
							if math.Float32bits(got[s][j]) != math.Float32bits(fused[s][j]) {
								t.Fatalf("%s: step %d logit %d: %v, %v eager without PDL", c.name, s, j, got[s][j], fused[s][j])
							}
						}
					}
				}
				// f32: both against the CPU; bf16: the fused step against the
				// unfused one, relative to the step's largest logit.
				tol, base := 1e-3, want
				if dt == engine.BF16 {
					tol, base = 3e-2, unfused
				}
				var worst float64
				for s := range fused {
					var top, diff float64
					for j := range fused[s] {
						top = max(top, math.Abs(float64(base[s][j])))
						diff = max(diff, math.Abs(float64(fused[s][j]-base[s][j])))
					}
					worst = max(worst, diff/max(top, 1))
				}
				t.Logf("fused decode: worst relative logit difference %.3g (tolerance %.3g)", worst, tol)
				if !(worst <= tol) {
					t.Errorf("fused decode differs by %.3g relative, more than %.3g", worst, tol)
				}
			})
		}
	}
}

// BenchmarkDecodeStep times a batch-1 greedy decode step (recorded, the
// next id read back) of a qwen3-0.6b-shaped model with GPT-2's vocabulary
// (PERFORMANCE.md's generation table) in bf16 on cuda:0, with the decode
// fusion and programmatic dependent launch on and off:
//
//	go test ./model -run '^$' -bench DecodeStep -benchtime 256x
func BenchmarkDecodeStep(b *testing.B) {
	dev, err := engine.Open("cuda:0")
	if err != nil {
		b.Skipf("no CUDA device: %v", err)
	}
	defer dev.Close()
	gpu := dev.(*cuda.Device)
	for _, attention := range []string{AttentionSoftmax, AttentionParallax} {
		cfg, _ := PresetConfig("qwen3-0.6b")
		cfg.Vocab, cfg.MaxSeq, cfg.Attention = 50257, 4096, attention
		m, err := New(dev, cfg, Options{Seed: 1, DType: engine.BF16})
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range []struct {
			name        string
			fusion, pdl bool
		}{{"unfused", false, false}, {"fused", true, false}, {"fused+pdl", true, true}, {"unfused+pdl", false, true}} {
			b.Run(attention+"/"+c.name, func(b *testing.B) {
				if err := gpu.SetOptions(cuda.Options{NoPDL: !c.pdl}); err != nil {
					b.Fatal(err)
				}
				defer gpu.SetOptions(cuda.Options{})
				withFusion(c.fusion, func() {
					const P, warm = 16, 4
					kv, err := m.NewKVCache(1, P+warm+b.N+4)
					if err != nil {
						b.Fatal(err)
					}
					defer kv.Free()
					prompt := make([]int32, P)
					for i := range prompt {
						prompt[i] = int32(i * 997 % cfg.Vocab)
					}
					ids, err := m.StepGreedy(kv, prompt, 1, P)
					for i := 0; err == nil && i < warm; i++ {
						ids, err = m.StepGreedy(kv, ids, 1, 1)
					}
					b.ResetTimer()
					for i := 0; err == nil && i < b.N; i++ {
						ids, err = m.StepGreedy(kv, ids, 1, 1)
					}
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
					if os.Getenv("PARALLAX_DECODE_PROFILE") != "" {
						b.StopTimer()
						// One recorded step (its device time as a whole), then
						// one eager step kernel by kernel.
						for _, graphs := range []bool{true, false} {
							m.SetGraphs(graphs)
							pr := dev.(engine.Profiler)
							if err := pr.StartProfile(); err != nil {
								b.Fatal(err)
							}
							if ids, err = m.StepGreedy(kv, ids, 1, 1); err != nil {
								b.Fatal(err)
							}
							p, err := pr.StopProfile()
							if err != nil {
								b.Fatal(err)
							}
							b.Logf("graphs %v: %d ops, %.3f ms\n%s", graphs, p.TotalCalls(), p.TotalMillis(), p.Table())
						}
						m.SetGraphs(true)
					}
				})
			})
		}
		m.Free()
	}
}
