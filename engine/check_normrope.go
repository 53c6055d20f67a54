package engine

// CheckRMSNormRoPE validates RMSNormRoPE (NormRoPE) and returns
// (B, L, H, D): x is a floating [B, L, H, D] with D even, w a floating
// [D], out a floating [B, H, L, D], rstd nil or F32 [B, L, H], pos I32 [L]
// or [B, L]. Valid operands are then passed to own (nil: no device).
func CheckRMSNormRoPE(own Owner, out, rstd, x, w, pos *Tensor) (b, l, h, d int, err error) {
	const op = "rmsnorm rope"
	if b, l, h, d, err = checkNormRoPE(op, "out", out, rstd, x, w, pos); err != nil {
		return
	}
	err = own.check(op, out, rstd, x, w, pos)
	return
}

// CheckRMSNormRoPEBackward validates RMSNormRoPEBackward and returns
// (B, L, H, D): x, w and pos as for RMSNormRoPE, dOut a floating
// [B, H, L, D], dX a floating [B, L, H, D], dW a floating [D] and rstd
// (required) F32 [B, L, H]. Valid operands are then passed to own.
func CheckRMSNormRoPEBackward(own Owner, dX, dW, dOut, x, w, rstd, pos *Tensor) (b, l, h, d int, err error) {
	const op = "rmsnorm rope backward"
	if rstd == nil {
		return 0, 0, 0, 0, argErr(op, "rstd", "missing (the forward's saved F32 rstd)")
	}
	if b, l, h, d, err = checkNormRoPE(op, "dOut", dOut, rstd, x, w, pos); err != nil {
		return
	}
	if err = needFloats(op, []string{"dX", "dW"}, dX, dW); err != nil {
		return
	}
	if err = needShape(op, "dX", dX, x.shape); err != nil {
		return
	}
	if err = needShape(op, "dW", dW, w.shape); err != nil {
		return
	}
	err = own.check(op, dX, dW, dOut, x, w, rstd, pos)
	return
}

// checkNormRoPE checks the operands the forward and the backward share;
// y (out or dOut) is the [B, H, L, D] one.
func checkNormRoPE(op, yName string, y, rstd, x, w, pos *Tensor) (b, l, h, d int, err error) {
	if err = need(op, "x", x, 4, "[B,L,H,D]"); err != nil {
		return
	}
	if err = needFloats(op, []string{yName, "x", "w"}, y, x, w); err != nil {
		return
	}
	b, l, h, d = x.Dim(0), x.Dim(1), x.Dim(2), x.Dim(3)
	if d%2 != 0 {
		return 0, 0, 0, 0, argErr(op, "x", "head dimension %d is odd", d)
	}
	if err = needShape(op, "w", w, Shape{d}); err != nil {
		return
	}
	if err = needShape(op, yName, y, Shape{b, h, l, d}); err != nil {
		return
	}
	if rstd != nil {
		if err = needDType(op, "rstd", rstd, F32); err != nil {
			return
		}
		if err = needShape(op, "rstd", rstd, Shape{b, l, h}); err != nil {
			return
		}
	}
	want := Shape{l}
	if pos != nil && pos.Rank() == 2 {
		want = Shape{b, l} // one position vector per sequence
	}
	err = needOf(op, "pos", pos, I32, want)
	return
}
