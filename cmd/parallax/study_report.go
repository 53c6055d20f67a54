package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/parallax-engine/parallax/internal/atomicfile"
	"github.com/parallax-engine/parallax/model"
	"github.com/parallax-engine/parallax/train"
	"github.com/parallax-engine/parallax/train/plot"
)

const studyUsage = `
Usage:
  parallax report study --dir OUT [--out DIR] [--json]
  parallax report study-control PRESET heads|headdim

study summarises the quality study of scripts/study.sh: models trained
from scratch for equal tokens with softmax and Parallax attention, under
Muon and AdamW, several seeds each (and optionally the probe-gate
ablation, a parameter-matched control and a learning-rate sweep). --dir
is the study's OUT: its run folders are those in OUT/runs (or in OUT
itself when it has no runs/), each holding a run's config.json and
metrics.jsonl, and the study-run.json the script writes (preset,
optimizer, seed, rate, target steps; each read from the run itself when
missing). OUT/plan.txt, when present, names the planned runs.

A run is finished when it reached its target steps (study-run.json's, or
else the most steps of any run of its preset) with a held-out evaluation
at its last step; only finished runs enter the tables. Partial runs (cut
short), missing ones (no metrics, no evaluation, no config.json) and
unstarted ones (in plan.txt, no folder) are listed with the reason.

It writes into --out (default OUT/report):
  study.json       every run and every cell, the comparisons and sweeps
  study.md         the tables below; also printed to standard output
                   (--json prints study.json instead)
  study-loss.png   held-out loss against tokens per preset and optimizer,
                   one series per configuration (mean over seeds, bars
                   from the minimum to the maximum)
  study-cor.png    COR against layer depth per configuration and optimizer
  best-lr.env      with a sweep: the chosen rates (LR_MUON=..., LR_ADAMW=...)

The tables: final held-out loss mean ± std over seeds per (preset,
configuration, optimizer, rate); each configuration minus softmax (and
Parallax minus each control) with the pooled standard error
sqrt(s_a^2/n_a + s_b^2/n_b) and whether |difference| > 2 SE; COR and
probe gate per layer at the last logged step; the stable ranks
||A||_F^2 / ||A||_2^2 of W_R and of W_R^T W_K per layer, computed in
float64 from each run's final model.safetensors; the sweeps; every run.

study-control prints the config.json of a preset's parameter-matched
control: heads, a softmax model with more heads (3 Hq + 2 Hkv = 2 (Hq' +
Hkv') D x d blocks of attention weights a layer); headdim, a Parallax
model with a smaller head dimension. Train it with --config FILE.
`

const studyExamples = `
  parallax report study --dir study
  parallax report study --dir study/sweep --out study/sweep-report
  parallax report study --dir study --json > study.json
  parallax report study-control small heads > softmax-heads.json
`

// Files that report study writes into --out.
const (
	studyJSONFile  = "study.json"
	studyTableFile = "study.md"
	studyLossFile  = "study-loss.png"
	studyCORFile   = "study-cor.png"
	studyLRFile    = "best-lr.env"
)

func runReportStudy(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("report study", studyUsage, studyExamples, stdout)
	dir := fs.String("dir", "", "the study's output folder (scripts/study.sh's OUT)")
	out := fs.String("out", "", "folder for study.json, study.md and the charts (default: DIR/report)")
	asJSON := fs.Bool("json", false, "print study.json instead of the Markdown tables")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	if *dir == "" {
		return usagef("want --dir, the study's output folder")
	}
	rep, err := train.LoadStudy(*dir)
	if err != nil {
		return err
	}
	if *out == "" {
		*out = filepath.Join(*dir, "report")
	}
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fmt.Errorf("study.json: %w", err)
	}
	js = append(js, '\n')
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	table := rep.Markdown()
	written := []string{studyJSONFile, studyTableFile}
	for name, b := range map[string][]byte{studyJSONFile: js, studyTableFile: []byte(table)} {
		if err := atomicfile.WriteFile(filepath.Join(*out, name), b); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	if env := rep.BestLREnv(); env != "" {
		if err := atomicfile.WriteFile(filepath.Join(*out, studyLRFile), []byte(env)); err != nil {
			return fmt.Errorf("write %s: %w", studyLRFile, err)
		}
		written = append(written, studyLRFile)
	}
	for _, f := range []struct {
		name   string
		charts []plot.Chart
	}{
		{studyLossFile, train.StudyLossCharts(rep)},
		{studyCORFile, train.StudyCORCharts(rep)},
	} {
		if len(f.charts) == 0 {
			continue
		}
		if err := plot.WritePNG(filepath.Join(*out, f.name), 1000, 420*len(f.charts), f.charts...); err != nil {
			return fmt.Errorf("write %s: %w", f.name, err)
		}
		written = append(written, f.name)
	}
	if *asJSON {
		stdout.Write(js)
	} else {
		fmt.Fprint(stdout, table)
	}
	fmt.Fprintf(stderr, "parallax report study: %d runs (%d finished); wrote %s in %s\n", len(rep.Runs),
		rep.Counts[train.StudyFinished], strings.Join(written, ", "), *out)
	return nil
}

func runReportStudyControl(args []string, stdout io.Writer) error {
	fs := newFlagSet("report study-control", studyUsage, studyExamples, stdout)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return usagef("want a preset and a control kind (heads or headdim)")
	}
	if _, err := model.PresetConfig(fs.Arg(0)); err != nil {
		return usagef("%v", err)
	}
	if k := fs.Arg(1); k != "heads" && k != "headdim" {
		return usagef("control %q: want heads or headdim", k)
	}
	c, err := train.StudyControlConfig(fs.Arg(0), fs.Arg(1))
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("control config: %w", err)
	}
	fmt.Fprintf(stdout, "%s\n", b)
	return nil
}
