package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/model/safetensors"
)

const opAttentionUsage = `
Usage:
  parallax op attention --in IN.safetensors --out OUT.safetensors [--device ID]
  parallax op attention --example IN.safetensors [--example-shape B,Hq,Hkv,L,D] [--seed N]

Runs an attention mechanism on tensors from IN and writes the results to
OUT. Float32 is expected; BF16, F16 and F64 inputs are converted to float32.
Tensors are row-major:

  q   [B,Hq,Lq,D]    queries (required)
  k   [B,Hkv,Lk,D]   keys (required); Hq must be a multiple of Hkv (GQA:
                     query head h reads key/value head h / (Hq/Hkv))
  v   [B,Hkv,Lk,D]   values (required)
  r   [B,Hq,Lq,D]    the Parallax probe (optional; without it "parallax" is
                     softmax attention)
  do  [B,Hq,Lq,D]    upstream gradient (optional): also compute the
                     gradients of sum(o * do)

Options are strings in the file's __metadata__:

  mechanism  parallax (default): o = o_SA - Sigma_KV r, with t = r.k unscaled
             softmax: plain softmax attention (no r)
             lla: exact local linear attention (no r, forward only)
             linear: o_i = sum_j (u_i . k_j) v_j over the visible keys
             affine-linear: uniform weights with the vbar intercept,
               o = vbar - Sigma_KV u
             where the probe u of the linear mechanisms is r if given, else q
  causal     "true" (default) or "false"; query i sees keys j <= i + Lk - Lq
  scale      q.k scale, default 1/sqrt(D) (not for the linear mechanisms)
  window     sliding window of keys ending at the diagonal; 0 (default) is
             none; needs causal
  lambda     LLA ridge, a number >= 0, default 0.1 (lla only)
  solver     LLA solver, "cg" (default) or "direct" (lla only)
  format     ignored (written by some PyTorch tools)

Any other tensor or metadata key is an error.

OUT holds float32 tensors:

  o                     [B,Hq,Lq,D]  the output, always
  lse                   [B,Hq,Lq]    row log-sum-exp (parallax, softmax)
  vbar                  [B,Hq,Lq,D]  softmax output o_SA (parallax with r)
  tbar                  [B,Hq,Lq]    sum_j p_ij r_i.k_j (parallax with r)
  rho_star              [B,Hq,Lq,D]  the solved probe (lla)
  eta                   [B,Hq,Lq]    boundary amplification (lla)
  dq, dk, dv            gradients, with do (parallax, softmax)
  dr                    with do and r (parallax)
  dr or dq, dk, dv      with do (linear mechanisms: the probe's gradient is
                        dr when the probe is r, dq when it is q)

and metadata recording mechanism, causal, scale, window, probe, lambda,
solver and device. A one-line summary goes to standard output.
`

const opAttentionExamples = `
  # A random example input, then Parallax attention with its backward:
  parallax op attention --example in.safetensors
  parallax op attention --in in.safetensors --out out.safetensors

  # Inputs dumped from PyTorch (pip install safetensors):
  #   from safetensors.torch import save_file
  #   save_file({"q": q.float().contiguous(), "k": k.float().contiguous(),
  #              "v": v.float().contiguous(), "r": r.float().contiguous()},
  #             "in.safetensors", metadata={"causal": "true"})
  parallax op attention --in in.safetensors --out out.safetensors --device cpu
`

func runOpAttention(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("op attention", opAttentionUsage, opAttentionExamples, stdout)
	inPath := fs.String("in", "", "input safetensors `file` (q, k, v, optional r, do)")
	outPath := fs.String("out", "", "output safetensors `file` to write")
	device := fs.String("device", "auto", "device to run on: auto, cpu, vulkan:N, cuda:N (see 'parallax devices')")
	example := fs.String("example", "", "write a random example input to `file` and exit")
	exShape := fs.IntSlice("example-shape", []int{1, 4, 2, 64, 32}, "B,Hq,Hkv,L,D of the --example input")
	seed := fs.Uint64("seed", 1, "random seed of the --example input")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	if *example != "" {
		if *inPath != "" || *outPath != "" {
			return usagef("--example writes an input file and exits; it cannot be combined with --in or --out")
		}
		return writeExample(stdout, *example, *exShape, *seed)
	}
	if fs.Changed("example-shape") || fs.Changed("seed") {
		return usagef("--example-shape and --seed only apply with --example")
	}
	switch {
	case *inPath == "":
		return usagef("missing --in (the input safetensors file)")
	case *outPath == "":
		return usagef("missing --out (the output safetensors file)")
	}

	in, err := readAttnInput(*inPath)
	if err != nil {
		return err
	}
	dev, err := engine.Open(*device)
	if err != nil {
		return err
	}
	defer dev.Close()
	res, err := runAttention(dev, in)
	if err != nil {
		return fmt.Errorf("%s: %w", *inPath, err)
	}
	if err := writeAttnOutput(*outPath, in, res); err != nil {
		return err
	}
	fmt.Fprintln(stdout, summary(in, res, *outPath))
	return nil
}

