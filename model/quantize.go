package model

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/model/safetensors"
)

// QuantizeOptions modify Quantize.
type QuantizeOptions struct {
	// Group is the input columns that share a scale: 0 for the default
	// (engine.DefaultInt8Group, 128), PerChannel (-1) for one scale a row,
	// else any positive size (a matrix of K <= Group columns gets one scale
	// a row).
	Group int
	// Force replaces an existing, non-empty out.
	Force bool
}

// QuantizeReport is what Quantize wrote.
type QuantizeReport struct {
	Quant    Quantization
	Matrices int   // tensors stored as int8
	Values   int64 // their elements
	// BF16Bytes is what those tensors take in bf16 (2 bytes a value), the
	// compute copies a bf16 model holds; Int8Bytes what they take as int8
	// values and f32 scales (the head without the padding a GPU adds).
	BF16Bytes, Int8Bytes int64
	// FloatBytes is the F32 tensors kept as they were (the norm gains, the
	// probe gate).
	FloatBytes int64
	// MaxError is the largest |w - q s| / max|w| over each quantized
	// tensor's elements, the worst tensor's: at most 1/254 by construction.
	MaxError float64
}

// Quantize writes the float model directory in (ours or a Hugging Face
// one, read as Load reads it) to out as weight-only int8 (model/quant.go):
// config.json with the "quantization" entry, model.safetensors with every
// int8 kind's tensor as I8 and its scales as F32 under NAME + ScaleSuffix,
// the rest as F32, and the tokenizer files. The quantization runs on the
// host. The folder is written beside out and renamed into place, so a
// failure leaves none behind; an existing non-empty out is refused unless
// o.Force.
func Quantize(in, out string, o QuantizeOptions) (QuantizeReport, error) {
	r, err := quantize(in, out, o)
	if err != nil {
		return r, fmt.Errorf("quantize %s: %w", in, err)
	}
	return r, nil
}

func quantize(in, out string, o QuantizeOptions) (QuantizeReport, error) {
	q := Quantization{Method: QuantInt8, Group: o.Group}
	if q.Group == 0 {
		q.Group = engine.DefaultInt8Group
	}
	var rep QuantizeReport
	if err := q.Validate(); err != nil {
		return rep, err
	}
	if filepath.Clean(in) == filepath.Clean(out) {
		return rep, errors.New("the output folder is the input folder; write the quantized model to another folder")
	}
	if err := checkOut(out, o.Force); err != nil {
		return rep, err
	}
	cfg, err := ReadConfig(filepath.Join(in, ConfigFile))
	if err != nil {
		return rep, err
	}
	if cfg.Quant.Enabled() {
		return rep, fmt.Errorf("the folder is quantized already (%s); quantize the float checkpoint it came from", cfg.Quant)
	}
	ws, err := openWeights(in)
	if err != nil {
		return rep, err
	}
	defer ws.close()
	if !cfg.Parallax() && ws.has("model.layers.0.self_attn.r_proj.weight") {
		cfg.Attention = AttentionParallax
	}
	if cfg.TiedEmbeddings && ws.has("lm_head.weight") {
		same, err := ws.sameData("lm_head.weight", "model.embed_tokens.weight")
		if err != nil {
			return rep, err
		}
		cfg.TiedEmbeddings = same
	}
	if err := checkWeights(ws, cfg, false); err != nil {
		return rep, err
	}
	rep.Quant = q
	var tensors []safetensors.Tensor
	for _, s := range ParamSpecs(cfg) {
		f := ws.where[s.Name]
		vals, err := f.file.Float32(s.Name)
		if err != nil {
			return rep, err
		}
		if !int8Kind(s.Kind) {
			tensors = append(tensors, safetensors.F32Tensor(s.Name, s.Shape, vals))
			rep.FloatBytes += int64(4 * len(vals))
			continue
		}
		n, k := s.Shape[0], s.Shape[1]
		g := q.groupFor(k)
		qv, sv, err := engine.QuantizeInt8(vals, n, k, g)
		if err != nil {
			return rep, fmt.Errorf("%s: %s: %w", f.path, s.Name, err)
		}
		back, err := engine.DequantizeInt8(qv, sv, n, k, g)
		if err != nil {
			return rep, err
		}
		var e, amax float64
		for i, v := range vals {
			e = max(e, abs64(float64(back[i])-float64(v)))
			amax = max(amax, abs64(float64(v)))
		}
		if amax > 0 {
			rep.MaxError = max(rep.MaxError, e/amax)
		}
		tensors = append(tensors,
			safetensors.Tensor{Name: s.Name, DType: "I8", Shape: s.Shape, Data: encodeInt8(qv)},
			safetensors.Tensor{Name: s.Name + ScaleSuffix, DType: "F32", Shape: []int{n, engine.Int8Groups(k, g)}, Data: encodeF32(sv)})
		rep.Matrices++
		rep.Values += int64(len(vals))
		rep.BF16Bytes += 2 * int64(len(vals))
		rep.Int8Bytes += engine.Int8Bytes(n, k, g)
	}
	cfg.Quant = q
	parent := filepath.Dir(filepath.Clean(out))
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return rep, err
	}
	stage, err := os.MkdirTemp(parent, "."+filepath.Base(out)+".tmp-")
	if err != nil {
		return rep, err
	}
	done := false
	defer func() {
		if !done {
			os.RemoveAll(stage)
		}
	}()
	if err := os.Chmod(stage, 0o755); err != nil {
		return rep, err
	}
	meta := map[string]string{"format": "pt", "attention": cfg.Attention, "quantization": q.String()}
	if err := safetensors.Write(filepath.Join(stage, WeightsFile), tensors, meta); err != nil {
		return rep, err
	}
	if err := WriteConfig(filepath.Join(stage, ConfigFile), cfg); err != nil {
		return rep, err
	}
	for _, name := range TokenizerFiles {
		src := filepath.Join(in, name)
		if _, err := os.Stat(src); err != nil {
			continue
		}
		if err := copyFile(filepath.Join(stage, name), src); err != nil {
			return rep, err
		}
	}
	if err := os.RemoveAll(out); err != nil {
		return rep, err
	}
	if err := os.Rename(stage, out); err != nil {
		return rep, err
	}
	done = true
	return rep, nil
}

func abs64(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
