package main

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/model"
	"github.com/parallax-engine/parallax/model/tokenizer"
)

// What generate, eval and bench generate share: the --dtype flag, loading a
// model for inference, and checks of numeric flags.

// dtypeUsage is the help of the inference commands' --dtype flag.
const dtypeUsage = "compute dtype of the weights, activations and KV cache: auto (bf16 on GPUs, f32 on the CPU and software devices), f32, bf16 or f16"

// parseDTypeFlag parses --dtype: 0 for auto (resolved once the device is
// open), else f32, bf16 or f16.
func parseDTypeFlag(s string) (engine.DType, error) {
	if strings.EqualFold(strings.TrimSpace(s), "auto") {
		return 0, nil
	}
	dt, err := engine.ParseDType(strings.ToLower(strings.TrimSpace(s)))
	if err != nil || !dt.IsFloat() {
		return 0, usagef("--dtype %q: want auto, f32, bf16 or f16", s)
	}
	return dt, nil
}

// resolveDType turns a parsed --dtype into the compute dtype on dev: auto is
// model.AutoDType (the rule train uses); an explicit dtype the device does
// not list is a command-line mistake.
func resolveDType(dt engine.DType, info engine.DeviceInfo) (engine.DType, error) {
	if dt == 0 {
		return model.AutoDType(info), nil
	}
	if !slices.Contains(info.DTypes, dt) {
		names := make([]string, len(info.DTypes))
		for i, d := range info.DTypes {
			names[i] = d.String()
		}
		return 0, usagef("--dtype %v: %s (%s) computes in %s only", dt, info.ID(), info.Name, strings.Join(names, ", "))
	}
	return dt, nil
}

// openModel opens the device and loads the checkpoint in dir onto it for
// inference: in the compute dtype dt (0: auto) with the f32 masters of the
// bf16/f16 weights dropped (model.LoadOptions.Inference), as Parallax
// with W_R = 0 when convert is set, and with the weights held as weights
// says (--weights: the zero value as stored, int8 quantized on load). The
// caller frees the model and closes the device.
func openModel(dir, device string, dt engine.DType, convert bool, weights model.Quantization) (engine.Device, *model.Model, error) {
	dev, err := engine.Open(device)
	if err != nil {
		return nil, nil, err
	}
	dt, err = resolveDType(dt, dev.Info())
	if err != nil {
		dev.Close()
		return nil, nil, err
	}
	m, err := model.Load(dir, dev, model.LoadOptions{DType: dt, ConvertParallax: convert, Inference: true, Quantize: weights})
	if err != nil {
		dev.Close()
		return nil, nil, err
	}
	return dev, m, nil
}

// readModelConfig reads the config of the model in dir, so that flags can be
// checked against it before the weights load. Its error is the one Load
// would report.
func readModelConfig(dir string) (model.Config, error) {
	c, err := model.ReadConfig(filepath.Join(dir, model.ConfigFile))
	if err != nil {
		return c, fmt.Errorf("load model %s: %w", dir, err)
	}
	return c, nil
}

// finite reports whether x is neither NaN nor infinite.
func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// undecodable lists the ids of a vocab-sized model vocabulary that tok
// cannot decode (past its vocabulary, or holes in it), except the stop ids:
// generation suppresses them, since a model vocabulary is often padded past
// its tokenizer's (Hugging Face Qwen3: 151936 ids for 151669 tokens) and an
// id sampled there could not be printed. A stop id is never printed, so it
// stays sampleable and still ends generation.
func undecodable(tok *tokenizer.Tokenizer, vocab int, stop []int) []int {
	var out []int
	for id := range vocab {
		if _, ok := tok.TokenBytes(id); !ok && !slices.Contains(stop, id) {
			out = append(out, id)
		}
	}
	return out
}
