package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"

	"github.com/parallax-engine/parallax/internal/atomicfile"
)

// Attention kinds (Config.Attention).
const (
	AttentionParallax = "parallax" // softmax attention minus the learned covariance correction
	AttentionSoftmax  = "softmax"  // the baseline: the same block without W_R
)

// W_R initialisations (Config.RInit).
const (
	RInitLikeQ = "like-q" // the same distribution as W_Q (pretraining)
	RInitZero  = "zero"   // exactly zero: outputs equal the softmax model's
)

// Config is the shape of a Parallax-Qwen3 model (docs/MATH.md section 9). Its JSON form
// is a Hugging Face Qwen3 config.json plus our "attention" and "r_init" keys.
type Config struct {
	Vocab          int     // vocabulary size V
	Dim            int     // residual width d (hidden_size)
	Layers         int     // number of blocks L
	Heads          int     // query heads Hq
	KVHeads        int     // key/value heads Hkv (Hq a multiple of Hkv)
	HeadDim        int     // head dimension D (even, for RoPE)
	FFN            int     // SwiGLU inner width (intermediate_size)
	RopeTheta      float64 // RoPE base theta
	NormEps        float64 // RMSNorm epsilon (every norm, per-head ones too)
	TiedEmbeddings bool    // logits use the embedding table as the head
	Attention      string  // AttentionParallax or AttentionSoftmax
	RInit          string  // RInitLikeQ or RInitZero (Parallax only)
	// ProbeGate adds the gate ablation of the paper (Parallax only):
	// r = sigmoid(w_g . h) r, one scalar per token and head, w_g a learned
	// [Hq, d] matrix (self_attn.r_gate.weight, trained by AdamW).
	ProbeGate bool
	MaxSeq    int // longest sequence (max_position_embeddings)
	// BOS and EOS are the special token ids from an HF config (nil if none).
	// Generation stops at any EOS id unless told otherwise.
	BOS []int
	EOS []int
	// Quant says how the folder's weights are stored: the zero value is
	// float weights; Method "int8" is `parallax quantize`'s weight-only
	// int8 (config.json's "quantization" entry, model/quant.go).
	Quant Quantization
}

// presets are the named configurations of docs/MATH.md section 9. Vocabularies marked
// "corpus BPE" or "task" in the spec get a default the caller overrides once
// the tokenizer (or MAD task) is known.
var presets = map[string]Config{
	// CPU demo and CI; vocab: the corpus BPE (~4k).
	"tiny": {Vocab: 4096, Dim: 128, Layers: 4, Heads: 4, KVHeads: 2, HeadDim: 32, FFN: 384,
		RopeTheta: 1e4, NormEps: 1e-6, TiedEmbeddings: true, MaxSeq: 256},
	// The MAD backbone: 4 MAD layers (mixer, SwiGLU, mixer, SwiGLU) are 2 of
	// our blocks, each an attention followed by an MLP. Vocab: the task's
	// (16 is MAD's default).
	"mad": {Vocab: 16, Dim: 128, Layers: 2, Heads: 16, KVHeads: 16, HeadDim: 8, FFN: 352,
		RopeTheta: 1e4, NormEps: 1e-6, TiedEmbeddings: false, MaxSeq: 128},
	"small": {Vocab: 4096, Dim: 512, Layers: 8, Heads: 8, KVHeads: 4, HeadDim: 64, FFN: 1536,
		RopeTheta: 1e4, NormEps: 1e-6, TiedEmbeddings: true, MaxSeq: 1024},
	"gpt2-124m-like": {Vocab: 50257, Dim: 768, Layers: 12, Heads: 12, KVHeads: 12, HeadDim: 64, FFN: 2048,
		RopeTheta: 1e4, NormEps: 1e-6, TiedEmbeddings: true, MaxSeq: 1024},
	"qwen3-0.6b": {Vocab: 151936, Dim: 1024, Layers: 28, Heads: 16, KVHeads: 8, HeadDim: 128, FFN: 3072,
		RopeTheta: 1e6, NormEps: 1e-6, TiedEmbeddings: true, MaxSeq: 40960},
	"qwen3-1.7b": {Vocab: 151936, Dim: 2048, Layers: 28, Heads: 16, KVHeads: 8, HeadDim: 128, FFN: 6144,
		RopeTheta: 1e6, NormEps: 1e-6, TiedEmbeddings: true, MaxSeq: 40960},
}

