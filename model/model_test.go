package model

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/cpu"
)

// testConfig is a model small enough for float64 finite differences over
// every parameter tensor, with grouped-query attention (4 query heads on 2
// KV heads) and an even head dimension.
func testConfig(attention string, tied bool) Config {
	return Config{Vocab: 11, Dim: 16, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 8, FFN: 24,
		RopeTheta: 1e4, NormEps: 1e-6, TiedEmbeddings: tied, Attention: attention, RInit: RInitLikeQ, MaxSeq: 32}
}

// newTestModel builds a model whose weights are large enough that every
// part of the block matters (the default init's 0.02 would leave attention
// nearly uniform and the Parallax correction negligible): matrices
// N(0, 0.3^2), embedding N(0, 1), gains 1 + N(0, 0.2^2), r_norm gains about
// 0.5 so the probe scores r.k stay moderate.
func newTestModel(t *testing.T, cfg Config, seed uint64) *Model {
	t.Helper()
	m, err := New(cpu.New(), cfg, Options{Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 7))
	for _, p := range m.Params() {
		v := make([]float32, p.W.Numel())
		for i := range v {
			z := rng.NormFloat64()
			switch {
			case p.Kind == Gain && strings.Contains(p.Name, "r_norm"):
				v[i] = float32(0.5 + 0.1*z)
			case p.Kind == Gain:
				v[i] = float32(1 + 0.2*z)
			case p.Kind == Embedding:
				v[i] = float32(z)
			default:
				v[i] = float32(0.3 * z)
			}
		}
		if err := engine.WriteFloat32(p.W, v); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// testBatch draws tokens and next-token-style targets with a few ignored.
func testBatch(cfg Config, B, T int, seed uint64) (tokens, targets []int32) {
	rng := rand.New(rand.NewPCG(seed, 11))
	tokens = make([]int32, B*T)
	targets = make([]int32, B*T)
	for i := range tokens {
		tokens[i] = int32(rng.IntN(cfg.Vocab))
		targets[i] = int32(rng.IntN(cfg.Vocab))
		if i%7 == 3 {
			targets[i] = IgnoreIndex
		}
	}
	return
}

type variant struct {
	name      string
	attention string
	tied      bool
	gate      bool // the probe gate ablation
}

var variants = []variant{
	{"parallax-tied", AttentionParallax, true, false},
	{"parallax-untied", AttentionParallax, false, false},
	{"softmax-tied", AttentionSoftmax, true, false},
	{"softmax-untied", AttentionSoftmax, false, false},
	{"parallax-gate", AttentionParallax, false, true},
}

// TestForwardMatchesReference compares the engine's logits and loss with
// the float64 reference model.
func TestForwardMatchesReference(t *testing.T) {
	const B, T = 2, 5
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			cfg := testConfig(v.attention, v.tied)
			cfg.ProbeGate = v.gate
			m := newTestModel(t, cfg, 1)
			tokens, targets := testBatch(cfg, B, T, 2)
			st, err := m.Forward(tokens, targets, B, T)
			if err != nil {
				t.Fatal(err)
			}
			got, err := m.Logits()
			if err != nil {
				t.Fatal(err)
			}
			wantLogits, wantLoss := refFrom(t, m).forward(tokens, targets, B, T)
			var maxErr, maxAbs float64
			for i := range got {
				maxErr = math.Max(maxErr, math.Abs(float64(got[i])-wantLogits[i]))
				maxAbs = math.Max(maxAbs, math.Abs(wantLogits[i]))
			}
			lossErr := math.Abs(st.Mean-wantLoss) / wantLoss
			t.Logf("logits max|err| %.2e (max|logit| %.2f), loss %.6f vs %.6f (rel err %.2e)", maxErr, maxAbs, st.Mean, wantLoss, lossErr)
			if maxErr > 1e-4*math.Max(1, maxAbs) || lossErr > 1e-5 {
				t.Errorf("engine forward differs from the float64 reference")
			}
			want := 0
			for _, tg := range targets {
				if tg != IgnoreIndex {
					want++
				}
			}
			if st.Count != want || want == len(targets) {
				t.Errorf("counted targets %d, want %d", st.Count, want)
			}
			ev, err := m.Evaluate(tokens, targets, B, T)
			if err != nil {
				t.Fatal(err)
			}
			if ev.Sum != st.Sum {
				t.Errorf("Evaluate loss sum %v differs from Forward's %v", ev.Sum, st.Sum)
			}
		})
	}
}

