package model

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/parallax-engine/parallax/engine"
)

// What a model needs before anything is allocated: the parameters a config
// defines (ParamSpecs, in the order New allocates them), the memory they
// and their training state take (EstimateMemory), and whether the device
// has that much (CheckMemory). Load and the training runner check both the
// weights files and the memory with these first, so that an absurd config
// fails with a message instead of exhausting the machine.

// ParamSpec is one parameter as a config defines it.
type ParamSpec struct {
	Name  string // Hugging Face Qwen3 name, as Param.Name
	Kind  ParamKind
	Shape engine.Shape
}

// Numel is the number of elements, saturating at math.MaxInt64.
func (s ParamSpec) Numel() int64 { return numel(s.Shape) }

func numel(s engine.Shape) int64 {
	n := int64(1)
	for _, d := range s {
		if d <= 0 {
			return 0
		}
		if n > math.MaxInt64/int64(d) {
			return math.MaxInt64
		}
		n *= int64(d)
	}
	return n
}

// ParamSpecs lists the parameters of a model of cfg in the order of
// Model.Params, without allocating any. cfg should be valid
// (Config.Validate); sizes are taken as they are.
func ParamSpecs(cfg Config) []ParamSpec {
	d, q, kv, hd, f := cfg.Dim, cfg.QDim(), cfg.KVDim(), cfg.HeadDim, cfg.FFN
	var out []ParamSpec
	add := func(name string, kind ParamKind, shape ...int) {
		out = append(out, ParamSpec{Name: name, Kind: kind, Shape: shape})
	}
	add("model.embed_tokens.weight", Embedding, cfg.Vocab, d)
	for i := range max(cfg.Layers, 0) {
		pre := fmt.Sprintf("model.layers.%d.", i)
		add(pre+"input_layernorm.weight", Gain, d)
		add(pre+"self_attn.q_proj.weight", Matrix, q, d)
		add(pre+"self_attn.k_proj.weight", Matrix, kv, d)
		add(pre+"self_attn.v_proj.weight", Matrix, kv, d)
		if cfg.Parallax() {
			add(pre+"self_attn.r_proj.weight", Matrix, q, d)
		}
		add(pre+"self_attn.o_proj.weight", Matrix, d, q)
		add(pre+"self_attn.q_norm.weight", Gain, hd)
		add(pre+"self_attn.k_norm.weight", Gain, hd)
		if cfg.Parallax() {
			add(pre+"self_attn.r_norm.weight", Gain, hd)
		}
		if cfg.Parallax() && cfg.ProbeGate {
			add(pre+"self_attn.r_gate.weight", Gate, cfg.Heads, d)
		}
		add(pre+"post_attention_layernorm.weight", Gain, d)
		add(pre+"mlp.gate_proj.weight", Matrix, f, d)
		add(pre+"mlp.up_proj.weight", Matrix, f, d)
		add(pre+"mlp.down_proj.weight", Matrix, d, f)
	}
	add("model.norm.weight", Gain, d)
	if !cfg.TiedEmbeddings {
		add("lm_head.weight", Head, cfg.Vocab, d)
	}
	return out
}

// Memory is an estimate of the device memory of a model, in bytes, by
// what holds it. Activations and scratch come on top; they depend on the
// batch and are not counted.
type Memory struct {
	Weights   int64 // f32 master weights
	Copies    int64 // compute-dtype copies of the weights that feed products (bf16/f16 only)
	Int8      int64 // weight-only int8 weights and their scales (a quantized model)
	Grads     int64 // f32 gradients (training)
	Optimizer int64 // optimizer state (training)
}

// Total is the sum, saturating at math.MaxInt64.
func (m Memory) Total() int64 {
	var t int64
	for _, v := range []int64{m.Weights, m.Copies, m.Int8, m.Grads, m.Optimizer} {
		t = addSat(t, v)
	}
	return t
}

// String is the total with its parts: "1.5 GiB (weights 1.0 GiB, compute
// copies 512.0 MiB)".
func (m Memory) String() string {
	return fmt.Sprintf("%s (%s)", engine.FormatBytes(m.Total()), m.parts())
}

func (m Memory) parts() string {
	var parts []string
	for _, p := range []struct {
		name string
		v    int64
	}{{"weights", m.Weights}, {"compute copies", m.Copies}, {"int8 weights", m.Int8}, {"gradients", m.Grads}, {"optimizer state", m.Optimizer}} {
		if p.v > 0 {
			parts = append(parts, p.name+" "+engine.FormatBytes(p.v))
		}
	}
	return strings.Join(parts, ", ")
}

