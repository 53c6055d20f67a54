package cpu

// TEMPORARY: removed as the ops land.

import (
	"errors"

	"github.com/parallax-engine/parallax/engine"
)

var errTODOOps = errors.New("not yet implemented")

type T = engine.Tensor

func (d *Device) MatMul(out, a, b *T, o engine.MatMulOpts) error             { return errTODOOps }
func (d *Device) Embedding(out, table, ids *T) error                         { return errTODOOps }
func (d *Device) EmbeddingBackward(dTable, ids, dOut *T) error               { return errTODOOps }
func (d *Device) RMSNorm(out, rstd, x, w *T, eps float32) error              { return errTODOOps }
func (d *Device) RMSNormBackward(dX, dW, dOut, x, w, rstd *T) error          { return errTODOOps }
func (d *Device) RoPE(out, x, pos *T, theta float32) error                   { return errTODOOps }
func (d *Device) RoPEBackward(dX, dOut, pos *T, theta float32) error         { return errTODOOps }
func (d *Device) SwiGLU(out, gate, up *T) error                              { return errTODOOps }
func (d *Device) SwiGLUBackward(dGate, dUp, dOut, gate, up *T) error         { return errTODOOps }
func (d *Device) AddScaled(out, a, b *T, alpha, beta float32) error          { return errTODOOps }
func (d *Device) Fill(t *T, value float32) error                             { return errTODOOps }
func (d *Device) Cast(dst, src *T) error                                     { return errTODOOps }
func (d *Device) SwapAxes12(dst, src *T) error                               { return errTODOOps }
func (d *Device) KVAppend(cache, x *T, start int) error                      { return errTODOOps }
func (d *Device) SumSquares(out, x *T, accumulate bool) error                { return errTODOOps }
func (d *Device) AdamW(p, g, m, v *T, o engine.AdamWOpts) error              { return errTODOOps }
func (d *Device) MuonMomentum(u, m, g *T, beta float32, nesterov bool) error { return errTODOOps }
func (d *Device) FrobeniusNormalize(out, x *T, eps float32) error            { return errTODOOps }
func (d *Device) MuonApply(p, o *T, lr, wd, scale float32) error             { return errTODOOps }
func (d *Device) CrossEntropy(loss, dLogits, logits, targets *T, o engine.CrossEntropyOpts) error {
	return errTODOOps
}
