package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/cpu"
	_ "github.com/parallax-engine/parallax/engine/cuda"
	"github.com/parallax-engine/parallax/engine/enginetest"
	_ "github.com/parallax-engine/parallax/engine/vulkan"
)

// agreeTokens is how many greedy tokens TestGreedyAgreesAcrossDevices
// compares; agreePrompt is its fixed prompt for a PARALLAX_AGREE_MODEL (ids
// taken modulo the vocabulary).
const agreeTokens = 20

var agreePrompt = []int{3, 1, 4, 1, 5, 9, 2, 6}

// TestGreedyAgreesAcrossDevices: 20 greedy tokens of a trained model on
// every GPU backend present, in f32 and bf16 where the device computes in
// them, are those of the CPU in f32, up to the first close call. Both models
// are then teacher-forced through prompt + the CPU's tokens, and every
// step's logits must agree within a rounding bound (f32LogitBound,
// bf16LogitBound). A step whose CPU top-2 margin is within twice the bound
// may legitimately pick another token, after which the sequences diverge, so
// tokens are compared only before the first such close call.
//
// The model is PARALLAX_AGREE_MODEL's directory (a `parallax train`
// checkpoint) if set, else a small softmax and a small Parallax model
// trained here on the CPU. PARALLAX_REQUIRE_VULKAN=1 / PARALLAX_REQUIRE_CUDA=1
// make a missing device a failure.
func TestGreedyAgreesAcrossDevices(t *testing.T) {
	type source struct {
		name string
		// model returns the checkpoint's directory and the prompt.
		model  func(*testing.T) (string, []int)
		strict bool // the first step must be beyond doubt (ours: trained to be)
	}
	var sources []source
	if dir := os.Getenv("PARALLAX_AGREE_MODEL"); dir != "" {
		sources = append(sources, source{"env", func(t *testing.T) (string, []int) { return dir, nil }, false})
	} else {
		for _, a := range []string{AttentionSoftmax, AttentionParallax} {
			sources = append(sources, source{a, func(t *testing.T) (string, []int) { return trainAgreeModel(t, a) }, true})
		}
	}

	// Each backend is opened once and shared by the sources.
	type gpu struct {
		backend, env string
		dev          engine.Device
		err          error
	}
	gpus := []*gpu{{backend: "vulkan", env: "PARALLAX_REQUIRE_VULKAN"}, {backend: "cuda", env: "PARALLAX_REQUIRE_CUDA"}}
	for _, g := range gpus {
		if g.dev, g.err = engine.Open(g.backend + ":0"); g.err != nil {
			if os.Getenv(g.env) == "1" {
				t.Fatalf("%s=1 but %v", g.env, g.err)
			}
			continue
		}
		defer g.dev.Close()
	}

	for _, src := range sources {
		t.Run(src.name, func(t *testing.T) {
			dir, prompt := src.model(t)
			ref, err := Load(dir, cpu.New(), LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer ref.Free()
			cfg := ref.Config
			if prompt == nil {
				for _, id := range agreePrompt {
					prompt = append(prompt, id%cfg.Vocab)
				}
			}
			if need := len(prompt) + agreeTokens - 1; cfg.MaxSeq < need {
				t.Fatalf("max_seq %d is shorter than the %d positions compared", cfg.MaxSeq, need)
			}
			want, err := ref.Generate(prompt, agreeTokens, GenerateOptions{IgnoreEOS: true}, nil)
			if err != nil {
				t.Fatal(err)
			}
			wantRows := teacherForce(t, ref, prompt, want)
			for s, row := range wantRows {
				if top, _ := top2(row); top != want[s] {
					t.Fatalf("step %d: the teacher-forced CPU picks %d, Generate %d", s, top, want[s])
				}
			}

			for _, g := range gpus {
				t.Run(g.backend, func(t *testing.T) {
					if g.dev == nil {
						t.Skipf("no %s device: %v", g.backend, g.err)
					}
					for _, dt := range []engine.DType{engine.F32, engine.BF16} {
						t.Run(dt.String(), func(t *testing.T) {
							if !slices.Contains(g.dev.Info().DTypes, dt) {
								t.Skipf("%s does not compute in %v", g.dev.Info().ID(), dt)
							}
							agreeOn(t, g.dev, dt, dir, prompt, want, wantRows, src.strict)
						})
					}
				})
			}
		})
	}
}

// agreeOn is TestGreedyAgreesAcrossDevices on one device and dtype, against
// the CPU's tokens want and their teacher-forced logits wantRows.
func agreeOn(t *testing.T, dev engine.Device, dt engine.DType, dir string, prompt, want []int,
	wantRows [][]float32, strict bool) {
	// As `parallax generate` loads a model (cmd/parallax/infer.go).
	m, err := Load(dir, dev, LoadOptions{DType: dt, Inference: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	cfg := m.Config
	got, err := m.Generate(prompt, agreeTokens, GenerateOptions{IgnoreEOS: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != agreeTokens {
		t.Fatalf("generated %d tokens, want %d", len(got), agreeTokens)
	}
	rows := teacherForce(t, m, prompt, want)

	closeAt := -1 // the first step whose CPU margin is within twice the bound
	var closeMargin, closeBound, worst float64
	for s, ref := range wantRows {
		bound := f32LogitBound(ref, cfg, len(prompt)+agreeTokens)
		if dt == engine.BF16 {
			bound = bf16LogitBound(ref, cfg)
		}
		for j, x := range rows[s] {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				t.Fatalf("step %d, logit %d: %v on %s %v", s, j, x, dev.Info().ID(), dt)
			}
			d := math.Abs(float64(x - ref[j]))
			worst = max(worst, d/bound)
			if d > bound {
				t.Errorf("step %d, logit %d: %v on %s %v, %v on the CPU: |diff| %.3g exceeds the bound %.3g",
					s, j, x, dev.Info().ID(), dt, ref[j], d, bound)
			}
		}
		top, second := top2(ref)
		if margin := float64(ref[top] - ref[second]); closeAt < 0 && margin <= 2*bound {
			closeAt, closeMargin, closeBound = s, margin, bound
		}
	}
	compared := agreeTokens
	if closeAt >= 0 {
		compared = closeAt
	}
	if i := commonPrefix(got, want); i < compared {
		t.Errorf("token %d: %s %v generated %v, the CPU %v, before any close call", i, dev.Info().ID(), dt, got, want)
	}

	note := "no close call"
	if closeAt >= 0 {
		note = fmt.Sprintf("first close call at step %d (margin %.3g <= 2 x bound %.3g)", closeAt, closeMargin, closeBound)
	}
	t.Logf("%s %v: cpu %v, device %v; %d of %d identical; worst |diff|/bound %.3g; %s",
		dev.Info().ID(), dt, want, got, commonPrefix(got, want), agreeTokens, worst, note)
	if dt == engine.BF16 && worst == 0 {
		t.Error("bf16 and f32 logits are identical: the bf16 path did not run")
	}
	if strict && closeAt == 0 {
		t.Error("the first step is already a close call: no token was compared")
	}
}

// teacherForce steps m through prompt and then the tokens of want but the
// last (a KV cache, one decode step a token, as Generate runs) and returns
// each step's logits: row s is the distribution of token s.
func teacherForce(t *testing.T, m *Model, prompt, want []int) [][]float32 {
	t.Helper()
	kv, err := m.NewKVCache(1, len(prompt)+len(want)-1)
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Free()
	ids := make([]int32, len(prompt))
	for i, id := range prompt {
		ids[i] = int32(id)
	}
	var rows [][]float32
	for s := range want {
		if s > 0 {
			ids = []int32{int32(want[s-1])}
		}
		row, err := m.Step(kv, ids, 1, len(ids), true)
		if err != nil {
			t.Fatalf("step %d: %v", s, err)
		}
		rows = append(rows, row)
	}
	return rows
}

// commonPrefix is the length of the common prefix of a and b.
func commonPrefix(a, b []int) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// f32LogitBound bounds |device - cpu| for a row of f32 logits whose
// positions attend over up to seq positions. It follows bf16LogitBound's
// chain of k = 12 L + 4 stored tensors, each now exact in f32 storage but
// computed by a different kernel on each side: the conformance suite holds
// every backend's op within enginetest.Tol(F32, n) = 64 u sqrt(n) (u =
// 2^-24) relative of the float64 reference, n the op's longest reduction
// (the model width, the FFN width, the attention width or the sequence), so
// two backends differ by at most twice that per link. Norms keep relative
// errors relative, so to first order the logits move by at most
// 2 k Tol(F32, n) of their scale, the row's largest magnitude: 2.4e-3 of it
// for the model trained here (k = 28, n = 128), a 45th of the bf16 bound's
// k 2^-8 = 0.11.
func f32LogitBound(row []float32, cfg Config, seq int) float64 {
	var scale float64
	for _, x := range row {
		scale = max(scale, math.Abs(float64(x)))
	}
	n := max(cfg.Dim, cfg.FFN, cfg.Heads*cfg.HeadDim, seq)
	k := float64(12*cfg.Layers + 4)
	return 2 * k * enginetest.Tol(engine.F32, n) * scale
}

// trainAgreeModel trains a small model with the given attention on the CPU,
// saves it to a temporary directory and returns that and a prompt. The data
// follow a fixed chain over a prime vocabulary: token a is followed by
// (7a+3) mod V seven times in eight and by a uniform draw otherwise, so the
// trained logits are far from random yet not one-hot (the favourite's
// log-odds over any other tend to ln(0.88 * 8 V) = 5.8), and greedy decoding
// walks the favourites' cycle of 23 tokens (7 has order 23 modulo 47)
// rather than repeating a few. 40 AdamW steps take the loss from ln V = 3.85
// to about 1 (the chain's entropy is 0.84) in about a second.
func trainAgreeModel(t *testing.T, attention string) (string, []int) {
	t.Helper()
	const B, T, steps = 8, 32, 40
	cfg := Config{Vocab: 47, Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16, FFN: 128,
		RopeTheta: 1e4, NormEps: 1e-6, TiedEmbeddings: true, Attention: attention, RInit: RInitLikeQ, MaxSeq: 64}
	dev := cpu.New()
	m, err := New(dev, cfg, Options{Seed: 17})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	if err := m.AllocGrads(); err != nil {
		t.Fatal(err)
	}
	var state []*engine.Tensor // AdamW's m and v per parameter
	for _, p := range m.Params() {
		for range 2 {
			s, err := dev.Alloc(engine.F32, p.W.Shape()...)
			if err != nil {
				t.Fatal(err)
			}
			defer dev.Free(s)
			state = append(state, s)
		}
	}

	rng := rand.New(rand.NewPCG(23, 29))
	stream := make([]int32, 4096)
	for i := 1; i < len(stream); i++ {
		a := int(stream[i-1])
		next := (7*a + 3) % cfg.Vocab
		if rng.IntN(8) == 0 {
			next = rng.IntN(cfg.Vocab)
		}
		stream[i] = int32(next)
	}
	tokens, targets := make([]int32, B*T), make([]int32, B*T)
	var first, last float64
	for s := range steps {
		for b := range B {
			at := rng.IntN(len(stream) - T - 1)
			copy(tokens[b*T:(b+1)*T], stream[at:at+T])
			copy(targets[b*T:(b+1)*T], stream[at+1:at+T+1])
		}
		if err := m.ZeroGrads(); err != nil {
			t.Fatal(err)
		}
		st, err := m.ForwardBackward(tokens, targets, B, T, 1)
		if err != nil {
			t.Fatal(err)
		}
		if s == 0 {
			first = st.Mean
		}
		last = st.Mean
		o := engine.AdamWOpts{LR: 1e-2, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, Step: s + 1}
		for i, p := range m.Params() {
			if err := dev.AdamW(p.W, p.G, state[2*i], state[2*i+1], o); err != nil {
				t.Fatal(err)
			}
		}
		m.MarkWeightsChanged()
	}
	t.Logf("%s: trained %d steps, loss %.3f -> %.3f (ln V = %.3f)", attention, steps, first, last, math.Log(float64(cfg.Vocab)))
	if !(last < 0.5*first) {
		t.Fatalf("training did not converge: loss %.3f -> %.3f", first, last)
	}
	dir := t.TempDir()
	if err := m.Save(dir); err != nil {
		t.Fatal(err)
	}
	prompt := []int{1} // the chain's favourites from 1: no noise to recover from
	for len(prompt) < 8 {
		prompt = append(prompt, (7*prompt[len(prompt)-1]+3)%cfg.Vocab)
	}
	return dir, prompt
}
