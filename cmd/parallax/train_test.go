package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/model"
	"github.com/parallax-engine/parallax/model/safetensors"
)

// TestTrainGenerateEval runs the training commands end to end on a very
// small model: train, resume, generate, eval, the tokenizer commands and
// their input errors.
func TestTrainGenerateEval(t *testing.T) {
	dir := t.TempDir()
	cfgPath := writeSmallConfig(t, dir)
	text := strings.Repeat("It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife.\n\n", 60)
	textPath := filepath.Join(dir, "text.txt")
	os.WriteFile(textPath, []byte(text), 0o644)
	out := filepath.Join(dir, "run")

	expect := func(wantCode int, wantOut string, args ...string) string {
		t.Helper()
		code, stdout, stderr := runCLI(t, args...)
		if code != wantCode || !strings.Contains(stdout+stderr, wantOut) {
			t.Fatalf("parallax %s: exit %d (want %d), output lacks %q\nstdout: %s\nstderr: %s",
				strings.Join(args, " "), code, wantCode, wantOut, stdout, stderr)
		}
		return stdout
	}
	trainArgs := []string{"train", "--config", cfgPath, "--data", textPath, "--vocab", "300", "--device", "cpu",
		"--batch", "2", "--seq", "16", "--eval-every", "2", "--eval-batches", "2", "--out", out}
	expect(0, "done: 2 steps", append(trainArgs, "--steps", "2")...)
	expect(1, "already holds a checkpoint", append(trainArgs, "--steps", "2")...)
	expect(2, "--lr cannot change a resumed run", "train", "--out", out, "--resume", "--lr", "0.1")
	expect(0, "done: 3 steps", "train", "--out", out, "--resume", "--steps", "3", "--device", "cpu")
	for _, f := range []string{"config.json", "model.safetensors", "optimizer.safetensors", "tokenizer.json", "metrics.jsonl", "curves.png"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("train wrote no %s", f)
		}
	}

	g := expect(0, "It is a truth", "generate", "--model", out, "--prompt", "It is a truth", "--max-tokens", "5", "--temperature", "0", "--device", "cpu")
	if g2 := expect(0, "", "generate", "--model", out, "--prompt", "It is a truth", "--max-tokens", "5", "--temperature", "0", "--device", "cpu"); g2 != g {
		t.Errorf("greedy generation is not reproducible: %q vs %q", g, g2)
	}
	expect(2, "--prompt is required", "generate", "--model", out)

	expect(0, "perplexity", "eval", "--model", out, "--data", textPath, "--seq", "16", "--device", "cpu")
	logits := filepath.Join(dir, "logits.safetensors")
	expect(0, "logits [3, 300]", "eval", "--model", out, "--tokens", "5,6,7", "--dump-logits", logits, "--device", "cpu")
	f, err := safetensors.Open(logits)
	if err != nil {
		t.Fatal(err)
	}
	if info, ok := f.Info("logits"); !ok || info.DType != "F32" || len(info.Shape) != 2 || info.Shape[0] != 3 || info.Shape[1] != 300 {
		t.Errorf("dumped logits: %+v", info)
	}
	f.Close()
	expect(2, "outside the model's vocabulary", "eval", "--model", out, "--tokens", "5,300", "--device", "cpu")
	expect(2, "--dump-logits needs --tokens", "eval", "--model", out, "--dump-logits", logits)

	ids := strings.TrimSpace(expect(0, "", "tokenizer", "encode", "--tokenizer", out, "a single man"))
	expect(0, "a single man", "tokenizer", "decode", "--tokenizer", out, ids)
	tokDir := filepath.Join(dir, "tok")
	expect(0, "trained 300 tokens", "tokenizer", "train", "--data", textPath, "--vocab", "300", "--out", tokDir)
	expect(2, "--out is required", "tokenizer", "train")
	expect(2, "unknown subcommand", "tokenizer", "frob")

	// Bad input gives a clear error, not a panic.
	expect(2, `--config "huge" is neither a model preset`, "train", "--config", "huge", "--out", filepath.Join(dir, "x"), "--device", "cpu", "--data", textPath)
	empty := filepath.Join(dir, "empty.txt")
	os.WriteFile(empty, nil, 0o644)
	expect(1, "empty", "train", "--config", cfgPath, "--data", empty, "--out", filepath.Join(dir, "y"), "--device", "cpu")
	expect(2, "--optimizer \"sgd\"", "train", "--optimizer", "sgd", "--out", filepath.Join(dir, "z"))
	w := filepath.Join(out, "model.safetensors")
	b, _ := os.ReadFile(w)
	os.WriteFile(w, b[:len(b)/3], 0o644)
	expect(1, "model.safetensors", "generate", "--model", out, "--prompt", "x", "--device", "cpu")
	expect(1, "parallax train: --resume: model.safetensors does not belong", "train", "--out", out, "--resume", "--steps", "4", "--device", "cpu")
	os.WriteFile(w, append(b[:len(b)-1], b[len(b)-1]^1), 0o644) // intact layout, one flipped bit
	expect(1, "does not belong", "train", "--out", out, "--resume", "--steps", "4", "--device", "cpu")
}

// TestConvertParallax: a softmax checkpoint loaded with --convert-parallax
// (W_R = 0 added) gives exactly the softmax model's logits.
func TestConvertParallax(t *testing.T) {
	dir := t.TempDir()
	cfgPath := writeSmallConfig(t, dir)
	textPath := filepath.Join(dir, "text.txt")
	os.WriteFile(textPath, []byte(strings.Repeat("She was the youngest of the two daughters of a most affectionate father.\n\n", 60)), 0o644)
	out := filepath.Join(dir, "run")
	if code, _, stderr := runCLI(t, "train", "--config", cfgPath, "--attention", "softmax", "--data", textPath, "--vocab", "300",
		"--device", "cpu", "--batch", "2", "--seq", "16", "--steps", "2", "--eval-every", "-1", "--out", out); code != 0 {
		t.Fatalf("train: %s", stderr)
	}
	dump := func(name string, extra ...string) []float32 {
		path := filepath.Join(dir, name)
		args := append([]string{"eval", "--model", out, "--tokens", "5,6,7,8", "--dump-logits", path, "--device", "cpu"}, extra...)
		if code, _, stderr := runCLI(t, args...); code != 0 {
			t.Fatalf("eval %v: %s", extra, stderr)
		}
		f, err := safetensors.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		v, err := f.Float32("logits")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	soft, conv := dump("softmax.safetensors"), dump("converted.safetensors", "--convert-parallax")
	if len(soft) != len(conv) || len(soft) == 0 {
		t.Fatalf("logit counts %d vs %d", len(soft), len(conv))
	}
	for i := range soft {
		if soft[i] != conv[i] {
			t.Fatalf("logit %d: %v as softmax, %v converted to Parallax (want identical)", i, soft[i], conv[i])
		}
	}
}

// writeSmallConfig writes a one-layer model config (the tiny preset made
// smaller) into dir and returns its path.
func writeSmallConfig(t *testing.T, dir string) string {
	t.Helper()
	mc, err := model.PresetConfig("tiny")
	if err != nil {
		t.Fatal(err)
	}
	mc.Dim, mc.Layers, mc.Heads, mc.KVHeads, mc.HeadDim, mc.FFN = 32, 1, 2, 1, 16, 64
	cfgPath := filepath.Join(dir, "config.json")
	if err := model.WriteConfig(cfgPath, mc); err != nil {
		t.Fatal(err)
	}
	return cfgPath
}
