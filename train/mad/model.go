package mad

import (
	"errors"
	"fmt"
	"math"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/model"
)

// ModelConfig describes a MAD model (docs/MAD.md, "The models").
type ModelConfig struct {
	Vocab   int    `json:"vocab"`
	Dim     int    `json:"dim"`      // width of every layer (128)
	Heads   int    `json:"heads"`    // mixer heads (16)
	HeadDim int    `json:"head_dim"` // mixer head dimension (8)
	FFN     int    `json:"ffn"`      // SwiGLU inner width; 0 means SwiGLUWidth(Dim) = 352
	Mixer   string `json:"mixer"`    // a registered mixer ("softmax", "parallax", "linear", "affine", ...)
	Blocks  int    `json:"blocks"`   // [mixer, SwiGLU] blocks: 2 blocks = MAD's 4 layers
	// AutoEncoder selects the compression backbone: the encoder stack,
	// pooling at the last position, a 2-layer MLP decoder fed with the
	// pooled vector plus a sinusoidal position embedding, and the head.
	AutoEncoder bool    `json:"auto_encoder"`
	NormEps     float64 `json:"norm_eps"`   // RMSNorm epsilon (1e-5)
	RopeTheta   float64 `json:"rope_theta"` // RoPE base of the attention mixers (1e4)
	Seed        uint64  `json:"seed"`       // initialisation seed
}

// DefaultModelConfig returns the MAD model for a vocabulary and mixer: width
// 128, 16 heads of 8, SwiGLU 352, two blocks, RMSNorm eps 1e-5, RoPE base
// 1e4.
func DefaultModelConfig(vocab int, mixer string) ModelConfig {
	return ModelConfig{Vocab: vocab, Dim: 128, Heads: 16, HeadDim: 8, Mixer: mixer, Blocks: 2,
		NormEps: 1e-5, RopeTheta: 1e4, Seed: 1}
}

func (c ModelConfig) ffn() int {
	if c.FFN > 0 {
		return c.FFN
	}
	return SwiGLUWidth(c.Dim)
}

// Validate reports the first inconsistency.
func (c ModelConfig) Validate() error {
	switch {
	case c.Vocab < 2:
		return fmt.Errorf("mad model: vocab %d < 2", c.Vocab)
	case c.Dim < 2 || c.Dim%2 != 0:
		return fmt.Errorf("mad model: width %d must be even and >= 2", c.Dim)
	case c.Heads < 1 || c.HeadDim < 2 || c.HeadDim%2 != 0:
		return fmt.Errorf("mad model: %d heads of %d: want >= 1 heads of an even dimension", c.Heads, c.HeadDim)
	case c.Blocks < 1:
		return fmt.Errorf("mad model: %d blocks < 1", c.Blocks)
	case !(c.NormEps > 0) || !(c.RopeTheta > 0):
		return fmt.Errorf("mad model: norm eps %v and rope theta %v must be positive", c.NormEps, c.RopeTheta)
	case c.FFN < 0:
		return fmt.Errorf("mad model: ffn %d < 0", c.FFN)
	}
	_, err := mixerFactory(c.Mixer)
	return err
}

// LossStats is the cross-entropy of one batch over its counted targets.
type LossStats struct {
	Sum   float64 // sum of the per-token losses
	Count int     // targets not equal to IgnoreIndex
}

// Mean is Sum/Count (0 when nothing was counted).
func (s LossStats) Mean() float64 {
	if s.Count == 0 {
		return 0
	}
	return s.Sum / float64(s.Count)
}

