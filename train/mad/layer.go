package mad

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/model"
)

// Layer is one residual branch of a MAD backbone (a sequence mixer or a
// channel mixer): y = f(x) over N = B*T rows of width Dim, where x is the
// branch's RMS-normed input and the backbone adds y to the residual stream.
// A layer is built for one batch shape (Env.B, Env.T) and allocates its
// buffers once.
type Layer interface {
	// Params lists the layer's parameters (weights W with gradients G).
	Params() []*model.Param
	// Forward computes y [N, Dim] from x [N, Dim] and keeps what Backward
	// needs; x must stay unchanged until Backward.
	Forward(x, y *engine.Tensor) error
	// Backward takes dy [N, Dim], writes dx [N, Dim] (overwriting it) and
	// adds the parameter gradients to their G. It follows the Forward whose
	// input it differentiates.
	Backward(dx, dy *engine.Tensor) error
	// Free releases the layer's buffers (not its parameters).
	Free()
}

// Init selects how Linear weights are initialised.
type Init int

// Initialisations.
const (
	// InitTorch is PyTorch's nn.Linear default, U(-1/sqrt(in), 1/sqrt(in)):
	// what the reference's language-model backbone keeps for its layers
	// and head.
	InitTorch Init = iota
	// InitNormal is N(0, 0.02) for every Linear weight: the reference's
	// auto-encoder (compression) backbone.
	InitNormal
)

// Env is what a layer is built against: the device, the batch shape, the
// widths, the initialisation and constants shared by the layers of one
// model (a ones column for bias terms, the positions for RoPE, scratch
// buffers that the backward passes of different layers reuse).
type Env struct {
	Dev       engine.Device
	B, T      int     // sequences per batch, tokens per sequence
	Dim       int     // residual width d
	Heads     int     // mixer heads
	HeadDim   int     // mixer head dimension
	FFN       int     // SwiGLU inner width
	NormEps   float32 // RMSNorm epsilon
	RopeTheta float32 // RoPE base
	Init      Init
	Seed      uint64

	Ones *engine.Tensor // F32 [B*T, 1], all ones: y += ones b adds a bias row
	Pos  *engine.Tensor // I32 [T], 0..T-1

	scratch map[string]*engine.Tensor
	made    []*engine.Tensor
}

// N is the number of rows of a batch, B*T.
func (e *Env) N() int { return e.B * e.T }

// Scratch returns a buffer shared by every layer of the model under name:
// for values that live only inside one layer's Forward or Backward call.
func (e *Env) Scratch(name string, dtype engine.DType, shape ...int) (*engine.Tensor, error) {
	key := fmt.Sprintf("%s:%v%v", name, dtype, engine.Shape(shape))
	if t, ok := e.scratch[key]; ok {
		return t, nil
	}
	t, err := e.Dev.Alloc(dtype, shape...)
	if err != nil {
		return nil, fmt.Errorf("allocate scratch %s %v: %w", name, engine.Shape(shape), err)
	}
	if e.scratch == nil {
		e.scratch = map[string]*engine.Tensor{}
	}
	e.scratch[key] = t
	return t, nil
}

func (e *Env) free() {
	for _, t := range e.scratch {
		e.Dev.Free(t)
	}
	e.scratch = nil
	for _, t := range e.made {
		e.Dev.Free(t)
	}
	e.made = nil
}

// MixerFactory builds a sequence mixer for env; prefix starts its parameter
// names ("layers.0.mixer.").
type MixerFactory func(env *Env, prefix string) (Layer, error)

var (
	mixerMu sync.Mutex
	mixers  = map[string]MixerFactory{}
	mixDocs = map[string]string{}
)

// RegisterMixer makes a sequence mixer available by name to ModelConfig and
// the `parallax mad --mixers` flag. It panics on a duplicate name.
func RegisterMixer(name, summary string, f MixerFactory) {
	mixerMu.Lock()
	defer mixerMu.Unlock()
	if _, dup := mixers[name]; dup {
		panic("mad: mixer " + name + " registered twice")
	}
	mixers[name] = f
	mixDocs[name] = summary
}

// Mixers lists the registered mixers, the built-in ones first.
func Mixers() []string {
	mixerMu.Lock()
	defer mixerMu.Unlock()
	rank := map[string]int{MixerSoftmax: 0, MixerParallax: 1, MixerLinear: 2, MixerAffine: 3}
	var out []string
	for n := range mixers {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool {
		ri, oki := rank[out[i]]
		rj, okj := rank[out[j]]
		switch {
		case oki && okj:
			return ri < rj
		case oki != okj:
			return oki
		}
		return out[i] < out[j]
	})
	return out
}