// summary is the one-line report of a run.
func summary(in *attnInput, res *attnResult, outPath string) string {
	var b strings.Builder
	mech := in.opts.Mechanism + " attention"
	if in.opts.Mechanism == mechParallax && in.r == nil {
		mech = "softmax attention (parallax without r)"
	}
	fmt.Fprintf(&b, "%s on %s: q %v, k/v %v", mech, res.device.ID(), in.q.shape, in.k.shape)
	if in.opts.Causal {
		b.WriteString(", causal")
	} else {
		b.WriteString(", non-causal")
	}
	if in.opts.Window > 0 {
		fmt.Fprintf(&b, ", window %d", in.opts.Window)
	}
	switch mech := in.opts.Mechanism; mech {
	case mechLinear, mechAffine:
		_, grad := in.probe()
		fmt.Fprintf(&b, ", probe %s", strings.TrimPrefix(grad, "d"))
	default:
		fmt.Fprintf(&b, ", scale %.4g", res.dims.Scale)
		if mech == mechLLA {
			fmt.Fprintf(&b, ", lambda %g, %s solver", in.opts.Lambda, in.opts.Solver)
		}
	}
	pass := "forward"
	if res.backward {
		pass = "forward+backward"
	}
	fmt.Fprintf(&b, "; %s %s", pass, formatDuration(res.elapsed))
	if o, vbar := res.output("o"), res.output("vbar"); o != nil && vbar != nil {
		fmt.Fprintf(&b, ", COR %.4g", correctionRatio(o, vbar))
	}
	var names []string
	for _, t := range res.outputs {
		names = append(names, t.name)
	}
	fmt.Fprintf(&b, "; wrote %s to %s", strings.Join(names, ", "), outPath)
	return b.String()
}

func formatDuration(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%.1fµs", float64(d)/float64(time.Microsecond))
	case d < time.Second:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.3fs", d.Seconds())
}

// writeExample writes a seeded random Parallax input: q, k, v and do drawn
// from N(0, 1), r from N(0, 0.1^2) (a small learned probe).
func writeExample(stdout io.Writer, path string, shape []int, seed uint64) error {
	if len(shape) != 5 {
		return usagef("--example-shape: want 5 numbers B,Hq,Hkv,L,D, got %d", len(shape))
	}
	b, hq, hkv, l, d := shape[0], shape[1], shape[2], shape[3], shape[4]
	for i, n := range shape {
		if n <= 0 {
			return usagef("--example-shape: %s must be positive, got %d", [...]string{"B", "Hq", "Hkv", "L", "D"}[i], n)
		}
	}
	if hq%hkv != 0 {
		return usagef("--example-shape: Hq %d is not a multiple of Hkv %d", hq, hkv)
	}
	qs := engine.Shape{b, hq, l, d}
	ks := engine.Shape{b, hkv, l, d}
	if qs.Validate() != nil || qs.Numel() > 1<<28 || ks.Numel() > 1<<28 {
		return usagef("--example-shape %v is too large for an example", shape)
	}
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	normal := func(n int, std float64) []float32 {
		out := make([]float32, n)
		for i := range out {
			out[i] = float32(rng.NormFloat64() * std)
		}
		return out
	}
	tensors := []safetensors.Tensor{
		safetensors.F32Tensor("q", qs, normal(qs.Numel(), 1)),
		safetensors.F32Tensor("k", ks, normal(ks.Numel(), 1)),
		safetensors.F32Tensor("v", ks, normal(ks.Numel(), 1)),
		safetensors.F32Tensor("r", qs, normal(qs.Numel(), 0.1)),
		safetensors.F32Tensor("do", qs, normal(qs.Numel(), 1)),
	}
	meta := map[string]string{"mechanism": mechParallax, "causal": "true"}
	if err := safetensors.Write(path, tensors, meta); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote example input %s: q, r, do %v; k, v %v; mechanism parallax, causal (seed %d)\n", path, qs, ks, seed)
	return nil
}
