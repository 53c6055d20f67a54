package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/parallax-engine/parallax/train"
)

// trainTemplate trains a two-step run (one layer, 300 tokens) into
// dir/template and returns its folder and the text file it trained on.
func trainTemplate(t *testing.T, dir string, extra ...string) (run, text string) {
	t.Helper()
	cfgPath := writeSmallConfig(t, dir)
	text = filepath.Join(dir, "text.txt")
	os.WriteFile(text, []byte(strings.Repeat("It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife.\n\n", 60)), 0o644)
	run = filepath.Join(dir, "template")
	args := append([]string{"train", "--config", cfgPath, "--data", text, "--vocab", "300", "--device", "cpu",
		"--batch", "2", "--seq", "16", "--steps", "2", "--eval-every", "-1", "--out", run}, extra...)
	if code, stdout, stderr := runCLI(t, args...); code != 0 {
		t.Fatalf("train: exit %d\n%s%s", code, stdout, stderr)
	}
	return run, text
}

// copyTree copies the regular files and directories under src to dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
}

// TestOutputDestinations points every kind of output (op results, example
// inputs, logits dumps, tokenizers, a training run's files) at a symbolic
// link, which must be written through and kept, and at things that are not
// regular files (a named pipe, a directory, a link to /dev/null), which
// must be refused with status 1 and left as they were.
func TestOutputDestinations(t *testing.T) {
	dir := t.TempDir()
	run, text := trainTemplate(t, dir)
	in := filepath.Join(dir, "in.safetensors")
	if code, _, stderr := runCLI(t, "op", "attention", "--example", in, "--example-shape", "1,2,1,8,8"); code != 0 {
		t.Fatal(stderr)
	}
	writers := []struct {
		name string
		// args returns the command line writing to out, a path in the
		// case's folder w (where it may first copy what it needs).
		args func(t *testing.T, w, out string) []string
		out  string // the output's path in w
	}{
		{"op attention --out", func(t *testing.T, w, out string) []string {
			return []string{"op", "attention", "--in", in, "--out", out, "--device", "cpu"}
		}, "o.safetensors"},
		{"op attention --example", func(t *testing.T, w, out string) []string {
			return []string{"op", "attention", "--example", out}
		}, "x.safetensors"},
		{"eval --dump-logits", func(t *testing.T, w, out string) []string {
			return []string{"eval", "--model", run, "--tokens", "5,6,7", "--dump-logits", out, "--device", "cpu"}
		}, "logits.safetensors"},
		{"tokenizer train", func(t *testing.T, w, out string) []string {
			return []string{"tokenizer", "train", "--data", text, "--vocab", "280", "--out", filepath.Dir(out)}
		}, "tok/tokenizer.json"},
		{"train --resume (curves.png)", func(t *testing.T, w, out string) []string {
			return []string{"train", "--out", filepath.Dir(out), "--resume", "--steps", "3", "--device", "cpu"}
		}, "run/curves.png"},
		{"train --resume (metrics.jsonl)", func(t *testing.T, w, out string) []string {
			return []string{"train", "--out", filepath.Dir(out), "--resume", "--steps", "3", "--device", "cpu"}
		}, "run/metrics.jsonl"},
	}
	kinds := []struct {
		name    string
		setup   func(t *testing.T, w, out string) // makes the destination
		wantErr string                            // "" for success
		check   func(t *testing.T, w, out string)
	}{
		{"symlink to a file", func(t *testing.T, w, out string) {
			real := filepath.Join(w, "elsewhere")
			if b, err := os.ReadFile(out); err == nil {
				os.WriteFile(real, b, 0o644) // the run's own file, moved behind the link
			} else {
				os.WriteFile(real, nil, 0o644)
			}
			os.Remove(out)
			os.Symlink(real, out)
		}, "", func(t *testing.T, w, out string) {
			fi, err := os.Stat(filepath.Join(w, "elsewhere"))
			if dest, lerr := os.Readlink(out); lerr != nil || dest != filepath.Join(w, "elsewhere") {
				t.Errorf("the link was replaced: %v", lerr)
			} else if err != nil || fi.Size() == 0 {
				t.Errorf("nothing was written through the link: %v", err)
			}
		}},
		{"named pipe", func(t *testing.T, w, out string) {
			os.Remove(out)
			if err := syscall.Mkfifo(out, 0o644); err != nil {
				t.Skipf("mkfifo: %v", err)
			}
		}, "is a named pipe (FIFO), not a regular file", func(t *testing.T, w, out string) {
			if fi, err := os.Lstat(out); err != nil || fi.Mode().Type() != fs.ModeNamedPipe {
				t.Errorf("the pipe was replaced: %v", err)
			}
		}},
		{"directory", func(t *testing.T, w, out string) {
			os.Remove(out)
			os.Mkdir(out, 0o755)
		}, "is a directory, not a regular file", func(t *testing.T, w, out string) {
			if fi, err := os.Lstat(out); err != nil || !fi.IsDir() {
				t.Errorf("the directory was replaced: %v", err)
			}
		}},
		{"symlink to /dev/null", func(t *testing.T, w, out string) {
			os.Remove(out)
			os.Symlink(os.DevNull, out)
		}, "links to /dev/null, which is a character device", func(t *testing.T, w, out string) {
			if dest, err := os.Readlink(out); err != nil || dest != os.DevNull {
				t.Errorf("the link was replaced: %v", err)
			}
			if fi, err := os.Stat(os.DevNull); err != nil || fi.Mode()&fs.ModeCharDevice == 0 {
				t.Fatalf("/dev/null is no longer a device: %v", err)
			}
		}},
	}
	for _, wr := range writers {
		for _, k := range kinds {
			t.Run(wr.name+"/"+k.name, func(t *testing.T) {
				w := t.TempDir()
				out := filepath.Join(w, wr.out)
				os.MkdirAll(filepath.Dir(out), 0o755)
				if strings.HasPrefix(wr.out, "run/") {
					copyTree(t, run, filepath.Dir(out))
				}
				k.setup(t, w, out)
				code, stdout, stderr := runCLI(t, wr.args(t, w, out)...)
				switch {
				case k.wantErr == "" && code != 0:
					t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
				case k.wantErr != "" && (code != 1 || !strings.Contains(stderr, k.wantErr)):
					t.Fatalf("exit %d (want 1), stderr lacks %q\n%s%s", code, k.wantErr, stdout, stderr)
				}
				k.check(t, w, out)
			})
		}
	}
}