// MixerSummary is the one-line description a mixer was registered with.
func MixerSummary(name string) string {
	mixerMu.Lock()
	defer mixerMu.Unlock()
	return mixDocs[name]
}

func mixerFactory(name string) (MixerFactory, error) {
	mixerMu.Lock()
	f, ok := mixers[name]
	mixerMu.Unlock()
	if !ok {
		return nil, fmt.Errorf("unknown mixer %q (known: %s)", name, strings.Join(Mixers(), ", "))
	}
	return f, nil
}

// rec enqueues ops and keeps the first error, so a pass reads as the list
// of its ops; later calls after an error do nothing.
type rec struct {
	dev   engine.Device
	where string
	err   error
}

func (r *rec) do(op string, err error) {
	if err != nil && r.err == nil {
		if r.where != "" {
			op = r.where + ": " + op
		}
		r.err = fmt.Errorf("%s: %w", op, err)
	}
}

// linear is y = x W^T (+ b on every row), x [N, in], W [out, in], b [out].
func (r *rec) linear(y, x, w, b, ones *engine.Tensor) {
	if r.err != nil {
		return
	}
	r.do("linear", r.dev.MatMul(y, x, w, engine.MatMulOpts{TransB: true}))
	if b != nil && r.err == nil {
		// The engine has no bias op: ones [N, 1] times b [1, out],
		// accumulated, adds b to every row.
		r.do("linear bias", r.dev.MatMul(y, ones, row(b), engine.MatMulOpts{Accumulate: true}))
	}
}

// linearBackward is the backward of linear: dx = dy W (dx += dy W with
// addDX), dW += dy^T x, db += ones^T dy = the column sums of dy.
func (r *rec) linearBackward(dx, dw, db, dy, x, w, ones *engine.Tensor, addDX bool) {
	if r.err != nil {
		return
	}
	if dx != nil {
		r.do("linear backward (input)", r.dev.MatMul(dx, dy, w, engine.MatMulOpts{Accumulate: addDX}))
	}
	if r.err == nil {
		r.do("linear backward (weight)", r.dev.MatMul(dw, dy, x, engine.MatMulOpts{TransA: true, Accumulate: true}))
	}
	if db != nil && r.err == nil {
		r.do("linear backward (bias)", r.dev.MatMul(row(db), ones, dy, engine.MatMulOpts{TransA: true, Accumulate: true}))
	}
}

func (r *rec) rmsnorm(out, rstd, x, w *engine.Tensor, eps float32) {
	if r.err == nil {
		r.do("rmsnorm", r.dev.RMSNorm(out, rstd, x, w, eps))
	}
}

func (r *rec) rmsnormBackward(dx, dw, dOut, x, w, rstd *engine.Tensor) {
	if r.err == nil {
		r.do("rmsnorm backward", r.dev.RMSNormBackward(dx, dw, dOut, x, w, rstd))
	}
}

func (r *rec) swap(dst, src *engine.Tensor) {
	if r.err == nil {
		r.do("swap axes", r.dev.SwapAxes12(dst, src))
	}
}

func (r *rec) rope(x, pos *engine.Tensor, theta float32) {
	if r.err == nil {
		r.do("rope", r.dev.RoPE(x, x, pos, theta))
	}
}

func (r *rec) ropeBackward(dx, pos *engine.Tensor, theta float32) {
	if r.err == nil {
		r.do("rope backward", r.dev.RoPEBackward(dx, dx, pos, theta))
	}
}

func (r *rec) addScaled(out, a, b *engine.Tensor, alpha, beta float32) {
	if r.err == nil {
		r.do("add", r.dev.AddScaled(out, a, b, alpha, beta))
	}
}

func (r *rec) fill(t *engine.Tensor, v float32) {
	if r.err == nil {
		r.do("fill", r.dev.Fill(t, v))
	}
}

func (r *rec) swiglu(out, gate, up *engine.Tensor) {
	if r.err == nil {
		r.do("swiglu", r.dev.SwiGLU(out, gate, up))
	}
}

func (r *rec) swigluBackward(dGate, dUp, dOut, gate, up *engine.Tensor) {
	if r.err == nil {
		r.do("swiglu backward", r.dev.SwiGLUBackward(dGate, dUp, dOut, gate, up))
	}
}

func (r *rec) embedding(out, table, ids *engine.Tensor) {
	if r.err == nil {
		r.do("embedding", r.dev.Embedding(out, table, ids))
	}
}

func (r *rec) embeddingBackward(dTable, ids, dOut *engine.Tensor) {
	if r.err == nil {
		r.do("embedding backward", r.dev.EmbeddingBackward(dTable, ids, dOut))
	}
}

// row views a vector [n] as a matrix [1, n].
func row(t *engine.Tensor) *engine.Tensor {
	v, err := t.Reshape(1, t.Numel())
	if err != nil {
		panic("mad: internal reshape: " + err.Error())
	}
	return v
}

