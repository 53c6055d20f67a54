package enginetest

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/ref"
)

func init() { register(multiCases) }

// multiSizes are the tensors of a multi-tensor list: empty-ish, odd, one
// exact chunk of the CUDA kernels (16384 elements), several chunks and a
// ragged tail, so chunk and tensor boundaries are all crossed.
var multiSizes = []int{1, 17, 16384, 40001, 3, 256}

// multiCases check the multi-tensor helpers (engine.FillAll, ScaleAll,
// SumSquaresAll, CastAll, AdamWAll) against the reference, tensor by tensor: on a
// device with engine.MultiTensorOps they run its one-launch kernels, on
// the others the single-tensor ops. Bounds: fill and cast are exact (a cast rounds once, to nearest even); scale and AdamW
// are the single ops' elementwise formulas (Tol depth 1 and 4, as their own
// cases, widened where the rounding model allows more: adamwErr); the sum of squares of ~57k f32 squares is summed in double on the
// GPU and in float64 here, so f32's unit roundoff on the output bounds it.
func multiCases(o Options, dt engine.DType) []Case {
	name := fmt.Sprintf("%d tensors of %v elements", len(multiSizes), multiSizes)
	upAll := func(ts *Tensors, rng *rand.Rand, t engine.DType, scale float64) ([]*engine.Tensor, [][]float64) {
		var out []*engine.Tensor
		var vals [][]float64
		for _, n := range multiSizes {
			v := Normal(rng, t, n, scale)
			out = append(out, ts.Up(t, v, n))
			vals = append(vals, v)
		}
		return out, vals
	}
	return []Case{
		{Op: "multi-tensor fill", Name: name, DType: dt, Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
			ts := NewTensors(dev)
			defer ts.Free()
			xs, _ := upAll(ts, rng, dt, 1)
			if err := ts.Err(); err != nil {
				return nil, err
			}
			var c opMetrics
			c.do(engine.FillAll(dev, xs, -2.5))
			for i, x := range xs {
				want := make([]float64, multiSizes[i])
				for j := range want {
					want[j] = -2.5
				}
				c.cmp(fmt.Sprintf("t%d", i), x, want, 0)
			}
			return c.result()
		}},
		{Op: "multi-tensor scale", Name: name + ", s 0.37", DType: dt, Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
			ts := NewTensors(dev)
			defer ts.Free()
			xs, vals := upAll(ts, rng, dt, 1)
			if err := ts.Err(); err != nil {
				return nil, err
			}
			var c opMetrics
			c.do(engine.ScaleAll(dev, xs, 0.37))
			for i, x := range xs {
				want := make([]float64, len(vals[i]))
				for j, v := range vals[i] {
					want[j] = float64(float32(0.37)) * v
				}
				c.cmp(fmt.Sprintf("t%d", i), x, want, Tol(dt, 1))
			}
			return c.result()
		}},
		{Op: "multi-tensor sum squares", Name: name + ", accumulating", DType: dt, Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
			ts := NewTensors(dev)
			defer ts.Free()
			xs, vals := upAll(ts, rng, dt, 1)
			out := ts.Up(engine.F32, []float64{1.5}, 1)
			if err := ts.Err(); err != nil {
				return nil, err
			}
			want := 1.5
			for _, v := range vals {
				for _, x := range v {
					want += x * x
				}
			}
			var c opMetrics
			c.do(engine.SumSquaresAll(dev, out, xs, true))
			c.cmp("sum", out, []float64{want}, Tol(engine.F32, 1))
			return c.result()
		}},
		{Op: "multi-tensor cast", Name: name + ", f32 to " + dt.String(), DType: dt, Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
			ts := NewTensors(dev)
			defer ts.Free()
			srcs, vals := upAll(ts, rng, engine.F32, 3)
			var dsts []*engine.Tensor
			for _, n := range multiSizes {
				dsts = append(dsts, ts.New(dt, n))
			}
			if err := ts.Err(); err != nil {
				return nil, err
			}
			var c opMetrics
			c.do(engine.CastAll(dev, dsts, srcs))
			for i := range dsts {
				c.cmp(fmt.Sprintf("t%d", i), dsts[i], ref.Cast(vals[i], dt), 0)
			}
			return c.result()
		}},
		{Op: "multi-tensor adamw", Name: name + ", lr 1e-2, wd 0.1, step 3, grad scale 0.61", DType: dt, Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
			adam := engine.AdamWOpts{LR: 1e-2, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, Step: 3, GradScale: 0.61}
			ts := NewTensors(dev)
			defer ts.Free()
			ps, pv := upAll(ts, rng, dt, 1)
			gs, gv := upAll(ts, rng, dt, 0.1)
			ms, mv := upAll(ts, rng, engine.F32, 0.01)
			var vs []*engine.Tensor
			var vv [][]float64
			for _, n := range multiSizes {
				v := Rand(rng, engine.F32, n, 1e-3)
				for j := range v {
					v[j] = math.Abs(v[j])
				}
				vs, vv = append(vs, ts.Up(engine.F32, v, n)), append(vv, v)
			}
			if err := ts.Err(); err != nil {
				return nil, err
			}
			var c opMetrics
			c.do(engine.AdamWAll(dev, ps, gs, ms, vs, adam))
			for i := range ps {
				sg := scaledGrad(gv[i], adam.Scale())
				wp, wm, wv := ref.AdamW(pv[i], sg, mv[i], vv[i], float64(adam.LR), float64(adam.Beta1), float64(adam.Beta2),
					float64(adam.Eps), float64(adam.WeightDecay), adam.Step)
				// Bounds from the rounding model (adamwErr): a tensor of one
				// or three elements has no larger entry to hide a
				// cancelling m' = b1 m + (1 - b1) g behind.
				ep, em := adamwErr(pv[i], sg, mv[i], wp, wm, wv, adam)
				c.cmp(fmt.Sprintf("p%d", i), ps[i], wp, errBoundTol(engine.F32, Tol(dt, 4), ep, wp))
				c.cmp(fmt.Sprintf("m%d", i), ms[i], wm, errBoundTol(engine.F32, Tol(engine.F32, 4), em, wm))
				c.cmp(fmt.Sprintf("v%d", i), vs[i], wv, Tol(engine.F32, 4))
			}
			return c.result()
		}},
	}
}
