package model

import (
	"errors"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/cpu"
)

// memDevice is a CPU device that counts what is allocated on it and
// reports the memory it is told to (free 0 and total 0: the CPU's own).
type memDevice struct {
	*cpu.Device
	allocs      int
	bytes       int64
	free, total int64
}

func newMemDevice(free, total int64) *memDevice {
	return &memDevice{Device: cpu.New(), free: free, total: total}
}

func (d *memDevice) Alloc(dt engine.DType, shape ...int) (*engine.Tensor, error) {
	d.allocs++
	d.bytes += int64(engine.Shape(shape).Numel() * dt.Size())
	return d.Device.Alloc(dt, shape...)
}

func (d *memDevice) MemInfo() (free, total int64, err error) {
	if d.free == 0 && d.total == 0 {
		return d.Device.MemInfo()
	}
	return d.free, d.total, nil
}

// TestParamSpecsMatchNew: ParamSpecs lists exactly the parameters New
// allocates, and EstimateMemory their bytes (masters and compute copies,
// the padded head's included).
func TestParamSpecsMatchNew(t *testing.T) {
	gated := testConfig(AttentionParallax, true)
	gated.ProbeGate = true
	for _, c := range []struct {
		name string
		cfg  Config
		dt   engine.DType
	}{
		{"softmax tied f32", testConfig(AttentionSoftmax, true), engine.F32},
		{"parallax untied f32", testConfig(AttentionParallax, false), engine.F32},
		{"parallax probe gate bf16", gated, engine.BF16},
		{"parallax untied bf16", testConfig(AttentionParallax, false), engine.BF16},
		{"softmax tied f16", testConfig(AttentionSoftmax, true), engine.F16},
	} {
		t.Run(c.name, func(t *testing.T) {
			dev := newMemDevice(0, 0)
			m, err := New(dev, c.cfg, Options{Seed: 1, DType: c.dt})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Free()
			specs := ParamSpecs(c.cfg)
			if len(specs) != len(m.Params()) {
				t.Fatalf("%d specs, %d params", len(specs), len(m.Params()))
			}
			for i, p := range m.Params() {
				s := specs[i]
				if s.Name != p.Name || s.Kind != p.Kind || !s.Shape.Equal(p.W.Shape()) {
					t.Errorf("spec %d is %s %v %v, New has %s %v %v", i, s.Name, s.Kind, s.Shape, p.Name, p.Kind, p.W.Shape())
				}
			}
			est := EstimateMemory(c.cfg, c.dt)
			// New also allocates the padded head's row map (I32, PadVocab).
			rowMap := int64(0)
			if m.PadVocab() != c.cfg.Vocab {
				rowMap = int64(4 * m.PadVocab())
			}
			if est.Total()+rowMap != dev.bytes {
				t.Errorf("estimate %s + row map %d B, New allocated %d B", est, rowMap, dev.bytes)
			}
			if err := m.AllocGrads(); err != nil {
				t.Fatal(err)
			}
			if g := GradBytes(c.cfg); est.Total()+rowMap+g != dev.bytes {
				t.Errorf("gradients: estimate %d B, allocated %d B", g, dev.bytes-est.Total()-rowMap)
			}
		})
	}
}

// TestLoadChecksBeforeAllocating: a config that does not match the weights
// files, is absurd, or does not fit in the device's memory fails Load with
// a message before a single tensor is allocated.
func TestLoadChecksBeforeAllocating(t *testing.T) {
	src := newTestModel(t, testConfig(AttentionSoftmax, true), 5)
	need := EstimateMemory(src.Config, engine.F32).Total()
	cases := []struct {
		name        string
		config      map[string]any // config.json keys to override
		free, total int64          // the device's memory (0, 0: the CPU's)
		want        []string       // in the error; nil: Load succeeds
		mem         bool           // the error is a *MemoryError
	}{
		{name: "more layers than the file", config: map[string]any{"num_hidden_layers": 1000},
			want: []string{"model.layers.2.input_layernorm.weight", "missing"}},
		{name: "100000 layers", config: map[string]any{"num_hidden_layers": 100000},
			want: []string{"layers 100000 exceeds the limit"}},
		{name: "wider than the file", config: map[string]any{"intermediate_size": 1 << 19},
			want: []string{"model.layers.0.mlp.gate_proj.weight", "shape [24,16]", "[524288,16]"}},
		{name: "absurd width", config: map[string]any{"hidden_size": 1 << 30, "head_dim": 8},
			want: []string{"dim 1073741824 exceeds the limit"}},
		{name: "negative vocab", config: map[string]any{"vocab_size": -5},
			want: []string{"vocab must be positive"}},
		{name: "larger than free memory", free: need - 1, total: 1 << 40, mem: true,
			want: []string{"needs", engine.FormatBytes(need), "cpu:0 has " + engine.FormatBytes(need-1) + " free", "of 1.0 TiB"}},
		{name: "fits exactly", free: need, total: need},
		{name: "the machine's memory"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			writeHF(t, dir, src, &hfFixture{shards: 1, config: c.config})
			dev := newMemDevice(c.free, c.total)
			m, err := Load(dir, dev, LoadOptions{})
			if c.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				m.Free()
				return
			}
			if err == nil {
				m.Free()
				t.Fatal("Load succeeded")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			var me *MemoryError
			if got := errors.As(err, &me); got != c.mem {
				t.Errorf("error %v: *MemoryError %v, want %v", err, got, c.mem)
			}
			if c.mem && !errors.Is(err, ErrInsufficientMemory) {
				t.Errorf("error %v does not wrap ErrInsufficientMemory", err)
			}
			if dev.allocs != 0 {
				t.Errorf("%d tensors (%d bytes) were allocated before the error", dev.allocs, dev.bytes)
			}
		})
	}
}

// TestConfigLimits: sizes beyond the limits (and products of them that
// would overflow) are refused by name.
func TestConfigLimits(t *testing.T) {
	base := testConfig(AttentionParallax, true)
	for _, c := range []struct {
		name string
		edit func(*Config)
		want string // "" : valid
	}{
		{"limits themselves", func(c *Config) { c.Layers, c.FFN = MaxLayers, MaxWidth }, ""},
		{"layers", func(c *Config) { c.Layers = MaxLayers + 1 }, "layers 16385 exceeds"},
		{"dim", func(c *Config) { c.Dim = MaxWidth + 1 }, "dim 1048577 exceeds"},
		{"ffn", func(c *Config) { c.FFN = 1 << 40 }, "ffn 1099511627776 exceeds"},
		{"heads", func(c *Config) { c.Heads, c.KVHeads = 1<<21, 1<<21 }, "heads 2097152 exceeds"},
		{"head dim", func(c *Config) { c.HeadDim = 1 << 22 }, "head dim 4194304 exceeds"},
		{"q width", func(c *Config) { c.Heads, c.KVHeads, c.HeadDim = 1<<12, 1<<12, 1<<10 }, "heads x head dim = 4194304 exceeds"},
		{"max seq", func(c *Config) { c.MaxSeq = 1 << 40 }, "max seq 1099511627776 exceeds"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := base
			c.edit(&cfg)
			err := cfg.Validate()
			switch {
			case c.want == "" && err != nil:
				t.Fatal(err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("Validate: %v, want an error with %q", err, c.want)
			}
		})
	}
}
