package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/parallax-engine/parallax/model"
)

const quantizeUsage = `
Usage:
  parallax quantize --in DIR --out DIR [--group G] [--force]

Writes the float model in --in (a checkpoint of ours, or any model
directory that loads) as a weight-only int8 model folder: every product
weight (q, k, v, r, o, gate, up, down and the head) and the embedding as
int8 values with one f32 scale per output row and group of --group input
columns, symmetric (s = max|w| / 127, q = round(w / s) in [-127, 127]).
The norm gains and the probe gate stay f32. model.safetensors holds each
quantized tensor NAME as I8 and its scales as F32 under NAME_scale;
config.json gets a "quantization" entry; the tokenizer files are copied.

The folder loads in generate, eval, chat, serve and bench generate, for
inference only (it cannot train). Those commands also quantize a float
folder on load with --weights int8.

The quantization runs on the host. The folder is written beside --out and
renamed into place; an existing, non-empty --out is refused unless --force.
`

const quantizeExamples = `
  parallax quantize --in run --out run-int8
  parallax quantize --in run --out run-int8-pc --group -1
  parallax eval --model run-int8
`

func runQuantize(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("quantize", quantizeUsage, quantizeExamples, stdout)
	in := fs.String("in", "", "float model directory to quantize (required)")
	out := fs.String("out", "", "folder to write (required)")
	group := fs.Int("group", 128, "input columns that share a scale (a matrix with fewer columns gets one scale a row); -1: one scale per output row (per-channel)")
	force := fs.Bool("force", false, "replace an existing, non-empty --out")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	switch {
	case *in == "":
		return usagef("--in is required")
	case *out == "":
		return usagef("--out is required")
	}
	if err := checkFlags(fs, numFlag("group").atLeast(1).or(model.PerChannel, "per-channel")); err != nil {
		return err
	}
	rep, err := model.Quantize(*in, *out, model.QuantizeOptions{Group: *group, Force: *force})
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(stdout, struct {
			In         string  `json:"in"`
			Out        string  `json:"out"`
			Group      int     `json:"group"`
			Matrices   int     `json:"matrices"`
			Values     int64   `json:"values"`
			BF16Bytes  int64   `json:"bf16_bytes"`
			Int8Bytes  int64   `json:"int8_bytes"`
			FloatBytes int64   `json:"f32_bytes"`
			MaxError   float64 `json:"max_rel_error"`
		}{*in, *out, rep.Quant.Group, rep.Matrices, rep.Values, rep.BF16Bytes, rep.Int8Bytes, rep.FloatBytes, rep.MaxError})
	}
	fmt.Fprintf(stdout, "quantized %s to %s (%s): %d matrices, %d weights, %s as int8 and scales (%s in bf16, %.3fx), %s kept f32; largest error %.3g of a tensor's largest weight\n",
		*in, *out, rep.Quant, rep.Matrices, rep.Values, formatBytes(rep.Int8Bytes), formatBytes(rep.BF16Bytes),
		float64(rep.Int8Bytes)/float64(max(rep.BF16Bytes, 1)), formatBytes(rep.FloatBytes), rep.MaxError)
	return nil
}

// weightsUsage is the help of the inference commands' --weights flag.
const weightsUsage = "how the weights are held: stored (as the folder stores them: int8 for a folder parallax quantize wrote) or int8 (weight-only int8, quantized on load in groups of 128 from a float folder)"

// parseWeightsFlag parses --weights: the zero Quantization for "stored",
// int8 in the default group size for "int8".
func parseWeightsFlag(s string) (model.Quantization, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "stored", "":
		return model.Quantization{}, nil
	case "int8":
		return model.Quantization{Method: model.QuantInt8}, nil
	}
	return model.Quantization{}, usagef("--weights %q: want stored or int8", s)
}

// weightsName describes how a loaded model holds its weights ("int8" or
// the compute dtype's name), for reports.
func weightsName(m *model.Model) string {
	if q := m.Quantization(); q.Enabled() {
		return q.Method
	}
	return m.DType.String()
}