// Model is a MAD model on one device for a fixed batch shape B x T:
//
//	x = embed[tokens]                       (no positional embedding)
//	for each layer (mixer, SwiGLU, mixer, SwiGLU): x = x + layer(RMSNorm(x))
//	h = x, or for the auto-encoder h = decoder(x[last] + sinusoid(t))
//	logits = RMSNorm(h) W_head^T + b_head   (untied, with bias)
//
// Forward and Backward are the explicit passes over buffers allocated once
// (llm.c style); a batch with fewer than B real sequences is padded with
// sequences whose targets are all IgnoreIndex, which changes neither the
// loss nor the gradients.
type Model struct {
	Config ModelConfig
	B, T   int
	Dev    engine.Device

	Embed    *model.Param   // embed.weight [V, d]
	Norms    []*model.Param // layers.{i}.norm.weight [d]
	Layers   []Layer        // mixer, SwiGLU, mixer, SwiGLU, ...
	HeadNorm *model.Param   // head_norm.weight [d]
	Head     *model.Param   // head.weight [V, d]
	HeadBias *model.Param   // head.bias [V]
	dec      *decoder       // the auto-encoder's decoder, nil for the language model

	env    *Env
	params []*model.Param
	bufs   []*engine.Tensor

	ids, targets   *engine.Tensor   // I32 [N]
	res            []*engine.Tensor // residual stream before layer i, and after the last [N, d]
	ln             []*engine.Tensor // RMSNorm(res[i]) [N, d]
	lnRstd         []*engine.Tensor // F32 [N]
	y              *engine.Tensor   // a layer's output [N, d]
	hn, hnRstd     *engine.Tensor   // head norm [N, d], F32 [N]
	logits, loss   *engine.Tensor   // F32 [N, V], F32 [N]
	dres, dln, dtm *engine.Tensor   // backward [N, d]

	count      int  // counted targets of the last Forward
	forwarded  bool // a Forward ran and Backward has not
	logitsGone bool // Backward overwrote the logits with their gradient
}

// NewModel builds and initialises a model for batches of B sequences of T
// tokens. Every parameter has its gradient allocated (zero).
func NewModel(dev engine.Device, cfg ModelConfig, B, T int) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if B < 1 || T < 1 {
		return nil, fmt.Errorf("mad model: batch %dx%d is empty", B, T)
	}
	init := InitTorch
	if cfg.AutoEncoder {
		init = InitNormal
	}
	env := &Env{Dev: dev, B: B, T: T, Dim: cfg.Dim, Heads: cfg.Heads, HeadDim: cfg.HeadDim, FFN: cfg.ffn(),
		NormEps: float32(cfg.NormEps), RopeTheta: float32(cfg.RopeTheta), Init: init, Seed: cfg.Seed}
	m := &Model{Config: cfg, B: B, T: T, Dev: dev, env: env}
	if err := m.build(); err != nil {
		m.Free()
		return nil, err
	}
	return m, nil
}

func (m *Model) build() error {
	cfg, env := m.Config, m.env
	dev := m.Dev
	N, d, V := env.N(), cfg.Dim, cfg.Vocab
	ones := make([]float32, N)
	for i := range ones {
		ones[i] = 1
	}
	var err error
	if env.Ones, err = engine.FromFloat32(dev, engine.F32, ones, N, 1); err != nil {
		return err
	}
	env.made = append(env.made, env.Ones)
	pos := make([]int32, m.T)
	for i := range pos {
		pos[i] = int32(i)
	}
	if env.Pos, err = engine.FromInt32(dev, pos, m.T); err != nil {
		return err
	}
	env.made = append(env.made, env.Pos)

	b := newBuilder(env, "")
	m.Embed = b.param("embed.weight", model.Embedding, normalInit(0.02), V, d)
	m.params = append(m.params, b.params...)
	if b.err != nil {
		return b.err
	}
	factory, err := mixerFactory(cfg.Mixer)
	if err != nil {
		return err
	}
	for i := range 2 * cfg.Blocks {
		pre := fmt.Sprintf("layers.%d.", i)
		nb := newBuilder(env, pre)
		m.Norms = append(m.Norms, nb.gain("norm.weight", d))
		m.params = append(m.params, nb.params...)
		if nb.err != nil {
			return nb.err
		}
		var l Layer
		if i%2 == 0 {
			l, err = factory(env, pre+"mixer.")
		} else {
			l, err = newSwiGLU(env, pre+"mlp.")
		}
		if err != nil {
			return fmt.Errorf("mad model layer %d: %w", i, err)
		}
		m.Layers = append(m.Layers, l)
		m.params = append(m.params, l.Params()...)
	}
	if cfg.AutoEncoder {
		if m.dec, err = newDecoder(env); err != nil {
			return err
		}
		m.params = append(m.params, m.dec.params...)
	}
	hb := newBuilder(env, "")
	m.HeadNorm = hb.gain("head_norm.weight", d)
	m.Head = hb.param("head.weight", model.Head, linearInit(env.Init, d), V, d)
	m.HeadBias = hb.bias("head.bias", V)
	m.params = append(m.params, hb.params...)
	if hb.err != nil {
		return hb.err
	}

	ab := newBuilder(env, "")
	nl := len(m.Layers)
	m.ids, m.targets = ab.buf(engine.I32, N), ab.buf(engine.I32, N)
	for range nl + 1 {
		m.res = append(m.res, ab.buf(engine.F32, N, d))
	}
	for range nl {
		m.ln = append(m.ln, ab.buf(engine.F32, N, d))
		m.lnRstd = append(m.lnRstd, ab.buf(engine.F32, N))
	}
	m.y = ab.buf(engine.F32, N, d)
	m.hn, m.hnRstd = ab.buf(engine.F32, N, d), ab.buf(engine.F32, N)
	m.logits, m.loss = ab.buf(engine.F32, N, V), ab.buf(engine.F32, N)
	m.dres, m.dln, m.dtm = ab.buf(engine.F32, N, d), ab.buf(engine.F32, N, d), ab.buf(engine.F32, N, d)
	m.bufs = ab.bufs
	return ab.err
}

