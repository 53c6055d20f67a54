package ref

// DequantInt8 returns the weight W [n, k] an int8 matrix q [n, k] with
// scales s [n, ceil(k/group)] stands for: W[i, j] = q[i, j] s[i, j/group],
// exactly in float64.
func DequantInt8(q, s []float64, n, k, group int) []float64 {
	ng := (k + group - 1) / group
	out := make([]float64, n*k)
	for i := range n {
		for j := range k {
			out[i*k+j] = q[i*k+j] * s[i*ng+j/group]
		}
	}
	return out
}

// LinearInt8 returns x W^T for x [m, k] and the dequantized int8 weight
// W [n, k] (DequantInt8): the plain dequantize-then-multiply of the op.
func LinearInt8(x, q, s []float64, m, n, k, group int) []float64 {
	return MatMul(x, DequantInt8(q, s, n, k, group), 1, m, n, k, false, true, false)
}
