package engine

import "fmt"

// Newton-Schulz quintic coefficients of the reference Muon (spec/training.md
// section 2.3): phi(x) = a x + b x^3 + c x^5 on the singular values.
const (
	NSA = 3.4445
	NSB = -4.7750
	NSC = 2.0315
)

// NewtonSchulz writes to out an approximate orthogonalisation of g, the
// matrix (or batch of matrices over the leading dimensions) Muon applies:
// X = g / (||g||_F + 1e-7), then steps times
// A = X X^T, B = b A + c A A, X = a X + B X
// (for a tall X the equivalent A = X^T X, X = a X + X B keeps the Gram
// matrix min(rows, cols) square). Singular values land in about [0.68, 1.2].
// It is built from MatMul, AddScaled and FrobeniusNormalize, so every backend
// gets it; scratch tensors of out's dtype are allocated and freed per call.
func NewtonSchulz(dev Device, out, g *Tensor, steps int) error {
	if out == nil || g == nil || g.Rank() < 2 || !out.Shape().Equal(g.Shape()) {
		return fmt.Errorf("newton-schulz: want g of rank >= 2 and out of the same shape, got g %v, out %v", g, out)
	}
	if steps < 0 {
		return fmt.Errorf("newton-schulz: steps %d < 0", steps)
	}
	rows, cols := g.Dim(-2), g.Dim(-1)
	tall := rows > cols
	k := min(rows, cols)
	batch := g.Shape()[:g.Rank()-2]
	gram := append(batch.Clone(), k, k)
	dt := out.DType()
	a, err := dev.Alloc(dt, gram...)
	if err != nil {
		return fmt.Errorf("newton-schulz: %w", err)
	}
	defer dev.Free(a)
	b, err := dev.Alloc(dt, gram...)
	if err != nil {
		return fmt.Errorf("newton-schulz: %w", err)
	}
	defer dev.Free(b)
	y, err := dev.Alloc(dt, g.Shape()...)
	if err != nil {
		return fmt.Errorf("newton-schulz: %w", err)
	}
	defer dev.Free(y)
	if err := dev.FrobeniusNormalize(out, g, 1e-7); err != nil {
		return fmt.Errorf("newton-schulz: %w", err)
	}
	for range steps {
		if tall {
			err = dev.MatMul(a, out, out, MatMulOpts{TransA: true})
		} else {
			err = dev.MatMul(a, out, out, MatMulOpts{TransB: true})
		}
		if err == nil {
			err = dev.MatMul(b, a, a, MatMulOpts{})
		}
		if err == nil {
			err = dev.AddScaled(b, a, b, NSB, NSC)
		}
		if err == nil {
			if tall {
				err = dev.MatMul(y, out, b, MatMulOpts{})
			} else {
				err = dev.MatMul(y, b, out, MatMulOpts{})
			}
		}
		if err == nil {
			err = dev.AddScaled(out, out, y, NSA, 1)
		}
		if err != nil {
			return fmt.Errorf("newton-schulz: %w", err)
		}
	}
	return nil
}
