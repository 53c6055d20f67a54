package main

import (
	"math"

	"github.com/spf13/pflag"
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
	)
	if err != nil {
		return err
	}
	if err := checkDTypeFlag(fs, "dtype", true); err != nil {
		return err
	}
	return checkModelConfigFlag(fs, "config")
}
