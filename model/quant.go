package model

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/parallax-engine/parallax/engine"
)

// Weight-only int8 inference (docs/ENGINE.md, "Weight-only int8"). The
// weights every product reads (q, k, v, r, o, gate, up and down, the head)
// and the embedding table are held as engine.Int8Weight: int8 values and
// one f32 scale per output row and group of G input columns. The tied
// embedding stays one matrix: the head multiplies with it (LinearInt8) and
// the token lookup gathers dequantized rows of it (EmbeddingInt8), so a
// tied model holds its largest matrix once, at a quarter of its f32 bytes,
// instead of keeping a float table for the lookup beside an int8 head; an
// untied embedding is quantized the same way, its lookup reads the same
// op. The norm gains and the probe gate's w_g (small, and the gate is
// not a product the decode step is bound by) stay float.
//
// A quantized model is for inference: it has no float masters, so it
// cannot train or Save (ErrQuantized); `parallax quantize` writes a
// quantized folder from a float one on the host, and Load reads one (or
// quantizes a float folder on load, LoadOptions.Quantize).
//
// The folder format (config.json's "quantization" entry, see
// Quantization): each quantized tensor NAME (its Hugging Face name, as
// "model.layers.0.self_attn.q_proj.weight") is stored as I8 [N, K] under
// NAME, its scales as F32 [N, ceil(K/G)] under NAME + ScaleSuffix; every
// other tensor as F32. A tied model stores its embedding once.

// QuantInt8 is the Quantization method of weight-only int8.
const QuantInt8 = "int8"

// PerChannel is the Quantization group size of one scale per output row
// (the GPTQ convention): G = K for every matrix.
const PerChannel = -1

// ScaleSuffix is appended to a quantized tensor's name to name its scales.
const ScaleSuffix = "_scale"

// Quantization says how a model's product weights are stored or held. The
// zero value is float weights.
type Quantization struct {
	Method string // "" (float) or QuantInt8
	// Group is the input columns that share a scale: >= 1, PerChannel (-1)
	// for one scale a row, or 0 for the default (engine.DefaultInt8Group)
	// when quantizing; a folder records the group it was written with.
	Group int
}

// Enabled reports whether the weights are quantized.
func (q Quantization) Enabled() bool { return q.Method != "" }

// Validate reports an unknown method or a group size that is neither
// positive nor PerChannel.
func (q Quantization) Validate() error {
	switch q.Method {
	case "":
		return nil
	case QuantInt8:
	default:
		return fmt.Errorf("quantization method %q is not supported (want %q)", q.Method, QuantInt8)
	}
	if q.Group < PerChannel {
		return fmt.Errorf("quantization group size %d: want a positive group size, or %d for one scale per output row", q.Group, PerChannel)
	}
	return nil
}

// groupFor is the group size of a matrix of k input columns: k for
// per-channel (or a group of k or more), else the group (0: the default).
func (q Quantization) groupFor(k int) int {
	g := q.Group
	if g == 0 {
		g = engine.DefaultInt8Group
	}
	if g == PerChannel || g >= k {
		return max(k, 1)
	}
	return g
}

// String describes the quantization: "int8, groups of 128", "int8,
// per-channel" or "float".
func (q Quantization) String() string {
	switch {
	case !q.Enabled():
		return "float"
	case q.Group == PerChannel:
		return q.Method + ", per-channel"
	}
	g := q.Group
	if g == 0 {
		g = engine.DefaultInt8Group
	}
	return fmt.Sprintf("%s, groups of %d", q.Method, g)
}

// quantJSON is config.json's "quantization" entry.
type quantJSON struct {
	Method      string  `json:"method"`
	Bits        *int    `json:"bits,omitempty"`
	GroupSize   *int    `json:"group_size"`
	Symmetric   *bool   `json:"symmetric,omitempty"`
	ScaleDType  *string `json:"scale_dtype,omitempty"`
	ScaleSuffix *string `json:"scale_suffix,omitempty"`
}

