package main

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/parallax-engine/parallax/model"
	"github.com/parallax-engine/parallax/train"
	"github.com/parallax-engine/parallax/train/mad"
)

const madUsage = `
Usage:
  parallax mad [flags]

Runs the MAD synthetic benchmark (in-context recall, fuzzy recall, noisy
recall, selective copying, compression, memorization): for every task, mixer
and optimizer it trains the MAD model (2 x [mixer, SwiGLU], width 128) on
each setting of the task with every point of the lr x weight-decay grid,
keeps the test accuracy at the best test perplexity, takes the best grid
point per setting and averages over settings. See docs/MAD.md.

Protocols: the full one (default) is MAD's: 66 settings, lr {1e-4, 5e-4,
1e-3} x wd {0, 0.1}, at most 200 epochs of batch 128, cosine decay per
epoch, early stop at 0.999 test accuracy (396 runs per mixer and optimizer).
--quick keeps each task's baseline setting, lr {5e-4, 1e-3} x wd {0} and at
most 2,000 steps per run (12 runs per mixer and optimizer). The grid, epoch
and size flags below adjust either. --settings picks each task's settings:
baseline (6 in all), hard (the baseline plus the hardest value of each knob
of the task's sweep: 24 in all) or all (the 66-setting sweep);
--max-seq-len N drops the settings longer than N tokens from any of them.

A run is identified by everything that determines its result, the seed
included, so --seed 1 and --seed 2 into the same --out keep separate runs;
the tables are the given seed's, followed by the mean and spread over every
seed the directory holds.

Finished runs are recorded in --out/runs/ and skipped when the same command
runs again, and a run in flight saves its progress into --out/partial/
after an epoch (at most every 30 s), so an interrupted suite (Ctrl-C,
SIGTERM, a time limit) resumes where it stopped, within a run too. At
the end it prints the results table and writes results.json, results.md and
results.png into --out.
`

const madExamples = `
  parallax mad --quick --mixers softmax,parallax --optimizer adamw,muon --device cuda:0
  parallax mad --tasks recall,noisy,copy --mixers parallax --out runs/mad-full
  parallax mad --quick --tasks compress --max-train 512 --max-test 128 --epochs 5 --device cpu
  parallax mad --quick --settings hard --max-seq-len 512 --seed 2 --out runs/mad-hard
`

