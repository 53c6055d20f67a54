package vulkan

import (
	"fmt"

	"github.com/parallax-engine/parallax/engine"
)

// LLA is exact local linear attention, one workgroup per query row
// (shaders/lla.comp): Sigma is built in a D x D scratch slice per row, the
// system solved by conjugate gradients or Cholesky in f32; see engine.Ops.
// Rows are processed in chunks so the scratch stays below llaScratch
// bytes. With lambda = 0 a row that sees at most D keys has a singular
// system: refused before anything runs, as on the CPU.
func (d *Device) LLA(a engine.LLAArgs) error {
	dims, err := engine.CheckLLA(d.own, a)
	if err != nil {
		return err
	}
	if err := engine.CheckLLASolvable(dims, a.Lambda); err != nil {
		return d.fail(err)
	}
	rows := dims.B * dims.Hq * dims.Lq
	if rows == 0 {
		return nil
	}
	tol, maxIter := a.CGLimits(dims.D)
	D := dims.D
	wg := 64
	if D > 8*wg {
		return fmt.Errorf("lla: head dimension %d is larger than the kernel's %d", D, 8*wg)
	}
	// Key tile: fit q, mu, x, r, p, u, the tile and the reductions.
	bc := 32
	for bc > 1 && 4*(6*D+bc*D+bc+wg+8) > int(d.pd.lim.maxSharedMemory)-256 {
		bc /= 2
	}
	const llaScratch = 64 << 20
	chunk := max(1, min(rows, llaScratch/(4*D*D)))
	sr, err := d.tmp(chunk * D * D)
	if err != nil {
		return err
	}
	defer d.mem.release(sr)
	solver := uint32(0)
	if a.Solver == engine.SolveDirect {
		solver = 1
	}
	flags := flag(a.RhoStar != nil) | flag(a.Eta != nil)<<1
	for r0 := 0; r0 < rows; r0 += chunk {
		n := min(chunk, rows-r0)
		pc := push(uint32(dims.B), uint32(dims.Hq), uint32(dims.Hkv), uint32(dims.G), uint32(dims.Lq), uint32(dims.Lk),
			dims.Causal, uint32(dims.Window), dims.Scale, uint32(1), uint32(0), flags,
			a.Lambda, float32(tol), uint32(maxIter), uint32(r0), uint32(n))
		if err := d.launch("lla", wg, spec{1: uint32(D), 2: solver, 3: uint32(bc)}, pc, d.groups1(n),
			in(a.Q), in(a.K), in(a.V), out(a.O), d.opt(a.RhoStar, true), d.opt(a.Eta, true), scratch(sr), d.statusArg()); err != nil {
			return err
		}
	}
	return nil
}