// Params lists every parameter: the embedding, each layer's norm gain and
// parameters, the decoder's, then the head norm, head weight and bias.
func (m *Model) Params() []*model.Param { return m.params }

// NumParams counts the parameters, in total and without the embedding and
// head (the count the MAD paper reports).
func (m *Model) NumParams() (total, nonEmbedding int) {
	for _, p := range m.params {
		n := p.W.Numel()
		total += n
		if p != m.Embed && p != m.Head && p != m.HeadBias {
			nonEmbedding += n
		}
	}
	return total, nonEmbedding
}

// Free releases every tensor of the model.
func (m *Model) Free() {
	for _, l := range m.Layers {
		l.Free()
	}
	if m.dec != nil {
		freeBufs(m.Dev, m.dec.bufs)
	}
	for _, p := range m.params {
		m.Dev.Free(p.W)
		if p.G != nil {
			m.Dev.Free(p.G)
		}
	}
	freeBufs(m.Dev, m.bufs)
	m.env.free()
	m.Layers, m.params, m.bufs, m.dec = nil, nil, nil, nil
}

// ZeroGrads sets every gradient to zero (Backward accumulates).
func (m *Model) ZeroGrads() error {
	for _, p := range m.params {
		if err := m.Dev.Fill(p.G, 0); err != nil {
			return fmt.Errorf("zero gradient of %s: %w", p.Name, err)
		}
	}
	return nil
}

