//go:build cgo

package cuda_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/cuda"
	"github.com/parallax-engine/parallax/internal/concurrent"
	"github.com/parallax-engine/parallax/model"
	"github.com/parallax-engine/parallax/train"
	"github.com/parallax-engine/parallax/train/dist"
)

// PARALLAX_REQUIRE_NCCL=1 turns a missing NCCL or fewer than two GPUs into
// failures instead of skips.
func requireNCCL() bool { return os.Getenv("PARALLAX_REQUIRE_NCCL") == "1" }

// TestNCCLLibrary loads libnccl.so.2; where it is missing the error must
// say what was looked for and what to do.
func TestNCCLLibrary(t *testing.T) {
	v, path, err := cuda.NCCLVersion()
	if err != nil {
		if requireNCCL() {
			t.Fatalf("PARALLAX_REQUIRE_NCCL=1: %v", err)
		}
		for _, want := range []string{"libnccl.so.2", "nvidia-nccl", "--comm tcp"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the error for a missing NCCL lacks %q: %v", want, err)
			}
		}
		t.Skipf("no NCCL: %v", err)
	}
	t.Logf("NCCL %s from %s", v, path)
}

// openGPUs opens cuda:0..n-1, skipping (or failing, with
// PARALLAX_REQUIRE_NCCL=1) where there are fewer GPUs or no NCCL.
func openGPUs(t *testing.T, n int) []*cuda.Device {
	t.Helper()
	skip := func(format string, a ...any) {
		if requireNCCL() {
			t.Fatalf("PARALLAX_REQUIRE_NCCL=1: "+format, a...)
		}
		t.Skipf(format, a...)
	}
	if _, _, err := cuda.NCCLVersion(); err != nil {
		skip("no NCCL: %v", err)
	}
	var out []*cuda.Device
	for i := range n {
		d, err := engine.Open(fmt.Sprintf("cuda:%d", i))
		if err != nil {
			for _, d := range out {
				d.Close()
			}
			skip("needs %d CUDA devices: %v", n, err)
		}
		out = append(out, d.(*cuda.Device))
	}
	t.Cleanup(func() {
		for _, d := range out {
			d.Close()
		}
	})
	return out
}

// onGPUs runs f for every rank on its own goroutine and fails the test
// with the ranks' errors.
func onGPUs(t *testing.T, n int, f func(r int) error) {
	t.Helper()
	for r, err := range concurrent.Each(n, f) {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

func upload(d engine.Device, dt engine.DType, v []float32, shape ...int) *engine.Tensor {
	x, err := engine.FromFloat32(d, dt, v, shape...)
	if err != nil {
		panic(err)
	}
	return x
}

func download(x *engine.Tensor) []float32 {
	b := make([]byte, x.Bytes())
	if err := x.Device().Read(x, b); err != nil {
		panic(err)
	}
	return engine.DecodeFloat32(x.DType(), b)
}

func closeTo(got, want []float32, tol float64) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d values, want %d", len(got), len(want))
	}
	for i := range got {
		if math.Abs(float64(got[i]-want[i])) > tol*math.Max(1, math.Abs(float64(want[i]))) {
			return fmt.Errorf("[%d] = %g, want %g", i, got[i], want[i])
		}
	}
	return nil
}

// ncclPair opens two GPUs and a communicator between them (closed when
// the test ends); comms is nil when creating it failed (already reported).
func ncclPair(t *testing.T) ([]*cuda.Device, []*cuda.NCCL) {
	t.Helper()
	devs := openGPUs(t, 2)
	id, err := cuda.NCCLUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	comms := make([]*cuda.NCCL, 2)
	onGPUs(t, 2, func(r int) error {
		var err error
		comms[r], err = devs[r].NewNCCL(id, r, 2)
		return err
	})
	t.Cleanup(func() {
		for _, c := range comms {
			if c != nil {
				c.Close()
			}
		}
	})
	if t.Failed() {
		return devs, nil
	}
	return devs, comms
}

