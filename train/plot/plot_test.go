package plot

import (
	"bytes"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"testing"
)

func TestRenderCurves(t *testing.T) {
	var x, y, vx, vy, lr []float64
	for i := range 300 {
		x = append(x, float64(i))
		y = append(y, 8*math.Exp(-float64(i)/60)+2+0.2*math.Sin(float64(i)))
		lr = append(lr, 0.02*math.Min(1, float64(i+1)/15))
		if i%50 == 0 {
			vx = append(vx, float64(i))
			vy = append(vy, 8*math.Exp(-float64(i)/60)+2.3)
		}
	}
	charts := []Chart{
		{Title: "Loss", XLabel: "step", YLabel: "loss", Series: []Series{
			{Name: "train", X: x, Y: y}, {Name: "validation", X: vx, Y: vy, Dots: true}}},
		{Title: "Learning rate", XLabel: "step", YLabel: "lr (Muon)", Series: []Series{{Name: "lr", X: x, Y: lr}}},
	}
	var buf bytes.Buffer
	if err := Encode(&buf, 900, 900, charts...); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != 900 || b.Dy() != 900 {
		t.Fatalf("size %v", b)
	}
	// The train curve's colour appears in the top panel, the lr curve's in the bottom.
	count := func(y0, y1 int, c [3]uint32) int {
		n := 0
		for yy := y0; yy < y1; yy++ {
			for xx := 0; xx < 900; xx++ {
				r, g, b, _ := img.At(xx, yy).RGBA()
				if [3]uint32{r >> 8, g >> 8, b >> 8} == c {
					n++
				}
			}
		}
		return n
	}
	if n := count(0, 450, [3]uint32{31, 119, 180}); n < 500 {
		t.Errorf("train curve: %d blue pixels in the top panel", n)
	}
	if n := count(0, 450, [3]uint32{214, 39, 40}); n < 50 {
		t.Errorf("validation curve: %d red pixels in the top panel", n)
	}
	if n := count(450, 900, [3]uint32{31, 119, 180}); n < 500 {
		t.Errorf("lr curve: %d blue pixels in the bottom panel", n)
	}
	if dir := os.Getenv("PLOT_OUT"); dir != "" {
		if err := WritePNG(filepath.Join(dir, "curves.png"), 900, 900, charts...); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTicks(t *testing.T) {
	got := ticks(0, 1000, 8)
	if len(got) < 5 || got[0] != 0 || got[len(got)-1] != 1000 {
		t.Errorf("ticks(0, 1000) = %v", got)
	}
	if l := label(0.25, 0, 1); l != "0.25" && l != "0.2" {
		t.Errorf("label(0.25) = %q", l)
	}
	if l := label(2e-4, 0, 3e-4); l != "0.0002" {
		t.Errorf("label(2e-4) = %q", l)
	}
	for r := range glyphs {
		if r < ' ' || r > '~' {
			t.Errorf("glyph %q is not printable ASCII", r)
		}
	}
	if len(glyphs) != 95 {
		t.Errorf("%d glyphs, want 95", len(glyphs))
	}
}

// Charts with nothing (or nothing finite) to draw still render: an image of
// the requested size on a white background, the title's ink where there is
// room for it, and no curve where no point is finite.
func TestEmptyAndDegenerate(t *testing.T) {
	blue := [3]uint8{31, 119, 180} // the first series' colour
	for _, tc := range []struct {
		name   string
		w, h   int
		charts []Chart
		ink    bool // some non-white pixel
		curve  bool // the first series' colour covers more than the legend's swatch
	}{
		{name: "no charts", w: 300, h: 200},
		{name: "title only", w: 300, h: 200, charts: []Chart{{Title: "empty"}}, ink: true},
		{name: "only NaN", w: 300, h: 200, charts: []Chart{{Series: []Series{{X: []float64{1}, Y: []float64{math.NaN()}}}}}, ink: true},
		{name: "constant on a log axis", w: 300, h: 200, ink: true, curve: true,
			charts: []Chart{{LogY: true, Series: []Series{{X: []float64{1, 2}, Y: []float64{3, 3}}}}}},
		{name: "tiny", w: 10, h: 10, charts: []Chart{{Title: "tiny"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := Render(tc.w, tc.h, tc.charts...)
			if b := img.Bounds(); b.Dx() != tc.w || b.Dy() != tc.h {
				t.Fatalf("size %v, want %dx%d", b, tc.w, tc.h)
			}
			if c := img.RGBAAt(0, 0); c.R != 255 || c.G != 255 || c.B != 255 || c.A != 255 {
				t.Errorf("corner pixel %v, want opaque white", c)
			}
			var ink bool
			blues := 0
			for i := 0; i < len(img.Pix); i += 4 {
				p := img.Pix[i : i+4]
				if p[3] != 255 {
					t.Fatalf("pixel %d is not opaque: %v", i/4, p)
				}
				ink = ink || p[0] != 255 || p[1] != 255 || p[2] != 255
				if [3]uint8{p[0], p[1], p[2]} == blue {
					blues++
				}
			}
			const swatch = 150 // the legend's 25 x 3 line, generously
			curve := blues > swatch
			if ink != tc.ink {
				t.Errorf("ink drawn: %v, want %v", ink, tc.ink)
			}
			if curve != tc.curve {
				t.Errorf("curve drawn: %v (%d pixels of its colour), want %v", curve, blues, tc.curve)
			}
		})
	}
}
