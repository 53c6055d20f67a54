package vulkan

import (
	"fmt"

	"github.com/parallax-engine/parallax/engine"
)

// Reductions: sums of squares, Frobenius norms and the correction ratio go
// through shaders/reduce.comp in two deterministic stages (per-workgroup
// partial sums, then one workgroup per segment combining them in order).

// tmp allocates a scratch region of n f32 values for the ops being
// recorded. It may be released as soon as they are recorded: reuse of its
// range is ordered after them. While a graph is recorded, scratch the
// recording released before is reused first (it is the graph's).
func (d *Device) tmp(n int) (*region, error) {
	bytes := uint64(max(n, 1)) * 4
	if lim := uint64(d.MaxTensorBytes()); bytes > lim {
		return nil, fmt.Errorf("vulkan: a scratch buffer of %s exceeds this device's limit of %s per binding (maxStorageBufferRange)",
			formatSize(bytes), formatSize(lim))
	}
	if rec := d.b.rec; rec != nil {
		if r := rec.spareFor(roundUp(bytes, d.mem.align)); r != nil {
			return r, nil
		}
	}
	return d.mem.alloc(bytes)
}

// reduceSegments sums f(x) (x^2 when square) over batch segments of per
// elements of x and finishes with fin (0 store/accumulate, 1 Frobenius
// scale 1/(sqrt(s)+eps), 2 mean over count) into res[seg].
func (d *Device) reduceSegments(x arg, batch, per int, square bool, fin uint32, res arg, accumulate bool, eps, count float32) error {
	if batch == 0 {
		return nil
	}
	// Partial sums: about 8 values per invocation each, at most 1024 parts.
	wg := d.flexWG()
	parts := min(max((per+wg*8-1)/(wg*8), 1), 1024)
	chunk := (per + parts - 1) / max(parts, 1)
	if chunk == 0 {
		chunk = 1
	}
	pr, err := d.tmp(batch * parts)
	if err != nil {
		return err
	}
	defer d.mem.release(pr)
	sq := uint32(0)
	if square {
		sq = 1
	}
	pc := push(uint32(per), uint32(parts), uint32(chunk), uint32(batch), accumulate, eps, count)
	if err := d.launch("reduce", wg, spec{1: 0, 2: sq, 3: fin}, pc, d.groups1(batch*parts), x, scratch(pr), res); err != nil {
		return err
	}
	return d.launch("reduce", wg, spec{1: 1, 2: sq, 3: fin}, pc, d.groups1(batch), x, scratch(pr), res)
}

// SumSquares writes (or adds) sum x^2 into out; see engine.Ops.
func (d *Device) SumSquares(o, x *engine.Tensor, accumulate bool) error {
	n, err := engine.CheckSumSquares(d.own, o, x)
	if err != nil {
		return err
	}
	if n == 0 {
		if accumulate {
			return nil
		}
		return d.Fill(o, 0)
	}
	return d.reduceSegments(in(x), 1, n, true, 0, out(o), accumulate, 0, 0)
}

// FrobeniusNormalize writes out = x / (||x||_F + eps) per matrix; see
// engine.Ops.
func (d *Device) FrobeniusNormalize(o, x *engine.Tensor, eps float32) error {
	batch, per, err := engine.CheckFrobeniusNormalize(d.own, o, x)
	if err != nil {
		return err
	}
	if batch == 0 || per == 0 {
		return nil
	}
	sr, err := d.tmp(batch)
	if err != nil {
		return err
	}
	defer d.mem.release(sr)
	if err := d.reduceSegments(in(x), batch, per, true, 1, scratch(sr), false, eps, 0); err != nil {
		return err
	}
	scale := scratch(sr)
	scale.write = false
	return d.elementwise(ewScaleBlocks, batch*per, per, false, [6]float32{}, out(o), in(x), scale)
}

// CorrectionRatio writes the mean over rows of ||vbar - o|| / ||vbar||;
// see engine.Ops.
func (d *Device) CorrectionRatio(res, o, vbar *engine.Tensor) error {
	rows, D, err := engine.CheckCorrectionRatio(d.own, res, o, vbar)
	if err != nil {
		return err
	}
	if rows == 0 {
		return d.Fill(res, 0)
	}
	rr, err := d.tmp(rows)
	if err != nil {
		return err
	}
	defer d.mem.release(rr)
	wg := 64
	if err := d.launch("cor", wg, nil, push(uint32(rows), uint32(D)), d.groups1(rows), in(o), in(vbar), scratch(rr)); err != nil {
		return err
	}
	ratios := scratch(rr)
	ratios.write = false
	ratios.dt = engine.F32
	return d.reduceSegments(ratios, 1, rows, false, 2, out(res), false, 0, float32(rows))
}