// Presets lists the preset names in a stable order.
func Presets() []string {
	return []string{"tiny", "mad", "small", "gpt2-124m-like", "qwen3-0.6b", "qwen3-1.7b"}
}

// PresetConfig returns the named preset with Parallax attention and W_R
// initialised like W_Q.
func PresetConfig(name string) (Config, error) {
	c, ok := presets[strings.ToLower(strings.TrimSpace(name))]
	if !ok {
		return Config{}, fmt.Errorf("unknown model preset %q (known: %s)", name, strings.Join(Presets(), ", "))
	}
	c.Attention = AttentionParallax
	c.RInit = RInitLikeQ
	return c, nil
}

// Parallax reports whether the model has the Parallax probe W_R.
func (c Config) Parallax() bool { return c.Attention == AttentionParallax }

// QDim is the width of the query (and probe) projections, Heads*HeadDim.
func (c Config) QDim() int { return c.Heads * c.HeadDim }

// KVDim is the width of the key and value projections, KVHeads*HeadDim.
func (c Config) KVDim() int { return c.KVHeads * c.HeadDim }

// NumParams counts the model's parameters (the head once when tied).
func (c Config) NumParams() int64 {
	d, q, kv, f := int64(c.Dim), int64(c.QDim()), int64(c.KVDim()), int64(c.FFN)
	hd := int64(c.HeadDim)
	per := 2*d + q*d + 2*kv*d + d*q + 3*d*f + 2*hd
	if c.Parallax() {
		per += q*d + hd
	}
	n := int64(c.Vocab)*d + int64(c.Layers)*per + d
	if !c.TiedEmbeddings {
		n += int64(c.Vocab) * d
	}
	return n
}

// Size limits of a valid Config: at most MaxLayers blocks, and every width
// (dim, ffn, heads, kv heads, head dim and heads x head dim) at most
// MaxWidth. max seq must fit an int32 position.
const (
	MaxLayers = 1 << 14
	MaxWidth  = 1 << 20
)

