// Package plot renders line charts (training curves) to PNG with nothing but
// the standard library: axes with "nice" ticks, labels in a built-in 5x7
// bitmap font, a legend, and several charts stacked in one image.
package plot

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"strconv"

	"github.com/parallax-engine/parallax/internal/atomicfile"
)

// Series is one line of a chart. Points with a NaN or infinite coordinate
// are skipped (the line is broken there).
type Series struct {
	Name  string
	X, Y  []float64
	Color color.RGBA // zero: taken from Palette by position
	Dots  bool       // mark every point (for sparse series such as validation loss)
}

// Chart is one panel: a title, axis labels and its series.
type Chart struct {
	Title, XLabel, YLabel string
	Series                []Series
	LogY                  bool // logarithmic y axis (non-positive values are skipped)
}

// Palette holds the default series colours.
var Palette = []color.RGBA{
	{31, 119, 180, 255},  // blue
	{214, 39, 40, 255},   // red
	{44, 160, 44, 255},   // green
	{255, 127, 14, 255},  // orange
	{148, 103, 189, 255}, // purple
	{140, 86, 75, 255},   // brown
	{23, 190, 207, 255},  // cyan
	{127, 127, 127, 255}, // grey
}

var (
	white = color.RGBA{255, 255, 255, 255}
	black = color.RGBA{0, 0, 0, 255}
	grid  = color.RGBA{225, 225, 225, 255}
)

// Render draws the charts stacked vertically into a width x height image.
func Render(width, height int, charts ...Chart) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	for i := range img.Pix {
		img.Pix[i] = 255
	}
	if len(charts) == 0 {
		return img
	}
	h := height / len(charts)
	for i, c := range charts {
		c.draw(img, image.Rect(0, i*h, width, (i+1)*h))
	}
	return img
}

// Encode writes the charts as a PNG.
func Encode(w io.Writer, width, height int, charts ...Chart) error {
	return png.Encode(w, Render(width, height, charts...))
}

// WritePNG writes the charts to path atomically (temporary file + rename).
func WritePNG(path string, width, height int, charts ...Chart) error {
	err := atomicfile.Write(path, func(w io.Writer) error {
		return Encode(w, width, height, charts...)
	})
	if err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return nil
}

// canvas clips drawing to a rectangle of the image.
type canvas struct {
	img  *image.RGBA
	clip image.Rectangle
}

func (c canvas) set(x, y int, col color.RGBA) {
	if image.Pt(x, y).In(c.clip) {
		c.img.SetRGBA(x, y, col)
	}
}

func (c canvas) text(s string, x, y, scale int, col color.RGBA, vertical bool) {
	drawText(func(px, py int) { c.set(px, py, col) }, s, x, y, scale, vertical)
}

// line draws a segment of the given width (Bresenham with a square brush).
func (c canvas) line(x0, y0, x1, y1, width int, col color.RGBA) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	lo, hi := -(width-1)/2, width/2
	for {
		for oy := lo; oy <= hi; oy++ {
			for ox := lo; ox <= hi; ox++ {
				c.set(x0+ox, y0+oy, col)
			}
		}
		if x0 == x1 && y0 == y1 {
			return
		}
		if e2 := 2 * e; e2 >= dy {
			e += dy
			x0 += sx
		} else {
			e += dx
			y0 += sy
		}
	}
}

func (c canvas) rect(r image.Rectangle, col color.RGBA) {
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			c.set(x, y, col)
		}
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func sign(x int) int {
	switch {
	case x > 0:
		return 1
	case x < 0:
		return -1
	}
	return 0
}

