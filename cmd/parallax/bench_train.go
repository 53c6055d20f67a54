package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/model"
	"github.com/parallax-engine/parallax/train"
)

// benchTrainResult is what "bench train" measured (its --json output).
type benchTrainResult struct {
	Device     string  `json:"device"`
	Op         string  `json:"op"` // "train parallax" or "train softmax"
	Config     string  `json:"config"`
	Optimizer  string  `json:"optimizer"` // "muon" (Muon + AdamW) or "adamw"
	Tokens     string  `json:"tokens"`    // the tokenizer: "gpt2" or "bpe" (trained on the corpus)
	Vocab      int     `json:"vocab"`     // the model's vocabulary
	Batch      int     `json:"batch"`
	Seq        int     `json:"seq"`
	Steps      int     `json:"steps"`  // all steps run, warm-up included
	Warmup     int     `json:"warmup"` // the untimed first steps
	Params     int64   `json:"params"`
	Millis     float64 `json:"ms"` // median step time
	TokensPerS float64 `json:"tokens_per_s"`
	MFU        float64 `json:"mfu,omitempty"`         // a fraction; omitted when no peak is known
	PeakTFLOPs float64 `json:"peak_tflops,omitempty"` // the peak MFU is taken against
	Loss       float64 `json:"loss"`                  // the last step's training loss
	Timer      string  `json:"timer"`
	// With --profile: the step profiled (the first after the warm-up) and
	// its per-op device times, the most expensive first.
	ProfileStep int            `json:"profile_step,omitempty"`
	Profile     engine.Profile `json:"profile,omitempty"`
}