// TestNCCLCollectives runs every collective on two GPUs and measures the
// all-reduce bandwidth.
func TestNCCLCollectives(t *testing.T) {
	devs, comms := ncclPair(t)
	if comms == nil {
		return
	}
	const n = 1000
	seq := func(f func(i int) float32) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = f(i)
		}
		return v
	}
	onGPUs(t, 2, func(r int) error {
		d, c := devs[r], comms[r]
		fr := float32(r)
		a := upload(d, engine.F32, seq(func(i int) float32 { return fr + float32(i) }), n)
		b := upload(d, engine.BF16, seq(func(i int) float32 { return 2 * fr * float32(i%7) }), n)
		if err := c.AllReduce(false, a, b); err != nil {
			return err
		}
		if err := closeTo(download(a), seq(func(i int) float32 { return 1 + 2*float32(i) }), 0); err != nil {
			return fmt.Errorf("all-reduce f32: %w", err)
		}
		if err := closeTo(download(b), seq(func(i int) float32 { return 2 * float32(i%7) }), 0); err != nil {
			return fmt.Errorf("all-reduce bf16: %w", err)
		}
		m := upload(d, engine.F32, seq(func(i int) float32 { return fr * 4 }), n)
		if err := c.AllReduce(true, m); err != nil {
			return err
		}
		if err := closeTo(download(m), seq(func(int) float32 { return 2 }), 0); err != nil {
			return fmt.Errorf("all-reduce avg: %w", err)
		}
		p := upload(d, engine.F32, seq(func(i int) float32 { return fr + 1 }), n)
		q := upload(d, engine.F32, seq(func(i int) float32 { return 10 * (fr + 1) }), n)
		if err := c.Reduce(false, []int{1, 0}, p, q); err != nil {
			return err
		}
		// Only the root's tensor is defined afterwards.
		got, want := download(p), float32(3)
		if r == 0 {
			got, want = download(q), 30
		}
		if err := closeTo(got, seq(func(int) float32 { return want }), 0); err != nil {
			return fmt.Errorf("reduce: %w", err)
		}
		u := upload(d, engine.F32, seq(func(int) float32 { return fr }), n)
		w := upload(d, engine.F32, seq(func(int) float32 { return fr }), n)
		if err := c.Broadcast([]int{1, 0}, u, w); err != nil {
			return err
		}
		if err := closeTo(download(u), seq(func(int) float32 { return 1 }), 0); err != nil {
			return fmt.Errorf("broadcast u: %w", err)
		}
		if err := closeTo(download(w), seq(func(int) float32 { return 0 }), 0); err != nil {
			return fmt.Errorf("broadcast w: %w", err)
		}
		in := upload(d, engine.F32, seq(func(i int) float32 { return float32(i) + fr }), n)
		out := upload(d, engine.F32, make([]float32, n/2), n/2)
		if err := c.ReduceScatter(false, out, in); err != nil {
			return err
		}
		if err := closeTo(download(out), seq(func(i int) float32 { return 2*float32(i+r*n/2) + 1 })[:n/2], 0); err != nil {
			return fmt.Errorf("reduce-scatter: %w", err)
		}
		all := upload(d, engine.F32, make([]float32, n), n)
		if err := c.AllGather(all, out); err != nil {
			return err
		}
		if err := closeTo(download(all), seq(func(i int) float32 { return 2*float32(i) + 1 }), 0); err != nil {
			return fmt.Errorf("all-gather: %w", err)
		}
		return c.AsyncError()
	})

	// Bandwidth of a 256 MiB f32 all-reduce: the data over the time (with
	// two ranks this is also nccl-tests' bus bandwidth, 2 (n-1)/n of it).
	const big = 64 << 20
	bufs := make([]*engine.Tensor, 2)
	for r, d := range devs {
		x, err := d.Alloc(engine.F32, big)
		if err != nil {
			t.Fatal(err)
		}
		bufs[r] = x
	}
	var took time.Duration
	onGPUs(t, 2, func(r int) error {
		const iters = 20
		for i := range iters + 3 {
			if i == 3 {
				if err := devs[r].Sync(); err != nil {
					return err
				}
				start := time.Now()
				defer func() {
					if r == 0 {
						took = time.Since(start) / iters
					}
				}()
			}
			if err := comms[r].AllReduce(false, bufs[r]); err != nil {
				return err
			}
		}
		return devs[r].Sync()
	})
	if took > 0 {
		gb := float64(big*4) / 1e9
		t.Logf("all-reduce 256 MiB f32 on 2 GPUs: %.3f ms, %.0f GB/s", float64(took.Microseconds())/1e3, gb/took.Seconds())
	}
}

