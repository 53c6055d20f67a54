package mad

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/cpu"
	"github.com/parallax-engine/parallax/model"
)

// tinyModelConfig is a MAD model small enough for finite differences.
func tinyModelConfig(vocab int, mixer string, ae bool) ModelConfig {
	return ModelConfig{Vocab: vocab, Dim: 16, Heads: 2, HeadDim: 8, FFN: 24, Mixer: mixer, Blocks: 2,
		AutoEncoder: ae, NormEps: 1e-5, RopeTheta: 1e4, Seed: 3}
}

// perturbWeights gives every parameter values large enough that each part
// of the model matters (zero biases and unit gains would hide their
// gradients' mistakes).
func perturbWeights(t *testing.T, m *Model, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 9))
	for _, p := range m.Params() {
		v := make([]float32, p.W.Numel())
		for i := range v {
			z := rng.NormFloat64()
			switch {
			case strings.HasSuffix(p.Name, "norm.weight") || strings.HasSuffix(p.Name, "norm1.weight") || strings.HasSuffix(p.Name, "norm2.weight"):
				v[i] = float32(1 + 0.2*z)
			case p.Kind == model.Gain: // biases
				v[i] = float32(0.1 * z)
			case p.Kind == model.Embedding:
				v[i] = float32(z)
			default:
				v[i] = float32(0.3 * z)
			}
		}
		if err := engine.WriteFloat32(p.W, v); err != nil {
			t.Fatal(err)
		}
	}
}

func randomBatch(vocab, n int, seed uint64) (tokens, targets []int32) {
	rng := rand.New(rand.NewPCG(seed, 10))
	tokens = make([]int32, n)
	targets = make([]int32, n)
	for i := range tokens {
		tokens[i] = int32(rng.IntN(vocab))
		targets[i] = int32(rng.IntN(vocab))
		if i%5 == 2 {
			targets[i] = IgnoreIndex
		}
	}
	return tokens, targets
}

// TestGradients checks the backward pass of the MAD backbone (every mixer,
// language model and auto-encoder) against central finite differences of
// the forward: for each parameter tensor, the directional derivative along
// its own gradient (which must equal |G|) and the partial derivative at
// its largest-gradient coordinate. The forward is float32, so the steps are
// large enough to keep rounding well below the differences.
func TestGradients(t *testing.T) {
	const B, T, V = 2, 6, 11
	for _, ae := range []bool{false, true} {
		for _, mixer := range []string{MixerSoftmax, MixerParallax, MixerLinear, MixerAffine} {
			name := mixer
			if ae {
				name += "-autoencoder"
			}
			t.Run(name, func(t *testing.T) {
				m, err := NewModel(cpu.New(), tinyModelConfig(V, mixer, ae), B, T)
				if err != nil {
					t.Fatal(err)
				}
				defer m.Free()
				perturbWeights(t, m, 4)
				tokens, targets := randomBatch(V, B*T, 5)
				loss := func() float64 {
					st, err := m.Forward(tokens, targets)
					if err != nil {
						t.Fatal(err)
					}
					return st.Mean()
				}
				loss()
				if err := m.Backward(); err != nil {
					t.Fatal(err)
				}
				worst := 0.0
				for _, p := range m.Params() {
					g, err := engine.Float32s(p.G)
					if err != nil {
						t.Fatal(err)
					}
					w, err := engine.Float32s(p.W)
					if err != nil {
						t.Fatal(err)
					}
					var norm, gmax float64
					imax := 0
					for i, x := range g {
						norm += float64(x) * float64(x)
						if a := math.Abs(float64(x)); a > gmax {
							gmax, imax = a, i
						}
					}
					norm = math.Sqrt(norm)
					if norm == 0 {
						t.Errorf("%s: gradient is all zero", p.Name)
						continue
					}
					set := func(f func(i int, w float32) float32) {
						v := make([]float32, len(w))
						for i := range v {
							v[i] = f(i, w[i])
						}
						if err := engine.WriteFloat32(p.W, v); err != nil {
							t.Fatal(err)
						}
					}
					// Directional derivative along u = G/|G|: exactly |G|.
					const h = 1e-3
					set(func(i int, x float32) float32 { return x + float32(h*float64(g[i])/norm) })
					lp := loss()
					set(func(i int, x float32) float32 { return x - float32(h*float64(g[i])/norm) })
					lm := loss()
					fd := (lp - lm) / (2 * h)
					rel := math.Abs(fd-norm) / norm
					worst = math.Max(worst, rel)
					if rel > 1e-2 {
						t.Errorf("%s: |G| = %.6g, directional finite difference %.6g (rel err %.2e)", p.Name, norm, fd, rel)
					}
					// The largest coordinate.
					const hc = 1e-3
					set(func(i int, x float32) float32 {
						if i == imax {
							return x + hc
						}
						return x
					})
					lp = loss()
					set(func(i int, x float32) float32 {
						if i == imax {
							return x - hc
						}
						return x
					})
					lm = loss()
					set(func(_ int, x float32) float32 { return x })
					fd = (lp - lm) / (2 * hc)
					rel = math.Abs(fd-float64(g[imax])) / gmax
					if rel > 3e-2 {
						t.Errorf("%s[%d]: gradient %.6g, finite difference %.6g (rel err %.2e)", p.Name, imax, g[imax], fd, rel)
					}
				}
				t.Logf("%d tensors, worst directional relative error %.2e", len(m.Params()), worst)
			})
		}
	}
}

