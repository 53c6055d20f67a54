package main

import (
	"image"

	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// Glyphs are cells of glyphW x glyphH font pixels; the frame kernel reads
// them as 16 rows of 8 bits (bit x = column x) per ASCII character.
const (
	glyphW = 8
	glyphH = 16
)

// fontTable rasterises basicfont's 7x13 face (ASCII 32-126) into the
// kernel's layout: 128 characters x 16 rows, one uint32 per row, the
// glyph's top at row 1 so rows 0 and 14-15 separate lines.
func fontTable() []int32 {
	face := basicfont.Face7x13
	out := make([]int32, 128*glyphH)
	for r := rune(33); r < 127; r++ {
		dr, mask, mp, _, ok := face.Glyph(fixed.P(0, face.Ascent), r)
		if !ok {
			continue
		}
		for y := dr.Min.Y; y < dr.Max.Y; y++ {
			row := y + 1
			if row < 0 || row >= glyphH {
				continue
			}
			var bits int32
			for x := dr.Min.X; x < dr.Max.X && x < glyphW; x++ {
				if x < 0 {
					continue
				}
				pt := image.Pt(mp.X+x-dr.Min.X, mp.Y+y-dr.Min.Y)
				if _, _, _, a := mask.At(pt.X, pt.Y).RGBA(); a >= 0x8000 {
					bits |= 1 << x
				}
			}
			out[int(r)*glyphH+row] = bits
		}
	}
	return out
}
