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
	"github.com/parallax-engine/parallax/model/safetensors"
	"github.com/parallax-engine/parallax/train/data"
)

// TestQuantizeCommand: parallax quantize writes a folder with the int8
// tensors, their scales, a config with the quantization entry and the
// tokenizer; generate, eval and bench generate load it, and quantize a
// float folder on load with --weights int8; its report shows the weights
// at about half of bf16's bytes.
func TestQuantizeCommand(t *testing.T) {
	cfg := inferConfig()
	cfg.Dim, cfg.HeadDim, cfg.FFN = 64, 32, 128 // rows of 64 and 128 columns: groups of 32 are a few
	dir := writeInferModel(t, cfg, true, nil)
	q := filepath.Join(t.TempDir(), "int8")
	out := expectCLI(t, 0, "quantized", "quantize", "--in", dir, "--out", q, "--group", "32")
	if !strings.Contains(out, "int8, groups of 32") {
		t.Errorf("report: %s", out)
	}
	raw, err := os.ReadFile(filepath.Join(q, model.ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	var cj map[string]any
	if err := json.Unmarshal(raw, &cj); err != nil {
		t.Fatal(err)
	}
	qe, _ := cj["quantization"].(map[string]any)
	if qe["method"] != "int8" || qe["group_size"] != float64(32) || qe["scale_dtype"] != "float32" || qe["scale_suffix"] != "_scale" {
		t.Errorf("config quantization entry %v", cj["quantization"])
	}
	if _, err := os.Stat(filepath.Join(q, "tokenizer.json")); err != nil {
		t.Errorf("tokenizer not copied: %v", err)
	}
	f, err := safetensors.Open(filepath.Join(q, model.WeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	const qn = "model.layers.0.self_attn.q_proj.weight"
	for name, want := range map[string]string{qn: "I8[64,64]", qn + "_scale": "F32[64,2]", "lm_head.weight": "I8[384,64]",
		"model.embed_tokens.weight": "I8[384,64]", "model.norm.weight": "F32[64]", "model.layers.0.mlp.down_proj.weight_scale": "F32[64,4]"} {
		info, ok := f.Info(name)
		if got := info.DType + engine.Shape(info.Shape).String(); !ok || got != want {
			t.Errorf("%s: %s (present %v), want %s", name, got, ok, want)
		}
	}
	f.Close()

	// The JSON report: the int8 bytes against bf16's.
	var rep struct {
		Matrices  int     `json:"matrices"`
		BF16Bytes int64   `json:"bf16_bytes"`
		Int8Bytes int64   `json:"int8_bytes"`
		MaxError  float64 `json:"max_rel_error"`
	}
	js := expectCLI(t, 0, "", "quantize", "--in", dir, "--out", filepath.Join(t.TempDir(), "j"), "--json")
	if err := json.Unmarshal([]byte(js), &rep); err != nil {
		t.Fatalf("%v\n%s", err, js)
	}
	if r := float64(rep.Int8Bytes) / float64(rep.BF16Bytes); rep.Matrices != 2+8*cfg.Layers || r < 0.5 || r > 0.54 || rep.MaxError > 1.0/254 {
		t.Errorf("report %+v: int8/bf16 %.3f", rep, r)
	}

	// Loading: the folder as stored, and the float folder quantized on load.
	gen := expectCLI(t, 0, "It is", "generate", "--model", q, "--prompt", "It is", "--max-tokens", "4", "--temperature", "0", "--device", "cpu")
	if strings.TrimSpace(strings.TrimPrefix(gen, "It is")) == "" {
		t.Errorf("nothing generated: %q", gen)
	}
	for _, args := range [][]string{
		{"generate", "--model", dir, "--weights", "int8", "--prompt", "It is", "--max-tokens", "4", "--temperature", "0", "--device", "cpu", "--dtype", "bf16"},
		{"eval", "--model", q, "--tokens", "5,6,7,8", "--device", "cpu"},
	} {
		expectCLI(t, 0, "", args...)
	}
	bench := func(args ...string) benchGenerateResult {
		t.Helper()
		out := expectCLI(t, 0, "", append([]string{"bench", "generate", "--device", "cpu", "--prompt-len", "4", "--new", "2", "--json", "--dtype", "bf16"}, args...)...)
		var r benchGenerateResult
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return r
	}
	b16, i8, onLoad := bench("--model", dir), bench("--model", q), bench("--model", dir, "--weights", "int8")
	if b16.Weights != "bf16" || i8.Weights != "int8" || onLoad.Weights != "int8" {
		t.Errorf("weights reported: %q, %q, %q", b16.Weights, i8.Weights, onLoad.Weights)
	}
	// int8 with groups of 32 against bf16: 1 + 4/32 bytes a weight against
	// 2 (the gains stay f32), and 1 + 4/64 with the default group (K = 64);
	// the untied embedding, f32 in the bf16 model (it feeds no product),
	// is int8 too: 1.125 of its 4 bytes.
	d, V := int64(cfg.Dim), int64(cfg.Vocab)
	emb := V * d
	prod := cfg.NumParams() - emb - (int64(cfg.Layers)*(2*d+3*int64(cfg.HeadDim)) + d)
	want := (9*prod/8 + 9*emb/8) * 1000 / (2*prod + 4*emb) // per mille, the gains aside
	if r := i8.WeightMemory * 1000 / b16.WeightMemory; r < want-5 || r > want+5 {
		t.Errorf("int8 weight memory %d against bf16 %d: %d per mille, want %d", i8.WeightMemory, b16.WeightMemory, r, want)
	}
	if !(onLoad.WeightMemory < i8.WeightMemory) || !(i8.WeightBytes < b16.WeightBytes) {
		t.Errorf("weight memory: on load %d, folder %d; read per step: int8 %d, bf16 %d", onLoad.WeightMemory, i8.WeightMemory, i8.WeightBytes, b16.WeightBytes)
	}
	text := expectCLI(t, 0, "int8 weights", "bench", "generate", "--model", q, "--device", "cpu", "--prompt-len", "4", "--new", "2")
	if !strings.Contains(text, "decode") {
		t.Errorf("bench text: %s", text)
	}
}

// TestQuantizeErrors: command-line mistakes exit 2 naming the flag; a
// folder that is missing, already quantized or in the way of --out, and
// training from a quantized folder, exit 1 saying why.
func TestQuantizeErrors(t *testing.T) {
	dir := writeInferModel(t, inferConfig(), true, nil)
	tmp := t.TempDir()
	q := filepath.Join(tmp, "q")
	expectCLI(t, 0, "quantized", "quantize", "--in", dir, "--out", q)
	for _, c := range []struct {
		code int
		want string
		args []string
	}{
		{2, "--in is required", []string{"quantize", "--out", filepath.Join(tmp, "x")}},
		{2, "--out is required", []string{"quantize", "--in", dir}},
		{2, "--group 0: want an integer >= 1, or -1 (per-channel)", []string{"quantize", "--in", dir, "--out", filepath.Join(tmp, "x"), "--group", "0"}},
		{2, "--group -2", []string{"quantize", "--in", dir, "--out", filepath.Join(tmp, "x"), "--group", "-2"}},
		{2, "invalid argument", []string{"quantize", "--in", dir, "--out", filepath.Join(tmp, "x"), "--group", "1.5"}},
		{2, `unexpected argument "extra"`, []string{"quantize", "--in", dir, "--out", filepath.Join(tmp, "x"), "extra"}},
		{2, `--weights "int4": want stored or int8`, []string{"generate", "--model", dir, "--prompt", "x", "--weights", "int4", "--device", "cpu"}},
		{2, `--weights "fp8"`, []string{"eval", "--model", dir, "--weights", "fp8", "--device", "cpu"}},
		{2, `--weights "x"`, []string{"bench", "generate", "--model", dir, "--weights", "x", "--device", "cpu"}},
		{1, "none/config.json", []string{"quantize", "--in", filepath.Join(tmp, "none"), "--out", filepath.Join(tmp, "y")}},
		{1, "quantized already", []string{"quantize", "--in", q, "--out", filepath.Join(tmp, "z")}},
		{1, "is not empty", []string{"quantize", "--in", dir, "--out", q}},
		{1, "the output folder is the input folder", []string{"quantize", "--in", dir, "--out", dir, "--force"}},
		{1, "weight-only int8", []string{"train", "--init", q, "--steps", "1", "--seq", "16", "--batch", "1", "--device", "cpu", "--out", filepath.Join(tmp, "run")}},
	} {
		expectCLI(t, c.code, c.want, c.args...)
	}
	expectCLI(t, 0, "int8, per-channel", "quantize", "--in", dir, "--out", q, "--force", "--group", "-1")
	expectCLI(t, 0, "mean next-token loss", "eval", "--model", q, "--tokens", "1,2,3", "--device", "cpu")
}

// TestQuantizedEvalPerplexity: a trained model's held-out loss in int8
// (a folder parallax quantize wrote) stays within a tolerance derived from
// the quantization itself of the f32 loss. The loss is smooth in the
// weights, so to first order quantizing moves it by sum_w g_w d_w, g the
// gradient of the mean loss over the evaluated windows and d = q s - w
// each weight's quantization error (known exactly); |sum g d| <=
// sum |g| |d| =: B, and the tolerance is 2B for the second-order terms.
// B itself must be small (under 1% of the loss, so the test is not
// vacuous) and the losses must differ (the int8 path ran).
func TestQuantizedEvalPerplexity(t *testing.T) {
	root := t.TempDir()
	run, text := trainTemplate(t, root, "--steps", "40")
	q := filepath.Join(root, "int8")
	expectCLI(t, 0, "quantized", "quantize", "--in", run, "--out", q)
	evalLoss := func(dir string) (float64, string) {
		t.Helper()
		out := expectCLI(t, 0, "", "eval", "--model", dir, "--data", text, "--seq", "16", "--device", "cpu", "--json")
		var r struct {
			Loss    float64
			Weights string
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		return r.Loss, r.Weights
	}
	lf, wf := evalLoss(run)
	lq, wq := evalLoss(q)
	if wf != "f32" || wq != "int8" {
		t.Fatalf("weights reported %q and %q", wf, wq)
	}

	// B = sum |g| |q s - w| on the windows eval scores.
	dev := cpu.New()
	m, err := model.Load(run, dev, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	tok, err := loadTokenizer(run)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(text)
	enc := tok.Encode(string(raw))
	stream := make([]int32, len(enc))
	for i, v := range enc {
		stream[i] = int32(v)
	}
	sh, err := data.NewShard(stream, m.Config.Vocab)
	if err != nil {
		t.Fatal(err)
	}
	const T, batch = 16, 8
	wins := data.EvalWindows([]*data.Shard{sh}, T, 0)
	type bat struct {
		in, tgt []int32
		rows    int
		count   int
	}
	var bats []bat
	total := 0
	for i := 0; i < len(wins); i += batch {
		rows := wins[i:min(i+batch, len(wins))]
		b := bat{in: make([]int32, len(rows)*T), tgt: make([]int32, len(rows)*T), rows: len(rows)}
		for j, w := range rows {
			data.SplitWindow(w, b.in[j*T:(j+1)*T], b.tgt[j*T:(j+1)*T], model.IgnoreIndex)
		}
		for _, v := range b.tgt {
			if v != model.IgnoreIndex {
				b.count++
			}
		}
		total += b.count
		bats = append(bats, b)
	}
	if err := m.AllocGrads(); err != nil {
		t.Fatal(err)
	}
	if err := m.ZeroGrads(); err != nil {
		t.Fatal(err)
	}
	// The gradient of the mean over every counted target: each batch's
	// mean weighted by its share of the targets.
	for _, b := range bats {
		if _, err := m.ForwardBackward(b.in, b.tgt, b.rows, T, float32(b.count)/float32(total)); err != nil {
			t.Fatal(err)
		}
	}
	var bound float64
	for _, p := range m.Params() {
		if p.Kind != model.Matrix && p.Kind != model.Embedding && p.Kind != model.Head {
			continue
		}
		w, err := engine.Float32s(p.W)
		if err != nil {
			t.Fatal(err)
		}
		g, err := engine.Float32s(p.G)
		if err != nil {
			t.Fatal(err)
		}
		n, k := p.W.Dim(0), p.W.Dim(1)
		gs := min(k, engine.DefaultInt8Group)
		qv, sv, err := engine.QuantizeInt8(w, n, k, gs)
		if err != nil {
			t.Fatal(err)
		}
		back, _ := engine.DequantizeInt8(qv, sv, n, k, gs)
		for i := range w {
			bound += math.Abs(float64(g[i])) * math.Abs(float64(back[i]-w[i]))
		}
	}
	d := math.Abs(lq - lf)
	t.Logf("held-out loss: f32 %.5f, int8 %.5f (perplexity %.3f vs %.3f, %+.3f%%); first-order bound %.3g", lf, lq,
		math.Exp(lf), math.Exp(lq), 100*(math.Exp(lq-lf)-1), bound)
	if !(bound > 0) || bound > 0.01*lf {
		t.Fatalf("first-order bound %.3g against a loss of %.4g: not a useful tolerance", bound, lf)
	}
	if d == 0 {
		t.Error("int8 and f32 losses are identical: the int8 weights did not run")
	}
	if d > 2*bound {
		t.Errorf("int8 loss %v differs from f32 %v by %.3g, beyond twice the first-order bound %.3g", lq, lf, d, bound)
	}
}