// Forward runs the model on a batch: tokens and targets hold B*T ids
// (row-major); a target of IgnoreIndex is not counted. It returns the
// summed cross-entropy over the counted targets and keeps everything
// Backward needs.
func (m *Model) Forward(tokens, targets []int32) (LossStats, error) {
	N, V := m.B*m.T, int32(m.Config.Vocab)
	if len(tokens) != N || len(targets) != N {
		return LossStats{}, fmt.Errorf("mad forward: %d tokens and %d targets for a %dx%d batch", len(tokens), len(targets), m.B, m.T)
	}
	m.count = 0
	for i, t := range tokens {
		if t < 0 || t >= V {
			return LossStats{}, fmt.Errorf("mad forward: token %d at (%d, %d) is outside the vocabulary [0, %d)", t, i/m.T, i%m.T, V)
		}
		if tg := targets[i]; tg != IgnoreIndex {
			if tg < 0 || tg >= V {
				return LossStats{}, fmt.Errorf("mad forward: target %d at (%d, %d) is outside the vocabulary", tg, i/m.T, i%m.T)
			}
			m.count++
		}
	}
	m.forwarded, m.logitsGone = false, false
	if err := m.Dev.Write(m.ids, int32Bytes(tokens)); err != nil {
		return LossStats{}, fmt.Errorf("mad forward: %w", err)
	}
	if err := m.Dev.Write(m.targets, int32Bytes(targets)); err != nil {
		return LossStats{}, fmt.Errorf("mad forward: %w", err)
	}
	r := &rec{dev: m.Dev, where: "mad forward"}
	r.embedding(m.res[0], m.Embed.W, m.ids)
	eps := m.env.NormEps
	for i, l := range m.Layers {
		r.rmsnorm(m.ln[i], m.lnRstd[i], m.res[i], m.Norms[i].W, eps)
		if r.err == nil {
			if err := l.Forward(m.ln[i], m.y); err != nil {
				r.do(fmt.Sprintf("layer %d", i), err)
			}
		}
		r.addScaled(m.res[i+1], m.res[i], m.y, 1, 1)
	}
	h := m.res[len(m.Layers)]
	if m.dec != nil && r.err == nil {
		var err error
		if h, err = m.dec.forward(h); err != nil {
			r.do("decoder", err)
		}
	}
	r.rmsnorm(m.hn, m.hnRstd, h, m.HeadNorm.W, eps)
	r.linear(m.logits, m.hn, m.Head.W, m.HeadBias.W, m.env.Ones)
	if r.err == nil {
		r.do("cross entropy", m.Dev.CrossEntropy(m.loss, nil, m.logits, m.targets,
			engine.CrossEntropyOpts{IgnoreIndex: IgnoreIndex}))
	}
	if r.err != nil {
		return LossStats{}, r.err
	}
	loss, err := engine.Float32s(m.loss)
	if err != nil {
		return LossStats{}, fmt.Errorf("mad forward: %w", err)
	}
	if err := m.Dev.Sync(); err != nil {
		return LossStats{}, fmt.Errorf("mad forward: %w", err)
	}
	st := LossStats{Count: m.count}
	for _, v := range loss {
		st.Sum += float64(v)
	}
	m.forwarded = true
	if math.IsNaN(st.Sum) || math.IsInf(st.Sum, 0) {
		return st, ErrNonFinite
	}
	return st, nil
}

// ErrNonFinite is returned by a Forward whose loss is NaN or infinite.
var ErrNonFinite = errors.New("mad: the loss is not finite")

// Losses downloads the per-token losses [B*T] of the last Forward (0 where
// the target is ignored).
func (m *Model) Losses() ([]float32, error) { return engine.Float32s(m.loss) }

// Logits downloads the logits [B*T, V] of the last Forward; Backward
// overwrites them.
func (m *Model) Logits() ([]float32, error) {
	if m.logitsGone {
		return nil, errors.New("mad logits: Backward has overwritten them")
	}
	return engine.Float32s(m.logits)
}

// Backward adds to every parameter's G the gradient of the last Forward's
// mean loss (over its counted targets): the forward read in reverse.
func (m *Model) Backward() error {
	if !m.forwarded {
		return errors.New("mad backward: no Forward to differentiate (or Backward already ran)")
	}
	m.forwarded = false
	scale := float32(0)
	if m.count > 0 {
		scale = 1 / float32(m.count)
	}
	r := &rec{dev: m.Dev, where: "mad backward"}
	r.do("cross entropy", m.Dev.CrossEntropy(m.loss, m.logits, m.logits, m.targets,
		engine.CrossEntropyOpts{IgnoreIndex: IgnoreIndex, GradScale: scale}))
	m.logitsGone = true
	nl := len(m.Layers)
	h, dh := m.res[nl], m.dres
	if m.dec != nil {
		h, dh = m.dec.h2, m.dec.dh2
	}
	r.linearBackward(m.dln, m.Head.G, m.HeadBias.G, m.logits, m.hn, m.Head.W, m.env.Ones, false)
	r.rmsnormBackward(dh, m.HeadNorm.G, m.dln, h, m.HeadNorm.W, m.hnRstd)
	if m.dec != nil && r.err == nil {
		if err := m.dec.backward(m.dres); err != nil {
			r.do("decoder", err)
		}
	}
	for i := nl - 1; i >= 0; i-- {
		// res[i+1] = res[i] + layer(RMSNorm(res[i])): dres flows through
		// unchanged and gains the branch's contribution.
		if r.err == nil {
			if err := m.Layers[i].Backward(m.dln, m.dres); err != nil {
				r.do(fmt.Sprintf("layer %d", i), err)
			}
		}
		r.rmsnormBackward(m.dtm, m.Norms[i].G, m.dln, m.res[i], m.Norms[i].W, m.lnRstd[i])
		r.addScaled(m.dres, m.dres, m.dtm, 1, 1)
	}
	r.embeddingBackward(m.Embed.G, m.ids, m.dres)
	return r.err
}

