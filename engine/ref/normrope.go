package ref

// RMSNormRoPE is the fused per-head norm and rotation of the attention
// inputs, composed from RMSNorm, SwapAxes12 and RoPE: x [B, L, H, D] is
// normed per row (out_pre = x rstd w), transposed to [B, H, L, D] and
// rotated by pos (L positions, or B*L per sequence). rstd is [B, L, H].
func RMSNormRoPE(x, w []float64, b, l, h, d int, pos []int, eps, theta float64) (out, rstd []float64) {
	y, rstd := RMSNorm(x, w, b*l*h, d, eps)
	return RoPE(SwapAxes12(y, b, l, h, d), b, h, l, d, pos, theta, false), rstd
}

// RMSNormRoPEBackward returns the gradients dX [B, L, H, D] and dW [D] of
// sum(RMSNormRoPE(x, w) * dOut), dOut [B, H, L, D]: the inverse rotation of
// dOut, transposed back, through RMSNormBackward.
func RMSNormRoPEBackward(dOut, x, w []float64, b, l, h, d int, pos []int, eps, theta float64) (dX, dW []float64) {
	g := SwapAxes12(RoPE(dOut, b, h, l, d, pos, theta, true), b, h, l, d)
	return RMSNormBackward(g, x, w, b*l*h, d, eps)
}
