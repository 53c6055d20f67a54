package plot

import (
	"fmt"
	"image"
	"image/png"
	"io"
	"math"
	"strconv"

	"github.com/parallax-engine/parallax/internal/atomicfile"
)

// BarChart is a grouped bar chart: one group of bars per category (a task,
// say), one bar per series within each group (a model), coloured by
// series with a legend.
type BarChart struct {
	Title, YLabel string
	Series        []string    // bar names within a group, in order (the legend)
	Groups        []string    // category labels along the x axis
	Values        [][]float64 // Values[group][series]; NaN leaves a gap
	YMin, YMax    float64     // the y range; both 0 picks one from the data (from 0)
	ValueLabels   bool        // print each bar's value above it
}

// RenderBars draws the chart into a width x height image.
func RenderBars(width, height int, c BarChart) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	for i := range img.Pix {
		img.Pix[i] = 255
	}
	c.draw(img, img.Bounds())
	return img
}

// WriteBarsPNG writes the chart to path atomically (temporary file +
// rename).
func WriteBarsPNG(path string, width, height int, c BarChart) error {
	err := atomicfile.Write(path, func(w io.Writer) error {
		return png.Encode(w, RenderBars(width, height, c))
	})
	if err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return nil
}

func (c BarChart) draw(img *image.RGBA, area image.Rectangle) {
	cv := canvas{img, area}
	const scale = 2
	th := glyphH * scale
	left := area.Min.X + 20 + th + 6*glyphW*scale
	right := area.Max.X - 20
	// Legend: coloured squares and names in rows above the plot, wrapped
	// at the plot's width.
	type item struct{ x, row int }
	var items []item
	x, rows := left, 0
	for _, s := range c.Series {
		w := th + 2 + textWidth(s, scale)
		if x > left && x+w > right {
			x, rows = left, rows+1
		}
		items = append(items, item{x, rows})
		x += w + 24
	}
	legendH := 0
	if len(c.Series) > 0 {
		legendH = (rows+1)*(th+6) + 6
	}
	top := area.Min.Y + 16 + th + legendH
	bottom := area.Max.Y - 20 - th
	if right-left < 20 || bottom-top < 20 {
		return
	}
	cv.text(c.Title, (left+right-textWidth(c.Title, scale))/2, area.Min.Y+8, scale, black, false)
	cv.text(c.YLabel, area.Min.X+10, (top+bottom+textWidth(c.YLabel, scale))/2, scale, black, true)

	y0, y1 := c.YMin, c.YMax
	if y0 == 0 && y1 == 0 {
		y1 = math.Inf(-1)
		for _, g := range c.Values {
			for _, v := range g {
				if finite(v) {
					y0, y1 = math.Min(y0, v), math.Max(y1, v)
				}
			}
		}
		if math.IsInf(y1, -1) {
			y1 = 1
		}
		y0, y1 = widen(y0, y1)
	}
	py := func(y float64) int {
		y = math.Max(y0, math.Min(y1, y))
		return bottom - int(math.Round((y-y0)/(y1-y0)*float64(bottom-top)))
	}
	for _, t := range ticks(y0, y1, 5) {
		y := py(t)
		cv.line(left, y, right, y, 1, grid)
		cv.line(left-5, y, left, y, 1, black)
		l := label(t, y0, y1)
		cv.text(l, left-9-textWidth(l, scale), y-th/2, scale, black, false)
	}

	for i, s := range c.Series {
		it := items[i]
		ly := area.Min.Y + 14 + th + it.row*(th+6)
		cv.rect(image.Rect(it.x, ly+2, it.x+th-4, ly+th-2), Palette[i%len(Palette)])
		cv.text(s, it.x+th+2, ly, scale, black, false)
	}

	ng, ns := len(c.Groups), max(1, len(c.Series))
	if ng > 0 {
		gw := float64(right-left) / float64(ng)
		bw := gw * 0.8 / float64(ns)
		for g, name := range c.Groups {
			gx := float64(left) + gw*float64(g) + gw*0.1
			for s := range ns {
				if g >= len(c.Values) || s >= len(c.Values[g]) || !finite(c.Values[g][s]) {
					continue
				}
				v := c.Values[g][s]
				x0 := int(math.Round(gx + bw*float64(s)))
				x1 := int(math.Round(gx+bw*float64(s+1))) - 1
				yTop, yBase := py(v), py(math.Max(y0, math.Min(0, y1)))
				if yTop > yBase {
					yTop, yBase = yBase, yTop
				}
				cv.rect(image.Rect(x0, yTop, max(x1, x0+1), yBase+1), Palette[s%len(Palette)])
				if c.ValueLabels {
					l := strconv.FormatFloat(v, 'f', 3, 64)
					if x1-x0 < textWidth(l, 1) {
						l = strconv.FormatFloat(v, 'f', 2, 64)
					}
					if x1-x0 >= textWidth(l, 1) {
						cv.text(l, (x0+x1-textWidth(l, 1))/2, yTop-glyphH-2, 1, black, false)
					}
				}
			}
			cx := int(math.Round(float64(left) + gw*(float64(g)+0.5)))
			cv.text(name, cx-textWidth(name, scale)/2, bottom+8, scale, black, false)
		}
	}
	cv.line(left, top, right, top, 1, black)
	cv.line(left, bottom, right, bottom, 1, black)
	cv.line(left, top, left, bottom, 1, black)
	cv.line(right, top, right, bottom, 1, black)
}
