package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/parallax-engine/parallax/assets"
	"github.com/parallax-engine/parallax/model/chat"
	"github.com/parallax-engine/parallax/model/tokenizer"
	"github.com/parallax-engine/parallax/train"
	"github.com/parallax-engine/parallax/train/data"
)

const tokenizerUsage = `
Usage:
  parallax tokenizer train [--data PATH] [--vocab N] --out DIR
  parallax tokenizer encode --tokenizer PATH [--no-special] [TEXT]
  parallax tokenizer decode --tokenizer PATH [--keep-special] [IDS]
  parallax tokenizer render --tokenizer DIR --messages FILE.json [--tools FILE.json]
                            [--add-generation-prompt] [--var NAME=VALUE ...]

train learns a byte-level BPE vocabulary (GPT-2's byte mapping and
pre-tokenization) of --vocab tokens, including the special token
<|endoftext|>, from text (default: the embedded corpus's training novels) and
writes tokenizer.json, vocab.json and merges.txt into --out.

encode prints the token ids of TEXT (or of standard input), comma-separated:
those of the Hugging Face tokenizers library's Tokenizer.encode(text).ids,
added tokens matched in the text and the post-processor's tokens (a BOS, say)
added; --no-special leaves the post-processor out (add_special_tokens=False).
decode prints the text of comma- or space-separated ids (or of standard
input), as Tokenizer.decode(ids) does, special tokens skipped unless
--keep-special. --tokenizer is a tokenizer.json, or a directory holding one (a
checkpoint, a Hugging Face model) or GPT-2's vocab.json and merges.txt. A
tokenizer.json component this program does not run is an error that names it.

render prints, exactly and without a newline added, the prompt that the chat
template of DIR (tokenizer_config.json's chat_template, or
chat_template.jinja) makes of the messages in FILE.json, a JSON list of
OpenAI-style messages ({"role", "content"}, and "tool_calls",
"reasoning_content", "tool_call_id" where present), as transformers'
apply_chat_template(messages, tokenize=False) does. --tools is a JSON list of
tool definitions; --var sets a template variable (VALUE is read as JSON
when it is valid JSON, such as false or 3, else as a string).
`

const tokenizerExamples = `
  parallax tokenizer train --vocab 4096 --out tok
  parallax tokenizer encode --tokenizer tok "Hello world"
  parallax tokenizer decode --tokenizer run 15496,995
  parallax tokenizer render --tokenizer Qwen3-0.6B --messages chat.json --add-generation-prompt --var enable_thinking=false
`

func runTokenizer(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fs := newFlagSet("tokenizer", tokenizerUsage, tokenizerExamples, stdout)
		if len(args) == 0 {
			return usagef("want a subcommand: train, encode, decode or render")
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
	case "render":
		err = runTokenizerRender(rest, stdout)
	default:
		return usagef("unknown subcommand %q (want train, encode, decode or render)", sub)
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
	var noSpecial, keepSpecial *bool
	if sub == "encode" {
		noSpecial = fs.Bool("no-special", false, "do not add the post-processor's special tokens (add_special_tokens=False)")
	} else {
		keepSpecial = fs.Bool("keep-special", false, "print special tokens too (skip_special_tokens=False)")
	}
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
		ids := t.EncodeHF(input, !*noSpecial)
		fmt.Fprintln(stdout, fmtInts(ids))
		return nil
	}
	var ids []int
	for _, f := range strings.FieldsFunc(input, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' || r == '\r' }) {
		v, err := strconv.Atoi(f)
		if err != nil {
			return fmt.Errorf("%q is not an integer token id", f)
		}
		if v < 0 || v >= t.VocabSize() {
			// The ids are data (often piped in), not a command-line mistake.
			return fmt.Errorf("token id %d is outside the vocabulary [0, %d)", v, t.VocabSize())
		}
		ids = append(ids, v)
	}
	s, err := t.DecodeHF(ids, !*keepSpecial)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, s)
	return nil
}

// varsFlag collects --var NAME=VALUE.
type varsFlag map[string]any

func (v varsFlag) String() string { return "" }
func (v varsFlag) Type() string   { return "NAME=VALUE" }
func (v varsFlag) Set(s string) error {
	name, val, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return fmt.Errorf("want NAME=VALUE, have %q", s)
	}
	if json.Valid([]byte(val)) {
		v[name] = json.RawMessage(val)
	} else {
		v[name] = val
	}
	return nil
}

func runTokenizerRender(args []string, stdout io.Writer) error {
	fs := newFlagSet("tokenizer render", tokenizerUsage, tokenizerExamples, stdout)
	dir := fs.String("tokenizer", "", "model directory with tokenizer_config.json (required)")
	messages := fs.String("messages", "", "JSON file of messages (required; - for standard input)")
	toolsPath := fs.String("tools", "", "JSON file of tool definitions")
	agp := fs.Bool("add-generation-prompt", false, "end with the start of an assistant message")
	vars := varsFlag{}
	fs.Var(vars, "var", "template variable NAME=VALUE (repeatable)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	if *dir == "" || *messages == "" {
		return usagef("--tokenizer and --messages are required")
	}
	tmpl, err := chat.LoadTemplate(*dir)
	if err != nil {
		return err
	}
	msgs, err := readInput(*messages)
	if err != nil {
		return err
	}
	o := chat.RenderOptions{AddGenerationPrompt: *agp, Vars: vars}
	if *toolsPath != "" {
		b, err := os.ReadFile(*toolsPath)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(b, &o.Tools); err != nil {
			return fmt.Errorf("%s: want a JSON list of tool definitions: %v", *toolsPath, err)
		}
		if o.Tools == nil {
			o.Tools = []json.RawMessage{}
		}
	}
	s, err := tmpl.RenderJSON(msgs, o)
	if err != nil {
		return fmt.Errorf("%s: %w", *messages, err)
	}
	fmt.Fprint(stdout, s)
	return nil
}

// readInput reads a file, or standard input for "-".
func readInput(path string) ([]byte, error) {
	if path == "-" {
		return io.ReadAll(os.Stdin)
	}
	return os.ReadFile(path)
}
