package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/parallax-engine/parallax/model"
)

// TestBadFlagValues: NaN, infinities and out-of-range values of every
// numeric flag (and an unknown --dtype or --config) are command-line
// mistakes: exit status 2 naming the flag, before any work (train creates
// no --out, mad no results directory). Only the special values the help
// documents are accepted (TestDocumentedSpecialValues).
func TestBadFlagValues(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	trainCmd := func(extra ...string) []string {
		return append([]string{"train", "--device", "cpu", "--out", out}, extra...)
	}
	madCmd := func(extra ...string) []string {
		return append([]string{"mad", "--device", "cpu", "--out", out}, extra...)
	}
	// The benchmarks and serve-bench are given a device, model or server
	// that does not exist: a flag checked only after opening it would exit
	// 1 instead of 2.
	benchCmd := func(what string, extra ...string) []string {
		return append([]string{"bench", what, "--device", "nope:0"}, extra...)
	}
	genCmd := func(extra ...string) []string {
		return append([]string{"bench", "generate", "--device", "nope:0", "--model", filepath.Join(dir, "no-model")}, extra...)
	}
	serveBenchCmd := func(extra ...string) []string {
		return append([]string{"serve-bench", "--url", "http://127.0.0.1:1", "--out", out}, extra...)
	}
	dataCmd := func(extra ...string) []string {
		return append([]string{"data", "prepare", "--tokenizer", filepath.Join(dir, "no-tokenizer"), "--in", filepath.Join(dir, "no-input.jsonl"), "--out", out}, extra...)
	}
	cases := []struct {
		args []string
		want string
	}{
		{trainCmd("--lr", "nan"), "--lr NaN: want a finite number > 0"},
		{trainCmd("--lr", "-1"), "--lr -1"},
		{trainCmd("--lr", "0"), "--lr 0"},
		{trainCmd("--lr", "inf"), "--lr +Inf"},
		{trainCmd("--optimizer", "adamw", "--lr", "nan"), "--lr NaN"},
		{trainCmd("--adamw-lr", "-3e-3"), "--adamw-lr -0.003"},
		{trainCmd("--weight-decay", "nan"), "--weight-decay NaN"},
		{trainCmd("--weight-decay", "-1"), "--weight-decay -1: want a finite number >= 0"},
		{trainCmd("--adamw-weight-decay", "inf"), "--adamw-weight-decay +Inf"},
		{trainCmd("--momentum", "1"), "--momentum 1: want a finite number in [0, 1)"},
		{trainCmd("--beta1", "nan"), "--beta1 NaN"},
		{trainCmd("--beta2", "-0.5"), "--beta2 -0.5"},
		{trainCmd("--decay-frac", "1.5"), "--decay-frac 1.5: want a finite number in [0, 1]"},
		{trainCmd("--min-lr-ratio", "nan"), "--min-lr-ratio NaN"},
		{trainCmd("--clip", "inf"), "--clip +Inf"},
		{trainCmd("--clip", "-1"), "--clip -1"},
		{trainCmd("--peak-tflops", "nan"), "--peak-tflops NaN"},
		{trainCmd("--peak-tflops", "0"), "--peak-tflops 0"},
		{trainCmd("--bucket-mb", "nan"), "--bucket-mb NaN"},
		{trainCmd("--steps", "0"), "--steps 0: want an integer >= 1"},
		{trainCmd("--steps", "-5", "--resume"), "--steps -5"},
		{trainCmd("--batch", "0"), "--batch 0"},
		{trainCmd("--seq", "-1"), "--seq -1"},
		{trainCmd("--accum", "0"), "--accum 0"},
		{trainCmd("--warmup", "-1"), "--warmup -1: want an integer >= 0"},
		{trainCmd("--vocab", "0"), "--vocab 0: want an integer in [257, 2147483647]"},
		{trainCmd("--eval-every", "0"), "--eval-every 0: want an integer >= 1, or -1 (never)"},
		{trainCmd("--eval-every", "-2"), "--eval-every -2"},
		{trainCmd("--eval-batches", "-1"), "--eval-batches -1"},
		{trainCmd("--save-every", "0"), "--save-every 0: want an integer >= 1, or -1 (only at the end)"},
		{trainCmd("--log-every", "0"), "--log-every 0"},
		{trainCmd("--log-every", "-10", "--resume"), "--log-every -10"},
		{trainCmd("--nproc-per-node", "0"), "--nproc-per-node 0"},
		{trainCmd("--dtype", "f8"), `--dtype "f8": want auto, f32, bf16 or f16`},
		{trainCmd("--dtype", "i32"), `--dtype "i32"`},
		{trainCmd("--config", "nope"), `--config "nope" is neither a model preset`},
		{madCmd("--lrs", "1e-3,nan"), "--lrs nan"},
		{madCmd("--lrs", "x"), `--lrs "x" is not a number (want a finite number > 0)`},
		{madCmd("--wds", "-0.1"), "--wds -0.1"},
		{madCmd("--parallel", "0"), "--parallel 0"},
		{madCmd("--epochs", "0"), "--epochs 0"},
		{madCmd("--max-steps", "-7"), "--max-steps -7: want an integer >= 1, or -1 (no cap)"},
		{madCmd("--max-steps", "0"), "--max-steps 0"},
		{madCmd("--batch", "-1"), "--batch -1"},
		{madCmd("--max-train", "0"), "--max-train 0"},
		{madCmd("--max-test", "-3"), "--max-test -3"},
		{madCmd("--dim", "0"), "--dim 0"},
		{madCmd("--heads", "-1"), "--heads -1"},
		{madCmd("--head-dim", "0"), "--head-dim 0"},
		{benchCmd("matmul", "--iters", "0"), "--iters 0: want an integer in [1, 1000000]"},
		{benchCmd("matmul", "--iters", "99999999999"), "--iters 99999999999"},
		{benchCmd("matmul", "--peak-tflops", "nan"), "--peak-tflops NaN: want a finite number > 0, or 0 (what is known of the device)"},
		{benchCmd("attention", "--peak-tflops", "-800"), "--peak-tflops -800"},
		{benchCmd("decode", "--peak-gbps", "inf"), "--peak-gbps +Inf"},
		{benchCmd("decode", "--peak-gbps", "-1"), "--peak-gbps -1"},
		{benchCmd("matmul", "--dtype", "f8"), `--dtype: "f8" is not f32, bf16 or f16`},
		{benchCmd("attention", "--dtype", "i32"), `--dtype: "i32"`},
		{benchCmd("matmul", "--shape", "0,1,1"), `--shape "0,1,1": "0" is not a positive size (want M,N,K)`},
		{benchCmd("attention", "--shape", "1,2,3"), `--shape "1,2,3": want B,H,L,D`},
		{benchCmd("decode", "--shape", "1,6,4,8,8"), "--shape: Hq 6 is not a multiple of Hkv 4"},
		{benchCmd("train", "--seq", "2147483648"), "--seq 2147483648: want an integer in [1, 2147483647]"},
		{benchCmd("train", "--peak-tflops", "inf"), "--peak-tflops +Inf"},
		{benchCmd("train", "--peak-tflops", "-1"), "--peak-tflops -1: want a finite number > 0, or 0 (what the device reports)"},
		{genCmd("--prompt-len", "2147483648"), "--prompt-len 2147483648: want an integer in [1, 2147483647]"},
		{genCmd("--new", "9223372036854775807"), "--new 9223372036854775807"},
		{genCmd("--batch", "2147483648"), "--batch 2147483648"},
		{genCmd("--peak-gbps", "inf"), "--peak-gbps +Inf: want a finite number > 0, or 0 (what is known of the device)"},
		{serveBenchCmd("--timeout", "0s"), "--timeout 0s: want a duration > 0"},
		{serveBenchCmd("--timeout", "-1m"), "--timeout -1m0s"},
		{serveBenchCmd("--requests", "0"), "--requests 0: want an integer in [1, 1000000]"},
		{serveBenchCmd("--requests", "99999999999999"), "--requests 99999999999999"},
		{serveBenchCmd("--max-tokens", "-1"), "--max-tokens -1: want an integer >= 1"},
		{serveBenchCmd("--clients", "10000", "--requests", "1001"), "--clients 10000 with --requests 1001: 10010000 requests at one concurrency, more than 10000000"},
		{serveBenchCmd("--clients", "1,nan"), `--clients "1,nan"`},
		{dataCmd("--val-frac", "nan"), "--val-frac NaN: want a finite number in [0, 1)"},
		{dataCmd("--val-frac", "1"), "--val-frac 1"},
		{dataCmd("--val-frac", "-0.01"), "--val-frac -0.01"},
		{dataCmd("--shard-tokens", "0"), "--shard-tokens 0: want an integer in [1, 2147483648]"},
		{dataCmd("--shard-tokens", "4294967296"), "--shard-tokens 4294967296"},
		{[]string{"tokenizer", "train", "--out", out, "--vocab", "99999999999"}, "--vocab 99999999999"},
		{[]string{"tokenizer", "train", "--out", out, "--vocab", "100"}, "--vocab 100 is too small"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args[1:], " "), func(t *testing.T) {
			code, stdout, stderr := runCLI(t, c.args...)
			if code != exitUsage || !strings.Contains(stderr, c.want) {
				t.Errorf("exit %d (want 2), stderr lacks %q\nstdout: %s\nstderr: %s", code, c.want, stdout, stderr)
			}
			if _, err := os.Stat(out); err == nil {
				t.Errorf("%s was created: the command did some work before refusing the flag", out)
				os.RemoveAll(out)
			}
		})
	}
}

