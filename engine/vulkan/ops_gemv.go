package vulkan

import (
	"fmt"
	"strings"

	"github.com/parallax-engine/parallax/engine"
)

// Matrix-vector products for decoding (shaders/gemv.comp): a decode step's
// products are 1 to 8 rows of x against a weight W [N, K] (out = x W^T),
// which the tiled matmul kernels run with few workgroups and mostly empty
// tiles. The GEMV kernel streams each weight row once with 16-byte loads,
// a subgroup per output column, and serves every activation row from the
// same load. It also takes up to four weights of one x in one dispatch
// (engine.MultiLinear: a layer's q, k, v and r projections) and a SwiGLU
// MLP's gate and up products with the activation (engine.MLPFuser), and
// either with the RMSNorm before it folded in (engine.NormLinear): each
// workgroup recomputes its rows' sums of squares and scales the weight
// pieces by the norm weight as they arrive, so the normed rows are never
// stored.

// gemvMaxRows is the most activation rows the GEMV kernel takes.
const gemvMaxRows = 8

// gemvMaxWeights is the most weights of one LinearMulti dispatch (the
// kernel's bindings).
const gemvMaxWeights = 4

// gemvShape returns the GEMV kernel's workgroup size and output columns
// per workgroup on this device (a column per subgroup of the smallest size
// the device may give a pipeline), or ok false where the kernel cannot run:
// no subgroup arithmetic in compute shaders, subgroups narrower than the
// 8 rows a subgroup stores, or Options.NoGEMV.
func (d *Device) gemvShape() (wg, cpw int, ok bool) {
	if d.opts.NoGEMV || !d.hasSubgroupOps(subgroupBasic|subgroupArithmetic) {
		return 0, 0, false
	}
	x := &d.pd.x
	minSG := int(x.subgroupSize)
	if x.minSubgroupSize != 0 {
		minSG = min(minSG, int(x.minSubgroupSize))
	}
	if minSG < gemvMaxRows {
		return 0, 0, false
	}
	wg = d.flexWG()
	return wg, max(1, wg/minSG), true
}

// gemvRows is the number of activation rows of the product out = x w^T
// that the GEMV kernel takes, 0 where it does not: as the CUDA backend's
// rule, 1 to gemvMaxRows rows (over a batch sharing w), w transposed, x
// not, and out in x's dtype or f32; any floating x and w (they are widened
// to f32 exactly).
func (d *Device) gemvRows(dims engine.MatMulDims, o engine.MatMulOpts, out, x *engine.Tensor) int {
	rows := dims.M * dims.Batch
	switch {
	case o.TransA, !o.TransB, dims.Batch > 1 && !dims.SharedB, rows == 0, rows > gemvMaxRows, dims.N == 0, dims.K == 0,
		out.DType() != x.DType() && out.DType() != engine.F32:
		return 0
	}
	if _, _, ok := d.gemvShape(); !ok {
		return 0
	}
	// Element indices are 32-bit in the kernel.
	if int64(dims.N)*int64(dims.K) >= 1<<32 || int64(rows)*int64(max(dims.N, dims.K)) >= 1<<32 {
		return 0
	}
	return rows
}

// gemvOperand is a matrix the GEMV kernel reads or writes: a binding and
// the element offset of the matrix in it (0 for a whole tensor).
type gemvOperand struct {
	a   arg
	off int
}

// gemvCall is one dispatch of the GEMV kernel: outs[i] (+)= x ws[i]^T, or
// with swiglu outs[0] = silu(x ws[0]^T) * (x ws[1]^T); with norm, x is
// replaced by RMSNorm(x, norm, eps) (never stored).
type gemvCall struct {
	rows, k    int
	x          gemvOperand
	ws, outs   []gemvOperand
	ns         []int // columns of each weight
	accumulate bool
	swiglu     bool
	norm       *engine.Tensor // the norm weight [K], or nil
	eps        float32
	name       string // for a profile
	bytes      float64
}