func (q Quantization) json() *quantJSON {
	if !q.Enabled() {
		return nil
	}
	bits, sym, sdt, suf, g := 8, true, "float32", ScaleSuffix, q.Group
	if g == 0 {
		g = engine.DefaultInt8Group
	}
	return &quantJSON{Method: q.Method, Bits: &bits, GroupSize: &g, Symmetric: &sym, ScaleDType: &sdt, ScaleSuffix: &suf}
}

// parse reads the entry, refusing what this format is not (another
// method, width, scale dtype or naming, asymmetric), so a folder written
// by another tool is not misread.
func (j *quantJSON) parse() (Quantization, error) {
	if j == nil {
		return Quantization{}, nil
	}
	if j.Method != QuantInt8 {
		return Quantization{}, fmt.Errorf("quantization method %q is not supported (want %q, as parallax quantize writes)", j.Method, QuantInt8)
	}
	switch {
	case j.Bits != nil && *j.Bits != 8:
		return Quantization{}, fmt.Errorf("quantization bits %d is not supported (want 8)", *j.Bits)
	case j.Symmetric != nil && !*j.Symmetric:
		return Quantization{}, errors.New("asymmetric quantization is not supported (want symmetric: no zero points)")
	case j.ScaleDType != nil && *j.ScaleDType != "float32":
		return Quantization{}, fmt.Errorf("quantization scale_dtype %q is not supported (want float32)", *j.ScaleDType)
	case j.ScaleSuffix != nil && *j.ScaleSuffix != ScaleSuffix:
		return Quantization{}, fmt.Errorf("quantization scale_suffix %q is not supported (want %q)", *j.ScaleSuffix, ScaleSuffix)
	case j.GroupSize == nil:
		return Quantization{}, errors.New("quantization: missing key \"group_size\"")
	}
	q := Quantization{Method: j.Method, Group: *j.GroupSize}
	if q.Group == 0 {
		return Quantization{}, fmt.Errorf("quantization group size 0: want a positive group size, or %d for one scale per output row", PerChannel)
	}
	return q, q.Validate()
}

// int8Kind reports whether parameters of kind k are held as int8 in a
// quantized model: the product weights (Matrix, Head) and the embedding.
func int8Kind(k ParamKind) bool { return k == Matrix || k == Head || k == Embedding }

// ErrQuantized is wrapped by the errors of what needs float weights
// (training, Save) on a model holding int8 weights.
var ErrQuantized = errors.New("the model holds weight-only int8 weights, which are for inference: training and saving need the float checkpoint (quantize it again afterwards)")

// Quantization reports how the model holds its product weights: the zero
// value for float weights.
func (m *Model) Quantization() Quantization { return m.quant }

// WeightBytes is the device memory the model's weights take: the f32
// masters it still holds, the compute copies and the int8 weights with
// their scales.
func (m *Model) WeightBytes() int64 {
	var n int64
	for _, p := range m.params {
		for _, t := range []*engine.Tensor{p.W, p.C} {
			if t != nil {
				n += int64(t.Bytes())
			}
		}
		if p.Q != nil {
			n += p.Q.Bytes()
		}
	}
	return n
}

// EstimateMemoryQuant is EstimateMemory for a model holding its int8
// kinds (int8Kind) quantized with q: those take their int8 values and
// scales (Memory.Int8; the head padded as its copy would be) and no master
// or copy, the other weights what EstimateMemory gives them. With q
// disabled it is EstimateMemory.
func EstimateMemoryQuant(cfg Config, dt engine.DType, q Quantization) Memory {
	if !q.Enabled() {
		return EstimateMemory(cfg, dt)
	}
	if dt == 0 {
		dt = engine.F32
	}
	var m Memory
	for _, s := range ParamSpecs(cfg) {
		n := s.Numel()
		if int8Kind(s.Kind) && len(s.Shape) == 2 {
			rows := int64(s.Shape[0])
			if s.Kind == Head || (s.Kind == Embedding && cfg.TiedEmbeddings) {
				rows = int64(padVocab(cfg.Vocab, dt))
			}
			k := s.Shape[1]
			m.Int8 = addSat(m.Int8, addSat(mulSat(rows, int64(k)), mulSat(rows, 4*int64(engine.Int8Groups(k, q.groupFor(k))))))
			continue
		}
		m.Weights = addSat(m.Weights, mulSat(n, 4))
		if s.Kind == Gate && dt != engine.F32 {
			m.Copies = addSat(m.Copies, mulSat(n, int64(dt.Size())))
		}
	}
	return m
}

