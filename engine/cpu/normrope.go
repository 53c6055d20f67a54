package cpu

import (
	"math"

	"github.com/parallax-engine/parallax/engine"
)

var _ engine.NormRoPE = (*Device)(nil)

// RMSNormRoPE norms each [D] row of x [B, L, H, D] and rotates it into
// out [B, H, L, D]; see engine.NormRoPE. It performs the float32
// arithmetic of RMSNorm followed by RoPE (row statistics in float64,
// angles in float64 rounded to float32 cosines and sines), so with f32
// tensors it equals their composition exactly; 16-bit outputs are rounded
// once, not after the norm too.
func (d *Device) RMSNormRoPE(out, rstd, x, w, pos *engine.Tensor, eps, theta float32) error {
	b, l, h, dim, err := engine.CheckRMSNormRoPE(d.own, out, rstd, x, w, pos)
	if err != nil {
		return err
	}
	rows := b * l * h
	if rows == 0 || dim == 0 {
		return nil
	}
	half := dim / 2
	cs, sn := d.ropeTable(pos, theta, dim, false)
	wf := floats(w)
	xv, ov := viewOf(x), viewOf(out)
	var rs []float32
	if rstd != nil {
		rs = rstd.Storage().([]float32)
	}
	perSeq := len(ints(pos)) != l
	d.parallelMin(rows, rowChunk(dim), func(lo, hi int) {
		xbuf := make([]float32, dim)
		ybuf := make([]float32, dim)
		obuf := make([]float32, dim)
		for r := lo; r < hi; r++ {
			xr := xv.read(xbuf, r*dim, (r+1)*dim)
			var ss float64
			for _, v := range xr {
				ss += float64(v) * float64(v)
			}
			s := float32(1 / math.Sqrt(ss/float64(dim)+float64(eps)))
			if rs != nil {
				rs[r] = s
			}
			y := ybuf[:dim]
			for i, v := range xr {
				y[i] = v * s * wf[i]
			}
			bi, li, hh := r/(l*h), r/h%l, r%h
			pi := li
			if perSeq {
				pi += bi * l
			}
			c, sv := cs[pi*half:(pi+1)*half], sn[pi*half:(pi+1)*half]
			o := ((bi*h+hh)*l + li) * dim
			or := ov.span(obuf, o, o+dim)
			for i := range c {
				a, bb := y[i], y[i+half]
				or[i] = a*c[i] - bb*sv[i]
				or[i+half] = bb*c[i] + a*sv[i]
			}
			ov.commit(or, o)
		}
	})
	return nil
}

// RMSNormRoPEBackward rotates dOut back and runs the RMSNorm backward;
// see engine.NormRoPE. As the forward, it is RoPEBackward followed by
// RMSNormBackward exactly (the same float64 row sums and in-order dW
// partials) with f32 tensors.
func (d *Device) RMSNormRoPEBackward(dX, dW, dOut, x, w, rstd, pos *engine.Tensor, theta float32) error {
	b, l, h, dim, err := engine.CheckRMSNormRoPEBackward(d.own, dX, dW, dOut, x, w, rstd, pos)
	if err != nil {
		return err
	}
	rows := b * l * h
	if rows == 0 || dim == 0 {
		return nil
	}
	half := dim / 2
	cs, sn := d.ropeTable(pos, theta, dim, true)
	perSeq := len(ints(pos)) != l
	wf := floats(w)
	rs := rstd.Storage().([]float32)
	xv, gv, dv := viewOf(x), viewOf(dOut), viewOf(dX)
	count, size := d.reduceChunks(rows, rowChunk(dim))
	parts := make([][]float64, count)
	d.parallel(count, func(c0, c1 int) {
		xbuf := make([]float32, dim)
		gbuf := make([]float32, dim)
		g := make([]float32, dim)
		dbuf := make([]float32, dim)
		for ch := c0; ch < c1; ch++ {
			dw := make([]float64, dim)
			parts[ch] = dw
			for r := ch * size; r < min((ch+1)*size, rows); r++ {
				bi, li, hh := r/(l*h), r/h%l, r%h
				pi := li
				if perSeq {
					pi += bi * l
				}
				c, sv := cs[pi*half:(pi+1)*half], sn[pi*half:(pi+1)*half]
				o := ((bi*h+hh)*l + li) * dim
				gr := gv.read(gbuf, o, o+dim)
				for i := range c {
					a, bb := gr[i], gr[i+half]
					g[i] = a*c[i] - bb*sv[i]
					g[i+half] = bb*c[i] + a*sv[i]
				}
				xr := xv.read(xbuf, r*dim, (r+1)*dim)
				s := rs[r]
				var dot float64
				for i, gi := range g {
					xh := float64(xr[i]) * float64(s)
					dot += float64(gi) * float64(wf[i]) * xh
					dw[i] += float64(gi) * xh
				}
				mean := float32(dot / float64(dim))
				dr := dv.span(dbuf, r*dim, (r+1)*dim)
				for i, gi := range g {
					xh := xr[i] * s
					dr[i] = s * (gi*wf[i] - xh*mean)
				}
				dv.commit(dr, r*dim)
			}
		}
	})
	acc, commit := output(dW, true)
	for i := range acc {
		var s float64
		for _, p := range parts {
			s += p[i]
		}
		acc[i] = float32(float64(acc[i]) + s)
	}
	commit()
	return nil
}

// ropeTable returns the float32 cosines and sines of RoPE's angles
// pos * theta^(-2i/D), per (position index, pair), as rope computes them
// (the sines negated for the inverse rotation).
func (d *Device) ropeTable(pos *engine.Tensor, theta float32, dim int, inverse bool) (cs, sn []float32) {
	half := dim / 2
	p := ints(pos)
	inv := engine.RoPEFrequencies(theta, dim)
	cs, sn = make([]float32, len(p)*half), make([]float32, len(p)*half)
	sign := 1.0
	if inverse {
		sign = -1
	}
	d.parallelMin(len(p), max(1, 4096/max(half, 1)), func(lo, hi int) {
		for li := lo; li < hi; li++ {
			for i, f := range inv {
				s, c := math.Sincos(float64(p[li]) * f)
				cs[li*half+i] = float32(c)
				sn[li*half+i] = float32(sign * s)
			}
		}
	})
	return cs, sn
}