// decoder is the compression auto-encoder's head (docs/MAD.md, "The models"):
// the encoder's hidden state at the last position (the compression token)
// plus a fixed sinusoidal embedding of the target position, then
// RMSNorm -> Linear -> GELU -> RMSNorm -> Linear -> GELU. The engine has no
// GELU op: GELU(a) is taken as a sigmoid(1.702 a) (its standard sigmoid
// approximation, max abs error 0.02), computed by the SwiGLU op as
// silu(1.702 a) * (1/1.702).
type decoder struct {
	env    *Env
	g1, g2 *model.Param // RMSNorm gains [d]
	w1, w2 *model.Param // [d, d]
	b1, b2 *model.Param // [d]
	params []*model.Param
	bufs   []*engine.Tensor

	lastIdx  *engine.Tensor // I32 [B]: b*T + T-1
	owner    *engine.Tensor // I32 [N]: n / T
	posEmb   *engine.Tensor // [N, d]: sinusoid(n % T)
	upConst  *engine.Tensor // [N, d]: 1/1.702
	pooled   *engine.Tensor // [B, d]
	z        *engine.Tensor // [N, d]
	n1, n2   *engine.Tensor // normed [N, d]
	rs1, rs2 *engine.Tensor // F32 [N]
	a1, a2   *engine.Tensor // pre-activations [N, d]
	g1x, g2x *engine.Tensor // 1.702 a [N, d]
	h1, h2   *engine.Tensor // GELU outputs [N, d]

	dpooled                           *engine.Tensor // [B, d]
	dh2, dh1, dn, dgate, dupS, da, dz *engine.Tensor // [N, d]
}

// geluK is the slope of the sigmoid approximation GELU(a) ~ a sigmoid(geluK a).
const geluK = 1.702

func newDecoder(env *Env) (*decoder, error) {
	b := newBuilder(env, "decoder.")
	B, T, N, d := env.B, env.T, env.N(), env.Dim
	dc := &decoder{env: env}
	dc.g1 = b.gain("norm1.weight", d)
	dc.w1, dc.b1 = b.param("fc1.weight", model.Matrix, linearInit(env.Init, d), d, d), b.bias("fc1.bias", d)
	dc.g2 = b.gain("norm2.weight", d)
	dc.w2, dc.b2 = b.param("fc2.weight", model.Matrix, linearInit(env.Init, d), d, d), b.bias("fc2.bias", d)
	dc.lastIdx, dc.owner = b.buf(engine.I32, B), b.buf(engine.I32, N)
	dc.posEmb, dc.upConst = b.buf(engine.F32, N, d), b.buf(engine.F32, N, d)
	dc.pooled, dc.z = b.buf(engine.F32, B, d), b.buf(engine.F32, N, d)
	dc.n1, dc.n2 = b.buf(engine.F32, N, d), b.buf(engine.F32, N, d)
	dc.rs1, dc.rs2 = b.buf(engine.F32, N), b.buf(engine.F32, N)
	dc.a1, dc.a2 = b.buf(engine.F32, N, d), b.buf(engine.F32, N, d)
	dc.g1x, dc.g2x = b.buf(engine.F32, N, d), b.buf(engine.F32, N, d)
	dc.h1, dc.h2 = b.buf(engine.F32, N, d), b.buf(engine.F32, N, d)
	dc.dpooled = b.buf(engine.F32, B, d)
	dc.dh2, dc.dh1, dc.dn = b.buf(engine.F32, N, d), b.buf(engine.F32, N, d), b.buf(engine.F32, N, d)
	dc.dgate, dc.dupS, dc.da = b.buf(engine.F32, N, d), b.buf(engine.F32, N, d), b.buf(engine.F32, N, d)
	dc.dz = b.buf(engine.F32, N, d)
	if b.err != nil {
		return nil, b.fail()
	}
	dc.params, dc.bufs = b.params, b.bufs
	last := make([]int32, B)
	for i := range last {
		last[i] = int32(i*T + T - 1)
	}
	owner := make([]int32, N)
	pe := make([]float32, N*d)
	table := Sinusoid(T, d)
	for n := range owner {
		owner[n] = int32(n / T)
		copy(pe[n*d:(n+1)*d], table[(n%T)*d:(n%T+1)*d])
	}
	up := make([]float32, N*d)
	for i := range up {
		up[i] = 1 / geluK
	}
	var err error
	if err = env.Dev.Write(dc.lastIdx, int32Bytes(last)); err == nil {
		err = env.Dev.Write(dc.owner, int32Bytes(owner))
	}
	if err == nil {
		err = engine.WriteFloat32(dc.posEmb, pe)
	}
	if err == nil {
		err = engine.WriteFloat32(dc.upConst, up)
	}
	if err != nil {
		b.err = fmt.Errorf("decoder constants: %w", err)
		return nil, b.fail()
	}
	return dc, nil
}

