package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/parallax-engine/parallax/train"
	"github.com/parallax-engine/parallax/train/data"
)

const dataUsage = `
Usage:
  parallax data prepare --tokenizer DIR --in FILE --out DIR [flags]

prepare tokenizes FILE in one streaming pass into a dataset directory of
token shards (train_NNNNN.bin, val_NNNNN.bin, dataset.json) that
'parallax train --data DIR --tokenizer DIR' reads; the input is never held
in memory whole, and training maps the shards instead of reading them.

FILE is plain text (any extension but .jsonl), tokenized in chunks cut at
blank lines; or JSONL, one sample per line: {"text": "..."} or a chat
{"messages": [{"role": "...", "content": "..."}, ...]}, rendered through
the chat template of --chat-template (default: the tokenizer's directory),
with the loss on the assistant turns only. JSONL samples end with
<|endoftext|> and are packed whole into training rows (a sample longer than
a row is cut); tokens of one row still attend to the earlier samples in it.

Every round(1/--val-frac)-th sample (or text chunk) is held out for
validation. A line that is not JSON, lacks its fields or is a chat without
an assistant turn stops the pass with its file and line; nothing is
written then (the dataset is built beside --out and renamed into place).
`

const dataExamples = `
  parallax data prepare --tokenizer Qwen3-0.6B --in chat.jsonl --out data/chat
  parallax data prepare --tokenizer run --in corpus.txt --out data/corpus --val-frac 0.005
`

func runData(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fs := newFlagSet("data", dataUsage, dataExamples, stdout)
		if len(args) == 0 {
			return usagef("want a subcommand: prepare")
		}
		fs.Usage()
		return errHelp
	}
	if args[0] != "prepare" {
		return usagef("unknown subcommand %q (want prepare)", args[0])
	}
	if err := runDataPrepare(args[1:], stdout); err != nil {
		return &subcommandError{path: "data prepare", err: err}
	}
	return nil
}

func runDataPrepare(args []string, stdout io.Writer) error {
	fs := newFlagSet("data prepare", dataUsage, dataExamples, stdout)
	tokDir := fs.String("tokenizer", "", "tokenizer: a model directory or a tokenizer.json (required)")
	in := fs.String("in", "", "input: a text file, or a .jsonl of samples (required)")
	out := fs.String("out", "", "dataset directory to write (required)")
	format := fs.String("format", data.FormatAuto, "JSONL sample format: auto, text or chat")
	chatDir := fs.String("chat-template", "", "directory whose chat template renders chat samples (default: the tokenizer's)")
	valFrac := fs.Float64("val-frac", 0.01, "fraction of the samples held out for validation (0: none)")
	shardTokens := fs.Int("shard-tokens", 1<<24, "tokens per shard file")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	switch {
	case *tokDir == "":
		return usagef("--tokenizer is required")
	case *in == "":
		return usagef("--in is required")
	case *out == "":
		return usagef("--out is required")
	case *format != data.FormatAuto && *format != data.FormatText && *format != data.FormatChat:
		return usagef("--format %q: want auto, text or chat", *format)
	}
	if err := checkFlags(fs, numFlag("val-frac").atLeast(0).below(1), numFlag("shard-tokens").atLeast(1).atMost(1<<31)); err != nil {
		return err
	}
	if _, err := os.Stat(*in); err != nil {
		return usagef("--in %s: %v", *in, err)
	}
	tok, err := train.LoadTokenizer(*tokDir)
	if err != nil {
		return err
	}
	cd := *chatDir
	if cd == "" {
		cd = *tokDir
		if st, err := os.Stat(cd); err == nil && !st.IsDir() {
			cd = ""
		}
	}
	o, err := train.PrepareOptionsFor(tok, cd)
	if err != nil {
		return err
	}
	if o.Tokenizer, err = train.TokenizerID(tok); err != nil {
		return err
	}
	o.Format, o.ValFrac, o.ShardTokens = *format, *valFrac, *shardTokens
	start := time.Now()
	d, err := data.Prepare(*in, *out, o)
	if err != nil {
		return err
	}
	shards := len(d.Train) + len(d.Val)
	fmt.Fprintf(stdout, "%s: %d %s samples (%s tokens) for training, %d held out (%s tokens); %d shards in %s, %s\n",
		*in, d.Meta.TrainSamples, strings.TrimSpace(d.Meta.Format), train.HumanCount(float64(d.Meta.TrainTokens)),
		d.Meta.ValSamples, train.HumanCount(float64(d.Meta.ValTokens)), shards, *out, train.FormatDuration(time.Since(start)))
	fmt.Fprintf(stdout, "train on it with: parallax train --data %s --tokenizer %s ...\n", *out, *tokDir)
	return nil
}