// TestPaddingIsInvisible: a batch padded with all-ignored sequences has the
// same loss and gradients as the real sequences alone.
func TestPaddingIsInvisible(t *testing.T) {
	const T, V = 6, 11
	dev := cpu.New()
	small, err := NewModel(dev, tinyModelConfig(V, MixerParallax, false), 2, T)
	if err != nil {
		t.Fatal(err)
	}
	defer small.Free()
	big, err := NewModel(dev, tinyModelConfig(V, MixerParallax, false), 3, T)
	if err != nil {
		t.Fatal(err)
	}
	defer big.Free()
	tokens, targets := randomBatch(V, 2*T, 6)
	st1, err := small.Forward(tokens, targets)
	if err != nil {
		t.Fatal(err)
	}
	padTok := append(append([]int32(nil), tokens...), make([]int32, T)...)
	padTg := append([]int32(nil), targets...)
	for range T {
		padTg = append(padTg, IgnoreIndex)
	}
	st2, err := big.Forward(padTok, padTg)
	if err != nil {
		t.Fatal(err)
	}
	if st1.Count != st2.Count || math.Abs(st1.Sum-st2.Sum) > 1e-5*math.Abs(st1.Sum) {
		t.Fatalf("loss %v vs padded %v", st1, st2)
	}
	if err := small.Backward(); err != nil {
		t.Fatal(err)
	}
	if err := big.Backward(); err != nil {
		t.Fatal(err)
	}
	for i, p := range small.Params() {
		a, _ := engine.Float32s(p.G)
		b, _ := engine.Float32s(big.Params()[i].G)
		for j := range a {
			if math.Abs(float64(a[j]-b[j])) > 1e-5*(1+math.Abs(float64(a[j]))) {
				t.Fatalf("%s[%d]: gradient %v, padded %v", p.Name, j, a[j], b[j])
			}
		}
	}
}

// TestModelShape: the default MAD model has the reference's parameter
// count (docs/MAD.md, "The models": about 403k without embedding and head for
// attention + SwiGLU).
func TestModelShape(t *testing.T) {
	for _, c := range []struct {
		mixer string
		want  int
	}{
		// 2 x (4 x 128x128 + 4 x 128 biases) + 2 x 3 x 128x352 + 4 norms x 128 + head norm 128
		{MixerSoftmax, 2*(4*128*128+4*128) + 2*3*128*352 + 5*128},
		{MixerParallax, 2*(5*128*128+5*128) + 2*3*128*352 + 5*128},
	} {
		m, err := NewModel(cpu.New(), DefaultModelConfig(16, c.mixer), 1, 4)
		if err != nil {
			t.Fatal(err)
		}
		_, non := m.NumParams()
		m.Free()
		if non != c.want {
			t.Errorf("%s: %d non-embedding parameters, want %d", c.mixer, non, c.want)
		}
	}
	if w := SwiGLUWidth(128); w != 352 {
		t.Errorf("SwiGLU width %d, want 352", w)
	}
}
