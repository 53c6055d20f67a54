package cpu

import (
	"math"

	"github.com/parallax-engine/parallax/engine"
)

// AdamW updates p, m and v in place in PyTorch's order: decoupled decay
// p -= lr*wd*p first, then the moments, then the bias-corrected step
// p -= (lr / (1-b1^t)) m / (sqrt(v) / sqrt(1-b2^t) + eps); see engine.Ops.
// Each element is updated in float64 and stored rounded; the gradient is
// first scaled by o.Scale() in f32.
func (d *Device) AdamW(p, g, m, v *engine.Tensor, o engine.AdamWOpts) error {
	n, err := engine.CheckAdamW(d.own, p, g, m, v, o)
	if err != nil {
		return err
	}
	b1, b2, eps := float64(o.Beta1), float64(o.Beta2), float64(o.Eps)
	decay, step, bc2 := o.Factors()
	pv, gv := viewOf(p), viewOf(g)
	ms, vs := m.Storage().([]float32), v.Storage().([]float32)
	gs := o.Scale()
	d.eachBlock(n, 2, func(lo, hi int, buf [][ewBlock]float32) {
		gr := gv.read(buf[0][:], lo, hi)
		pr := pv.span(buf[1][:], lo, hi)
		if pv.f32 == nil {
			pv.read(pr, lo, hi)
		}
		mrow, vr := ms[lo:hi], vs[lo:hi]
		mrow, vr, pr = mrow[:len(gr)], vr[:len(gr)], pr[:len(gr)]
		for i, gf := range gr {
			x := float64(gs * gf) // the scaled gradient rounded to f32 (engine.AdamWOpts)
			mi := b1*float64(mrow[i]) + (1-b1)*x
			vi := b2*float64(vr[i]) + (1-b2)*x*x
			mrow[i], vr[i] = float32(mi), float32(vi)
			pr[i] = float32(float64(pr[i])*decay - step*mi/(math.Sqrt(vi)/bc2+eps))
		}
		pv.commit(pr, lo)
	})
	return nil
}

// MuonMomentum updates m = beta m + (1-beta) g' and writes u = (1-beta) g'
// + beta m (Nesterov) or u = m, in f32, where g' = fl(s g) is the gradient
// scaled by o.Scale(); see engine.Ops.
func (d *Device) MuonMomentum(u, m, g *engine.Tensor, o engine.MuonMomentumOpts) error {
	n, err := engine.CheckMuonMomentum(d.own, u, m, g, o)
	if err != nil {
		return err
	}
	uv, gv := viewOf(u), viewOf(g)
	ms := m.Storage().([]float32)
	beta, nesterov, gs := o.Beta, o.Nesterov, o.Scale()
	c := 1 - beta
	d.eachBlock(n, 2, func(lo, hi int, buf [][ewBlock]float32) {
		gr := gv.read(buf[0][:], lo, hi)
		ur := uv.span(buf[1][:], lo, hi)
		mrow := ms[lo:hi]
		mrow, ur = mrow[:len(gr)], ur[:len(gr)]
		for i, x := range gr {
			// The scaled gradient is stored to f32 first (float32() keeps Go
			// from fusing it into the next line's multiply-adds).
			x = float32(gs * x)
			mi := beta*mrow[i] + c*x
			mrow[i] = mi
			if nesterov {
				ur[i] = c*x + beta*mi
			} else {
				ur[i] = mi
			}
		}
		uv.commit(ur, lo)
	})
	return nil
}

// FrobeniusNormalize writes out = x / (||x||_F + eps) per matrix over the
// last two dimensions, the norms accumulated in float64 in an order that
// does not depend on the batch; see engine.Ops.
func (d *Device) FrobeniusNormalize(out, x *engine.Tensor, eps float32) error {
	batch, per, err := engine.CheckFrobeniusNormalize(d.own, out, x)
	if err != nil {
		return err
	}
	if batch == 0 || per == 0 {
		return nil
	}
	xv, ov := viewOf(x), viewOf(out)
	// Each matrix's sum is split into the same chunks (parallelSumSquares's)
	// whatever the batch, so a matrix normalises bit for bit alike alone or
	// in a batch.
	count, size := d.reduceChunks(per, elemChunk)
	parts := make([]float64, batch*count)
	d.parallelMin(batch*count, max(1, elemChunk/size), func(lo, hi int) {
		for t := lo; t < hi; t++ {
			b, c := t/count, t%count
			s := b*per + c*size
			parts[t] = sumSquares(xv, s, min(s+size, (b+1)*per))
		}
	})
	inv := make([]float64, batch)
	for b := range inv {
		var s float64
		for _, p := range parts[b*count : (b+1)*count] {
			s += p
		}
		inv[b] = 1 / (math.Sqrt(s) + float64(eps))
	}
	d.eachBlock(batch*per, 2, func(lo, hi int, buf [][ewBlock]float32) {
		xr := xv.read(buf[0][:], lo, hi)
		or := ov.span(buf[1][:], lo, hi)
		or = or[:len(xr)]
		for i, v := range xr {
			or[i] = float32(float64(v) * inv[(lo+i)/per])
		}
		ov.commit(or, lo)
	})
	return nil
}

// MuonApply updates p = p (1 - lr wd) - lr scale o; see engine.Ops.
func (d *Device) MuonApply(p, o *engine.Tensor, lr, wd, scale float32) error {
	n, err := engine.CheckMuonApply(d.own, p, o)
	if err != nil {
		return err
	}
	decay := float32(1 - float64(lr)*float64(wd))
	step := float32(float64(lr) * float64(scale))
	pv, ov := viewOf(p), viewOf(o)
	d.eachBlock(n, 2, func(lo, hi int, buf [][ewBlock]float32) {
		or := ov.read(buf[0][:], lo, hi)
		pr := pv.span(buf[1][:], lo, hi)
		if pv.f32 == nil {
			pv.read(pr, lo, hi)
		}
		pr = pr[:len(or)]
		for i, x := range or {
			pr[i] = pr[i]*decay - step*x
		}
		pv.commit(pr, lo)
	})
	return nil
}
