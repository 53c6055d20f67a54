package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/parallax-engine/parallax/model"
	"github.com/parallax-engine/parallax/model/tokenizer"
	"github.com/parallax-engine/parallax/train"
)

const generateUsage = `
Usage:
  parallax generate --model DIR --prompt TEXT [flags]
  parallax generate --model DIR --prompts-file FILE [--batch N] [flags]

Continues the prompt with a trained model (a directory written by
'parallax train', or a Hugging Face Qwen3 directory with tokenizer.json),
printing the text as it is produced. Sampling is reproducible for a seed;
--temperature 0 is greedy. Ids of the model's vocabulary that the tokenizer
cannot decode (a vocabulary padded past the tokenizer's, as in Hugging Face
Qwen3) are never sampled. The model runs in --dtype (auto: bf16 on GPUs,
f32 on the CPU) with its KV cache in the same dtype; a bf16 or f16 model
keeps only its compute copies of the weights, about half the memory of f32.

With --prompts-file, every non-blank line of FILE (- for standard input) is
a prompt, and the prompts are continued together through the model's
batched KV cache: up to --batch sequences decode at once, and a sequence
that ends frees its slot for the next prompt. Standard output is JSONL, one
object a prompt in the file's order, each printed once it and every
earlier one are done:
  {"index": I, "prompt": LINE, "text": CONTINUATION, "tokens": N, "finish": WHY}
text is the continuation alone (without the prompt or a --stop text),
tokens the ids generated, and finish "length" (--max-tokens), "stop" (a
--stop text), "eos" (an end-of-text id) or "capacity" (the model's context
is full). Prompt I (from 0) samples with seed --seed + I, so its text does
not depend on the other prompts, nor, on the CPU, on --batch: there it is,
bit for bit, what 'generate --prompt LINE --seed S+I' prints.
`

const generateExamples = `
  parallax generate --model run --prompt "It is a truth universally acknowledged"
  parallax generate --model run --prompt "Emma" --temperature 0 --max-tokens 50
  parallax generate --model Qwen3-0.6B --prompt "The capital of France is" --dtype bf16 --device cuda:0
  parallax generate --model Qwen3-0.6B --prompts-file prompts.txt --batch 16 --max-tokens 64 --device cuda:0 > out.jsonl
`