// heads views t [N, H*D] as [B, T, H, D].
func heads(t *engine.Tensor, B, T, H, D int) *engine.Tensor {
	v, err := t.Reshape(B, T, H, D)
	if err != nil {
		panic("mad: internal reshape: " + err.Error())
	}
	return v
}

// builder allocates parameters and buffers for one layer, remembering the
// first error and everything it made.
type builder struct {
	env    *Env
	prefix string
	params []*model.Param
	bufs   []*engine.Tensor
	err    error
}

func newBuilder(env *Env, prefix string) *builder { return &builder{env: env, prefix: prefix} }

// param allocates a parameter and its (zero) gradient and initialises the
// weight element by element with init, drawing from a PCG stream keyed by
// the model seed and the parameter's name (so two models with the same seed
// share every tensor they have in common).
func (b *builder) param(name string, kind model.ParamKind, init func(rng *rand.Rand, i int) float32, shape ...int) *model.Param {
	if b.err != nil {
		return nil
	}
	full := b.prefix + name
	w, err := b.env.Dev.Alloc(engine.F32, shape...)
	if err != nil {
		b.err = fmt.Errorf("allocate %s %v: %w", full, engine.Shape(shape), err)
		return nil
	}
	g, err := b.env.Dev.Alloc(engine.F32, shape...)
	if err != nil {
		b.env.Dev.Free(w)
		b.err = fmt.Errorf("allocate gradient of %s: %w", full, err)
		return nil
	}
	p := &model.Param{Name: full, W: w, G: g, Kind: kind}
	b.params = append(b.params, p)
	vals := make([]float32, w.Numel())
	h := fnv.New64a()
	h.Write([]byte(full))
	rng := rand.New(rand.NewPCG(b.env.Seed, h.Sum64()))
	for i := range vals {
		vals[i] = init(rng, i)
	}
	if err := engine.WriteFloat32(w, vals); err != nil {
		b.err = fmt.Errorf("init %s: %w", full, err)
	}
	return p
}

// linearInit returns the initialiser of a Linear weight with fan-in in.
func linearInit(mode Init, in int) func(*rand.Rand, int) float32 {
	if mode == InitNormal {
		return normalInit(0.02)
	}
	bound := 1 / math.Sqrt(float64(in))
	return func(rng *rand.Rand, _ int) float32 { return float32((2*rng.Float64() - 1) * bound) }
}

func normalInit(std float64) func(*rand.Rand, int) float32 {
	return func(rng *rand.Rand, _ int) float32 { return float32(rng.NormFloat64() * std) }
}

func constInit(v float32) func(*rand.Rand, int) float32 {
	return func(*rand.Rand, int) float32 { return v }
}

// matrix is a Linear weight [out, in] (a hidden matrix: Muon trains it).
func (b *builder) matrix(name string, out, in int) *model.Param {
	return b.param(name, model.Matrix, linearInit(b.env.Init, in), out, in)
}

// bias is a Linear bias [n], zero at init (the reference zeroes biases).
func (b *builder) bias(name string, n int) *model.Param {
	return b.param(name, model.Gain, constInit(0), n)
}

// gain is an RMSNorm weight [n], one at init.
func (b *builder) gain(name string, n int) *model.Param {
	return b.param(name, model.Gain, constInit(1), n)
}

// buf allocates a buffer owned by the layer.
func (b *builder) buf(dtype engine.DType, shape ...int) *engine.Tensor {
	if b.err != nil {
		return nil
	}
	t, err := b.env.Dev.Alloc(dtype, shape...)
	if err != nil {
		b.err = fmt.Errorf("allocate %sbuffer %v %v: %w", b.prefix, dtype, engine.Shape(shape), err)
		return nil
	}
	b.bufs = append(b.bufs, t)
	return t
}

// scratch is a buffer shared with the other layers (Env.Scratch).
func (b *builder) scratch(name string, dtype engine.DType, shape ...int) *engine.Tensor {
	if b.err != nil {
		return nil
	}
	t, err := b.env.Scratch(name, dtype, shape...)
	if err != nil {
		b.err = err
	}
	return t
}

// fail releases everything the builder made and returns its error.
func (b *builder) fail() error {
	for _, p := range b.params {
		b.env.Dev.Free(p.W)
		b.env.Dev.Free(p.G)
	}
	for _, t := range b.bufs {
		b.env.Dev.Free(t)
	}
	b.params, b.bufs = nil, nil
	return b.err
}

// freeBufs releases a layer's buffers.
func freeBufs(dev engine.Device, bufs []*engine.Tensor) {
	for _, t := range bufs {
		if t != nil {
			dev.Free(t)
		}
	}
}
