package model

import (
	"math"
	"os"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	_ "github.com/parallax-engine/parallax/engine/cuda"
	_ "github.com/parallax-engine/parallax/engine/vulkan"
)

// TestDecodeOnGPUs decodes the same prompts on each GPU backend present
// with recorded decode steps (where the device records graphs) and without:
// the two must agree bit for bit (a replay runs the very kernels of the
// eager step), and both must match the CPU within f32 rounding.
// PARALLAX_REQUIRE_VULKAN=1 / PARALLAX_REQUIRE_CUDA=1 make a missing device
// a failure.
func TestDecodeOnGPUs(t *testing.T) {
	const B, P, steps = 3, 5, 12
	cfg := testConfig(AttentionParallax, false)
	ref := newTestModel(t, cfg, 31)
	prompt, _ := testBatch(cfg, B, P, 32)
	decode := func(t *testing.T, m *Model, graphs bool) [][]float32 {
		t.Helper()
		m.SetGraphs(graphs)
		kv, err := m.NewKVCache(B, P+steps)
		if err != nil {
			t.Fatal(err)
		}
		defer kv.Free()
		logits, err := m.Step(kv, prompt, B, P, true)
		if err != nil {
			t.Fatal(err)
		}
		var out [][]float32
		next := make([]int32, B)
		for i := range steps {
			out = append(out, logits)
			for b := range B {
				next[b] = int32((i*7 + b*3 + 1) % cfg.Vocab) // a fixed, varied sequence
			}
			if logits, err = m.Step(kv, next, B, 1, true); err != nil {
				t.Fatalf("decode step %d: %v", i+1, err)
			}
		}
		return append(out, logits)
	}
	want := decode(t, ref, false)
	for _, backend := range []string{"vulkan", "cuda"} {
		t.Run(backend, func(t *testing.T) {
			env := map[string]string{"vulkan": "PARALLAX_REQUIRE_VULKAN", "cuda": "PARALLAX_REQUIRE_CUDA"}[backend]
			dev, err := engine.Open(backend + ":0")
			if err != nil {
				if os.Getenv(env) == "1" {
					t.Fatalf("%s=1 but %v", env, err)
				}
				t.Skipf("no %s device: %v", backend, err)
			}
			defer dev.Close()
			for _, dt := range []engine.DType{engine.F32, engine.BF16} {
				t.Run(dt.String(), func(t *testing.T) { decodeOn(t, dev, dt, cfg, ref, want, decode) })
			}
		})
	}
}

// decodeOn is TestDecodeOnGPUs on one device and dtype; want (the CPU's
// logits) is compared in f32 only.
func decodeOn(t *testing.T, dev engine.Device, dt engine.DType, cfg Config, ref *Model, want [][]float32,
	decode func(*testing.T, *Model, bool) [][]float32) {
	m, err := New(dev, cfg, Options{Seed: 1, DType: dt})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	for i, p := range m.Params() {
		v, err := engine.Float32s(ref.Params()[i].W)
		if err != nil {
			t.Fatal(err)
		}
		if err := engine.WriteFloat32(p.W, v); err != nil {
			t.Fatal(err)
		}
	}
	m.MarkWeightsChanged()
	eager := decode(t, m, false)
	replayed := decode(t, m, true)
	for s := range want {
		for j := range want[s] {
			if math.Float32bits(eager[s][j]) != math.Float32bits(replayed[s][j]) {
				t.Fatalf("step %d logit %d: %v recorded, %v eager", s, j, replayed[s][j], eager[s][j])
			}
			if d := math.Abs(float64(eager[s][j] - want[s][j])); dt == engine.F32 && !(d <= 1e-3*(1+math.Abs(float64(want[s][j])))) {
				t.Fatalf("step %d logit %d: %v on %s, %v on the CPU", s, j, eager[s][j], dev.Info().ID(), want[s][j])
			}
		}
	}
}
