package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"

	"github.com/parallax-engine/parallax/model"
	"github.com/parallax-engine/parallax/train"
)

const trainUsage = `
Usage:
  parallax train [flags]

Trains a language model with Parallax (or softmax) attention and writes the
checkpoint (config.json, model.safetensors, optimizer.safetensors,
checkpoint.json), tokenizer.json, metrics.jsonl and curves.png into --out.

Without --data it trains on the embedded corpus: five Austen novels, with
Northanger Abbey held out for validation. --data takes a text file (its last
10% is held out), a directory of *.txt files (the last one is held out) or
a tokenized dataset directory. A byte-level BPE tokenizer of --vocab tokens
is trained on the training text unless --tokenizer names one.

The optimizer is Muon for the hidden matrices (q, k, v, r, o, gate, up, down,
each on its own) with AdamW for the embedding, head and norm gains, or AdamW
for everything (--optimizer adamw). --lr sets the main group's peak rate
(Muon's, or AdamW's with --optimizer adamw); --adamw-lr the AdamW group's
under Muon.

Ctrl-C finishes the current step and saves a checkpoint; --resume continues
it exactly (the run's settings come from the checkpoint; --steps may be
raised; --log-every, --eval-every and --save-every are the checkpoint's
unless given again). A save is atomic: its files are staged, listed with
their checksums in checkpoint.json and then moved into place, and --resume
finishes a save that was killed after staging (or falls back to the last
complete checkpoint when it was killed before).

A fresh run refuses an --out that holds another run's files (a checkpoint,
metrics.jsonl, tokenizer.json, data/); --force removes them first. A run
that fails before its first checkpoint removes what it created.

Adaptation: --init DIR starts from the weights of a model directory (a
checkpoint of ours or a Hugging Face Qwen3 folder, sharded or not, any
stored float dtype) with a fresh optimizer and schedule; its config.json
is the model's shape and its tokenizer the run's (unless --tokenizer).
--convert-parallax adds W_R = 0 and its norm to a softmax model, so that
step 0 computes exactly the softmax model; --probe-init-scale draws W_R
instead, --probe-lr-scale scales the probe's learning rate and
--probe-optimizer picks Muon or AdamW for W_R. --freeze takes glob patterns
of parameter names ("!" excepts), e.g. --freeze '*,!*.r_proj.*,!*.r_norm.*'
trains only the probe; frozen parameters get no update and no optimizer
state. --config DIR alone reads only the shape and starts from random
weights (it says so).

--data FILE.jsonl takes {"text": ...} samples, or chat samples
{"messages": [{"role", "content"}, ...]} rendered through the model's chat
template with the loss on the assistant turns only; samples are packed
whole into rows (see 'parallax data prepare', which also tokenizes large
inputs ahead of training in one streaming pass).

Data parallel: --nproc-per-node N starts N ranks on this node, one per GPU
(cuda:0..N-1); a process started with torchrun-style variables (RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) or by srun joins the job
they describe. --batch is the global batch, split over the ranks, so a run
means the same at any number of GPUs and resumes at another. See
docs/DISTRIBUTED.md.
`

const trainExamples = `
  parallax train                                   # tiny model, embedded corpus
  parallax train --config small --device cuda:0 --steps 5000 --out runs/small
  parallax train --attention softmax --optimizer adamw --lr 3e-3 --out runs/base
  parallax train --out runs/small --resume
  parallax train --config small --nproc-per-node 2 --batch 32 --out runs/dp
  parallax train --init Qwen3-0.6B --convert-parallax --data chat.jsonl --steps 500 --out runs/sft
  parallax train --init runs/base --convert-parallax --freeze '*,!*.r_proj.*,!*.r_norm.*' --out runs/probe
`

