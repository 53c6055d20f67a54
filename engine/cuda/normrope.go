//go:build cgo

package cuda

import (
	"encoding/binary"
	"math"

	"github.com/parallax-engine/parallax/engine"
)

// Host side of the fused head norm and rotation (shaders/cuda/normrope.cu).

const normRoPEModule = "normrope"

var _ engine.NormRoPE = (*Device)(nil)

// normRoPELanes is the lanes a row of width dim gets in the 16-byte
// kernels: dim/16 (one lane per 8 pairs) when that is a power of two up to
// 32; 0 when the generic kernels must run.
func normRoPELanes(dim int) int {
	if dim%16 != 0 || dim == 0 {
		return 0
	}
	c := dim / 16
	if c > 32 || c&(c-1) != 0 {
		return 0
	}
	return c
}

// normRoPEUnits picks the heads per unit of the 16-byte kernels and the
// grid: a unit's rows share the angles, so units of several heads save
// trigonometry, but only while enough lanes remain to fill the device
// (about 2^17 threads, most of an H200 resident); decoding keeps one head
// a unit. Where units of several heads leave a grid a little larger than
// the resident blocks (resident: blocks of 256 the device holds at once,
// 0 when unknown), a few more heads a unit make it one wave: a row is one
// dependent round trip to memory, so a second, partial wave costs nearly
// a whole one (measured on an H100 at gpt2-124m-like: 512 blocks of three
// heads against 396 resident, four heads 1.3% off the training step).
// force > 0 (Options.NormRoPEHeads) sets the heads per unit instead,
// capped at h. maxBlocks caps the grid (the kernels stride over the rest).
func normRoPEUnits(b, l, h, lpr, maxBlocks, resident, force int) (hpu int, grid [3]int) {
	const want = 1 << 17
	blocksOf := func(hpu int) int64 {
		units := int64(b) * int64(l) * int64((h+hpu-1)/hpu)
		return (units*int64(lpr) + 255) / 256
	}
	hpu = max(1, min(h, b*l*h*lpr/want))
	if force > 0 {
		hpu = min(h, force)
	} else if hpu > 1 && resident > 0 && blocksOf(hpu) > int64(resident) {
		// at most twice the heads, so that a unit keeps its lanes busy
		for u := hpu + 1; u <= min(h, 2*hpu); u++ {
			if blocksOf(u) <= int64(resident) {
				hpu = u
				break
			}
		}
	}
	return hpu, [3]int{int(max(1, min(blocksOf(hpu), int64(maxBlocks)))), 1, 1}
}

// nrResident is the blocks of 256 threads a multiprocessor holds of the
// 16-byte norm+RoPE kernels: NR_FWD_MINB and NR_BWD_MINB of normrope.cu.
const nrResident = 3

// normRoPEKernel is the 16-byte kernel name for these activations: the
// 16-bit-only kernel when all are bf16 or f16 (it carries no f32 path and
// so fewer registers), else its "w" variant.
func normRoPEKernel(name string, acts ...*engine.Tensor) string {
	for _, t := range acts {
		if t.DType() != engine.BF16 && t.DType() != engine.F16 {
			return name + "w"
		}
	}
	return name
}

// ropeMaxPairs is ROPE_FMAX of common.cuh: the most pairs whose
// frequencies a kernel holds in shared memory (and so takes from a table).
const ropeMaxPairs = 256

// ropeKey names a RoPE frequency table: theta's bits and D.
type ropeKey struct {
	theta uint32
	dim   int
}

// ropeTable returns the device address of RoPE's frequencies f_i =
// theta^(-2i/D), i < D/2, in double as the host forms them
// (engine.RoPEFrequencies, as decode_prep gets them), uploaded once per
// theta and D and kept until the device closes (a recorded graph may
// hold the address); 0 (the kernel forms them itself) above ropeMaxPairs
// pairs.
func (d *Device) ropeTable(theta float32, dim int) (uint64, error) {
	if dim/2 > ropeMaxPairs || dim < 2 {
		return 0, nil
	}
	key := ropeKey{math.Float32bits(theta), dim}
	if b, ok := d.ropeTabs[key]; ok {
		return b.ptr, nil
	}
	fs := engine.RoPEFrequencies(theta, dim)
	b := make([]byte, 8*len(fs))
	for i, f := range fs {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(f))
	}
	buf, err := d.scratch(int64(len(b)))
	if err != nil {
		return 0, err
	}
	if err := d.htod(buf.ptr, b); err != nil {
		d.alloc.put(buf)
		return 0, err
	}
	if d.ropeTabs == nil {
		d.ropeTabs = map[ropeKey]*buffer{}
	}
	d.ropeTabs[key] = buf
	return buf.ptr, nil
}

