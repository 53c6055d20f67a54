package vulkan

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/parallax-engine/parallax/engine"
)

// TestArgMaxRows checks the device's greedy pick on rows short enough for
// one workgroup and vocabulary-sized ones split into parts: ties within a
// part and across parts (the lowest index wins), a maximum past the
// classes (ignored), a NaN in a late part (-1), a row of -Inf (index 0).
func TestArgMaxRows(t *testing.T) {
	d := testDevice(t)
	rng := rand.New(rand.NewPCG(8, 3))
	for _, dt := range []engine.DType{engine.F32, engine.BF16, engine.F16} {
		for _, w := range []int{300, 50304} {
			t.Run(fmt.Sprintf("%v W%d", dt, w), func(t *testing.T) {
				const n = 6
				classes := w - 47
				v := randVals(rng, dt, n*w, 1)
				row := func(r int) []float32 { return v[r*w : (r+1)*w] }
				big := float32(100)
				row(0)[7], row(0)[classes-2] = big, big           // tie across parts: 7 wins
				row(1)[classes/2], row(1)[classes/2+1] = big, big // tie within a part
				row(2)[classes+3] = 1e4                           // past the classes
				row(3)[classes-1] = float32(math.NaN())
				for c := range row(4) {
					row(4)[c] = float32(math.Inf(-1))
				}
				row(5)[classes-1] = big
				ts := &tensors{t: t, dev: d}
				defer ts.free()
				x := ts.make(dt, v, n, w)
				ids, err := d.Alloc(engine.I32, n)
				if err != nil {
					t.Fatal(err)
				}
				defer d.Free(ids)
				if err := d.ArgMaxRows(ids, x, classes); err != nil {
					t.Fatal(err)
				}
				got, err := engine.Int32s(ids)
				if err != nil {
					t.Fatal(err)
				}
				held := download(t, x)
				for r := range n {
					want, bv := int32(0), held[r*w]
					for c := range classes {
						x := held[r*w+c]
						if x != x {
							want = -1
							break
						}
						if x > bv {
							want, bv = int32(c), x
						}
					}
					if got[r] != want {
						t.Errorf("row %d: id %d, want %d", r, got[r], want)
					}
				}
			})
		}
	}
}
