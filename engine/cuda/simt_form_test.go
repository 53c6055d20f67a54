//go:build cgo

package cuda

import "testing"

func TestSimtForm(t *testing.T) {
	cases := []struct {
		small   bool
		D       int
		f32rows bool
		want    string
	}{
		{false, 8, true, ""},
		{true, 8, true, "_small_v4"},
		{true, 16, true, "_small_v4"},
		{true, 12, true, "_small_v4"},
		{true, 8, false, "_small"}, // bf16 or unaligned rows
		{true, 6, true, "_small"},  // D % 4 != 0
		{true, 17, true, ""},       // past SMALLD: the broadcast kernels
		{true, 32, true, ""},
	}
	for _, c := range cases {
		if got := simtForm(c.small, c.D, c.f32rows); got != c.want {
			t.Errorf("simtForm(%v, %d, %v) = %q, want %q", c.small, c.D, c.f32rows, got, c.want)
		}
	}
}
