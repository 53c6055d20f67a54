// Package model is the Parallax-Qwen3 decoder of docs/MATH.md section 9: its
// configuration and presets, its parameters (named like Hugging Face Qwen3's
// tensors), the forward pass and its explicit backward pass over buffers
// allocated once, KV-cache generation with host-side sampling, and
// safetensors checkpoints that also load Hugging Face Qwen3 directories.
//
// The model is written against the typed op set of package engine and never
// imports a backend: a program opens a device (engine.Open) and hands it to
// New or Load.
//
// Shapes: B sequences of T tokens, N = B*T rows. Projections produce
// [N, H*D] = [B, T, H, D]; attention works in [B, H, T, D] (SwapAxes12
// converts). Parameters are f32 master weights in PyTorch's Linear layout
// [out, in]; activations use the model's compute dtype (f32 by default).
package model

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/parallax-engine/parallax/engine"
)

// ParamKind tells an optimizer how to treat a parameter.
type ParamKind int

// Parameter kinds.
const (
	// Matrix is a hidden 2-D weight (q, k, v, r, o, gate, up, down
	// projections): the ones Muon orthogonalises.
	Matrix ParamKind = iota
	// Embedding is the token embedding table [V, d] (also the head when tied).
	Embedding
	// Head is the untied output projection lm_head [V, d].
	Head
	// Gain is an RMSNorm weight (a vector).
	Gain
	// Gate is the probe gate's w_g [Hq, d] (the ablation): a gate, so
	// AdamW trains it even though it is 2-D.
	Gate
)

// String names the kind ("matrix", "embedding", "head", "gain").
func (k ParamKind) String() string {
	switch k {
	case Matrix:
		return "matrix"
	case Embedding:
		return "embedding"
	case Head:
		return "head"
	case Gain:
		return "gain"
	case Gate:
		return "gate"
	}
	return fmt.Sprintf("ParamKind(%d)", int(k))
}

// Param is one named parameter tensor. W is the f32 weight; G its gradient
// (f32, same shape), nil until AllocGrads. Backward accumulates into G. In a
// model loaded with LoadOptions.Inference, W is nil for the weights that
// have a compute copy C (see InferenceOnly).
type Param struct {
	Name string // Hugging Face Qwen3 name, e.g. "model.layers.0.self_attn.q_proj.weight"
	W, G *engine.Tensor
	// C is W rounded to the compute dtype, what matmuls read (the head's copy
	// has PadVocab rows); nil when the compute dtype is f32 or the weight
	// feeds no product. See MarkWeightsChanged.
	C    *engine.Tensor
	Kind ParamKind
	// Q is the weight-only int8 weight of a quantized model (quant.go),
	// which then has no W or C: what the products and the lookup read.
	Q *engine.Int8Weight
}

// Block holds one layer's parameters. R and RNorm are nil for softmax models.
type Block struct {
	InputNorm *Param // input_layernorm [d]
	Q, K, V   *Param // q_proj [Hq*D, d], k_proj and v_proj [Hkv*D, d]
	R         *Param // r_proj [Hq*D, d], the Parallax probe W_R
	O         *Param // o_proj [d, Hq*D]
	QNorm     *Param // q_norm [D]
	KNorm     *Param // k_norm [D]
	RNorm     *Param // r_norm [D]
	RGate     *Param // r_gate [Hq, d]: the probe gate w_g (ProbeGate only)
	PostNorm  *Param // post_attention_layernorm [d]
	Gate, Up  *Param // mlp.gate_proj, mlp.up_proj [FFN, d]
	Down      *Param // mlp.down_proj [d, FFN]
}

// Model is a Parallax-Qwen3 decoder resident on one device.
type Model struct {
	Config Config
	Dev    engine.Device
	// DType is the compute dtype of activations (and activation gradients)
	// and of the KV cache: F32 by default; BF16 on GPUs. Parameters and their
	// gradients are F32.
	DType engine.DType

	Embed  *Param  // model.embed_tokens.weight [V, d]
	Blocks []Block // model.layers.{i}
	Norm   *Param  // model.norm.weight [d]
	Head   *Param  // lm_head.weight [V, d]; nil when tied

	params []*Param

	// The precision policy (precision.go): the head's padded width, the
	// padded head's row map, the head gradient's padded scratch and whether
	// the compute copies lag the master weights.
	padV     int
	padIDs   *engine.Tensor
	headGrad *engine.Tensor
	stale    bool
	// dropped: the masters of the copied weights were freed (InferenceOnly).
	dropped bool
	// quant: how the int8 kinds are held (quant.go); int8 maps each
	// quantized Param's values (Q.Q, its compute()) to its weight, for the
	// passes' products.
	quant Quantization
	int8  map[*engine.Tensor]*engine.Int8Weight

	// gradHook and gradGroups: see SetGradHook.
	gradHook   func(ps []*Param) error
	gradGroups [][]*Param

	train  *Activations // per-layer buffers of the last training forward
	infer  *Activations // shared-layer buffers for inference forwards
	decode *Activations // inference buffers of the last decode step shape
	last   *Activations // the buffers of the last Forward (for Backward)

	inspect *Inspector // records what a viewer needs during Step (NewInspector)
	// noGraphs: decode steps run eagerly even on a device that records
	// graphs (SetGraphs).
	noGraphs bool
}

