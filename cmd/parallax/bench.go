package main

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/parallax-engine/parallax/engine"
)

const benchUsage = `
Usage:
  parallax bench attention|decode|matmul [--device ID] [--dtype DT] [--shape LIST] [flags]
  parallax bench train [--device ID] [--config NAME] [--attention A] [--steps N]
                       [--warmup W] [--batch B] [--seq L] [flags]
  parallax bench generate --model DIR [--batch B] [--prompt-len P] [--new N]
                          [--device ID] [--dtype DT] [flags]

Times one op on a device and prints the time, the achieved TFLOP/s and GB/s
and, where the device's ceilings are known (or given with --peak-tflops and
--peak-gbps), the fraction of that roofline. Devices that can time on the
GPU (Vulkan: timestamp queries) are timed there; others by the wall clock
around the op and a Sync. The median of --iters runs after one warm-up run
is reported.

train times whole training steps of a preset model instead, through the
runner of 'parallax train' (the embedded corpus, the dtype train picks;
GPT-2's tokens for a vocabulary of 50257 or more, so Qwen3's 151936-token
presets run at their true width, the ids past GPT-2's never occurring) with no evaluation and no checkpoint, its files in a temporary
directory that is removed afterwards. It reports the median wall-clock step
time of the steps after the W warm-up ones, tokens/s (B L per step), the
parameter count N, the final training loss and, where the device reports
its peak bf16 TFLOP/s (or --peak-tflops gives it), the model FLOP
utilisation MFU = 6 N tokens/s / peak.

  matmul     --shape M,N,K             FLOPs 2 M N K; bytes of A, B and C
  attention  --shape B,H,L,D           Parallax (or --softmax) prefill, causal
             [--backward]              FLOPs per tile as matrix products:
                                       forward 4 (softmax 2), backward 8
                                       (softmax 5), each 2 B H L^2 D (halved
                                       by the causal mask)
  decode     --shape B,Hq,Hkv,L,D      one query per head over a KV cache of
             [--queries N]             L entries (N queries, the last N
                                       positions: a chunk over the cache);
                                       bytes of K and V read
  generate   --model DIR               KV-cache generation from a model
             --batch B                 directory: random prompts of P tokens
             --prompt-len P --new N    (default 128) for B sequences (default
             --dtype DT                1), then N decode steps (default 128),
                                       in DT (auto: bf16 on GPUs). Reports the
                                       prefill's tokens/s, the median decode
                                       step (ms, tokens/s; the logits read
                                       back each step) and the bytes a step
                                       reads (weights in DT, KV cache at the
                                       mean length) against the memory ceiling
  train      --config NAME             model preset (default small)
             --attention A             parallax (default) or softmax
             --optimizer O             muon (default, Muon + AdamW) or adamw
             --batch B --seq L         tokens per step B L (default 16 x 512)
             --steps N --warmup W      N steps, the first W untimed
                                       (default 30 and 5)
             --profile                 also time every op of step W+1 with
                                       the device's timers (CUDA events,
                                       Vulkan timestamps) and print the
                                       breakdown: calls, ms, share and the
                                       achieved TFLOP/s or GB/s of each op

Known ceilings: NVIDIA H200 about 4.4 TB/s (decode's KV read, cuDNN) and
800 TFLOP/s (bf16 matrix products, cuBLAS), both measured.
`

const benchExamples = `
  parallax bench matmul --device vulkan:0 --shape 4096,4096,4096 --dtype f16
  parallax bench attention --device vulkan:0 --shape 8,16,4096,128 --dtype bf16 --backward
  parallax bench decode --device vulkan:0 --shape 32,32,8,16384,128 --dtype bf16
  parallax bench generate --device cuda:0 --model Qwen3-0.6B --batch 8 --prompt-len 512 --new 128
  parallax bench train --device cuda:0 --config small --batch 16 --seq 512 --json
  parallax bench train --device cpu --config tiny --batch 2 --seq 32 --steps 6 --warmup 2
  parallax bench train --device cuda:0 --config small --steps 8 --warmup 3 --profile
`

type benchResult struct {
	Device   string  `json:"device"`
	Op       string  `json:"op"`
	Shape    string  `json:"shape"`
	DType    string  `json:"dtype"`
	Millis   float64 `json:"ms"`
	TFLOPs   float64 `json:"tflops"`
	GBs      float64 `json:"gbs"`
	Roofline float64 `json:"roofline_fraction,omitempty"`
	Bound    string  `json:"bound"`
	Timer    string  `json:"timer"`
}