// runBenchTrain is "parallax bench train": it runs a short training job
// through train.Run, so the steps timed are exactly those of "parallax
// train", and reports their median time.
func runBenchTrain(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench train", benchUsage, benchExamples, stdout)
	device := fs.String("device", "auto", "device ID")
	config := fs.String("config", "small", "model preset: "+strings.Join(benchTrainPresets(), ", "))
	attention := fs.String("attention", model.AttentionParallax, "attention: parallax or softmax")
	optimizer := fs.String("optimizer", train.OptMuon, "optimizer: muon (Muon + AdamW) or adamw")
	steps := fs.Int("steps", 30, "training steps, the warm-up included")
	warmup := fs.Int("warmup", 5, "untimed first steps (kernel compilation, allocation, caches)")
	batch := fs.Int("batch", 16, "sequences per step")
	seq := fs.Int("seq", 512, "tokens per sequence")
	peakTF := fs.Float64("peak-tflops", 0, "the device's peak bf16 TFLOP/s for MFU (default: what the device reports)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	profile := fs.Bool("profile", false, "time every op of the first step after the warm-up with the device's timers and print the breakdown (CUDA and Vulkan devices)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	// Check the command line before opening the device or tokenizing the
	// corpus, so a mistake is reported at once.
	name := strings.ToLower(strings.TrimSpace(*config))
	mc, err := model.PresetConfig(name)
	if err != nil {
		return usagef("--config: %v", err)
	}
	if !trainablePreset(mc) {
		return usagef("--config %s: its %d-token vocabulary has no tokenizer here (the runner trains a BPE of %d or more tokens on the embedded corpus, or uses GPT-2's tokens for a vocabulary of %d or more); presets bench train can run: %s",
			name, mc.Vocab, minBPEVocab, train.GPT2Vocab, strings.Join(benchTrainPresets(), ", "))
	}
	switch {
	case *attention != model.AttentionParallax && *attention != model.AttentionSoftmax:
		return usagef("--attention %q: want %s or %s", *attention, model.AttentionParallax, model.AttentionSoftmax)
	case *optimizer != train.OptMuon && *optimizer != train.OptAdamW:
		return usagef("--optimizer %q: want %s or %s", *optimizer, train.OptMuon, train.OptAdamW)
	case *batch < 1:
		return usagef("--batch %d must be >= 1", *batch)
	case *seq < 1:
		return usagef("--seq %d must be >= 1", *seq)
	case *warmup < 0:
		return usagef("--warmup %d must be >= 0", *warmup)
	case *steps <= *warmup:
		return usagef("--steps %d must be more than --warmup %d (only the steps after the warm-up are timed)", *steps, *warmup)
	}
	// The bounds of parallax train's flags of the same names.
	if err := checkFlags(fs,
		numFlag("seq").atLeast(1).atMost(math.MaxInt32),
		numFlag("peak-tflops").above(0).or(0, "what the device reports"),
	); err != nil {
		return err
	}

	// The runner opens the device itself; open it here only to resolve
	// "auto" and read its name and peak, and close it so that two handles
	// (two CUDA contexts) never hold the device's memory at once.
	dev, err := engine.Open(*device)
	if err != nil {
		return fmt.Errorf("bench train: %w", err)
	}
	info := dev.Info()
	_, canProfile := dev.(engine.Profiler)
	dev.Close()
	if *profile && !canProfile {
		return usagef("--profile: %s (%s) has no per-op device timers; profile on a CUDA or Vulkan device", info.ID(), info.Name)
	}
	peak := *peakTF
	if peak == 0 {
		peak = devicePeakTFLOPs(info)
	}

	out, err := os.MkdirTemp("", "parallax-bench-train-")
	if err != nil {
		return fmt.Errorf("bench train: %w", err)
	}
	defer os.RemoveAll(out)

	cfg := train.DefaultConfig()
	cfg.Out, cfg.Model, cfg.Attention, cfg.Device = out, name, *attention, info.ID()
	cfg.Steps, cfg.Batch, cfg.Seq = *steps, *batch, *seq
	cfg.Optim = train.DefaultOptimConfig(*optimizer)
	tokens := "bpe"
	if mc.Vocab >= train.GPT2Vocab {
		// GPT-2's tokens; a larger vocabulary (Qwen3's 151936) keeps its
		// true width, the ids past GPT-2's never occurring.
		cfg.Tokenizer, cfg.KeepVocab, tokens = "gpt2", true, "gpt2"
	}
	cfg.Schedule = train.DefaultSchedule(cfg.Steps)
	cfg.EvalEvery, cfg.NoSave = -1, true
	// Metrics (and the COR measurement that comes with them) only at the
	// first and last step, so at most one or two timed steps are slower
	// and the median passes over them.
	cfg.LogEvery = cfg.Steps
	if *profile {
		// One step, past the warm-up's compilation and allocation; its
		// timers add a little to its time, which the median passes over.
		cfg.ProfileStep = *warmup + 1
	}
	cfg.Logf = func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) }
	// ElapsedS is read on the loop's clock after each step; the difference
	// of consecutive readings is the whole cost of a step, including device
	// work a step queues that only the next one waits for.
	var elapsed []float64
	cfg.OnStep = func(rec train.Record) {
		if rec.ElapsedS != nil {
			elapsed = append(elapsed, *rec.ElapsedS)
		}
	}

	ctx, stop := interruptContext()
	defer stop()
	res, err := train.Run(ctx, cfg)
	if err != nil {
		return &prefixedError{msg: "bench train: " + strings.TrimPrefix(err.Error(), "train: "), err: err}
	}
	if res.Interrupted {
		return fmt.Errorf("bench train: interrupted after step %d of %d", res.Step, *steps)
	}
	if len(elapsed) != *steps {
		return fmt.Errorf("bench train: timed %d of %d steps", len(elapsed), *steps)
	}
	if math.IsNaN(res.Loss) || math.IsInf(res.Loss, 0) {
		return fmt.Errorf("bench train: the final loss is %v", res.Loss)
	}
	if *profile && res.Profile == nil {
		return fmt.Errorf("bench train: step %d was not profiled", cfg.ProfileStep)
	}
	times := make([]float64, 0, *steps-*warmup)
	for i := *warmup; i < len(elapsed); i++ {
		prev := 0.0 // the loop's clock starts just before the first step
		if i > 0 {
			prev = elapsed[i-1]
		}
		times = append(times, elapsed[i]-prev)
	}
	med := median(times)
	if !(med > 0) {
		return fmt.Errorf("bench train: median step time %v s", med)
	}

	r := benchTrainResult{Device: info.ID(), Op: "train " + *attention, Config: name,
		Optimizer: *optimizer, Tokens: tokens, Vocab: mc.Vocab,
		Batch: *batch, Seq: *seq, Steps: *steps, Warmup: *warmup, Params: res.Params,
		Millis: med * 1e3, TokensPerS: float64(*batch**seq) / med, Loss: res.Loss, Timer: "wall clock"}
	if *profile {
		r.ProfileStep, r.Profile = cfg.ProfileStep, res.Profile
	}
	if peak > 0 {
		// 6 N FLOPs a token: forward 2 N, backward 4 N (attention's
		// L-dependent work is not counted, as is usual for MFU).
		r.MFU = 6 * float64(res.Params) * r.TokensPerS / (peak * 1e12)
		r.PeakTFLOPs = peak
	}
	if *asJSON {
		return writeJSON(stdout, r)
	}
	fmt.Fprintf(stdout, "%s %s %s, %s, %s tokens in a %d vocabulary, on %s (%s): %.4g ms/step, %.4g tokens/s",
		r.Op, r.Config, engine.Shape{r.Batch, r.Seq}, r.Optimizer, r.Tokens, r.Vocab, r.Device, info.Name, r.Millis, r.TokensPerS)
	if r.MFU > 0 {
		fmt.Fprintf(stdout, ", MFU %.1f%% of %.4g TFLOP/s", 100*r.MFU, r.PeakTFLOPs)
	}
	fmt.Fprintf(stdout, ", %s parameters, final loss %.4f [%s, median of %d steps after %d warm-up]\n",
		train.HumanCount(float64(r.Params)), r.Loss, r.Timer, len(times), r.Warmup)
	if r.Profile != nil {
		writeBenchProfile(stdout, r)
	}
	return nil
}

