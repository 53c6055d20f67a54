package ref

import "testing"

// TestLinearInt8 checks the reference on a hand-computed case: W [2, 3]
// in groups of 2 (the last group partial), x [1, 3].
func TestLinearInt8(t *testing.T) {
	q := []float64{1, -2, 3, 127, 0, -127}
	s := []float64{0.5, 2, 0.25, 1} // row 0: groups {0,1} 0.5, {2} 2; row 1: 0.25, 1
	w := DequantInt8(q, s, 2, 3, 2)
	for i, want := range []float64{0.5, -1, 6, 31.75, 0, -127} {
		if w[i] != want {
			t.Fatalf("DequantInt8 = %v, element %d want %v", w, i, want)
		}
	}
	got := LinearInt8([]float64{1, 2, 3}, q, s, 1, 2, 3, 2)
	// row 0: 0.5 - 2 + 18 = 16.5; row 1: 31.75 + 0 - 381 = -349.25
	if got[0] != 16.5 || got[1] != -349.25 {
		t.Errorf("LinearInt8 = %v, want [16.5 -349.25]", got)
	}
}
