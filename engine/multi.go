package engine

import "fmt"

// MultiTensorOps is implemented by devices that run one elementwise op over
// a list of tensors in a single launch (the optimizer's view of a model: a
// hundred or more parameter tensors, each too small to fill a GPU alone, so
// one launch a tensor costs more in launch gaps than in memory traffic).
// Each method computes exactly what the single-tensor op computes on every
// tensor of the list; callers use FillAll, ScaleAll, SumSquaresAll and
// AdamWAll, which fall back to the single-tensor ops elsewhere.
type MultiTensorOps interface {
	// FillMany sets every element of every tensor to value (as Fill).
	FillMany(ts []*Tensor, value float32) error
	// ScaleMany multiplies every tensor by s in place (as AddScaled(t, t,
	// t, s, 0)).
	ScaleMany(ts []*Tensor, s float32) error
	// SumSquaresMany writes out (F32 [1]) = sum over xs of sum x^2, or adds
	// it to out if accumulate (as SumSquares over each, in another order).
	SumSquaresMany(out *Tensor, xs []*Tensor, accumulate bool) error
	// AdamWMany applies AdamW with the same options to every
	// (ps[i], gs[i], ms[i], vs[i]).
	AdamWMany(ps, gs, ms, vs []*Tensor, o AdamWOpts) error
}

// MultiCaster is implemented by devices that cast a list of tensors in one
// launch: dsts[i] = srcs[i] rounded to dsts[i]'s dtype, each pair exactly as
// Cast computes it (the refresh of a model's compute-dtype weight copies
// from its f32 masters, a hundred tensors a step). Callers use CastAll.
type MultiCaster interface {
	CastMany(dsts, srcs []*Tensor) error
}

// CastAll casts each srcs[i] into dsts[i] (as Cast); the lists have the
// same length.
func CastAll(dev Device, dsts, srcs []*Tensor) error {
	if len(dsts) != len(srcs) {
		return &ArgError{Op: "cast", Operand: "tensors", Msg: fmt.Sprintf("lists of %d and %d tensors (want equal lengths)", len(dsts), len(srcs))}
	}
	if mc, ok := dev.(MultiCaster); ok && len(dsts) > 1 {
		return mc.CastMany(dsts, srcs)
	}
	for i := range dsts {
		if err := dev.Cast(dsts[i], srcs[i]); err != nil {
			return fmt.Errorf("cast tensor %d of %d: %w", i, len(dsts), err)
		}
	}
	return nil
}

// FillAll sets every element of every tensor of ts to value.
func FillAll(dev Device, ts []*Tensor, value float32) error {
	if mt, ok := dev.(MultiTensorOps); ok && len(ts) > 1 {
		return mt.FillMany(ts, value)
	}
	for i, t := range ts {
		if err := dev.Fill(t, value); err != nil {
			return fmt.Errorf("fill tensor %d of %d: %w", i, len(ts), err)
		}
	}
	return nil
}

// ScaleAll multiplies every tensor of ts by s in place (nothing when s is 1).
func ScaleAll(dev Device, ts []*Tensor, s float32) error {
	if s == 1 {
		return nil
	}
	if mt, ok := dev.(MultiTensorOps); ok && len(ts) > 1 {
		return mt.ScaleMany(ts, s)
	}
	for i, t := range ts {
		if err := dev.AddScaled(t, t, t, s, 0); err != nil {
			return fmt.Errorf("scale tensor %d of %d: %w", i, len(ts), err)
		}
	}
	return nil
}

// SumSquaresAll writes out (F32 [1]) = sum over xs of sum x^2 (added to out
// if accumulate). The order of the sum depends on the device.
func SumSquaresAll(dev Device, out *Tensor, xs []*Tensor, accumulate bool) error {
	if mt, ok := dev.(MultiTensorOps); ok && len(xs) > 1 {
		return mt.SumSquaresMany(out, xs, accumulate)
	}
	if len(xs) == 0 && !accumulate {
		return dev.Fill(out, 0)
	}
	for i, x := range xs {
		if err := dev.SumSquares(out, x, accumulate || i > 0); err != nil {
			return fmt.Errorf("sum squares of tensor %d of %d: %w", i, len(xs), err)
		}
	}
	return nil
}

// AdamWAll applies AdamW with options o to each (ps[i], gs[i], ms[i],
// vs[i]); the four lists have the same length.
func AdamWAll(dev Device, ps, gs, ms, vs []*Tensor, o AdamWOpts) error {
	if len(gs) != len(ps) || len(ms) != len(ps) || len(vs) != len(ps) {
		return &ArgError{Op: "adamw", Operand: "tensors", Msg: fmt.Sprintf("lists of %d, %d, %d and %d tensors (want equal lengths)", len(ps), len(gs), len(ms), len(vs))}
	}
	if mt, ok := dev.(MultiTensorOps); ok && len(ps) > 1 {
		return mt.AdamWMany(ps, gs, ms, vs, o)
	}
	for i := range ps {
		if err := dev.AdamW(ps[i], gs[i], ms[i], vs[i], o); err != nil {
			return fmt.Errorf("adamw tensor %d of %d: %w", i, len(ps), err)
		}
	}
	return nil
}
