package main

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/ref"
	"github.com/parallax-engine/parallax/model/safetensors"
)

// The attention mechanisms "parallax op attention" runs.
const (
	mechParallax = "parallax"      // softmax attention with the covariance correction (r optional)
	mechSoftmax  = "softmax"       // plain softmax attention (no r)
	mechLLA      = "lla"           // exact local linear attention (no r, no backward)
	mechLinear   = "linear"        // uniform, unnormalised linear attention, probe r or q
	mechAffine   = "affine-linear" // uniform weights with the vbar intercept, probe r or q
)

var mechanisms = []string{mechParallax, mechSoftmax, mechLLA, mechLinear, mechAffine}

// defaultLambda is the LLA ridge used when the metadata gives none: large
// enough to keep Sigma_KK + lambda I well conditioned for the first rows of
// a causal sequence (which see one or two keys), small next to the unit
// variance of typical normalised keys.
const defaultLambda = 0.1

// Input tensors and metadata keys "op attention" accepts.
var (
	attnTensorNames = []string{"q", "k", "v", "r", "do"}
	// "format" is written by some PyTorch tools; it is accepted and ignored.
	attnMetadataKeys = []string{"mechanism", "causal", "scale", "window", "lambda", "solver", "format"}
)

// attnOptions are the options read from the input's metadata.
type attnOptions struct {
	Mechanism string
	Causal    bool
	Scale     float32 // 0: 1/sqrt(D)
	Window    int
	Lambda    float32 // lla only
	Solver    engine.LLASolver
}

func (o attnOptions) engineOpts() engine.AttentionOpts {
	return engine.AttentionOpts{Causal: o.Causal, Scale: o.Scale, Window: o.Window}
}

