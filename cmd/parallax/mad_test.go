package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMAD runs `parallax mad` end to end at a tiny scale, runs it again
// (everything resumed), and checks its usage errors.
func TestMAD(t *testing.T) {
	out := filepath.Join(t.TempDir(), "mad")
	args := []string{"mad", "--quick", "--tasks", "compress,memorize", "--mixers", "softmax,parallax",
		"--optimizer", "adamw,muon", "--lrs", "3e-3", "--epochs", "1", "--batch", "4", "--max-train", "8", "--max-test", "4",
		"--dim", "16", "--heads", "2", "--device", "cpu", "--parallel", "2", "--out", out}
	code, stdout, stderr := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	for _, want := range []string{"8 runs (0 already", "done compression", "macro accuracy", "parallax/muon", "average", "results.png"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	for _, f := range []string{"results.json", "results.md", "results.png"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	code, stdout, _ = runCLI(t, args...)
	if code != 0 || !strings.Contains(stdout, "8 runs (8 already") || strings.Contains(stdout, "done compression") {
		t.Errorf("rerun: exit %d, output:\n%s", code, stdout)
	}

	for _, c := range []struct{ args, want string }{
		{"--tasks nope", "--tasks"},
		{"--mixers mamba", "unknown mixer"},
		{"--optimizer sgd", "not adamw or muon"},
		{"--lrs x", "not a number"},
		{"--lrs -1", "--lrs -1: want a finite number > 0"},
		{"--settings some", "want baseline, hard or all"},
		{"--settings", "flag needs an argument"},
		{"--max-seq-len -1", "--max-seq-len"},
		{"--max-seq-len x", "--max-seq-len"},
		{"--max-seq-len 8 --tasks compress,memorize", "leaves no setting"},
		{"--parallel 0", "--parallel"},
		{"extra", "unexpected argument"},
	} {
		code, stdout, stderr := runCLI(t, append([]string{"mad", "--out", out}, strings.Fields(c.args)...)...)
		if code != 2 || !strings.Contains(stdout+stderr, c.want) {
			t.Errorf("mad %s: exit %d, want 2 and %q\n%s%s", c.args, code, c.want, stdout, stderr)
		}
	}
	code, stdout, _ = runCLI(t, "mad", "--help")
	if code != 0 || !strings.Contains(stdout, "--quick") {
		t.Errorf("help: exit %d\n%s", code, stdout)
	}
}

// TestMADHardSeeds runs `parallax mad --settings hard --max-seq-len` at a
// tiny scale under seeds 1 and 2 into one --out: the long setting is
// dropped with a note, each seed keeps its own runs, and the second
// invocation reports the mean and spread over both seeds.
func TestMADHardSeeds(t *testing.T) {
	out := filepath.Join(t.TempDir(), "mad")
	args := []string{"mad", "--quick", "--settings", "hard", "--max-seq-len", "32", "--tasks", "compress",
		"--mixers", "softmax", "--lrs", "3e-3", "--epochs", "1", "--batch", "4", "--max-train", "8", "--max-test", "4",
		"--dim", "16", "--heads", "2", "--device", "cpu", "--out", out}
	for _, c := range []struct {
		seed string
		want []string
	}{
		// compression's hard set: baseline, vocab_size=128, seq_len=256
		// (dropped) and num_train_examples=800 (the baseline at --max-train 8).
		{"1", []string{"drops compression seq_len=256", "2 runs (0 already", "seed 1)"}},
		{"2", []string{"2 runs (0 already", "seed 2)", "over seeds 1, 2", "+-"}},
		{"2", []string{"2 runs (2 already", "over seeds 1, 2"}},
	} {
		code, stdout, stderr := runCLI(t, append(args, "--seed", c.seed)...)
		if code != 0 {
			t.Fatalf("seed %s: exit %d\nstdout: %s\nstderr: %s", c.seed, code, stdout, stderr)
		}
		for _, want := range c.want {
			if !strings.Contains(stdout, want) {
				t.Errorf("seed %s: output lacks %q:\n%s", c.seed, want, stdout)
			}
		}
	}
	files, _ := filepath.Glob(filepath.Join(out, "runs", "*.json"))
	if len(files) != 4 {
		t.Errorf("%d run files for 2 seeds x 2 settings, want 4: %v", len(files), files)
	}
}
