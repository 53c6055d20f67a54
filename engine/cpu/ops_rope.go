package cpu

import (
	"math"

	"github.com/parallax-engine/parallax/engine"
)

// RoPE rotates (x_i, x_{i+D/2}) by pos[l] * theta^(-2i/D) (pos[b, l] with
// per-sequence positions); see engine.Ops.
func (d *Device) RoPE(out, x, pos *engine.Tensor, theta float32) error {
	return d.rope(out, x, pos, theta, false)
}

// RoPEBackward applies the inverse rotation to dOut; see engine.Ops.
func (d *Device) RoPEBackward(dX, dOut, pos *engine.Tensor, theta float32) error {
	return d.rope(dX, dOut, pos, theta, true)
}

// rope rotates every [D] row of x into out (which may alias x); inverse
// negates the angles. The angles are computed in float64 and their cosines
// and sines once per (position, pair): per (l, pair) for pos [L], per
// (b, l, pair) for per-sequence pos [B, L].
func (d *Device) rope(out, x, pos *engine.Tensor, theta float32, inverse bool) error {
	b, h, l, dim, err := engine.CheckRoPE(d.own, out, x, pos, inverse)
	if err != nil {
		return err
	}
	half := dim / 2
	if b*h*l == 0 || half == 0 {
		if half == 0 && out != x {
			copyElems(viewOf(out), 0, viewOf(x), 0, x.Numel())
		}
		return nil
	}
	p := ints(pos)
	np := len(p) // l, or b*l with per-sequence positions
	inv := engine.RoPEFrequencies(theta, dim)
	cs := make([]float32, np*half)
	sn := make([]float32, np*half)
	sign := 1.0
	if inverse {
		sign = -1
	}
	d.parallelMin(np, max(1, 4096/half), func(lo, hi int) {
		for li := lo; li < hi; li++ {
			for i, f := range inv {
				s, c := math.Sincos(float64(p[li]) * f)
				cs[li*half+i] = float32(c)
				sn[li*half+i] = float32(sign * s)
			}
		}
	})
	xv, ov := viewOf(x), viewOf(out)
	rows := b * h * l
	d.parallelMin(rows, rowChunk(dim), func(lo, hi int) {
		xbuf := make([]float32, dim)
		obuf := make([]float32, dim)
		for r := lo; r < hi; r++ {
			li := r % l
			if np != l {
				li += r / (h * l) * l // sequence r / (h l)'s positions
			}
			c := cs[li*half : (li+1)*half]
			s := sn[li*half : (li+1)*half]
			xr := xv.read(xbuf, r*dim, (r+1)*dim)
			or := ov.span(obuf, r*dim, (r+1)*dim)
			x1, x2 := xr[:half], xr[half:dim]
			o1, o2 := or[:half], or[half:dim]
			for i := range c {
				// Both inputs are read before either output is written, so
				// out may alias x.
				a, bb := x1[i], x2[i]
				o1[i] = a*c[i] - bb*s[i]
				o2[i] = bb*c[i] + a*s[i]
			}
			ov.commit(or, r*dim)
		}
	})
	return nil
}
