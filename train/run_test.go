package train

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/assets"
	"github.com/parallax-engine/parallax/model"
	"github.com/parallax-engine/parallax/model/safetensors"
)

// testSetup writes a small model config and a small corpus (two documents:
// the second is held out) and returns a run config using them.
func testSetup(t *testing.T, attention, optim string) Config {
	t.Helper()
	dir := t.TempDir()
	mc, err := model.PresetConfig("tiny")
	if err != nil {
		t.Fatal(err)
	}
	mc.Dim, mc.Layers, mc.Heads, mc.KVHeads, mc.HeadDim, mc.FFN = 48, 2, 4, 2, 12, 96
	mc.Attention = attention
	if err := model.WriteConfig(filepath.Join(dir, "config.json"), mc); err != nil {
		t.Fatal(err)
	}
	docs, err := assets.Corpus()
	if err != nil {
		t.Fatal(err)
	}
	text := docs[0].Text
	corpus := filepath.Join(dir, "corpus")
	os.Mkdir(corpus, 0o755)
	os.WriteFile(filepath.Join(corpus, "a.txt"), []byte(text[:120_000]), 0o644)
	os.WriteFile(filepath.Join(corpus, "b.txt"), []byte(text[200_000:215_000]), 0o644)
	return Config{
		Out: filepath.Join(dir, "run"), Model: filepath.Join(dir, "config.json"), Vocab: 320,
		Data: corpus, Device: "cpu", Steps: 60, Batch: 8, Seq: 32, Accum: 1,
		Optim: DefaultOptimConfig(optim), ClipNorm: 1, Seed: 7,
		EvalEvery: 30, EvalBatches: 4, SaveEvery: -1, LogEvery: 10,
	}
}

func TestTrainingLossFalls(t *testing.T) {
	for _, tc := range []struct{ attention, optim string }{
		{model.AttentionParallax, OptMuon},
		{model.AttentionSoftmax, OptAdamW},
	} {
		t.Run(tc.attention+"-"+tc.optim, func(t *testing.T) {
			cfg := testSetup(t, tc.attention, tc.optim)
			if tc.optim == OptAdamW {
				cfg.Optim.AdamW.LR = 1e-2
			}
			var losses []float64
			var mfu *float64
			cfg.PeakFLOPS = 1e11
			cfg.OnStep = func(r Record) { losses = append(losses, *r.Loss); mfu = r.MFU }
			var out bytes.Buffer
			cfg.Stdout = &out
			res, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			first := (losses[0] + losses[1] + losses[2]) / 3
			n := len(losses)
			last := (losses[n-1] + losses[n-2] + losses[n-3]) / 3
			t.Logf("loss %.3f -> %.3f, val %.3f, %.0f tokens/s", first, last, res.ValLoss, res.TokensPerS)
			if !(last < first-1) {
				t.Errorf("loss did not fall: %.3f -> %.3f", first, last)
			}
			if math.Abs(first-math.Log(320)) > 0.5 {
				t.Errorf("initial loss %.3f, want about ln(320) = %.3f", first, math.Log(320))
			}
			if mfu == nil || !(*mfu > 0 && *mfu < 1) {
				t.Errorf("MFU %v against a 100 GFLOP/s peak", mfu)
			}
			if !(res.ValLoss < first) {
				t.Errorf("validation loss %.3f not below the initial loss", res.ValLoss)
			}
			for _, f := range []string{model.WeightsFile, model.ConfigFile, OptimizerFile, TokenizerFile, MetricsFile, PlotFile} {
				if _, err := os.Stat(filepath.Join(cfg.Out, f)); err != nil {
					t.Errorf("missing output: %v", err)
				}
			}
			recs, err := ReadMetrics(filepath.Join(cfg.Out, MetricsFile))
			if err != nil {
				t.Fatal(err)
			}
			var evals, withCOR int
			for _, r := range recs {
				if r.Eval {
					evals++
					if len(r.SRankQ) != 2 || (tc.attention == model.AttentionParallax) != (len(r.SRankRK) == 2) {
						t.Errorf("eval record without the expected stable ranks: %+v", r)
					}
				}
				if len(r.COR) == 2 {
					withCOR++
				}
			}
			if evals != 2 {
				t.Errorf("%d evaluation records, want 2", evals)
			}
			if (tc.attention == model.AttentionParallax) != (withCOR > 0) {
				t.Errorf("%d records with COR for %s", withCOR, tc.attention)
			}
			if !strings.Contains(out.String(), "step 60/60") {
				t.Errorf("no progress line for the last step in:\n%s", out.String())
			}
		})
	}
}