// Sinusoid is the fixed position embedding of MAD's decoder (fairseq's):
// row t, channel i < d/2 is sin(t f_i), channel d/2 + i is cos(t f_i), with
// f_i = exp(-i ln(10000) / (d/2 - 1)). It returns [n, d] row-major.
func Sinusoid(n, d int) []float32 {
	half := d / 2
	out := make([]float32, n*d)
	step := math.Log(10000)
	if half > 1 {
		step /= float64(half - 1)
	}
	for t := range n {
		for i := range half {
			a := float64(t) * math.Exp(-float64(i)*step)
			out[t*d+i] = float32(math.Sin(a))
			out[t*d+half+i] = float32(math.Cos(a))
		}
	}
	return out
}

// forward maps the encoder output x [N, d] to the decoder output h2.
func (dc *decoder) forward(x *engine.Tensor) (*engine.Tensor, error) {
	e := dc.env
	r := &rec{dev: e.Dev}
	r.embedding(dc.pooled, x, dc.lastIdx) // the last position of each sequence
	r.embedding(dc.z, dc.pooled, dc.owner)
	r.addScaled(dc.z, dc.z, dc.posEmb, 1, 1)
	r.rmsnorm(dc.n1, dc.rs1, dc.z, dc.g1.W, e.NormEps)
	r.linear(dc.a1, dc.n1, dc.w1.W, dc.b1.W, e.Ones)
	r.addScaled(dc.g1x, dc.a1, dc.a1, geluK, 0)
	r.swiglu(dc.h1, dc.g1x, dc.upConst)
	r.rmsnorm(dc.n2, dc.rs2, dc.h1, dc.g2.W, e.NormEps)
	r.linear(dc.a2, dc.n2, dc.w2.W, dc.b2.W, e.Ones)
	r.addScaled(dc.g2x, dc.a2, dc.a2, geluK, 0)
	r.swiglu(dc.h2, dc.g2x, dc.upConst)
	return dc.h2, r.err
}

// backward takes dc.dh2 (the gradient of h2) and writes the gradient of
// the encoder output into dx (only its last rows are non-zero).
func (dc *decoder) backward(dx *engine.Tensor) error {
	e := dc.env
	r := &rec{dev: e.Dev}
	r.swigluBackward(dc.dgate, dc.dupS, dc.dh2, dc.g2x, dc.upConst)
	r.addScaled(dc.da, dc.dgate, dc.dgate, geluK, 0)
	r.linearBackward(dc.dn, dc.w2.G, dc.b2.G, dc.da, dc.n2, dc.w2.W, e.Ones, false)
	r.rmsnormBackward(dc.dh1, dc.g2.G, dc.dn, dc.h1, dc.g2.W, dc.rs2)
	r.swigluBackward(dc.dgate, dc.dupS, dc.dh1, dc.g1x, dc.upConst)
	r.addScaled(dc.da, dc.dgate, dc.dgate, geluK, 0)
	r.linearBackward(dc.dn, dc.w1.G, dc.b1.G, dc.da, dc.n1, dc.w1.W, e.Ones, false)
	r.rmsnormBackward(dc.dz, dc.g1.G, dc.dn, dc.z, dc.g1.W, dc.rs1)
	r.fill(dc.dpooled, 0)
	r.embeddingBackward(dc.dpooled, dc.owner, dc.dz)
	r.fill(dx, 0)
	r.embeddingBackward(dx, dc.lastIdx, dc.dpooled)
	return r.err
}

func int32Bytes(v []int32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		u := uint32(x)
		b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
	}
	return b
}
