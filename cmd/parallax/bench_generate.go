package main

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/model"
)

// benchGenerateResult is what "bench generate" measured (its --json output).
type benchGenerateResult struct {
	Device string `json:"device"`
	Op     string `json:"op"` // "generate parallax" or "generate softmax"
	Model  string `json:"model"`
	DType  string `json:"dtype"` // the compute dtype of weights, activations and KV cache
	// Weights is how the product weights are held: the compute dtype, or
	// "int8" (weight-only int8, --weights int8 or a quantized folder);
	// WeightMemory the device bytes every weight of the model takes (f32
	// masters left, compute copies, int8 values and scales).
	Weights      string `json:"weights"`
	WeightMemory int64  `json:"weight_memory_bytes"`
	Batch        int    `json:"batch"`
	PromptLen    int    `json:"prompt_len"`
	New          int    `json:"new"` // decode steps timed
	Params       int64  `json:"params"`
	// Prefill: one forward over the B prompts of P tokens that fills the
	// cache, up to the last position's logits on the host.
	PrefillMs         float64 `json:"prefill_ms"`
	PrefillTokensPerS float64 `json:"prefill_tokens_per_s"` // B P / prefill_ms
	// Decode: the median step, which gives every sequence its next token:
	// the forward and the greedy choice, on the device (only the ids read
	// back) where it can, else on the host from the logits read back, whose
	// part is sample_ms.
	DecodeMs         float64 `json:"decode_ms"`
	DecodeTokensPerS float64 `json:"decode_tokens_per_s"` // B / decode_ms
	SampleMs         float64 `json:"sample_ms"`
	Sampling         string  `json:"sampling"` // "device" or "host"
	// Bytes a decode step reads from device memory: every weight once in
	// the compute dtype (B rows of an untied embedding) and the KV cache at
	// the steps' mean length; per token is per step over B.
	WeightBytes   int64   `json:"weight_bytes"`
	KVBytes       int64   `json:"kv_bytes"`
	MeanKVLen     float64 `json:"mean_kv_len"`
	BytesPerStep  int64   `json:"bytes_per_step"`
	BytesPerToken float64 `json:"bytes_per_token"`
	GBs           float64 `json:"gbs"` // bytes_per_step / decode_ms
	// The memory roofline, where the device's bandwidth is known.
	Roofline   float64 `json:"roofline_fraction,omitempty"`
	PeakGBs    float64 `json:"peak_gbps,omitempty"`
	PeakSource string  `json:"peak_source,omitempty"`
	Timer      string  `json:"timer"`
	// The prefill's arithmetic (prefillFLOPs), its rate and the fraction
	// of the device's peak bf16 rate (where known) it reaches.
	PrefillFLOPs    float64 `json:"prefill_flops"`
	PrefillTFLOPs   float64 `json:"prefill_tflops"`
	PeakTFLOPs      float64 `json:"peak_tflops,omitempty"`
	PrefillRoofline float64 `json:"prefill_roofline_fraction,omitempty"`
	// With --profile: one decode step (the one after the timed ones) timed
	// op by op with the device's timers.
	Profile engine.Profile `json:"profile,omitempty"`
	// With --profile-prefill: one more prefill of the prompt, op by op.
	PrefillProfile engine.Profile `json:"prefill_profile,omitempty"`
}

// prefillFLOPs counts the products of a prefill of B prompts of P tokens:
// 2 flops a weight element a token for the blocks' linears (q, k, v, o,
// Parallax's r, gate, up, down), the head at the last position of each
// sequence only (the step computes no other logits), and causal
// attention's QK^T and PV (Parallax adds its two covariance products,
// four in all), 2 P (P + 1) / 2 D flops each per query head.
func prefillFLOPs(c model.Config, B, P int) float64 {
	d, q, kv, f := float64(c.Dim), float64(c.QDim()), float64(c.KVDim()), float64(c.FFN)
	per := q*d + 2*kv*d + d*q + 3*d*f
	products := 2.0
	if c.Parallax() {
		per += q * d
		products = 4
	}
	tokens := float64(B) * float64(P)
	linear := 2 * per * float64(c.Layers) * tokens
	head := 2 * d * float64(c.Vocab) * float64(B)
	pairs := float64(P) * float64(P+1) / 2
	attn := products * 2 * float64(B) * float64(c.Heads) * pairs * float64(c.HeadDim) * float64(c.Layers)
	return linear + head + attn
}

