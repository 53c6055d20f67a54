package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/cpu"
	"github.com/parallax-engine/parallax/model"
	"github.com/parallax-engine/parallax/model/tokenizer"
	"github.com/parallax-engine/parallax/train"
)

// inferText is the text the test tokenizer is trained on and eval reads.
var inferText = strings.Repeat("It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife.\n\n", 20)

// inferConfig is a one-layer untied model whose vocabulary of 384 is larger
// than the test tokenizer's 300, as Hugging Face Qwen3's is larger than its
// tokenizer's.
func inferConfig() model.Config {
	return model.Config{Vocab: 384, Dim: 32, Layers: 1, Heads: 2, KVHeads: 1, HeadDim: 16, FFN: 64,
		RopeTheta: 1e4, NormEps: 1e-6, Attention: model.AttentionParallax, RInit: model.RInitLikeQ, MaxSeq: 64}
}

// writeInferModel saves a freshly initialised model of cfg into a new
// directory (edit, if not nil, changes its weights first) and, with tok, a
// 300-token tokenizer trained on inferText. It returns the directory.
func writeInferModel(t *testing.T, cfg model.Config, tok bool, edit func(*model.Model)) string {
	t.Helper()
	dir := t.TempDir()
	m, err := model.New(cpu.New(), cfg, model.Options{Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	if edit != nil {
		edit(m)
	}
	if err := m.Save(dir); err != nil {
		t.Fatal(err)
	}
	if tok {
		tk, err := tokenizer.Train([]string{inferText}, 300, nil)
		if err != nil {
			t.Fatal(err)
		}
		if tk.VocabSize() != 300 {
			t.Fatalf("test tokenizer has %d tokens, want 300", tk.VocabSize())
		}
		if err := tk.SaveHF(filepath.Join(dir, train.TokenizerFile)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// configOnlyDir holds the config of cfg and no weights: a command that
// checks its flags before loading the model exits 2 there, one that loads
// first exits 1.
func configOnlyDir(t *testing.T, cfg model.Config) string {
	t.Helper()
	dir := t.TempDir()
	if err := model.WriteConfig(filepath.Join(dir, model.ConfigFile), cfg); err != nil {
		t.Fatal(err)
	}
	return dir
}

func expectCLI(t *testing.T, wantCode int, wantOut string, args ...string) string {
	t.Helper()
	code, stdout, stderr := runCLI(t, args...)
	if code != wantCode || !strings.Contains(stdout+stderr, wantOut) {
		t.Fatalf("parallax %s: exit %d (want %d), output lacks %q\nstdout: %s\nstderr: %s",
			strings.Join(args, " "), code, wantCode, wantOut, stdout, stderr)
	}
	return stdout
}

// TestGenerateUndecodableIDs: a model whose most likely tokens lie past the
// tokenizer's vocabulary still prints text: those ids are never sampled.
// (Before, generation sampled id 300, could not decode it, printed nothing
// more and exited 0.)
func TestGenerateUndecodableIDs(t *testing.T) {
	dir := writeInferModel(t, inferConfig(), true, func(m *model.Model) {
		// A head whose logits are 0 but for ids 300 and 301, +s and -s: one
		// of the two is always the most likely.
		w := make([]float32, m.Head.W.Numel())
		d := m.Config.Dim
		for i := range d {
			w[300*d+i], w[301*d+i] = 1, -1
		}
		if err := engine.WriteFloat32(m.Head.W, w); err != nil {
			t.Fatal(err)
		}
	})
	for _, dt := range []string{"f32", "bf16"} {
		out := expectCLI(t, 0, "It is", "generate", "--model", dir, "--prompt", "It is", "--max-tokens", "5",
			"--temperature", "0", "--device", "cpu", "--dtype", dt)
		if gen := strings.TrimSuffix(strings.TrimPrefix(out, "It is"), "\n"); gen == "" {
			t.Errorf("--dtype %s: nothing generated after the prompt: %q", dt, out)
		}
	}
	tok, err := loadTokenizer(dir)
	if err != nil {
		t.Fatal(err)
	}
	sup := undecodable(tok, 384, []int{383})
	if len(sup) != 83 || sup[0] != 300 || sup[len(sup)-1] != 382 {
		t.Errorf("undecodable ids with stop id 383: %d ids from %v to %v, want 300..382", len(sup), sup[0], sup[len(sup)-1])
	}
}

// TestInferenceFlags: bad numeric and dtype flags of generate and eval exit
// 2 before the model loads (the directory has no weights, so a load would
// fail with status 1).
func TestInferenceFlags(t *testing.T) {
	dir := configOnlyDir(t, inferConfig())
	gen := func(flags ...string) []string {
		return append([]string{"generate", "--model", dir, "--prompt", "x", "--device", "cpu"}, flags...)
	}
	ev := func(flags ...string) []string {
		return append([]string{"eval", "--model", dir, "--device", "cpu"}, flags...)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{gen("--temperature", "nan"), "--temperature NaN must be a finite number >= 0"},
		{gen("--temperature", "inf"), "--temperature +Inf"},
		{gen("--temperature", "-1"), "--temperature -1"},
		{gen("--top-p", "nan"), "--top-p NaN must be in (0, 1]"},
		{gen("--top-p", "0"), "--top-p 0 must be in (0, 1] (1: all)"},
		{gen("--top-p", "1.5"), "--top-p 1.5"},
		{gen("--top-p", "-inf"), "--top-p -Inf"},
		{gen("--top-k", "-1"), "--top-k -1 must be >= 0"},
		{gen("--max-tokens", "0"), "--max-tokens 0 must be >= 1"},
		{gen("--seed", "-1"), "invalid argument"},
		{gen("--dtype", "fp8"), `--dtype "fp8": want auto, f32, bf16 or f16`},
		{gen("--dtype", "i32"), `--dtype "i32"`},
		{ev("--dtype", "int32"), `--dtype "int32"`},
		{ev("--tokens", "5,-1"), "id -1 at position 1 is negative"},
		{ev("--tokens", "5,384"), "id 384 at position 1 is outside the model's vocabulary [0, 384)"},
		{ev("--tokens", strings.Repeat("1,", 64)+"1"), "65 ids exceed the model's max_seq 64"},
		{ev("--tokens", "5"), "one id has no next id to score"},
		{ev("--seq", "65"), "--seq 65 exceeds the model's max_seq 64"},
		{ev("--batch", "0"), "--batch must be >= 1"},
		{ev("--seq", "-1"), "--seq and --max-windows >= 0"},
	} {
		expectCLI(t, 2, c.want, c.args...)
	}
	// A good command line goes on to load the tokenizer and model, which
	// fail: there are none.
	expectCLI(t, 1, "no tokenizer", gen()...)
	expectCLI(t, 1, "model.safetensors", ev("--tokens", "5,6")...)
}

// TestEvalOneToken: one id has no next-token loss. Without --dump-logits it
// is refused (above); with it the logits are written and --json reports
// "mean_loss": null and no losses, not a loss of 0 (a perfect score for
// nothing scored, as before).
func TestEvalOneToken(t *testing.T) {
	dir := writeInferModel(t, inferConfig(), false, nil)
	dump := filepath.Join(t.TempDir(), "logits.safetensors")
	out := expectCLI(t, 0, "", "eval", "--model", dir, "--tokens", "5", "--dump-logits", dump, "--json", "--device", "cpu")
	var res map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("eval --json: %v\n%s", err, out)
	}
	if v, ok := res["mean_loss"]; !ok || v != nil {
		t.Errorf("mean_loss of one token = %v (present %v), want null", v, ok)
	}
	if l, ok := res["next_token_losses"].([]any); !ok || len(l) != 0 {
		t.Errorf("next_token_losses of one token = %v, want []", res["next_token_losses"])
	}
	if _, err := os.Stat(dump); err != nil {
		t.Errorf("no logits dumped: %v", err)
	}
	expectCLI(t, 0, "1 token: no next-token loss", "eval", "--model", dir, "--tokens", "5", "--dump-logits", dump, "--device", "cpu")

	out = expectCLI(t, 0, "", "eval", "--model", dir, "--tokens", "5,6,7", "--json", "--device", "cpu")
	res = nil
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	if v, ok := res["mean_loss"].(float64); !ok || !(v > 0) || res["dtype"] != "f32" {
		t.Errorf("eval of 3 tokens: mean_loss %v, dtype %v (want a positive loss, f32 on the CPU)", res["mean_loss"], res["dtype"])
	}
}

// TestEvalDType: eval in bf16 (the bf16 weight copies, the padded head)
// lands near the f32 loss of the same text.
func TestEvalDType(t *testing.T) {
	dir := writeInferModel(t, inferConfig(), true, nil)
	text := filepath.Join(t.TempDir(), "text.txt")
	if err := os.WriteFile(text, []byte(inferText), 0o644); err != nil {
		t.Fatal(err)
	}
	loss := map[string]float64{}
	for _, dt := range []string{"f32", "bf16"} {
		out := expectCLI(t, 0, "", "eval", "--model", dir, "--data", text, "--seq", "16", "--device", "cpu", "--dtype", dt, "--json")
		var res struct {
			DType string
			Loss  float64
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatal(err)
		}
		if res.DType != dt {
			t.Errorf("--dtype %s: eval reports dtype %q", dt, res.DType)
		}
		loss[dt] = res.Loss
	}
	if d := math.Abs(loss["bf16"] - loss["f32"]); !(d < 0.02*loss["f32"]) {
		t.Errorf("bf16 loss %v, f32 %v", loss["bf16"], loss["f32"])
	}
}

// TestBenchGenerate: bench generate on the CPU reports the prefill and
// decode rates and the bytes a decode step reads: the weights in the compute
// dtype (bf16 about half of f32) and the KV cache at the mean length.
func TestBenchGenerate(t *testing.T) {
	cfg := inferConfig()
	dir := writeInferModel(t, cfg, false, nil)
	const B, P, N = 2, 8, 4
	results := map[string]benchGenerateResult{}
	for _, dt := range []string{"f32", "bf16"} {
		out := expectCLI(t, 0, "", "bench", "generate", "--model", dir, "--device", "cpu", "--dtype", dt,
			"--batch", "2", "--prompt-len", "8", "--new", "4", "--peak-gbps", "1", "--json")
		var r benchGenerateResult
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("bench generate --json: %v\n%s", err, out)
		}
		if r.Batch != B || r.PromptLen != P || r.New != N || r.DType != dt || r.Device != "cpu:0" || r.Op != "generate parallax" {
			t.Errorf("--dtype %s: %+v", dt, r)
		}
		if !(r.PrefillMs > 0) || !(r.DecodeMs > 0) || !(r.SampleMs >= 0) || r.SampleMs > r.DecodeMs {
			t.Errorf("--dtype %s: prefill %v ms, decode %v ms, sampling %v ms", dt, r.PrefillMs, r.DecodeMs, r.SampleMs)
		}
		if rel := r.PrefillTokensPerS*r.PrefillMs/1e3/(B*P) - 1; math.Abs(rel) > 1e-9 {
			t.Errorf("prefill tokens/s %v does not match %d tokens in %v ms", r.PrefillTokensPerS, B*P, r.PrefillMs)
		}
		if rel := r.DecodeTokensPerS*r.DecodeMs/1e3/B - 1; math.Abs(rel) > 1e-9 {
			t.Errorf("decode tokens/s %v does not match %d tokens in %v ms", r.DecodeTokensPerS, B, r.DecodeMs)
		}
		if want := prefillFLOPs(cfg, B, P); r.PrefillFLOPs != want || math.Abs(r.PrefillTFLOPs*1e12*r.PrefillMs/1e3/want-1) > 1e-9 {
			t.Errorf("--dtype %s: prefill %v flops at %v TFLOP/s in %v ms, want %v flops", dt, r.PrefillFLOPs, r.PrefillTFLOPs, r.PrefillMs, want)
		}
		size := map[string]float64{"f32": 4, "bf16": 2}[dt]
		mean := float64(P) + float64(N+1)/2
		if want := int64(2 * float64(cfg.Layers*B*cfg.KVHeads*cfg.HeadDim) * size * mean); r.KVBytes != want || r.MeanKVLen != mean {
			t.Errorf("--dtype %s: kv_bytes %d at mean length %v, want %d at %v", dt, r.KVBytes, r.MeanKVLen, want, mean)
		}
		if r.BytesPerStep != r.WeightBytes+r.KVBytes || r.BytesPerToken != float64(r.BytesPerStep)/B {
			t.Errorf("--dtype %s: bytes per step %d, per token %v (weights %d, kv %d)", dt, r.BytesPerStep, r.BytesPerToken, r.WeightBytes, r.KVBytes)
		}
		if r.PeakGBs != 1 || math.Abs(r.Roofline-r.GBs) > 1e-12*r.GBs || r.PeakSource != "--peak-gbps" {
			t.Errorf("--peak-gbps 1: roofline %v of %v GB/s (%s) at %v GB/s", r.Roofline, r.PeakGBs, r.PeakSource, r.GBs)
		}
		results[dt] = r
	}
	// Weights read per step: the untied embedding's B rows and the gains in
	// f32 in both, every product weight in the compute dtype (384 needs no
	// vocabulary padding).
	d, hd, V := int64(cfg.Dim), int64(cfg.HeadDim), int64(cfg.Vocab)
	gains := int64(cfg.Layers)*(2*d+3*hd) + d // input, post, q, k, r norms; the final norm
	products := cfg.NumParams() - V*d - gains
	for dt, want := range map[string]int64{"f32": 4 * (products + gains + B*d), "bf16": 2*products + 4*(gains+B*d)} {
		if got := results[dt].WeightBytes; got != want {
			t.Errorf("--dtype %s: weight_bytes %d, want %d", dt, got, want)
		}
	}
	if want := cfg.NumParams(); results["f32"].Params != want {
		t.Errorf("params %d, want %d", results["f32"].Params, want)
	}

	text := expectCLI(t, 0, "decode", "bench", "generate", "--model", dir, "--device", "cpu", "--prompt-len", "4", "--new", "2")
	if strings.Contains(text, "roofline") {
		t.Errorf("a roofline on the CPU, whose bandwidth is unknown: %s", text)
	}

	short := configOnlyDir(t, cfg)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--device", "cpu"}, "--model is required"},
		{[]string{"--model", short, "--batch", "0"}, "--batch 0 must be >= 1"},
		{[]string{"--model", short, "--prompt-len", "0"}, "--prompt-len 0 must be >= 1"},
		{[]string{"--model", short, "--new", "0"}, "--new 0 must be >= 1"},
		{[]string{"--model", short, "--prompt-len", "60", "--new", "5"}, "--prompt-len 60 + --new 5 exceed the model's max_seq 64"},
		{[]string{"--model", short, "--dtype", "f8"}, `--dtype "f8"`},
		{[]string{"--model", short, "--peak-gbps", "nan"}, "--peak-gbps NaN"},
		{[]string{"--model", short, "extra"}, `unexpected argument "extra"`},
	} {
		expectCLI(t, 2, c.want, append([]string{"bench", "generate"}, c.args...)...)
	}
	expectCLI(t, 1, "model.safetensors", "bench", "generate", "--model", short, "--device", "cpu", "--prompt-len", "4", "--new", "2")
	expectCLI(t, 2, "attention, decode, matmul or train, or generate", "bench", "frob")
	expectCLI(t, 0, "prompt-len", "bench", "generate", "--help")
}

// TestPrefillFLOPs: the prefill's arithmetic counted by hand for a small
// shape (d 8, q 8, kv 4, FFN 16, 2 layers, 2 query heads of 4, vocab 10,
// one prompt of 3 tokens): linears 2 * 576 * 2 * 3 = 6912 (Parallax's r
// adds 64 a layer: 7680), the head at the last position 2 * 8 * 10 = 160,
// attention over the 6 causal pairs 2 * 2 heads * 6 * 4 * 2 layers per
// product, two products (softmax) or four (Parallax).
func TestPrefillFLOPs(t *testing.T) {
	for _, tc := range []struct {
		attention string
		want      float64
	}{
		{model.AttentionSoftmax, 6912 + 160 + 2*192},
		{model.AttentionParallax, 7680 + 160 + 4*192},
	} {
		c := model.Config{Vocab: 10, Dim: 8, Layers: 2, Heads: 2, KVHeads: 1, HeadDim: 4, FFN: 16, Attention: tc.attention}
		if got := prefillFLOPs(c, 1, 3); got != tc.want {
			t.Errorf("%s: %v flops, want %v", tc.attention, got, tc.want)
		}
	}
}
