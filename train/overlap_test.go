package train

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/cpu"
	"github.com/parallax-engine/parallax/model"
	"github.com/parallax-engine/parallax/train/dist"
)

// TestOverlappedReductionMatchesPlain checks the bucketed reduction that
// overlaps the backward pass against one plain all-reduce of every
// gradient after it, on the TCP collectives with 2 and 3 ranks: the
// gradients each rank holds reduced must be bitwise the same. Each rank
// runs two steps of two micro-batches on its own data (the reduction is
// armed for the second backward only); in the second step rank 1 skips its
// last backward, as a rank with a non-finite loss does, and so starts
// every bucket in ReduceGrads while the others started them during their
// backward.
func TestOverlappedReductionMatchesPlain(t *testing.T) {
	mc := model.Config{Vocab: 37, Dim: 32, Layers: 3, Heads: 4, KVHeads: 2, HeadDim: 8, FFN: 48,
		RopeTheta: 1e4, NormEps: 1e-6, Attention: model.AttentionParallax, RInit: model.RInitLikeQ, MaxSeq: 16}
	const B, T, steps, accum = 2, 6, 2, 2
	for _, n := range []int{2, 3} {
		for _, tc := range []struct {
			optim  string
			zero   bool
			bucket int64
		}{{OptAdamW, false, 3000}, {OptMuon, false, 3000}, {OptMuon, true, 3000}, {OptAdamW, true, 0}} {
			name := fmt.Sprintf("%d-ranks-%s-zero%v-bucket%d", n, tc.optim, tc.zero, tc.bucket)
			t.Run(name, func(t *testing.T) {
				errs := onRanks(t, n, dist.Options{}, func(r int, g *dist.Group) error {
					dev := cpu.New()
					comm, err := dist.NewComm(g, dev, dist.BackendTCP)
					if err != nil {
						return err
					}
					over, err := model.New(dev, mc, model.Options{Seed: 5})
					if err != nil {
						return err
					}
					plain, err := model.New(dev, mc, model.Options{Seed: 5})
					if err != nil {
						return err
					}
					for _, m := range []*model.Model{over, plain} {
						if err := m.AllocGrads(); err != nil {
							return err
						}
					}
					o, err := NewParallelOptimizer(dev, over.Params(), DefaultOptimConfig(tc.optim), comm,
						ParallelOptions{ZeRO: tc.zero, BucketBytes: tc.bucket})
					if err != nil {
						return err
					}
					o.OverlapBackward(over)
					if tc.bucket > 0 && len(o.par.buckets) < 4 {
						return fmt.Errorf("only %d buckets", len(o.par.buckets))
					}
					rng := rand.New(rand.NewPCG(uint64(r), 9))
					for step := range steps {
						for _, m := range []*model.Model{over, plain} {
							if err := m.ZeroGrads(); err != nil {
								return err
							}
						}
						for micro := range accum {
							in, tgt := make([]int32, B*T), make([]int32, B*T)
							for i := range in {
								in[i], tgt[i] = int32(rng.IntN(mc.Vocab)), int32(rng.IntN(mc.Vocab))
							}
							last := micro == accum-1
							if last && step == 1 && r == 1 {
								continue // a skipped backward
							}
							for _, m := range []*model.Model{over, plain} {
								if _, err := m.Forward(in, tgt, B, T); err != nil {
									return err
								}
								if last && m == over {
									o.ArmReduce()
								}
								if err := m.Backward(1.0 / accum); err != nil {
									return err
								}
							}
							if last && o.par.next != len(o.par.buckets) {
								return fmt.Errorf("step %d: the backward started %d of %d buckets", step, o.par.next, len(o.par.buckets))
							}
							if !last && o.par.next != 0 {
								return fmt.Errorf("step %d: an unarmed backward started %d buckets", step, o.par.next)
							}
						}
						if err := o.ReduceGrads(); err != nil {
							return err
						}
						var gs []*engine.Tensor
						for _, p := range plain.Params() {
							gs = append(gs, p.G)
						}
						if err := comm.AllReduce(dist.Avg, gs...); err != nil {
							return err
						}
						held := 0
						for i, p := range over.Params() {
							if ow := o.Owner(p); ow >= 0 && ow != r {
								continue // reduced onto another rank
							}
							held++
							got, err := engine.Float32s(p.G)
							if err != nil {
								return err
							}
							want, err := engine.Float32s(plain.Params()[i].G)
							if err != nil {
								return err
							}
							if !slices.Equal(got, want) {
								return fmt.Errorf("step %d: %s differs from the plain reduction", step, p.Name)
							}
						}
						if held == 0 {
							return fmt.Errorf("rank %d holds no reduced gradient", r)
						}
					}
					return nil
				})
				for r, err := range errs {
					if err != nil {
						t.Errorf("rank %d: %v", r, err)
					}
				}
			})
		}
	}
}
