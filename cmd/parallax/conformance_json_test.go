package main

import (
	"encoding/json"
	"math"
	"testing"
)

// TestJSONFloat checks that the conformance report can carry a failed
// case's infinite or NaN error.
func TestJSONFloat(t *testing.T) {
	for _, tc := range []struct {
		in   float64
		want string
	}{
		{1.5e-3, `0.0015`},
		{0, `0`},
		{math.Inf(1), `"+Inf"`},
		{math.Inf(-1), `"-Inf"`},
		{math.NaN(), `"NaN"`},
	} {
		got, err := json.Marshal(jsonFloat(tc.in))
		if err != nil || string(got) != tc.want {
			t.Errorf("jsonFloat(%v) = %s, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}
