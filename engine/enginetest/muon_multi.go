package enginetest

import (
	"fmt"
	"math/rand/v2"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/ref"
)

func init() { register(muonStackCases) }

// muonStackCases check Muon's stack ops (engine.MuonMomentumAll,
// MuonApplyAll and MuonStack.NewtonSchulz) against the reference, slot by
// slot: on a device with engine.MuonMultiOps (and engine.NewtonSchulzOps)
// they run its batched kernels, on the others the single-matrix ops and
// the stack copies. A stack of three slots gets two matrices, so the last
// slot must come out untouched. Bounds: the momentum and the update are
// the single ops' formulas (Tol depth 4 and 3, as their own cases);
// Newton-Schulz is nsTol, for an even and an odd number of steps (the
// batched iteration alternates between two buffers) and a wide and a tall
// shape.
func muonStackCases(o Options, dt engine.DType) []Case {
	const slots, rows, cols = 3, 24, 40
	per := rows * cols
	// stack uploads init into a new stack of slots [r, c] matrices.
	stack := func(dev engine.Device, ts *Tensors, init []float64, r, c int) (*engine.MuonStack, error) {
		src := ts.Up(dt, init, slots, r, c)
		if err := ts.Err(); err != nil {
			return nil, err
		}
		st, err := engine.NewMuonStack(dev, dt, slots, r, c)
		if err != nil {
			return nil, err
		}
		if err := dev.Cast(st.X(), src); err != nil {
			st.Free()
			return nil, err
		}
		return st, nil
	}
	var cs []Case
	for _, mo := range muonMomentumOpts {
		cs = append(cs, Case{Op: "muon stack momentum", Name: fmt.Sprintf("2 of %d slots [%d,%d], %s", slots, rows, cols, muonMomentumName(mo)), DType: dt,
			Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
				ts := NewTensors(dev)
				defer ts.Free()
				init := Normal(rng, dt, slots*per, 1)
				var ms, gs []*engine.Tensor
				var mv, gv [][]float64
				for range 2 {
					m, g := Normal(rng, engine.F32, per, 0.1), Normal(rng, dt, per, 1)
					ms, gs = append(ms, ts.Up(engine.F32, m, rows, cols)), append(gs, ts.Up(dt, g, rows, cols))
					mv, gv = append(mv, m), append(gv, g)
				}
				st, err := stack(dev, ts, init, rows, cols)
				if err != nil {
					return nil, err
				}
				defer st.Free()
				var c opMetrics
				c.do(engine.MuonMomentumAll(st, ms, gs, mo))
				want := append([]float64(nil), init...)
				for i := range ms {
					wu, wm := ref.MuonMomentum(mv[i], scaledGrad(gv[i], mo.Scale()), float64(mo.Beta), mo.Nesterov)
					copy(want[i*per:], wu)
					c.cmp(fmt.Sprintf("m%d", i), ms[i], wm, Tol(engine.F32, 4))
					c.cmp(fmt.Sprintf("g%d (unchanged)", i), gs[i], gv[i], 0)
				}
				c.cmp("stack", st.X(), want, Tol(dt, 4))
				return c.result()
			}})
	}
	for _, lrScales := range [][]float32{nil, {1, 0.5}} {
		lrs := "none"
		if lrScales != nil {
			lrs = fmt.Sprint(lrScales)
		}
		cs = append(cs, Case{Op: "muon stack apply", Name: fmt.Sprintf("2 of %d slots [%d,%d], lr 0.02, wd 0.1, scales 1.5 0.7, lr multipliers %s", slots, rows, cols, lrs), DType: dt,
			Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
				scales := []float32{1.5, 0.7}
				ts := NewTensors(dev)
				defer ts.Free()
				ov := Normal(rng, dt, slots*per, 1)
				var ps []*engine.Tensor
				var pv [][]float64
				for range 2 {
					p := Normal(rng, dt, per, 1)
					ps, pv = append(ps, ts.Up(dt, p, rows, cols)), append(pv, p)
				}
				st, err := stack(dev, ts, ov, rows, cols)
				if err != nil {
					return nil, err
				}
				defer st.Free()
				var c opMetrics
				c.do(engine.MuonApplyAll(st, ps, 0.02, 0.1, lrScales, scales))
				for i, p := range ps {
					lr := float64(engine.ScaledLR(0.02, lrScales, i))
					c.cmp(fmt.Sprintf("p%d", i), p, ref.MuonApply(pv[i], ov[i*per:(i+1)*per], lr, 0.1, float64(scales[i])), Tol(dt, 3))
				}
				c.cmp("stack", st.X(), ov, 0)
				return c.result()
			}})
	}
	for _, s := range [][3]int{{32, 64, 5}, {64, 32, 5}, {32, 64, 4}} {
		r, cl, steps := s[0], s[1], s[2]
		n := r * cl
		cs = append(cs, Case{Op: "muon stack newton-schulz", Name: fmt.Sprintf("%d steps, %d slots of %dx%d in place", steps, slots, r, cl), DType: dt,
			Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
				ts := NewTensors(dev)
				defer ts.Free()
				gv := Normal(rng, dt, slots*n, 1)
				st, err := stack(dev, ts, gv, r, cl)
				if err != nil {
					return nil, err
				}
				defer st.Free()
				var c opMetrics
				c.do(st.NewtonSchulz(steps))
				want := make([]float64, 0, slots*n)
				for b := range slots {
					want = append(want, ref.NewtonSchulz(gv[b*n:(b+1)*n], r, cl, steps)...)
				}
				c.cmp("stack", st.X(), want, nsTol(dt))
				return c.result()
			}})
	}
	return cs
}
