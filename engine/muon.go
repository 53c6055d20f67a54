package engine

import "fmt"

// Newton-Schulz quintic coefficients of the reference Muon (docs/MATH.md section
// 10): phi(x) = a x + b x^3 + c x^5 on the singular values.
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
// Every matrix of a batch is normalised and iterated on its own. The
// iterates and products are stored at out's dtype (g may be another one);
// out may alias g. It is built from MatMul, AddScaled and
// FrobeniusNormalize, so every backend gets it, or from FrobeniusNormalize
// and NewtonSchulzOps where the device has that (the same polynomial,
// rounded differently); scratch tensors of out's dtype are allocated and
// freed per call (an NSWorkspace keeps them).
func NewtonSchulz(dev Device, out, g *Tensor, steps int) error {
	if err := checkNewtonSchulz(out, g, steps); err != nil {
		return err
	}
	w, err := NewNSWorkspace(dev, out.DType(), g.Shape()...)
	if err != nil {
		return err
	}
	defer w.Free()
	return w.run(out, g, steps)
}

func checkNewtonSchulz(out, g *Tensor, steps int) error {
	if out == nil || g == nil || g.Rank() < 2 || !out.Shape().Equal(g.Shape()) {
		return fmt.Errorf("newton-schulz: want g of rank >= 2 and out of the same shape, got g %v, out %v", g, out)
	}
	if steps < 0 {
		return fmt.Errorf("newton-schulz: steps %d < 0", steps)
	}
	return nil
}

// NSWorkspace holds NewtonSchulz's scratch tensors (two Gram-sized, one
// matrix-sized) for one shape and dtype, so that repeated orthogonalisations
// allocate nothing. It is not safe for concurrent use.
type NSWorkspace struct {
	dev     Device
	dt      DType
	shape   Shape
	a, b, y *Tensor
}

// NewNSWorkspace allocates the scratch of NewtonSchulz for inputs of the
// given shape (a matrix or a batch of them, rank >= 2) and outputs of dtype
// dt.
func NewNSWorkspace(dev Device, dt DType, shape ...int) (*NSWorkspace, error) {
	s := Shape(shape).Clone()
	if len(s) < 2 {
		return nil, fmt.Errorf("newton-schulz workspace: want a shape of rank >= 2, got %v", s)
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("newton-schulz workspace: %w", err)
	}
	if !dt.IsFloat() {
		return nil, fmt.Errorf("newton-schulz workspace: want a floating dtype, got %v", dt)
	}
	k := min(s[len(s)-2], s[len(s)-1])
	gram := append(s[:len(s)-2].Clone(), k, k)
	w := &NSWorkspace{dev: dev, dt: dt, shape: s}
	var err error
	if w.a, err = dev.Alloc(dt, gram...); err == nil {
		if w.b, err = dev.Alloc(dt, gram...); err == nil {
			w.y, err = dev.Alloc(dt, s...)
		}
	}
	if err != nil {
		w.Free()
		return nil, fmt.Errorf("newton-schulz: %w", err)
	}
	return w, nil
}

// DType is the dtype of the workspace's iterates (NewtonSchulz's out).
func (w *NSWorkspace) DType() DType { return w.dt }

// Shape is the input shape the workspace serves.
func (w *NSWorkspace) Shape() Shape { return w.shape.Clone() }

// NewtonSchulz is engine.NewtonSchulz with w's scratch: g and out must have
// w's shape and out w's dtype; out may alias g (in place).
func (w *NSWorkspace) NewtonSchulz(out, g *Tensor, steps int) error {
	if err := checkNewtonSchulz(out, g, steps); err != nil {
		return err
	}
	if !g.Shape().Equal(w.shape) || out.DType() != w.dt {
		return fmt.Errorf("newton-schulz: the workspace serves g of shape %v and out of dtype %v, got g %v, out %v", w.shape, w.dt, g, out)
	}
	return w.run(out, g, steps)
}

// Free releases the scratch; w must not be used afterwards.
func (w *NSWorkspace) Free() {
	for _, t := range []*Tensor{w.a, w.b, w.y} {
		if t != nil {
			w.dev.Free(t)
		}
	}
	w.a, w.b, w.y = nil, nil, nil
}

// NewtonSchulzOps is implemented by devices that run Newton-Schulz's
// iteration in fewer launches and passes over the iterate than the
// composite of NewtonSchulz (five launches a step, two of them elementwise
// passes). NewtonSchulz and NSWorkspace use it where the device has it.
type NewtonSchulzOps interface {
	// NewtonSchulzIterate runs steps iterations of the quintic on the
	// already normalised matrices x [..., rows, cols], alternating between
	// x and y (x's shape and dtype), with a and b ([..., k, k], k =
	// min(rows, cols), x's dtype) as scratch. Each step computes
	// A = X X^T, B = a I + b A + c A A, X' = B X (for a tall X: A = X^T X,
	// X' = X B): NewtonSchulz's polynomial a X + B X with a X folded into
	// the Gram matrix, so a step is three matmuls and one Gram-sized
	// elementwise pass. The result is in x after an even number of steps
	// and in y after an odd one; the other tensor is overwritten.
	NewtonSchulzIterate(x, y, a, b *Tensor, steps int) error
}

// run is NewtonSchulz on validated operands.
func (w *NSWorkspace) run(out, g *Tensor, steps int) error {
	dev, a, b, y := w.dev, w.a, w.b, w.y
	if it, ok := dev.(NewtonSchulzOps); ok && steps > 0 {
		// Normalise into whichever of out and y the iteration must start
		// from to end in out; g is not read again, so out may alias it.
		x0, x1 := out, y
		if steps%2 == 1 {
			x0, x1 = y, out
		}
		if err := dev.FrobeniusNormalize(x0, g, 1e-7); err != nil {
			return fmt.Errorf("newton-schulz: %w", err)
		}
		if err := it.NewtonSchulzIterate(x0, x1, a, b, steps); err != nil {
			return fmt.Errorf("newton-schulz: %w", err)
		}
		return nil
	}
	tall := g.Dim(-2) > g.Dim(-1)
	if err := dev.FrobeniusNormalize(out, g, 1e-7); err != nil {
		return fmt.Errorf("newton-schulz: %w", err)
	}
	var err error
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
