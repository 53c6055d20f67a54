package main

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runReportCLI runs parallax report as the command line does: its exit code
// and output.
func runReportCLI(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = report(&errOut, "parallax report", runReport(args, &out, &errOut))
	return code, out.String(), errOut.String()
}

// TestReportAdapt runs the adaptation study of scripts/device-adapt.sh in
// miniature on the CPU (a softmax base pretrained for two steps, then each
// arm continued from it for two steps, one seed) and summarises it.
func TestReportAdapt(t *testing.T) {
	dir := t.TempDir()
	cfg := writeSmallConfig(t, dir)
	text := filepath.Join(dir, "text.txt")
	os.WriteFile(text, []byte(strings.Repeat("It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife.\n\n", 80)), 0o644)
	common := []string{"--device", "cpu", "--batch", "2", "--seq", "16", "--steps", "2", "--eval-every", "1",
		"--eval-batches", "1", "--log-every", "1", "--save-every", "-1"}
	base := filepath.Join(dir, "base")
	if code, o, e := runCLI(t, append([]string{"train", "--config", cfg, "--attention", "softmax", "--optimizer", "adamw",
		"--data", text, "--vocab", "300", "--out", base}, common...)...); code != 0 {
		t.Fatalf("pretrain: exit %d\n%s%s", code, o, e)
	}
	runs := filepath.Join(dir, "runs")
	for _, opt := range []string{"muon", "adamw"} {
		for _, att := range []string{"softmax", "parallax"} {
			args := append([]string{"train", "--init", base, "--data", filepath.Join(base, "data"), "--optimizer", opt,
				"--seed", "1", "--out", filepath.Join(runs, att+"-"+opt+"-s1")}, common...)
			if att == "parallax" {
				args = append(args, "--convert-parallax")
			}
			if code, o, e := runCLI(t, args...); code != 0 {
				t.Fatalf("%s %s: exit %d\n%s%s", att, opt, code, o, e)
			}
		}
	}
	out := filepath.Join(dir, "report")
	code, stdout, stderr := runReportCLI("adapt", "--base", base, "--out", out, runs)
	if code != 0 {
		t.Fatalf("report adapt: exit %d\n%s%s", code, stdout, stderr)
	}
	for _, want := range []string{"Pretrained base (base)", "| (a) softmax, Muon | 1 |", "| (b) Parallax, Muon | 1 |",
		"| (a) softmax, AdamW | 1 |", "| (b) Parallax, AdamW | 1 |", "| Muon |", "| AdamW |", "paired by seed (1 pair)",
		"| parallax-muon-s1 | (b) Parallax, Muon | 2 |"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the report lacks %q:\n%s", want, stdout)
		}
	}
	md, err := os.ReadFile(filepath.Join(out, adaptTableFile))
	if err != nil || string(md) != stdout {
		t.Errorf("%s is not the printed table (%v)", adaptTableFile, err)
	}
	for _, name := range []string{adaptLossFile, adaptCORFile, adaptSRankFile} {
		f, err := os.Open(filepath.Join(out, name))
		if err != nil {
			t.Error(err)
			continue
		}
		if _, err := png.Decode(f); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		f.Close()
	}
	t.Logf("report:\n%s", stdout)
}

func TestReportAdaptErrors(t *testing.T) {
	dir := t.TempDir()
	noEval := filepath.Join(dir, "runs", "softmax-adamw-s1")
	os.MkdirAll(noEval, 0o755)
	writeSmallConfig(t, noEval)
	os.WriteFile(filepath.Join(noEval, "metrics.jsonl"), []byte(`{"step":1,"loss":5,"tokens":32}`+"\n"), 0o644)
	good := filepath.Join(dir, "more", "softmax-muon-s1")
	os.MkdirAll(good, 0o755)
	writeSmallConfig(t, good)
	os.WriteFile(filepath.Join(good, "metrics.jsonl"), []byte(`{"step":1,"loss":5,"lr_adamw":0.003,"tokens":32}`+"\n"+
		`{"step":1,"eval":true,"val_loss":4.5}`+"\n"), 0o644)
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no subcommand", nil, 2, "want a subcommand: adapt, study or study-control"},
		{"unknown subcommand", []string{"frobnicate"}, 2, `unknown subcommand "frobnicate"`},
		{"help", []string{"--help"}, 0, ""},
		{"adapt help", []string{"adapt", "--help"}, 0, ""},
		{"no runs", []string{"adapt"}, 2, "want the run folders"},
		{"bad flag", []string{"adapt", "--nope", dir}, 2, "unknown flag: --nope"},
		{"missing folder", []string{"adapt", filepath.Join(dir, "missing")}, 1, "missing"},
		{"no evaluation", []string{"adapt", "--out", filepath.Join(dir, "out"), filepath.Join(dir, "runs")}, 1, "none of the 1 runs has a held-out evaluation"},
		{"bad base", []string{"adapt", "--base", filepath.Join(dir, "missing"), good}, 1, "--base: run"},
		{"base without evaluation", []string{"adapt", "--base", noEval, good}, 1, "--base: run softmax-adamw-s1: no held-out evaluation"},
		{"one left out", []string{"adapt", "--out", filepath.Join(dir, "partial"), noEval, good}, 0, "softmax-adamw-s1: no held-out evaluation in its metrics (train with --eval-every); left out"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runReportCLI(tt.args...)
			if code != tt.code || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q (stdout %q)", code, stderr, tt.code, tt.want, stdout)
			}
		})
	}
	code, stdout, _ := runReportCLI("adapt", "--help")
	if code != 0 || !strings.Contains(stdout, "adapt-loss.png") {
		t.Errorf("help: exit %d\n%s", code, stdout)
	}
	if _, err := os.Stat(filepath.Join(dir, "out")); err == nil {
		t.Error("a failed report wrote its folder")
	}
}