// gemv launches c. The 16-byte loads need K % 8 == 0 and every offset a
// multiple of 8 elements; otherwise the kernel loads element by element.
func (d *Device) gemv(c gemvCall) error {
	wg, cpw, ok := d.gemvShape()
	if !ok {
		return fmt.Errorf("vulkan: gemv: %s has no kernel for it (subgroup arithmetic, 8-wide subgroups)", d.pd.name)
	}
	nw := len(c.ws)
	if nw == 0 || nw > gemvMaxWeights || (c.swiglu && (nw != 2 || len(c.outs) != 1)) || (!c.swiglu && len(c.outs) != nw) {
		return fmt.Errorf("vulkan: gemv: %d weights for %d outputs", nw, len(c.outs))
	}
	if c.norm != nil && c.accumulate {
		return fmt.Errorf("vulkan: gemv: a norm with accumulation")
	}
	vec := c.k%8 == 0 && c.x.off%8 == 0
	for _, w := range c.ws {
		vec = vec && w.off%8 == 0
	}
	var n, first, woff, ooff [4]uint32
	groups := 0
	cols := 1
	if !c.swiglu {
		cols = nw
	}
	for i := range cols {
		n[i] = uint32(c.ns[i])
		first[i] = uint32(groups)
		groups += (c.ns[i] + cpw - 1) / cpw
	}
	for i := cols; i < 4; i++ {
		first[i] = uint32(groups)
	}
	for i, w := range c.ws {
		woff[i] = uint32(w.off)
	}
	for i, o := range c.outs {
		ooff[i] = uint32(o.off)
	}
	if groups == 0 {
		return nil
	}
	pc := push(uint32(c.k), c.accumulate, uint32(c.x.off), uint32(groups),
		n[0], n[1], n[2], n[3], first[0], first[1], first[2], first[3],
		woff[0], woff[1], woff[2], woff[3], ooff[0], ooff[1], ooff[2], ooff[3], c.eps)
	// Always ten bindings (the norm weight's is statically used whatever
	// NORM is): one pipeline layout.
	args := make([]arg, 10)
	args[9] = d.none()
	if c.norm != nil {
		args[9] = in(c.norm)
	}
	args[0] = c.x.a
	for i := range 4 {
		if i < nw {
			args[1+i] = c.ws[i].a
		} else {
			// Unused: the dummy buffer, typed as weight 0 so the kernel's
			// per-binding dtype branches fold to one.
			args[1+i] = arg{r: d.dummy, size: d.dummy.size, dt: c.ws[0].a.dt}
		}
		if i < len(c.outs) {
			args[5+i] = c.outs[i].a
		} else {
			args[5+i] = arg{r: d.dummy, size: d.dummy.size, dt: c.outs[0].a.dt}
		}
	}
	sp := spec{1: uint32(c.rows), 2: uint32(nw), 3: flag(c.swiglu), 4: flag(vec), 5: uint32(cpw), 6: flag(c.norm != nil)}
	if d.prof.on {
		flops := 0.0
		for _, nn := range c.ns {
			flops += 2 * float64(c.rows) * float64(nn) * float64(c.k)
		}
		if c.swiglu {
			flops *= 2
		}
		d.profileAs(c.name, flops, c.bytes)
	}
	return d.launch("gemv", wg, sp, pc, d.groups1(groups), args...)
}

// matmulGEMV runs a MatMul that gemvRows takes.
func (d *Device) matmulGEMV(o, a, b *engine.Tensor, opts engine.MatMulOpts, dims engine.MatMulDims, rows int) error {
	outBytes := float64(rows * dims.N * o.DType().Size())
	if opts.Accumulate {
		outBytes *= 2
	}
	return d.gemv(gemvCall{
		rows: rows, k: dims.K,
		x:    gemvOperand{a: in(a)},
		ws:   []gemvOperand{{a: in(b)}},
		outs: []gemvOperand{{a: out(o)}},
		ns:   []int{dims.N}, accumulate: opts.Accumulate,
		name:  engine.GemmName(a.DType(), b.DType(), o.DType(), rows, dims.N, dims.K, 1, false, true) + " gemv",
		bytes: float64(rows*dims.K*a.DType().Size()+dims.N*dims.K*b.DType().Size()) + outBytes,
	})
}

// LinearMulti runs up to four decode products of one x in one dispatch
// when each would take the GEMV kernel alone and the weights share a
// dtype, as do the outputs; see engine.MultiLinear.
func (d *Device) LinearMulti(outs, ws []*engine.Tensor, x *engine.Tensor) (bool, error) {
	c, ok, err := d.multiCall("linear multi", outs, ws, x)
	if !ok || err != nil {
		return err != nil, err
	}
	c.name = fmt.Sprintf("gemv multi %s %d weights M%d K%d", ws[0].DType(), len(ws), c.rows, c.k)
	return true, d.gemv(c)
}

// multiCall checks up to four products outs[i] = x ws[i]^T for op and
// returns their GEMV dispatch, ok false (and err nil) where the kernel does
// not take every product with the same rows, weight dtype and output
// dtype.
func (d *Device) multiCall(op string, outs, ws []*engine.Tensor, x *engine.Tensor) (c gemvCall, ok bool, err error) {
	if len(ws) == 0 || len(ws) > gemvMaxWeights || len(outs) != len(ws) {
		return c, false, nil
	}
	c = gemvCall{x: gemvOperand{a: in(x)}}
	bytes := 0
	for i, w := range ws {
		o := engine.MatMulOpts{TransB: true}
		dims, err := engine.CheckMatMul(outs[i], x, w, o)
		if err != nil {
			return c, false, err
		}
		if err := d.own(op, outs[i], x, w); err != nil {
			return c, false, err
		}
		r := d.gemvRows(dims, o, outs[i], x)
		if i == 0 {
			c.rows, c.k = r, dims.K
			bytes += r * dims.K * x.DType().Size()
		}
		if r == 0 || r != c.rows || outs[i].DType() != outs[0].DType() || w.DType() != ws[0].DType() {
			return c, false, nil
		}
		c.ws = append(c.ws, gemvOperand{a: in(w)})
		c.outs = append(c.outs, gemvOperand{a: out(outs[i])})
		c.ns = append(c.ns, dims.N)
		bytes += dims.N*dims.K*w.DType().Size() + r*dims.N*outs[i].DType().Size()
	}
	c.bytes = float64(bytes)
	return c, true, nil
}

