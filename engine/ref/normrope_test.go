package ref

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestRMSNormRoPEBackwardFD checks RMSNormRoPEBackward against finite
// differences of RMSNormRoPE, with positions shared and per sequence.
func TestRMSNormRoPEBackwardFD(t *testing.T) {
	const eps, theta = 1e-6, 1e4
	for _, c := range []struct {
		b, l, h, d int
		perSeq     bool
	}{{2, 3, 2, 8, false}, {2, 2, 3, 6, true}, {1, 1, 4, 16, false}} {
		t.Run(fmt.Sprintf("%dx%dx%dx%d/perseq=%v", c.b, c.l, c.h, c.d, c.perSeq), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, 11))
			n := c.b * c.l * c.h * c.d
			pos := make([]int, c.l)
			if c.perSeq {
				pos = make([]int, c.b*c.l)
			}
			for i := range pos {
				pos[i] = rng.IntN(512)
			}
			x, w, g := randn(rng, n, 1), randn(rng, c.d, 1), randn(rng, n, 1)
			dx, dw := RMSNormRoPEBackward(g, x, w, c.b, c.l, c.h, c.d, pos, eps, theta)
			loss := func(x, w []float64) float64 {
				o, _ := RMSNormRoPE(x, w, c.b, c.l, c.h, c.d, pos, eps, theta)
				return dotf(o, g)
			}
			fdCheck(t, "dX", func(z []float64) float64 { return loss(z, w) }, x, dx)
			fdCheck(t, "dW", func(z []float64) float64 { return loss(x, z) }, w, dw)
		})
	}
}