func runGenerate(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("generate", generateUsage, generateExamples, stdout)
	dir := fs.String("model", "run", "model directory")
	prompt := fs.String("prompt", "", "text to continue (this, --prompt-file or --prompts-file is required)")
	promptFile := fs.String("prompt-file", "", "read the text to continue from a file (- for standard input)")
	promptsFile := fs.String("prompts-file", "", "continue every non-blank line of a file (- for standard input) as its own prompt, all batched; prints JSONL")
	batch := fs.Int("batch", 0, fmt.Sprintf("with --prompts-file: sequences decoded together (0: all prompts, at most %d)", maxAutoBatch))
	stops := fs.StringArray("stop", nil, "stop at this text (repeatable)")
	maxTokens := fs.Int("max-tokens", 200, "tokens to generate at most")
	temp := fs.Float64("temperature", 0.8, "sampling temperature (0: greedy)")
	topK := fs.Int("top-k", 0, "sample from the K most likely tokens (0: all)")
	topP := fs.Float64("top-p", 0.95, "nucleus sampling: the smallest set reaching this probability, in (0, 1] (1: all)")
	seed := fs.Uint64("seed", 1, "sampling seed")
	device := fs.String("device", "auto", "device: auto, cpu, vulkan:N, cuda:N")
	dtypeName := fs.String("dtype", "auto", dtypeUsage)
	weightsFlag := fs.String("weights", "stored", weightsUsage)
	convert := fs.Bool("convert-parallax", false, "load a softmax (e.g. Hugging Face Qwen3) checkpoint as Parallax with W_R = 0: the outputs are unchanged")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	batchMode := fs.Changed("prompts-file")
	switch {
	case batchMode && (fs.Changed("prompt") || fs.Changed("prompt-file")):
		return usagef("give --prompts-file or --prompt/--prompt-file, not both")
	case batchMode && *promptsFile == "":
		return usagef("--prompts-file wants a file name (- for standard input)")
	case !batchMode && fs.Changed("batch"):
		return usagef("--batch applies only with --prompts-file")
	}
	if err := checkFlags(fs, numFlag("batch").atLeast(1).atMost(maxBatchSlots).or(0, fmt.Sprintf("all prompts, at most %d", maxAutoBatch))); err != nil {
		return err
	}
	if !batchMode && *promptFile != "" {
		if *prompt != "" {
			return usagef("give --prompt or --prompt-file, not both")
		}
		b, err := readInput(*promptFile)
		if err != nil {
			return err
		}
		*prompt = string(b)
	}
	if !batchMode && *prompt == "" {
		return usagef("--prompt is required (or --prompt-file, or --prompts-file for many)")
	}
	for _, s := range *stops {
		if s == "" {
			return usagef("--stop wants a non-empty text")
		}
	}
	gc, err := samplingFlags(*dir, *maxTokens, temp, topP, topK, fs.Changed)
	if err != nil {
		return err
	}
	dt, err := parseDTypeFlag(*dtypeName)
	if err != nil {
		return err
	}
	weights, err := parseWeightsFlag(*weightsFlag)
	if err != nil {
		return err
	}
	var prompts []batchPrompt
	if batchMode {
		// Read before the model loads, so that a bad file fails at once.
		if prompts, err = readPrompts(*promptsFile); err != nil {
			return err
		}
	}
	tok, err := loadTokenizer(*dir)
	if err != nil {
		return err
	}
	dev, m, err := openModel(*dir, *device, dt, *convert, weights)
	if err != nil {
		return err
	}
	defer dev.Close()
	defer m.Free()
	if tok.VocabSize() > m.Config.Vocab {
		return fmt.Errorf("tokenizer in %s has %d tokens but the model only %d: they do not belong together", *dir, tok.VocabSize(), m.Config.Vocab)
	}
	stop := stopIDs(m, gc, tok, "")
	suppress := undecodable(tok, m.Config.Vocab, stop)
	if len(suppress) == m.Config.Vocab {
		return fmt.Errorf("the tokenizer in %s decodes none of the model's %d ids", *dir, m.Config.Vocab)
	}
	if batchMode {
		return generateBatch(m, tok, prompts, batchOptions{
			slots:     *batch,
			maxTokens: *maxTokens,
			sample:    model.SampleOptions{Temperature: *temp, TopK: *topK, TopP: *topP, Seed: *seed},
			stop:      stop,
			suppress:  suppress,
			stopTexts: *stops,
		}, stdout)
	}
	ids := tok.EncodeHF(*prompt, true)
	n := *maxTokens
	if room := m.Config.MaxSeq - len(ids) + 1; n > room {
		if room < 1 {
			return fmt.Errorf("the prompt has %d tokens; the model's context is %d", len(ids), m.Config.MaxSeq)
		}
		fmt.Fprintf(stderr, "parallax generate: generating %d tokens, the room left in the model's %d-token context\n", room, m.Config.MaxSeq)
		n = room
	}
	fmt.Fprint(stdout, *prompt)
	// Suppress keeps undecodable ids out, so a decoding error is a bug or
	// a broken tokenizer: the stream decoder stops rather than go on
	// printing nothing.
	sd := newStreamDecoder(tok, *stops, stdout)
	_, err = m.Generate(ids, n, model.GenerateOptions{
		Sample:   model.SampleOptions{Temperature: *temp, TopK: *topK, TopP: *topP, Seed: *seed},
		Stop:     stop,
		Suppress: suppress,
	}, sd.push)
	if sd.err == nil {
		sd.finish() // the tail an incomplete UTF-8 sequence held back
	}
	fmt.Fprintln(stdout)
	if err != nil {
		return err
	}
	return sd.err
}

// loadTokenizer reads a tokenizer from a model directory (tokenizer.json,
// or GPT-2's vocab.json + merges.txt) or a tokenizer.json file.
func loadTokenizer(path string) (*tokenizer.Tokenizer, error) {
	if strings.HasSuffix(path, ".json") {
		return tokenizer.LoadHF(path)
	}
	hf := filepath.Join(path, train.TokenizerFile)
	t, err := tokenizer.LoadHF(hf)
	if err == nil {
		return t, nil
	}
	if t2, err2 := tokenizer.LoadGPT2(filepath.Join(path, "vocab.json"), filepath.Join(path, "merges.txt")); err2 == nil {
		return t2, nil
	}
	return nil, fmt.Errorf("no tokenizer in %s: %w", path, err)
}
