package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/spf13/pflag"

	"github.com/parallax-engine/parallax/model"
)

// checkTrainFlags refuses every out-of-range value of train's flags (see
// checkFlags), an unknown --dtype and a --config that is neither a preset
// nor a file, before any work. The values the help documents as special
// are the only sentinels accepted: --eval-every -1 (never), --save-every -1
// (only at the end), --eval-batches 0 (the whole held-out text), --clip 0
// (off) and --bucket-mb 0 (the default).
func checkTrainFlags(fs *pflag.FlagSet) error {
	err := checkFlags(fs,
		numFlag("steps").atLeast(1),
		numFlag("batch").atLeast(1),
		numFlag("seq").atLeast(1).atMost(math.MaxInt32),
		numFlag("accum").atLeast(1),
		numFlag("lr").above(0),
		numFlag("adamw-lr").above(0),
		numFlag("weight-decay").atLeast(0),
		numFlag("adamw-weight-decay").atLeast(0),
		numFlag("momentum").atLeast(0).below(1),
		numFlag("beta1").atLeast(0).below(1),
		numFlag("beta2").atLeast(0).below(1),
		numFlag("warmup").atLeast(0),
		numFlag("decay-frac").atLeast(0).atMost(1),
		numFlag("min-lr-ratio").atLeast(0).atMost(1),
		numFlag("clip").atLeast(0),
		numFlag("vocab").atLeast(257).atMost(math.MaxInt32),
		numFlag("eval-every").atLeast(1).or(-1, "never"),
		numFlag("eval-batches").atLeast(0),
		numFlag("save-every").atLeast(1).or(-1, "only at the end"),
		numFlag("log-every").atLeast(1),
		numFlag("peak-tflops").above(0),
		numFlag("nproc-per-node").atLeast(1),
		numFlag("bucket-mb").atLeast(0).atMost(1<<20),
		numFlag("probe-lr-scale").above(0),
		numFlag("probe-init-scale").atLeast(0).atMost(1e6),
	)
	if err != nil {
		return err
	}
	if err := checkDTypeFlag(fs, "dtype", true); err != nil {
		return err
	}
	return checkModelConfigFlag(fs, "config")
}

// checkInitFlags checks the adaptation flags against each other: --config
// cannot be combined with --init (the shape is the initial weights'), and
// --config naming a path without --init starts from random weights, which
// is said on stderr rather than done silently.
func checkInitFlags(fs *pflag.FlagSet, config string, stderr io.Writer) error {
	init := fs.Changed("init")
	switch {
	case init && fs.Changed("config"):
		return usagef("--config and --init cannot be combined: the model's shape is the one of its initial weights (drop --config)")
	case init && fs.Changed("attention"):
		return usagef("--attention cannot change a model started from --init; --convert-parallax adds W_R to a softmax one")
	case fs.Changed("convert-parallax") && !init:
		return usagef("--convert-parallax converts initial weights: give them with --init DIR")
	case fs.Changed("probe-init-scale") && !fs.Changed("convert-parallax"):
		return usagef("--probe-init-scale sets the W_R that --convert-parallax adds")
	}
	if v := fs.Lookup("probe-optimizer").Value.String(); v != "" && v != "muon" && v != "adamw" {
		return usagef("--probe-optimizer %q: want muon or adamw", v)
	}
	if init || !fs.Changed("config") {
		return nil
	}
	if _, err := model.PresetConfig(config); err == nil {
		return nil
	}
	dir := config
	if st, err := os.Stat(config); err == nil && !st.IsDir() {
		dir = filepath.Dir(config)
	}
	weights := false
	for _, name := range []string{model.WeightsFile, model.IndexFile} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			weights = true
		}
	}
	if weights {
		fmt.Fprintf(stderr, "parallax train: warning: --config %s reads only the model's shape: training starts from RANDOM weights, not from the weights in %s (use --init %s to start from them)\n", config, dir, dir)
	} else {
		fmt.Fprintf(stderr, "parallax train: note: --config %s gives the model's shape; training starts from random weights\n", config)
	}
	return nil
}