// Validate reports the first inconsistency in c, naming the field.
func (c Config) Validate() error {
	pos := []struct {
		name string
		v    int
	}{{"vocab", c.Vocab}, {"dim", c.Dim}, {"layers", c.Layers}, {"heads", c.Heads},
		{"kv heads", c.KVHeads}, {"head dim", c.HeadDim}, {"ffn", c.FFN}, {"max seq", c.MaxSeq}}
	for _, p := range pos {
		if p.v <= 0 {
			return fmt.Errorf("model config: %s must be positive, got %d", p.name, p.v)
		}
	}
	if c.Vocab > math.MaxInt32 {
		return fmt.Errorf("model config: vocab %d does not fit int32 token ids", c.Vocab)
	}
	// Limits far above any real model, so that a mistyped or absurd config
	// is refused by name, and so that sizes multiply without overflow.
	lim := []struct {
		name   string
		v, max int
	}{{"layers", c.Layers, MaxLayers}, {"dim", c.Dim, MaxWidth}, {"ffn", c.FFN, MaxWidth},
		{"heads", c.Heads, MaxWidth}, {"kv heads", c.KVHeads, MaxWidth}, {"head dim", c.HeadDim, MaxWidth},
		{"max seq", c.MaxSeq, math.MaxInt32}}
	for _, l := range lim {
		if l.v > l.max {
			return fmt.Errorf("model config: %s %d exceeds the limit %d", l.name, l.v, l.max)
		}
	}
	if c.QDim() > MaxWidth {
		return fmt.Errorf("model config: heads x head dim = %d exceeds the limit %d", c.QDim(), MaxWidth)
	}
	if c.Heads%c.KVHeads != 0 {
		return fmt.Errorf("model config: heads %d is not a multiple of kv heads %d (grouped-query attention needs Hq = G*Hkv)", c.Heads, c.KVHeads)
	}
	if c.HeadDim%2 != 0 {
		return fmt.Errorf("model config: head dim %d is odd (RoPE rotates pairs)", c.HeadDim)
	}
	if !(c.RopeTheta > 0) || math.IsInf(c.RopeTheta, 0) {
		return fmt.Errorf("model config: rope theta must be positive and finite, got %v", c.RopeTheta)
	}
	if !(c.NormEps > 0) || math.IsInf(c.NormEps, 0) {
		return fmt.Errorf("model config: norm eps must be positive and finite, got %v", c.NormEps)
	}
	switch c.Attention {
	case AttentionParallax, AttentionSoftmax:
	default:
		return fmt.Errorf("model config: attention %q is not %q or %q", c.Attention, AttentionParallax, AttentionSoftmax)
	}
	if c.ProbeGate && c.Attention != AttentionParallax {
		return fmt.Errorf("model config: the probe gate needs parallax attention, not %q", c.Attention)
	}
	switch c.RInit {
	case RInitLikeQ, RInitZero:
	default:
		return fmt.Errorf("model config: r init %q is not %q or %q", c.RInit, RInitLikeQ, RInitZero)
	}
	for _, id := range append(append([]int(nil), c.BOS...), c.EOS...) {
		if id < 0 {
			return fmt.Errorf("model config: special token id %d is negative", id)
		}
	}
	if err := c.Quant.Validate(); err != nil {
		return fmt.Errorf("model config: %w", err)
	}
	return nil
}

// hfConfig is the JSON form: the Hugging Face Qwen3 keys we read and write,
// plus our own. Pointers tell a missing key from a zero.
type hfConfig struct {
	Architectures         []string        `json:"architectures,omitempty"`
	ModelType             string          `json:"model_type,omitempty"`
	HiddenSize            *int            `json:"hidden_size"`
	NumHiddenLayers       *int            `json:"num_hidden_layers"`
	NumAttentionHeads     *int            `json:"num_attention_heads"`
	NumKeyValueHeads      *int            `json:"num_key_value_heads,omitempty"`
	HeadDim               *int            `json:"head_dim,omitempty"`
	IntermediateSize      *int            `json:"intermediate_size"`
	VocabSize             *int            `json:"vocab_size"`
	RopeTheta             *float64        `json:"rope_theta,omitempty"`
	RMSNormEps            *float64        `json:"rms_norm_eps,omitempty"`
	TieWordEmbeddings     *bool           `json:"tie_word_embeddings,omitempty"`
	MaxPositionEmbeddings *int            `json:"max_position_embeddings,omitempty"`
	HiddenAct             string          `json:"hidden_act,omitempty"`
	AttentionBias         *bool           `json:"attention_bias,omitempty"`
	RopeScaling           json.RawMessage `json:"rope_scaling,omitempty"`
	RopeParameters        *ropeParameters `json:"rope_parameters,omitempty"`
	UseSlidingWindow      *bool           `json:"use_sliding_window,omitempty"`
	TorchDType            string          `json:"torch_dtype,omitempty"`
	BOSTokenID            json.RawMessage `json:"bos_token_id,omitempty"`
	EOSTokenID            json.RawMessage `json:"eos_token_id,omitempty"`
	Attention             string          `json:"attention,omitempty"`
	RInit                 string          `json:"r_init,omitempty"`
	ProbeGate             bool            `json:"probe_gate,omitempty"`
	Quantization          *quantJSON      `json:"quantization,omitempty"`
}