// writeBenchProfile prints the profiled step's per-op breakdown: a heading
// with the step, its op count and its device time against the median step
// time (the rest is host work and idle device), then the table.
func writeBenchProfile(w io.Writer, r benchTrainResult) {
	total := r.Profile.TotalMillis()
	fmt.Fprintf(w, "\nprofile of step %d (device timers): %d ops, %.4g ms of device time", r.ProfileStep, r.Profile.TotalCalls(), total)
	if r.Millis > 0 {
		fmt.Fprintf(w, " (%.0f%% of the median step)", 100*total/r.Millis)
	}
	fmt.Fprintf(w, "\n%s", r.Profile.Table())
}

// minBPEVocab is the smallest vocabulary of a byte-level BPE: 256 bytes and
// the end-of-text token.
const minBPEVocab = 257

// trainablePreset reports whether the runner can make a tokenizer of the
// preset's vocabulary from what it has: a BPE trained on the embedded
// corpus (which allows some 27k tokens) or GPT-2's, whose tokens also fill
// a larger vocabulary such as Qwen3's 152k (the other ids never occur). The
// MAD backbone's task vocabulary is out of reach.
func trainablePreset(mc model.Config) bool {
	return mc.Vocab >= minBPEVocab
}

// benchTrainPresets lists the presets "bench train" can run.
func benchTrainPresets() []string {
	var out []string
	for _, name := range model.Presets() {
		if mc, err := model.PresetConfig(name); err == nil && trainablePreset(mc) {
			out = append(out, name)
		}
	}
	return out
}

// devicePeakTFLOPs is the peak bf16 TFLOP/s the device reports
// (train.DevicePeak, the runner's own MFU reference); 0 if none or not a
// positive finite number.
func devicePeakTFLOPs(info engine.DeviceInfo) float64 {
	v := train.DevicePeak(info) / 1e12
	if !(v > 0) || math.IsInf(v, 0) {
		return 0
	}
	return v
}

// median returns the median of xs (the mean of the middle two for an even
// count; NaN for none); xs is sorted in place.
func median(xs []float64) float64 {
	sort.Float64s(xs)
	n := len(xs)
	if n == 0 {
		return math.NaN()
	}
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// prefixedError replaces an error's message (to drop a prefix that repeats
// the command's name) but keeps the error for errors.Is and errors.As.
type prefixedError struct {
	msg string
	err error
}

func (e *prefixedError) Error() string { return e.msg }
func (e *prefixedError) Unwrap() error { return e.err }
