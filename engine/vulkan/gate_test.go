package vulkan

import (
	"math"
	"testing"

	"github.com/parallax-engine/parallax/engine"
)

func TestHeadGate(t *testing.T) {
	d := testDevice(t)
	const rows, h, dim = 3, 2, 5
	xv := make([]float32, rows*h*dim)
	zv := make([]float32, rows*h)
	gv := make([]float32, rows*h*dim)
	for i := range xv {
		xv[i] = float32(i%7) - 3
		gv[i] = float32(i%5) - 1.5
	}
	for i := range zv {
		zv[i] = float32(i) - 2.5
	}
	x := upload(t, d, engine.F32, xv, rows, h, dim)
	z := upload(t, d, engine.F32, zv, rows, h)
	g := upload(t, d, engine.F32, gv, rows, h, dim)
	o, _ := d.Alloc(engine.F32, rows, h, dim)
	dx, _ := d.Alloc(engine.F32, rows, h, dim)
	dz, _ := d.Alloc(engine.F32, rows, h)
	if err := d.HeadGate(o, x, z); err != nil {
		t.Fatal(err)
	}
	if err := d.HeadGateBackward(dx, dz, g, x, z); err != nil {
		t.Fatal(err)
	}
	ov, dxv, dzv := download(t, o), download(t, dx), download(t, dz)
	for i, zi := range zv {
		s := 1 / (1 + math.Exp(-float64(zi)))
		var dot float64
		for j := i * dim; j < (i+1)*dim; j++ {
			if e := math.Abs(float64(ov[j]) - s*float64(xv[j])); e > 1e-5 {
				t.Errorf("out[%d] = %v, want %v", j, ov[j], s*float64(xv[j]))
			}
			if e := math.Abs(float64(dxv[j]) - s*float64(gv[j])); e > 1e-5 {
				t.Errorf("dX[%d] = %v, want %v", j, dxv[j], s*float64(gv[j]))
			}
			dot += float64(gv[j]) * float64(xv[j])
		}
		if want := s * (1 - s) * dot; math.Abs(float64(dzv[i])-want) > 1e-5 {
			t.Errorf("dZ[%d] = %v, want %v", i, dzv[i], want)
		}
	}
}
