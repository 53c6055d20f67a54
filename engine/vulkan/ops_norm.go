package vulkan

import (
	"github.com/parallax-engine/parallax/engine"
)

// RMSNorm and its backward (shaders/rmsnorm.comp): one workgroup per row
// for the row-wise parts; dW is reduced deterministically over row chunks
// (partials, then an ordered sum per column). Forward rows of at most
// 8 WG elements take shaders/rownorm.comp, which loads a row's elements
// all at once into registers.

const normWG = 128

// RMSNorm normalises the rows of x; see engine.Ops.
func (d *Device) RMSNorm(o, rstd, x, w *engine.Tensor, eps float32) error {
	rows, n, err := engine.CheckRMSNorm(d.own, o, rstd, x, w)
	if err != nil {
		return err
	}
	if rows == 0 || n == 0 {
		return nil
	}
	if wg := min(max(64, nextPow2((n+7)/8)), d.flexWG()); 8*wg >= n {
		pc := push(uint32(rows), uint32(n), eps, rstd != nil)
		d.profileAs("rmsnorm forward", 0, 0) // the op's name, whichever kernel runs it
		return d.launch("rownorm", wg, nil, pc, d.groups1(rows), in(x), in(w), out(o), d.opt(rstd, true))
	}
	pc := push(uint32(rows), uint32(n), eps, uint32(0), uint32(0), rstd != nil)
	return d.launch("rmsnorm", normWG, spec{1: 0}, pc, d.groups1(rows),
		in(x), in(w), out(o), d.opt(rstd, true), d.none(), d.none(), d.none())
}

// RMSNormBackward computes dX and accumulates dW; see engine.Ops.
func (d *Device) RMSNormBackward(dX, dW, dOut, x, w, rstd *engine.Tensor) error {
	rows, n, err := engine.CheckRMSNormBackward(d.own, dX, dW, dOut, x, w, rstd)
	if err != nil {
		return err
	}
	if rows == 0 || n == 0 {
		return nil
	}
	chunk := 64
	chunks := (rows + chunk - 1) / chunk
	pr, err := d.tmp(chunks * n)
	if err != nil {
		return err
	}
	defer d.mem.release(pr)
	rs := in(rstd)
	pc := push(uint32(rows), uint32(n), float32(0), uint32(chunk), uint32(chunks), true)
	if err := d.launch("rmsnorm", normWG, spec{1: 1}, pc, d.groups1(rows),
		in(x), in(w), out(dX), rs, in(dOut), d.none(), d.none()); err != nil {
		return err
	}
	blocks := (n + normWG - 1) / normWG
	if err := d.launch("rmsnorm", normWG, spec{1: 2}, pc, d.groups1(blocks*chunks),
		in(x), in(w), d.none(), rs, in(dOut), scratch(pr), d.none()); err != nil {
		return err
	}
	parts := scratch(pr)
	parts.write = false
	return d.launch("rmsnorm", normWG, spec{1: 3}, pc, d.groups1(blocks),
		in(x), in(w), d.none(), rs, in(dOut), parts, out(dW))
}