// parseAttnOptions reads and validates the options in a safetensors
// __metadata__ map.
func parseAttnOptions(meta map[string]string) (attnOptions, error) {
	o := attnOptions{Mechanism: mechParallax, Causal: true, Lambda: defaultLambda}
	var unknown []string
	for k := range meta {
		if !contains(attnMetadataKeys, k) {
			unknown = append(unknown, strconv.Quote(k))
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return o, fmt.Errorf("unknown metadata key(s) %s (accepted: %s)", strings.Join(unknown, ", "), strings.Join(attnMetadataKeys, ", "))
	}
	if s, ok := meta["mechanism"]; ok {
		m := strings.ToLower(strings.TrimSpace(s))
		if !contains(mechanisms, m) {
			return o, fmt.Errorf("metadata \"mechanism\": unknown %q (want %s)", s, strings.Join(mechanisms, ", "))
		}
		o.Mechanism = m
	}
	if s, ok := meta["causal"]; ok {
		switch strings.ToLower(strings.TrimSpace(s)) {
		case "true":
			o.Causal = true
		case "false":
			o.Causal = false
		default:
			return o, fmt.Errorf("metadata \"causal\": want \"true\" or \"false\", got %q", s)
		}
	}
	if s, ok := meta["scale"]; ok {
		if o.Mechanism == mechLinear || o.Mechanism == mechAffine {
			return o, fmt.Errorf("metadata \"scale\": not used by mechanism %q (it has no q.k scores); remove it", o.Mechanism)
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(s), 32)
		if err != nil || f == 0 || math.IsInf(f, 0) || math.IsNaN(f) {
			return o, fmt.Errorf("metadata \"scale\": want a finite non-zero number (default 1/sqrt(D)), got %q", s)
		}
		o.Scale = float32(f)
	}
	if s, ok := meta["window"]; ok {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 0 {
			return o, fmt.Errorf("metadata \"window\": want a non-negative integer (0: no sliding window), got %q", s)
		}
		if n > 0 && !o.Causal {
			return o, fmt.Errorf("metadata \"window\": a sliding window (%d) needs causal \"true\"", n)
		}
		o.Window = n
	}
	if s, ok := meta["lambda"]; ok {
		if o.Mechanism != mechLLA {
			return o, fmt.Errorf("metadata \"lambda\": only used by mechanism \"lla\", not %q; remove it", o.Mechanism)
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(s), 32)
		if err != nil || !(f >= 0) || math.IsInf(f, 0) {
			return o, fmt.Errorf("metadata \"lambda\": want a finite number >= 0, got %q", s)
		}
		o.Lambda = float32(f)
	}
	if s, ok := meta["solver"]; ok {
		if o.Mechanism != mechLLA {
			return o, fmt.Errorf("metadata \"solver\": only used by mechanism \"lla\", not %q; remove it", o.Mechanism)
		}
		switch strings.ToLower(strings.TrimSpace(s)) {
		case "cg":
			o.Solver = engine.SolveCG
		case "direct":
			o.Solver = engine.SolveDirect
		default:
			return o, fmt.Errorf("metadata \"solver\": want \"cg\" or \"direct\", got %q", s)
		}
	}
	return o, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// hostTensor is a float32 tensor in host memory.
type hostTensor struct {
	name  string
	shape engine.Shape
	data  []float32
}

// attnInput is a validated "op attention" input file.
type attnInput struct {
	path           string
	q, k, v, r, do *hostTensor // r and do may be nil
	opts           attnOptions
}

// readAttnInput reads and validates an attention input file. Errors name
// the file and the tensor or metadata key at fault.
func readAttnInput(path string) (*attnInput, error) {
	f, err := safetensors.Open(path)
	if err != nil {
		return nil, err // names the file already
	}
	defer f.Close()
	in, err := loadAttnInput(f)
	var nf namesFile
	if errors.As(err, &nf) {
		return nil, nf.error
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	in.path = path
	return in, nil
}

// namesFile marks an error whose message already names the input file.
type namesFile struct{ error }

func loadAttnInput(f *safetensors.File) (*attnInput, error) {
	var unknown []string
	for _, n := range f.Names() {
		if !contains(attnTensorNames, n) {
			unknown = append(unknown, strconv.Quote(n))
		}
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("unknown tensor(s) %s (accepted: q, k, v, and optionally r, do)", strings.Join(unknown, ", "))
	}
	opts, err := parseAttnOptions(f.Metadata())
	if err != nil {
		return nil, err
	}
	// Check every tensor's dtype and shape from the header first, so a bad
	// input is reported before any data is read.
	in := &attnInput{opts: opts}
	layouts := map[string]string{"q": "[B,Hq,Lq,D]", "k": "[B,Hkv,Lk,D]", "v": "[B,Hkv,Lk,D]", "r": "[B,Hq,Lq,D]", "do": "[B,Hq,Lq,D]"}
	slots := map[string]**hostTensor{"q": &in.q, "k": &in.k, "v": &in.v, "r": &in.r, "do": &in.do}
	for _, name := range attnTensorNames {
		info, ok := f.Info(name)
		if !ok {
			if name == "q" || name == "k" || name == "v" {
				return nil, fmt.Errorf("missing tensor %q %s", name, layouts[name])
			}
			continue
		}
		switch info.DType {
		case "F32", "BF16", "F16", "F64":
		default:
			return nil, fmt.Errorf("%s: want dtype F32 (BF16, F16 and F64 are converted), got %s", name, info.DType)
		}
		if len(info.Shape) != 4 {
			return nil, fmt.Errorf("%s: want rank 4 %s, got %v", name, layouts[name], engine.Shape(info.Shape))
		}
		if err := engine.Shape(info.Shape).Validate(); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		*slots[name] = &hostTensor{name: name, shape: engine.Shape(info.Shape)}
	}
	if err := in.checkShapes(); err != nil {
		return nil, err
	}
	for _, name := range attnTensorNames {
		if t := *slots[name]; t != nil {
			if t.data, err = f.Float32(name); err != nil {
				return nil, namesFile{err}
			}
		}
	}
	return in, nil
}

// checkShapes validates how the tensors' shapes and the mechanism fit
// together. The engine's own argument checks run again on the device.
func (in *attnInput) checkShapes() error {
	qs, ks := in.q.shape, in.k.shape
	if ks[0] != qs[0] || ks[3] != qs[3] {
		return fmt.Errorf("k: shape %v does not match q %v (want [%d,Hkv,Lk,%d]: the same B and D as q)", ks, qs, qs[0], qs[3])
	}
	if !in.v.shape.Equal(ks) {
		return fmt.Errorf("v: want the shape of k %v, got %v", ks, in.v.shape)
	}
	if ks[1] == 0 || qs[1]%ks[1] != 0 {
		return fmt.Errorf("k: %d key/value heads do not divide the %d query heads of q (grouped-query attention needs Hq = G*Hkv)", ks[1], qs[1])
	}
	for _, t := range []*hostTensor{in.r, in.do} {
		if t != nil && !t.shape.Equal(qs) {
			return fmt.Errorf("%s: want the shape of q %v, got %v", t.name, qs, t.shape)
		}
	}
	switch in.opts.Mechanism {
	case mechSoftmax:
		if in.r != nil {
			return errors.New(`r: mechanism "softmax" takes no probe; remove r, or use mechanism "parallax"`)
		}
	case mechLLA:
		if in.r != nil {
			return errors.New(`r: mechanism "lla" solves for its probe and takes no r; remove r`)
		}
		if in.do != nil {
			return errors.New(`do: lla has no backward (it is a forward-only reference); remove do`)
		}
	}
	return nil
}

// probe returns the tensor a linear mechanism uses as its probe and the name
// of its gradient in the output: r (dr) when given, else q (dq).
func (in *attnInput) probe() (*hostTensor, string) {
	if in.r != nil {
		return in.r, "dr"
	}
	return in.q, "dq"
}

// attnResult is what running the op produced.
type attnResult struct {
	outputs  []*hostTensor // in the order they are reported
	device   engine.DeviceInfo
	dims     engine.AttnDims
	backward bool
	elapsed  time.Duration // from the first op to the end of Sync
}

// output returns the named output tensor or nil.
func (r *attnResult) output(name string) *hostTensor {
	for _, t := range r.outputs {
		if t.name == name {
			return t
		}
	}
	return nil
}

// deviceTensors tracks the tensors one run allocates so they can be freed.
type deviceTensors struct {
	dev engine.Device
	all []*engine.Tensor
	// names maps a tensor to its output name, in allocation order.
	outs  []*engine.Tensor
	names []string
}

func (s *deviceTensors) upload(h *hostTensor) (*engine.Tensor, error) {
	if h == nil {
		return nil, nil
	}
	t, err := engine.FromFloat32(s.dev, engine.F32, h.data, h.shape...)
	if err != nil {
		return nil, fmt.Errorf("upload %s %v to %s: %w", h.name, h.shape, s.dev.Info().ID(), err)
	}
	s.all = append(s.all, t)
	return t, nil
}

// output allocates an F32 output tensor that will be downloaded as name.
func (s *deviceTensors) output(name string, shape ...int) (*engine.Tensor, error) {
	t, err := s.dev.Alloc(engine.F32, shape...)
	if err != nil {
		return nil, fmt.Errorf("allocate %s %v on %s: %w", name, engine.Shape(shape), s.dev.Info().ID(), err)
	}
	s.all = append(s.all, t)
	s.outs = append(s.outs, t)
	s.names = append(s.names, name)
	return t, nil
}

func (s *deviceTensors) free() {
	for _, t := range s.all {
		s.dev.Free(t)
	}
	s.all = nil
}

// invalidInput wraps an engine argument error (which names the op and the
// operand) as a problem with the user's input.
func invalidInput(err error) error {
	return fmt.Errorf("invalid input: %w", err)
}

// runAttention runs in's mechanism (and its backward when in.do is set) on
// dev and downloads the results.
func runAttention(dev engine.Device, in *attnInput) (*attnResult, error) {
	s := &deviceTensors{dev: dev}
	defer s.free()
	res := &attnResult{device: dev.Info(), backward: in.do != nil}
	id := res.device.ID()
	qs := in.q.shape
	B, Hq, Lq := qs[0], qs[1], qs[2]
	opts := in.opts.engineOpts()
	mech := in.opts.Mechanism

	var q, k, v, r, dO *engine.Tensor
	var err error
	for _, x := range []struct {
		dst **engine.Tensor
		h   *hostTensor
	}{{&q, in.q}, {&k, in.k}, {&v, in.v}, {&r, in.r}, {&dO, in.do}} {
		if *x.dst, err = s.upload(x.h); err != nil {
			return nil, err
		}
	}

	// Build and check every op's arguments first, so a bad input is reported
	// before anything runs; then run them.
	var steps []func() error
	var stepNames []string
	add := func(name string, fn func() error) {
		stepNames = append(stepNames, name)
		steps = append(steps, fn)
	}
	alloc := func(name string, shape ...int) *engine.Tensor {
		if err != nil {
			return nil
		}
		var t *engine.Tensor
		t, err = s.output(name, shape...)
		return t
	}

	switch mech {
	case mechParallax, mechSoftmax:
		a := engine.AttentionArgs{Q: q, K: k, V: v, R: r, AttentionOpts: opts}
		a.O = alloc("o", qs...)
		a.LSE = alloc("lse", B, Hq, Lq)
		if r != nil {
			a.Vbar = alloc("vbar", qs...)
			a.Tbar = alloc("tbar", B, Hq, Lq)
		}
		if err != nil {
			return nil, err
		}
		if res.dims, err = engine.CheckAttention(nil, a); err != nil {
			return nil, invalidInput(err)
		}
		add("forward", func() error { return dev.Attention(a) })
		if dO != nil {
			b := engine.AttentionBackwardArgs{Q: q, K: k, V: v, R: r, O: a.O, DO: dO,
				LSE: a.LSE, Vbar: a.Vbar, Tbar: a.Tbar, AttentionOpts: opts}
			b.DQ = alloc("dq", qs...)
			b.DK = alloc("dk", in.k.shape...)
			b.DV = alloc("dv", in.v.shape...)
			if r != nil {
				b.DR = alloc("dr", qs...)
			}
			if err != nil {
				return nil, err
			}
			if _, err := engine.CheckAttentionBackward(nil, b); err != nil {
				return nil, invalidInput(err)
			}
			add("backward", func() error { return dev.AttentionBackward(b) })
		}
	case mechLLA:
		a := engine.LLAArgs{Q: q, K: k, V: v, Lambda: in.opts.Lambda, Solver: in.opts.Solver, AttentionOpts: opts}
		a.O = alloc("o", qs...)
		a.RhoStar = alloc("rho_star", qs...)
		a.Eta = alloc("eta", B, Hq, Lq)
		if err != nil {
			return nil, err
		}
		if res.dims, err = engine.CheckLLA(nil, a); err != nil {
			return nil, invalidInput(err)
		}
		add("forward", func() error { return dev.LLA(a) })
	case mechLinear, mechAffine:
		probe, gradName := in.probe()
		p := q
		if probe == in.r {
			p = r
		}
		a := engine.LinearAttentionArgs{R: p, K: k, V: v, Affine: mech == mechAffine, AttentionOpts: opts}
		a.O = alloc("o", qs...)
		if err != nil {
			return nil, err
		}
		if res.dims, err = engine.CheckLinearAttention(nil, a); err != nil {
			return nil, invalidInput(err)
		}
		add("forward", func() error { return dev.LinearAttention(a) })
		if dO != nil {
			b := engine.LinearAttentionBackwardArgs{R: p, K: k, V: v, DO: dO, Affine: a.Affine, AttentionOpts: opts}
			b.DR = alloc(gradName, qs...)
			b.DK = alloc("dk", in.k.shape...)
			b.DV = alloc("dv", in.v.shape...)
			if err != nil {
				return nil, err
			}
			if _, err := engine.CheckLinearAttentionBackward(nil, b); err != nil {
				return nil, invalidInput(err)
			}
			add("backward", func() error { return dev.LinearAttentionBackward(b) })
		}
	default:
		return nil, fmt.Errorf("mechanism %q is not implemented", mech)
	}

	start := time.Now()
	for i, step := range steps {
		if err := step(); err != nil {
			return nil, fmt.Errorf("%s %s on %s: %w", mech, stepNames[i], id, err)
		}
	}
	if err := dev.Sync(); err != nil {
		return nil, fmt.Errorf("%s on %s: %w", mech, id, err)
	}
	res.elapsed = time.Since(start)

	for i, t := range s.outs {
		vals, err := engine.Float32s(t)
		if err != nil {
			return nil, fmt.Errorf("download %s from %s: %w", s.names[i], id, err)
		}
		res.outputs = append(res.outputs, &hostTensor{name: s.names[i], shape: t.Shape(), data: vals})
	}
	return res, nil
}

// outputMetadata records how the outputs were computed.
func outputMetadata(in *attnInput, res *attnResult) map[string]string {
	o := in.opts
	m := map[string]string{
		"mechanism": o.Mechanism,
		"causal":    strconv.FormatBool(o.Causal),
		"window":    strconv.Itoa(o.Window),
		"device":    res.device.ID(),
		"generator": "parallax " + version,
	}
	switch o.Mechanism {
	case mechLinear, mechAffine:
		if in.r != nil {
			m["probe"] = "r"
		} else {
			m["probe"] = "q"
		}
	default:
		m["scale"] = strconv.FormatFloat(float64(res.dims.Scale), 'g', -1, 32)
	}
	switch o.Mechanism {
	case mechParallax:
		if in.r == nil {
			m["probe"] = "none (softmax attention)"
		} else {
			m["probe"] = "r"
		}
	case mechLLA:
		m["lambda"] = strconv.FormatFloat(float64(o.Lambda), 'g', -1, 32)
		m["solver"] = o.Solver.String()
	}
	return m
}

// writeAttnOutput writes the results as F32 tensors with outputMetadata.
func writeAttnOutput(path string, in *attnInput, res *attnResult) error {
	var ts []safetensors.Tensor
	for _, t := range res.outputs {
		ts = append(ts, safetensors.F32Tensor(t.name, t.shape, t.data))
	}
	return safetensors.Write(path, ts, outputMetadata(in, res))
}

// correctionRatio is COR = mean over rows of ||vbar - o|| / ||vbar|| (rows
// with vbar = 0 count as 0): ref.CorrectionRatio of the host outputs.
func correctionRatio(o, vbar *hostTensor) float64 {
	d := o.shape[len(o.shape)-1]
	if d == 0 {
		return 0
	}
	widen := func(x []float32) []float64 {
		y := make([]float64, len(x))
		for i, v := range x {
			y[i] = float64(v)
		}
		return y
	}
	return ref.CorrectionRatio(widen(o.data), widen(vbar.data), d)
}
