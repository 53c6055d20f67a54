package cpu

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/enginetest"
	"github.com/parallax-engine/parallax/engine/ref"
)

func TestCrossEntropy(t *testing.T) {
	type cc struct {
		n, v  int
		alias bool
	}
	const ignore = -100
	for ci, c := range []cc{{1, 1, false}, {5, 17, false}, {64, 300, false}, {9, 1000, true}} {
		for _, dt := range []engine.DType{engine.F32, engine.BF16} {
			for _, d := range testDevices() {
				t.Run(fmt.Sprintf("%dx%d/alias=%v/%v/threads=%d", c.n, c.v, c.alias, dt, d.threads), func(t *testing.T) {
					rng := newRng(uint64(ci))
					lv := enginetest.Normal(rng, dt, c.n*c.v, 4)
					tg := make([]int, c.n)
					counted := 0
					for i := range tg {
						tg[i] = rng.IntN(c.v)
						if i%4 == 1 {
							tg[i] = ignore
						} else {
							counted++
						}
					}
					scale := 1 / float64(max(counted, 1))
					logits, targets := up(t, d, dt, lv, c.n, c.v), upInts(t, d, tg, c.n)
					loss := alloc(t, d, engine.F32, c.n)
					dl := logits
					if !c.alias {
						dl = alloc(t, d, dt, c.n, c.v)
					}
					o := engine.CrossEntropyOpts{IgnoreIndex: ignore, GradScale: float32(scale)}
					if err := d.CrossEntropy(loss, dl, logits, targets, o); err != nil {
						t.Fatal(err)
					}
					wl, wd := ref.CrossEntropy(lv, tg, c.n, c.v, ignore, scale)
					near(t, "loss", down(t, loss), wl, tolFor(engine.F32, c.v))
					near(t, "dLogits", down(t, dl), wd, tolFor(dt, c.v))
					// The loss alone.
					if !c.alias {
						if err := d.CrossEntropy(loss, nil, logits, targets, o); err != nil {
							t.Fatal(err)
						}
						near(t, "loss only", down(t, loss), wl, tolFor(engine.F32, c.v))
					}
				})
			}
		}
	}
}

func TestCrossEntropyStable(t *testing.T) {
	d := New()
	// Huge logits: max subtraction keeps everything finite; a confident
	// row's gradient is tiny but exact.
	lv := []float64{1e4, 1e4 - 1, 1e4 - 50, -1e4, 0, 30}
	logits, targets := up(t, d, engine.F32, lv, 2, 3), upInts(t, d, []int{0, 2}, 2)
	loss, dl := alloc(t, d, engine.F32, 2), alloc(t, d, engine.F32, 2, 3)
	if err := d.CrossEntropy(loss, dl, logits, targets, engine.CrossEntropyOpts{IgnoreIndex: -1, GradScale: 1}); err != nil {
		t.Fatal(err)
	}
	wl, wd := ref.CrossEntropy(lv, []int{0, 2}, 2, 3, -1, 1)
	near(t, "loss", down(t, loss), wl, 1e-6)
	got := down(t, dl)
	for i := range got {
		if math.Abs(got[i]-wd[i]) > 1e-6*math.Abs(wd[i])+1e-30 {
			t.Errorf("dLogits[%d] = %g, want %g", i, got[i], wd[i])
		}
	}
}

func TestCrossEntropyErrors(t *testing.T) {
	d := New()
	logits, loss := alloc(t, d, engine.F32, 3, 5), alloc(t, d, engine.F32, 3)
	o := engine.CrossEntropyOpts{IgnoreIndex: -100, GradScale: 1}
	for _, bad := range []int{5, -1, 99} {
		var err error
		noPanic(t, "cross entropy", func() { err = d.CrossEntropy(loss, nil, logits, upInts(t, d, []int{0, -100, bad}, 3), o) })
		if err == nil || !strings.Contains(err.Error(), "targets[2]") {
			t.Errorf("target %d: error %v should name targets[2]", bad, err)
		}
		if d.Sync() == nil {
			t.Errorf("target %d: Sync reported nothing", bad)
		}
	}
	f := func(dt engine.DType, s ...int) *engine.Tensor { return alloc(t, d, dt, s...) }
	wantArgError(t, "float targets", d.CrossEntropy(loss, nil, logits, f(engine.F32, 3), o), "cross entropy")
	wantArgError(t, "loss dtype", d.CrossEntropy(f(engine.BF16, 3), nil, logits, f(engine.I32, 3), o), "cross entropy")
	wantArgError(t, "loss shape", d.CrossEntropy(f(engine.F32, 4), nil, logits, f(engine.I32, 3), o), "cross entropy")
	wantArgError(t, "dLogits shape", d.CrossEntropy(loss, f(engine.F32, 5, 3), logits, f(engine.I32, 3), o), "cross entropy")
	wantArgError(t, "targets shape", d.CrossEntropy(loss, nil, logits, f(engine.I32, 2), o), "cross entropy")
}

func TestSumSquares(t *testing.T) {
	for _, n := range []int{0, 1, 1001, 5*elemChunk + 7} {
		for _, dt := range []engine.DType{engine.F32, engine.BF16} {
			for _, d := range testDevices() {
				t.Run(fmt.Sprintf("n=%d/%v/threads=%d", n, dt, d.threads), func(t *testing.T) {
					xv := enginetest.Normal(newRng(uint64(n)), dt, n, 3)
					x, out := up(t, d, dt, xv, n), alloc(t, d, engine.F32, 1)
					if err := d.SumSquares(out, x, false); err != nil {
						t.Fatal(err)
					}
					s := ref.SumSquares(xv)
					near(t, "sum", down(t, out), []float64{s}, 1e-7)
					if err := d.SumSquares(out, x, true); err != nil {
						t.Fatal(err)
					}
					near(t, "accumulated", down(t, out), []float64{2 * s}, 1e-7)
				})
			}
		}
	}
	d := New()
	wantArgError(t, "out dtype", d.SumSquares(alloc(t, d, engine.BF16, 1), alloc(t, d, engine.F32, 3), false), "sum squares")
	wantArgError(t, "out shape", d.SumSquares(alloc(t, d, engine.F32, 2), alloc(t, d, engine.F32, 3), false), "sum squares")
	wantArgError(t, "int x", d.SumSquares(alloc(t, d, engine.F32, 1), alloc(t, d, engine.I32, 3), false), "sum squares")
}