// Options modify New.
type Options struct {
	Seed  uint64       // initialisation seed
	DType engine.DType // compute dtype; 0 means F32
}

// Init standard deviations: N(0, 0.02) for every matrix and the embedding
// (GPT-2 and Qwen3's initializer_range); the two projections that write into
// the residual stream (o_proj, down_proj) are further scaled by
// 1/sqrt(2 Layers), GPT-2's residual scaling, so the stream's variance does
// not grow with depth. Gains start at 1. W_R is drawn exactly like W_Q
// (RInitLikeQ) or is zero (RInitZero).
const initStd = 0.02

// New allocates a model for cfg on dev and initialises it deterministically
// from o.Seed. Each tensor draws from its own PCG stream keyed by the seed
// and the tensor's name, so two models with the same seed share every
// tensor they have in common (a Parallax model and its softmax baseline
// differ only by W_R and its norm). Gradients are not allocated (AllocGrads).
func New(dev engine.Device, cfg Config, o Options) (*Model, error) {
	if cfg.Quant.Enabled() {
		return nil, fmt.Errorf("new model: %w (the config says %s)", ErrQuantized, cfg.Quant)
	}
	m, err := newEmpty(dev, cfg, o.DType)
	if err != nil {
		return nil, err
	}
	resid := initStd / math.Sqrt(2*float64(cfg.Layers))
	for _, p := range m.params {
		vals := make([]float32, p.W.Numel())
		std := initStd
		switch {
		case p.Kind == Gain:
			std = 0
		case isResidualOut(p.Name):
			std = resid
		case isRProj(p.Name) && cfg.RInit == RInitZero:
			std = 0
		}
		if p.Kind == Gain {
			for i := range vals {
				vals[i] = 1
			}
		} else if std > 0 {
			h := fnv.New64a()
			h.Write([]byte(p.Name))
			rng := rand.New(rand.NewPCG(o.Seed, h.Sum64()))
			for i := range vals {
				vals[i] = float32(rng.NormFloat64() * std)
			}
		}
		if err := engine.WriteFloat32(p.W, vals); err != nil {
			return nil, fmt.Errorf("init %s: %w", p.Name, err)
		}
	}
	return m, nil
}

func isResidualOut(name string) bool {
	return strings.HasSuffix(name, ".self_attn.o_proj.weight") || strings.HasSuffix(name, ".mlp.down_proj.weight")
}

func isRProj(name string) bool { return strings.HasSuffix(name, ".self_attn.r_proj.weight") }

// newEmpty validates cfg and allocates zeroed parameters.
func newEmpty(dev engine.Device, cfg Config, dtype engine.DType) (*Model, error) {
	return newModel(dev, cfg, dtype, Quantization{})
}

