package model

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/cpu"
	"github.com/parallax-engine/parallax/model/safetensors"
)

func paramBytes(t *testing.T, p *Param) []byte {
	t.Helper()
	b := make([]byte, p.W.Bytes())
	if err := p.W.Device().Read(p.W, b); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSaveLoadRoundTrip(t *testing.T) {
	for _, v := range []variant{variants[1], variants[2]} {
		t.Run(v.name, func(t *testing.T) {
			cfg := testConfig(v.attention, v.tied)
			cfg.EOS = []int{7}
			m := newTestModel(t, cfg, 41)
			dir := filepath.Join(t.TempDir(), "ckpt")
			if err := m.Save(dir); err != nil {
				t.Fatal(err)
			}
			if err := m.Save(dir); err != nil { // overwriting works
				t.Fatal(err)
			}
			ents, _ := os.ReadDir(dir)
			if len(ents) != 2 {
				t.Errorf("checkpoint directory holds %d entries, want config.json and model.safetensors", len(ents))
			}
			got, err := Load(dir, cpu.New(), LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Config, m.Config) {
				t.Errorf("config after load %+v, saved %+v", got.Config, m.Config)
			}
			if len(got.Params()) != len(m.Params()) {
				t.Fatalf("%d params after load, %d saved", len(got.Params()), len(m.Params()))
			}
			for i, p := range m.Params() {
				q := got.Params()[i]
				if q.Name != p.Name || q.Kind != p.Kind || !bytes.Equal(paramBytes(t, q), paramBytes(t, p)) {
					t.Errorf("param %s did not round-trip bit-exactly", p.Name)
				}
			}
			raw, err := os.ReadFile(filepath.Join(dir, ConfigFile))
			if err != nil {
				t.Fatal(err)
			}
			var keys map[string]any
			if err := json.Unmarshal(raw, &keys); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
				"head_dim", "intermediate_size", "vocab_size", "rope_theta", "rms_norm_eps", "tie_word_embeddings",
				"max_position_embeddings", "model_type", "architectures", "attention"} {
				if _, ok := keys[k]; !ok {
					t.Errorf("config.json lacks %q", k)
				}
			}
			if keys["attention"] != v.attention || keys["model_type"] != "qwen3" {
				t.Errorf("config.json attention %v, model_type %v", keys["attention"], keys["model_type"])
			}
		})
	}
}

// hfFixture describes a synthetic Hugging Face Qwen3 directory.
type hfFixture struct {
	shards   int                  // number of shards (1: a single model.safetensors)
	head     string               // "": no lm_head; "same": a copy of the embedding; "other": a different head
	drop     map[string]bool      // tensors left out
	reshape  map[string][]int     // tensors written with a wrong shape
	config   map[string]any       // config.json keys overriding the defaults
	weights  map[string][]float32 // filled: the values written (before bf16 rounding)
	otherHed []float32
}

