package vulkan

import (
	"fmt"

	"github.com/parallax-engine/parallax/engine"
)

// The weight-only int8 ops. A product of up to qmatmulMaxRows rows runs
// the matrix-vector kernel (shaders/qmatmul.comp), gemv.comp's design for
// int8 weights: a subgroup streams one weight row with 16-byte loads (16
// weights and their group's scale), so the int8 weight is read once, half
// of bf16's bytes. The same kernel takes up to four weights of one x in
// one dispatch (engine.Int8MultiLinear: the q, k, v and r projections), a
// SwiGLU MLP's gate and up products with the activation
// (engine.Int8MLPFuser), and either with the RMSNorm before it folded in
// (engine.Int8NormLinear), so an int8 decode step has the dispatches of a
// bf16 one and, like it, allocates nothing and can be recorded. Every
// other product (prefill; a device without subgroup arithmetic, or
// Options.NoGEMV) dequantizes the weight into scratch of x's dtype
// (shaders/qdequant.comp) and runs MatMul over it. EmbeddingInt8 is
// qdequant.comp over the ids (or every row).

// qmatmulMaxRows is the most rows of x the matrix-vector kernel takes (as
// the CUDA backend's qgemv: more would take passes of 8 rows, each reading
// the weight again).
const qmatmulMaxRows = 8

// qmatmulCall is one dispatch of qmatmul.comp: outs[i] (+)= x ws[i]^T, or
// with swiglu outs[0] = silu(x ws[0]^T) * (x ws[1]^T); with norm, x is
// replaced by RMSNorm(x, norm, eps) (never stored). Every weight has
// dims.K columns and one group size.
type qmatmulCall struct {
	dims       []engine.Int8Dims // of each weight (M and K shared)
	x          *engine.Tensor
	ws         []engine.Int8Weight
	outs       []*engine.Tensor
	accumulate bool
	swiglu     bool
	norm       *engine.Tensor // the norm weight [K], or nil
	eps        float32
	name       string // for a profile
}

// qmatmulTakes reports whether qmatmul.comp takes the product out = x w^T
// of these dims on this device: 1 to qmatmulMaxRows rows, a non-empty
// weight, the GEMV kernel's subgroups (gemvShape) and 32-bit element
// indices.
func (d *Device) qmatmulTakes(dims engine.Int8Dims) bool {
	if dims.M < 1 || dims.M > qmatmulMaxRows || dims.N == 0 || dims.K == 0 {
		return false
	}
	if _, _, ok := d.gemvShape(); !ok {
		return false
	}
	return int64(dims.N)*int64(dims.K) < 1<<32 && int64(dims.M)*int64(max(dims.N, dims.K)) < 1<<32
}

// qmatmul launches c. The 16-byte loads need K % 16 == 0 and a group size
// that is a multiple of 16 or at least K (each piece of 16 weights then
// lies in one scale group); otherwise the kernel reads weight by weight.
func (d *Device) qmatmul(c qmatmulCall) error {
	wg, cpw, ok := d.gemvShape()
	if !ok {
		return fmt.Errorf("vulkan: qmatmul: %s has no kernel for it (subgroup arithmetic, 8-wide subgroups)", d.pd.name)
	}
	nw := len(c.ws)
	if nw == 0 || nw > gemvMaxWeights || len(c.dims) != nw || (c.swiglu && (nw != 2 || len(c.outs) != 1)) || (!c.swiglu && len(c.outs) != nw) {
		return fmt.Errorf("vulkan: qmatmul: %d weights for %d outputs", nw, len(c.outs))
	}
	if c.norm != nil && c.accumulate {
		return fmt.Errorf("vulkan: qmatmul: a norm with accumulation")
	}
	d0 := c.dims[0]
	group := c.ws[0].Group
	vec := d0.K%16 == 0 && (group%16 == 0 || group >= d0.K)
	var n, first [4]uint32
	groups := 0
	cols := 1
	if !c.swiglu {
		cols = nw
	}
	for i := range cols {
		n[i] = uint32(c.dims[i].N)
		first[i] = uint32(groups)
		groups += (c.dims[i].N + cpw - 1) / cpw
	}
	for i := cols; i < 4; i++ {
		first[i] = uint32(groups)
	}
	pc := push(uint32(d0.K), uint32(group), uint32(d0.Groups), c.accumulate,
		n[0], n[1], n[2], n[3], first[0], first[1], first[2], first[3], uint32(groups), c.eps)
	// Always fourteen bindings (the norm weight's is statically used
	// whatever NORM is): one pipeline layout.
	args := make([]arg, 14)
	args[0] = in(c.x)
	for i := range 4 {
		if i < nw {
			args[1+i], args[5+i] = in(c.ws[i].Q), in(c.ws[i].Scales)
		} else {
			args[1+i] = arg{r: d.dummy, size: d.dummy.size, dt: engine.I8}
			args[5+i] = d.none()
		}
		if i < len(c.outs) {
			args[9+i] = out(c.outs[i])
		} else {
			// Unused: the dummy buffer, typed as output 0 so the kernel's
			// per-binding dtype branches fold to one.
			args[9+i] = arg{r: d.dummy, size: d.dummy.size, dt: c.outs[0].DType()}
		}
	}
	args[13] = d.none()
	if c.norm != nil {
		args[13] = in(c.norm)
	}
	sp := spec{1: uint32(d0.M), 2: uint32(nw), 3: flag(c.swiglu), 4: flag(vec), 5: uint32(cpw), 6: flag(c.norm != nil)}
	if d.prof.on {
		var flops, bytes float64
		bytes = float64(d0.M * d0.K * c.x.DType().Size())
		for i, w := range c.ws {
			flops += 2 * float64(d0.M) * float64(c.dims[i].N) * float64(d0.K)
			bytes += float64(w.Bytes())
		}
		for _, o := range c.outs {
			ob := float64(o.Bytes())
			if c.accumulate {
				ob *= 2
			}
			bytes += ob
		}
		if c.norm != nil {
			bytes += float64(c.norm.Bytes())
		}
		d.profileAs(c.name, flops, bytes)
	}
	return d.launch("qmatmul", wg, sp, pc, d.groups1(groups), args...)
}

