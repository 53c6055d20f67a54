package main

import (
	"fmt"
	"strings"

	"github.com/parallax-engine/parallax/engine/vulkan"
)

// Text colours (the frame kernel's INK table).
const (
	inkText   = 0 // near white
	inkDim    = 1 // grey
	inkGen    = 2 // orange: generated tokens
	inkPrompt = 3 // teal: the prompt
	inkEdit   = 4 // yellow: the prompt being typed
)

// viewState is what a frame shows, as the host knows it.
type viewState struct {
	model         string
	layers, heads int
	layer, head   int
	length, cap   int       // positions in the cache; its capacity
	status        string    // running, paused, done (why)
	prompt, gen   string    // the prompt and the generated text
	editing       bool      // the prompt is being typed
	edit          string    // what has been typed
	cor           []float32 // correction strength per layer (nil: unknown)
	parallax      bool      // the model has a probe (else eff = p)
	note          string    // the last error or hint, shown in the title line
}

// frameLayout is where everything goes in a frame: the kernel's parameters
// and the text grid.
type frameLayout struct {
	params     vulkan.FrameParams
	cells      []int32 // Rows x Cols: character | colour<<8
	cols, rows int
	streamRow  int // the first text row of the token stream
}

// textGrid is a grid of character cells.
type textGrid struct {
	cells      []int32
	cols, rows int
}

// put writes s at (row, col) in colour ink, clipped to the grid; bytes
// outside printable ASCII show as '?'.
func (g *textGrid) put(row, col int, ink int32, s string) {
	if row < 0 || row >= g.rows {
		return
	}
	for _, r := range s {
		if col >= g.cols {
			return
		}
		if col >= 0 {
			g.cells[row*g.cols+col] = printable(r) | ink<<8
		}
		col++
	}
}

func printable(r rune) int32 {
	switch {
	case r == '\t':
		return ' '
	case r >= 32 && r < 127:
		return r
	}
	return '?'
}

// span is a run of text in one colour.
type span struct {
	ink  int32
	text string
}

// wrap lays spans out in lines of at most width cells, breaking at
// newlines and at the width; it returns each line as cells.
func wrap(spans []span, width int) [][]int32 {
	if width < 1 {
		return nil
	}
	var lines [][]int32
	var cur []int32
	for _, s := range spans {
		for _, r := range s.text {
			if r == '\n' {
				lines = append(lines, cur)
				cur = nil
				continue
			}
			if r == '\r' {
				continue
			}
			if len(cur) == width {
				lines = append(lines, cur)
				cur = nil
			}
			cur = append(cur, printable(r)|s.ink<<8)
		}
	}
	return append(lines, cur)
}

// layout places the panels, the bars and the text for a frame of w x h
// pixels.
func layout(w, h int, s *viewState) frameLayout {
	scale := 1
	if w >= 1800 && h >= 1000 {
		scale = 2
	}
	cw, ch := glyphW*scale, glyphH*scale
	g := textGrid{cols: max(w/cw, 1), rows: max(h/ch, 1)}
	g.cells = make([]int32, g.cols*g.rows)
	fp := vulkan.FrameParams{
		L: uint32(s.length), Cap: uint32(s.cap), Layers: uint32(s.layers), Layer: uint32(s.layer),
		CellW: uint32(cw), CellH: uint32(ch), Scale: uint32(scale), Cols: uint32(g.cols), Rows: uint32(g.rows),
		CursorRow: uint32(max(s.length-1, 0)),
	}

	// Title and help.
	title := fmt.Sprintf("parallax-view  %s  layer %d of %d  head %d of %d  tokens %d/%d  [%s]",
		s.model, s.layer, s.layers, s.head, s.heads, s.length, s.cap, s.status)
	g.put(0, 1, inkText, title)
	if s.note != "" {
		g.put(0, len(title)+3, inkEdit, s.note)
	}
	g.put(1, 1, inkDim, "left/right head  up/down layer  space pause  n or . step  type (paused) + Enter: new prompt  Esc/q quit")

	// Rows: 0-1 title, 3 labels, panels from row 4, a legend row, then the
	// token stream (at least 4 rows).
	streamRows := max(4, g.rows/4)
	areaRows := g.rows - 4 - 1 - streamRows
	margin, gap := 2*cw, 2*cw
	labelCols := 16
	barsW := max((labelCols+12)*cw, w/5)
	size := min(areaRows*ch, (w-2*margin-barsW-2*gap)/2)
	if size >= 16 && s.layers > 0 {
		ax, ay := margin, 4*ch
		bx := ax + size + gap
		fp.AX, fp.AY, fp.Size = int32(ax), int32(ay), int32(size)
		fp.BX, fp.BY = int32(bx), int32(ay)
		g.put(3, ax/cw, inkText, "softmax p  (query rows x key columns)")
		if s.parallax {
			g.put(3, bx/cw, inkText, "parallax p(1 + tbar - t)")
		} else {
			g.put(3, bx/cw, inkText, "effective weights (softmax model: = p)")
		}
		legend := (ay + size + ch - 1) / ch
		if legend < g.rows-streamRows {
			g.put(legend, ax/cw, inkDim, "dark blue 0 ... yellow = row max")
			g.put(legend, bx/cw, inkDim, "blue < 0 < orange (row max = 1)")
		}

		// Bars: a label column, then one bar per layer in slots aligned
		// with the text rows when they fit.
		barsX := bx + size + gap
		g.put(3, barsX/cw, inkText, "correction ||S_KV r||/||o_SA||")
		slotRows := min(max(areaRows/s.layers, 1), 3)
		slot := slotRows * ch
		if s.layers*slot > areaRows*ch {
			slot = areaRows * ch / s.layers
		}
		labelW := labelCols * cw
		fp.CX, fp.CY = int32(barsX+labelW), int32(ay)
		fp.CW, fp.CH = int32(w-margin-barsX-labelW), int32(s.layers*slot)
		if slot >= ch {
			for l := 0; l < s.layers; l++ {
				ink := int32(inkDim)
				if l == s.layer {
					ink = inkGen
				}
				label := fmt.Sprintf("layer %d", l)
				if l < len(s.cor) {
					label = fmt.Sprintf("layer %-2d %.3f", l, s.cor[l])
				}
				g.put(ay/ch+l*slot/ch, barsX/cw, ink, label)
			}
		}
	}

	// The token stream: the prompt, then the generated text, the newest
	// lines at the bottom.
	first := g.rows - streamRows
	lines := wrap([]span{{inkPrompt, s.prompt}, {inkGen, s.gen}}, g.cols-2)
	show := streamRows
	if s.editing {
		show--
	}
	if len(lines) > show {
		lines = lines[len(lines)-show:]
	}
	for i, line := range lines {
		copy(g.cells[(first+i)*g.cols+1:], line)
	}
	if s.editing {
		edit := "new prompt> " + s.edit + "_"
		if over := len(edit) - (g.cols - 2); over > 0 {
			edit = "new prompt> ..." + edit[len("new prompt> ")+over+3:]
		}
		g.put(g.rows-1, 1, inkEdit, edit)
	}
	return frameLayout{params: fp, cells: g.cells, cols: g.cols, rows: g.rows, streamRow: first}
}

// statusText describes the generation state for the title line.
func statusText(paused, done bool, why string) string {
	switch {
	case done && why != "":
		return "done: " + why
	case done:
		return "done"
	case paused:
		return "paused"
	}
	return "running"
}

// trimPrompt keeps a typed prompt to one line of printable text.
func trimPrompt(s string) string {
	return strings.TrimSpace(strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == '\t' {
			return ' '
		}
		return r
	}, s))
}
