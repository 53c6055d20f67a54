package enginetest

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/parallax-engine/parallax/engine"
)

func init() { register(argmaxCases) }

// argmaxCases check engine.ArgMaxRows (the device's kernel where it has
// one): rows with planted ties (the lowest index wins), a row of -Inf, a
// row whose maximum lies past the classes (ignored) and a row with a NaN
// (-1).
func argmaxCases(o Options, dt engine.DType) []Case {
	const n, w, classes = 6, 300, 290
	return []Case{{Op: "argmax rows", Name: fmt.Sprintf("[%d,%d], %d classes, ties, -Inf, NaN", n, w, classes), DType: dt,
		Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
			ts := NewTensors(dev)
			defer ts.Free()
			v := Normal(rng, dt, n*w, 1)
			row := func(r int) []float64 { return v[r*w : (r+1)*w] }
			big := 100.0
			row(0)[7], row(0)[200] = big, big // tie: 7 wins
			for c := range row(1) {
				row(1)[c] = math.Inf(-1)
			}
			row(2)[classes+3] = 1e4 // past the classes
			row(3)[rng.IntN(classes)] = math.NaN()
			row(4)[classes-1] = big
			x := ts.Up(dt, v, n, w)
			out, err := dev.Alloc(engine.I32, n)
			if err != nil {
				return nil, err
			}
			defer dev.Free(out)
			if err := ts.Err(); err != nil {
				return nil, err
			}
			if err := engine.ArgMaxRows(dev, out, x, classes); err != nil {
				return nil, err
			}
			got, err := engine.Int32s(out)
			if err != nil {
				return nil, err
			}
			// The reference on the values as the device holds them.
			held, err := engine.Float32s(x)
			if err != nil {
				return nil, err
			}
			bad := 0
			for r := range n {
				want, bv := int32(0), float64(held[r*w])
				for c := range classes {
					x := float64(held[r*w+c])
					if math.IsNaN(x) {
						want = -1
						break
					}
					if x > bv {
						want, bv = int32(c), x
					}
				}
				if got[r] != want {
					bad++
				}
			}
			return []Metric{{Name: "ids (mismatches)", Err: float64(bad), Tol: 0}}, nil
		}}}
}