// LinearInt8 computes out = x W^T (+ out) for an int8 weight; see
// engine.Ops.
func (d *Device) LinearInt8(o, x *engine.Tensor, w engine.Int8Weight, accumulate bool) error {
	dims, err := engine.CheckLinearInt8(d.own, o, x, w)
	if err != nil {
		return err
	}
	if dims.M == 0 || dims.N == 0 {
		return nil
	}
	if dims.K == 0 {
		if accumulate {
			return nil
		}
		return d.Fill(o, 0)
	}
	if !d.qmatmulTakes(dims) {
		return d.linearInt8Dequant(o, x, w, dims, accumulate)
	}
	return d.qmatmul(qmatmulCall{
		dims: []engine.Int8Dims{dims}, x: x, ws: []engine.Int8Weight{w}, outs: []*engine.Tensor{o},
		accumulate: accumulate, name: fmt.Sprintf("qmatmul M%d N%d K%d", dims.M, dims.N, dims.K),
	})
}

// linearInt8Dequant dequantizes w into scratch of x's dtype and multiplies
// over it with MatMul. The scratch is the device's (tmp), so the product
// can be recorded into a graph.
func (d *Device) linearInt8Dequant(out, x *engine.Tensor, w engine.Int8Weight, dims engine.Int8Dims, accumulate bool) error {
	bytes := int64(dims.N) * int64(dims.K) * int64(x.DType().Size())
	r, err := d.tmp(int((bytes + 3) / 4))
	if err != nil {
		return fmt.Errorf("linear int8: dequantized weight: %w", err)
	}
	defer d.mem.release(r)
	wt := engine.NewTensor(d, x.DType(), engine.Shape{dims.N, dims.K}, r)
	if err := d.dequant(wt, w, nil, dims.N, dims.N, dims.K); err != nil {
		return err
	}
	return engine.LinearDequantized(d, out, x, wt, dims, accumulate)
}

// dequant writes rows of W into dst (rows of K): W[ids[r]] with ids, else
// W[r].
func (d *Device) dequant(dst *engine.Tensor, w engine.Int8Weight, ids *engine.Tensor, rows, n, k int) error {
	if rows == 0 || k == 0 {
		return nil
	}
	wg := d.flexWG()
	idArg := d.none()
	if ids != nil {
		idArg = in(ids)
	}
	pc := push(uint32(rows), uint32(n), uint32(k), uint32(w.Group), uint32(engine.Int8Groups(k, w.Group)), ids != nil)
	return d.launch("qdequant", wg, nil, pc, d.strideGroups(rows*k, wg), in(w.Q), in(w.Scales), idArg, out(dst), d.statusArg())
}

// EmbeddingInt8 gathers dequantized rows of an int8 weight (every row when
// ids is nil); an id out of range is reported at Sync. See engine.Ops.
func (d *Device) EmbeddingInt8(o *engine.Tensor, w engine.Int8Weight, ids *engine.Tensor) error {
	rows, k, n, err := engine.CheckEmbeddingInt8(d.own, o, w, ids)
	if err != nil {
		return err
	}
	return d.dequant(o, w, ids, rows, n, k)
}

var (
	_ engine.Int8MultiLinear = (*Device)(nil)
	_ engine.Int8MLPFuser    = (*Device)(nil)
	_ engine.Int8NormLinear  = (*Device)(nil)
)

// multiCallInt8 checks up to four products outs[i] = x ws[i]^T and returns their qmatmul dispatch, ok false (and err nil) where the kernel
// does not take every product or the weights differ in group size or the
// outputs in dtype.
func (d *Device) multiCallInt8(outs []*engine.Tensor, ws []engine.Int8Weight, x *engine.Tensor) (c qmatmulCall, ok bool, err error) {
	if len(ws) == 0 || len(ws) > gemvMaxWeights || len(outs) != len(ws) {
		return c, false, nil
	}
	c = qmatmulCall{x: x, ws: ws, outs: outs}
	for i, w := range ws {
		dims, err := engine.CheckLinearInt8(d.own, outs[i], x, w)
		if err != nil {
			return c, false, err // the shared check's words, as every backend's
		}
		if !d.qmatmulTakes(dims) || w.Group != ws[0].Group || outs[i].DType() != outs[0].DType() {
			return c, false, nil
		}
		c.dims = append(c.dims, dims)
	}
	return c, true, nil
}

