package mad

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/parallax-engine/parallax/engine/cpu"
	"github.com/parallax-engine/parallax/train"
)

// TestTrainResumesMidRun: a run stopped after an epoch continues from its
// save and ends with the uninterrupted run's result, bit for bit on the
// CPU, for both optimizers (AdamW's moments and step count, Muon's
// momentum); a save of another run is refused, and finishing removes it.
func TestTrainResumesMidRun(t *testing.T) {
	old := SaveEvery
	SaveEvery = 0 // every epoch
	defer func() { SaveEvery = old }()
	s, _ := Baseline(InContextRecall)
	s.TrainExamples, s.TestExamples = 24, 8
	trainSet, testSet, err := Generate(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, opt := range []string{train.OptAdamW, train.OptMuon} {
		t.Run(opt, func(t *testing.T) {
			spec := RunSpec{Setting: s, Mixer: MixerParallax, Optimizer: opt, LR: 3e-3, WD: 0.1, Epochs: 5, Batch: 8,
				MinLR: 1e-6, Seed: 7, Model: smokeModel}
			want, err := Train(context.Background(), cpu.New(), spec, trainSet, testSet, nil)
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(t.TempDir(), "run")
			for _, stop := range []int{2, 4} { // two interruptions
				ctx, cancel := context.WithCancel(context.Background())
				_, err := TrainResumable(ctx, cpu.New(), spec, trainSet, testSet, dir, func(e EpochStats) {
					if e.Epoch == stop {
						cancel()
					}
				})
				cancel()
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("stopped after epoch %d: err %v, want context.Canceled", stop, err)
				}
				if n := partialEpochs(dir); n != stop {
					t.Fatalf("saved after %d epochs, want %d", n, stop)
				}
			}
			var seen []int
			got, err := TrainResumable(context.Background(), cpu.New(), spec, trainSet, testSet, dir, func(e EpochStats) {
				seen = append(seen, e.Epoch)
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(seen) != 1 || seen[0] != 5 {
				t.Errorf("the resumed call ran epochs %v, want [5]", seen)
			}
			if got.Steps != want.Steps || got.Epochs != want.Epochs || got.BestEpoch != want.BestEpoch ||
				got.TestAcc != want.TestAcc || got.TestPPL != want.TestPPL || len(got.History) != len(want.History) {
				t.Fatalf("resumed run %+v\nwant %+v", got, want)
			}
			for i, e := range want.History {
				g := got.History[i]
				if g.TrainLoss != e.TrainLoss || g.TestLoss != e.TestLoss || g.TestAcc != e.TestAcc || g.LR != e.LR {
					t.Errorf("epoch %d: resumed %+v, uninterrupted %+v", e.Epoch, g, e)
				}
			}
			if err := DropPartial(dir); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("the save remains after DropPartial: %v", err)
			}
		})
	}

	// A save of another run (another seed) is an error, not a silent restart.
	spec := RunSpec{Setting: s, Mixer: MixerSoftmax, Optimizer: train.OptAdamW, LR: 3e-3, Epochs: 3, Batch: 8,
		MinLR: 1e-6, Seed: 1, Model: smokeModel}
	dir := filepath.Join(t.TempDir(), "run")
	ctx, cancel := context.WithCancel(context.Background())
	TrainResumable(ctx, cpu.New(), spec, trainSet, testSet, dir, func(EpochStats) { cancel() })
	spec.Seed = 2
	if _, err := TrainResumable(context.Background(), cpu.New(), spec, trainSet, testSet, dir, nil); err == nil {
		t.Error("resumed from another run's save")
	}
}
