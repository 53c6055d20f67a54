package plot

import (
	"math"
	"os"
	"path/filepath"
	"testing"
)

func TestRenderBars(t *testing.T) {
	c := BarChart{Title: "MAD", YLabel: "accuracy", Series: []string{"softmax", "parallax"},
		Groups: []string{"recall", "noisy", "copy", "avg"},
		Values: [][]float64{{0.803, 0.951}, {0.861, 0.937}, {0.95, 0.988}, {0.672, math.NaN()}},
		YMin:   0, YMax: 1, ValueLabels: true}
	img := RenderBars(800, 400, c)
	count := func(x0, x1 int, col [3]uint8) int {
		n := 0
		for y := 0; y < 400; y++ {
			for x := x0; x < x1; x++ {
				p := img.RGBAAt(x, y)
				if [3]uint8{p.R, p.G, p.B} == col {
					n++
				}
			}
		}
		return n
	}
	blue := [3]uint8{Palette[0].R, Palette[0].G, Palette[0].B}
	red := [3]uint8{Palette[1].R, Palette[1].G, Palette[1].B}
	// The first group has both bars; the taller (parallax, red) bar has
	// more pixels. The last group has no red bar (NaN), only the legend's
	// square elsewhere.
	if b, r := count(100, 260, blue), count(100, 260, red); b < 500 || r < b {
		t.Errorf("first group: %d blue and %d red pixels", b, r)
	}
	if r := count(650, 800, red); r > 0 {
		t.Errorf("a NaN value drew %d red pixels", r)
	}
	if dir := os.Getenv("PLOT_OUT"); dir != "" {
		if err := WriteBarsPNG(filepath.Join(dir, "bars.png"), 800, 400, c); err != nil {
			t.Fatal(err)
		}
	}
	// Degenerate inputs do not panic.
	RenderBars(50, 50, BarChart{})
	RenderBars(400, 300, BarChart{Groups: []string{"a"}, Values: [][]float64{{math.NaN()}}})
}
