package train

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/cpu"
	"github.com/parallax-engine/parallax/model"
)

// budgetBackend ("budget:0") is the CPU with the free memory set by
// budgetFree, so that a test can run out of it.
type budgetBackend struct{}

var budgetFree atomic.Int64

func init() { engine.Register(budgetBackend{}) }

func (budgetBackend) Name() string { return "budget" }

func (budgetBackend) Devices() ([]engine.DeviceInfo, error) {
	info := cpu.New().Info()
	info.Backend = "budget"
	return []engine.DeviceInfo{info}, nil
}

func (budgetBackend) Open(int) (engine.Device, error) { return &budgetDevice{cpu.New()}, nil }

type budgetDevice struct{ *cpu.Device }

func (d *budgetDevice) Info() engine.DeviceInfo {
	info := d.Device.Info()
	info.Backend = "budget"
	return info
}

func (d *budgetDevice) MemInfo() (free, total int64, err error) {
	return budgetFree.Load(), 1 << 40, nil
}

// TestRunChecksMemory: a run whose model, gradients and optimizer state do
// not fit in the device's free memory fails before anything is allocated
// (and, for a config that is too large whatever the tokenizer, before the
// tokenizer is trained), naming what it needs and what there is; one that
// fits runs.
func TestRunChecksMemory(t *testing.T) {
	base := testSetup(t, model.AttentionParallax, OptMuon)
	base.Device, base.Steps, base.EvalEvery = "budget:0", 2, -1
	mc, err := model.ReadConfig(base.Model)
	if err != nil {
		t.Fatal(err)
	}
	mc.Vocab = base.Vocab
	need := TrainingMemory(mc, engine.F32, base.Optim, 1, false).Total()
	atLeast := mc
	atLeast.Vocab = 257
	lower := TrainingMemory(atLeast, engine.F32, base.Optim, 1, false).Total()
	for _, c := range []struct {
		name      string
		free      int64
		fails     bool
		tokenizer bool // the tokenizer was trained before the failure
	}{
		{"far too little", lower - 1, true, false},
		{"too little for the final vocabulary", need - 1, true, true},
		{"enough", 1 << 40, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := base
			cfg.Out = filepath.Join(t.TempDir(), "run")
			budgetFree.Store(c.free)
			var trained bool
			cfg.Logf = func(format string, a ...any) {
				trained = trained || strings.Contains(fmt.Sprintf(format, a...), "BPE tokenizer")
			}
			_, err := Run(context.Background(), cfg)
			if trained != c.tokenizer {
				t.Errorf("tokenizer trained: %v, want %v", trained, c.tokenizer)
			}
			if !c.fails {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var me *model.MemoryError
			if !errors.As(err, &me) {
				t.Fatalf("Run: %v, want a *model.MemoryError", err)
			}
			for _, w := range []string{"needs", "gradients", "optimizer state", engine.FormatBytes(c.free) + " free", "budget:0"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	// Resuming checks the checkpoint's model before loading it.
	cfg := base
	cfg.Out = filepath.Join(t.TempDir(), "run")
	budgetFree.Store(1 << 40)
	if _, err := Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	budgetFree.Store(need - 1)
	cfg.Resume, cfg.Steps = true, 3
	var me *model.MemoryError
	if _, err := Run(context.Background(), cfg); !errors.As(err, &me) {
		t.Fatalf("resume: %v, want a *model.MemoryError", err)
	}
}