func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func mulSat(a, b int64) int64 {
	if a != 0 && b > math.MaxInt64/a {
		return math.MaxInt64
	}
	return a * b
}

// EstimateMemory is the memory of the parameters of a model of cfg with
// compute dtype dt (0: f32): the f32 masters and, for a narrower dtype,
// the compute copies of the weights that feed products, the head's padded
// to a multiple of 128 rows (see the precision policy). Training adds the
// gradients and the optimizer state, which the caller fills in (their
// sizes depend on the optimizer; GradBytes gives the gradients').
func EstimateMemory(cfg Config, dt engine.DType) Memory {
	if dt == 0 {
		dt = engine.F32
	}
	var m Memory
	head := Embedding
	if !cfg.TiedEmbeddings {
		head = Head
	}
	for _, s := range ParamSpecs(cfg) {
		n := s.Numel()
		m.Weights = addSat(m.Weights, mulSat(n, 4))
		copied := s.Kind == Matrix || s.Kind == Gate || s.Kind == Head || (s.Kind == Embedding && cfg.TiedEmbeddings)
		if dt == engine.F32 || !copied {
			continue
		}
		if s.Kind == head {
			padV := int64((cfg.Vocab + padMultiple - 1) / padMultiple * padMultiple)
			n = mulSat(padV, int64(cfg.Dim))
		}
		m.Copies = addSat(m.Copies, mulSat(n, int64(dt.Size())))
	}
	return m
}

// GradBytes is the memory of the f32 gradients of every parameter of cfg.
func GradBytes(cfg Config) int64 {
	var b int64
	for _, s := range ParamSpecs(cfg) {
		b = addSat(b, mulSat(s.Numel(), 4))
	}
	return b
}

// ErrInsufficientMemory is wrapped by CheckMemory's errors.
var ErrInsufficientMemory = errors.New("not enough device memory")

// MemoryError reports that a model does not fit on a device.
type MemoryError struct {
	Device      string // the device ID
	Need        Memory // what the model needs
	Free, Total int64  // what the device has free, and in all
}

func (e *MemoryError) Error() string {
	return fmt.Sprintf("the model needs %s of memory (%s), but %s has %s free (of %s)",
		engine.FormatBytes(e.Need.Total()), e.Need.parts(), e.Device, engine.FormatBytes(e.Free), engine.FormatBytes(e.Total))
}

// Unwrap makes errors.Is(err, ErrInsufficientMemory) true.
func (e *MemoryError) Unwrap() error { return ErrInsufficientMemory }

// CheckMemory returns a *MemoryError when need exceeds the memory dev has
// free (engine.MemoryOf). A device that reports no memory passes.
func CheckMemory(dev engine.Device, need Memory) error {
	free, total, known := engine.MemoryOf(dev)
	if !known || need.Total() <= free {
		return nil
	}
	return &MemoryError{Device: dev.Info().ID(), Need: need, Free: free, Total: total}
}

// checkWeights compares every parameter cfg defines with the tensors of ws
// before anything is allocated: each must be present (but for what convert
// adds) with exactly the shape the config gives it.
func checkWeights(ws *weightSet, cfg Config, convert bool) error {
	for _, s := range ParamSpecs(cfg) {
		f, ok := ws.where[s.Name]
		if !ok {
			if convert && (isRProj(s.Name) || strings.HasSuffix(s.Name, ".self_attn.r_norm.weight")) {
				continue
			}
			return missingTensorError(ws, s.Name, s.Kind, s.Shape)
		}
		info, _ := f.file.Info(s.Name)
		if !engine.Shape(info.Shape).Equal(s.Shape) {
			return fmt.Errorf("%s: tensor %s has shape %v, the config needs %v", f.path, s.Name, engine.Shape(info.Shape), s.Shape)
		}
	}
	return nil
}

// missingTensorError says that the parameter name (of kind and shape) is not
// in ws, with a hint when the config and the checkpoint disagree on a
// feature.
func missingTensorError(ws *weightSet, name string, kind ParamKind, shape engine.Shape) error {
	hint := ""
	if kind == Head {
		hint = " (the config has tie_word_embeddings false; a tied model has no lm_head)"
	} else if isRProj(name) || strings.HasSuffix(name, ".r_norm.weight") {
		hint = " (a Parallax model needs W_R; load a softmax checkpoint with ConvertParallax)"
	}
	return fmt.Errorf("tensor %s %v is missing from %s%s", name, shape, ws.describe(), hint)
}