// runDefining lists the flags that define a run (not allowed with --resume).
var runDefining = []string{"config", "data", "attention", "probe-gate", "optimizer", "batch", "seq", "accum",
	"lr", "adamw-lr", "weight-decay", "adamw-weight-decay", "momentum", "muon-scale", "beta1", "beta2",
	"schedule", "warmup", "decay-frac", "min-lr-ratio", "clip", "vocab", "tokenizer", "seed", "dtype",
	"init", "convert-parallax", "probe-lr-scale", "probe-init-scale", "probe-optimizer", "freeze"}

func runTrain(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("train", trainUsage, trainExamples, stdout)
	d := train.DefaultConfig()
	cfg := d
	fs.StringVar(&cfg.Model, "config", d.Model, "model preset ("+strings.Join(model.Presets(), ", ")+") or a config.json")
	fs.StringVar(&cfg.Data, "data", "", "training text: a file, a directory of *.txt, or a tokenized dataset (default: the embedded corpus)")
	fs.StringVar(&cfg.Attention, "attention", "", "attention: parallax or softmax (default: the config's; presets are parallax)")
	fs.BoolVar(&cfg.ProbeGate, "probe-gate", false, "the gate ablation: r = sigmoid(w_g . h) r per token and head (Parallax only)")
	fs.StringVar(&cfg.Init, "init", "", "start from the weights of this model directory (ours or a Hugging Face Qwen3 one); its config and tokenizer come with it")
	fs.BoolVar(&cfg.ConvertParallax, "convert-parallax", false, "with --init: add W_R = 0 to a softmax model, so step 0 computes exactly the softmax model")
	fs.Float64Var(&cfg.ProbeInitScale, "probe-init-scale", 0, "with --convert-parallax: draw W_R from N(0, (s x 0.02)^2) instead of zero")
	probeLR := fs.Float64("probe-lr-scale", 1, "multiply the learning rate of the probe (W_R, r_norm, r_gate) by this")
	probeOpt := fs.String("probe-optimizer", "", "optimizer of W_R: muon or adamw (default: the run's, Muon under --optimizer muon)")
	fs.StringSliceVar(&cfg.Freeze, "freeze", nil, "glob patterns of parameter names to leave untrained (\"!pattern\" excepts; e.g. '*,!*.r_proj.*,!*.r_norm.*')")
	opt := fs.String("optimizer", train.OptMuon, "optimizer: muon (Muon + AdamW) or adamw")
	fs.StringVar(&cfg.Device, "device", d.Device, "device: auto, cpu, vulkan:N, cuda:N")
	fs.StringVar(&cfg.DType, "dtype", d.DType, "activation dtype: auto (bf16 on GPUs, f32 on the CPU), f32, bf16, f16")
	fs.IntVar(&cfg.Steps, "steps", d.Steps, "optimizer steps")
	fs.IntVar(&cfg.Batch, "batch", d.Batch, "sequences per micro-batch")
	fs.IntVar(&cfg.Seq, "seq", d.Seq, "tokens per sequence")
	fs.IntVar(&cfg.Accum, "accum", d.Accum, "micro-batches per step (gradient accumulation)")
	lr := fs.Float64("lr", 0, "peak learning rate of the main group (default: Muon 0.02, AdamW 3e-3)")
	adamLR := fs.Float64("adamw-lr", 0, "peak learning rate of the AdamW group under Muon (default 3e-3)")
	wd := fs.Float64("weight-decay", -1, "decoupled weight decay of the hidden matrices (default: Muon 0.01, AdamW 0.1)")
	adamWD := fs.Float64("adamw-weight-decay", 0, "decoupled weight decay of the embedding and head")
	momentum := fs.Float64("momentum", 0.95, "Muon momentum")
	scale := fs.String("muon-scale", train.ScaleKeller, "Muon shape scaling: keller (sqrt(max(1,rows/cols))) or moonlight (0.2 sqrt(max(rows,cols)), AdamW-like lr)")
	beta1 := fs.Float64("beta1", 0.9, "AdamW beta1")
	beta2 := fs.Float64("beta2", 0.95, "AdamW beta2")
	sched := fs.String("schedule", train.SchedWSD, "learning-rate schedule: wsd, cosine or constant")
	warmup := fs.Int("warmup", -1, "warmup steps (default 5% of the steps, at most 200)")
	decay := fs.Float64("decay-frac", 0.2, "WSD: final fraction of the steps with linear decay")
	minRatio := fs.Float64("min-lr-ratio", 0.1, "final learning rate as a fraction of the peak")
	fs.Float64Var(&cfg.ClipNorm, "clip", d.ClipNorm, "clip the global gradient norm at this value (0: off)")
	fs.IntVar(&cfg.Vocab, "vocab", 0, "BPE vocabulary size to train (default: the config's, 4096 for tiny)")
	fs.StringVar(&cfg.Tokenizer, "tokenizer", "", `use this tokenizer.json instead of training one, or "gpt2" for GPT-2's (the default for a 50257-token model)`)
	fs.StringVar(&cfg.Out, "out", "run", "output directory")
	fs.BoolVar(&cfg.Resume, "resume", false, "continue the checkpoint in --out")
	fs.BoolVar(&cfg.Force, "force", false, "start afresh in an --out holding another run's files, removing them (checkpoint, metrics, tokenizer, data)")
	fs.IntVar(&cfg.EvalEvery, "eval-every", d.EvalEvery, "evaluate every N steps and at the end (-1: never)")
	fs.IntVar(&cfg.EvalBatches, "eval-batches", d.EvalBatches, "validation batches per evaluation (0: the whole held-out text)")
	fs.IntVar(&cfg.SaveEvery, "save-every", d.SaveEvery, "checkpoint every N steps and at the end (-1: only at the end)")
	fs.IntVar(&cfg.LogEvery, "log-every", d.LogEvery, "metrics line every N steps")
	fs.Uint64Var(&cfg.Seed, "seed", d.Seed, "seed of the initialisation and the data order")
	fs.BoolVar(&cfg.SkipNonFinite, "skip-nonfinite", false, "skip steps with a NaN/Inf loss or gradient instead of stopping")
	peak := fs.Float64("peak-tflops", 0, "device peak TFLOP/s for the MFU figure (default: what the device reports)")
	nproc := fs.Int("nproc-per-node", 0, "data parallel: start this many ranks on this node, one per GPU")
	fs.StringVar(&cfg.Comm, "comm", "auto", "data parallel collectives: auto (NCCL on CUDA GPUs, else TCP), nccl or tcp")
	fs.BoolVar(&cfg.ZeRO, "zero", false, "data parallel: shard the optimizer state over the ranks (ZeRO-1)")
	fs.Float64Var(&cfg.BucketMB, "bucket-mb", 25, "data parallel: gradient bucket size in MiB (0: the default, 25); each bucket is reduced as soon as the backward pass has finished its gradients")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	if err := checkTrainFlags(fs); err != nil {
		return err
	}
	if err := checkInitFlags(fs, cfg.Model, stderr); err != nil {
		return err
	}
	if cfg.Resume {
		for _, name := range runDefining {
			if fs.Changed(name) {
				return usagef("--%s cannot change a resumed run (its settings come from the checkpoint in %s); only --steps may be raised", name, cfg.Out)
			}
		}
		if fs.Changed("force") {
			return usagef("--force starts a fresh run in %s; it cannot be combined with --resume", cfg.Out)
		}
		if !fs.Changed("steps") {
			cfg.Steps = 0 // keep the checkpoint's
		}
		// 0 keeps the checkpoint's intervals.
		if !fs.Changed("log-every") {
			cfg.LogEvery = 0
		}
		if !fs.Changed("eval-every") {
			cfg.EvalEvery = 0
		}
		if !fs.Changed("save-every") {
			cfg.SaveEvery = 0
		}
	}
	cfg.PeakFLOPS = *peak * 1e12

	o := train.DefaultOptimConfig(*opt)
	o.Muon.Momentum, o.Muon.Scaling = *momentum, *scale
	o.AdamW.Beta1, o.AdamW.Beta2 = *beta1, *beta2
	o.AdamW.EmbedWeightDecay = *adamWD
	if *scale == train.ScaleMoonlight {
		o.Muon.LR, o.Muon.WeightDecay = 0, 0.1 // Moonlight: AdamW's lr, wd 0.1
	}
	switch *opt {
	case train.OptMuon:
		if *lr > 0 {
			o.Muon.LR = *lr
		}
		if *adamLR > 0 {
			o.AdamW.LR = *adamLR
		}
		if *wd >= 0 {
			o.Muon.WeightDecay = *wd
		}
	case train.OptAdamW:
		if *lr > 0 {
			o.AdamW.LR = *lr
		}
		if fs.Changed("adamw-lr") {
			return usagef("--adamw-lr is for --optimizer muon; with adamw use --lr")
		}
		if *wd >= 0 {
			o.AdamW.WeightDecay = *wd
		}
	default:
		return usagef("--optimizer %q: want muon or adamw", *opt)
	}
	o.Probe = train.ProbeOptim{LRScale: *probeLR, Optimizer: *probeOpt}
	if *probeLR == 1 {
		o.Probe.LRScale = 0 // the default: the probe's rate is the others'
	}
	cfg.Optim = o
	cfg.Schedule = train.DefaultSchedule(cfg.Steps)
	cfg.Schedule.Kind, cfg.Schedule.DecayFrac, cfg.Schedule.MinRatio = *sched, *decay, *minRatio
	if *warmup >= 0 {
		cfg.Schedule.Warmup = *warmup
	}
	if !cfg.Resume {
		if err := cfg.Validate(); err != nil {
			return usagef("%s", strings.TrimPrefix(err.Error(), "train: "))
		}
	}
	switch {
	case cfg.Comm != "auto" && cfg.Comm != "nccl" && cfg.Comm != "tcp":
		return usagef("--comm %q: want auto, nccl or tcp", cfg.Comm)
	case !(cfg.BucketMB >= 0 && cfg.BucketMB <= 1<<20): // also refuses NaN
		return usagef("--bucket-mb %g: want a size in MiB from 0 to 1048576 (0: the default, 25)", cfg.BucketMB)
	case *nproc < 0:
		return usagef("--nproc-per-node %d must be >= 1", *nproc)
	case *nproc > 1:
		return launchRanks(fs, cfg.Device, *nproc, stdout, stderr)
	}

	ctx, stop := interruptContext()
	defer stop()
	cfg.Stdout = stdout
	leave, leader, err := joinFromEnv(ctx, &cfg, stderr)
	if err != nil {
		return err
	}
	res, err := train.Run(ctx, cfg)
	leave(err)
	if err != nil {
		// The command already names itself ("parallax train: ...").
		return errors.New(strings.TrimPrefix(err.Error(), "train: "))
	}
	if !leader {
		return nil
	}
	if res.Interrupted {
		fmt.Fprintf(stdout, "stopped at step %d; continue with: parallax train --out %s --resume\n", res.Step, res.Out)
		return nil
	}
	if res.AlreadyDone { // Run said so; there is no loss or rate to report
		return nil
	}
	fmt.Fprintf(stdout, "done: %d steps, train loss %.4f", res.Step, res.Loss)
	if !math.IsNaN(res.ValLoss) {
		fmt.Fprintf(stdout, ", val loss %.4f (ppl %.2f)", res.ValLoss, math.Exp(res.ValLoss))
	}
	fmt.Fprintf(stdout, ", %s tokens/s\n", train.HumanCount(res.TokensPerS))
	fmt.Fprintf(stdout, "checkpoint in %s; curves in %s; sample with: parallax generate --model %s --prompt \"...\"\n",
		res.Out, filepath.Join(res.Out, train.PlotFile), res.Out)
	return nil
}
