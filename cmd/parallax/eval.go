package main

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/parallax-engine/parallax/assets"
	"github.com/parallax-engine/parallax/model"
	"github.com/parallax-engine/parallax/model/safetensors"
	"github.com/parallax-engine/parallax/train"
	"github.com/parallax-engine/parallax/train/data"
)

const evalUsage = `
Usage:
  parallax eval --model DIR [--data FILE] [flags]
  parallax eval --model DIR --tokens 1,2,3 [--dump-logits FILE.safetensors]

Reports a model's loss (nats per token), perplexity and bits per byte on a
text: --data (a file, or a directory of *.txt files) or, by default, the
embedded corpus's held-out novel. The text is cut into consecutive windows
of --seq tokens (each token predicted from the preceding ones in its window).

With --tokens, it runs one sequence of token ids instead and prints the loss
of predicting each next id; --dump-logits writes its float32 logits [T, V]
(the tensor "logits") to a safetensors file. One id has no next id to
score: it needs --dump-logits (then --json reports "mean_loss": null and no
losses); without it, it is refused with status 2.

The model runs in --dtype (auto: bf16 on GPUs, f32 on the CPU); a bf16 or
f16 model keeps only its compute copies of the weights.
`

const evalExamples = `
  parallax eval --model run
  parallax eval --model run --data mytext.txt --seq 256 --json
  parallax eval --model run --tokens 464,3290,318 --dump-logits logits.safetensors
`

func runEval(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("eval", evalUsage, evalExamples, stdout)
	dir := fs.String("model", "run", "model directory")
	dataPath := fs.String("data", "", "text file or directory of *.txt (default: the embedded held-out novel)")
	seq := fs.Int("seq", 0, "tokens per window (default: min(256, the model's max_seq))")
	batch := fs.Int("batch", 8, "windows per forward pass")
	maxWin := fs.Int("max-windows", 0, "evaluate at most this many windows (0: all)")
	tokens := fs.String("tokens", "", "comma-separated token ids of one sequence")
	dump := fs.String("dump-logits", "", "with --tokens: write the logits [T, V] to this safetensors file")
	device := fs.String("device", "auto", "device: auto, cpu, vulkan:N, cuda:N")
	dtypeName := fs.String("dtype", "auto", dtypeUsage)
	weightsFlag := fs.String("weights", "stored", weightsUsage)
	convert := fs.Bool("convert-parallax", false, "load a softmax (e.g. Hugging Face Qwen3) checkpoint as Parallax with W_R = 0: the outputs are unchanged")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	if *dump != "" && *tokens == "" {
		return usagef("--dump-logits needs --tokens")
	}
	if *batch < 1 || *seq < 0 || *maxWin < 0 {
		return usagef("--batch must be >= 1, --seq and --max-windows >= 0")
	}
	dt, err := parseDTypeFlag(*dtypeName)
	if err != nil {
		return err
	}
	weights, err := parseWeightsFlag(*weightsFlag)
	if err != nil {
		return err
	}
	var ids []int
	if *tokens != "" {
		for i, f := range strings.Split(*tokens, ",") {
			v, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				return usagef("--tokens: %q is not an integer token id", f)
			}
			if v < 0 {
				return usagef("--tokens: id %d at position %d is negative", v, i)
			}
			ids = append(ids, v)
		}
		if len(ids) == 1 && *dump == "" {
			return usagef("--tokens: one id has no next id to score; give two or more, or --dump-logits FILE to write its logits")
		}
	}
	// The flags that depend on the model are checked against its config
	// before the weights load.
	mc, err := readModelConfig(*dir)
	if err != nil {
		return err
	}
	if err := checkEvalTokens(ids, mc); err != nil {
		return err
	}
	if *seq > mc.MaxSeq {
		return usagef("--seq %d exceeds the model's max_seq %d", *seq, mc.MaxSeq)
	}
	dev, m, err := openModel(*dir, *device, dt, *convert, weights)
	if err != nil {
		return err
	}
	defer dev.Close()
	defer m.Free()
	if ids != nil {
		return evalTokens(m, ids, *dump, *asJSON, stdout)
	}

	tok, err := loadTokenizer(*dir)
	if err != nil {
		return err
	}
	if tok.VocabSize() > m.Config.Vocab {
		return fmt.Errorf("tokenizer in %s has %d tokens but the model only %d: they do not belong together", *dir, tok.VocabSize(), m.Config.Vocab)
	}
	var text, source string
	if *dataPath == "" {
		if text, err = assets.ValidText(); err != nil {
			return err
		}
		source = "embedded " + assets.ValidationDocument
	} else {
		docs, err := data.ReadDocuments(*dataPath)
		if err != nil {
			return err
		}
		var parts []string
		for _, d := range docs {
			parts = append(parts, d.Text)
		}
		text, source = strings.Join(parts, "\n\n"), *dataPath
	}
	T := *seq
	if T == 0 {
		T = min(256, m.Config.MaxSeq)
	}
	enc := tok.Encode(text)
	stream := make([]int32, len(enc))
	for i, v := range enc {
		stream[i] = int32(v)
	}
	sh, err := data.NewShard(stream, m.Config.Vocab)
	if err != nil {
		return err
	}
	wins := data.EvalWindows([]*data.Shard{sh}, T, *maxWin)
	if len(wins) == 0 {
		return fmt.Errorf("%s has %d tokens, fewer than one window of %d", source, len(stream), T+1)
	}
	loss, n, err := train.EvalLoss(m, wins, *batch)
	if err != nil {
		return err
	}
	// Bits per byte over the bytes the scored tokens cover (all windows
	// together cover the text up to the last window's end).
	covered := len(wins)*T + 1
	bytes := len(text)
	if covered < len(stream) {
		dec, _ := tok.Decode(enc[:covered])
		bytes = len(dec)
	}
	bpb := loss * float64(n) / math.Ln2 / float64(bytes)
	res := struct {
		Model      string  `json:"model"`
		Data       string  `json:"data"`
		DType      string  `json:"dtype"`
		Weights    string  `json:"weights"`
		Tokens     int     `json:"tokens"`
		Seq        int     `json:"seq"`
		Loss       float64 `json:"loss"`
		Perplexity float64 `json:"perplexity"`
		BitsPerB   float64 `json:"bits_per_byte"`
	}{*dir, source, m.DType.String(), weightsName(m), n, T, loss, math.Exp(loss), bpb}
	if *asJSON {
		return writeJSON(stdout, res)
	}
	fmt.Fprintf(stdout, "%s on %s (%s, %s weights): %d tokens in windows of %d\nloss %.4f nats/token, perplexity %.2f, %.3f bits/byte\n",
		res.Model, res.Data, res.DType, res.Weights, res.Tokens, res.Seq, res.Loss, res.Perplexity, res.BitsPerB)
	return nil
}