// writeHF writes m's weights as an HF Qwen3 checkpoint in bf16, the way the
// hub ships them: config.json with HF's keys (and none of ours), and either
// model.safetensors or shards model-0000k-of-0000n.safetensors with an
// index.
func writeHF(t *testing.T, dir string, m *Model, fx *hfFixture) {
	t.Helper()
	c := m.Config
	cfg := map[string]any{
		"architectures": []string{"Qwen3ForCausalLM"}, "attention_bias": false, "attention_dropout": 0.0,
		"bos_token_id": 1, "eos_token_id": []int{2, 3}, "head_dim": c.HeadDim, "hidden_act": "silu",
		"hidden_size": c.Dim, "initializer_range": 0.02, "intermediate_size": c.FFN,
		"max_position_embeddings": c.MaxSeq, "max_window_layers": c.Layers, "model_type": "qwen3",
		"num_attention_heads": c.Heads, "num_hidden_layers": c.Layers, "num_key_value_heads": c.KVHeads,
		"rms_norm_eps": c.NormEps, "rope_scaling": nil, "rope_theta": c.RopeTheta, "sliding_window": nil,
		"tie_word_embeddings": c.TiedEmbeddings, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
		"use_cache": true, "use_sliding_window": false, "vocab_size": c.Vocab,
	}
	for k, v := range fx.config {
		if v == nil {
			delete(cfg, k)
		} else {
			cfg[k] = v
		}
	}
	raw, _ := json.MarshalIndent(cfg, "", "  ")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	fx.weights = map[string][]float32{}
	var tensors []safetensors.Tensor
	for _, p := range m.Params() {
		v, err := engine.Float32s(p.W)
		if err != nil {
			t.Fatal(err)
		}
		fx.weights[p.Name] = v
		if fx.drop[p.Name] {
			continue
		}
		shape := p.W.Shape()
		if s, ok := fx.reshape[p.Name]; ok {
			shape = s
		}
		tensors = append(tensors, safetensors.BF16Tensor(p.Name, shape, v))
	}
	switch fx.head {
	case "same":
		tensors = append(tensors, safetensors.BF16Tensor("lm_head.weight", []int{c.Vocab, c.Dim}, fx.weights["model.embed_tokens.weight"]))
	case "other":
		h := make([]float32, c.Vocab*c.Dim)
		for i := range h {
			h[i] = float32((i*7)%13-6) / 8
		}
		fx.otherHed = h
		tensors = append(tensors, safetensors.BF16Tensor("lm_head.weight", []int{c.Vocab, c.Dim}, h))
	}
	if fx.shards <= 1 {
		if err := safetensors.Write(filepath.Join(dir, WeightsFile), tensors, map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
		return
	}
	weightMap := map[string]string{}
	parts := make([][]safetensors.Tensor, fx.shards)
	total := 0
	for i, ts := range tensors {
		k := i % fx.shards
		parts[k] = append(parts[k], ts)
		weightMap[ts.Name] = fmt.Sprintf("model-%05d-of-%05d.safetensors", k+1, fx.shards)
		total += len(ts.Data)
	}
	for k, part := range parts {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", k+1, fx.shards)
		if err := safetensors.Write(filepath.Join(dir, name), part, map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
	}
	idx, _ := json.MarshalIndent(map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": weightMap}, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, IndexFile), idx, 0o644); err != nil {
		t.Fatal(err)
	}
}

func bf16Round(v []float32) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = engine.BF16.Round(x)
	}
	return out
}