// TestGradients checks the engine's gradient of every parameter tensor
// against float64 central finite differences of the reference model, at
// the tensor's largest-gradient coordinate and a few random ones.
func TestGradients(t *testing.T) {
	const B, T = 2, 5
	const h = 1e-4 // float64 central differences: truncation ~h^2, roundoff ~1e-12
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			cfg := testConfig(v.attention, v.tied)
			cfg.ProbeGate = v.gate
			m := newTestModel(t, cfg, 3)
			tokens, targets := testBatch(cfg, B, T, 4)
			if _, err := m.Forward(tokens, targets, B, T); err != nil {
				t.Fatal(err)
			}
			if err := m.Backward(1); err != nil {
				t.Fatal(err)
			}
			ref := refFrom(t, m)
			rng := rand.New(rand.NewPCG(5, 5))
			worst, worstName := 0.0, ""
			for _, p := range m.Params() {
				g, err := engine.Float32s(p.G)
				if err != nil {
					t.Fatal(err)
				}
				var gmax float64
				imax := 0
				for i, x := range g {
					if a := math.Abs(float64(x)); a > gmax {
						gmax, imax = a, i
					}
				}
				if gmax == 0 {
					t.Errorf("%s: gradient is all zero", p.Name)
					continue
				}
				coords := []int{imax}
				for range 3 {
					coords = append(coords, rng.IntN(len(g)))
				}
				w := ref.w[p.Name]
				for _, i := range coords {
					orig := w[i]
					w[i] = orig + h
					_, lp := ref.forward(tokens, targets, B, T)
					w[i] = orig - h
					_, lm := ref.forward(tokens, targets, B, T)
					w[i] = orig
					fd := (lp - lm) / (2 * h)
					// Relative error, with a floor of 1% of the tensor's
					// largest gradient for coordinates whose gradient is ~0.
					rel := math.Abs(float64(g[i])-fd) / math.Max(math.Abs(fd), 1e-2*gmax)
					if rel > worst {
						worst, worstName = rel, fmt.Sprintf("%s[%d] (engine %.6g, fd %.6g)", p.Name, i, g[i], fd)
					}
					if rel > 1e-3 {
						t.Errorf("%s[%d]: engine gradient %.6g, float64 finite difference %.6g (rel err %.2e)", p.Name, i, g[i], fd, rel)
					}
				}
			}
			t.Logf("%d tensors, worst relative error %.2e at %s", len(m.Params()), worst, worstName)
		})
	}
}

// TestGradientAccumulation: two Forward/Backward passes with loss scale 1/2
// add up to one pass with scale 1.
func TestGradientAccumulation(t *testing.T) {
	cfg := testConfig(AttentionParallax, false)
	m := newTestModel(t, cfg, 6)
	tokens, targets := testBatch(cfg, 2, 5, 7)
	grads := func(scales ...float32) [][]float32 {
		if err := m.AllocGrads(); err != nil {
			t.Fatal(err)
		}
		if err := m.ZeroGrads(); err != nil {
			t.Fatal(err)
		}
		for _, s := range scales {
			if _, err := m.Forward(tokens, targets, 2, 5); err != nil {
				t.Fatal(err)
			}
			if err := m.Backward(s); err != nil {
				t.Fatal(err)
			}
		}
		var out [][]float32
		for _, p := range m.Params() {
			g, err := engine.Float32s(p.G)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, g)
		}
		return out
	}
	one, two := grads(1), grads(0.5, 0.5)
	for i, p := range m.Params() {
		for j := range one[i] {
			if d := math.Abs(float64(one[i][j] - two[i][j])); d > 1e-5*(1+math.Abs(float64(one[i][j]))) {
				t.Fatalf("%s[%d]: one pass %v, two half passes %v", p.Name, j, one[i][j], two[i][j])
			}
		}
	}
}

