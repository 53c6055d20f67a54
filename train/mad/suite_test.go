package mad

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/cpu"
	"github.com/parallax-engine/parallax/train"
)

// smokeProtocol runs every task's baseline at a tiny scale: a few examples,
// two epochs of batch 4, one grid point.
func smokeProtocol() Protocol {
	p := QuickProtocol()
	p.Name = "smoke"
	p.LRs, p.WDs = []float64{3e-3}, []float64{0.1}
	p.Epochs, p.MaxSteps, p.Batch = 2, 0, 4
	p.MaxTrain, p.MaxTest = 8, 5
	return p
}

// smokeModel is a MAD model shrunk for CI (width 16, 2 heads of 8).
var smokeModel = ModelConfig{Dim: 16, Heads: 2, HeadDim: 8, FFN: 32, Blocks: 2, NormEps: 1e-5, RopeTheta: 1e4, Seed: 1}

// countingOpen opens CPU devices and counts them.
func countingOpen(n *atomic.Int32) func(string) (engine.Device, error) {
	return func(string) (engine.Device, error) {
		n.Add(1)
		return cpu.New(), nil
	}
}

// syncBuffer is a bytes.Buffer safe for the suite's concurrent progress.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
	on func(string)
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.on != nil {
		s.on(string(p))
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestSmokeEveryTaskAndMixer trains every task with every built-in mixer
// (and both optimizers) at a tiny scale through the whole suite: plan,
// data, training, evaluation, aggregation, the table, JSON and the chart.
func TestSmokeEveryTaskAndMixer(t *testing.T) {
	out := t.TempDir()
	var opens atomic.Int32
	var log syncBuffer
	cfg := SuiteConfig{
		Mixers:     []string{MixerSoftmax, MixerParallax, MixerLinear, MixerAffine},
		Optimizers: []string{train.OptAdamW, train.OptMuon},
		Protocol:   smokeProtocol(), Out: out, Parallel: 2, Model: smokeModel,
		Stdout: &log, OpenDevice: countingOpen(&opens),
	}
	res, err := RunSuite(context.Background(), cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if res.Planned != 6*4*2 || res.Finished != res.Planned || res.Resumed != 0 || res.Interrupted {
		t.Fatalf("planned %d finished %d resumed %d interrupted %v", res.Planned, res.Finished, res.Resumed, res.Interrupted)
	}
	if n := opens.Load(); n != 2 {
		t.Errorf("%d devices opened for --parallel 2", n)
	}
	for _, r := range res.Runs {
		if r.Epochs != 2 || r.Steps != 4 || r.BestEpoch < 1 || !(r.TestAcc >= 0 && r.TestAcc <= 1) || r.Stop != StopEpochs {
			t.Errorf("%s: %+v", r.Key, r)
		}
	}
	for _, a := range res.Averages {
		if !a.Complete || a.Tasks != 6 || math.IsNaN(float64(a.TestAcc)) {
			t.Errorf("average %+v", a)
		}
	}
	table := res.Table()
	for _, want := range append(Tasks(), "average", "parallax/muon", "affine/adamw") {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	for _, f := range []string{ResultsJSON, ResultsMD, ResultsPNG} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	var back SuiteResult
	b, _ := os.ReadFile(filepath.Join(out, ResultsJSON))
	if err := json.Unmarshal(b, &back); err != nil || len(back.TaskScores) != 6*8 {
		t.Errorf("results.json: %v, %d task scores", err, len(back.TaskScores))
	}
	if !strings.Contains(log.String(), "done") {
		t.Errorf("no progress lines:\n%s", log.String())
	}
}

// TestResume: an interrupted suite keeps its finished runs; the next
// invocation trains only the rest, and a finished suite trains nothing.
func TestResume(t *testing.T) {
	out := t.TempDir()
	p := smokeProtocol()
	p.LRs = []float64{1e-3, 3e-3}
	cfg := SuiteConfig{Tasks: []string{"recall", "compress", "in-context-recall"}, Mixers: []string{MixerParallax},
		Protocol: p, Out: out, Model: smokeModel}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var opens atomic.Int32
	cfg.OpenDevice = countingOpen(&opens)
	cfg.Stdout = &syncBuffer{on: func(s string) {
		if strings.Contains(s, " done ") {
			cancel() // interrupt after the first finished run
		}
	}}
	res, err := RunSuite(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Interrupted || res.Finished != 1 || res.Planned != 4 {
		t.Fatalf("interrupted %v, finished %d of %d", res.Interrupted, res.Finished, res.Planned)
	}
	if !strings.Contains(res.Table(), "*") {
		t.Errorf("a partial table has no '*' marks:\n%s", res.Table())
	}
	files, _ := filepath.Glob(filepath.Join(out, RunsDir, "*.json"))
	if len(files) != 1 {
		t.Fatalf("%d run files after the interruption, want 1", len(files))
	}
	first, _ := os.ReadFile(files[0])

	cfg.Stdout = nil
	res, err = RunSuite(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Interrupted || res.Resumed != 1 || res.Finished != 4 {
		t.Fatalf("second invocation: interrupted %v, resumed %d, finished %d", res.Interrupted, res.Resumed, res.Finished)
	}
	again, _ := os.ReadFile(files[0])
	if !bytes.Equal(first, again) {
		t.Error("a finished run was trained again")
	}

	opens.Store(0)
	res, err = RunSuite(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Resumed != 4 || opens.Load() != 0 {
		t.Errorf("third invocation: resumed %d, opened %d devices", res.Resumed, opens.Load())
	}
	// A different protocol is a different plan: nothing is reused.
	cfg.Protocol.Epochs = 1
	plan, _ := cfg.Plan()
	done, _ := LoadRuns(out, nil)
	for _, r := range plan {
		if _, ok := done[r.Key()]; ok {
			t.Errorf("run %s of another protocol counted as finished", r.Key())
		}
	}
	// A corrupt run file is ignored (and redone), not fatal.
	os.WriteFile(filepath.Join(out, RunsDir, "broken.json"), []byte("{"), 0o644)
	var warned bool
	if _, err := LoadRuns(out, func(string) { warned = true }); err != nil || !warned {
		t.Errorf("corrupt run file: err %v, warned %v", err, warned)
	}
}

// TestLearns: the training loop does learn. A small softmax model solves
// compression of 4 tokens of a 5-token vocabulary far above chance.
func TestLearns(t *testing.T) {
	s, _ := Baseline(Compression)
	s.Vocab, s.SeqLen, s.TrainExamples, s.TestExamples = 6, 4, 512, 64
	trainSet, testSet, err := Generate(s)
	if err != nil {
		t.Fatal(err)
	}
	spec := RunSpec{Setting: s, Mixer: MixerSoftmax, Optimizer: train.OptAdamW, LR: 1e-2, Epochs: 30, Batch: 64,
		MinLR: 1e-6, StopAcc: 0.999, Seed: 1, Model: smokeModel}
	res, err := Train(context.Background(), cpu.New(), spec, trainSet, testSet, nil)
	if err != nil {
		t.Fatal(err)
	}
	first := res.History[0]
	t.Logf("epoch 1 acc %.3f, best %.3f at epoch %d of %d (%s)", first.TestAcc, res.TestAcc, res.BestEpoch, res.Epochs, res.Stop)
	if res.MaxTestAcc < 0.6 || float64(res.History[len(res.History)-1].TestLoss) >= float64(first.TestLoss) {
		t.Errorf("did not learn: %+v", res.History)
	}
}

func TestProtocols(t *testing.T) {
	full, quick := FullProtocol(), QuickProtocol()
	cfg := SuiteConfig{Tasks: Tasks(), Mixers: []string{MixerSoftmax}, Optimizers: []string{train.OptAdamW}, Protocol: full}
	plan, err := cfg.Plan()
	if err != nil {
		t.Fatal(err)
	}
	if len(plan) != 66*6 {
		t.Errorf("full plan: %d runs, want 396", len(plan))
	}
	cfg.Protocol = quick
	plan, _ = cfg.Plan()
	if len(plan) != 6*2 {
		t.Errorf("quick plan: %d runs, want 12", len(plan))
	}
	for _, r := range plan {
		want := 20
		if r.Setting.Task == Memorization {
			want = 200
		}
		if r.Epochs != want {
			t.Errorf("quick %s: %d epochs, want %d", r.Setting.Task, r.Epochs, want)
		}
	}
	r := RunSpec{LR: 1e-3, MinLR: 1e-6, Epochs: 200}
	if r.EpochLR(0) != 1e-3 || math.Abs(r.EpochLR(200)-1e-6) > 1e-15 || math.Abs(r.EpochLR(100)-(1e-3+1e-6)/2) > 1e-15 {
		t.Errorf("cosine: %v %v %v", r.EpochLR(0), r.EpochLR(100), r.EpochLR(200))
	}
	keys := map[string]bool{}
	for _, r := range plan {
		if keys[r.Key()] {
			t.Errorf("duplicate run key %s", r.Key())
		}
		keys[r.Key()] = true
	}
	o := RunSpec{Optimizer: train.OptMuon, LR: 5e-4, WD: 0.1}.OptimConfig()
	if o.Muon.Scaling != train.ScaleMoonlight || o.Muon.LR != 5e-4 || o.AdamW.Beta2 != 0.999 || o.AdamW.GainWeightDecay != 0.1 {
		t.Errorf("optimizer config %+v", o)
	}
}