func runMAD(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("mad", madUsage, madExamples, stdout)
	tasks := fs.StringSlice("tasks", nil, "tasks to run (default all): "+taskList())
	mixers := fs.StringSlice("mixers", []string{mad.MixerSoftmax, mad.MixerParallax}, "sequence mixers: "+strings.Join(mad.Mixers(), ", "))
	opts := fs.StringSlice("optimizer", []string{train.OptAdamW}, "optimizers: adamw and/or muon (Muon for the hidden matrices, AdamW for the rest)")
	quick := fs.Bool("quick", false, "the quick protocol: baseline settings, a reduced grid, at most 2,000 steps per run")
	device := fs.String("device", "auto", "device: auto, cpu, vulkan:N, cuda:N")
	out := fs.String("out", "mad-results", "output directory (finished runs there are skipped)")
	parallel := fs.Int("parallel", 1, "runs trained at once, each on its own handle of the device")
	lrs := fs.StringSlice("lrs", nil, "learning-rate grid, comma-separated (default: the protocol's)")
	wds := fs.StringSlice("wds", nil, "weight-decay grid, comma-separated (default: the protocol's)")
	epochs := fs.Int("epochs", 0, "maximum epochs per run, also the cosine period (default 200)")
	maxSteps := fs.Int("max-steps", 0, "cap each run's epochs at about this many steps; -1 removes the cap (default: quick 2000, full none)")
	batch := fs.Int("batch", 0, "batch size (default 128)")
	settings := fs.String("settings", "", "baseline (each task's baseline setting), hard (the baseline and the hardest value of each swept knob) or all (the 66-setting sweep); default: the protocol's")
	maxSeqLen := fs.Int("max-seq-len", 0, "drop the settings whose seq_len exceeds this (a shorter run, not MAD); 0: no cap")
	maxTrain := fs.Int("max-train", 0, "use at most this many training examples per setting (reduced scale, not MAD)")
	maxTest := fs.Int("max-test", 0, "use at most this many test examples per setting (reduced scale, not MAD)")
	seed := fs.Uint64("seed", 1, "seed of the model initialisation and the data order")
	dim := fs.Int("dim", 128, "model width (MAD: 128)")
	heads := fs.Int("heads", 16, "mixer heads (MAD: 16)")
	headDim := fs.Int("head-dim", 8, "mixer head dimension (MAD: 8)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	if err := checkFlags(fs,
		numFlag("parallel").atLeast(1),
		numFlag("lrs").above(0),
		numFlag("wds").atLeast(0),
		numFlag("epochs").atLeast(1),
		numFlag("max-steps").atLeast(1).or(-1, "no cap"),
		numFlag("batch").atLeast(1),
		numFlag("max-train").atLeast(1),
		numFlag("max-test").atLeast(1),
		numFlag("max-seq-len").atLeast(0),
		numFlag("dim").atLeast(1).atMost(model.MaxWidth),
		numFlag("heads").atLeast(1).atMost(model.MaxWidth),
		numFlag("head-dim").atLeast(1).atMost(model.MaxWidth),
	); err != nil {
		return err
	}

	p := mad.FullProtocol()
	if *quick {
		p = mad.QuickProtocol()
	}
	custom := false
	set := func(name string) bool {
		if fs.Changed(name) {
			custom = true
			return true
		}
		return false
	}
	if set("lrs") {
		v, err := floats("lrs", *lrs)
		if err != nil {
			return err
		}
		p.LRs = v
	}
	if set("wds") {
		v, err := floats("wds", *wds)
		if err != nil {
			return err
		}
		p.WDs = v
	}
	if set("epochs") {
		p.Epochs = *epochs
	}
	if set("max-steps") && *maxSteps != 0 {
		p.MaxSteps = max(0, *maxSteps)
	}
	if set("batch") {
		p.Batch = *batch
	}
	if set("settings") {
		v := strings.ToLower(strings.TrimSpace(*settings))
		if !slices.Contains(mad.SettingsChoices(), v) {
			return usagef("--settings %q: want baseline, hard or all", *settings)
		}
		p.Settings = v
	}
	if set("max-seq-len") {
		p.MaxSeqLen = *maxSeqLen
	}
	if set("max-train") {
		p.MaxTrain = *maxTrain
	}
	if set("max-test") {
		p.MaxTest = *maxTest
	}
	if set("seed") {
		p.Seed = *seed
	}
	if custom {
		p.Name += "+custom"
	}
	if err := p.Validate(); err != nil {
		return usagef("%s", strings.TrimPrefix(err.Error(), "mad protocol: "))
	}
	if *parallel < 1 {
		return usagef("--parallel %d: want at least 1", *parallel)
	}
	var taskNames []string
	for _, t := range *tasks {
		name, err := mad.ParseTask(t)
		if err != nil {
			return usagef("--tasks: %s", strings.TrimPrefix(err.Error(), "unknown MAD task "))
		}
		taskNames = append(taskNames, name)
	}
	known := strings.Join(mad.Mixers(), ", ")
	for _, m := range *mixers {
		if !slices.Contains(mad.Mixers(), m) {
			return usagef("--mixers: unknown mixer %q (known: %s)", m, known)
		}
	}
	for _, o := range *opts {
		if o != train.OptAdamW && o != train.OptMuon {
			return usagef("--optimizer: %q is not adamw or muon", o)
		}
	}
	cfg := mad.SuiteConfig{Tasks: taskNames, Mixers: *mixers, Optimizers: *opts, Protocol: p,
		Device: *device, Out: *out, Parallel: *parallel, Stdout: stdout}
	if fs.Changed("dim") || fs.Changed("heads") || fs.Changed("head-dim") {
		mc := mad.DefaultModelConfig(0, "")
		mc.Dim, mc.Heads, mc.HeadDim = *dim, *heads, *headDim
		cfg.Model = mc
	}
	if p.MaxSeqLen > 0 {
		chosen := taskNames
		if len(chosen) == 0 {
			chosen = mad.Tasks()
		}
		left := 0
		for _, t := range chosen {
			ss, err := p.TaskSettings(t)
			if err != nil {
				return fmt.Errorf("settings of %s: %w", t, err)
			}
			left += len(ss)
		}
		if left == 0 {
			return usagef("--max-seq-len %d leaves no setting of the chosen tasks to run", p.MaxSeqLen)
		}
	}

	ctx, stop := interruptContext()
	defer stop()
	res, err := mad.RunSuite(ctx, cfg)
	if res != nil && res.Finished > 0 {
		fmt.Fprintf(stdout, "\n%s", res.Table())
		fmt.Fprintf(stdout, "\nresults: %s, %s, %s (runs in %s)\n", filepath.Join(*out, mad.ResultsJSON),
			filepath.Join(*out, mad.ResultsMD), filepath.Join(*out, mad.ResultsPNG), filepath.Join(*out, mad.RunsDir))
	}
	if err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "mad: "))
	}
	if res.Interrupted {
		fmt.Fprintf(stdout, "interrupted: %d of %d runs finished; run the same command again to continue\n", res.Finished, res.Planned)
		switch n := mad.PartialRuns(*out); n {
		case 0:
		case 1:
			fmt.Fprintf(stdout, "1 run in progress is saved in %s and continues from its last saved epoch\n", filepath.Join(*out, mad.PartialDir))
		default:
			fmt.Fprintf(stdout, "%d runs in progress are saved in %s and continue from their last saved epochs\n", n, filepath.Join(*out, mad.PartialDir))
		}
	}
	return nil
}

func taskList() string {
	var names []string
	for _, t := range mad.Tasks() {
		names = append(names, t+" ("+mad.ShortName(t)+")")
	}
	return strings.Join(names, ", ")
}

// floats parses a comma-separated flag's values.
func floats(flag string, vals []string) ([]float64, error) {
	var out []float64
	for _, v := range vals {
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return nil, usagef("--%s: %q is not a number", flag, v)
		}
		out = append(out, f)
	}
	return out, nil
}