// params reads every parameter of the checkpoint in dir.
func checkpointParams(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	f, err := safetensors.Open(filepath.Join(dir, model.WeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]byte{}
	for _, n := range f.Names() {
		b, err := f.Raw(n)
		if err != nil {
			t.Fatal(err)
		}
		out[n] = b
	}
	return out
}

// TestResumeIsBitExact trains 2k steps in one go and k + k steps with an
// interruption (context cancelled after step k, as Ctrl-C does) and a
// resume from the checkpoint in between: the parameters must be identical
// bit for bit.
func TestResumeIsBitExact(t *testing.T) {
	const k = 6
	for _, optim := range []string{OptMuon, OptAdamW} {
		t.Run(optim, func(t *testing.T) {
			cfg := testSetup(t, model.AttentionParallax, optim)
			cfg.Steps, cfg.EvalEvery, cfg.LogEvery = 2*k, 5, 1
			cfg.Accum = 2

			straight := cfg
			straight.Out = cfg.Out + "-straight"
			if _, err := Run(context.Background(), straight); err != nil {
				t.Fatal(err)
			}

			ctx, cancel := context.WithCancel(context.Background())
			first := cfg
			first.OnStep = func(r Record) {
				if r.Step == k {
					cancel()
				}
			}
			res, err := Run(ctx, first)
			if err != nil {
				t.Fatal(err)
			}
			if !res.Interrupted || res.Step != k {
				t.Fatalf("first half: interrupted %v at step %d, want step %d", res.Interrupted, res.Step, k)
			}
			resume := Config{Out: cfg.Out, Device: "cpu", Resume: true, EvalEvery: 5, LogEvery: 1, SaveEvery: -1}
			res, err = Run(context.Background(), resume)
			if err != nil {
				t.Fatal(err)
			}
			if res.Step != 2*k || res.Interrupted {
				t.Fatalf("resumed run ended at step %d (interrupted %v)", res.Step, res.Interrupted)
			}
			a, b := checkpointParams(t, straight.Out), checkpointParams(t, cfg.Out)
			if len(a) != len(b) {
				t.Fatalf("%d vs %d tensors", len(a), len(b))
			}
			for n, va := range a {
				if !bytes.Equal(va, b[n]) {
					t.Errorf("%s differs between the uninterrupted and the resumed run", n)
				}
			}
			sa, _, _ := ReadState(filepath.Join(straight.Out, OptimizerFile))
			sb, _, _ := ReadState(filepath.Join(cfg.Out, OptimizerFile))
			if sa.Sampler != sb.Sampler || sa.Tokens != sb.Tokens || sa.Step != sb.Step {
				t.Errorf("training state differs: %+v vs %+v", sa, sb)
			}
			// The metrics of both runs agree step by step.
			ra, _ := ReadMetrics(filepath.Join(straight.Out, MetricsFile))
			rb, _ := ReadMetrics(filepath.Join(cfg.Out, MetricsFile))
			if len(ra) != len(rb) {
				t.Fatalf("%d vs %d metric records", len(ra), len(rb))
			}
			for i := range ra {
				if ra[i].Step != rb[i].Step || (ra[i].Loss != nil && *ra[i].Loss != *rb[i].Loss) {
					t.Errorf("metric record %d differs: step %d vs %d", i, ra[i].Step, rb[i].Step)
				}
			}
		})
	}
}

// TestNoSave: with NoSave neither a finished nor an interrupted run writes
// a checkpoint.
func TestNoSave(t *testing.T) {
	for _, interrupt := range []bool{false, true} {
		cfg := testSetup(t, model.AttentionParallax, OptMuon)
		cfg.Steps, cfg.EvalEvery, cfg.SaveEvery, cfg.NoSave = 3, -1, 1, true
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if interrupt {
			cfg.OnStep = func(r Record) {
				if r.Step == 2 {
					cancel()
				}
			}
		}
		res, err := Run(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int{false: 3, true: 2}[interrupt]; res.Step != want || res.Interrupted != interrupt {
			t.Errorf("interrupt %v: ended at step %d (interrupted %v), want step %d", interrupt, res.Step, res.Interrupted, want)
		}
		for _, f := range []string{model.WeightsFile, model.ConfigFile, OptimizerFile} {
			if _, err := os.Stat(filepath.Join(cfg.Out, f)); err == nil {
				t.Errorf("interrupt %v: NoSave run wrote %s", interrupt, f)
			}
		}
	}
}

func TestCheckpointCorruptionRefused(t *testing.T) {
	cfg := testSetup(t, model.AttentionParallax, OptMuon)
	cfg.Steps, cfg.EvalEvery = 2, -1
	if _, err := Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	resume := Config{Out: cfg.Out, Device: "cpu", Resume: true, Steps: 3}
	state := filepath.Join(cfg.Out, OptimizerFile)
	weights := filepath.Join(cfg.Out, model.WeightsFile)
	goodState, _ := os.ReadFile(state)
	goodWeights, _ := os.ReadFile(weights)
	for _, tc := range []struct {
		name, file string
		corrupt    func([]byte) []byte
		want       string
	}{
		{"flipped state byte", state, func(b []byte) []byte { b[len(b)-5] ^= 0x40; return b }, "checksum mismatch"},
		{"truncated state", state, func(b []byte) []byte { return b[:len(b)/2] }, "optimizer.safetensors"},
		{"flipped weight byte", weights, func(b []byte) []byte { b[len(b)-5] ^= 0x40; return b }, "does not belong"},
		{"missing state", state, nil, "holds no checkpoint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.WriteFile(state, goodState, 0o644)
			os.WriteFile(weights, goodWeights, 0o644)
			if tc.corrupt == nil {
				os.Remove(tc.file)
			} else {
				b, _ := os.ReadFile(tc.file)
				os.WriteFile(tc.file, tc.corrupt(b), 0o644)
			}
			_, err := Run(context.Background(), resume)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
	// A fresh run into a directory holding a checkpoint is refused, not overwritten.
	os.WriteFile(state, goodState, 0o644)
	os.WriteFile(weights, goodWeights, 0o644)
	if _, err := Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "--resume") {
		t.Errorf("overwriting a checkpoint: %v", err)
	}
}

func TestNonFiniteLossStops(t *testing.T) {
	cfg := testSetup(t, model.AttentionParallax, OptAdamW)
	cfg.Steps, cfg.EvalEvery = 6, -1
	cfg.Optim.AdamW.LR = 1e30 // blows the weights up
	cfg.ClipNorm = 0
	_, err := Run(context.Background(), cfg)
	var nf *NonFiniteError
	if !errors.As(err, &nf) {
		t.Fatalf("got %v, want a NonFiniteError", err)
	}
	if nf.Step < 2 || !strings.Contains(err.Error(), "step") {
		t.Errorf("error %q", err)
	}
	t.Logf("%v", err)
}

func TestFLOPsPerToken(t *testing.T) {
	c, _ := model.PresetConfig("tiny")
	soft := c
	soft.Attention = model.AttentionSoftmax
	fp, fs := FLOPsPerToken(c, 128), FLOPsPerToken(soft, 128)
	if !(fp > fs && fs > 6*float64(soft.NumParams())) {
		t.Errorf("FLOPs per token: parallax %g, softmax %g, 6N %g", fp, fs, 6*float64(soft.NumParams()))
	}
}

// TestGradientAccumulation checks that two micro-batches of 4 sequences
// give the gradient of one batch of the same 8 sequences.
func TestGradientAccumulation(t *testing.T) {
	grads := func(batch, accum int) map[string][]float32 {
		cfg := testSetup(t, model.AttentionParallax, OptMuon)
		cfg.Batch, cfg.Accum, cfg.Steps, cfg.ClipNorm = batch, accum, 1, 0 // no clipping: it would hide a scale error
		r := &runner{}
		defer r.close()
		if err := r.setup(cfg); err != nil {
			t.Fatal(err)
		}
		T := cfg.Seq
		if _, err := r.step(make([]int32, batch*(T+1)), make([]int32, batch*T), make([]int32, batch*T), false); err != nil {
			t.Fatal(err)
		}
		out := map[string][]float32{}
		for _, p := range r.m.Params() {
			out[p.Name] = read(t, p.G)
		}
		return out
	}
	one, two := grads(8, 1), grads(4, 2)
	for name, g1 := range one {
		g2 := two[name]
		num, den := 0.0, 0.0
		for i := range g1 {
			num = math.Max(num, math.Abs(float64(g1[i]-g2[i])))
			den = math.Max(den, math.Abs(float64(g1[i])))
		}
		if den > 0 && num/den > 1e-4 {
			t.Errorf("%s: accumulated gradient differs by %.2e (relative)", name, num/den)
		}
	}
}
