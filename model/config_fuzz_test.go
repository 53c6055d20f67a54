package model

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// fuzzMaxInput bounds the inputs of the fuzz targets: larger files say
// nothing new about a parser and only slow the fuzzer down.
const fuzzMaxInput = 1 << 20

// fuzzQwen3Config is the config.json of Qwen/Qwen3-0.6B as published.
const fuzzQwen3Config = `{
  "architectures": ["Qwen3ForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 1024,
  "initializer_range": 0.02,
  "intermediate_size": 3072,
  "max_position_embeddings": 40960,
  "max_window_layers": 28,
  "model_type": "qwen3",
  "num_attention_heads": 16,
  "num_hidden_layers": 28,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06,
  "rope_scaling": null,
  "rope_theta": 1000000,
  "sliding_window": null,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.51.0",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
}`

// normConfig makes empty BOS and EOS lists nil, the one difference a JSON
// round trip may make.
func normConfig(c Config) Config {
	if len(c.BOS) == 0 {
		c.BOS = nil
	}
	if len(c.EOS) == 0 {
		c.EOS = nil
	}
	return c
}

// FuzzReadConfig feeds config.json files to ReadConfig. A config it accepts
// must validate and come back unchanged through MarshalJSON (which
// WriteConfig writes).
func FuzzReadConfig(f *testing.F) {
	for _, name := range Presets() {
		c, err := PresetConfig(name)
		if err != nil {
			f.Fatal(err)
		}
		b, err := json.MarshalIndent(c, "", "  ")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	c, _ := PresetConfig("tiny")
	c.Attention, c.ProbeGate, c.RInit = AttentionParallax, true, RInitZero
	c.BOS, c.EOS = []int{1}, []int{2, 3}
	b, _ := json.Marshal(c)
	f.Add(b)
	f.Add([]byte(fuzzQwen3Config))
	// HF defaults, rope_parameters, a list of EOS ids.
	f.Add([]byte(`{"hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4, "intermediate_size": 128,
		"vocab_size": 300, "rope_parameters": {"rope_theta": 5e5, "rope_type": "default"}, "eos_token_id": [1, 2],
		"bos_token_id": null}`))
	f.Add([]byte(`{"hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4, "intermediate_size": 128,
		"vocab_size": 300, "rope_scaling": {"type": "yarn", "factor": 4}}`))
	f.Add([]byte(`{"model_type": "llama"}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Add([]byte(``))
	// One file, rewritten by each run: the runs of a worker are sequential.
	path := filepath.Join(f.TempDir(), ConfigFile)
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > fuzzMaxInput {
			t.Skip()
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := ReadConfig(path)
		if err != nil {
			if !reflect.DeepEqual(c, Config{}) {
				t.Fatalf("ReadConfig failed (%v) but returned %+v", err, c)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("ReadConfig accepted a config that does not validate: %v\n%+v", err, c)
		}
		_ = c.String()
		if n := c.NumParams(); n <= 0 {
			t.Fatalf("NumParams = %d for a valid config %+v", n, c)
		}

		enc, err := json.Marshal(c)
		if err != nil {
			t.Fatalf("marshal %+v: %v", c, err)
		}
		var again Config
		if err := json.Unmarshal(enc, &again); err != nil {
			t.Fatalf("the marshalled config does not read back: %v\n%s", err, enc)
		}
		if !reflect.DeepEqual(normConfig(again), normConfig(c)) {
			t.Fatalf("JSON round trip changed the config:\n%+v\n%+v", c, again)
		}
	})
}
