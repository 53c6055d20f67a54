package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/parallax-engine/parallax/model"
)

const exportUsage = `
Usage:
  parallax export --format hf --in DIR --out DIR [--dtype bf16]

Writes the model in --in (a checkpoint of ours, or any model directory
that loads) as a Hugging Face folder: config.json, model.safetensors with
the weights in --dtype (bf16 by default) and the tokenizer files
(tokenizer.json, tokenizer_config.json with the chat template, ...).

A softmax model becomes a plain Qwen3 folder that transformers loads
(Qwen3ForCausalLM). A Parallax model keeps our layout: the Qwen3 tensors
plus self_attn.r_proj and r_norm, and the "attention" key in config.json;
it loads in parallax generate, eval and train --init.

The folder is written beside --out and renamed into place; an existing,
non-empty --out is refused unless --force.
`

const exportExamples = `
  parallax export --format hf --in runs/sft --out export/sft
  parallax export --format hf --in runs/sft --out export/sft-f32 --dtype f32
`

func runExport(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("export", exportUsage, exportExamples, stdout)
	format := fs.String("format", "hf", "output format: hf (Hugging Face layout)")
	in := fs.String("in", "", "model directory to export (required)")
	out := fs.String("out", "", "folder to write (required)")
	dtype := fs.String("dtype", "bf16", "dtype of the written weights: bf16, f16 or f32")
	force := fs.Bool("force", false, "replace an existing, non-empty --out")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	dt := map[string]string{"bf16": "BF16", "f16": "F16", "f32": "F32"}[strings.ToLower(*dtype)]
	switch {
	case *format != "hf":
		return usagef("--format %q: want hf", *format)
	case *in == "":
		return usagef("--in is required")
	case *out == "":
		return usagef("--out is required")
	case dt == "":
		return usagef("--dtype %q: want bf16, f16 or f32", *dtype)
	}
	if err := model.Export(*in, *out, model.ExportOptions{DType: dt, Force: *force}); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "exported %s to %s (%s weights)\n", *in, *out, strings.ToLower(*dtype))
	return nil
}
