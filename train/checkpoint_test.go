package train

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/model"
)

// quickSetup is testSetup with a smaller corpus, for tests that run many
// short trainings.
func quickSetup(t *testing.T) Config {
	t.Helper()
	cfg := testSetup(t, model.AttentionParallax, OptMuon)
	for name, n := range map[string]int{"a.txt": 30_000, "b.txt": 6_000} {
		p := filepath.Join(cfg.Data, name)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(p, b[:n], 0o644)
	}
	cfg.Vocab, cfg.Batch, cfg.Seq, cfg.EvalEvery, cfg.EvalBatches = 280, 4, 16, -1, 2
	return cfg
}

// copyDir copies the regular files and directories under src to dst.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
}

// TestSaveKilledAtEachPoint stops the checkpoint save of step 2 at each of
// its points, as a kill would, and resumes: a save stopped before its
// staged state was complete must fall back to step 1's checkpoint, one
// stopped after it must be finished, and either way the run must end with
// exactly the parameters of a run never interrupted. The last cases stage
// the folder as an earlier version's save (renames without a manifest)
// left it when killed.
func TestSaveKilledAtEachPoint(t *testing.T) {
	const steps = 3
	cfg := quickSetup(t)
	cfg.Steps, cfg.SaveEvery, cfg.LogEvery = steps, 1, 1

	straight := cfg
	straight.Out = cfg.Out + "-straight"
	if _, err := Run(context.Background(), straight); err != nil {
		t.Fatal(err)
	}
	// The base: interrupted after step 1, its checkpoint saved.
	base := cfg
	base.Out = cfg.Out + "-base"
	ctx, cancel := context.WithCancel(context.Background())
	base.OnStep = func(r Record) {
		if r.Step == 1 {
			cancel()
		}
	}
	if res, err := Run(ctx, base); err != nil || res.Step != 1 {
		t.Fatalf("base run: step %d, %v", res.Step, err)
	}
	// mangle turns the state the kill at point 3 left (all staged, nothing
	// moved) into what an earlier version's save left after `moved`
	// renames: no manifest anywhere, files moved one by one.
	earlier := func(moved int) func(t *testing.T, out string) {
		return func(t *testing.T, out string) {
			stage := filepath.Join(out, stageDir)
			os.Remove(filepath.Join(stage, ManifestFile))
			os.Remove(filepath.Join(out, ManifestFile))
			for _, name := range checkpointFiles[:moved] {
				if err := os.Rename(filepath.Join(stage, name), filepath.Join(out, name)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for _, tc := range []struct {
		name     string
		point    int
		mangle   func(t *testing.T, out string)
		resumeAt int
		says     string
	}{
		{"model staged", 1, nil, 1, "removed an unfinished checkpoint save"},
		{"state staged, no manifest", 2, nil, 2, "finished the interrupted checkpoint save of step 2"},
		{"manifest staged", 3, nil, 2, "finished the interrupted checkpoint save of step 2"},
		{"1 rename", 4, nil, 2, "finished the interrupted checkpoint save of step 2"},
		{"2 renames", 5, nil, 2, "finished the interrupted checkpoint save of step 2"},
		{"3 renames", 6, nil, 2, "finished the interrupted checkpoint save of step 2"},
		{"all renamed, stage left", 7, nil, 2, "resumed"},
		{"earlier version, 1 rename", 3, earlier(1), 2, "finished the interrupted checkpoint save of step 2"},
		{"earlier version, 2 renames", 3, earlier(2), 2, "finished the interrupted checkpoint save of step 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "run")
			copyDir(t, base.Out, out)
			killSave = func(point int) bool { return point == tc.point }
			_, err := Run(context.Background(), Config{Out: out, Device: "cpu", Resume: true})
			killSave = nil
			if !errors.Is(err, errKilled) {
				t.Fatalf("the save was not stopped: %v", err)
			}
			if tc.mangle != nil {
				tc.mangle(t, out)
			}
			var log bytes.Buffer
			var first int
			res, err := Run(context.Background(), Config{Out: out, Device: "cpu", Resume: true, Stdout: &log,
				OnStep: func(r Record) { first = cmp.Or(first, r.Step) }})
			if err != nil {
				t.Fatalf("resume after the kill: %v\n%s", err, log.String())
			}
			if first != tc.resumeAt+1 || res.Step != steps || !strings.Contains(log.String(), tc.says) {
				t.Errorf("resumed at step %d (want %d), ended at %d; log lacks %q:\n%s", first-1, tc.resumeAt, res.Step, tc.says, log.String())
			}
			if _, err := os.Lstat(filepath.Join(out, stageDir)); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the stage is left after the resumed run: %v", err)
			}
			if err := verifyCheckpoint(out, steps); err != nil {
				t.Error(err)
			}
			a, b := checkpointParams(t, straight.Out), checkpointParams(t, out)
			for n, va := range a {
				if !bytes.Equal(va, b[n]) {
					t.Errorf("%s differs from the uninterrupted run's", n)
				}
			}
		})
	}
}

// TestFreshRunOutDir: a fresh run refuses an --out holding another run's
// files (a killed run's metrics above all, which it would otherwise append
// to) unless Force, which starts the folder afresh; unrelated files are
// left alone.
func TestFreshRunOutDir(t *testing.T) {
	cfg := quickSetup(t)
	cfg.Steps, cfg.LogEvery = 2, 1
	template := cfg.Out + "-template"
	first := cfg
	first.Out = template
	if _, err := Run(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	keep := func(names ...string) func(t *testing.T, out string) {
		return func(t *testing.T, out string) {
			copyDir(t, template, out)
			es, _ := os.ReadDir(out)
			for _, e := range es {
				if !strings.Contains(" "+strings.Join(names, " ")+" ", " "+e.Name()+" ") {
					os.RemoveAll(filepath.Join(out, e.Name()))
				}
			}
		}
	}
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T, out string)
		force   bool
		wantErr string
	}{
		{"new folder", func(*testing.T, string) {}, false, ""},
		{"unrelated files", func(t *testing.T, out string) {
			os.MkdirAll(out, 0o755)
			os.WriteFile(filepath.Join(out, "notes.txt"), []byte("mine"), 0o644)
		}, false, ""},
		{"killed run's metrics", keep(MetricsFile, TokenizerFile, DataDir), false, "holds files of an earlier run (metrics.jsonl, tokenizer.json, data) but no checkpoint"},
		{"killed run's metrics, force", keep(MetricsFile, TokenizerFile, DataDir), true, ""},
		{"a checkpoint", keep(MetricsFile, TokenizerFile, DataDir, model.WeightsFile, model.ConfigFile, OptimizerFile, ManifestFile), false, "already holds a checkpoint"},
		{"a checkpoint, force", keep(MetricsFile, TokenizerFile, DataDir, model.WeightsFile, model.ConfigFile, OptimizerFile, ManifestFile), true, ""},
		{"an unfinished save", func(t *testing.T, out string) {
			keep(MetricsFile)(t, out)
			os.Mkdir(filepath.Join(out, stageDir), 0o755)
			os.WriteFile(filepath.Join(out, stageDir, model.WeightsFile), []byte("partial"), 0o644)
		}, false, "holds files of an earlier run (.checkpoint.tmp, metrics.jsonl)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := cfg
			run.Out, run.Force = filepath.Join(t.TempDir(), "run"), tc.force
			tc.setup(t, run.Out)
			_, err := Run(context.Background(), run)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			recs, err := ReadMetrics(filepath.Join(run.Out, MetricsFile))
			if err != nil {
				t.Fatal(err)
			}
			var steps []int
			for _, r := range recs {
				steps = append(steps, r.Step)
			}
			if len(steps) != 2 || steps[0] != 1 || steps[1] != 2 {
				t.Errorf("metrics hold steps %v, want this run's [1 2] only", steps)
			}
			if b, err := os.ReadFile(filepath.Join(run.Out, "notes.txt")); tc.name == "unrelated files" && string(b) != "mine" {
				t.Errorf("an unrelated file was touched: %q, %v", b, err)
			}
		})
	}
}

