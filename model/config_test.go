package model

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestPresets(t *testing.T) {
	want := map[string][8]int{ // d, L, Hq, Hkv, D, FFN, V, tied
		"tiny":           {128, 4, 4, 2, 32, 384, 4096, 1},
		"mad":            {128, 2, 16, 16, 8, 352, 16, 0},
		"small":          {512, 8, 8, 4, 64, 1536, 4096, 1},
		"gpt2-124m-like": {768, 12, 12, 12, 64, 2048, 50257, 1},
		"qwen3-0.6b":     {1024, 28, 16, 8, 128, 3072, 151936, 1},
		"qwen3-1.7b":     {2048, 28, 16, 8, 128, 6144, 151936, 1},
	}
	for _, name := range Presets() {
		c, err := PresetConfig(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		tied := 0
		if c.TiedEmbeddings {
			tied = 1
		}
		got := [8]int{c.Dim, c.Layers, c.Heads, c.KVHeads, c.HeadDim, c.FFN, c.Vocab, tied}
		if got != want[name] {
			t.Errorf("%s: %v, want %v", name, got, want[name])
		}
		if c.Attention != AttentionParallax || c.RInit != RInitLikeQ || c.NormEps != 1e-6 {
			t.Errorf("%s: attention %q, r init %q, eps %v", name, c.Attention, c.RInit, c.NormEps)
		}
		theta := 1e4
		if strings.HasPrefix(name, "qwen3") {
			theta = 1e6
		}
		if c.RopeTheta != theta {
			t.Errorf("%s: rope theta %v, want %v", name, c.RopeTheta, theta)
		}
	}
	if _, err := PresetConfig("huge"); err == nil || !strings.Contains(err.Error(), "qwen3-0.6b") {
		t.Errorf("unknown preset: %v", err)
	}
	// Parameter counts of the Qwen3 models (docs/MATH.md section 9): 596.0M and
	// 1.720B for the softmax models.
	for name, n := range map[string]int64{"qwen3-0.6b": 596_049_920, "qwen3-1.7b": 1_720_574_976} {
		c, _ := PresetConfig(name)
		c.Attention = AttentionSoftmax
		if got := c.NumParams(); got != n {
			t.Errorf("%s: %d parameters, want %d", name, got, n)
		}
	}
}

func TestValidate(t *testing.T) {
	base := testConfig(AttentionParallax, true)
	cases := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"zero vocab", func(c *Config) { c.Vocab = 0 }, "vocab must be positive"},
		{"negative dim", func(c *Config) { c.Dim = -1 }, "dim must be positive"},
		{"gqa", func(c *Config) { c.KVHeads = 3 }, "not a multiple of kv heads 3"},
		{"odd head dim", func(c *Config) { c.HeadDim = 7 }, "head dim 7 is odd"},
		{"theta", func(c *Config) { c.RopeTheta = 0 }, "rope theta"},
		{"eps", func(c *Config) { c.NormEps = -1 }, "norm eps"},
		{"attention", func(c *Config) { c.Attention = "linear" }, `attention "linear"`},
		{"r init", func(c *Config) { c.RInit = "ones" }, `r init "ones"`},
		{"max seq", func(c *Config) { c.MaxSeq = 0 }, "max seq"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := base
			c.edit(&cfg)
			err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

func TestConfigJSON(t *testing.T) {
	c, _ := PresetConfig("qwen3-0.6b")
	c.EOS = []int{151645}
	path := filepath.Join(t.TempDir(), "config.json")
	if err := WriteConfig(path, c); err != nil {
		t.Fatal(err)
	}
	got, err := ReadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, c) {
		t.Errorf("round trip: %+v, want %+v", got, c)
	}

	// A real Qwen3-0.6B config.json (transformers' keys) reads as the
	// softmax model.
	hf := `{"architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
	  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
	  "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
	  "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
	  "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
	  "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
	  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
	  "use_cache": true, "use_sliding_window": false, "vocab_size": 151936}`
	var q Config
	if err := json.Unmarshal([]byte(hf), &q); err != nil {
		t.Fatal(err)
	}
	want := c
	want.Attention = AttentionSoftmax
	want.BOS = []int{151643}
	if !reflect.DeepEqual(q, want) {
		t.Errorf("HF config: %+v, want %+v", q, want)
	}

	// Defaults for keys an HF config may omit.
	var d Config
	if err := json.Unmarshal([]byte(`{"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
	  "intermediate_size": 128, "vocab_size": 100}`), &d); err != nil {
		t.Fatal(err)
	}
	if d.HeadDim != 16 || d.KVHeads != 4 || d.RopeTheta != 1e4 || d.NormEps != 1e-6 || d.MaxSeq != 32768 || d.TiedEmbeddings {
		t.Errorf("defaults: %+v", d)
	}

	// Newer transformers keep rope_theta in rope_parameters.
	var rp Config
	if err := json.Unmarshal([]byte(`{"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
	  "intermediate_size": 128, "vocab_size": 100, "rope_parameters": {"rope_theta": 5e5, "rope_type": "default"}}`), &rp); err != nil {
		t.Fatal(err)
	}
	if rp.RopeTheta != 5e5 {
		t.Errorf("rope_parameters: theta %v, want 5e5", rp.RopeTheta)
	}

	bad := []struct{ json, want string }{
		{`{"hidden_size": 64}`, `missing key "num_hidden_layers"`},
		{`{"model_type": "qwen2", "hidden_size": 64}`, `model_type "qwen2"`},
		{`{"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
		  "vocab_size": 100, "rope_scaling": {"type": "yarn", "factor": 4}}`, "rope_scaling"},
		{`{"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
		  "vocab_size": 100, "num_key_value_heads": 3}`, "kv heads 3"},
		{`{"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
		  "vocab_size": 100, "attention": "mamba"}`, `attention "mamba"`},
		{`{"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
		  "vocab_size": 100, "eos_token_id": "x"}`, "eos_token_id"},
		{`{"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
		  "vocab_size": 100, "rope_parameters": {"rope_theta": 1e6, "rope_type": "yarn"}}`, `rope_type "yarn"`},
		{`{"hidden_size": "64"}`, "hidden_size"},
	}
	for _, b := range bad {
		var x Config
		err := json.Unmarshal([]byte(b.json), &x)
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: got %v, want an error containing %q", b.json, err, b.want)
		}
	}
}
