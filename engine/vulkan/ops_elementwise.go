package vulkan

import (
	"math"

	"github.com/parallax-engine/parallax/engine"
)

// Elementwise ops: one grid-stride kernel (shaders/elementwise.comp) whose
// OP constant picks the formula; operands are bound in the order the
// shader documents, absent ones to the dummy buffer.

const (
	ewAddScaled   = 0
	ewSwiGLU      = 1
	ewSwiGLUBwd   = 2
	ewAdamW       = 3
	ewMuonMom     = 4
	ewMuonApply   = 5
	ewScaleBlocks = 6
)

// elementwise records one elementwise kernel over n elements.
func (d *Device) elementwise(op uint32, n int, per int, flag bool, c [6]float32, args ...arg) error {
	if n == 0 {
		return nil
	}
	for len(args) < 5 {
		args = append(args, d.none())
	}
	pc := push(uint32(n), uint32(max(per, 1)), flag, c[0], c[1], c[2], c[3], c[4], c[5])
	wg := d.flexWG()
	return d.launch("elementwise", wg, spec{1: op}, pc, d.strideGroups(n, wg), args...)
}

// AddScaled computes out = alpha*a + beta*b; see engine.Ops.
func (d *Device) AddScaled(out_, a, b *engine.Tensor, alpha, beta float32) error {
	n, err := engine.CheckElementwise(d.own, "add scaled", []string{"out", "a", "b"}, out_, a, b)
	if err != nil {
		return err
	}
	return d.elementwise(ewAddScaled, n, 1, false, [6]float32{alpha, beta}, out(out_), in(a), in(b))
}

// SwiGLU computes out = silu(gate) * up; see engine.Ops.
func (d *Device) SwiGLU(o, gate, up *engine.Tensor) error {
	n, err := engine.CheckElementwise(d.own, "swiglu", []string{"out", "gate", "up"}, o, gate, up)
	if err != nil {
		return err
	}
	return d.elementwise(ewSwiGLU, n, 1, false, [6]float32{}, out(o), in(gate), in(up))
}

// SwiGLUBackward computes dGate and dUp; see engine.Ops.
func (d *Device) SwiGLUBackward(dGate, dUp, dOut, gate, up *engine.Tensor) error {
	const op = "swiglu backward"
	n, err := engine.CheckElementwise(d.own, op, []string{"dGate", "dUp", "dOut", "gate", "up"}, dGate, dUp, dOut, gate, up)
	if err != nil {
		return err
	}
	return d.elementwise(ewSwiGLUBwd, n, 1, false, [6]float32{}, out(dGate), out(dUp), in(dOut), in(gate), in(up))
}

// AdamW updates p, m and v in place; see engine.Ops. The bias corrections
// are computed on the host in float64.
func (d *Device) AdamW(p, g, m, v *engine.Tensor, o engine.AdamWOpts) error {
	n, err := engine.CheckAdamW(d.own, p, g, m, v, o)
	if err != nil {
		return err
	}
	decay, step, bc2 := o.Factors()
	c := [6]float32{float32(decay), o.Beta1, o.Beta2, float32(step), float32(bc2), o.Eps}
	// The shader reads the gradient scale's bits from the per word, which
	// no other operand of the update needs.
	return d.elementwise(ewAdamW, n, int(math.Float32bits(o.Scale())), false, c, out(p), in(g), out(m), out(v))
}

// MuonMomentum updates m and writes the direction u from the gradient
// scaled by o.Scale(); see engine.Ops.
func (d *Device) MuonMomentum(u, m, g *engine.Tensor, o engine.MuonMomentumOpts) error {
	n, err := engine.CheckMuonMomentum(d.own, u, m, g, o)
	if err != nil {
		return err
	}
	return d.elementwise(ewMuonMom, n, 1, o.Nesterov, [6]float32{o.Beta, o.Scale()}, out(u), out(m), in(g))
}

// MuonApply updates p = p (1 - lr wd) - lr scale o; see engine.Ops.
func (d *Device) MuonApply(p, o *engine.Tensor, lr, wd, scale float32) error {
	n, err := engine.CheckMuonApply(d.own, p, o)
	if err != nil {
		return err
	}
	c := [6]float32{float32(1 - float64(lr)*float64(wd)), float32(float64(lr) * float64(scale))}
	return d.elementwise(ewMuonApply, n, 1, false, c, out(p), in(o))
}

// Fill sets every element of t to value rounded to its dtype (i32:
// truncated toward zero, saturating), with vkCmdFillBuffer.
func (d *Device) Fill(t *engine.Tensor, value float32) error {
	if err := engine.CheckFill(d.own, t); err != nil {
		return err
	}
	if t.Numel() == 0 {
		return nil
	}
	var pattern uint32
	switch t.DType() {
	case engine.F32:
		pattern = math.Float32bits(value)
	case engine.I32:
		pattern = uint32(toInt32(value))
	case engine.BF16:
		h := uint32(engine.BF16FromFloat32(value))
		pattern = h | h<<16
	case engine.F16:
		h := uint32(engine.F16FromFloat32(value))
		pattern = h | h<<16
	}
	r := regionOf(t)
	return d.b.fill(r, 0, roundUp(uint64(t.Bytes()), 4), pattern)
}

// toInt32 truncates toward zero, saturating at the int32 range (NaN: 0).
func toInt32(f float32) int32 {
	switch {
	case f != f:
		return 0
	case f >= math.MaxInt32:
		return math.MaxInt32
	case f <= math.MinInt32:
		return math.MinInt32
	}
	return int32(f)
}