// TestFailedRunLeavesNothing: a run that fails before its first checkpoint
// removes what it created (folders included) and nothing else; one that
// fails after it keeps its resumable folder.
func TestFailedRunLeavesNothing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		nested bool // --out is a new folder two levels down
		break_ func(cfg *Config)
		keeps  []string // what --out holds afterwards (nil: it is gone)
	}{
		{"bad data, new folders", true, func(c *Config) { c.Data = writeEmpty(c.Data) }, nil},
		{"non-finite loss, existing folder", false, func(c *Config) {
			c.Optim = DefaultOptimConfig(OptAdamW)
			c.Optim.AdamW.LR, c.ClipNorm = 1e30, 0
		}, []string{"notes.txt"}},
		{"non-finite loss after a checkpoint", false, func(c *Config) {
			c.Optim = DefaultOptimConfig(OptAdamW)
			c.Optim.AdamW.LR, c.ClipNorm, c.SaveEvery = 1e30, 0, 1
		}, []string{ManifestFile, model.ConfigFile, DataDir, MetricsFile, model.WeightsFile, "notes.txt", OptimizerFile, TokenizerFile}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := quickSetup(t)
			cfg.Steps = 6
			root := filepath.Join(t.TempDir(), "runs")
			cfg.Out = filepath.Join(root, "x")
			if tc.nested {
				cfg.Out = filepath.Join(root, "a", "b")
			} else {
				os.MkdirAll(cfg.Out, 0o755)
				os.WriteFile(filepath.Join(cfg.Out, "notes.txt"), []byte("mine"), 0o644)
			}
			tc.break_(&cfg)
			if _, err := Run(context.Background(), cfg); err == nil {
				t.Fatal("the run did not fail")
			}
			es, err := os.ReadDir(cfg.Out)
			var got []string
			for _, e := range es {
				got = append(got, e.Name())
			}
			switch {
			case tc.keeps == nil && !errors.Is(err, fs.ErrNotExist):
				t.Errorf("%s is left with %v", cfg.Out, got)
			case tc.keeps == nil:
				if _, err := os.Stat(filepath.Join(root, "a")); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("the folder the run created above --out is left")
				}
			case strings.Join(got, " ") != strings.Join(tc.keeps, " "):
				t.Errorf("%s holds %v, want %v", cfg.Out, got, tc.keeps)
			}
		})
	}
}