// ropeParameters is the newer transformers form of the RoPE settings.
type ropeParameters struct {
	RopeTheta *float64 `json:"rope_theta"`
	RopeType  string   `json:"rope_type"`
}

// MarshalJSON writes c as an HF Qwen3 config.json (model_type "qwen3",
// architectures ["Qwen3ForCausalLM"]) with the extra keys "attention" and
// "r_init". Tensors are saved as float32, so torch_dtype is "float32".
func (c Config) MarshalJSON() ([]byte, error) {
	f := false
	h := hfConfig{
		Architectures:         []string{"Qwen3ForCausalLM"},
		ModelType:             "qwen3",
		HiddenSize:            &c.Dim,
		NumHiddenLayers:       &c.Layers,
		NumAttentionHeads:     &c.Heads,
		NumKeyValueHeads:      &c.KVHeads,
		HeadDim:               &c.HeadDim,
		IntermediateSize:      &c.FFN,
		VocabSize:             &c.Vocab,
		RopeTheta:             &c.RopeTheta,
		RMSNormEps:            &c.NormEps,
		TieWordEmbeddings:     &c.TiedEmbeddings,
		MaxPositionEmbeddings: &c.MaxSeq,
		HiddenAct:             "silu",
		AttentionBias:         &f,
		UseSlidingWindow:      &f,
		TorchDType:            "float32",
		BOSTokenID:            tokenIDsJSON(c.BOS),
		EOSTokenID:            tokenIDsJSON(c.EOS),
		Attention:             c.Attention,
		RInit:                 c.RInit,
		ProbeGate:             c.ProbeGate,
		Quantization:          c.Quant.json(),
	}
	return json.Marshal(h)
}

func tokenIDsJSON(ids []int) json.RawMessage {
	switch len(ids) {
	case 0:
		return nil
	case 1:
		b, _ := json.Marshal(ids[0])
		return b
	}
	b, _ := json.Marshal(ids)
	return b
}

func parseTokenIDs(key string, raw json.RawMessage) ([]int, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one int
	if err := json.Unmarshal(raw, &one); err == nil {
		return []int{one}, nil
	}
	var many []int
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, fmt.Errorf("%s: want an integer or a list of integers, got %s", key, raw)
	}
	return many, nil
}

