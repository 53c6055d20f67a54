package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/internal/atomicfile"
	"github.com/parallax-engine/parallax/model/safetensors"
)

// TokenizerFiles are the files of a model directory that belong to its
// tokenizer and chat template; Export copies those present.
var TokenizerFiles = []string{"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
	"chat_template.jinja", "generation_config.json", "vocab.json", "merges.txt"}

// ExportOptions modify Export.
type ExportOptions struct {
	// DType is the safetensors dtype of the written weights: "BF16" (the
	// default), "F16" or "F32".
	DType string
	// Force replaces an existing, non-empty out.
	Force bool
}

// Export writes the model directory in (ours or a Hugging Face one, read
// as Load reads it) to out in the Hugging Face layout: config.json,
// model.safetensors with every parameter in o.DType under its Qwen3 name,
// and the tokenizer files. A softmax model's config is a plain Qwen3 one
// that transformers loads; a Parallax model keeps our "attention" and
// "r_init" keys and its r_proj and r_norm tensors. A quantized folder
// (parallax quantize) is exported dequantized (q s). The folder is written
// beside out and renamed into place, so a failure leaves no partial
// export.
func Export(in, out string, o ExportOptions) error {
	if err := export(in, out, o); err != nil {
		return fmt.Errorf("export %s: %w", in, err)
	}
	return nil
}

func export(in, out string, o ExportOptions) error {
	dt := strings.ToUpper(o.DType)
	if dt == "" {
		dt = "BF16"
	}
	enc := map[string]func(string, []int, []float32) safetensors.Tensor{
		"BF16": safetensors.BF16Tensor, "F16": safetensors.F16Tensor, "F32": safetensors.F32Tensor,
	}[dt]
	if enc == nil {
		return fmt.Errorf("dtype %q: want BF16, F16 or F32", o.DType)
	}
	torchDType := map[string]string{"BF16": "bfloat16", "F16": "float16", "F32": "float32"}[dt]
	if err := checkOut(out, o.Force); err != nil {
		return err
	}
	cfg, err := ReadConfig(filepath.Join(in, ConfigFile))
	if err != nil {
		return err
	}
	ws, err := openWeights(in)
	if err != nil {
		return err
	}
	defer ws.close()
	if !cfg.Parallax() && ws.has("model.layers.0.self_attn.r_proj.weight") {
		cfg.Attention = AttentionParallax
	}
	if cfg.TiedEmbeddings && ws.has("lm_head.weight") {
		same, err := ws.sameData("lm_head.weight", "model.embed_tokens.weight")
		if err != nil {
			return err
		}
		cfg.TiedEmbeddings = same
	}
	if err := checkWeights(ws, cfg, false); err != nil {
		return err
	}
	if cfg.Quant.Enabled() {
		if err := checkInt8Weights(ws, cfg, cfg.Quant); err != nil {
			return err
		}
	}
	var tensors []safetensors.Tensor
	for _, s := range ParamSpecs(cfg) {
		vals, err := readFloat(ws, s, cfg.Quant)
		if err != nil {
			return err
		}
		tensors = append(tensors, enc(s.Name, s.Shape, vals))
	}
	cfg.Quant = Quantization{} // the export holds float weights
	cj, err := exportConfig(cfg, torchDType)
	if err != nil {
		return err
	}
	parent := filepath.Dir(filepath.Clean(out))
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	stage, err := os.MkdirTemp(parent, "."+filepath.Base(out)+".tmp-")
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			os.RemoveAll(stage)
		}
	}()
	if err := os.Chmod(stage, 0o755); err != nil {
		return err
	}
	meta := map[string]string{"format": "pt"}
	if cfg.Parallax() {
		meta["attention"] = cfg.Attention
	}
	if err := safetensors.Write(filepath.Join(stage, WeightsFile), tensors, meta); err != nil {
		return err
	}
	if err := atomicfile.WriteFile(filepath.Join(stage, ConfigFile), cj); err != nil {
		return err
	}
	for _, name := range TokenizerFiles {
		src := filepath.Join(in, name)
		if _, err := os.Stat(src); err != nil {
			continue
		}
		if err := copyFile(filepath.Join(stage, name), src); err != nil {
			return err
		}
	}
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	if err := os.Rename(stage, out); err != nil {
		return err
	}
	done = true
	return nil
}

// readFloat reads parameter s's tensor as f32: dequantized (q s) when the
// folder stores it as int8 (q enabled and s an int8 kind).
func readFloat(ws *weightSet, s ParamSpec, q Quantization) ([]float32, error) {
	if !q.Enabled() || !int8Kind(s.Kind) {
		return ws.where[s.Name].file.Float32(s.Name)
	}
	n, k := s.Shape[0], s.Shape[1]
	g := q.groupFor(k)
	qv, sv, err := readInt8(ws, s.Name, n, k, g)
	if err != nil {
		return nil, err
	}
	return engine.DequantizeInt8(qv, sv, n, k, g)
}

// exportConfig is cfg's config.json with torch_dtype set; a softmax
// model's loses our keys.
func exportConfig(cfg Config, torchDType string) ([]byte, error) {
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	m["torch_dtype"] = torchDType
	if !cfg.Parallax() {
		delete(m, "attention")
		delete(m, "r_init")
		delete(m, "probe_gate")
	}
	b, err = json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// checkOut refuses an out that exists and is not an empty directory,
// unless force.
func checkOut(out string, force bool) error {
	st, err := os.Stat(out)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s exists and is not a directory", out)
	}
	ents, err := os.ReadDir(out)
	if err != nil {
		return err
	}
	if len(ents) > 0 && !force {
		return fmt.Errorf("%s exists and is not empty (replace it with --force, or choose another --out)", out)
	}
	return nil
}

func copyFile(dst, src string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	return atomicfile.Write(dst, func(w io.Writer) error {
		_, err := io.Copy(w, f)
		return err
	})
}