// writeEmpty writes an empty text file next to dir and returns its path.
func writeEmpty(dir string) string {
	p := filepath.Join(filepath.Dir(dir), "empty.txt")
	os.WriteFile(p, nil, 0o644)
	return p
}

// TestResumeKeepsIntervals: a resumed run keeps the log, evaluation and
// save intervals of the run it continues, unless it is given others.
func TestResumeKeepsIntervals(t *testing.T) {
	for _, tc := range []struct {
		name               string
		resume             Config
		wantLogs, wantEval []int // steps of the resumed run's records
	}{
		{"kept", Config{}, []int{4, 6, 8}, []int{6, 8}},
		{"given again", Config{LogEvery: 4, EvalEvery: 4}, []int{4, 8}, []int{4, 8}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := quickSetup(t)
			cfg.Steps, cfg.LogEvery, cfg.EvalEvery, cfg.SaveEvery = 8, 2, 3, -1
			ctx, cancel := context.WithCancel(context.Background())
			first := cfg
			first.OnStep = func(r Record) {
				if r.Step == 3 {
					cancel()
				}
			}
			if _, err := Run(ctx, first); err != nil {
				t.Fatal(err)
			}
			resume := tc.resume
			resume.Out, resume.Device, resume.Resume = cfg.Out, "cpu", true
			if _, err := Run(context.Background(), resume); err != nil {
				t.Fatal(err)
			}
			recs, err := ReadMetrics(filepath.Join(cfg.Out, MetricsFile))
			if err != nil {
				t.Fatal(err)
			}
			var logs, evals []int
			for _, r := range recs {
				switch {
				case r.Step <= 3:
				case r.Eval:
					evals = append(evals, r.Step)
				default:
					logs = append(logs, r.Step)
				}
			}
			if !slices.Equal(logs, tc.wantLogs) || !slices.Equal(evals, tc.wantEval) {
				t.Errorf("resumed run logged steps %v and evaluated at %v, want %v and %v", logs, evals, tc.wantLogs, tc.wantEval)
			}
		})
	}
}
