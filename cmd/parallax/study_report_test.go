package main

import (
	"encoding/json"
	"fmt"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/model"
	"github.com/parallax-engine/parallax/train"
)

// makeStudy trains a miniature study grid on the CPU through parallax
// train, laid out as scripts/study.sh lays it out: OUT/runs/NAME with a
// study-run.json, and OUT/plan.txt. Softmax and Parallax under Muon and
// AdamW, two seeds each, and the probe-gate runs with one seed; then a
// copy of one run cut short (partial), a folder that never trained
// (missing) and a planned run without a folder (unstarted).
func makeStudy(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	mc, err := model.PresetConfig("tiny")
	if err != nil {
		t.Fatal(err)
	}
	mc.Dim, mc.Layers, mc.Heads, mc.KVHeads, mc.HeadDim, mc.FFN = 32, 2, 2, 1, 16, 64
	cfg := filepath.Join(dir, "config.json")
	if err := model.WriteConfig(cfg, mc); err != nil {
		t.Fatal(err)
	}
	text := filepath.Join(dir, "text.txt")
	os.WriteFile(text, []byte(strings.Repeat("It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife.\n\n", 80)), 0o644)
	out := filepath.Join(dir, "study")
	runs := filepath.Join(out, "runs")
	var plan []string
	const steps = 3
	train1 := func(name, att, opt string, seed int, gate bool) {
		plan = append(plan, name)
		rd := filepath.Join(runs, name)
		os.MkdirAll(rd, 0o755)
		info := fmt.Sprintf(`{"preset":"micro","variant":%q,"optimizer":%q,"seed":%d,"steps":%d}`, att, opt, seed, steps)
		os.WriteFile(filepath.Join(rd, train.StudyRunFile), []byte(info), 0o644)
		args := []string{"train", "--config", cfg, "--attention", att, "--optimizer", opt, "--seed", fmt.Sprint(seed),
			"--data", text, "--vocab", "300", "--device", "cpu", "--batch", "2", "--seq", "16", "--steps", fmt.Sprint(steps),
			"--eval-every", "2", "--eval-batches", "1", "--log-every", "1", "--save-every", "-1", "--out", rd}
		if gate {
			args = append(args, "--probe-gate")
		}
		if code, o, e := runCLI(t, args...); code != 0 {
			t.Fatalf("train %s: exit %d\n%s%s", name, code, o, e)
		}
	}
	for _, opt := range []string{"muon", "adamw"} {
		for _, att := range []string{"softmax", "parallax"} {
			for seed := 1; seed <= 2; seed++ {
				train1(fmt.Sprintf("micro-%s-%s-s%d", att, opt, seed), att, opt, seed, false)
			}
		}
		train1(fmt.Sprintf("micro-parallax-gate-%s-s1", opt), "parallax", opt, 1, true)
	}
	// Partial: a copy of a finished run whose metrics stop at step 1 (an
	// interrupted run), missing: a folder the script made but train never
	// filled, unstarted: planned only.
	src, part := filepath.Join(runs, "micro-softmax-muon-s1"), filepath.Join(runs, "micro-softmax-muon-s3")
	os.MkdirAll(part, 0o755)
	for _, f := range []string{model.ConfigFile, train.StudyRunFile} {
		b, _ := os.ReadFile(filepath.Join(src, f))
		os.WriteFile(filepath.Join(part, f), []byte(strings.Replace(string(b), `"seed":1`, `"seed":3`, 1)), 0o644)
	}
	recs, _ := train.ReadMetrics(filepath.Join(src, train.MetricsFile))
	var lines []string
	for _, r := range recs {
		if r.Step <= 2 {
			b, _ := json.Marshal(r)
			lines = append(lines, string(b))
		}
	}
	os.WriteFile(filepath.Join(part, train.MetricsFile), []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	missing := filepath.Join(runs, "micro-parallax-muon-s3")
	os.MkdirAll(missing, 0o755)
	os.WriteFile(filepath.Join(missing, train.StudyRunFile), []byte(`{"preset":"micro","optimizer":"muon","seed":3,"steps":3}`), 0o644)
	plan = append(plan, "micro-softmax-muon-s3", "micro-parallax-muon-s3", "micro-parallax-adamw-s3")
	os.WriteFile(filepath.Join(out, train.StudyPlanFile), []byte(strings.Join(plan, "\n")+"\n"), 0o644)
	return out
}

func TestReportStudy(t *testing.T) {
	study := makeStudy(t)
	code, stdout, stderr := runReportCLI("study", "--dir", study)
	if code != 0 {
		t.Fatalf("report study: exit %d\n%s%s", code, stdout, stderr)
	}
	outDir := filepath.Join(study, "report")
	var rep train.StudyReport
	b, err := os.ReadFile(filepath.Join(outDir, studyJSONFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("study.json: %v", err)
	}
	wantCounts := map[string]int{"finished": 10, "partial": 1, "missing": 1, "unstarted": 1}
	for k, v := range wantCounts {
		if rep.Counts[k] != v {
			t.Errorf("counts[%s] = %d, want %d (%v)", k, rep.Counts[k], v, rep.Counts)
		}
	}
	// Every cell's mean and std against the runs' own metrics.
	finals := map[string]float64{}
	for _, r := range rep.Runs {
		if r.Status != train.StudyFinished {
			continue
		}
		recs, err := train.ReadMetrics(filepath.Join(study, "runs", r.Name, train.MetricsFile))
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range recs {
			if rec.Eval && rec.ValLoss != nil {
				finals[r.Name] = *rec.ValLoss
			}
		}
	}
	cells := map[string]int{}
	for _, g := range rep.Groups {
		cells[g.Key.Config+" "+g.Key.Optimizer] = len(g.Runs)
		var v []float64
		for _, name := range g.Runs {
			v = append(v, finals[name])
		}
		mean, ss := 0.0, 0.0
		for _, x := range v {
			mean += x / float64(len(v))
		}
		for _, x := range v {
			ss += (x - mean) * (x - mean)
		}
		std := 0.0
		if len(v) > 1 {
			std = math.Sqrt(ss / float64(len(v)-1))
		}
		if math.Abs(g.Mean-mean) > 1e-12 || math.Abs(g.Std-std) > 1e-12 {
			t.Errorf("%v: mean ± std %v ± %v, want %v ± %v", g.Key, g.Mean, g.Std, mean, std)
		}
		parallax := strings.HasPrefix(g.Key.Config, "parallax")
		if parallax != (len(g.COR) == 2 && len(g.SRankR) == 2 && len(g.SRankRK) == 2 && len(g.SRankRKHead) == 2) {
			t.Errorf("%v: COR %v, stable ranks %v %v %v", g.Key, g.COR, g.SRankR, g.SRankRK, g.SRankRKHead)
		}
		if (g.Key.Config == "parallax+gate") != (len(g.Gate) == 2) {
			t.Errorf("%v: gate %v", g.Key, g.Gate)
		}
		for _, v := range append(append([]float64{}, g.SRankR...), g.SRankRK...) {
			if !(v >= 1 && v <= 32) {
				t.Errorf("%v: stable rank %v out of [1, 32]", g.Key, v)
			}
		}
	}
	for _, c := range []string{"softmax muon", "parallax muon", "softmax adamw", "parallax adamw"} {
		if cells[c] != 2 {
			t.Errorf("cell %s has %d runs, want 2 (%v)", c, cells[c], cells)
		}
	}
	if cells["parallax+gate muon"] != 1 || cells["parallax+gate adamw"] != 1 {
		t.Errorf("gate cells: %v", cells)
	}
	if len(rep.Comparisons) != 8 {
		t.Errorf("%d comparisons, want 8 (parallax and parallax+gate against softmax, per optimizer, on the final and the best loss): %+v",
			len(rep.Comparisons), rep.Comparisons)
	}
	metrics := map[string]int{}
	for _, c := range rep.Comparisons {
		metrics[c.Metric]++
	}
	if metrics[train.StudyFinalLoss] != 4 || metrics[train.StudyBestLoss] != 4 {
		t.Errorf("comparisons per metric: %v", metrics)
	}
	for _, r := range rep.Runs {
		if r.Status == train.StudyFinished && (r.BestLoss == nil || *r.BestLoss > *r.FinalLoss) {
			t.Errorf("run %s: best held-out loss %v above the final %v", r.Name, r.BestLoss, *r.FinalLoss)
		}
	}
	for _, c := range rep.Comparisons {
		switch {
		case c.A == "parallax" && (c.SE == nil || c.NA != 2 || c.NB != 2 || c.Verdict == ""):
			t.Errorf("parallax comparison %+v", c)
		case c.A == "parallax+gate" && !strings.HasPrefix(c.Verdict, "cannot tell"):
			t.Errorf("gate comparison with one seed: %+v", c)
		}
	}
	for _, want := range []string{"10 finished, 1 partial, 1 missing, 1 unstarted", "| micro | softmax | Muon | ",
		"| micro | parallax | AdamW |", "parallax − softmax", "pooled SE", "## COR per layer", "## Probe gate per layer",
		"## Stable rank of W_R per layer", "## Stable rank of W_R^T W_K per layer",
		"| micro-softmax-muon-s3 | PARTIAL |", "stopped at step 2 of 3",
		"| micro-parallax-muon-s3 | MISSING |", "no config.json",
		"| micro-parallax-adamw-s3 | UNSTARTED |"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	md, err := os.ReadFile(filepath.Join(outDir, studyTableFile))
	if err != nil || string(md) != stdout {
		t.Errorf("%s is not the printed table (%v)", studyTableFile, err)
	}
	for _, name := range []string{studyLossFile, studyCORFile} {
		f, err := os.Open(filepath.Join(outDir, name))
		if err != nil {
			t.Error(err)
			continue
		}
		if _, err := png.Decode(f); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		f.Close()
	}
	if _, err := os.Stat(filepath.Join(outDir, studyLRFile)); err == nil {
		t.Errorf("%s written without a sweep", studyLRFile)
	}
	// --json prints study.json.
	code, stdout, stderr = runReportCLI("study", "--dir", study, "--out", filepath.Join(t.TempDir(), "r"), "--json")
	if code != 0 || !json.Valid([]byte(stdout)) || !strings.Contains(stdout, `"exceeds_seed_noise"`) {
		t.Errorf("--json: exit %d, %s\n%.300s", code, stderr, stdout)
	}
	// Without their weights, the Parallax runs report the stable ranks
	// kept in study-ranks.json.
	var before []train.StudyRun
	for _, r := range rep.Runs {
		if len(r.Ranks) > 0 {
			before = append(before, r)
			if err := os.Remove(filepath.Join(study, "runs", r.Name, model.WeightsFile)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(before) == 0 {
		t.Fatal("no run with stable ranks")
	}
	again, err := train.LoadStudy(study)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range before {
		i := slices.IndexFunc(again.Runs, func(r train.StudyRun) bool { return r.Name == b.Name })
		if i < 0 || !reflect.DeepEqual(again.Runs[i].Ranks, b.Ranks) || again.Runs[i].Problem != "" {
			t.Errorf("run %s without weights: ranks %+v (%q), want %+v", b.Name, again.Runs[i].Ranks, again.Runs[i].Problem, b.Ranks)
		}
	}
	t.Logf("report:\n%s", md)
}

func TestReportStudyErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	os.MkdirAll(filepath.Join(empty, "notes"), 0o755)
	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("x"), 0o644)
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no dir", []string{"study"}, 2, "want --dir"},
		{"bad flag", []string{"study", "--dir", dir, "--nope"}, 2, "unknown flag: --nope"},
		{"stray argument", []string{"study", "--dir", dir, "extra"}, 2, "extra"},
		{"missing dir", []string{"study", "--dir", filepath.Join(dir, "missing")}, 1, "no such file"},
		{"dir is a file", []string{"study", "--dir", file}, 1, "is not a folder"},
		{"no runs", []string{"study", "--dir", empty}, 1, "holds no run folders"},
		{"help", []string{"study", "--help"}, 0, ""},
		{"control: no args", []string{"study-control"}, 2, "want a preset and a control kind"},
		{"control: bad preset", []string{"study-control", "nope", "heads"}, 2, "unknown model preset"},
		{"control: bad kind", []string{"study-control", "small", "wider"}, 2, `control "wider"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runReportCLI(tt.args...)
			if code != tt.code || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q (stdout %.200q)", code, stderr, tt.code, tt.want, stdout)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(empty, "report")); err == nil {
		t.Error("a failed report wrote its folder")
	}
	code, stdout, _ := runReportCLI("study-control", "small", "heads")
	var c model.Config
	if code != 0 || json.Unmarshal([]byte(stdout), &c) != nil || c.Attention != model.AttentionSoftmax || c.Heads != 12 {
		t.Errorf("study-control small heads: exit %d\n%s", code, stdout)
	}
}
