package enginetest

import (
	"fmt"
	"math/rand/v2"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/ref"
)

// Ragged batches: sequences at different positions in one call (RoPE with
// per-sequence positions pos [B, L]), as a batched decode step over
// sequences of different lengths runs them.

func init() { register(raggedCases) }

func raggedCases(o Options, dt engine.DType) []Case {
	const maxPos = 1024
	// As for shared positions: an f32 backend may form pos*freq in f32.
	tol := max(Tol(dt, 2), 4*maxPos*0x1p-24)
	type rc struct {
		b, h, l, d int
		theta      float32
		inPlace    bool
	}
	var cs []Case
	for _, s := range []rc{{3, 2, 1, 16, 1e4, true}, {4, 3, 3, 64, 1e6, false}, {2, 1, 5, 34, 1e4, false}} {
		n := s.b * s.h * s.l * s.d
		name := fmt.Sprintf("[%d,%d,%d,%d] pos [%d,%d] theta %g", s.b, s.h, s.l, s.d, s.b, s.l, s.theta)
		if s.inPlace {
			name += " in place"
		}
		for _, backward := range []bool{false, true} {
			op := "rope"
			if backward {
				op = "rope backward"
			}
			cs = append(cs, Case{Op: op, Name: name, DType: dt, Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
				ts := NewTensors(dev)
				defer ts.Free()
				xv := Normal(rng, dt, n, 1)
				// Every sequence its own positions: sequence b at a random
				// offset, so rows of one call see different angles.
				pf, pi := make([]float64, s.b*s.l), make([]int, s.b*s.l)
				for b := range s.b {
					off := rng.IntN(maxPos - s.l)
					for l := range s.l {
						pi[b*s.l+l] = off + l
						pf[b*s.l+l] = float64(off + l)
					}
				}
				x, pos := ts.Up(dt, xv, s.b, s.h, s.l, s.d), ts.Up(engine.I32, pf, s.b, s.l)
				out := x
				if !s.inPlace {
					out = ts.New(dt, s.b, s.h, s.l, s.d)
				}
				if err := ts.Err(); err != nil {
					return nil, err
				}
				var c opMetrics
				want := ref.RoPE(xv, s.b, s.h, s.l, s.d, pi, float64(s.theta), backward)
				if backward {
					c.do(dev.RoPEBackward(out, x, pos, s.theta))
					c.cmp("dX", out, want, tol)
				} else {
					c.do(dev.RoPE(out, x, pos, s.theta))
					c.cmp("out", out, want, tol)
				}
				return c.result()
			}})
		}
	}
	return cs
}
