//go:build cgo

package cuda

import (
	"strings"
	"testing"
)

// Options.kernels (what `parallax devices` prints) says which kernels
// prepare a decode step's attention inputs.
func TestKernelsDecodeInputs(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{}, "then decode_prep"},
		{Options{FusedPrep: true}, "decode_prep in the same launch"},
	} {
		if got := c.o.kernels(true, true)["decode inputs"]; !strings.Contains(got, c.want) {
			t.Errorf("%+v: decode inputs %q, want it to say %q", c.o, got, c.want)
		}
	}
}