// TestDocumentedSpecialValues: the special values a flag's help documents
// pass the checks.
func TestDocumentedSpecialValues(t *testing.T) {
	fs := pflag.NewFlagSet("train", pflag.ContinueOnError)
	for _, n := range []string{"eval-every", "save-every", "eval-batches"} {
		fs.Int(n, 0, "")
	}
	for _, n := range []string{"clip", "bucket-mb"} {
		fs.Float64(n, 0, "")
	}
	rules := []flagRule{
		numFlag("eval-every").atLeast(1).or(-1, "never"),
		numFlag("save-every").atLeast(1).or(-1, "only at the end"),
		numFlag("eval-batches").atLeast(0),
		numFlag("clip").atLeast(0),
		numFlag("bucket-mb").atLeast(0).atMost(1 << 20),
	}
	for _, args := range [][]string{
		{"--eval-every", "-1"}, {"--eval-every", "100"}, {"--save-every", "-1"}, {"--eval-batches", "0"},
		{"--clip", "0"}, {"--clip", "1e300"}, {"--bucket-mb", "0"}, {"--bucket-mb", "1048576"},
	} {
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		if err := checkFlags(fs, rules...); err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
}

// TestBenchFlagsAccepted: the benchmarks', serve-bench's and data
// prepare's flags at the ends of their ranges and at the values their help
// documents (0: the device's peak) pass the checks: each command gets as
// far as the device, model, server or tokenizer, which do not exist (exit
// 1, no complaint about a flag).
func TestBenchFlagsAccepted(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	if err := os.WriteFile(in, []byte(`{"text": "x"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "matmul", "--device", "nope:0", "--peak-tflops", "0", "--peak-gbps", "0", "--iters", "1000000"}, `open device "nope:0"`},
		{[]string{"bench", "decode", "--device", "nope:0", "--peak-gbps", "4400", "--shape", "1,8,2,16,8", "--dtype", "bf16"}, `open device "nope:0"`},
		{[]string{"bench", "train", "--device", "nope:0", "--peak-tflops", "0", "--seq", "2147483647", "--warmup", "0", "--steps", "1"}, `open device "nope:0"`},
		{[]string{"bench", "generate", "--device", "nope:0", "--model", filepath.Join(dir, "none"), "--peak-gbps", "0",
			"--batch", "2147483647", "--prompt-len", "2147483647", "--new", "2147483647"}, "none"},
		{[]string{"serve-bench", "--url", "http://127.0.0.1:1", "--clients", "10", "--requests", "1000000", "--timeout", "1s", "--max-tokens", "1"}, "list models"},
		{[]string{"data", "prepare", "--tokenizer", filepath.Join(dir, "none"), "--in", in, "--out", filepath.Join(dir, "out"),
			"--val-frac", "0", "--shard-tokens", "2147483648"}, "none"},
	} {
		t.Run(strings.Join(c.args[:2], " "), func(t *testing.T) {
			code, stdout, stderr := runCLI(t, c.args...)
			if code != exitFailure || !strings.Contains(stderr, c.want) || strings.Contains(stderr, ": want ") {
				t.Errorf("exit %d (want 1), stderr lacks %q or refuses a flag\nstdout: %s\nstderr: %s", code, c.want, stdout, stderr)
			}
		})
	}
}

// TestFlagRuleWant: the accepted values are described as the errors print
// them.
func TestFlagRuleWant(t *testing.T) {
	for _, c := range []struct {
		r       flagRule
		integer bool
		want    string
	}{
		{numFlag("x"), false, "a finite number"},
		{numFlag("x").above(0), false, "a finite number > 0"},
		{numFlag("x").atLeast(1), true, "an integer >= 1"},
		{numFlag("x").below(1), false, "a finite number < 1"},
		{numFlag("x").atMost(2), true, "an integer <= 2"},
		{numFlag("x").above(0).atMost(1), false, "a finite number in (0, 1]"},
		{numFlag("x").atLeast(0).below(1), false, "a finite number in [0, 1)"},
		{numFlag("x").atLeast(1).or(-1, "never"), true, "an integer >= 1, or -1 (never)"},
		{numFlag("x").atLeast(0.5).atMost(1e20), false, "a finite number in [0.5, 1e+20]"},
	} {
		if got := c.r.want(c.integer); got != c.want {
			t.Errorf("want(%v) = %q, want %q", c.integer, got, c.want)
		}
	}
}

// TestTrainAbsurdConfig: a config file with sane sizes but a model far
// larger than the machine exits 1 with how much memory it needs and how
// much there is, before the tokenizer or anything else runs; one beyond the
// limits exits 1 naming the field.
func TestTrainAbsurdConfig(t *testing.T) {
	dir := t.TempDir()
	mc, err := model.PresetConfig("tiny")
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, edit func(map[string]any)) string {
		b, err := json.Marshal(mc)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		json.Unmarshal(b, &m)
		edit(m)
		b, _ = json.Marshal(m)
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	huge := write("huge.json", func(m map[string]any) {
		m["num_hidden_layers"], m["hidden_size"], m["intermediate_size"] = model.MaxLayers, 16384, 65536
	})
	absurd := write("absurd.json", func(m map[string]any) { m["num_hidden_layers"] = 100000 })
	for _, c := range []struct {
		config string
		want   []string
	}{
		{huge, []string{"the model needs", "TiB of memory", "gradients", "optimizer state", "cpu:0 has", "free (of"}},
		{absurd, []string{"layers 100000 exceeds the limit 16384"}},
	} {
		t.Run(filepath.Base(c.config), func(t *testing.T) {
			code, stdout, stderr := runCLI(t, "train", "--config", c.config, "--device", "cpu", "--out", filepath.Join(dir, "run"))
			if code != exitFailure {
				t.Errorf("exit %d, want 1", code)
			}
			for _, w := range c.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q\nstdout: %s\nstderr: %s", w, stdout, stderr)
				}
			}
			if strings.Contains(stdout+stderr, "tokenizer") {
				t.Errorf("the tokenizer was trained before the config was refused:\n%s%s", stdout, stderr)
			}
		})
	}
}