// TestBackwardMisuse: Backward refuses to run without a suitable forward.
func TestBackwardMisuse(t *testing.T) {
	cfg := testConfig(AttentionSoftmax, true)
	m := newTestModel(t, cfg, 1)
	tokens, targets := testBatch(cfg, 1, 4, 1)
	if err := m.Backward(1); err == nil {
		t.Error("Backward before any forward succeeded")
	}
	if _, err := m.Evaluate(tokens, targets, 1, 4); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.NonFiniteLayer(); err == nil {
		t.Error("NonFiniteLayer after Evaluate succeeded")
	}
	if err := m.Backward(1); err == nil || !strings.Contains(err.Error(), "Evaluate") {
		t.Errorf("Backward after Evaluate: %v", err)
	}
	if _, err := m.Forward(tokens, nil, 1, 4); err != nil {
		t.Fatal(err)
	}
	if err := m.Backward(1); err == nil || !strings.Contains(err.Error(), "targets") {
		t.Errorf("Backward without targets: %v", err)
	}
	if _, err := m.Forward(tokens, targets, 1, 4); err != nil {
		t.Fatal(err)
	}
	if err := m.Backward(1); err != nil {
		t.Fatal(err)
	}
	if err := m.Backward(1); err == nil {
		t.Error("a second Backward for one forward succeeded")
	}
	if _, err := m.Logits(); err == nil {
		t.Error("Logits after Backward succeeded")
	}
}

// TestNonFinite: a NaN weight in layer 1 makes the loss non-finite, and
// NonFiniteLayer names the layer.
func TestNonFinite(t *testing.T) {
	cfg := testConfig(AttentionParallax, true)
	m := newTestModel(t, cfg, 8)
	tokens, targets := testBatch(cfg, 2, 5, 8)
	if _, err := m.Forward(tokens, targets, 2, 5); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := m.NonFiniteLayer(); ok || err != nil {
		t.Fatalf("finite model: ok %v, err %v", ok, err)
	}
	if err := m.Dev.Fill(m.Blocks[1].Up.W, float32(math.NaN())); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Forward(tokens, targets, 2, 5); !errors.Is(err, ErrNonFiniteLoss) {
		t.Fatalf("NaN weight: %v", err)
	}
	if l, ok, err := m.NonFiniteLayer(); !ok || l != 1 || err != nil {
		t.Errorf("NonFiniteLayer = %d, %v, %v; want layer 1", l, ok, err)
	}
}