// LinearMultiInt8 runs up to four int8 decode products of one x in one
// qmatmul.comp dispatch when each would take the kernel alone, the weights
// share a group size and the outputs a dtype; see engine.Int8MultiLinear.
func (d *Device) LinearMultiInt8(outs []*engine.Tensor, ws []engine.Int8Weight, x *engine.Tensor) (bool, error) {
	c, ok, err := d.multiCallInt8(outs, ws, x)
	if !ok || err != nil {
		return err != nil, err
	}
	c.name = fmt.Sprintf("qmatmul multi %d weights M%d K%d", len(ws), c.dims[0].M, c.dims[0].K)
	return true, d.qmatmul(c)
}

// swigluCallInt8 checks act = silu(x wGate^T) * (x wUp^T) and returns its qmatmul dispatch, ok false (and err nil) where the kernel
// does not take the products or the weights differ in group size.
func (d *Device) swigluCallInt8(act, x *engine.Tensor, wGate, wUp engine.Int8Weight) (qmatmulCall, bool, error) {
	dg, err := engine.CheckLinearInt8(d.own, act, x, wGate)
	if err != nil {
		return qmatmulCall{}, false, err
	}
	du, err := engine.CheckLinearInt8(d.own, act, x, wUp)
	if err != nil {
		return qmatmulCall{}, false, err
	}
	if !d.qmatmulTakes(dg) || wGate.Group != wUp.Group {
		return qmatmulCall{}, false, nil
	}
	return qmatmulCall{
		dims: []engine.Int8Dims{dg, du}, x: x, ws: []engine.Int8Weight{wGate, wUp}, outs: []*engine.Tensor{act},
		swiglu: true, name: fmt.Sprintf("qmatmul swiglu M%d N%d K%d", dg.M, dg.N, dg.K),
	}, true, nil
}

// LinearSwiGLUInt8 runs a decode step's int8 gate and up products and the
// SwiGLU in one qmatmul.comp dispatch (the gate and up rows of a column
// read together, the products kept in f32 up to the activation); see
// engine.Int8MLPFuser.
func (d *Device) LinearSwiGLUInt8(act, x *engine.Tensor, wGate, wUp engine.Int8Weight) (bool, error) {
	c, ok, err := d.swigluCallInt8(act, x, wGate, wUp)
	if !ok || err != nil {
		return err != nil, err
	}
	return true, d.qmatmul(c)
}

// NormLinearMultiInt8 runs up to four int8 decode products of
// RMSNorm(x, normW) in one qmatmul.comp dispatch with NORM (each
// workgroup recomputes its rows' sums of squares from x): the norm costs
// no dispatch of its own. It declines, for the engine's composition,
// whatever LinearMultiInt8 declines; see engine.Int8NormLinear.
func (d *Device) NormLinearMultiInt8(outs []*engine.Tensor, ws []engine.Int8Weight, x, normW *engine.Tensor, eps float32) (bool, error) {
	const op = "norm linear multi int8"
	if _, err := engine.CheckNormLinear(d.own, op, x, normW); err != nil {
		return true, err
	}
	c, ok, err := d.multiCallInt8(outs, ws, x)
	if !ok || err != nil {
		return err != nil, err
	}
	c.norm, c.eps = normW, eps
	c.name = fmt.Sprintf("qmatmul norm multi %d weights M%d K%d", len(ws), c.dims[0].M, c.dims[0].K)
	return true, d.qmatmul(c)
}

// NormLinearSwiGLUInt8 runs a decode step's post-attention norm, int8 gate
// and up products and SwiGLU in one qmatmul.comp dispatch with NORM and
// SWIGLU: no scratch, h and the products kept in f32 up to the
// activation. It declines what LinearSwiGLUInt8 declines; see
// engine.Int8NormLinear.
func (d *Device) NormLinearSwiGLUInt8(act, x, normW *engine.Tensor, wGate, wUp engine.Int8Weight, eps float32) (bool, error) {
	const op = "norm linear swiglu int8"
	if _, err := engine.CheckNormLinear(d.own, op, x, normW); err != nil {
		return true, err
	}
	if act == nil {
		return false, nil // the composition reports the missing operand
	}
	c, ok, err := d.swigluCallInt8(act, x, wGate, wUp)
	if !ok || err != nil {
		return err != nil, err
	}
	c.norm, c.eps = normW, eps
	c.name = fmt.Sprintf("qmatmul norm swiglu M%d N%d K%d", c.dims[0].M, c.dims[0].N, c.dims[0].K)
	return true, d.qmatmul(c)
}
