//go:build cgo

package cuda

import "github.com/parallax-engine/parallax/engine"

// LinearResidual computes y = r + x W^T in one cuBLASLt product with the
// addend C = r apart from the result D = y (beta 1; ltRunCD), where the
// operands take MatMul's direct path: x and W of one dtype, r and y of
// one dtype and shape, y of x's dtype or f32 (f32 inputs: f32 throughout).
// It declines the rows the matrix-vector kernels take (a decode step's)
// and overlapping r and y, which the copy and an accumulating MatMul
// serve; see engine.ResidualLinear.
func (d *Device) LinearResidual(y, r, x, w *engine.Tensor) (bool, error) {
	o := engine.MatMulOpts{TransB: true, Accumulate: true}
	dims, err := engine.CheckMatMul(y, x, w, o)
	if err != nil {
		return false, err
	}
	if err := d.own("linear residual", y, r, x, w); err != nil {
		return false, err
	}
	xt, wt, yt := x.DType(), w.DType(), y.DType()
	direct := xt == wt && (xt == engine.F32 && yt == engine.F32 || xt != engine.F32 && (yt == xt || yt == engine.F32))
	if !direct || r.DType() != yt || !r.Shape().Equal(y.Shape()) || overlaps(r, y) ||
		dims.Batch == 0 || dims.M == 0 || dims.N == 0 || dims.K == 0 || gemvRows(dims, o, y, x, w) > 0 {
		return false, nil
	}
	return true, d.gemmCD(dims, o, ptr(x), ptr(w), ptr(r), ptr(y), xt, yt)
}

var (
	_ engine.ResidualLinear             = (*Device)(nil)
	_ engine.RMSNormBackwardAccumulator = (*Device)(nil)
)