// LinearSwiGLU runs a decode step's gate and up products and the SwiGLU
// in one dispatch when both products would take the GEMV kernel and the
// two weights share a dtype; see engine.MLPFuser.
func (d *Device) LinearSwiGLU(act, x, wGate, wUp *engine.Tensor) (bool, error) {
	c, ok, err := d.swigluCall("linear swiglu", act, x, wGate, wUp)
	if !ok || err != nil {
		return err != nil, err
	}
	return true, d.gemv(c)
}

// swigluCall checks act = silu(x wGate^T) * (x wUp^T) for op and returns
// its GEMV dispatch, ok false (and err nil) where the kernel does not take
// both products or the weights' dtypes differ.
func (d *Device) swigluCall(op string, act, x, wGate, wUp *engine.Tensor) (gemvCall, bool, error) {
	o := engine.MatMulOpts{TransB: true}
	dims, err := engine.CheckMatMul(act, x, wGate, o)
	if err != nil {
		return gemvCall{}, false, err
	}
	if _, err := engine.CheckMatMul(act, x, wUp, o); err != nil {
		return gemvCall{}, false, err
	}
	if err := d.own(op, act, x, wGate, wUp); err != nil {
		return gemvCall{}, false, err
	}
	rows := d.gemvRows(dims, o, act, x)
	if rows == 0 || wGate.DType() != wUp.DType() {
		return gemvCall{}, false, nil
	}
	return gemvCall{
		rows: rows, k: dims.K,
		x:    gemvOperand{a: in(x)},
		ws:   []gemvOperand{{a: in(wGate)}, {a: in(wUp)}},
		outs: []gemvOperand{{a: out(act)}},
		ns:   []int{dims.N}, swiglu: true,
		name: fmt.Sprintf("gemv swiglu %s M%d N%d K%d", wGate.DType(), rows, dims.N, dims.K),
		bytes: float64(rows*dims.K*x.DType().Size()+2*dims.N*dims.K*wGate.DType().Size()) +
			float64(rows*dims.N*act.DType().Size()),
	}, true, nil
}

var _ engine.NormLinear = (*Device)(nil)

// NormLinearMulti runs up to four decode products of RMSNorm(x, normW) in
// one GEMV dispatch (NORM: each workgroup recomputes its rows' sums of
// squares from x) where LinearMulti would take the products of the normed
// rows; see engine.NormLinear. As the CUDA backend it declines, for the
// engine's composition, whatever LinearMulti declines.
func (d *Device) NormLinearMulti(outs, ws []*engine.Tensor, x, normW *engine.Tensor, eps float32) (bool, error) {
	const op = "norm linear multi"
	if _, err := engine.CheckNormLinear(d.own, op, x, normW); err != nil {
		return true, err
	}
	c, ok, err := d.multiCall(op, outs, ws, x)
	if !ok || err != nil {
		return err != nil, err
	}
	c.norm, c.eps = normW, eps
	c.bytes += float64(normW.Bytes())
	c.name = fmt.Sprintf("gemv norm multi %s %d weights M%d K%d", ws[0].DType(), len(ws), c.rows, c.k)
	return true, d.gemv(c)
}

// NormLinearSwiGLU runs a decode step's post-attention norm, gate and up
// products and SwiGLU in one GEMV dispatch where LinearSwiGLU would take
// the normed rows; see engine.NormLinear.
func (d *Device) NormLinearSwiGLU(act, x, normW, wGate, wUp *engine.Tensor, eps float32) (bool, error) {
	const op = "norm linear swiglu"
	if _, err := engine.CheckNormLinear(d.own, op, x, normW); err != nil {
		return true, err
	}
	if act == nil || wGate == nil || wUp == nil {
		return false, nil // the composition reports the missing operand
	}
	c, ok, err := d.swigluCall(op, act, x, wGate, wUp)
	if !ok || err != nil {
		return err != nil, err
	}
	c.norm, c.eps = normW, eps
	c.bytes += float64(normW.Bytes())
	c.name = "gemv norm" + strings.TrimPrefix(c.name, "gemv")
	return true, d.gemv(c)
}