func TestLoadHF(t *testing.T) {
	src := newTestModel(t, testConfig(AttentionSoftmax, true), 51)
	dir := filepath.Join(t.TempDir(), "qwen3")
	fx := &hfFixture{shards: 3}
	writeHF(t, dir, src, fx)
	m, err := Load(dir, cpu.New(), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := testConfig(AttentionSoftmax, true)
	want.BOS, want.EOS = []int{1}, []int{2, 3}
	if !reflect.DeepEqual(m.Config, want) {
		t.Errorf("loaded config %+v, want %+v", m.Config, want)
	}
	for _, p := range m.Params() {
		got, _ := engine.Float32s(p.W)
		if !reflect.DeepEqual(got, bf16Round(fx.weights[p.Name])) {
			t.Errorf("%s: loaded values differ from the bf16 file's", p.Name)
		}
	}
	prompt := []int{1, 5, 9, 2, 7, 7}
	base, err := m.SequenceLogits(prompt)
	if err != nil {
		t.Fatal(err)
	}

	// ConvertParallax: W_R = 0, r_norm = 1, the same logits bit for bit.
	p, err := Load(dir, cpu.New(), LoadOptions{ConvertParallax: true})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Config.Parallax() || p.Config.RInit != RInitZero || p.Blocks[1].R == nil {
		t.Fatalf("converted config %+v", p.Config)
	}
	r, _ := engine.Float32s(p.Blocks[1].R.W)
	g, _ := engine.Float32s(p.Blocks[1].RNorm.W)
	for i := range r {
		if r[i] != 0 {
			t.Fatal("converted W_R is not zero")
		}
	}
	for i := range g {
		if g[i] != 1 {
			t.Fatal("converted r_norm gain is not 1")
		}
	}
	conv, err := p.SequenceLogits(prompt)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(conv, base) {
		var worst float64
		for i := range conv {
			worst = max(worst, float64(abs32(conv[i]-base[i])))
		}
		t.Errorf("ConvertParallax changed the logits (max difference %.3g)", worst)
	}
	// A converted model saves and loads as a Parallax model.
	pdir := filepath.Join(t.TempDir(), "converted")
	if err := p.Save(pdir); err != nil {
		t.Fatal(err)
	}
	p2, err := Load(pdir, cpu.New(), LoadOptions{})
	if err != nil || !p2.Config.Parallax() {
		t.Fatalf("reload converted: %v", err)
	}
}

// TestLoadDetectsParallax: an HF-style directory without our "attention"
// key but with r_proj tensors loads as Parallax.
func TestLoadDetectsParallax(t *testing.T) {
	src := newTestModel(t, testConfig(AttentionParallax, true), 55)
	dir := t.TempDir()
	writeHF(t, dir, src, &hfFixture{shards: 2})
	m, err := Load(dir, cpu.New(), LoadOptions{ConvertParallax: true})
	if err != nil {
		t.Fatal(err)
	}
	if !m.Config.Parallax() {
		t.Fatal("loaded as softmax")
	}
	r, _ := engine.Float32s(m.Blocks[0].R.W)
	w := paramValues(t, src.Blocks[0].R)
	if !reflect.DeepEqual(r, bf16Round(w)) {
		t.Error("r_proj not loaded from the file (ConvertParallax must keep an existing W_R)")
	}
}

func paramValues(t *testing.T, p *Param) []float32 {
	v, err := engine.Float32s(p.W)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func abs32(x float32) float32 {
	if x < 0 {
		return -x
	}
	return x
}

// TestLoadHFHead: a tied config with a head equal to the embedding stays
// tied; with a different head the file's head is used (untied); an untied
// config takes lm_head.
func TestLoadHFHead(t *testing.T) {
	src := newTestModel(t, testConfig(AttentionSoftmax, true), 52)
	for _, c := range []struct {
		head string
		tied bool
	}{{"same", true}, {"other", false}} {
		t.Run(c.head, func(t *testing.T) {
			dir := t.TempDir()
			fx := &hfFixture{shards: 1, head: c.head}
			writeHF(t, dir, src, fx)
			m, err := Load(dir, cpu.New(), LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if m.Config.TiedEmbeddings != c.tied || (m.Head == nil) != c.tied {
				t.Fatalf("tied %v (head %v), want tied %v", m.Config.TiedEmbeddings, m.Head, c.tied)
			}
			if !c.tied {
				h, _ := engine.Float32s(m.Head.W)
				if !reflect.DeepEqual(h, bf16Round(fx.otherHed)) {
					t.Error("lm_head not loaded from the file")
				}
			}
		})
	}
	untied := newTestModel(t, testConfig(AttentionSoftmax, false), 53)
	dir := t.TempDir()
	writeHF(t, dir, untied, &hfFixture{shards: 2})
	m, err := Load(dir, cpu.New(), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h, _ := engine.Float32s(m.Head.W)
	w, _ := engine.Float32s(untied.Head.W)
	if !reflect.DeepEqual(h, bf16Round(w)) {
		t.Error("untied lm_head not loaded")
	}
}

// TestLoadErrors: damaged or inconsistent directories are refused with an
// error naming the tensor and the file.
func TestLoadErrors(t *testing.T) {
	src := newTestModel(t, testConfig(AttentionSoftmax, true), 61)
	psrc := newTestModel(t, testConfig(AttentionParallax, true), 61)
	const upName = "model.layers.1.mlp.up_proj.weight"
	const kName = "model.layers.0.self_attn.k_proj.weight"
	cases := []struct {
		name   string
		model  *Model
		fx     hfFixture
		damage func(t *testing.T, dir string)
		opts   LoadOptions
		want   []string
	}{
		{name: "missing tensor", model: src, fx: hfFixture{shards: 2, drop: map[string]bool{upName: true}},
			want: []string{upName, "missing", IndexFile}},
		{name: "missing tensor single file", model: src, fx: hfFixture{shards: 1, drop: map[string]bool{upName: true}},
			want: []string{upName, "missing", WeightsFile}},
		{name: "wrong shape", model: src, fx: hfFixture{shards: 2, reshape: map[string][]int{kName: {8, 32}}},
			want: []string{kName, "shape [8,32]", "[16,16]", ".safetensors"}},
		{name: "truncated shard", model: src, fx: hfFixture{shards: 2}, damage: func(t *testing.T, dir string) {
			p := filepath.Join(dir, "model-00002-of-00002.safetensors")
			b, _ := os.ReadFile(p)
			os.WriteFile(p, b[:len(b)-10], 0o644)
		}, want: []string{"model-00002-of-00002.safetensors", "truncated"}},
		{name: "garbage file", model: src, fx: hfFixture{shards: 1}, damage: func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, WeightsFile), []byte("not a tensor file at all"), 0o644)
		}, want: []string{WeightsFile, "not a valid safetensors file"}},
		{name: "missing shard", model: src, fx: hfFixture{shards: 2}, damage: func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "model-00001-of-00002.safetensors"))
		}, want: []string{"model-00001-of-00002.safetensors"}},
		{name: "index lies", model: src, fx: hfFixture{shards: 2}, damage: func(t *testing.T, dir string) {
			p := filepath.Join(dir, IndexFile)
			b, _ := os.ReadFile(p)
			var idx map[string]map[string]any
			json.Unmarshal(b, &idx)
			f := idx["weight_map"][upName].(string)
			other := "model-00001-of-00002.safetensors"
			if f == other {
				other = "model-00002-of-00002.safetensors"
			}
			idx["weight_map"][upName] = other
			b, _ = json.Marshal(idx)
			os.WriteFile(p, b, 0o644)
		}, want: []string{upName, "is not in"}},
		{name: "index escapes the directory", model: src, fx: hfFixture{shards: 2}, damage: func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, IndexFile), []byte(`{"weight_map": {"x": "../x.safetensors"}}`), 0o644)
		}, want: []string{"not a file name"}},
		{name: "no weights", model: src, fx: hfFixture{shards: 1}, damage: func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, WeightsFile))
		}, want: []string{"no model.safetensors or model.safetensors.index.json"}},
		{name: "no config", model: src, fx: hfFixture{shards: 1}, damage: func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, ConfigFile))
		}, want: []string{ConfigFile}},
		{name: "rope scaling", model: src, fx: hfFixture{shards: 1, config: map[string]any{"rope_scaling": map[string]any{"type": "yarn"}}},
			want: []string{ConfigFile, "rope_scaling"}},
		{name: "other model type", model: src, fx: hfFixture{shards: 1, config: map[string]any{"model_type": "llama"}},
			want: []string{"model_type \"llama\""}},
		{name: "untied without head", model: src, fx: hfFixture{shards: 1, config: map[string]any{"tie_word_embeddings": false}},
			want: []string{"lm_head.weight", "missing"}},
		{name: "parallax without r_proj", model: psrc,
			fx:   hfFixture{shards: 1, config: map[string]any{"attention": "parallax"}, drop: map[string]bool{"model.layers.1.self_attn.r_proj.weight": true}},
			want: []string{"model.layers.1.self_attn.r_proj.weight", "ConvertParallax"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			fx := c.fx
			writeHF(t, dir, c.model, &fx)
			if c.damage != nil {
				c.damage(t, dir)
			}
			_, err := Load(dir, cpu.New(), c.opts)
			if err == nil {
				t.Fatal("Load succeeded")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}
