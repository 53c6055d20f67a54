//go:build cgo

package cuda

import "testing"

// normRoPEUnits: units of several heads only while about 2^17 lanes
// remain, a few more heads where that makes the grid one resident wave,
// one head a unit for decoding, a forced count capped at the heads, and
// the grid capped by maxBlocks.
func TestNormRoPEUnits(t *testing.T) {
	for _, c := range []struct {
		name                                string
		b, l, h, lpr, maxBlocks, res, force int
		hpu, blocks                         int
	}{
		{"gpt2 training, resident unknown", 16, 512, 12, 4, 1 << 20, 0, 0, 3, 512},
		{"gpt2 training, one wave of 396", 16, 512, 12, 4, 1 << 20, 396, 0, 4, 384},
		{"gpt2 training, 512 resident", 16, 512, 12, 4, 1 << 20, 512, 0, 3, 512},
		{"forced 4", 16, 512, 12, 4, 1 << 20, 0, 4, 4, 384},
		{"forced 3 over one wave", 16, 512, 12, 4, 1 << 20, 396, 3, 3, 512},
		{"forced past the heads", 16, 512, 12, 4, 1 << 20, 0, 40, 12, 128},
		{"backward cap", 16, 512, 12, 4, 528, 0, 0, 3, 512},
		{"capped grid", 16, 512, 12, 4, 100, 0, 0, 3, 100},
		{"decode", 1, 1, 16, 8, 1 << 20, 396, 0, 1, 1},
		{"13 heads, two a unit", 8, 640, 13, 4, 528, 0, 0, 2, 528},
		{"13 heads, four a unit for one wave", 8, 640, 13, 4, 528, 396, 0, 4, 320},
		{"no wave within twice the heads", 16, 512, 12, 4, 1 << 20, 100, 0, 3, 512},
		{"D 128, long", 8, 2048, 16, 8, 1 << 20, 396, 0, 16, 512},
	} {
		hpu, g := normRoPEUnits(c.b, c.l, c.h, c.lpr, c.maxBlocks, c.res, c.force)
		if hpu != c.hpu || g[0] != c.blocks || g[1] != 1 || g[2] != 1 {
			t.Errorf("%s: %d heads a unit, grid %v; want %d, [%d 1 1]", c.name, hpu, g, c.hpu, c.blocks)
		}
	}
}
