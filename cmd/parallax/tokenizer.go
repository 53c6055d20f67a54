package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/parallax-engine/parallax/assets"
	"github.com/parallax-engine/parallax/model/tokenizer"
	"github.com/parallax-engine/parallax/train"
	"github.com/parallax-engine/parallax/train/data"
)

const tokenizerUsage = `
Usage:
  parallax tokenizer train [--data PATH] [--vocab N] --out DIR
  parallax tokenizer encode --tokenizer PATH [TEXT]
  parallax tokenizer decode --tokenizer PATH [IDS]

train learns a byte-level BPE vocabulary (GPT-2's byte mapping and
pre-tokenization) of --vocab tokens, including the special token
<|endoftext|>, from text (default: the embedded corpus's training novels) and
writes tokenizer.json, vocab.json and merges.txt into --out.

encode prints the token ids of TEXT (or of standard input), comma-separated;
decode prints the text of comma- or space-separated ids (or of standard
input). --tokenizer is a tokenizer.json, or a directory holding one (a
checkpoint) or GPT-2's vocab.json and merges.txt.
`

const tokenizerExamples = `
  parallax tokenizer train --vocab 4096 --out tok
  parallax tokenizer encode --tokenizer tok "Hello world"
  parallax tokenizer decode --tokenizer run 15496,995
`

func runTokenizer(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fs := newFlagSet("tokenizer", tokenizerUsage, tokenizerExamples, stdout)
		if len(args) == 0 {
			return usagef("want a subcommand: train, encode or decode")
		}
		fs.Usage()
		return errHelp
	}
	sub, rest := args[0], args[1:]
	var err error
	switch sub {
	case "train":
		err = runTokenizerTrain(rest, stdout)
	case "encode", "decode":
		err = runTokenizerCode(sub, rest, stdout)
	default:
		return usagef("unknown subcommand %q (want train, encode or decode)", sub)
	}
	if err != nil {
		return &subcommandError{path: "tokenizer " + sub, err: err}
	}
	return nil
}

func runTokenizerTrain(args []string, stdout io.Writer) error {
	fs := newFlagSet("tokenizer train", tokenizerUsage, tokenizerExamples, stdout)
	dataPath := fs.String("data", "", "text file or directory of *.txt (default: the embedded training novels)")
	vocab := fs.Int("vocab", 4096, "vocabulary size (256 bytes + <|endoftext|> + merges)")
	out := fs.String("out", "", "output directory (required)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	if *out == "" {
		return usagef("--out is required")
	}
	if *vocab < 257 {
		return usagef("--vocab %d is too small (256 bytes + <|endoftext|> at least)", *vocab)
	}
	if err := checkFlags(fs, numFlag("vocab").atMost(math.MaxInt32)); err != nil {
		return err
	}
	var texts []string
	if *dataPath == "" {
		docs, err := assets.TrainDocuments()
		if err != nil {
			return err
		}
		for _, d := range docs {
			texts = append(texts, d.Text)
		}
	} else {
		docs, err := data.ReadDocuments(*dataPath)
		if err != nil {
			return err
		}
		for _, d := range docs {
			texts = append(texts, d.Text)
		}
	}
	start := time.Now()
	t, err := tokenizer.Train(texts, *vocab, []string{train.EOTToken})
	if err != nil {
		return err
	}
	if err := t.Save(*out); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "trained %d tokens (%d merges) in %s; wrote tokenizer.json, vocab.json, merges.txt to %s\n",
		t.VocabSize(), t.NumMerges(), train.FormatDuration(time.Since(start)), *out)
	return nil
}

func runTokenizerCode(sub string, args []string, stdout io.Writer) error {
	fs := newFlagSet("tokenizer "+sub, tokenizerUsage, tokenizerExamples, stdout)
	path := fs.String("tokenizer", "", "tokenizer.json or a directory holding it (required)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *path == "" {
		return usagef("--tokenizer is required")
	}
	var input string
	if fs.NArg() > 0 {
		input = strings.Join(fs.Args(), " ")
	} else {
		b, err := io.ReadAll(os.Stdin)
		if err != nil {
			return err
		}
		input = string(b)
	}
	t, err := loadTokenizer(*path)
	if err != nil {
		return err
	}
	if sub == "encode" {
		ids := t.EncodeWithSpecials(input)
		fmt.Fprintln(stdout, fmtInts(ids))
		return nil
	}
	var ids []int
	for _, f := range strings.FieldsFunc(input, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' || r == '\r' }) {
		v, err := strconv.Atoi(f)
		if err != nil {
			return usagef("%q is not an integer token id", f)
		}
		if v < 0 || v >= t.VocabSize() {
			return usagef("token id %d is outside the vocabulary [0, %d)", v, t.VocabSize())
		}
		ids = append(ids, v)
	}
	s, err := t.Decode(ids)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, s)
	return nil
}