// checkEvalTokens checks --tokens against the model's config: every id in
// its vocabulary and the sequence within its context.
func checkEvalTokens(ids []int, mc model.Config) error {
	for i, t := range ids {
		if t >= mc.Vocab {
			return usagef("--tokens: id %d at position %d is outside the model's vocabulary [0, %d)", t, i, mc.Vocab)
		}
	}
	if len(ids) > mc.MaxSeq {
		return usagef("--tokens: %d ids exceed the model's max_seq %d", len(ids), mc.MaxSeq)
	}
	return nil
}

// evalTokens runs one sequence: per-position next-token losses and,
// optionally, the logits written to a safetensors file.
func evalTokens(m *model.Model, ids []int, dump string, asJSON bool, stdout io.Writer) error {
	V := m.Config.Vocab
	if err := checkEvalTokens(ids, m.Config); err != nil {
		return err
	}
	logits, err := m.SequenceLogits(ids)
	if err != nil {
		return err
	}
	if dump != "" {
		t := safetensors.F32Tensor("logits", []int{len(ids), V}, logits)
		if err := safetensors.Write(dump, []safetensors.Tensor{t}, map[string]string{"tokens": fmtInts(ids)}); err != nil {
			return err
		}
	}
	losses := make([]float64, len(ids)-1)
	for i := range losses {
		row := logits[i*V : (i+1)*V]
		mx := math.Inf(-1)
		for _, v := range row {
			mx = math.Max(mx, float64(v))
		}
		s := 0.0
		for _, v := range row {
			s += math.Exp(float64(v) - mx)
		}
		losses[i] = mx + math.Log(s) - float64(row[ids[i+1]])
	}
	// No loss without a next id (one id, only with --dump-logits): null in
	// JSON rather than 0, which would read as a perfect score.
	var mean *float64
	if len(losses) > 0 {
		s := 0.0
		for _, l := range losses {
			s += l
		}
		s /= float64(len(losses))
		mean = &s
	}
	if asJSON {
		return writeJSON(stdout, struct {
			Tokens []int     `json:"tokens"`
			DType  string    `json:"dtype"`
			Losses []float64 `json:"next_token_losses"`
			Mean   *float64  `json:"mean_loss"`
			Logits string    `json:"logits_file,omitempty"`
		}{ids, m.DType.String(), losses, mean, dump})
	}
	if mean != nil {
		fmt.Fprintf(stdout, "%d tokens: mean next-token loss %.4f (perplexity %.2f)\n", len(ids), *mean, math.Exp(*mean))
	} else {
		fmt.Fprintf(stdout, "%d token: no next-token loss (that needs two or more)\n", len(ids))
	}
	if dump != "" {
		fmt.Fprintf(stdout, "logits [%d, %d] written to %s\n", len(ids), V, dump)
	}
	return nil
}

func fmtInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}
