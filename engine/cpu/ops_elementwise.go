package cpu

import (
	"github.com/parallax-engine/parallax/engine"
)

// eachBlock runs fn over [0, n) in blocks of at most ewBlock elements, the
// blocks spread over the workers; bufs are nbuf scratch buffers owned by the
// calling worker.
func (d *Device) eachBlock(n, nbuf int, fn func(lo, hi int, bufs [][ewBlock]float32)) {
	d.parallelMin(n, elemChunk, func(lo, hi int) {
		bufs := make([][ewBlock]float32, nbuf)
		for s := lo; s < hi; s += ewBlock {
			fn(s, min(s+ewBlock, hi), bufs)
		}
	})
}

// SwiGLU computes out = silu(gate) * up; see engine.Ops.
func (d *Device) SwiGLU(out, gate, up *engine.Tensor) error {
	n, err := engine.CheckElementwise(d.own, "swiglu", []string{"out", "gate", "up"}, out, gate, up)
	if err != nil {
		return err
	}
	ov, gv, uv := viewOf(out), viewOf(gate), viewOf(up)
	d.eachBlock(n, 3, func(lo, hi int, b [][ewBlock]float32) {
		g := gv.read(b[0][:], lo, hi)
		u := uv.read(b[1][:], lo, hi)
		o := ov.span(b[2][:], lo, hi)
		u = u[:len(g)]
		o = o[:len(g)]
		for i, z := range g {
			o[i] = z * sigmoid32(z) * u[i]
		}
		ov.commit(o, lo)
	})
	return nil
}

// SwiGLUBackward computes dGate and dUp; see engine.Ops.
func (d *Device) SwiGLUBackward(dGate, dUp, dOut, gate, up *engine.Tensor) error {
	const op = "swiglu backward"
	n, err := engine.CheckElementwise(d.own, op, []string{"dGate", "dUp", "dOut", "gate", "up"}, dGate, dUp, dOut, gate, up)
	if err != nil {
		return err
	}
	dgv, duv, dov, gv, uv := viewOf(dGate), viewOf(dUp), viewOf(dOut), viewOf(gate), viewOf(up)
	d.eachBlock(n, 5, func(lo, hi int, b [][ewBlock]float32) {
		dy := dov.read(b[0][:], lo, hi)
		g := gv.read(b[1][:], lo, hi)
		u := uv.read(b[2][:], lo, hi)
		dg := dgv.span(b[3][:], lo, hi)
		du := duv.span(b[4][:], lo, hi)
		g, u, dg, du = g[:len(dy)], u[:len(dy)], dg[:len(dy)], du[:len(dy)]
		for i, y := range dy {
			z, v := g[i], u[i]
			s := sigmoid32(z)
			silu := z * s
			dg[i] = y * v * s * (1 + z*(1-s))
			du[i] = y * silu
		}
		dgv.commit(dg, lo)
		duv.commit(du, lo)
	})
	return nil
}

// AddScaled computes out = alpha*a + beta*b; see engine.Ops. out may alias
// a or b.
func (d *Device) AddScaled(out, a, b *engine.Tensor, alpha, beta float32) error {
	n, err := engine.CheckElementwise(d.own, "add scaled", []string{"out", "a", "b"}, out, a, b)
	if err != nil {
		return err
	}
	ov, av, bv := viewOf(out), viewOf(a), viewOf(b)
	d.eachBlock(n, 3, func(lo, hi int, buf [][ewBlock]float32) {
		x := av.read(buf[0][:], lo, hi)
		y := bv.read(buf[1][:], lo, hi)
		o := ov.span(buf[2][:], lo, hi)
		y, o = y[:len(x)], o[:len(x)]
		for i, v := range x {
			o[i] = alpha*v + beta*y[i]
		}
		ov.commit(o, lo)
	})
	return nil
}

// Fill sets every element of t to value (rounded to t's dtype; I32 tensors
// get the value truncated toward zero).
func (d *Device) Fill(t *engine.Tensor, value float32) error {
	if err := engine.CheckFill(d.own, t); err != nil {
		return err
	}
	n := t.Numel()
	switch s := t.Storage().(type) {
	case []float32:
		d.parallelMin(n, elemChunk, func(lo, hi int) {
			for i := range s[lo:hi] {
				s[lo+i] = value
			}
		})
	case []uint16:
		h := engine.BF16FromFloat32(value)
		if t.DType() == engine.F16 {
			h = engine.F16FromFloat32(value)
		}
		d.parallelMin(n, elemChunk, func(lo, hi int) {
			for i := range s[lo:hi] {
				s[lo+i] = h
			}
		})
	case []int32:
		v := toInt32(value)
		d.parallelMin(n, elemChunk, func(lo, hi int) {
			for i := range s[lo:hi] {
				s[lo+i] = v
			}
		})
	}
	return nil
}
