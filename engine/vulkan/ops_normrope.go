package vulkan

import (
	"github.com/parallax-engine/parallax/engine"
)

// The fused head norm and rotation (shaders/normrope.comp): the forward
// and the backward's dX are one dispatch each, T invocations a row; dW is
// reduced deterministically over row chunks as RMSNormBackward's is.

var _ engine.NormRoPE = (*Device)(nil)

// normRoPELanes is the invocations a row of D/2 = half pairs gets: the
// least power of two covering the pairs, at most 32 and at most wg.
func normRoPELanes(half, wg int) int {
	t := 1
	for t < half && t < 32 && t < wg {
		t *= 2
	}
	return t
}

// RMSNormRoPE norms each row of x [B, L, H, D] and rotates it into out
// [B, H, L, D]; see engine.NormRoPE.
func (d *Device) RMSNormRoPE(o, rstd, x, w, pos *engine.Tensor, eps, theta float32) error {
	b, l, h, dim, err := engine.CheckRMSNormRoPE(d.own, o, rstd, x, w, pos)
	if err != nil {
		return err
	}
	rows := b * l * h
	if rows == 0 || dim == 0 {
		return nil
	}
	fr, err := d.ropeFreqs(theta, dim)
	if err != nil {
		return err
	}
	wg := d.flexWG()
	t := normRoPELanes(dim/2, wg)
	pc := push(uint32(rows), uint32(l), uint32(h), uint32(dim/2), uint32(t), eps, rstd != nil, pos.Rank() == 2,
		uint32(0), uint32(0))
	return d.launch("normrope", wg, spec{1: 0}, pc, d.strideGroups(rows, wg/t),
		in(x), in(w), out(o), d.opt(rstd, true), d.none(), in(pos), arg{r: fr, size: fr.size, dt: engine.F32},
		d.none(), d.none())
}

// RMSNormRoPEBackward computes dX and accumulates dW; see engine.NormRoPE.
func (d *Device) RMSNormRoPEBackward(dX, dW, dOut, x, w, rstd, pos *engine.Tensor, theta float32) error {
	b, l, h, dim, err := engine.CheckRMSNormRoPEBackward(d.own, dX, dW, dOut, x, w, rstd, pos)
	if err != nil {
		return err
	}
	rows := b * l * h
	if rows == 0 || dim == 0 {
		return nil
	}
	fr, err := d.ropeFreqs(theta, dim)
	if err != nil {
		return err
	}
	freqs := arg{r: fr, size: fr.size, dt: engine.F32}
	const chunk = 64
	chunks := (rows + chunk - 1) / chunk
	pr, err := d.tmp(chunks * dim)
	if err != nil {
		return err
	}
	defer d.mem.release(pr)
	wg := d.flexWG()
	t := normRoPELanes(dim/2, wg)
	pc := push(uint32(rows), uint32(l), uint32(h), uint32(dim/2), uint32(t), float32(0), true, pos.Rank() == 2,
		uint32(chunk), uint32(chunks))
	rs := in(rstd)
	if err := d.launch("normrope", wg, spec{1: 1}, pc, d.strideGroups(rows, wg/t),
		in(x), in(w), out(dX), rs, in(dOut), in(pos), freqs, d.none(), d.none()); err != nil {
		return err
	}
	blocks := (dim/2 + wg - 1) / wg
	if err := d.launch("normrope", wg, spec{1: 2}, pc, d.groups1(blocks*chunks),
		in(x), in(w), d.none(), rs, in(dOut), in(pos), freqs, scratch(pr), d.none()); err != nil {
		return err
	}
	parts := scratch(pr)
	parts.write = false
	return d.launch("normrope", wg, spec{1: 3}, pc, d.groups1((dim+wg-1)/wg),
		in(x), in(w), d.none(), rs, in(dOut), in(pos), freqs, parts, out(dW))
}
