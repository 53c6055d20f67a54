package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/model"
	"github.com/parallax-engine/parallax/model/tokenizer"
	"github.com/parallax-engine/parallax/train"
)

const generateUsage = `
Usage:
  parallax generate --model DIR --prompt TEXT [flags]

Continues the prompt with a trained model (a directory written by
'parallax train', or a Hugging Face Qwen3 directory with tokenizer.json),
printing the text as it is produced. Sampling is reproducible for a seed;
--temperature 0 is greedy.
`

const generateExamples = `
  parallax generate --model run --prompt "It is a truth universally acknowledged"
  parallax generate --model run --prompt "Emma" --temperature 0 --max-tokens 50
`

func runGenerate(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("generate", generateUsage, generateExamples, stdout)
	dir := fs.String("model", "run", "model directory")
	prompt := fs.String("prompt", "", "text to continue (required)")
	maxTokens := fs.Int("max-tokens", 200, "tokens to generate at most")
	temp := fs.Float64("temperature", 0.8, "sampling temperature (0: greedy)")
	topK := fs.Int("top-k", 0, "sample from the K most likely tokens (0: all)")
	topP := fs.Float64("top-p", 0.95, "nucleus sampling: the smallest set reaching this probability (1: all)")
	seed := fs.Uint64("seed", 1, "sampling seed")
	device := fs.String("device", "auto", "device: auto, cpu, vulkan:N, cuda:N")
	convert := fs.Bool("convert-parallax", false, "load a softmax (e.g. Hugging Face Qwen3) checkpoint as Parallax with W_R = 0: the outputs are unchanged")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	if *prompt == "" {
		return usagef("--prompt is required")
	}
	if *maxTokens < 1 || *temp < 0 || *topK < 0 || *topP < 0 || *topP > 1 {
		return usagef("--max-tokens must be >= 1, --temperature and --top-k >= 0, --top-p in [0, 1]")
	}
	tok, err := loadTokenizer(*dir)
	if err != nil {
		return err
	}
	dev, m, err := openModel(*dir, *device, *convert)
	if err != nil {
		return err
	}
	defer dev.Close()
	defer m.Free()
	if tok.VocabSize() > m.Config.Vocab {
		return fmt.Errorf("tokenizer in %s has %d tokens but the model only %d: they do not belong together", *dir, tok.VocabSize(), m.Config.Vocab)
	}
	ids := tok.EncodeWithSpecials(*prompt)
	n := *maxTokens
	if room := m.Config.MaxSeq - len(ids) + 1; n > room {
		if room < 1 {
			return fmt.Errorf("the prompt has %d tokens; the model's context is %d", len(ids), m.Config.MaxSeq)
		}
		fmt.Fprintf(stderr, "parallax generate: generating %d tokens, the room left in the model's %d-token context\n", room, m.Config.MaxSeq)
		n = room
	}
	fmt.Fprint(stdout, *prompt)
	var out []int
	printed := ""
	_, err = m.Generate(ids, n, model.GenerateOptions{
		Sample: model.SampleOptions{Temperature: *temp, TopK: *topK, TopP: *topP, Seed: *seed},
	}, func(t int) bool {
		out = append(out, t)
		if s, err := tok.Decode(out); err == nil {
			if cut := completeRunes(s); cut > len(printed) {
				fmt.Fprint(stdout, s[len(printed):cut])
				printed = s[:cut]
			}
		}
		return true
	})
	if s, derr := tok.Decode(out); derr == nil && len(s) > len(printed) {
		fmt.Fprint(stdout, s[len(printed):])
	}
	fmt.Fprintln(stdout)
	return err
}

// completeRunes returns the length of s without a trailing incomplete UTF-8
// sequence (a token may end inside a character; the next completes it).
func completeRunes(s string) int {
	for i := 1; i <= utf8.UTFMax && i <= len(s); i++ {
		if utf8.RuneStart(s[len(s)-i]) {
			if !utf8.FullRuneInString(s[len(s)-i:]) {
				return len(s) - i
			}
			break
		}
	}
	return len(s)
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

// openModel opens the device and loads the checkpoint in dir onto it, as
// Parallax with W_R = 0 when convert is set. The caller frees the model and
// closes the device.
func openModel(dir, device string, convert bool) (engine.Device, *model.Model, error) {
	dev, err := engine.Open(device)
	if err != nil {
		return nil, nil, err
	}
	m, err := model.Load(dir, dev, model.LoadOptions{ConvertParallax: convert})
	if err != nil {
		dev.Close()
		return nil, nil, err
	}
	return dev, m, nil
}