// TestBadInput: user mistakes are errors naming the problem, not panics.
func TestBadInput(t *testing.T) {
	cfg := testConfig(AttentionParallax, true)
	m := newTestModel(t, cfg, 1)
	cases := []struct {
		name            string
		tokens, targets []int32
		B, T            int
		want            string
	}{
		{"token out of range", []int32{1, 2, 11, 3}, nil, 1, 4, "token 11 at (0, 2)"},
		{"negative token", []int32{1, -1, 2, 3}, nil, 2, 2, "token -1 at (0, 1)"},
		{"target out of range", []int32{1, 2, 3, 4}, []int32{1, 2, 3, 12}, 1, 4, "target 12"},
		{"short batch", []int32{1, 2, 3}, nil, 2, 2, "do not fill"},
		{"short targets", []int32{1, 2, 3, 4}, []int32{1}, 2, 2, "targets do not fill"},
		{"too long", make([]int32, 33), nil, 1, 33, "max_seq"},
		{"empty", nil, nil, 0, 4, "empty"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := m.Forward(c.tokens, c.targets, c.B, c.T)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

// TestCOR: the per-layer correction ratio is positive for Parallax, exactly
// zero with W_R = 0, and refused for softmax.
func TestCOR(t *testing.T) {
	cfg := testConfig(AttentionParallax, true)
	m := newTestModel(t, cfg, 2)
	tokens, targets := testBatch(cfg, 2, 5, 3)
	if _, err := m.Forward(tokens, targets, 2, 5); err != nil {
		t.Fatal(err)
	}
	cor, err := m.CORs()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("COR per layer %.3f", cor)
	if len(cor) != cfg.Layers || slices.ContainsFunc(cor, func(c float64) bool { return !(c > 0) }) {
		t.Errorf("CORs %v: want %d positive values", cor, cfg.Layers)
	}
	for _, b := range m.Blocks {
		if err := m.Dev.Fill(b.R.W, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Forward(tokens, targets, 2, 5); err != nil {
		t.Fatal(err)
	}
	if cor, err = m.CORs(); err != nil || slices.ContainsFunc(cor, func(c float64) bool { return c != 0 }) {
		t.Errorf("with W_R = 0: CORs %v, %v; want zeros", cor, err)
	}
	s := newTestModel(t, testConfig(AttentionSoftmax, true), 2)
	if _, err := s.Forward(tokens, targets, 2, 5); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CORs(); err == nil {
		t.Error("CORs of a softmax model succeeded")
	}
}

// TestInit: New is deterministic per seed, gains start at 1, residual
// output projections are scaled down, W_R follows RInit, and a Parallax
// model shares every common tensor with its softmax twin.
func TestInit(t *testing.T) {
	dev := cpu.New()
	cfg := testConfig(AttentionParallax, false)
	cfg.Dim, cfg.FFN = 64, 128
	load := func(m *Model, name string) []float32 {
		v, err := engine.Float32s(m.Param(name).W)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	std := func(v []float32) float64 {
		var s float64
		for _, x := range v {
			s += float64(x) * float64(x)
		}
		return math.Sqrt(s / float64(len(v)))
	}
	a, _ := New(dev, cfg, Options{Seed: 9})
	b, _ := New(dev, cfg, Options{Seed: 9})
	c, _ := New(dev, cfg, Options{Seed: 10})
	scfg := cfg
	scfg.Attention = AttentionSoftmax
	s, _ := New(dev, scfg, Options{Seed: 9})
	zcfg := cfg
	zcfg.RInit = RInitZero
	z, _ := New(dev, zcfg, Options{Seed: 9})
	for _, p := range a.Params() {
		va := load(a, p.Name)
		if !slices.Equal(va, load(b, p.Name)) {
			t.Errorf("%s differs between two models of seed 9", p.Name)
		}
		if p.Kind != Gain && slices.Equal(va, load(c, p.Name)) {
			t.Errorf("%s is the same for seeds 9 and 10", p.Name)
		}
		if sp := s.Param(p.Name); sp != nil && !slices.Equal(va, load(s, p.Name)) {
			t.Errorf("%s differs between the Parallax model and its softmax twin", p.Name)
		}
		switch {
		case p.Kind == Gain:
			if slices.ContainsFunc(va, func(x float32) bool { return x != 1 }) {
				t.Errorf("%s: gains are not all 1", p.Name)
			}
		case strings.HasSuffix(p.Name, "o_proj.weight") || strings.HasSuffix(p.Name, "down_proj.weight"):
			want := initStd / math.Sqrt(2*float64(cfg.Layers))
			if sd := std(va); math.Abs(sd-want) > 0.15*want {
				t.Errorf("%s: std %.4f, want %.4f", p.Name, sd, want)
			}
		default:
			if sd := std(va); math.Abs(sd-initStd) > 0.15*initStd {
				t.Errorf("%s: std %.4f, want %.4f", p.Name, sd, initStd)
			}
		}
	}
	if s.Param("model.layers.0.self_attn.r_proj.weight") != nil || s.Blocks[0].R != nil {
		t.Error("softmax model has W_R")
	}
	if v := load(z, "model.layers.1.self_attn.r_proj.weight"); slices.ContainsFunc(v, func(x float32) bool { return x != 0 }) {
		t.Error(`RInit "zero" left W_R non-zero`)
	}
	if !slices.Equal(load(z, "model.layers.1.self_attn.q_proj.weight"), load(a, "model.layers.1.self_attn.q_proj.weight")) {
		t.Error(`RInit "zero" changed W_Q`)
	}
	wantNames := []string{"model.embed_tokens.weight", "model.layers.0.input_layernorm.weight",
		"model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight",
		"model.layers.0.self_attn.v_proj.weight", "model.layers.0.self_attn.r_proj.weight",
		"model.layers.0.self_attn.o_proj.weight", "model.layers.0.self_attn.q_norm.weight",
		"model.layers.0.self_attn.k_norm.weight", "model.layers.0.self_attn.r_norm.weight",
		"model.layers.0.post_attention_layernorm.weight", "model.layers.0.mlp.gate_proj.weight",
		"model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.down_proj.weight"}
	for i, n := range wantNames {
		if a.Params()[i].Name != n {
			t.Errorf("param %d is %s, want %s", i, a.Params()[i].Name, n)
		}
	}
	ps := a.Params()
	if ps[len(ps)-1].Name != "lm_head.weight" || ps[len(ps)-1].Kind != Head || ps[len(ps)-2].Name != "model.norm.weight" {
		t.Errorf("last params %s, %s", ps[len(ps)-2].Name, ps[len(ps)-1].Name)
	}
	var n int64
	for _, p := range ps {
		n += int64(p.W.Numel())
	}
	if n != cfg.NumParams() {
		t.Errorf("params hold %d numbers, NumParams says %d", n, cfg.NumParams())
	}
}

// TestBF16Compute: a bf16 compute dtype (what GPUs use) runs the whole
// training step through the bf16 weight copies and the padded head (the test
// vocabulary of 11 is padded to 128) and lands near the f32 loss and every
// gradient. The bounds: bf16 keeps 8 significant bits (relative rounding
// 2^-9 = 2e-3 per stored value), and the errors of the roughly ten rounded
// tensors a gradient passes through add up in quadrature to a few percent;
// 0.1 in relative L2 leaves room for the outliers of a model this small
// without letting a wrong gradient (error ~1) pass.
func TestBF16Compute(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			cfg := testConfig(v.attention, v.tied)
			cfg.ProbeGate = v.gate
			f := newTestModel(t, cfg, 71)
			b, err := New(f.Dev, cfg, Options{DType: engine.BF16})
			if err != nil {
				t.Fatal(err)
			}
			if b.PadVocab() != 128 {
				t.Fatalf("PadVocab %d, want 128", b.PadVocab())
			}
			for i, p := range f.Params() {
				if err := f.Dev.Cast(b.Params()[i].W, p.W); err != nil {
					t.Fatal(err)
				}
			}
			b.MarkWeightsChanged()
			tokens, targets := testBatch(cfg, 2, 5, 72)
			var losses [2]float64
			for i, m := range []*Model{f, b} {
				st, err := m.Forward(tokens, targets, 2, 5)
				if err != nil {
					t.Fatal(err)
				}
				lg, err := m.Logits()
				if err != nil {
					t.Fatal(err)
				}
				if len(lg) != 2*5*cfg.Vocab {
					t.Fatalf("%d logits, want %d (the padding must not show)", len(lg), 2*5*cfg.Vocab)
				}
				if err := m.Backward(1); err != nil {
					t.Fatal(err)
				}
				losses[i] = st.Mean
			}
			if math.Abs(losses[1]-losses[0]) > 0.05*losses[0] {
				t.Errorf("bf16 loss %.5f vs f32 %.5f", losses[1], losses[0])
			}
			for i, p := range f.Params() {
				want, err := engine.Float32s(p.G)
				if err != nil {
					t.Fatal(err)
				}
				got, err := engine.Float32s(b.Params()[i].G)
				if err != nil {
					t.Fatal(err)
				}
				var num, den float64
				for j := range want {
					if math.IsNaN(float64(got[j])) {
						t.Fatalf("%s: NaN gradient", p.Name)
					}
					d := float64(want[j] - got[j])
					num += d * d
					den += float64(want[j]) * float64(want[j])
				}
				if rel := math.Sqrt(num / max(den, 1e-30)); rel > 0.1 {
					t.Errorf("%s: bf16 gradient relative L2 error %.2e", p.Name, rel)
				}
			}
		})
	}
}

// TestWeightCopiesFollowMaster: the forward reads the bf16 copies, which
// are refreshed after MarkWeightsChanged and only then.
func TestWeightCopiesFollowMaster(t *testing.T) {
	cfg := testConfig(AttentionSoftmax, true)
	m, err := New(cpu.New(), cfg, Options{Seed: 3, DType: engine.BF16})
	if err != nil {
		t.Fatal(err)
	}
	tokens, _ := testBatch(cfg, 1, 6, 4)
	logits := func() []float32 {
		t.Helper()
		if _, err := m.Evaluate(tokens, nil, 1, 6); err != nil {
			t.Fatal(err)
		}
		v, err := m.Logits()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	before := logits()
	// Scale the embedding (the tied head) by 4: exact in bf16.
	w, err := engine.Float32s(m.Embed.W)
	if err != nil {
		t.Fatal(err)
	}
	for i := range w {
		w[i] *= 4
	}
	if err := engine.WriteFloat32(m.Embed.W, w); err != nil {
		t.Fatal(err)
	}
	if stale := logits(); !slices.Equal(stale, before) {
		t.Fatal("the copies changed without MarkWeightsChanged (they should lag until told)")
	}
	m.MarkWeightsChanged()
	if after := logits(); slices.Equal(after, before) {
		t.Fatal("MarkWeightsChanged did not refresh the copies")
	}
}

// TestGateMeans: with the probe gate, the per-layer mean gate after a
// training forward is a probability, and a model without the gate has none.
func TestGateMeans(t *testing.T) {
	const B, T = 2, 5
	cfg := testConfig(AttentionParallax, false)
	cfg.ProbeGate = true
	m := newTestModel(t, cfg, 1)
	tokens, targets := testBatch(cfg, B, T, 2)
	if _, err := m.GateMeans(); err == nil {
		t.Error("GateMeans before any Forward succeeded")
	}
	if _, err := m.Forward(tokens, targets, B, T); err != nil {
		t.Fatal(err)
	}
	g, err := m.GateMeans()
	if err != nil {
		t.Fatal(err)
	}
	if len(g) != cfg.Layers {
		t.Fatalf("%d gate means, want %d", len(g), cfg.Layers)
	}
	for l, v := range g {
		// Small init: w_g . h is near 0, so the gate starts near 1/2.
		if !(v > 0.3 && v < 0.7) {
			t.Errorf("layer %d: mean gate %v, want about 0.5 at init", l, v)
		}
	}
	plain := newTestModel(t, testConfig(AttentionParallax, false), 1)
	if _, err := plain.GateMeans(); err == nil {
		t.Error("GateMeans on a model without the gate succeeded")
	}
}

// TestForwardBackward: the fused call computes exactly what Forward then
// Backward compute (the same ops in the same order on the CPU, so bit for
// bit), with f32 and with bf16 compute (the padded head), and refuses a
// second Backward.
func TestForwardBackward(t *testing.T) {
	for _, dt := range []engine.DType{engine.F32, engine.BF16} {
		for _, v := range variants {
			t.Run(fmt.Sprintf("%v/%s", dt, v.name), func(t *testing.T) {
				cfg := testConfig(v.attention, v.tied)
				cfg.ProbeGate = v.gate
				tokens, targets := testBatch(cfg, 2, 5, 9)
				var grads [2][][]float32
				var losses [2]float64
				for k := range 2 {
					m, err := New(cpu.New(), cfg, Options{Seed: 5, DType: dt})
					if err != nil {
						t.Fatal(err)
					}
					var st LossStats
					if k == 0 {
						if st, err = m.Forward(tokens, targets, 2, 5); err == nil {
							err = m.Backward(0.5)
						}
					} else {
						st, err = m.ForwardBackward(tokens, targets, 2, 5, 0.5)
					}
					if err != nil {
						t.Fatal(err)
					}
					losses[k] = st.Mean
					for _, p := range m.Params() {
						g, err := engine.Float32s(p.G)
						if err != nil {
							t.Fatal(err)
						}
						grads[k] = append(grads[k], g)
					}
					if k == 1 {
						if err := m.Backward(1); err == nil {
							t.Error("a second Backward after ForwardBackward was accepted")
						}
						if _, err := m.CORs(); cfg.Parallax() && err != nil {
							t.Errorf("CORs after ForwardBackward: %v", err)
						}
					}
				}
				if losses[0] != losses[1] {
					t.Errorf("loss %v, fused %v", losses[0], losses[1])
				}
				for i := range grads[0] {
					if !slices.Equal(grads[0][i], grads[1][i]) {
						t.Errorf("gradient %d differs between Forward+Backward and ForwardBackward", i)
					}
				}
			})
		}
	}
}