// runBenchGenerate is "parallax bench generate": KV-cache generation from a
// model directory, the prefill and the decode steps timed apart.
func runBenchGenerate(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench generate", benchUsage, benchExamples, stdout)
	dir := fs.String("model", "", "model directory (required)")
	batch := fs.Int("batch", 1, "sequences decoded together (the batched KV cache; all the same length)")
	promptLen := fs.Int("prompt-len", 128, "prompt tokens per sequence (random ids)")
	newTokens := fs.Int("new", 128, "decode steps timed (one token of every sequence each)")
	device := fs.String("device", "auto", "device ID")
	dtypeName := fs.String("dtype", "auto", dtypeUsage)
	weightsFlag := fs.String("weights", "stored", weightsUsage)
	seed := fs.Uint64("seed", 1, "seed of the random prompt tokens")
	peakGB := fs.Float64("peak-gbps", 0, "the device's memory ceiling in GB/s for the roofline fraction (default: what is known of the device)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	hostSample := fs.Bool("host-sample", false, "sample on the host from the logits even where the device picks the greedy token itself")
	profile := fs.Bool("profile", false, "after the timed steps, time every op of one more decode step with the device's timers and print the breakdown (CUDA and Vulkan devices)")
	profilePrefill := fs.Bool("profile-prefill", false, "after the timed steps, time every op of one more prefill of the prompt with the device's timers and print the breakdown (CUDA and Vulkan devices)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	switch {
	case *dir == "":
		return usagef("--model is required")
	case *batch < 1:
		return usagef("--batch %d must be >= 1", *batch)
	case *promptLen < 1:
		return usagef("--prompt-len %d must be >= 1", *promptLen)
	case *newTokens < 1:
		return usagef("--new %d must be >= 1", *newTokens)
	}
	// Positions and batch rows are int32 on the devices, and the sum of
	// --prompt-len and --new must not overflow.
	if err := checkFlags(fs,
		numFlag("batch").atLeast(1).atMost(math.MaxInt32),
		numFlag("prompt-len").atLeast(1).atMost(math.MaxInt32),
		numFlag("new").atLeast(1).atMost(math.MaxInt32),
		numFlag("peak-gbps").above(0).or(0, "what is known of the device"),
	); err != nil {
		return err
	}
	dt, err := parseDTypeFlag(*dtypeName)
	if err != nil {
		return err
	}
	weights, err := parseWeightsFlag(*weightsFlag)
	if err != nil {
		return err
	}
	mc, err := readModelConfig(*dir)
	if err != nil {
		return err
	}
	B, P, N := *batch, *promptLen, *newTokens
	if P+N > mc.MaxSeq {
		return usagef("--prompt-len %d + --new %d exceed the model's max_seq %d", P, N, mc.MaxSeq)
	}

	dev, m, err := openModel(*dir, *device, dt, false, weights)
	if err != nil {
		return err
	}
	defer dev.Close()
	defer m.Free()
	info := dev.Info()
	prof, canProfile := dev.(engine.Profiler)
	if (*profile || *profilePrefill) && !canProfile {
		return usagef("--profile: %s (%s) has no per-op device timers; profile on a CUDA or Vulkan device", info.ID(), info.Name)
	}
	extra := 0
	if *profile {
		extra = 1
	}
	if P+N+extra > mc.MaxSeq {
		return usagef("--profile needs one more position: --prompt-len %d + --new %d + 1 exceed the model's max_seq %d", P, N, mc.MaxSeq)
	}
	kv, err := m.NewKVCache(B, P+N+extra)
	if err != nil {
		return fmt.Errorf("bench generate: %w", err)
	}
	defer kv.Free()

	V := m.Config.Vocab
	rng := rand.New(rand.NewPCG(*seed, 0x5eed))
	prompt := make([]int32, B*P)
	for i := range prompt {
		prompt[i] = int32(rng.IntN(V))
	}
	greedy, err := model.NewSampler(model.SampleOptions{})
	if err != nil {
		return fmt.Errorf("bench generate: %w", err)
	}
	next := make([]int32, B)
	sample := func(logits []float32) {
		for b := range next {
			next[b] = int32(greedy.Sample(logits[b*V : (b+1)*V]))
		}
	}
	// Greedy on the device where it can (one id per sequence read back),
	// else on the host from the logits.
	_, devArgmax := dev.(engine.ArgMaxer)
	devArgmax = devArgmax && !*hostSample
	var logits []float32
	stepOnce := func(tokens []int32, T int) error {
		if devArgmax {
			ids, err := m.StepGreedy(kv, tokens, B, T)
			if err == nil {
				copy(next, ids)
			}
			return err
		}
		var err error
		if logits, err = m.Step(kv, tokens, B, T, true); err == nil {
			sample(logits)
		}
		return err
	}
	// Warm-up, untimed: the first prefill and decode steps compile kernels
	// and allocate the activations of both shapes.
	err = stepOnce(prompt, P)
	for i := 0; err == nil && i < min(N, 2); i++ {
		err = stepOnce(next, 1)
	}
	if err != nil {
		return fmt.Errorf("bench generate: warm-up: %w", err)
	}
	kv.Reset()

	start := time.Now()
	if err = stepOnce(prompt, P); err != nil {
		return fmt.Errorf("bench generate: prefill: %w", err)
	}
	prefill := time.Since(start).Seconds()
	steps := make([]float64, N)
	samples := make([]float64, N)
	for i := range N {
		start := time.Now()
		if err = stepOnce(next, 1); err != nil {
			return fmt.Errorf("bench generate: decode step %d: %w", i+1, err)
		}
		// A step ends with its tokens on the host, so it has waited for the
		// device: its wall clock is its whole cost.
		steps[i] = time.Since(start).Seconds()
	}
	if !devArgmax {
		// The host's share: sampling the last step's logits again.
		for i := range samples {
			t := time.Now()
			sample(logits)
			samples[i] = time.Since(t).Seconds()
		}
	}
	// profileOnce times every op of one more call of f with the device's
	// timers.
	profileOnce := func(what string, f func() error) (engine.Profile, error) {
		if err := prof.StartProfile(); err != nil {
			return nil, fmt.Errorf("bench generate: %w", err)
		}
		err := f()
		p, perr := prof.StopProfile()
		if err != nil {
			return nil, fmt.Errorf("bench generate: profiled %s: %w", what, err)
		}
		if perr != nil {
			return nil, fmt.Errorf("bench generate: %w", perr)
		}
		return p, nil
	}
	var profiled, prefillProfiled engine.Profile
	if *profile {
		if profiled, err = profileOnce("decode step", func() error { return stepOnce(next, 1) }); err != nil {
			return err
		}
	}
	if *profilePrefill {
		kv.Reset()
		if prefillProfiled, err = profileOnce("prefill", func() error { return stepOnce(prompt, P) }); err != nil {
			return err
		}
	}
	dec, smp := median(steps), median(samples)
	if !(prefill > 0) || !(dec > 0) {
		return fmt.Errorf("bench generate: prefill %v s, decode step %v s", prefill, dec)
	}

	c := m.Config
	meanLen := float64(P) + float64(N+1)/2 // a step attends over the cache with its own token
	kvBytes := int64(2 * float64(c.Layers*B*c.KVHeads*c.HeadDim*m.DType.Size()) * meanLen)
	wBytes := decodeWeightBytes(m, B)
	r := benchGenerateResult{Device: info.ID(), Op: "generate " + c.Attention, Model: *dir, DType: m.DType.String(),
		Weights: weightsName(m), WeightMemory: m.WeightBytes(),
		Batch: B, PromptLen: P, New: N, Params: c.NumParams(),
		PrefillMs: prefill * 1e3, PrefillTokensPerS: float64(B*P) / prefill,
		DecodeMs: dec * 1e3, DecodeTokensPerS: float64(B) / dec, SampleMs: smp * 1e3,
		WeightBytes: wBytes, KVBytes: kvBytes, MeanKVLen: meanLen, BytesPerStep: wBytes + kvBytes,
		BytesPerToken: float64(wBytes+kvBytes) / float64(B), Timer: "wall clock", Profile: profiled,
		Sampling: map[bool]string{true: "device", false: "host"}[devArgmax]}
	r.PrefillProfile = prefillProfiled
	r.PrefillFLOPs = prefillFLOPs(c, B, P)
	r.PrefillTFLOPs = r.PrefillFLOPs / prefill / 1e12
	if r.PeakTFLOPs = devicePeakTFLOPs(info); r.PeakTFLOPs > 0 {
		r.PrefillRoofline = r.PrefillTFLOPs / r.PeakTFLOPs
	}
	r.GBs = float64(r.BytesPerStep) / dec / 1e9
	r.PeakGBs, r.PeakSource = *peakGB, "--peak-gbps"
	if r.PeakGBs == 0 {
		r.PeakGBs, r.PeakSource = devicePeakGBs(info)
	}
	if r.PeakGBs > 0 {
		r.Roofline = r.GBs / r.PeakGBs
	}
	if *asJSON {
		return writeJSON(stdout, r)
	}
	defer func() {
		if r.Profile != nil {
			fmt.Fprintf(stdout, "\nprofile of one decode step (device timers): %d ops, %.4g ms of device time against %.4g ms of wall clock\n%s",
				r.Profile.TotalCalls(), r.Profile.TotalMillis(), r.DecodeMs, r.Profile.Table())
		}
		if r.PrefillProfile != nil {
			fmt.Fprintf(stdout, "\nprofile of one prefill (device timers): %d ops, %.4g ms of device time against %.4g ms of wall clock\n%s",
				r.PrefillProfile.TotalCalls(), r.PrefillProfile.TotalMillis(), r.PrefillMs, r.PrefillProfile.Table())
		}
	}()
	prefillRate := fmt.Sprintf("%.4g TFLOP/s", r.PrefillTFLOPs)
	if r.PrefillRoofline > 0 {
		prefillRate += fmt.Sprintf(", %.1f%% of %.4g", 100*r.PrefillRoofline, r.PeakTFLOPs)
	}
	fmt.Fprintf(stdout, "%s %s, batch %d, prompt %d + %d new, %s (%s weights, %s) on %s (%s): prefill %.4g ms (%.4g tokens/s, %s), decode %.4g ms/step (%.4g tokens/s, sampling %.2g ms), %s read per step, %.4g GB/s",
		r.Op, r.Model, r.Batch, r.PromptLen, r.New, r.DType, r.Weights, formatBytes(r.WeightMemory), r.Device, info.Name, r.PrefillMs, r.PrefillTokensPerS, prefillRate,
		r.DecodeMs, r.DecodeTokensPerS, r.SampleMs, formatBytes(r.BytesPerStep), r.GBs)
	if r.Roofline > 0 {
		fmt.Fprintf(stdout, ", %.1f%% of the %.4g GB/s memory roofline (%s)", 100*r.Roofline, r.PeakGBs, r.PeakSource)
	}
	fmt.Fprintf(stdout, " [%s, median of %d decode steps after a warm-up]\n", r.Timer, N)
	return nil
}

// decodeWeightBytes is what a decode step of B sequences reads of the
// weights: each tensor the forward reads (the int8 weight with its scales,
// else the compute copy, else the master) once, the padded head included,
// except an untied embedding, of which only the B looked-up rows are read.
func decodeWeightBytes(m *model.Model, B int) int64 {
	var n int64
	for _, p := range m.Params() {
		var bytes, rows int64
		switch {
		case p.Q != nil:
			bytes, rows = p.Q.Bytes(), int64(p.Q.Q.Dim(0))
		case p.C != nil:
			bytes, rows = int64(p.C.Bytes()), int64(p.C.Dim(0))
		default:
			bytes, rows = int64(p.W.Bytes()), int64(p.W.Dim(0))
		}
		if p.Kind == model.Embedding && p != m.HeadWeight() {
			n += int64(B) * (bytes / rows)
			continue
		}
		n += bytes
	}
	return n
}

// devicePeakGBs is the memory bandwidth a roofline is taken against: the
// measured H200 ceiling that 'bench decode' uses, else the theoretical
// figure a backend reports in its "mem_gbs" feature (CUDA does); 0 if
// neither.
func devicePeakGBs(info engine.DeviceInfo) (float64, string) {
	if strings.Contains(info.Name, "H200") {
		return 4400, "measured H200 ceiling"
	}
	if v, err := strconv.ParseFloat(info.Features["mem_gbs"], 64); err == nil && v > 0 && !math.IsInf(v, 0) {
		return v, "the device's mem_gbs"
	}
	return 0, ""
}
