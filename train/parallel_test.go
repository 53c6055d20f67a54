package train

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/cpu"
	"github.com/parallax-engine/parallax/internal/concurrent"
	"github.com/parallax-engine/parallax/model"
	"github.com/parallax-engine/parallax/train/dist"
)

// joinRanks forms an n-rank job of goroutines on the loopback interface.
func joinRanks(t *testing.T, n int, o dist.Options) []*dist.Group {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := make([]*dist.Group, n)
	errs := concurrent.Each(n, func(r int) (err error) {
		ro := o
		if r == 0 {
			ro.Listener = ln
		}
		gs[r], err = dist.Join(context.Background(), dist.Env{Rank: r, World: n, Addr: ln.Addr().String()}, ro)
		return err
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return gs
}

// onRanks runs f on every rank concurrently; each rank's group is closed
// with f's error when it returns, as the command does.
func onRanks(t *testing.T, n int, o dist.Options, f func(rank int, g *dist.Group) error) []error {
	t.Helper()
	gs := joinRanks(t, n, o)
	return concurrent.Each(n, func(r int) error {
		err := f(r, gs[r])
		gs[r].Close(err)
		return err
	})
}

// TestDistributedMuonMatchesSingle compares three optimizer steps of one
// process on the averaged gradients with the same steps on two ranks whose
// gradients average to them: distributed Muon (each rank orthogonalises
// its own matrices, then broadcasts them) and ZeRO-1 must give the same
// parameters on every rank.
func TestDistributedMuonMatchesSingle(t *testing.T) {
	specs := []paramSpec{
		{"embed", model.Embedding, []int{40, 16}},
		{"q", model.Matrix, []int{16, 16}},
		{"k", model.Matrix, []int{8, 16}},
		{"up", model.Matrix, []int{32, 16}},
		{"down", model.Matrix, []int{16, 32}},
		{"o", model.Matrix, []int{16, 16}},
		{"norm", model.Gain, []int{16}},
	}
	rng := rand.New(rand.NewPCG(3, 4))
	numel := func(s []int) int { return engine.Shape(s).Numel() }
	init := make([][]float32, len(specs))
	for i, s := range specs {
		init[i] = randVals(rng, numel(s.shape), 0.1)
	}
	const steps = 3
	grads := make([][2][][]float32, steps) // [step][rank][param]
	for k := range grads {
		for r := range 2 {
			for _, s := range specs {
				grads[k][r] = append(grads[k][r], randVals(rng, numel(s.shape), 1))
			}
		}
	}
	build := func(t *testing.T, dev engine.Device) []*model.Param { return newParams(t, dev, specs, init) }
	setGrads := func(t *testing.T, ps []*model.Param, g [][]float32) {
		for i, p := range ps {
			if err := p.G.Device().Write(p.G, engine.EncodeFloat32(engine.F32, g[i])); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		optim string
		zero  bool
	}{{OptMuon, false}, {OptMuon, true}, {OptAdamW, true}} {
		name := tc.optim
		if tc.zero {
			name += "-zero1"
		}
		t.Run(name, func(t *testing.T) {
			cfg := DefaultOptimConfig(tc.optim)
			// One process on the mean gradients, averaged as the collectives
			// do (f32 sum, then divided by the number of ranks).
			dev := cpu.New()
			single := build(t, dev)
			o, err := NewOptimizer(dev, single, cfg)
			if err != nil {
				t.Fatal(err)
			}
			acc, _ := dev.Alloc(engine.F32, 1)
			var norms []float64
			for k := range steps {
				mean := make([][]float32, len(specs))
				for i := range specs {
					mean[i] = make([]float32, len(grads[k][0][i]))
					for j := range mean[i] {
						mean[i][j] = (grads[k][0][i][j] + grads[k][1][i][j]) / 2
					}
				}
				setGrads(t, single, mean)
				n, err := GradNorm(dev, single, acc)
				if err != nil {
					t.Fatal(err)
				}
				norms = append(norms, n)
				if err := o.Step(1); err != nil {
					t.Fatal(err)
				}
			}
			want := make([][]float32, len(single))
			for i, p := range single {
				want[i] = read(t, p.W)
			}

			got := make([][][]float32, 2)
			held := make([]int, 2)
			errs := onRanks(t, 2, dist.Options{}, func(r int, g *dist.Group) error {
				dev := cpu.New()
				comm, err := dist.NewComm(g, dev, dist.BackendTCP)
				if err != nil {
					return err
				}
				ps := build(t, dev)
				o, err := NewParallelOptimizer(dev, ps, cfg, comm, ParallelOptions{ZeRO: tc.zero, BucketBytes: 3000})
				if err != nil {
					return err
				}
				held[r] = len(o.State())
				acc, _ := dev.Alloc(engine.F32, 1)
				for k := range steps {
					setGrads(t, ps, grads[k][r])
					if err := o.ReduceGrads(); err != nil {
						return err
					}
					n, err := o.GlobalGradNorm(acc)
					if err != nil {
						return err
					}
					if math.Abs(n-norms[k]) > 1e-5*norms[k] {
						return errors.New("the global gradient norm differs from one process's")
					}
					if err := o.Step(1); err != nil {
						return err
					}
				}
				for _, p := range ps {
					got[r] = append(got[r], read(t, p.W))
				}
				return nil
			})
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			for r := range 2 {
				for i, s := range specs {
					if e := maxRelErr(got[r][i], to64(want[i]), to64(want[i])); e > 1e-6 {
						t.Errorf("rank %d, %s: differs from one process by %.2e", r, s.name, e)
					}
				}
			}
			// Sharded state: every tensor on exactly one rank, except
			// AdamW's without ZeRO-1, which both ranks hold.
			total, shared := len(o.State()), 0
			if !tc.zero {
				shared = 4 // embed and norm: exp_avg and exp_avg_sq
			}
			if held[0]+held[1]-shared != total {
				t.Errorf("ranks hold %d + %d state tensors of %d", held[0], held[1], total)
			}
			t.Logf("state tensors held: rank 0 %d, rank 1 %d, of %d", held[0], held[1], total)
		})
	}
}

// runJob runs cfg on n goroutine ranks and returns rank 0's result and
// every rank's error.
func runJob(t *testing.T, n int, cfg Config, o dist.Options, each func(rank int, c *Config)) (Result, []error) {
	t.Helper()
	var res Result
	errs := onRanks(t, n, o, func(r int, g *dist.Group) error {
		c := cfg
		c.Group = g
		c.Comm = dist.BackendTCP
		if r != 0 {
			c.Stdout = nil
		}
		if each != nil {
			each(r, &c)
		}
		rr, err := Run(context.Background(), c)
		if r == 0 {
			res = rr
		}
		return err
	})
	return res, errs
}

func relDiff(a, b float64) float64 { return math.Abs(a-b) / math.Max(math.Abs(b), 1e-12) }

// paramsClose compares two checkpoints' parameters.
func paramsClose(t *testing.T, dirA, dirB string, tol float64) {
	t.Helper()
	a, b := checkpointParams(t, dirA), checkpointParams(t, dirB)
	if len(a) != len(b) {
		t.Fatalf("%d vs %d tensors", len(a), len(b))
	}
	worst, where := 0.0, ""
	for n, va := range a {
		x, y := engine.DecodeFloat32(engine.F32, va), engine.DecodeFloat32(engine.F32, b[n])
		if e := maxRelErr(x, to64(y), to64(y)); e > worst {
			worst, where = e, n
		}
	}
	if worst > tol {
		t.Errorf("parameters differ by %.2e (relative, %s)", worst, where)
	}
	t.Logf("largest parameter difference %.2e (%s)", worst, where)
}

// TestDataParallelMatchesSingle trains the same run in one process and on
// two ranks with the same global batch: the loss curves and the final
// parameters agree up to float rounding (the ranks' gradients are summed
// in another order).
func TestDataParallelMatchesSingle(t *testing.T) {
	for _, tc := range []struct {
		optim string
		zero  bool
	}{{OptMuon, false}, {OptAdamW, true}} {
		name := tc.optim
		if tc.zero {
			name += "-zero1"
		}
		t.Run(name, func(t *testing.T) {
			cfg := testSetup(t, model.AttentionParallax, tc.optim)
			cfg.Steps, cfg.Accum, cfg.EvalEvery, cfg.LogEvery = 8, 2, 4, 1
			var single []float64
			one := cfg
			one.Out += "-single"
			one.OnStep = func(r Record) { single = append(single, *r.Loss) }
			resOne, err := Run(context.Background(), one)
			if err != nil {
				t.Fatal(err)
			}
			losses := make([][]float64, 2)
			res, errs := runJob(t, 2, cfg, dist.Options{}, func(r int, c *Config) {
				c.ZeRO = tc.zero
				c.BucketMB = 0.05 // several buckets
				c.OnStep = func(rec Record) { losses[r] = append(losses[r], *rec.Loss) }
			})
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			for i := range single {
				if relDiff(losses[0][i], single[i]) > 1e-4 || losses[1][i] != losses[0][i] {
					t.Errorf("step %d: loss %.6f (rank 0) / %.6f (rank 1), one process %.6f", i+1, losses[0][i], losses[1][i], single[i])
				}
			}
			if relDiff(res.ValLoss, resOne.ValLoss) > 1e-4 {
				t.Errorf("validation loss %.6f, one process %.6f", res.ValLoss, resOne.ValLoss)
			}
			t.Logf("losses %.4f -> %.4f (one process %.4f -> %.4f), val %.4f / %.4f",
				losses[0][0], losses[0][len(single)-1], single[0], single[len(single)-1], res.ValLoss, resOne.ValLoss)
			paramsClose(t, cfg.Out, one.Out, 2e-4)
			sa, _, _ := ReadState(filepath.Join(cfg.Out, OptimizerFile))
			sb, _, _ := ReadState(filepath.Join(one.Out, OptimizerFile))
			if sa.Sampler != sb.Sampler || sa.Tokens != sb.Tokens {
				t.Errorf("training state %+v, one process %+v", sa, sb)
			}
			if _, err := os.Stat(filepath.Join(cfg.Out, PlotFile)); err != nil {
				t.Errorf("rank 0 wrote no plot: %v", err)
			}
		})
	}
}

// TestResumeAcrossWorldSizes interrupts a run and resumes it with another
// number of ranks (2 -> 1 and 1 -> 2): the consolidated checkpoint loads
// at any world size and the result matches an uninterrupted run.
func TestResumeAcrossWorldSizes(t *testing.T) {
	const k = 3
	cfg := testSetup(t, model.AttentionParallax, OptMuon)
	cfg.Steps, cfg.EvalEvery, cfg.LogEvery = 2*k, -1, 1
	straight := cfg
	straight.Out += "-straight"
	if _, err := Run(context.Background(), straight); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ first, second int }{{2, 1}, {1, 2}} {
		t.Run(fmt.Sprintf("%dto%d", tc.first, tc.second), func(t *testing.T) {
			c := cfg
			c.Out = filepath.Join(t.TempDir(), "run")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			run := func(n int, c Config) (Result, error) {
				if n == 1 {
					return Run(ctx, c)
				}
				var res Result
				var err error
				errs := onRanks(t, n, dist.Options{}, func(r int, g *dist.Group) error {
					cc := c
					cc.Group, cc.Comm = g, dist.BackendTCP
					rr, e := Run(ctx, cc)
					if r == 0 {
						res, err = rr, e
					}
					return e
				})
				for _, e := range errs {
					if e != nil && err == nil {
						err = e
					}
				}
				return res, err
			}
			// The ranks vote on stopping during the next step: a job told at
			// step k-1 stops after step k, like one process told at step k.
			stopAt := k
			if tc.first > 1 {
				stopAt = k - 1
			}
			c.OnStep = func(r Record) {
				if r.Step == stopAt {
					cancel()
				}
			}
			res, err := run(tc.first, c)
			if err != nil {
				t.Fatal(err)
			}
			if !res.Interrupted || res.Step != k {
				t.Fatalf("first part: interrupted %v at step %d, want step %d", res.Interrupted, res.Step, k)
			}
			ctx = context.Background()
			resume := Config{Out: c.Out, Device: "cpu", Resume: true, EvalEvery: -1, LogEvery: 1, SaveEvery: -1}
			if res, err = run(tc.second, resume); err != nil {
				t.Fatal(err)
			}
			if res.Step != 2*k {
				t.Fatalf("resumed run ended at step %d", res.Step)
			}
			paramsClose(t, c.Out, straight.Out, 2e-4)
		})
	}
}

// TestDataParallelRankFailure: rank 1 fails at step 3; rank 0 stops with an
// error naming it, and the checkpoint of step 2 is intact (it resumes).
func TestDataParallelRankFailure(t *testing.T) {
	cfg := testSetup(t, model.AttentionParallax, OptMuon)
	cfg.Steps, cfg.EvalEvery, cfg.SaveEvery = 6, -1, 2
	start := time.Now()
	_, errs := runJob(t, 2, cfg, dist.Options{}, func(r int, c *Config) {
		if r == 1 {
			g := c.Group
			c.OnStep = func(rec Record) {
				if rec.Step == 3 {
					g.Close(errors.New("injected failure"))
				}
			}
		}
	})
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "rank 1 (pid") || !strings.Contains(errs[0].Error(), "injected failure") {
		t.Errorf("rank 0: %v", errs[0])
	}
	if errs[1] == nil {
		t.Error("rank 1 went on")
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("took %s", d)
	}
	t.Logf("rank 0: %v", errs[0])
	st, _, err := ReadState(filepath.Join(cfg.Out, OptimizerFile))
	if err != nil || st.Step != 2 {
		t.Fatalf("checkpoint after the failure: step %d, %v", st.Step, err)
	}
	res, err := Run(context.Background(), Config{Out: cfg.Out, Device: "cpu", Resume: true, EvalEvery: -1, SaveEvery: -1, Steps: 3})
	if err != nil || res.Step != 3 {
		t.Errorf("resuming the last checkpoint: step %d, %v", res.Step, err)
	}
}

func TestDataParallelBatchMustDivide(t *testing.T) {
	cfg := testSetup(t, model.AttentionParallax, OptMuon)
	cfg.Batch = 7
	_, errs := runJob(t, 2, cfg, dist.Options{}, nil)
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "divisible by the 2 ranks") {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}
