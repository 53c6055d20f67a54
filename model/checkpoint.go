package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/model/safetensors"
)

// Checkpoint file names inside a model directory (Hugging Face's).
const (
	ConfigFile  = "config.json"
	WeightsFile = "model.safetensors"
	IndexFile   = "model.safetensors.index.json" // sharded weights
)

// Save writes the model to dir (created if needed): model.safetensors with
// every parameter as F32 under its Hugging Face name, then config.json. Each
// file is written to a temporary file and renamed, so an interrupted save
// never leaves a partial file.
func (m *Model) Save(dir string) error {
	if m.quant.Enabled() {
		return fmt.Errorf("save model: %w", ErrQuantized)
	}
	if m.dropped {
		return fmt.Errorf("save model: %w", ErrInferenceOnly)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("save model: %w", err)
	}
	tensors := make([]safetensors.Tensor, 0, len(m.params))
	for _, p := range m.params {
		b := make([]byte, p.W.Bytes())
		if err := m.Dev.Read(p.W, b); err != nil {
			return fmt.Errorf("save model: read %s: %w", p.Name, err)
		}
		tensors = append(tensors, safetensors.Tensor{Name: p.Name, DType: "F32", Shape: p.W.Shape(), Data: b})
	}
	meta := map[string]string{"format": "pt", "attention": m.Config.Attention}
	if err := safetensors.Write(filepath.Join(dir, WeightsFile), tensors, meta); err != nil {
		return fmt.Errorf("save model: %w", err)
	}
	if err := WriteConfig(filepath.Join(dir, ConfigFile), m.Config); err != nil {
		return fmt.Errorf("save model: %w", err)
	}
	return nil
}

// LoadOptions modify Load.
type LoadOptions struct {
	// DType is the compute dtype of activations; 0 means F32.
	DType engine.DType
	// ConvertParallax turns a softmax checkpoint into a Parallax model by
	// adding W_R = 0 and r_norm gains of 1 to every layer: its outputs are
	// exactly those of the softmax model until W_R is trained. A Parallax
	// checkpoint is loaded as it is.
	ConvertParallax bool
	// Inference frees the f32 master of every weight that has a compute copy
	// once the copies are filled, so that a bf16 model holds about half the
	// memory of an f32 one. The model can then run (Step, Generate,
	// Evaluate, Logits) but not train or Save (ErrInferenceOnly); see
	// InferenceOnly. It changes nothing with an f32 compute dtype.
	Inference bool
	// Quantize holds the product weights and the embedding as weight-only
	// int8 (model/quant.go) when its Method is QuantInt8: a float folder's
	// are quantized on load (on the host, groups of Quantize.Group, 0 for
	// the default 128); a folder already quantized loads as it is (a Group
	// other than 0 must then be the folder's). The zero value loads the
	// weights as stored: int8 from a quantized folder. An int8 model needs
	// Inference.
	Quantize Quantization
}

// Load reads a model directory: ours (config.json + model.safetensors) or a
// Hugging Face Qwen3 one (config.json with model.safetensors, or shards
// named by model.safetensors.index.json). Tensors of any floating dtype are
// converted to f32; a folder `parallax quantize` wrote (config.json's
// "quantization") loads its int8 weights as they are, for inference
// (LoadOptions.Quantize). A checkpoint without our "attention" key is a softmax
// model, unless it holds r_proj tensors. Without lm_head.weight the
// embedding is the head (tie_word_embeddings); a tied config whose file
// still carries a head different from the embedding is loaded untied, so
// the outputs are the file's. Tensors the model does not have are ignored.
func Load(dir string, dev engine.Device, o LoadOptions) (*Model, error) {
	m, err := load(dir, dev, o)
	if err != nil {
		return nil, fmt.Errorf("load model %s: %w", dir, err)
	}
	return m, nil
}

func load(dir string, dev engine.Device, o LoadOptions) (*Model, error) {
	cfg, err := ReadConfig(filepath.Join(dir, ConfigFile))
	if err != nil {
		return nil, err
	}
	ws, err := openWeights(dir)
	if err != nil {
		return nil, err
	}
	defer ws.close()

	if !cfg.Parallax() && ws.has("model.layers.0.self_attn.r_proj.weight") {
		cfg.Attention = AttentionParallax // the tensors say so
	}
	convert := o.ConvertParallax && !cfg.Parallax()
	if convert {
		cfg.Attention, cfg.RInit = AttentionParallax, RInitZero
	}
	if cfg.TiedEmbeddings && ws.has("lm_head.weight") {
		same, err := ws.sameData("lm_head.weight", "model.embed_tokens.weight")
		if err != nil {
			return nil, err
		}
		if !same {
			cfg.TiedEmbeddings = false
		}
	}
	stored := cfg.Quant
	quant, err := resolveQuant(stored, o)
	if err != nil {
		return nil, err
	}
	// Every tensor's shape against the files, then the memory, before
	// anything is allocated: an absurd config must fail here, not by
	// exhausting the device.
	if err := checkWeights(ws, cfg, convert); err != nil {
		return nil, err
	}
	if stored.Enabled() {
		if err := checkInt8Weights(ws, cfg, stored); err != nil {
			return nil, err
		}
	}
	if err := CheckMemory(dev, EstimateMemoryQuant(cfg, o.DType, quant)); err != nil {
		return nil, err
	}
	cfg.Quant = quant
	m, err := newModel(dev, cfg, o.DType, quant)
	if err != nil {
		return nil, err
	}
	specs := ParamSpecs(cfg)
	for i, p := range m.params {
		if p.W == nil {
			err = m.loadInt8Param(ws, p, specs[i], stored, convert)
		} else {
			err = m.loadParam(ws, p, convert)
		}
		if err != nil {
			m.Free()
			return nil, err
		}
	}
	if o.Inference {
		if err := m.dropMasters(); err != nil {
			m.Free()
			return nil, err
		}
		m.dropped = m.dropped || quant.Enabled() // an int8 model has no masters to refresh from
	}
	return m, nil
}

