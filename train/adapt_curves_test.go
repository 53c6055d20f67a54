package train

import (
	"bytes"
	"errors"
	"fmt"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/model"
	"github.com/parallax-engine/parallax/train/plot"
)

// adaptTestTokensPerStep is the synthetic runs' tokens per step.
const adaptTestTokensPerStep = 100

// adaptTestLoss is the synthetic held-out loss of an arm and seed at a
// step: it falls with the steps, rises by 0.01 per seed, Parallax is 0.05
// below softmax under Muon and 0.02 above under AdamW, and the AdamW arms
// overfit at step 4 (so their best loss is at step 2).
func adaptTestLoss(att, opt string, seed, step int) float64 {
	v := 5 - 0.1*float64(step)/2 + 0.01*float64(seed)
	if att == model.AttentionParallax {
		v += map[string]float64{OptMuon: -0.05, OptAdamW: 0.02}[opt]
	}
	if opt == OptAdamW && step == 4 {
		v += 0.3
	}
	return v
}

// writeAdaptTestRun writes a synthetic run folder: config.json of the arm's
// attention and metrics.jsonl with steps 1..4 (COR per layer for Parallax,
// lr_adamw under Muon) and evaluations at steps 2 and 4 (W_R stable ranks
// for Parallax).
func writeAdaptTestRun(t *testing.T, dir, att, opt string, seed int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	mc := model.Config{Vocab: 64, Dim: 16, Layers: 2, Heads: 2, KVHeads: 1, HeadDim: 8, FFN: 32,
		RopeTheta: 1e4, NormEps: 1e-6, TiedEmbeddings: true, Attention: att, RInit: model.RInitZero, MaxSeq: 32}
	if err := model.WriteConfig(filepath.Join(dir, model.ConfigFile), mc); err != nil {
		t.Fatal(err)
	}
	log, err := OpenMetrics(filepath.Join(dir, MetricsFile), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	for step := 1; step <= 4; step++ {
		rec := Record{Step: step, Loss: f(6 - 0.1*float64(step)), LR: f(0.01), Tokens: int64(step * adaptTestTokensPerStep)}
		if opt == OptMuon {
			rec.LRAdamW = f(0.003)
		}
		if att == model.AttentionParallax {
			rec.COR = []float64{0.1 * float64(step), 0.2 * float64(step)}
		}
		if err := log.Write(rec); err != nil {
			t.Fatal(err)
		}
		if step%2 == 0 {
			v := adaptTestLoss(att, opt, seed, step)
			ev := Record{Step: step, Eval: true, ValLoss: &v, PPL: f(math.Exp(v))}
			if att == model.AttentionParallax {
				ev.SRankR = []float64{float64(step), 2 * float64(step)}
			}
			if err := log.Write(ev); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// writeAdaptTestStudy writes the 4 arms x 3 seeds under dir/runs (folders
// named ATT-OPT-sSEED, or without the seed suffix when unpaired) and a base
// run, returning the runs' folder and the base's.
func writeAdaptTestStudy(t *testing.T, dir string, unpaired bool) (runs, base string) {
	t.Helper()
	runs = filepath.Join(dir, "runs")
	for _, opt := range []string{OptMuon, OptAdamW} {
		for _, att := range []string{model.AttentionSoftmax, model.AttentionParallax} {
			for seed := 1; seed <= 3; seed++ {
				name := fmt.Sprintf("%s-%s-s%d", att, opt, seed)
				if unpaired {
					name = fmt.Sprintf("%s-%s-run%d", att, opt, seed)
				}
				writeAdaptTestRun(t, filepath.Join(runs, name), att, opt, seed)
			}
		}
	}
	base = filepath.Join(dir, "base")
	writeAdaptTestRun(t, base, model.AttentionSoftmax, OptAdamW, 0)
	return runs, base
}

func loadAdaptTestRuns(t *testing.T, dir string) []AdaptRun {
	t.Helper()
	dirs, err := FindAdaptRuns([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	var runs []AdaptRun
	for _, d := range dirs {
		r, err := LoadAdaptRun(d)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	return runs
}

func TestLoadAdaptRun(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, att, opt string
		seed           int
		wantArm        string
		wantSeed       int
	}{
		{"softmax-muon-s1", model.AttentionSoftmax, OptMuon, 1, "(a) softmax, Muon", 1},
		{"parallax-muon-s12", model.AttentionParallax, OptMuon, 12, "(b) Parallax, Muon", 12},
		{"softmax-adamw-s3", model.AttentionSoftmax, OptAdamW, 3, "(a) softmax, AdamW", 3},
		{"px-adamw", model.AttentionParallax, OptAdamW, 1, "(b) Parallax, AdamW", -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(dir, tt.name)
			writeAdaptTestRun(t, p, tt.att, tt.opt, tt.seed)
			r, err := LoadAdaptRun(p)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Arm().String(); got != tt.wantArm {
				t.Errorf("arm %q, want %q", got, tt.wantArm)
			}
			if r.Seed != tt.wantSeed {
				t.Errorf("seed %d, want %d", r.Seed, tt.wantSeed)
			}
			if got := r.tokensPerStep(); got != adaptTestTokensPerStep {
				t.Errorf("tokens per step %v, want %d", got, adaptTestTokensPerStep)
			}
			if err := CheckAdaptRun(r); err != nil {
				t.Error(err)
			}
			c := r.valCurve()
			if len(c.x) != 2 || c.x[0] != 200 || c.x[1] != 400 {
				t.Errorf("held-out curve at tokens %v, want [200 400]", c.x)
			}
		})
	}
}

func TestAdaptRunErrors(t *testing.T) {
	dir := t.TempDir()
	noEval := filepath.Join(dir, "no-eval")
	os.MkdirAll(noEval, 0o755)
	err := model.WriteConfig(filepath.Join(noEval, model.ConfigFile), model.Config{Vocab: 64, Dim: 16, Layers: 1, Heads: 2,
		KVHeads: 1, HeadDim: 8, FFN: 32, RopeTheta: 1e4, NormEps: 1e-6, Attention: model.AttentionSoftmax, RInit: model.RInitZero, MaxSeq: 32})
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(noEval, MetricsFile), []byte(`{"step":1,"loss":5,"tokens":10}`+"\n"), 0o644)
	noConfig := filepath.Join(dir, "no-config")
	os.MkdirAll(noConfig, 0o755)
	os.WriteFile(filepath.Join(noConfig, MetricsFile), []byte(`{"step":1,"loss":5}`+"\n"), 0o644)

	r, err := LoadAdaptRun(noEval)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckAdaptRun(r); !errors.Is(err, ErrNoEval) {
		t.Errorf("a run without evaluations: %v, want ErrNoEval", err)
	}
	if _, err := LoadAdaptRun(noConfig); err == nil || !strings.Contains(err.Error(), "no-config") {
		t.Errorf("a run without config.json: %v", err)
	}
	if _, err := FindAdaptRuns([]string{filepath.Join(dir, "missing")}); err == nil {
		t.Error("a missing folder was accepted")
	}
	empty := filepath.Join(dir, "empty")
	os.MkdirAll(empty, 0o755)
	if _, err := FindAdaptRuns([]string{empty}); err == nil || !strings.Contains(err.Error(), "no metrics.jsonl") {
		t.Errorf("a folder without runs: %v", err)
	}
}

func TestAggregate(t *testing.T) {
	tests := []struct {
		name   string
		curves []curve
		want   band
	}{
		{"three seeds", []curve{{[]float64{1, 2}, []float64{1, 4}}, {[]float64{1, 2}, []float64{2, 5}}, {[]float64{1, 2}, []float64{3, 9}}},
			band{x: []float64{1, 2}, mean: []float64{2, 6}, lo: []float64{1, 4}, hi: []float64{3, 9}, n: []int{3, 3}}},
		{"a run cut short", []curve{{[]float64{1, 2}, []float64{1, 4}}, {[]float64{1}, []float64{3}}},
			band{x: []float64{1, 2}, mean: []float64{2, 4}, lo: []float64{1, 4}, hi: []float64{3, 4}, n: []int{2, 1}}},
		{"NaN skipped", []curve{{[]float64{1}, []float64{math.NaN()}}, {[]float64{1}, []float64{2}}},
			band{x: []float64{1}, mean: []float64{2}, lo: []float64{2}, hi: []float64{2}, n: []int{1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := aggregate(tt.curves)
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("aggregate = %+v, want %+v", got, tt.want)
			}
		})
	}
	s := bandSeries("x", band{x: []float64{1, 2}, mean: []float64{2, 6}, lo: []float64{1, 4}, hi: []float64{3, 9}}, plot.Palette[0])
	if fmt.Sprint(s.X, s.Y) != "[1 1 1 1 2 2 2 2] [2 1 3 2 6 4 9 6]" {
		t.Errorf("band series %v %v", s.X, s.Y)
	}
	if m, sd := MeanStd([]float64{1, 2, 3}); m != 2 || sd != 1 {
		t.Errorf("meanStd = %v, %v, want 2, 1", m, sd)
	}
}

func TestAdaptTable(t *testing.T) {
	tests := []struct {
		name     string
		unpaired bool
		want     []string
	}{
		{"paired", false, []string{
			"Pretrained base (base): held-out loss 5.1000 after 400 tokens (4 steps).",
			"| (a) softmax, Muon | 3 | 400 | 4.8200 ± 0.0100 | 4.8200 ± 0.0100 |  |  |",
			"| (b) Parallax, Muon | 3 | 400 | 4.7700 ± 0.0100 | 4.7700 ± 0.0100 | 0.6000 | 6.0 |",
			// AdamW overfits at step 4: the best loss is step 2's.
			"| (a) softmax, AdamW | 3 | 400 | 5.1200 ± 0.0100 | 4.9200 ± 0.0100 |  |  |",
			"| Muon | -0.0500 ± 0.0000 | -0.0500 ± 0.0000 | paired by seed (3 pairs) |",
			"| AdamW | 0.0200 ± 0.0000 | 0.0200 ± 0.0000 | paired by seed (3 pairs) |",
			"| parallax-adamw-s2 | (b) Parallax, AdamW | 4 | 5.1400 | 4.9400 (200) | 0.6000 | 6.0 |",
		}},
		{"unpaired", true, []string{
			"Note: the runs' last evaluations are at different steps (2 to 4; runs cut short?)",
			"| Muon | -0.0500 ± 0.0141 | -0.0500 ± 0.0141 | difference of the means (3 and 3 runs) |",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runsDir, baseDir := writeAdaptTestStudy(t, t.TempDir(), tt.unpaired)
			runs := loadAdaptTestRuns(t, runsDir)
			if tt.unpaired { // and one AdamW run cut short after its first evaluation
				i := slices.IndexFunc(runs, func(r AdaptRun) bool { return r.Name == "softmax-adamw-run3" })
				runs[i].Records = runs[i].Records[:3]
			}
			base, err := LoadAdaptRun(baseDir)
			if err != nil {
				t.Fatal(err)
			}
			table := AdaptTable(runs, &base)
			for _, w := range tt.want {
				if !strings.Contains(table, w) {
					t.Errorf("the table lacks %q:\n%s", w, table)
				}
			}
		})
	}
}

func TestAdaptCharts(t *testing.T) {
	runsDir, baseDir := writeAdaptTestStudy(t, t.TempDir(), false)
	runs := loadAdaptTestRuns(t, runsDir)
	base, _ := LoadAdaptRun(baseDir)
	loss := AdaptLossCharts(runs, &base)
	if len(loss) != 2 || len(loss[0].Series) != 4 || len(loss[1].Series) != 3 {
		t.Fatalf("loss charts: %d panels", len(loss))
	}
	// Every arm starts at the base's final held-out loss, at 0 tokens.
	for _, s := range loss[0].Series {
		if s.X[0] != 0 || s.Y[0] != adaptTestLoss(model.AttentionSoftmax, OptAdamW, 0, 4) {
			t.Errorf("%s starts at (%v, %v), not at the base", s.Name, s.X[0], s.Y[0])
		}
	}
	// The paired difference under Muon is -0.05 at every evaluation, with
	// no spread.
	d := loss[1].Series[0]
	for i, y := range d.Y {
		if d.X[i] > 0 && math.Abs(y+0.05) > 1e-9 {
			t.Errorf("Muon difference at %v tokens: %v, want -0.05", d.X[i], y)
		}
	}
	cor, sr := AdaptCORCharts(runs), AdaptSRankCharts(runs)
	if len(cor) != 2 || len(cor[0].Series) != 2 || len(sr) != 2 || len(sr[1].Series) != 2 {
		t.Fatalf("COR charts %d, stable rank charts %d", len(cor), len(sr))
	}
	if got := sr[0].Series[1].Y; fmt.Sprint(got) != "[4 8]" {
		t.Errorf("layer 1 stable rank %v, want [4 8]", got)
	}
	var buf bytes.Buffer
	if err := plot.Encode(&buf, 800, 400*len(loss), loss...); err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(&buf); err != nil {
		t.Errorf("the loss chart is not a PNG: %v", err)
	}
	// Softmax runs only: no COR or stable rank to draw.
	var soft []AdaptRun
	for _, r := range runs {
		if r.Attention == model.AttentionSoftmax {
			soft = append(soft, r)
		}
	}
	if len(AdaptCORCharts(soft)) != 0 || len(AdaptLossCharts(soft, nil)) != 1 {
		t.Error("softmax-only runs drew COR charts or a difference panel")
	}
}
