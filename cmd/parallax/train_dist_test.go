package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The ranks that --nproc-per-node starts run this test binary; with
// PARALLAX_CLI_TEST_MAIN=1 it acts as the parallax command.
func init() {
	if os.Getenv("PARALLAX_CLI_TEST_MAIN") == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
}

func TestRankDevice(t *testing.T) {
	count := func(n int) func(string) int {
		return func(b string) int {
			if b == "cuda" {
				return n
			}
			return 0
		}
	}
	for _, tc := range []struct {
		device string
		local  int
		force  bool
		gpus   int
		want   string
		err    string
	}{
		{"cpu", 1, true, 2, "cpu", ""},
		{"auto", 1, false, 0, "auto", ""},
		{"auto", 1, true, 2, "cuda:1", ""},
		{"cuda", 3, false, 8, "cuda:3", ""},
		{"cuda:5", 3, false, 8, "cuda:5", ""},
		{"cuda:5", 3, true, 8, "cuda:3", ""},
		{"cuda", 3, false, 1, "cuda:0", ""}, // one GPU per task
		{"cuda", 3, true, 2, "", "has 2 device(s)"},
		{"vulkan", 0, true, 2, "", "no device"},
	} {
		got, err := rankDevice(tc.device, tc.local, tc.force, count(tc.gpus))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%+v: got %q, %v; want an error with %q", tc, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%+v: got %q, %v; want %q", tc, got, err, tc.want)
		}
	}
}

// TestTrainNprocPerNode runs `parallax train --nproc-per-node 2` on the
// CPU: two processes, a TCP rendezvous, one consolidated checkpoint that a
// single process resumes; and a job that cannot start fails as a whole.
func TestTrainNprocPerNode(t *testing.T) {
	t.Setenv("PARALLAX_CLI_TEST_MAIN", "1")
	dir := t.TempDir()
	cfgPath := writeSmallConfig(t, dir)
	text := strings.Repeat("It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife.\n\n", 60)
	textPath := filepath.Join(dir, "text.txt")
	os.WriteFile(textPath, []byte(text), 0o644)
	out := filepath.Join(dir, "run")
	args := []string{"train", "--nproc-per-node", "2", "--device", "cpu", "--config", cfgPath, "--data", textPath, "--vocab", "300",
		"--batch", "4", "--seq", "16", "--eval-every", "2", "--eval-batches", "2", "--out", out}

	code, stdout, stderr := runCLI(t, append(args, "--steps", "3")...)
	if code != 0 || !strings.Contains(stdout, "data parallel: 2 ranks, tcp collectives") || !strings.Contains(stdout, "done: 3 steps") ||
		!strings.Contains(stderr, "starting 2 ranks (cpu, cpu)") {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	for _, f := range []string{"model.safetensors", "optimizer.safetensors", "metrics.jsonl", "curves.png"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("no %s: %v", f, err)
		}
	}
	code, stdout, stderr = runCLI(t, "train", "--out", out, "--resume", "--steps", "4", "--device", "cpu")
	if code != 0 || !strings.Contains(stdout, "done: 4 steps") {
		t.Errorf("resuming in one process: exit %d\n%s\n%s", code, stdout, stderr)
	}

	code, stdout, stderr = runCLI(t, append(args[:len(args)-1], filepath.Join(dir, "bad"), "--batch", "3", "--steps", "2")...)
	if code != 1 || !strings.Contains(stderr, "divisible by the 2 ranks") || !strings.Contains(stderr, "(the first failure; see its output above)") {
		t.Errorf("a batch the ranks cannot split: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	code, _, stderr = runCLI(t, "train", "--nproc-per-node", "2", "--comm", "mpi", "--out", filepath.Join(dir, "x"))
	if code != 2 || !strings.Contains(stderr, `--comm "mpi"`) {
		t.Errorf("--comm mpi: exit %d, %s", code, stderr)
	}
	code, _, stderr = runCLI(t, "train", "--nproc-per-node", "2", "--bucket-mb", "-1", "--out", filepath.Join(dir, "x"))
	if code != 2 || !strings.Contains(stderr, "--bucket-mb -1") {
		t.Errorf("--bucket-mb -1: exit %d, %s", code, stderr)
	}
}
