package main

import (
	"bufio"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/assets"
	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/model"
	"github.com/parallax-engine/parallax/model/safetensors"
	"github.com/parallax-engine/parallax/model/tokenizer"
	"github.com/parallax-engine/parallax/train"
	"github.com/parallax-engine/parallax/train/data"
)

// fixtureDir is a tiny Hugging Face Qwen3 folder: config.json (HF keys
// only), model.safetensors in bf16, tokenizer.json and expected.json (a
// fixed batch of token ids and, when the folder was made by transformers
// with scripts/hf-fixture.py, the loss transformers computes on it). The
// committed folder is replaced by the one that script writes; until then
// TestWriteHFFixture makes a Go-only stand-in (PARALLAX_WRITE_FIXTURE=1).
const fixtureDir = "testdata/hf-qwen3-tiny"

// fixtureExpect is expected.json.
type fixtureExpect struct {
	Tokens []int    `json:"tokens"`
	Loss   *float64 `json:"loss"` // transformers' loss (nil for the Go-only stand-in)
	Source string   `json:"source"`
}

// TestWriteHFFixture writes the Go-only stand-in for the transformers
// fixture: the same shape the script uses, random weights (std 0.1 so the
// logits are far from uniform), our BPE tokenizer of the script's size.
func TestWriteHFFixture(t *testing.T) {
	if os.Getenv("PARALLAX_WRITE_FIXTURE") != "1" {
		t.Skip("set PARALLAX_WRITE_FIXTURE=1 to rewrite " + fixtureDir)
	}
	const vocab = 384
	docs, err := assets.TrainDocuments()
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Train([]string{docs[0].Text[:200000]}, vocab, []string{train.EOTToken})
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(fixtureDir, 0o755)
	if err := tok.SaveHF(filepath.Join(fixtureDir, "tokenizer.json")); err != nil {
		t.Fatal(err)
	}
	cfgJSON := `{
  "architectures": ["Qwen3ForCausalLM"],
  "model_type": "qwen3",
  "vocab_size": 384,
  "hidden_size": 64,
  "intermediate_size": 128,
  "num_hidden_layers": 2,
  "num_attention_heads": 4,
  "num_key_value_heads": 2,
  "head_dim": 16,
  "hidden_act": "silu",
  "max_position_embeddings": 256,
  "rms_norm_eps": 1e-06,
  "rope_theta": 10000.0,
  "tie_word_embeddings": true,
  "attention_bias": false,
  "use_sliding_window": false,
  "torch_dtype": "bfloat16",
  "eos_token_id": 0
}
`
	os.WriteFile(filepath.Join(fixtureDir, "config.json"), []byte(cfgJSON), 0o644)
	cfg, err := model.ReadConfig(filepath.Join(fixtureDir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	var ts []safetensors.Tensor
	for _, s := range model.ParamSpecs(cfg) {
		n := 1
		for _, d := range s.Shape {
			n *= d
		}
		vals := make([]float32, n)
		for i := range vals {
			if s.Kind == model.Gain {
				vals[i] = float32(1 + 0.1*rng.NormFloat64())
			} else {
				vals[i] = float32(0.1 * rng.NormFloat64())
			}
		}
		ts = append(ts, safetensors.BF16Tensor(s.Name, s.Shape, vals))
	}
	if err := safetensors.Write(filepath.Join(fixtureDir, "model.safetensors"), ts, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	b, _ := json.MarshalIndent(fixtureExpect{Tokens: fixtureTokens(vocab), Source: "Go stand-in (TestWriteHFFixture); no transformers loss"}, "", "  ")
	os.WriteFile(filepath.Join(fixtureDir, "expected.json"), append(b, '\n'), 0o644)
}

// fixtureTokens is the fixed batch of the fixture: 33 ids (a window of 32
// positions), the same formula scripts/hf-fixture.py uses.
func fixtureTokens(vocab int) []int {
	ids := make([]int, 33)
	for i := range ids {
		ids[i] = (i*37 + 11) % vocab
	}
	return ids
}

func readFixture(t *testing.T) fixtureExpect {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixtureDir, "expected.json"))
	if err != nil {
		t.Fatalf("the fixture %s is missing: %v", fixtureDir, err)
	}
	var e fixtureExpect
	if err := json.Unmarshal(b, &e); err != nil || len(e.Tokens) < 2 {
		t.Fatalf("%s/expected.json: %v", fixtureDir, err)
	}
	return e
}

// oneWindowDataset writes a dataset whose only training window is ids.
func oneWindowDataset(t *testing.T, dir string, ids []int, vocab int) string {
	t.Helper()
	toks := make([]int32, len(ids))
	for i, v := range ids {
		toks[i] = int32(v)
	}
	enc := func(string) ([]int32, error) { return toks, nil }
	ds := filepath.Join(dir, "ds")
	if _, err := data.Build(ds, enc, []data.Document{{Name: "batch", Text: "x"}}, nil,
		data.BuildOptions{Vocab: vocab, EOT: -1}); err != nil {
		t.Fatal(err)
	}
	return ds
}

// firstLoss reads the loss of step 1 from a run's metrics.
func firstLoss(t *testing.T, out string) float64 {
	t.Helper()
	f, err := os.Open(filepath.Join(out, train.MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var rec train.Record
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Step == 1 && rec.Loss != nil {
			return *rec.Loss
		}
	}
	t.Fatal("no step-1 loss in metrics.jsonl")
	return 0
}

// evalTokensLoss runs parallax eval --tokens on dir.
func evalTokensLoss(t *testing.T, dir, device string, ids []int, extra ...string) float64 {
	t.Helper()
	s := make([]string, len(ids))
	for i, v := range ids {
		s[i] = strconv.Itoa(v)
	}
	args := append([]string{"eval", "--model", dir, "--tokens", strings.Join(s, ","), "--json", "--device", device, "--dtype", "f32"}, extra...)
	code, stdout, stderr := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("eval: exit %d\n%s%s", code, stdout, stderr)
	}
	var r struct {
		Mean *float64 `json:"mean_loss"`
	}
	if err := json.Unmarshal([]byte(stdout), &r); err != nil || r.Mean == nil {
		t.Fatalf("eval output %q: %v", stdout, err)
	}
	return *r.Mean
}

// checkConvertExact: step 0 of train --init DIR --convert-parallax scores
// the batch exactly as eval of the original folder does.
func checkConvertExact(t *testing.T, device string) {
	e := readFixture(t)
	dir := t.TempDir()
	mc, err := model.ReadConfig(filepath.Join(fixtureDir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	ds := oneWindowDataset(t, dir, e.Tokens, mc.Vocab)
	out := filepath.Join(dir, "run")
	T := strconv.Itoa(len(e.Tokens) - 1)
	code, stdout, stderr := runCLI(t, "train", "--init", fixtureDir, "--convert-parallax", "--data", ds,
		"--steps", "1", "--batch", "1", "--seq", T, "--device", device, "--dtype", "f32",
		"--eval-every", "-1", "--log-every", "1", "--out", out)
	if code != 0 {
		t.Fatalf("train: exit %d\n%s%s", code, stdout, stderr)
	}
	got := firstLoss(t, out)
	want := evalTokensLoss(t, fixtureDir, device, e.Tokens)
	t.Logf("%s: train step-0 loss %.9f, eval of the folder %.9f", device, got, want)
	if math.Abs(got-want) > 2e-6*math.Abs(want) {
		t.Errorf("step-0 training loss %.9f differs from eval's %.9f beyond float32 rounding", got, want)
	}
	if e.Loss != nil {
		t.Logf("transformers' loss on the batch: %.9f (%s)", *e.Loss, e.Source)
		if math.Abs(want-*e.Loss) > 1e-4*math.Abs(*e.Loss) {
			t.Errorf("eval's loss %.9f differs from transformers' %.9f", want, *e.Loss)
		}
	}
	// The converted checkpoint is Parallax and still scores the batch the same.
	c, err := model.ReadConfig(filepath.Join(out, "config.json"))
	if err != nil || !c.Parallax() {
		t.Errorf("the trained checkpoint is not Parallax: %v %v", c.Attention, err)
	}
}

func TestInitConvertExactCPU(t *testing.T) { checkConvertExact(t, "cpu") }

func TestInitConvertExactCUDA(t *testing.T) {
	dev, err := engine.Open("cuda:0")
	if err != nil {
		if os.Getenv("PARALLAX_REQUIRE_CUDA") == "1" {
			t.Fatalf("PARALLAX_REQUIRE_CUDA=1 but no CUDA device: %v", err)
		}
		t.Skipf("no CUDA device: %v", err)
	}
	dev.Close()
	checkConvertExact(t, "cuda:0")
}

// TestAdaptFlags covers the adaptation options end to end on the fixture:
// the --config warning, freezing, the probe options, export round trips
// and the command-line mistakes.
func TestAdaptFlags(t *testing.T) {
	e := readFixture(t)
	dir := t.TempDir()
	mc, _ := model.ReadConfig(filepath.Join(fixtureDir, "config.json"))
	ds := oneWindowDataset(t, dir, e.Tokens, mc.Vocab)
	T := strconv.Itoa(len(e.Tokens) - 1)
	base := []string{"--data", ds, "--batch", "1", "--seq", T, "--device", "cpu", "--dtype", "f32", "--eval-every", "-1", "--log-every", "1"}

	// --config DIR alone says it starts from random weights.
	code, _, stderr := runCLI(t, append([]string{"train", "--config", fixtureDir, "--tokenizer", filepath.Join(fixtureDir, "tokenizer.json"),
		"--steps", "1", "--out", filepath.Join(dir, "random")}, base...)...)
	if code != 0 || !strings.Contains(stderr, "RANDOM weights") {
		t.Errorf("--config DIR: exit %d, stderr %q", code, stderr)
	}

	// A probe-only phase: everything frozen but W_R and its norm.
	probe := filepath.Join(dir, "probe")
	code, stdout, stderr := runCLI(t, append([]string{"train", "--init", fixtureDir, "--convert-parallax",
		"--freeze", "*,!*.r_proj.*,!*.r_norm.*", "--probe-lr-scale", "2", "--probe-optimizer", "adamw",
		"--steps", "2", "--out", probe}, base...)...)
	if code != 0 || !strings.Contains(stdout, "frozen:") {
		t.Fatalf("probe-only run: exit %d\n%s%s", code, stdout, stderr)
	}
	before, _ := safetensors.Open(filepath.Join(fixtureDir, "model.safetensors"))
	after, _ := safetensors.Open(filepath.Join(probe, "model.safetensors"))
	q0, _ := before.Float32("model.layers.0.self_attn.q_proj.weight")
	q1, _ := after.Float32("model.layers.0.self_attn.q_proj.weight")
	if !slices.Equal(q0, q1) {
		t.Error("a frozen weight changed")
	}
	r1, _ := after.Float32("model.layers.0.self_attn.r_proj.weight")
	if slices.Max(r1) == 0 && slices.Min(r1) == 0 {
		t.Error("W_R did not train")
	}
	st, _ := safetensors.Open(filepath.Join(probe, train.OptimizerFile))
	for _, n := range st.Names() {
		if strings.Contains(n, "q_proj") {
			t.Errorf("a frozen parameter has optimizer state: %s", n)
		}
	}

	// Export: softmax folder round trip, exact in f32, close in bf16.
	soft := filepath.Join(dir, "soft")
	if code, o, e2 := runCLI(t, append([]string{"train", "--init", fixtureDir, "--steps", "1", "--out", soft}, base...)...); code != 0 {
		t.Fatalf("softmax fine-tune: %d %s%s", code, o, e2)
	}
	ref := evalTokensLoss(t, soft, "cpu", e.Tokens)
	for _, dt := range []string{"f32", "bf16"} {
		hf := filepath.Join(dir, "hf-"+dt)
		if code, o, e2 := runCLI(t, "export", "--format", "hf", "--in", soft, "--out", hf, "--dtype", dt); code != 0 {
			t.Fatalf("export: %d %s%s", code, o, e2)
		}
		raw, _ := os.ReadFile(filepath.Join(hf, "config.json"))
		if strings.Contains(string(raw), `"attention"`) {
			t.Errorf("a softmax export carries our attention key: %s", raw)
		}
		for _, f := range []string{"tokenizer.json", "model.safetensors"} {
			if _, err := os.Stat(filepath.Join(hf, f)); err != nil {
				t.Errorf("export wrote no %s", f)
			}
		}
		got := evalTokensLoss(t, hf, "cpu", e.Tokens)
		tol := 0.0
		if dt == "bf16" {
			tol = 0.02 * ref
		}
		if math.Abs(got-ref) > tol {
			t.Errorf("export %s: eval loss %.7f, the checkpoint's %.7f", dt, got, ref)
		}
	}
	// A Parallax export keeps W_R and loads as Parallax.
	px := filepath.Join(dir, "hf-px")
	if code, o, e2 := runCLI(t, "export", "--in", probe, "--out", px, "--dtype", "f32"); code != 0 {
		t.Fatalf("export parallax: %d %s%s", code, o, e2)
	}
	if a, b := evalTokensLoss(t, px, "cpu", e.Tokens), evalTokensLoss(t, probe, "cpu", e.Tokens); a != b {
		t.Errorf("Parallax export: loss %v, checkpoint %v", a, b)
	}
	if code, _, e2 := runCLI(t, "export", "--in", probe, "--out", px); code != 1 || !strings.Contains(e2, "not empty") {
		t.Errorf("export over a folder: exit %d, %s", code, e2)
	}

	// Command-line mistakes exit 2.
	for _, args := range [][]string{
		{"train", "--init", fixtureDir, "--config", "tiny"},
		{"train", "--convert-parallax"},
		{"train", "--init", fixtureDir, "--probe-init-scale", "1"},
		{"train", "--init", fixtureDir, "--probe-optimizer", "sgd"},
		{"train", "--init", fixtureDir, "--probe-lr-scale", "-1"},
		{"train", "--init", fixtureDir, "--freeze", "[", "--out", filepath.Join(dir, "x")},
		{"export", "--format", "onnx", "--in", soft, "--out", filepath.Join(dir, "y")},
		{"data", "prepare", "--in", "x"},
	} {
		if code, _, _ := runCLI(t, args...); code != 2 {
			t.Errorf("parallax %s: exit %d, want 2", strings.Join(args, " "), code)
		}
	}
	// A freeze pattern that matches nothing fails (exit 1), leaving nothing.
	bad := filepath.Join(dir, "bad")
	if code, _, e2 := runCLI(t, append([]string{"train", "--init", fixtureDir, "--freeze", "*.nothing.*", "--steps", "1", "--out", bad}, base...)...); code != 1 || !strings.Contains(e2, "matches no parameter") {
		t.Errorf("unmatched freeze pattern: exit %d, %s", code, e2)
	}
	if ents, _ := os.ReadDir(bad); len(ents) != 0 {
		t.Errorf("a failed run left %d files", len(ents))
	}
}

// TestInitBadFolder: a folder whose tensor shapes disagree with its config
// fails clearly (exit 1) and writes no checkpoint.
func TestInitBadFolder(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad")
	os.MkdirAll(bad, 0o755)
	raw, _ := os.ReadFile(filepath.Join(fixtureDir, "config.json"))
	os.WriteFile(filepath.Join(bad, "config.json"), []byte(strings.Replace(string(raw), `"intermediate_size": 128`, `"intermediate_size": 96`, 1)), 0o644)
	for _, f := range []string{"model.safetensors", "tokenizer.json"} {
		b, _ := os.ReadFile(filepath.Join(fixtureDir, f))
		os.WriteFile(filepath.Join(bad, f), b, 0o644)
	}
	out := filepath.Join(dir, "run")
	code, _, stderr := runCLI(t, "train", "--init", bad, "--steps", "1", "--seq", "16", "--batch", "1", "--device", "cpu", "--out", out)
	if code != 1 || !strings.Contains(stderr, "the config needs") {
		t.Errorf("mismatched shapes: exit %d, %s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(out, "model.safetensors")); err == nil {
		t.Error("a checkpoint was written")
	}
}

// TestDataPrepareAndSFT: data prepare of a chat JSONL needs a chat
// template; text JSONL trains; a bad line names its file and line.
func TestDataPrepareAndSFT(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "t.jsonl")
	var b strings.Builder
	for i := range 50 {
		b.WriteString(`{"text": "Sample number ` + strconv.Itoa(i) + ` of the text set."}` + "\n")
	}
	os.WriteFile(in, []byte(b.String()), 0o644)
	out := filepath.Join(dir, "ds")
	code, stdout, stderr := runCLI(t, "data", "prepare", "--tokenizer", fixtureDir, "--in", in, "--out", out, "--val-frac", "0.1")
	if code != 0 || !strings.Contains(stdout, "45 text samples") {
		t.Fatalf("prepare: exit %d\n%s%s", code, stdout, stderr)
	}
	run := filepath.Join(dir, "run")
	code, stdout, stderr = runCLI(t, "train", "--init", fixtureDir, "--data", out, "--tokenizer", fixtureDir,
		"--steps", "2", "--batch", "2", "--seq", "32", "--device", "cpu", "--eval-every", "2", "--out", run)
	if code != 0 || !strings.Contains(stdout, "val loss") {
		t.Fatalf("train on prepared data: exit %d\n%s%s", code, stdout, stderr)
	}
	// The same JSONL straight into train.
	code, stdout, stderr = runCLI(t, "train", "--init", fixtureDir, "--data", in,
		"--steps", "1", "--batch", "2", "--seq", "32", "--device", "cpu", "--out", filepath.Join(dir, "run2"))
	if code != 0 || !strings.Contains(stdout, "text samples") {
		t.Fatalf("train on JSONL: exit %d\n%s%s", code, stdout, stderr)
	}

	badIn := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(badIn, []byte("{\"text\": \"ok\"}\n{\"txt\": \"no\"}\n"), 0o644)
	code, _, stderr = runCLI(t, "data", "prepare", "--tokenizer", fixtureDir, "--in", badIn, "--out", filepath.Join(dir, "bad"))
	if code != 1 || !strings.Contains(stderr, "bad.jsonl:2") {
		t.Errorf("bad line: exit %d, %s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "bad")); err == nil {
		t.Error("a failed prepare left its output")
	}
	chat := filepath.Join(dir, "c.jsonl")
	os.WriteFile(chat, []byte(`{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}`+"\n"), 0o644)
	code, _, stderr = runCLI(t, "data", "prepare", "--tokenizer", fixtureDir, "--in", chat, "--out", filepath.Join(dir, "c"))
	if code != 1 || !strings.Contains(stderr, "chat template") {
		t.Errorf("chat without a template: exit %d, %s", code, stderr)
	}
}

// TestShardedFixture: the sharded copy of the transformers fixture (when
// present) trains from --init and scores the batch as the single file.
func TestShardedFixture(t *testing.T) {
	sharded := fixtureDir + "-sharded"
	if _, err := os.Stat(filepath.Join(sharded, model.IndexFile)); err != nil {
		t.Skipf("no sharded fixture (%s; scripts/hf-fixture.py writes it)", sharded)
	}
	e := readFixture(t)
	if a, b := evalTokensLoss(t, sharded, "cpu", e.Tokens), evalTokensLoss(t, fixtureDir, "cpu", e.Tokens); a != b {
		t.Errorf("sharded fixture: loss %v, single file %v", a, b)
	}
}
