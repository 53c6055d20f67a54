package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/parallax-engine/parallax/internal/atomicfile"
	"github.com/parallax-engine/parallax/train"
	"github.com/parallax-engine/parallax/train/plot"
)

const reportUsage = `
Usage:
  parallax report adapt [--base DIR] [--out DIR] RUN...
  parallax report study --dir OUT [--out DIR] [--json]   (see report study --help)
  parallax report study-control PRESET heads|headdim

adapt summarises an adaptation study (scripts/device-adapt.sh): one
pretrained softmax model continued for equal tokens as (a) softmax and (b)
converted to Parallax (train --init DIR --convert-parallax), under Muon and
under AdamW, several seeds per arm. Each RUN is a training run's folder
(its metrics.jsonl and config.json) or a folder of such folders. A run's
arm is its model's attention (config.json) and its optimizer (Muon when
its step records carry lr_adamw, else AdamW); a "-sN" suffix of its folder
name is its seed, which pairs the two runs of a seed (they see the same
batches).

It writes into --out:
  adapt.md          per arm the final and the best held-out loss (mean ± sample
                    std over seeds), the final COR and W_R stable rank (means
                    over layers), (b) - (a) under each optimizer, and one row
                    per run; also printed to standard output
  adapt-loss.png    held-out loss against tokens of continued training per arm
                    (mean over seeds, bars from the minimum to the maximum) and
                    (b) - (a) per optimizer
  adapt-cor.png     COR per layer over training of the Parallax arms
  adapt-srank.png   the stable rank of W_R per layer over training

--base DIR is the pretrained run: its final held-out loss is every arm's
point at 0 tokens (step 0 of a continued run computes the base model).
A run without a held-out evaluation is left out with a warning.
`

const reportExamples = `
  parallax report adapt --base adapt/base --out adapt/report adapt/runs
  parallax report adapt runs/softmax-muon-s1 runs/parallax-muon-s1
`

// Files that report adapt writes into --out.
const (
	adaptTableFile = "adapt.md"
	adaptLossFile  = "adapt-loss.png"
	adaptCORFile   = "adapt-cor.png"
	adaptSRankFile = "adapt-srank.png"
)

func runReport(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		if len(args) == 0 {
			return usagef("want a subcommand: adapt, study or study-control")
		}
		newFlagSet("report", reportUsage, reportExamples, stdout).Usage()
		return errHelp
	}
	switch args[0] {
	case "study":
		if err := runReportStudy(args[1:], stdout, stderr); err != nil {
			return &subcommandError{path: "report study", err: err}
		}
		return nil
	case "study-control":
		if err := runReportStudyControl(args[1:], stdout); err != nil {
			return &subcommandError{path: "report study-control", err: err}
		}
		return nil
	case "adapt":
	default:
		return usagef("unknown subcommand %q (want adapt, study or study-control)", args[0])
	}
	if err := runReportAdapt(args[1:], stdout, stderr); err != nil {
		return &subcommandError{path: "report adapt", err: err}
	}
	return nil
}

func runReportAdapt(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("report adapt", reportUsage, reportExamples, stdout)
	baseDir := fs.String("base", "", "the pretrained run the others continue (its final held-out loss starts every curve)")
	out := fs.String("out", ".", "folder for adapt.md and the PNG charts (created if missing)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usagef("want the run folders (or a folder of them) to summarise")
	}
	dirs, err := train.FindAdaptRuns(fs.Args())
	if err != nil {
		return err
	}
	var runs []train.AdaptRun
	for _, d := range dirs {
		r, err := train.LoadAdaptRun(d)
		if err != nil {
			return err
		}
		if err := train.CheckAdaptRun(r); err != nil {
			if errors.Is(err, train.ErrNoEval) {
				fmt.Fprintf(stderr, "parallax report adapt: warning: %v; left out\n", err)
				continue
			}
			return err
		}
		runs = append(runs, r)
	}
	if len(runs) == 0 {
		return fmt.Errorf("none of the %d runs has a held-out evaluation", len(dirs))
	}
	var base *train.AdaptRun
	if *baseDir != "" {
		b, err := train.LoadAdaptRun(*baseDir)
		if err != nil {
			return fmt.Errorf("--base: %w", err)
		}
		if err := train.CheckAdaptRun(b); err != nil {
			return fmt.Errorf("--base: %w", err)
		}
		base = &b
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	table := train.AdaptTable(runs, base)
	if err := atomicfile.WriteFile(filepath.Join(*out, adaptTableFile), []byte(table)); err != nil {
		return fmt.Errorf("write %s: %w", adaptTableFile, err)
	}
	written := []string{adaptTableFile}
	for _, f := range []struct {
		name   string
		charts []plot.Chart
	}{
		{adaptLossFile, train.AdaptLossCharts(runs, base)},
		{adaptCORFile, train.AdaptCORCharts(runs)},
		{adaptSRankFile, train.AdaptSRankCharts(runs)},
	} {
		if len(f.charts) == 0 {
			continue // no Parallax run: no COR or stable rank to draw
		}
		if err := plot.WritePNG(filepath.Join(*out, f.name), 1000, 420*len(f.charts), f.charts...); err != nil {
			return err
		}
		written = append(written, f.name)
	}
	fmt.Fprint(stdout, table)
	fmt.Fprintf(stderr, "parallax report adapt: %d runs; wrote %s in %s\n", len(runs), strings.Join(written, ", "), *out)
	return nil
}