// TestDistributedMuonNCCL checks on two GPUs with NCCL that three steps of
// distributed Muon (and ZeRO-1) give the parameters of one GPU stepping on
// the mean gradients.
func TestDistributedMuonNCCL(t *testing.T) {
	devs := openGPUs(t, 2)
	type spec struct {
		name  string
		kind  model.ParamKind
		shape []int
	}
	specs := []spec{
		{"embed", model.Embedding, []int{512, 128}},
		{"q", model.Matrix, []int{128, 128}},
		{"k", model.Matrix, []int{64, 128}},
		{"up", model.Matrix, []int{384, 128}},
		{"down", model.Matrix, []int{128, 384}},
		{"o", model.Matrix, []int{128, 128}},
		{"norm", model.Gain, []int{128}},
	}
	rng := rand.New(rand.NewPCG(5, 6))
	rnd := func(n int, s float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * s)
		}
		return v
	}
	numel := func(s []int) int { return engine.Shape(s).Numel() }
	init := make([][]float32, len(specs))
	for i, s := range specs {
		init[i] = rnd(numel(s.shape), 0.05)
	}
	const steps = 3
	grads := make([][2][][]float32, steps)
	for k := range grads {
		for r := range 2 {
			for _, s := range specs {
				grads[k][r] = append(grads[k][r], rnd(numel(s.shape), 1))
			}
		}
	}
	build := func(d engine.Device) []*model.Param {
		var ps []*model.Param
		for i, s := range specs {
			g, _ := d.Alloc(engine.F32, s.shape...)
			ps = append(ps, &model.Param{Name: s.name, Kind: s.kind, W: upload(d, engine.F32, init[i], s.shape...), G: g})
		}
		return ps
	}
	setGrads := func(ps []*model.Param, g [][]float32) {
		for i, p := range ps {
			if err := p.G.Device().Write(p.G, engine.EncodeFloat32(engine.F32, g[i])); err != nil {
				panic(err)
			}
		}
	}
	for _, zero := range []bool{false, true} {
		t.Run(fmt.Sprintf("zero1=%v", zero), func(t *testing.T) {
			cfg := train.DefaultOptimConfig(train.OptMuon)
			single := build(devs[0])
			o, err := train.NewOptimizer(devs[0], single, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer o.Free()
			for k := range steps {
				mean := make([][]float32, len(specs))
				for i := range specs {
					mean[i] = make([]float32, len(grads[k][0][i]))
					for j := range mean[i] {
						mean[i][j] = (grads[k][0][i][j] + grads[k][1][i][j]) / 2
					}
				}
				setGrads(single, mean)
				if err := o.Step(1); err != nil {
					t.Fatal(err)
				}
			}
			want := make([][]float32, len(single))
			for i, p := range single {
				want[i] = download(p.W)
			}

			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			got := make([][][]float32, 2)
			onGPUs(t, 2, func(r int) error {
				opts := dist.Options{Timeout: time.Minute}
				if r == 0 {
					opts.Listener = ln
				}
				g, err := dist.Join(context.Background(), dist.Env{Rank: r, World: 2, Addr: ln.Addr().String()}, opts)
				if err != nil {
					return err
				}
				defer g.Close(nil)
				comm, err := dist.NewComm(g, devs[r], dist.BackendNCCL)
				if err != nil {
					return err
				}
				defer comm.Close()
				ps := build(devs[r])
				o, err := train.NewParallelOptimizer(devs[r], ps, cfg, comm, train.ParallelOptions{ZeRO: zero})
				if err != nil {
					return err
				}
				defer o.Free()
				for k := range steps {
					setGrads(ps, grads[k][r])
					if err := o.ReduceGrads(); err != nil {
						return err
					}
					if err := o.Step(1); err != nil {
						return err
					}
				}
				for _, p := range ps {
					got[r] = append(got[r], download(p.W))
				}
				return nil
			})
			if t.Failed() {
				return
			}
			for r := range 2 {
				for i, s := range specs {
					worst := 0.0
					for j := range want[i] {
						worst = math.Max(worst, math.Abs(float64(got[r][i][j]-want[i][j])))
					}
					scale := 0.0
					for _, v := range want[i] {
						scale = math.Max(scale, math.Abs(float64(v)))
					}
					if worst > 1e-5*scale {
						t.Errorf("rank %d, %s: differs from one GPU by %.2e (max |w| %.2e)", r, s.name, worst, scale)
					}
					if r == 0 {
						t.Logf("%s: max difference from one GPU %.2e (max |w| %.2e)", s.name, worst, scale)
					}
				}
			}
		})
	}
}

