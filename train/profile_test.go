package train

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/model"
)

// profCPU is a test backend, "profcpu", whose one device is the CPU device
// with a fake engine.Profiler that counts the MatMul calls made while it
// is on; it shows when the runner starts and stops a profile. It lists its
// device only while profCPUOn is set, so that no other test's "auto"
// picks it.
type profCPU struct{}

func init() { engine.Register(profCPU{}) }

func (profCPU) Name() string { return "profcpu" }

func (profCPU) Devices() ([]engine.DeviceInfo, error) {
	if !profCPUOn {
		return nil, fmt.Errorf("the profcpu test backend is off")
	}
	return []engine.DeviceInfo{{Backend: "profcpu", Name: "CPU with a fake profiler", Kind: engine.KindCPU}}, nil
}

func (profCPU) Open(int) (engine.Device, error) {
	d, err := engine.Open("cpu")
	if err != nil {
		return nil, err
	}
	lastProfDev = &profDevice{Device: d}
	if profStartHook != nil {
		profStartHook(lastProfDev)
	}
	return lastProfDev, nil
}

var (
	profCPUOn     bool              // profcpu lists its device
	lastProfDev   *profDevice       // the device profCPU opened last (the tests run serially)
	profStartHook func(*profDevice) // adjusts each device profCPU opens
)

type profDevice struct {
	engine.Device
	on             bool
	starts, stops  int
	matmuls        int
	failStart      bool
	startedAtSteps []int // completed steps seen at each StartProfile
	steps          int   // completed steps (counted by the test's OnStep)
}

func (d *profDevice) MatMul(out, a, b *engine.Tensor, o engine.MatMulOpts) error {
	if d.on {
		d.matmuls++
	}
	return d.Device.MatMul(out, a, b, o)
}

func (d *profDevice) StartProfile() error {
	if d.failStart {
		return fmt.Errorf("fake: no timers")
	}
	if d.on {
		return fmt.Errorf("fake: profiling already")
	}
	d.on, d.matmuls = true, 0
	d.starts++
	d.startedAtSteps = append(d.startedAtSteps, d.steps)
	return nil
}

func (d *profDevice) StopProfile() (engine.Profile, error) {
	if !d.on {
		return nil, fmt.Errorf("fake: not profiling")
	}
	d.on = false
	d.stops++
	return engine.Profile{{Name: "matmul", Calls: d.matmuls, Millis: 1}}, nil
}

// TestProfileStep checks that the runner profiles exactly Config.ProfileStep
// and returns the profile, and the errors for a step it cannot profile.
func TestProfileStep(t *testing.T) {
	profCPUOn = true
	defer func() { profCPUOn = false }()
	setup := func(t *testing.T) Config {
		cfg := testSetup(t, model.AttentionParallax, OptMuon)
		cfg.Device, cfg.Steps, cfg.Batch, cfg.EvalEvery, cfg.NoSave = "profcpu", 3, 2, -1, true
		return cfg
	}

	t.Run("profiles the step", func(t *testing.T) {
		cfg := setup(t)
		cfg.ProfileStep = 2
		cfg.OnStep = func(Record) { lastProfDev.steps++ }
		res, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		d := lastProfDev
		if d.starts != 1 || d.stops != 1 || len(d.startedAtSteps) != 1 || d.startedAtSteps[0] != 1 {
			t.Errorf("%d starts (after steps %v), %d stops; want one start after step 1 and one stop", d.starts, d.startedAtSteps, d.stops)
		}
		if len(res.Profile) != 1 || res.Profile[0].Calls == 0 {
			t.Fatalf("Result.Profile %+v, want the fake's one entry with the step's matmuls", res.Profile)
		}
		if d.matmuls != res.Profile[0].Calls {
			t.Errorf("profile has %d matmuls, the device saw %d", res.Profile[0].Calls, d.matmuls)
		}
	})

	t.Run("off", func(t *testing.T) {
		res, err := Run(context.Background(), setup(t))
		if err != nil {
			t.Fatal(err)
		}
		if lastProfDev.starts != 0 || res.Profile != nil {
			t.Errorf("ProfileStep 0: %d starts, profile %+v; want none", lastProfDev.starts, res.Profile)
		}
	})

	for _, c := range []struct {
		name   string
		device string
		step   int
		want   string
	}{
		{"no profiler", "cpu", 1, "train: profile step 1: cpu:0 (" + mustCPUName(t) + ") has no per-op device timers"},
		{"negative", "profcpu", -1, "train: profile step -1: want a step number >= 1"},
		{"past the end", "profcpu", 4, "train: profile step 4 is not one this run makes (steps 1 to 3)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := setup(t)
			cfg.Device, cfg.ProfileStep = c.device, c.step
			_, err := Run(context.Background(), cfg)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Run: %v, want an error with %q", err, c.want)
			}
		})
	}

	t.Run("start fails", func(t *testing.T) {
		cfg := setup(t)
		cfg.ProfileStep = 1
		// The device is opened inside Run; make its StartProfile fail.
		orig := profStartHook
		profStartHook = func(d *profDevice) { d.failStart = true }
		defer func() { profStartHook = orig }()
		_, err := Run(context.Background(), cfg)
		if err == nil || !strings.Contains(err.Error(), "train: step 1: fake: no timers") {
			t.Fatalf("Run: %v, want the StartProfile error with the step", err)
		}
	})
}

// mustCPUName is the CPU device's name, for an expected message.
func mustCPUName(t *testing.T) string {
	d, err := engine.Open("cpu")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	return d.Info().Name
}

// TestProfileStepVulkan profiles a training step on a Vulkan device (lavapipe
// in CI) and checks the breakdown has the step's products and positive time.
func TestProfileStepVulkan(t *testing.T) {
	dev, err := engine.Open("vulkan:0")
	if err != nil {
		if os.Getenv("PARALLAX_REQUIRE_VULKAN") == "1" {
			t.Fatalf("PARALLAX_REQUIRE_VULKAN=1 but %v", err)
		}
		t.Skipf("no Vulkan device: %v", err)
	}
	dev.Close()
	cfg := testSetup(t, model.AttentionParallax, OptMuon)
	cfg.Device, cfg.DType, cfg.Steps, cfg.Batch, cfg.EvalEvery, cfg.NoSave = "vulkan:0", "f32", 2, 2, -1, true
	cfg.ProfileStep = 2
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("step 2 on vulkan:0:\n%s", res.Profile.Table())
	gemms := 0
	for _, e := range res.Profile {
		if strings.HasPrefix(e.Name, "gemm f32 ") {
			gemms += e.Calls
			if !(e.FLOPs > 0) {
				t.Errorf("%s: %v FLOPs, want > 0", e.Name, e.FLOPs)
			}
		}
		if !(e.Millis >= 0) || e.Calls < 1 {
			t.Errorf("%s: %d calls, %v ms", e.Name, e.Calls, e.Millis)
		}
	}
	if gemms == 0 || !(res.Profile.TotalMillis() > 0) {
		t.Errorf("%d products, %v ms in all; want some of both", gemms, res.Profile.TotalMillis())
	}
}