func runBench(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			fmt.Fprint(stdout, strings.TrimLeft(benchUsage, "\n"))
			fmt.Fprintf(stdout, "\nExamples:\n%s", strings.TrimLeft(benchExamples, "\n"))
			return errHelp
		}
		return usagef("missing what to bench: attention, decode, matmul or train, or generate")
	}
	what := args[0]
	if what == "train" {
		return runBenchTrain(args[1:], stdout, stderr)
	}
	if what == "generate" {
		return runBenchGenerate(args[1:], stdout, stderr)
	}
	if what != "attention" && what != "decode" && what != "matmul" {
		return usagef("unknown benchmark %q: attention, decode, matmul or train, or generate", what)
	}
	fs := newFlagSet("bench "+what, benchUsage, benchExamples, stdout)
	device := fs.String("device", "auto", "device ID")
	dtypeFlag := fs.String("dtype", "", "input dtype: f32, bf16, f16 (default bf16; f32 on the CPU)")
	shapeFlag := fs.String("shape", "", "comma-separated sizes (see above; default depends on the device)")
	iters := fs.Int("iters", 5, "timed runs (the median is reported)")
	flush := fs.Bool("flush", true, "on a device with device timers that can flush its caches (CUDA), evict the L2 before each timed run, so inputs come from memory (and the launch hides behind the flush), as in a model and as the PyTorch peers time")
	softmax := fs.Bool("softmax", false, "attention: softmax attention instead of Parallax")
	backward := fs.Bool("backward", false, "attention: time the backward instead of the forward")
	queries := fs.Int("queries", 1, "decode: query tokens a sequence decodes at once (a chunk of prompt over the cache), each seeing the cache up to its own position")
	peakTF := fs.Float64("peak-tflops", 0, "the device's matrix ceiling in TFLOP/s (for the roofline fraction)")
	peakGB := fs.Float64("peak-gbps", 0, "the device's memory ceiling in GB/s (for the roofline fraction)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	// The command line is checked whole before the device is opened.
	if err := checkFlags(fs,
		numFlag("iters").atLeast(1).atMost(maxBenchIters),
		numFlag("queries").atLeast(1).atMost(4096),
		numFlag("peak-tflops").above(0).or(0, "what is known of the device"),
		numFlag("peak-gbps").above(0).or(0, "what is known of the device"),
	); err != nil {
		return err
	}
	var explicitDT engine.DType
	if *dtypeFlag != "" {
		dt, err := engine.ParseDType(*dtypeFlag)
		if err != nil || !dt.IsFloat() {
			return usagef("--dtype: %q is not f32, bf16 or f16", *dtypeFlag)
		}
		explicitDT = dt
	}
	if *shapeFlag != "" {
		if err := checkBenchShape(what, *shapeFlag); err != nil {
			return err
		}
	}
	dev, err := engine.Open(*device)
	if err != nil {
		return err
	}
	defer dev.Close()
	info := dev.Info()
	small := info.Kind == engine.KindSoftware || info.Kind == engine.KindCPU
	dt := engine.BF16
	if info.Kind == engine.KindCPU {
		dt = engine.F32
	}
	if explicitDT != 0 {
		dt = explicitDT
	}
	if *peakTF == 0 && *peakGB == 0 && strings.Contains(info.Name, "H200") {
		*peakTF, *peakGB = 800, 4400
	}

	var (
		shape        []int
		flops, bytes float64
		prepare      func() (run func() error, free func(), err error)
	)
	sz := float64(dt.Size())
	switch what {
	case "matmul":
		shape = []int{4096, 4096, 4096}
		if small {
			shape = []int{256, 256, 256}
		}
		if shape, err = benchShape(*shapeFlag, shape, "M,N,K"); err != nil {
			return err
		}
		m, n, k := shape[0], shape[1], shape[2]
		flops = 2 * float64(m) * float64(n) * float64(k)
		bytes = sz*float64(m*k+k*n) + 4*float64(m*n)
		prepare = func() (func() error, func(), error) {
			ts := newBenchTensors(dev)
			a, b, c := ts.alloc(dt, m, k), ts.alloc(dt, k, n), ts.alloc(engine.F32, m, n)
			if ts.err != nil {
				return nil, ts.free, ts.err
			}
			return func() error { return dev.MatMul(c, a, b, engine.MatMulOpts{}) }, ts.free, nil
		}
	case "attention":
		shape = []int{8, 16, 4096, 128}
		if small {
			shape = []int{1, 2, 256, 64}
		}
		if shape, err = benchShape(*shapeFlag, shape, "B,H,L,D"); err != nil {
			return err
		}
		b, h, l, d := shape[0], shape[1], shape[2], shape[3]
		products := 4.0
		if *softmax {
			products = 2
		}
		if *backward {
			products = 8
			if *softmax {
				products = 5
			}
		}
		flops = products * 2 * float64(b*h) * float64(l) * float64(l) * float64(d) / 2
		bytes = sz * float64(b*h*l*d) * 4
		if *backward {
			bytes *= 2.5
		}
		prepare = func() (func() error, func(), error) {
			ts := newBenchTensors(dev)
			q, k, v, o := ts.alloc(dt, b, h, l, d), ts.alloc(dt, b, h, l, d), ts.alloc(dt, b, h, l, d), ts.alloc(dt, b, h, l, d)
			lse := ts.alloc(engine.F32, b, h, l)
			a := engine.AttentionArgs{Q: q, K: k, V: v, O: o, LSE: lse, AttentionOpts: engine.AttentionOpts{Causal: true}}
			if !*softmax {
				a.R, a.Vbar, a.Tbar = ts.alloc(dt, b, h, l, d), ts.alloc(dt, b, h, l, d), ts.alloc(engine.F32, b, h, l)
			}
			if ts.err != nil {
				return nil, ts.free, ts.err
			}
			if !*backward {
				return func() error { return dev.Attention(a) }, ts.free, nil
			}
			if err := dev.Attention(a); err != nil {
				return nil, ts.free, err
			}
			ba := engine.AttentionBackwardArgs{Q: q, K: k, V: v, R: a.R, O: o, DO: ts.alloc(dt, b, h, l, d),
				LSE: lse, Vbar: a.Vbar, Tbar: a.Tbar,
				DQ: ts.alloc(dt, b, h, l, d), DK: ts.alloc(dt, b, h, l, d), DV: ts.alloc(dt, b, h, l, d),
				AttentionOpts: a.AttentionOpts}
			if !*softmax {
				ba.DR = ts.alloc(dt, b, h, l, d)
			}
			if ts.err != nil {
				return nil, ts.free, ts.err
			}
			return func() error { return dev.AttentionBackward(ba) }, ts.free, nil
		}
	case "decode":
		shape = []int{32, 32, 8, 16384, 128}
		if small {
			shape = []int{2, 8, 2, 1024, 64}
		}
		if shape, err = benchShape(*shapeFlag, shape, "B,Hq,Hkv,L,D"); err != nil {
			return err
		}
		b, hq, hkv, l, d := shape[0], shape[1], shape[2], shape[3], shape[4]
		if hkv == 0 || hq%hkv != 0 {
			return usagef("--shape: Hq %d is not a multiple of Hkv %d", hq, hkv)
		}
		lq := *queries
		if lq > l {
			return usagef("--queries %d: more than the cache's %d keys", lq, l)
		}
		bytes = 2 * sz * float64(b*hkv*l*d)
		flops = 4 * 2 * float64(b*hq*lq*l*d)
		if *softmax {
			flops /= 2
		}
		prepare = func() (func() error, func(), error) {
			ts := newBenchTensors(dev)
			q, o := ts.alloc(dt, b, hq, lq, d), ts.alloc(dt, b, hq, lq, d)
			kc, vc := ts.alloc(dt, b, hkv, l, d), ts.alloc(dt, b, hkv, l, d)
			lens := make([]int32, b)
			for i := range lens {
				lens[i] = int32(l)
			}
			lt, err := engine.FromInt32(dev, lens, b)
			if err != nil {
				return nil, ts.free, err
			}
			ts.list = append(ts.list, lt)
			a := engine.DecodeArgs{Q: q, KCache: kc, VCache: vc, Lens: lt, O: o}
			if !*softmax {
				a.R = ts.alloc(dt, b, hq, lq, d)
			}
			if ts.err != nil {
				return nil, ts.free, ts.err
			}
			return func() error { return dev.DecodeAttention(a) }, ts.free, nil
		}
	}

	run, free, err := prepare()
	defer free()
	if err != nil {
		return fmt.Errorf("bench %s: %w", what, err)
	}
	timer := "wall clock"
	tg, hasGPU := dev.(engine.Timer)
	fl, canFlush := dev.(engine.CacheFlusher)
	canFlush = canFlush && hasGPU && *flush
	switch {
	case canFlush:
		timer = "device timestamps, L2 flushed before each run"
	case hasGPU:
		timer = "device timestamps"
	}
	timeOnce := func() (time.Duration, error) {
		if hasGPU {
			if canFlush {
				if err := fl.FlushCaches(); err != nil {
					return 0, err
				}
			}
			return tg.Timed(run)
		}
		start := time.Now()
		if err := run(); err != nil {
			return 0, err
		}
		err := dev.Sync()
		return time.Since(start), err
	}
	if _, err := timeOnce(); err != nil { // warm-up: pipelines, caches
		return fmt.Errorf("bench %s: %w", what, err)
	}
	times := make([]time.Duration, *iters)
	for i := range times {
		if times[i], err = timeOnce(); err != nil {
			return fmt.Errorf("bench %s: %w", what, err)
		}
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	med := times[len(times)/2].Seconds()

	name := what
	if what != "matmul" {
		if *softmax {
			name += " softmax"
		} else {
			name += " parallax"
		}
		if *backward {
			name += " backward"
		}
	}
	r := benchResult{Device: info.ID(), Op: name, Shape: engine.Shape(shape).String(), DType: dt.String(),
		Millis: med * 1e3, TFLOPs: flops / med / 1e12, GBs: bytes / med / 1e9, Timer: timer}
	// The bound that matters: memory for decode, matrix work otherwise.
	if what == "decode" {
		r.Bound = "memory"
		if *peakGB > 0 {
			r.Roofline = r.GBs / *peakGB
		}
	} else {
		r.Bound = "compute"
		if *peakTF > 0 {
			r.Roofline = r.TFLOPs / *peakTF
		}
	}
	if *asJSON {
		return writeJSON(stdout, r)
	}
	fmt.Fprintf(stdout, "%s %s %s on %s (%s): %.4g ms, %.4g TFLOP/s, %.4g GB/s",
		r.Op, r.Shape, r.DType, r.Device, info.Name, r.Millis, r.TFLOPs, r.GBs)
	if r.Roofline > 0 {
		fmt.Fprintf(stdout, ", %.1f%% of the %s roofline", 100*r.Roofline, r.Bound)
	}
	fmt.Fprintf(stdout, " [%s, median of %d]\n", timer, *iters)
	return nil
}

// maxBenchIters bounds --iters: the timings of every run are kept.
const maxBenchIters = 1_000_000

// benchLayouts are the --shape layouts of the op benchmarks.
var benchLayouts = map[string]string{"matmul": "M,N,K", "attention": "B,H,L,D", "decode": "B,Hq,Hkv,L,D"}

// checkBenchShape checks a --shape given to benchmark what as the
// benchmark itself parses it, before the device is opened.
func checkBenchShape(what, s string) error {
	layout := benchLayouts[what]
	shape, err := benchShape(s, make([]int, strings.Count(layout, ",")+1), layout)
	if err != nil {
		return err
	}
	if what == "decode" && shape[1]%shape[2] != 0 {
		return usagef("--shape: Hq %d is not a multiple of Hkv %d", shape[1], shape[2])
	}
	return nil
}

// benchShape parses --shape or returns def.
func benchShape(s string, def []int, layout string) ([]int, error) {
	if s == "" {
		return def, nil
	}
	parts := strings.Split(s, ",")
	if len(parts) != len(def) {
		return nil, usagef("--shape %q: want %s", s, layout)
	}
	out := make([]int, len(parts))
	for i, p := range parts {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n <= 0 || n > math.MaxInt32 {
			return nil, usagef("--shape %q: %q is not a positive size (want %s)", s, p, layout)
		}
		out[i] = n
	}
	return out, nil
}

// benchTensors allocates a benchmark's tensors (filled with a small
// constant: the values do not change the timing) and frees them.
type benchTensors struct {
	dev  engine.Device
	list []*engine.Tensor
	err  error
}

func newBenchTensors(dev engine.Device) *benchTensors { return &benchTensors{dev: dev} }

func (b *benchTensors) alloc(dt engine.DType, shape ...int) *engine.Tensor {
	if b.err != nil {
		return nil
	}
	t, err := b.dev.Alloc(dt, shape...)
	if err == nil {
		err = b.dev.Fill(t, 0.03125)
	}
	if err != nil {
		b.err = err
		return nil
	}
	b.list = append(b.list, t)
	return t
}

func (b *benchTensors) free() {
	for _, t := range b.list {
		b.dev.Free(t)
	}
	b.list = nil
}