// UnmarshalJSON reads our config.json or a Hugging Face Qwen3 one. Keys
// missing from an HF file take transformers' Qwen3 defaults (head_dim =
// hidden_size/num_attention_heads, num_key_value_heads = num_attention_heads,
// rope_theta 1e4, rms_norm_eps 1e-6, untied, 32768 positions); a file
// without our "attention" key is a softmax model. Features this model does
// not have (attention biases, RoPE scaling, sliding windows, another
// activation or model type) are refused rather than silently ignored. The
// result is validated.
func (c *Config) UnmarshalJSON(b []byte) error {
	var h hfConfig
	if err := json.Unmarshal(b, &h); err != nil {
		return err
	}
	if h.ModelType != "" && h.ModelType != "qwen3" {
		return fmt.Errorf("model_type %q is not supported (want \"qwen3\")", h.ModelType)
	}
	if len(h.Architectures) > 0 && h.Architectures[0] != "Qwen3ForCausalLM" {
		return fmt.Errorf("architecture %q is not supported (want Qwen3ForCausalLM)", h.Architectures[0])
	}
	if h.HiddenAct != "" && h.HiddenAct != "silu" {
		return fmt.Errorf("hidden_act %q is not supported (want silu)", h.HiddenAct)
	}
	if h.AttentionBias != nil && *h.AttentionBias {
		return errors.New("attention_bias true is not supported (Qwen3 has no attention biases)")
	}
	if rs := bytes.TrimSpace(h.RopeScaling); len(rs) > 0 && string(rs) != "null" {
		return fmt.Errorf("rope_scaling %s is not supported (only plain RoPE)", rs)
	}
	if rp := h.RopeParameters; rp != nil {
		if rp.RopeType != "" && rp.RopeType != "default" {
			return fmt.Errorf("rope_parameters rope_type %q is not supported (only plain RoPE)", rp.RopeType)
		}
		if h.RopeTheta == nil {
			h.RopeTheta = rp.RopeTheta
		}
	}
	if h.UseSlidingWindow != nil && *h.UseSlidingWindow {
		return errors.New("use_sliding_window true is not supported")
	}
	req := []struct {
		key string
		p   *int
	}{{"hidden_size", h.HiddenSize}, {"num_hidden_layers", h.NumHiddenLayers},
		{"num_attention_heads", h.NumAttentionHeads}, {"intermediate_size", h.IntermediateSize},
		{"vocab_size", h.VocabSize}}
	var out Config
	for _, r := range req {
		if r.p == nil {
			return fmt.Errorf("missing key %q", r.key)
		}
	}
	out.Dim, out.Layers, out.Heads = *h.HiddenSize, *h.NumHiddenLayers, *h.NumAttentionHeads
	out.FFN, out.Vocab = *h.IntermediateSize, *h.VocabSize
	out.KVHeads = out.Heads
	if h.NumKeyValueHeads != nil {
		out.KVHeads = *h.NumKeyValueHeads
	}
	if h.HeadDim != nil {
		out.HeadDim = *h.HeadDim
	} else if out.Heads > 0 {
		out.HeadDim = out.Dim / out.Heads
	}
	out.RopeTheta, out.NormEps, out.MaxSeq = 1e4, 1e-6, 32768
	if h.RopeTheta != nil {
		out.RopeTheta = *h.RopeTheta
	}
	if h.RMSNormEps != nil {
		out.NormEps = *h.RMSNormEps
	}
	if h.TieWordEmbeddings != nil {
		out.TiedEmbeddings = *h.TieWordEmbeddings
	}
	if h.MaxPositionEmbeddings != nil {
		out.MaxSeq = *h.MaxPositionEmbeddings
	}
	out.Attention = AttentionSoftmax
	if h.Attention != "" {
		out.Attention = h.Attention
	}
	out.RInit = RInitLikeQ
	if h.RInit != "" {
		out.RInit = h.RInit
	}
	out.ProbeGate = h.ProbeGate
	var err error
	if out.Quant, err = h.Quantization.parse(); err != nil {
		return err
	}
	if out.BOS, err = parseTokenIDs("bos_token_id", h.BOSTokenID); err != nil {
		return err
	}
	if out.EOS, err = parseTokenIDs("eos_token_id", h.EOSTokenID); err != nil {
		return err
	}
	if err := out.Validate(); err != nil {
		return err
	}
	*c = out
	return nil
}

// ReadConfig reads a config.json (ours or Hugging Face's Qwen3).
func ReadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read model config: %w", err)
	}
	var c Config
	if err := json.Unmarshal(b, &c); err != nil {
		return Config{}, fmt.Errorf("model config %s: %w", path, err)
	}
	return c, nil
}

// WriteConfig writes c as indented JSON to path atomically (temp file and
// rename).
func WriteConfig(path string, c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(path, append(b, '\n')); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// String is a one-line summary: "parallax d=128 L=4 H=4/2 D=32 ffn=384 V=4096 tied".
func (c Config) String() string {
	tie := "untied"
	if c.TiedEmbeddings {
		tie = "tied"
	}
	return fmt.Sprintf("%s d=%d L=%d H=%d/%d D=%d ffn=%d V=%d %s (%s params)",
		c.Attention, c.Dim, c.Layers, c.Heads, c.KVHeads, c.HeadDim, c.FFN, c.Vocab, tie, humanCount(c.NumParams()))
}

func humanCount(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fk", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}