// loadParam reads one parameter, checking its shape. With convert, a
// missing r_proj is zero and a missing r_norm is ones.
func (m *Model) loadParam(ws *weightSet, p *Param, convert bool) error {
	want := p.W.Shape()
	f, ok := ws.where[p.Name]
	if !ok {
		if convert && isRProj(p.Name) {
			return nil // zero-filled by Alloc
		}
		if convert && strings.HasSuffix(p.Name, ".self_attn.r_norm.weight") {
			return m.Dev.Fill(p.W, 1)
		}
		hint := ""
		if p.Kind == Head {
			hint = " (the config has tie_word_embeddings false; a tied model has no lm_head)"
		} else if isRProj(p.Name) || strings.HasSuffix(p.Name, ".r_norm.weight") {
			hint = " (a Parallax model needs W_R; load a softmax checkpoint with ConvertParallax)"
		}
		return fmt.Errorf("tensor %s %v is missing from %s%s", p.Name, want, ws.describe(), hint)
	}
	info, _ := f.file.Info(p.Name)
	if !engine.Shape(info.Shape).Equal(want) {
		return fmt.Errorf("%s: tensor %s has shape %v, the config needs %v", f.path, p.Name, engine.Shape(info.Shape), want)
	}
	vals, err := f.file.Float32(p.Name)
	if err != nil {
		return err
	}
	if err := engine.WriteFloat32(p.W, vals); err != nil {
		return fmt.Errorf("upload %s: %w", p.Name, err)
	}
	return nil
}

// weightFile is one opened safetensors file of a checkpoint.
type weightFile struct {
	path string
	file *safetensors.File
}

// weightSet maps tensor names to the file holding them.
type weightSet struct {
	dir   string
	files []*weightFile
	where map[string]*weightFile
}

func (ws *weightSet) has(name string) bool { _, ok := ws.where[name]; return ok }

func (ws *weightSet) close() {
	for _, f := range ws.files {
		f.file.Close()
	}
}

func (ws *weightSet) describe() string {
	if len(ws.files) == 1 {
		return ws.files[0].path
	}
	return fmt.Sprintf("the %d shards of %s", len(ws.files), filepath.Join(ws.dir, IndexFile))
}

func (ws *weightSet) sameData(a, b string) (bool, error) {
	fa, fb := ws.where[a], ws.where[b]
	if fb == nil {
		return false, nil
	}
	ia, _ := fa.file.Info(a)
	ib, _ := fb.file.Info(b)
	if ia.DType != ib.DType || !engine.Shape(ia.Shape).Equal(ib.Shape) {
		return false, nil
	}
	ra, err := fa.file.Raw(a)
	if err != nil {
		return false, err
	}
	rb, err := fb.file.Raw(b)
	if err != nil {
		return false, err
	}
	return bytes.Equal(ra, rb), nil
}

// openWeights opens model.safetensors, or else the shards listed by
// model.safetensors.index.json, checking that every indexed tensor is where
// the index says.
func openWeights(dir string) (*weightSet, error) {
	ws := &weightSet{dir: dir, where: map[string]*weightFile{}}
	single := filepath.Join(dir, WeightsFile)
	if _, err := os.Stat(single); err == nil {
		f, err := safetensors.Open(single)
		if err != nil {
			return nil, err
		}
		wf := &weightFile{path: single, file: f}
		ws.files = []*weightFile{wf}
		for _, n := range f.Names() {
			ws.where[n] = wf
		}
		return ws, nil
	}
	indexPath := filepath.Join(dir, IndexFile)
	raw, err := os.ReadFile(indexPath)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no %s or %s in %s", WeightsFile, IndexFile, dir)
	}
	if err != nil {
		return nil, err
	}
	var index struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(raw, &index); err != nil {
		return nil, fmt.Errorf("%s: %w", indexPath, err)
	}
	if len(index.WeightMap) == 0 {
		return nil, fmt.Errorf("%s: no weight_map", indexPath)
	}
	byFile := map[string]*weightFile{}
	names := make([]string, 0, len(index.WeightMap))
	for n := range index.WeightMap {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		shard := index.WeightMap[n]
		if shard == "" || shard != filepath.Base(shard) || shard == "." || shard == ".." {
			ws.close()
			return nil, fmt.Errorf("%s: tensor %s maps to %q, not a file name in the directory", indexPath, n, shard)
		}
		wf := byFile[shard]
		if wf == nil {
			path := filepath.Join(dir, shard)
			f, err := safetensors.Open(path)
			if err != nil {
				ws.close()
				return nil, fmt.Errorf("shard named by %s: %w", IndexFile, err)
			}
			wf = &weightFile{path: path, file: f}
			byFile[shard] = wf
			ws.files = append(ws.files, wf)
		}
		if _, ok := wf.file.Info(n); !ok {
			ws.close()
			return nil, fmt.Errorf("%s: tensor %s is not in %s although %s says it is", wf.path, n, shard, IndexFile)
		}
		ws.where[n] = wf
	}
	return ws, nil
}