func (ch Chart) draw(img *image.RGBA, area image.Rectangle) {
	cv := canvas{img, area}
	const scale = 2
	th := glyphH * scale
	left := area.Min.X + 20 + th + 8*glyphW*scale // y label + tick labels
	top := area.Min.Y + 16 + th
	right := area.Max.X - 20
	bottom := area.Max.Y - 24 - 2*th
	if right-left < 20 || bottom-top < 20 {
		return
	}
	plotR := image.Rect(left, top, right, bottom)
	cv.text(ch.Title, (left+right-textWidth(ch.Title, scale))/2, area.Min.Y+8, scale, black, false)
	cv.text(ch.XLabel, (left+right-textWidth(ch.XLabel, scale))/2, bottom+th+16, scale, black, false)
	cv.text(ch.YLabel, area.Min.X+10, (top+bottom+textWidth(ch.YLabel, scale))/2, scale, black, true)

	ty := func(y float64) float64 {
		if ch.LogY {
			if y <= 0 {
				return math.NaN()
			}
			return math.Log10(y)
		}
		return y
	}
	x0, x1, y0, y1 := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, s := range ch.Series {
		for i := range min(len(s.X), len(s.Y)) {
			x, y := s.X[i], ty(s.Y[i])
			if finite(x) && finite(y) {
				x0, x1 = math.Min(x0, x), math.Max(x1, x)
				y0, y1 = math.Min(y0, y), math.Max(y1, y)
			}
		}
	}
	if x0 > x1 { // no data
		x0, x1, y0, y1 = 0, 1, 0, 1
	}
	x0, x1 = widen(x0, x1)
	y0, y1 = widen(y0, y1)
	pad := (y1 - y0) * 0.05
	y0, y1 = y0-pad, y1+pad

	px := func(x float64) int { return left + int(math.Round((x-x0)/(x1-x0)*float64(right-left))) }
	py := func(y float64) int { return bottom - int(math.Round((y-y0)/(y1-y0)*float64(bottom-top))) }

	// Grid and ticks.
	for _, t := range ticks(x0, x1, 8) {
		x := px(t)
		cv.line(x, top, x, bottom, 1, grid)
		cv.line(x, bottom, x, bottom+5, 1, black)
		l := label(t, x0, x1)
		cv.text(l, x-textWidth(l, scale)/2, bottom+9, scale, black, false)
	}
	var yt []float64
	if ch.LogY {
		yt = logTicks(y0, y1)
	} else {
		yt = ticks(y0, y1, 6)
	}
	for _, t := range yt {
		y := py(t)
		cv.line(left, y, right, y, 1, grid)
		cv.line(left-5, y, left, y, 1, black)
		v := t
		if ch.LogY {
			v = math.Pow(10, t)
		}
		l := label(v, y0, y1)
		if ch.LogY {
			l = strconv.FormatFloat(v, 'g', 3, 64)
		}
		cv.text(l, left-9-textWidth(l, scale), y-th/2, scale, black, false)
	}
	// Series, clipped to the plot area.
	inner := canvas{img, plotR.Inset(1).Intersect(area)}
	for si, s := range ch.Series {
		col := s.Color
		if col.A == 0 {
			col = Palette[si%len(Palette)]
		}
		var prev image.Point
		have := false
		for i := range min(len(s.X), len(s.Y)) {
			x, y := s.X[i], ty(s.Y[i])
			if !finite(x) || !finite(y) {
				have = false
				continue
			}
			p := image.Pt(px(x), py(y))
			if have {
				inner.line(prev.X, prev.Y, p.X, p.Y, 2, col)
			}
			if s.Dots { // may overlap the frame, so a point on the edge shows
				cv.rect(image.Rect(p.X-3, p.Y-3, p.X+4, p.Y+4).Intersect(plotR.Inset(-4)), col)
			}
			prev, have = p, true
		}
	}
	// Frame.
	cv.line(left, top, right, top, 1, black)
	cv.line(left, bottom, right, bottom, 1, black)
	cv.line(left, top, left, bottom, 1, black)
	cv.line(right, top, right, bottom, 1, black)
	// Legend (top right, inside the plot).
	if len(ch.Series) > 0 {
		w := 0
		for _, s := range ch.Series {
			w = max(w, textWidth(s.Name, scale))
		}
		lh := th + 8
		bw, bh := w+42, 4+lh*len(ch.Series)
		// The corner whose box covers the fewest points of the curves.
		var box image.Rectangle
		best := -1
		for _, corner := range []image.Point{{right - 8 - bw, top + 8}, {left + 8, top + 8},
			{right - 8 - bw, bottom - 8 - bh}, {left + 8, bottom - 8 - bh}} {
			b := image.Rectangle{Min: corner, Max: corner.Add(image.Pt(bw, bh))}
			n := 0
			for _, s := range ch.Series { // points and samples along the segments
				for i := range min(len(s.X), len(s.Y)) {
					x, y := s.X[i], ty(s.Y[i])
					if !finite(x) || !finite(y) {
						continue
					}
					x0, y0 := x, y
					if i > 0 && finite(s.X[i-1]) && finite(ty(s.Y[i-1])) {
						x0, y0 = s.X[i-1], ty(s.Y[i-1])
					}
					for k := range 8 {
						f := float64(k) / 8
						if image.Pt(px(x0+(x-x0)*f), py(y0+(y-y0)*f)).In(b.Inset(-6)) {
							n++
						}
					}
				}
			}
			if best < 0 || n < best {
				box, best = b, n
			}
		}
		cv.rect(box, white)
		cv.line(box.Min.X, box.Min.Y, box.Max.X, box.Min.Y, 1, black)
		cv.line(box.Min.X, box.Max.Y, box.Max.X, box.Max.Y, 1, black)
		cv.line(box.Min.X, box.Min.Y, box.Min.X, box.Max.Y, 1, black)
		cv.line(box.Max.X, box.Min.Y, box.Max.X, box.Max.Y, 1, black)
		for i, s := range ch.Series {
			col := s.Color
			if col.A == 0 {
				col = Palette[i%len(Palette)]
			}
			y := box.Min.Y + 6 + i*lh
			cv.line(box.Min.X+6, y+th/2, box.Min.X+30, y+th/2, 3, col)
			cv.text(s.Name, box.Min.X+38, y, scale, black, false)
		}
	}
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// widen makes a degenerate range non-empty.
func widen(lo, hi float64) (float64, float64) {
	if hi > lo {
		return lo, hi
	}
	d := math.Abs(lo) * 0.1
	if d == 0 {
		d = 1
	}
	return lo - d, hi + d
}

// niceStep returns a step of 1, 2 or 5 times a power of ten giving about n
// intervals over span.
func niceStep(span float64, n int) float64 {
	raw := span / float64(n)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	switch f := raw / p; {
	case f < 1.5:
		return p
	case f < 3.5:
		return 2 * p
	case f < 7.5:
		return 5 * p
	}
	return 10 * p
}

// ticks returns multiples of a nice step inside [lo, hi].
func ticks(lo, hi float64, n int) []float64 {
	step := niceStep(hi-lo, n)
	var out []float64
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9; v += step {
		if math.Abs(v) < step*1e-9 {
			v = 0
		}
		out = append(out, v)
	}
	return out
}

// logTicks returns the integer (decades) or, for narrow ranges, the
// log10 of 1/2/5 multiples inside [lo, hi] (both in log10 units).
func logTicks(lo, hi float64) []float64 {
	var out []float64
	for d := math.Floor(lo); d <= math.Ceil(hi); d++ {
		for _, m := range []float64{1, 2, 5} {
			v := d + math.Log10(m)
			if v >= lo && v <= hi && (m == 1 || hi-lo < 2) {
				out = append(out, v)
			}
		}
	}
	if len(out) < 2 {
		return ticks(lo, hi, 4)
	}
	return out
}

// label formats a tick value with just enough digits for the axis range.
func label(v, lo, hi float64) string {
	step := niceStep(hi-lo, 8)
	if a := math.Max(math.Abs(lo), math.Abs(hi)); a >= 1e5 || (a < 1e-3 && a > 0) {
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
	digits := max(0, int(-math.Floor(math.Log10(step)+1e-9)))
	return strconv.FormatFloat(v, 'f', digits, 64)
}