// TestDataParallelGPUs trains the small preset for 50 steps on one GPU and
// on two (ranks on goroutines, NCCL) with the same global batch, for AdamW
// and for Muon: the loss curves must agree within bf16 noise. It also logs
// the throughput at the same global batch and at twice it (the same batch
// per GPU). Long: it runs with PARALLAX_DIST_LONG=1.
func TestDataParallelGPUs(t *testing.T) {
	if os.Getenv("PARALLAX_DIST_LONG") != "1" {
		t.Skip("set PARALLAX_DIST_LONG=1 to train on two GPUs")
	}
	openGPUs(t, 2)
	const steps = 50
	base := train.Config{Model: "small", Steps: steps, Batch: 16, Seq: 512, EvalEvery: -1, SaveEvery: -1, LogEvery: 10, Seed: 1}
	tps := func(recs []train.Record) float64 { // median over the steps after the first 10
		var v []float64
		for _, r := range recs[min(10, len(recs)-1):] {
			v = append(v, *r.TokensPerS)
		}
		sort.Float64s(v)
		return v[len(v)/2]
	}
	runOne := func(cfg train.Config) []train.Record {
		var recs []train.Record
		cfg.Device, cfg.Out = "cuda:0", t.TempDir()
		cfg.OnStep = func(r train.Record) { recs = append(recs, r) }
		if _, err := train.Run(context.Background(), cfg); err != nil {
			t.Fatal(err)
		}
		return recs
	}
	runTwo := func(cfg train.Config) []train.Record {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		out := t.TempDir()
		var recs []train.Record
		onGPUs(t, 2, func(r int) error {
			opts := dist.Options{Timeout: time.Minute}
			if r == 0 {
				opts.Listener = ln
			}
			g, err := dist.Join(context.Background(), dist.Env{Rank: r, World: 2, Addr: ln.Addr().String()}, opts)
			if err != nil {
				return err
			}
			c := cfg
			c.Device, c.Out, c.Group, c.Comm = fmt.Sprintf("cuda:%d", r), out, g, dist.BackendNCCL
			if r == 0 {
				c.OnStep = func(rec train.Record) { recs = append(recs, rec) }
			}
			_, err = train.Run(context.Background(), c)
			g.Close(err)
			return err
		})
		if t.Failed() {
			t.FailNow()
		}
		return recs
	}
	for _, optim := range []string{train.OptAdamW, train.OptMuon} {
		cfg := base
		cfg.Optim = train.DefaultOptimConfig(optim)
		one, two := runOne(cfg), runTwo(cfg)
		var worst, sum, late float64
		for i := range one {
			d := math.Abs(*one[i].Loss - *two[i].Loss)
			worst, sum = math.Max(worst, d), sum+d
			if i >= steps-10 {
				late += d / 10
			}
		}
		t.Logf("%s: loss %.4f -> %.4f on 1 GPU, %.4f -> %.4f on 2; |difference| mean %.4f, max %.4f, last 10 steps %.4f",
			optim, *one[0].Loss, *one[steps-1].Loss, *two[0].Loss, *two[steps-1].Loss, sum/steps, worst, late)
		if math.IsNaN(*one[0].Loss) || math.Abs(*one[0].Loss-*two[0].Loss) > 0.01 || late > 0.05 {
			t.Errorf("%s: the 2-GPU loss curve does not follow the 1-GPU one", optim)
		}
		t.Logf("%s: %.0f tokens/s on 1 GPU, %.0f on 2 (same global batch of %d x %d): %.2fx",
			optim, tps(one), tps(two), cfg.Batch, cfg.Seq, tps(two)/tps(one))
	}
	for _, preset := range []string{"small", "gpt2-124m-like"} {
		cfg := base
		cfg.Model, cfg.Steps, cfg.Optim = preset, 30, train.DefaultOptimConfig(train.OptMuon)
		one := runOne(cfg)
		cfg.Batch *= 2
		two := runTwo(cfg)
		t.Logf("%s (Muon): %.0f tokens/s on 1 GPU (batch %d x %d), %.0f on 2 GPUs (batch %d x %d): %.2fx",
			preset, tps(one), base.Batch, base.Seq, tps(two), cfg.Batch, cfg.Seq, tps(two)/tps(one))
	}
}