// RMSNormRoPE norms and rotates x [B, L, H, D] into out [B, H, L, D] in one
// launch; see engine.NormRoPE.
func (d *Device) RMSNormRoPE(out, rstd, x, w, pos *engine.Tensor, eps, theta float32) error {
	b, l, h, dim, err := engine.CheckRMSNormRoPE(d.own, out, rstd, x, w, pos)
	if err != nil {
		return err
	}
	rows := b * l * h
	if rows == 0 || dim == 0 {
		return nil
	}
	perSeq := 0
	if pos.Rank() == 2 {
		perSeq = 1
	}
	if lpr := normRoPELanes(dim); lpr > 0 {
		tab, err := d.ropeTable(theta, dim)
		if err != nil {
			return err
		}
		hpu, g := normRoPEUnits(b, l, h, lpr, 1<<20, nrResident*d.g.sms, d.opts.NormRoPEHeads)
		return d.launch(normRoPEModule, normRoPEKernel("normrope8", out, x), g, threads256, 0,
			newArgs().p(ptr(out)).i(dt(out)).p(ptr(rstd)).p(ptr(x)).i(dt(x)).p(ptr(w)).i(dt(w)).p(ptr(pos)).
				i(b).i(l).i(h).i(dim).i(hpu).i(perSeq).f(eps).f(theta).i(lpr).p(tab))
	}
	return d.launch(normRoPEModule, "normrope", warpRowGrid(rows), threads256, 0,
		newArgs().p(ptr(out)).i(dt(out)).p(ptr(rstd)).p(ptr(x)).i(dt(x)).p(ptr(w)).i(dt(w)).p(ptr(pos)).
			i(b).i(l).i(h).i(dim).i(perSeq).f(eps).f(theta))
}

// RMSNormRoPEBackward computes dX and dW's per-block partial sums in one
// launch, then adds their column sums into dW (colsum_add, fixed order);
// see engine.NormRoPE. The grid is capped at a few blocks per
// multiprocessor, each summing its partials over many rows. Widths the
// 16-byte kernel cannot take run normrope_bwd, whose blocks add into an
// f32 accumulator with atomics.
func (d *Device) RMSNormRoPEBackward(dX, dW, dOut, x, w, rstd, pos *engine.Tensor, theta float32) error {
	b, l, h, dim, err := engine.CheckRMSNormRoPEBackward(d.own, dX, dW, dOut, x, w, rstd, pos)
	if err != nil {
		return err
	}
	rows := b * l * h
	if rows == 0 || dim == 0 {
		return nil
	}
	perSeq := 0
	if pos.Rank() == 2 {
		perSeq = 1
	}
	maxBlocks := 4 * max(d.g.sms, 1)
	if lpr := normRoPELanes(dim); lpr > 0 {
		tab, err := d.ropeTable(theta, dim)
		if err != nil {
			return err
		}
		hpu, g := normRoPEUnits(b, l, h, lpr, maxBlocks, nrResident*d.g.sms, d.opts.NormRoPEHeads)
		part, err := d.scratch(int64(g[0]) * int64(dim) * 4)
		if err != nil {
			return err
		}
		defer d.alloc.put(part)
		if err := d.launch(normRoPEModule, normRoPEKernel("normrope_bwd8", dX, dOut, x), g, threads256, 0,
			newArgs().p(ptr(dX)).i(dt(dX)).p(part.ptr).p(ptr(dOut)).i(dt(dOut)).p(ptr(x)).i(dt(x)).p(ptr(w)).i(dt(w)).
				p(ptr(rstd)).p(ptr(pos)).i(b).i(l).i(h).i(dim).i(hpu).i(perSeq).f(theta).i(lpr).p(tab)); err != nil {
			return err
		}
		return d.colsumAdd(ptr(dW), dt(dW), part.ptr, g[0], dim)
	}
	acc := ptr(dW)
	if dW.DType() != engine.F32 {
		tmp, err := d.scratch(int64(dim) * 4)
		if err != nil {
			return err
		}
		defer d.alloc.put(tmp)
		if err := d.zero(tmp.ptr, int64(dim)*4); err != nil {
			return err
		}
		acc = tmp.ptr
	}
	g := warpRowGrid(rows)
	g[0] = min(g[0], maxBlocks)
	err = d.launch(normRoPEModule, "normrope_bwd", g, threads256, 4*dim,
		newArgs().p(ptr(dX)).i(dt(dX)).p(acc).p(ptr(dOut)).i(dt(dOut)).p(ptr(x)).i(dt(x)).p(ptr(w)).i(dt(w)).
			p(ptr(rstd)).p(ptr(pos)).i(b).i(l).i(h).i(dim).i(perSeq).f(theta))
	if err != nil || dW.DType() == engine.F32 {
		return err
	}
	return d.launch(ew, "add_f32", grid1(int64(dim)), threads256, 0, newArgs().p(ptr(dW)).i(dt(dW)).p(acc).l(int64(dim)))
}
