package train

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/model"
	"github.com/parallax-engine/parallax/train/dist"
)

// stepCases are the runs the step tests train: both optimizers, with and
// without gradient accumulation.
var stepCases = []struct {
	optim string
	accum int
}{{OptMuon, 1}, {OptMuon, 2}, {OptAdamW, 1}, {OptAdamW, 2}}

// stepRun is testSetup for a few logged steps without evaluation.
func stepRun(t *testing.T, optim string, accum int) Config {
	t.Helper()
	cfg := testSetup(t, model.AttentionParallax, optim)
	cfg.Steps, cfg.Accum, cfg.EvalEvery, cfg.LogEvery = 5, accum, -1, 1
	return cfg
}

// runLosses runs cfg in one process and returns its losses.
func runLosses(t *testing.T, cfg Config) []float64 {
	t.Helper()
	var losses []float64
	cfg.OnStep = func(r Record) { losses = append(losses, *r.Loss) }
	if _, err := Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	return losses
}

// paramsDiff is the largest relative difference of a parameter of the
// checkpoint in dirA from the one in dirB (the largest element difference
// over the largest element of dirB's tensor).
func paramsDiff(t *testing.T, dirA, dirB string) float64 {
	t.Helper()
	a, b := checkpointParams(t, dirA), checkpointParams(t, dirB)
	if len(a) != len(b) {
		t.Fatalf("%d vs %d tensors", len(a), len(b))
	}
	worst := 0.0
	for n, va := range a {
		x, y := engine.DecodeFloat32(engine.F32, va), engine.DecodeFloat32(engine.F32, b[n])
		worst = math.Max(worst, maxRelErr(x, to64(y), to64(y)))
	}
	return worst
}

// lossesDiff is the largest relative difference of two loss curves.
func lossesDiff(t *testing.T, a, b []float64) float64 {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%d vs %d losses", len(a), len(b))
	}
	worst := 0.0
	for i := range a {
		worst = math.Max(worst, relDiff(a[i], b[i]))
	}
	return worst
}

// TestWorldOfOneMatchesSingle trains in one process and as the only rank
// of a job: a world of one runs the single process's step (no
// collectives), so the losses and the weights are bitwise the same.
func TestWorldOfOneMatchesSingle(t *testing.T) {
	for _, tc := range stepCases {
		t.Run(fmt.Sprintf("%s-accum%d", tc.optim, tc.accum), func(t *testing.T) {
			cfg := stepRun(t, tc.optim, tc.accum)
			one := cfg
			one.Out += "-single"
			want := runLosses(t, one)
			losses := make([][]float64, 1)
			_, errs := runJob(t, 1, cfg, dist.Options{}, func(r int, c *Config) {
				c.OnStep = func(rec Record) { losses[r] = append(losses[r], *rec.Loss) }
			})
			if errs[0] != nil {
				t.Fatal(errs[0])
			}
			if len(losses[0]) != len(want) {
				t.Fatalf("%d steps, one process %d", len(losses[0]), len(want))
			}
			for i := range want {
				if losses[0][i] != want[i] {
					t.Errorf("step %d: loss %v, one process %v", i+1, losses[0][i], want[i])
				}
			}
			a, b := checkpointParams(t, cfg.Out), checkpointParams(t, one.Out)
			for n, w := range b {
				if !bytes.Equal(a[n], w) {
					t.Errorf("%s differs from one process's", n)
				}
			}
		})
	}
}

// TestRanksMatchCombinedBatch trains on two ranks and in one process on
// the same global batches. The tolerance comes from a control run: one
// process with half the batch and twice the micro-batches reads the same
// sequences in each step and computes the same mean gradient, so it
// differs from the single process by float rounding alone, in the same
// places as the ranks (the gradients of each half summed apart, then
// added). The ranks must stay within a few times the control's difference,
// or within one f32 rounding where the control agrees more closely than
// that (the losses, summed in float64).
func TestRanksMatchCombinedBatch(t *testing.T) {
	const floor = 0x1p-24 // one f32 rounding, relative
	const factor = 4      // the ranks' rounding against the control's (measured: up to 1.5)
	for _, tc := range stepCases {
		t.Run(fmt.Sprintf("%s-accum%d", tc.optim, tc.accum), func(t *testing.T) {
			cfg := stepRun(t, tc.optim, tc.accum)
			single := cfg
			single.Out += "-single"
			want := runLosses(t, single)
			control := cfg
			control.Out += "-control"
			control.Batch, control.Accum = cfg.Batch/2, 2*cfg.Accum
			ctl := runLosses(t, control)
			losses := make([][]float64, 2)
			_, errs := runJob(t, 2, cfg, dist.Options{}, func(r int, c *Config) {
				c.BucketMB = 0.05 // several buckets
				c.OnStep = func(rec Record) { losses[r] = append(losses[r], *rec.Loss) }
			})
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			lossTol := math.Max(factor*lossesDiff(t, ctl, want), floor)
			paramTol := math.Max(factor*paramsDiff(t, control.Out, single.Out), floor)
			if d := lossesDiff(t, losses[1], losses[0]); d != 0 {
				t.Errorf("the ranks' losses differ by %.2e", d)
			}
			if d := lossesDiff(t, losses[0], want); d > lossTol {
				t.Errorf("losses differ from one process's by %.2e (relative), tolerance %.2e", d, lossTol)
			}
			if d := paramsDiff(t, cfg.Out, single.Out); d > paramTol {
				t.Errorf("parameters differ from one process's by %.2e (relative), tolerance %.2e", d, paramTol)
			}
			t.Logf("losses: ranks %.2e, control %.2e; parameters: ranks %.2e, control %.2e",
				lossesDiff(t, losses[0], want), lossesDiff(t, ctl, want), paramsDiff(t, cfg.Out, single.Out), paramsDiff(t, control.Out, single.Out))
		})
	}
}