// TestTrainFolders runs the train command on folders in the states a
// killed, failed or finished run leaves, and checks what it says and does.
func TestTrainFolders(t *testing.T) {
	dir := t.TempDir()
	template, text := trainTemplate(t, dir, "--log-every", "1")
	cfgPath := filepath.Join(dir, "config.json")
	fresh := func(out string, extra ...string) []string {
		return append([]string{"train", "--config", cfgPath, "--data", text, "--vocab", "300", "--device", "cpu",
			"--batch", "2", "--seq", "16", "--steps", "2", "--eval-every", "-1", "--out", out}, extra...)
	}
	// killed leaves what a run killed before its first checkpoint leaves.
	killed := func(t *testing.T, out string) {
		copyTree(t, template, out)
		for _, f := range []string{train.ManifestFile, train.OptimizerFile, "model.safetensors", "config.json", train.PlotFile} {
			os.Remove(filepath.Join(out, f))
		}
	}
	steps := func(t *testing.T, out string) []int {
		recs, err := train.ReadMetrics(filepath.Join(out, train.MetricsFile))
		if err != nil {
			t.Fatal(err)
		}
		var s []int
		for _, r := range recs {
			if !r.Eval {
				s = append(s, r.Step)
			}
		}
		return s
	}
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T, out string)
		args    func(out string) []string
		code    int
		says    string
		saysNot string
		check   func(t *testing.T, out string)
	}{
		{"resume a finished run", func(t *testing.T, out string) { copyTree(t, template, out) },
			func(out string) []string { return []string{"train", "--out", out, "--resume", "--device", "cpu"} },
			0, "is already finished (step 2 of 2)", "NaN", nil},
		{"resume keeps --log-every", func(t *testing.T, out string) { copyTree(t, template, out) },
			func(out string) []string {
				return []string{"train", "--out", out, "--resume", "--steps", "4", "--device", "cpu"}
			}, 0, "done: 4 steps", "", func(t *testing.T, out string) {
				if s := steps(t, out); len(s) != 4 || s[2] != 3 {
					t.Errorf("metrics of steps %v, want 1..4 (--log-every 1 kept)", s)
				}
			}},
		{"--force with --resume", func(t *testing.T, out string) { copyTree(t, template, out) },
			func(out string) []string { return []string{"train", "--out", out, "--resume", "--force"} },
			2, "--force starts a fresh run", "", nil},
		{"fresh run on a killed run's folder", killed, func(out string) []string { return fresh(out) },
			1, "holds files of an earlier run (metrics.jsonl, tokenizer.json, data) but no checkpoint to resume; remove them with --force", "", nil},
		{"--force on a killed run's folder", killed, func(out string) []string { return fresh(out, "--force", "--log-every", "1") },
			0, "done: 2 steps", "", func(t *testing.T, out string) {
				if s := steps(t, out); len(s) != 2 || s[0] != 1 || s[1] != 2 {
					t.Errorf("metrics of steps %v, want this run's 1, 2 only", s)
				}
			}},
		{"fresh run on a checkpoint", func(t *testing.T, out string) { copyTree(t, template, out) },
			func(out string) []string { return fresh(out) }, 1, "already holds a checkpoint; continue it with --resume, replace it with --force", "", nil},
		{"failed run removes its folder", func(*testing.T, string) {}, func(out string) []string {
			empty := filepath.Join(dir, "empty.txt")
			os.WriteFile(empty, nil, 0o644)
			return []string{"train", "--config", cfgPath, "--data", empty, "--device", "cpu", "--out", filepath.Join(out, "sub")}
		}, 1, "empty", "", func(t *testing.T, out string) {
			if _, err := os.Lstat(out); err == nil {
				t.Errorf("the failed run left %s", out)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "run")
			tc.setup(t, out)
			code, stdout, stderr := runCLI(t, tc.args(out)...)
			if code != tc.code || !strings.Contains(stdout+stderr, tc.says) || (tc.saysNot != "" && strings.Contains(stdout+stderr, tc.saysNot)) {
				t.Fatalf("exit %d (want %d); want %q, not %q, in\nstdout: %s\nstderr: %s", code, tc.code, tc.says, tc.saysNot, stdout, stderr)
			}
			if tc.check != nil {
				tc.check(t, out)
			}
		})
	}
}