// padVocab is the head's width for compute dtype dt (see PadVocab).
func padVocab(vocab int, dt engine.DType) int {
	if dt != engine.F32 && vocab%padMultiple != 0 {
		return (vocab + padMultiple - 1) / padMultiple * padMultiple
	}
	return vocab
}

// resolveQuant decides how Load holds the weights: as the folder stores
// them (stored), or quantized on load (o.Quantize) from a float folder. A
// quantized model must be loaded for inference.
func resolveQuant(stored Quantization, o LoadOptions) (Quantization, error) {
	want := o.Quantize
	if err := want.Validate(); err != nil {
		return Quantization{}, err
	}
	q := stored
	if want.Enabled() {
		if stored.Enabled() && want.Group != 0 && want.Group != stored.Group {
			return Quantization{}, fmt.Errorf("the folder holds %s weights already; they cannot be quantized again in another group size (%d)", stored, want.Group)
		}
		if !stored.Enabled() {
			q = want
		}
	}
	if q.Enabled() && !o.Inference {
		return Quantization{}, fmt.Errorf("%w (this folder's weights are %s)", ErrQuantized, q)
	}
	return q, nil
}

// loadInt8Param fills p.Q from the folder: the stored int8 values and
// scales of a quantized folder, else the float tensor quantized on the
// host. The head's rows are padded to PadVocab (pad rows repeat row 0) as
// its compute copy would be. With convert, a missing r_proj is zero.
func (m *Model) loadInt8Param(ws *weightSet, p *Param, spec ParamSpec, stored Quantization, convert bool) error {
	n, k := spec.Shape[0], spec.Shape[1]
	g := m.quant.groupFor(k)
	var q []int8
	var s []float32
	var err error
	f, ok := ws.where[p.Name]
	switch {
	case !ok && convert && isRProj(p.Name):
		q, s = make([]int8, n*k), make([]float32, n*engine.Int8Groups(k, g))
	case !ok:
		return missingTensorError(ws, p.Name, p.Kind, spec.Shape)
	case stored.Enabled():
		if q, s, err = readInt8(ws, p.Name, n, k, g); err != nil {
			return err
		}
	default:
		vals, err := f.file.Float32(p.Name)
		if err != nil {
			return err
		}
		if q, s, err = engine.QuantizeInt8(vals, n, k, g); err != nil {
			return fmt.Errorf("%s: %s: %w", f.path, p.Name, err)
		}
	}
	if p == m.HeadWeight() && m.padV > n {
		ng := engine.Int8Groups(k, g)
		for range m.padV - n {
			q, s = append(q, q[:k]...), append(s, s[:ng]...)
		}
		n = m.padV
	}
	w, err := engine.NewInt8Weight(m.Dev, q, s, n, k, g)
	if err != nil {
		return fmt.Errorf("upload %s: %w", p.Name, err)
	}
	p.Q = &w
	m.int8[w.Q] = p.Q
	return nil
}

