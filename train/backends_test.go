package train

import (
	"context"
	"math"
	"os"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	_ "github.com/parallax-engine/parallax/engine/cuda"
	_ "github.com/parallax-engine/parallax/engine/vulkan"
	"github.com/parallax-engine/parallax/model"
)

// TestSameTrainingOnEveryBackend runs the same short training (model,
// optimizer, data and seed) on the CPU and on each GPU backend present, in
// f32, and compares the loss of every step. The training layer knows no
// backend; this is the proof that none needs special treatment.
// PARALLAX_REQUIRE_VULKAN=1 / PARALLAX_REQUIRE_CUDA=1 turn a missing device
// into a failure.
func TestSameTrainingOnEveryBackend(t *testing.T) {
	losses := func(t *testing.T, device string) []float64 {
		cfg := testSetup(t, model.AttentionParallax, OptMuon)
		cfg.Device, cfg.DType = device, "f32"
		cfg.Steps, cfg.Batch, cfg.EvalEvery = 4, 4, -1
		var out []float64
		cfg.OnStep = func(r Record) { out = append(out, *r.Loss) }
		if _, err := Run(context.Background(), cfg); err != nil {
			t.Fatalf("train on %s: %v", device, err)
		}
		return out
	}
	want := losses(t, "cpu")
	for _, backend := range []string{"vulkan", "cuda"} {
		t.Run(backend, func(t *testing.T) {
			env := "PARALLAX_REQUIRE_" + map[string]string{"vulkan": "VULKAN", "cuda": "CUDA"}[backend]
			dev, err := engine.Open(backend + ":0")
			if err != nil {
				if os.Getenv(env) == "1" {
					t.Fatalf("%s=1 but %v", env, err)
				}
				t.Skipf("no %s device: %v", backend, err)
			}
			dev.Close()
			got := losses(t, backend+":0")
			if len(got) != len(want) {
				t.Fatalf("%d steps on %s, %d on the CPU", len(got), backend, len(want))
			}
			for i := range want {
				// Step 1 sees identical weights; later steps amplify rounding
				// through Muon's orthogonalised updates, hence the looser bound.
				tol := 1e-4
				if i > 0 {
					tol = 2e-3
				}
				if d := math.Abs(got[i]-want[i]) / want[i]; !(d <= tol) {
					t.Errorf("step %d: loss %.6f on %s, %.6f on the CPU (relative difference %.2g > %.0g)",
						i+1, got[i], backend, want[i], d, tol)
				}
			}
			t.Logf("losses on %s: %v (CPU %v)", backend, got, want)
		})
	}
}
