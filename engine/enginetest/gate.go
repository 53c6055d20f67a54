package enginetest

import (
	"fmt"
	"math/rand/v2"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/ref"
)

func init() { register(gateCases) }

// gateCases cover HeadGate, the probe gate of the ablation
// r = sigmoid(w_g . h) r: x [N, H, D] scaled per (n, h).
func gateCases(o Options, dt engine.DType) []Case {
	const n, h, d = 6, 4, 16
	name := fmt.Sprintf("x [%d,%d,%d], z [%d,%d]", n, h, d, n, h)
	return []Case{
		{Op: "head gate", Name: name, DType: dt, Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
			ts := NewTensors(dev)
			defer ts.Free()
			xv, zv := Normal(rng, dt, n*h*d, 1), Normal(rng, dt, n*h, 2)
			x, z, out := ts.Up(dt, xv, n, h, d), ts.Up(dt, zv, n, h), ts.New(dt, n, h, d)
			if err := ts.Err(); err != nil {
				return nil, err
			}
			var c opMetrics
			c.do(dev.HeadGate(out, x, z))
			c.cmp("out", out, ref.HeadGate(xv, zv, d), Tol(dt, 2))
			return c.result()
		}},
		{Op: "head gate backward", Name: name, DType: dt, Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
			ts := NewTensors(dev)
			defer ts.Free()
			xv, zv, gv := Normal(rng, dt, n*h*d, 1), Normal(rng, dt, n*h, 2), Normal(rng, dt, n*h*d, 1)
			x, z, g := ts.Up(dt, xv, n, h, d), ts.Up(dt, zv, n, h), ts.Up(dt, gv, n, h, d)
			dx, dz := ts.New(dt, n, h, d), ts.New(dt, n, h)
			if err := ts.Err(); err != nil {
				return nil, err
			}
			var c opMetrics
			c.do(dev.HeadGateBackward(dx, dz, g, x, z))
			wx, wz := ref.HeadGateBackward(gv, xv, zv, d)
			c.cmp("dX", dx, wx, Tol(dt, 2))
			c.cmp("dZ", dz, wz, Tol(dt, d))
			c.fd(rng, "dX", c.get(dx), wx, func(v []float64) float64 { return opDot(ref.HeadGate(v, zv, d), gv) }, xv, Tol(dt, 2))
			c.fd(rng, "dZ", c.get(dz), wz, func(v []float64) float64 { return opDot(ref.HeadGate(xv, v, d), gv) }, zv, Tol(dt, d))
			return c.result()
		}},
	}
}