// newModel is newEmpty for a model holding its int8 kinds quantized with quant
// (when enabled): those Params get no W (nor C); the load fills their Q.
func newModel(dev engine.Device, cfg Config, dtype engine.DType, quant Quantization) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if dev == nil {
		return nil, fmt.Errorf("new model: no device")
	}
	if dtype == 0 {
		dtype = engine.F32
	}
	if !dtype.IsFloat() {
		return nil, fmt.Errorf("new model: compute dtype %v is not floating", dtype)
	}
	m := &Model{Config: cfg, Dev: dev, DType: dtype, quant: quant, int8: map[*engine.Tensor]*engine.Int8Weight{}}
	var err error
	add := func(name string, kind ParamKind, shape ...int) *Param {
		if err != nil {
			return nil
		}
		if quant.Enabled() && int8Kind(kind) {
			p := &Param{Name: name, Kind: kind}
			m.params = append(m.params, p)
			return p
		}
		var w *engine.Tensor
		w, err = dev.Alloc(engine.F32, shape...)
		if err != nil {
			err = fmt.Errorf("allocate %s %v: %w", name, engine.Shape(shape), err)
			return nil
		}
		p := &Param{Name: name, W: w, Kind: kind}
		m.params = append(m.params, p)
		return p
	}
	d, q, kv, hd, f := cfg.Dim, cfg.QDim(), cfg.KVDim(), cfg.HeadDim, cfg.FFN
	m.Embed = add("model.embed_tokens.weight", Embedding, cfg.Vocab, d)
	m.Blocks = make([]Block, cfg.Layers)
	for i := range m.Blocks {
		pre := fmt.Sprintf("model.layers.%d.", i)
		b := &m.Blocks[i]
		b.InputNorm = add(pre+"input_layernorm.weight", Gain, d)
		b.Q = add(pre+"self_attn.q_proj.weight", Matrix, q, d)
		b.K = add(pre+"self_attn.k_proj.weight", Matrix, kv, d)
		b.V = add(pre+"self_attn.v_proj.weight", Matrix, kv, d)
		if cfg.Parallax() {
			b.R = add(pre+"self_attn.r_proj.weight", Matrix, q, d)
		}
		b.O = add(pre+"self_attn.o_proj.weight", Matrix, d, q)
		b.QNorm = add(pre+"self_attn.q_norm.weight", Gain, hd)
		b.KNorm = add(pre+"self_attn.k_norm.weight", Gain, hd)
		if cfg.Parallax() {
			b.RNorm = add(pre+"self_attn.r_norm.weight", Gain, hd)
		}
		if cfg.Parallax() && cfg.ProbeGate {
			b.RGate = add(pre+"self_attn.r_gate.weight", Gate, cfg.Heads, d)
		}
		b.PostNorm = add(pre+"post_attention_layernorm.weight", Gain, d)
		b.Gate = add(pre+"mlp.gate_proj.weight", Matrix, f, d)
		b.Up = add(pre+"mlp.up_proj.weight", Matrix, f, d)
		b.Down = add(pre+"mlp.down_proj.weight", Matrix, d, f)
	}
	m.Norm = add("model.norm.weight", Gain, d)
	if !cfg.TiedEmbeddings {
		m.Head = add("lm_head.weight", Head, cfg.Vocab, d)
	}
	if err == nil {
		err = m.initCompute()
	}
	if err != nil {
		m.Free()
		return nil, err
	}
	return m, nil
}

// Params lists every parameter in a stable order: the embedding, each layer's
// tensors (input_layernorm, q, k, v, r, o, q_norm, k_norm, r_norm,
// post_attention_layernorm, gate, up, down), the final norm, then lm_head
// when untied. The pointers stay valid for the model's life.
func (m *Model) Params() []*Param { return m.params }

// Param returns the parameter with the given name, or nil.
func (m *Model) Param(name string) *Param {
	for _, p := range m.params {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// HeadWeight is the [V, d] matrix producing the logits: lm_head when untied,
// otherwise the embedding.
func (m *Model) HeadWeight() *Param {
	if m.Head != nil {
		return m.Head
	}
	return m.Embed
}

// AllocGrads allocates a zeroed f32 gradient for every parameter that has
// none yet. Backward calls it, so an explicit call is only needed to build
// optimizer state before the first step.
func (m *Model) AllocGrads() error {
	if m.quant.Enabled() {
		return fmt.Errorf("allocate gradients: %w", ErrQuantized)
	}
	if m.dropped {
		return fmt.Errorf("allocate gradients: %w", ErrInferenceOnly)
	}
	for _, p := range m.params {
		if p.G != nil {
			continue
		}
		g, err := m.Dev.Alloc(engine.F32, p.W.Shape()...)
		if err != nil {
			return fmt.Errorf("allocate gradient of %s: %w", p.Name, err)
		}
		p.G = g
	}
	return nil
}

// ZeroGrads sets every allocated gradient to zero (Backward accumulates).
func (m *Model) ZeroGrads() error {
	var gs []*engine.Tensor
	for _, p := range m.params {
		if p.G != nil {
			gs = append(gs, p.G)
		}
	}
	if err := engine.FillAll(m.Dev, gs, 0); err != nil {
		return fmt.Errorf("zero gradients: %w", err)
	}
	return nil
}

// Free releases the model's tensors; the model must not be used afterwards.
func (m *Model) Free() {
	m.freeCompute()
	for _, p := range m.params {
		if p.W != nil { // nil: dropped by an inference-only load
			m.Dev.Free(p.W)
		}
		if p.G != nil {
			m.Dev.Free(p.G)
		}
		if p.Q != nil {
			p.Q.Free(m.Dev)
			p.Q = nil
		}
	}
	clear(m.int8)
	for _, a := range []*Activations{m.train, m.infer, m.decode} {
		a.free(m.Dev)
	}
	m.train, m.infer, m.decode, m.last = nil, nil, nil, nil
}