// readInt8 reads a quantized folder's tensor name (I8 [n, k]) and its
// scales (F32 [n, ceil(k/g)]), which must be finite and non-negative.
func readInt8(ws *weightSet, name string, n, k, g int) ([]int8, []float32, error) {
	f := ws.where[name]
	info, _ := f.file.Info(name)
	if info.DType != "I8" {
		return nil, nil, fmt.Errorf("%s: tensor %s is %s; the folder's config says its weights are int8 (I8)", f.path, name, info.DType)
	}
	raw, err := f.file.Raw(name)
	if err != nil {
		return nil, nil, err
	}
	q := make([]int8, len(raw))
	for i, b := range raw {
		q[i] = int8(b)
	}
	sn := name + ScaleSuffix
	sf, ok := ws.where[sn]
	if !ok {
		return nil, nil, fmt.Errorf("tensor %s (the scales of %s) is missing from %s", sn, name, ws.describe())
	}
	s, err := sf.file.Float32(sn)
	if err != nil {
		return nil, nil, err
	}
	if len(s) != n*engine.Int8Groups(k, g) {
		return nil, nil, fmt.Errorf("%s: tensor %s has %d scales, want %d x %d", sf.path, sn, len(s), n, engine.Int8Groups(k, g))
	}
	for i, v := range s {
		if !(v >= 0) || math.IsInf(float64(v), 0) {
			return nil, nil, fmt.Errorf("%s: tensor %s: scale %d is %v (want a finite number >= 0)", sf.path, sn, i, v)
		}
	}
	return q, s, nil
}

// checkInt8Weights checks a quantized folder's int8 tensors against cfg
// before anything is allocated: each int8 kind's tensor is I8 of its
// shape, with F32 scales [N, ceil(K/G)] (checkWeights has checked the
// shapes of the values).
func checkInt8Weights(ws *weightSet, cfg Config, q Quantization) error {
	for _, s := range ParamSpecs(cfg) {
		if !int8Kind(s.Kind) {
			continue
		}
		f, ok := ws.where[s.Name]
		if !ok {
			continue // checkWeights' business
		}
		info, _ := f.file.Info(s.Name)
		if info.DType != "I8" {
			return fmt.Errorf("%s: tensor %s is %s; the folder's config says its weights are int8 (I8)", f.path, s.Name, info.DType)
		}
		k := s.Shape[1]
		want := engine.Shape{s.Shape[0], engine.Int8Groups(k, q.groupFor(k))}
		sn := s.Name + ScaleSuffix
		sf, ok := ws.where[sn]
		if !ok {
			return fmt.Errorf("tensor %s %v (the scales of %s) is missing from %s", sn, want, s.Name, ws.describe())
		}
		si, _ := sf.file.Info(sn)
		if si.DType != "F32" || !engine.Shape(si.Shape).Equal(want) {
			return fmt.Errorf("%s: tensor %s is %s%v, want F32%v (a scale per row and group of %d of the %d columns)",
				sf.path, sn, si.DType, engine.Shape(si.Shape), want, q.groupFor(k), k)
		}
	}
	return nil
}

// int8Of returns the int8 weight whose values the I8 tensor w holds (a
// quantized Param's compute()), or nil for a float weight; an I8 tensor
// the rec does not know is an error, recorded in r.
func (r *rec) int8Of(op string, w *engine.Tensor) *engine.Int8Weight {
	if r.err != nil || w == nil || w.DType() != engine.I8 {
		return nil
	}
	if q := r.int8[w]; q != nil {
		return q
	}
	r.fail(op, fmt.Errorf("int8 weight %v has no scales in this pass (a quantized model's weights run through its own forward)", w))
	return nil
}

// int8All returns the int8 weights of ws when every one is int8, or nil
// (with r.err set if an I8 tensor had no scales). Mixed lists are an
// error: the model quantizes every weight of a kind or none.
func (r *rec) int8All(op string, ws []*engine.Tensor) []engine.Int8Weight {
	var out []engine.Int8Weight
	for i, w := range ws {
		q := r.int8Of(op, w)
		if r.err != nil {
			return nil
		}
		switch {
		case q != nil && i == len(out):
			out = append(out, *q)
		case q != nil || out != nil:
			r.fail(op, errors.New("a mix of int8 and float weights in one call"))
			return nil
		}
	}
	return out
}

// encodeInt8 is q as raw bytes (a safetensors I8 tensor).
func encodeInt8(q []int8) []byte {
	b := make([]byte, len(q))
	for i, v := range q {
		b[i] = byte(v)
	}
	return b
}

// encodeF32 is vals as little-endian F32 bytes.
func encodeF32(vals []float32) []byte {
	b := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}
