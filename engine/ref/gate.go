package ref

import "math"

// HeadGate is out[n, h, :] = sigmoid(z[n, h]) x[n, h, :] for x [rows*h, d]
// laid out row-major as [rows, h, d] and z [rows, h].
func HeadGate(x, z []float64, d int) []float64 {
	out := make([]float64, len(x))
	for i, zi := range z {
		s := 1 / (1 + math.Exp(-zi))
		for j := i * d; j < (i+1)*d; j++ {
			out[j] = s * x[j]
		}
	}
	return out
}

// HeadGateBackward returns dX = sigmoid(z) dOut and
// dZ = sigmoid(z)(1 - sigmoid(z)) sum_d dOut x.
func HeadGateBackward(dOut, x, z []float64, d int) (dx, dz []float64) {
	dx = make([]float64, len(x))
	dz = make([]float64, len(z))
	for i, zi := range z {
		s := 1 / (1 + math.Exp(-zi))
		var dot float64
		for j := i * d; j < (i+1)*d; j++ {
			dot += dOut[j] * x[j]
			dx[j] = s * dOut[j]
		}
		dz[i] = s * (1 - s) * dot
	}
	return dx, dz
}
