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
		n, v    int
		classes int // 0: all v columns; else the pad [classes, v) holds NaN
		alias   bool
	}
	const ignore = -100
	for ci, c := range []cc{{1, 1, 0, false}, {5, 17, 0, false}, {64, 300, 0, false}, {9, 1000, 0, true},
		{5, 17, 1, false}, {64, 384, 300, false}, {9, 1024, 1000, true}} {
		classes := c.classes
		if classes == 0 {
			classes = c.v
		}
		for _, dt := range []engine.DType{engine.F32, engine.BF16} {
			for _, d := range testDevices() {
				t.Run(fmt.Sprintf("%dx%d/classes=%d/alias=%v/%v/threads=%d", c.n, c.v, c.classes, c.alias, dt, d.threads), func(t *testing.T) {
					rng := newRng(uint64(ci))
					lv := enginetest.Normal(rng, dt, c.n*c.v, 4)
					for i := range lv {
						if i%c.v >= classes {
							lv[i] = math.NaN() // never read
						}
					}
					tg := make([]int, c.n)
					counted := 0
					for i := range tg {
						tg[i] = rng.IntN(classes)
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
					o := engine.CrossEntropyOpts{IgnoreIndex: ignore, GradScale: float32(scale), Classes: c.classes}
					if err := d.CrossEntropy(loss, dl, logits, targets, o); err != nil {
						t.Fatal(err)
					}
					// Tolerances: an F32 loss after a sum of C exponentials;
					// dLogits rounded to dt. near fails on any NaN, so the
					// NaN pad logits must be neither read nor left in dLogits,
					// whose pad the reference holds at exactly 0.
					wl, wd := ref.CrossEntropyPadded(lv, tg, c.n, c.v, classes, ignore, scale)
					near(t, "loss", down(t, loss), wl, tolFor(engine.F32, classes))
					got := down(t, dl)
					near(t, "dLogits", got, wd, tolFor(dt, classes))
					for i, g := range got {
						if i%c.v >= classes && g != 0 {
							t.Fatalf("dLogits[%d, %d] = %g in the pad, want exactly 0", i/c.v, i%c.v, g)
						}
					}
					// The loss alone.
					if !c.alias {
						if err := d.CrossEntropy(loss, nil, logits, targets, o); err != nil {
							t.Fatal(err)
						}
						near(t, "loss only", down(t, loss), wl, tolFor(engine.F32, classes))
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

// TestCrossEntropyClassesErrors: Classes outside [0, W] is an argument error
// (before anything runs), and a target in the pad columns [Classes, W) is
// out of range like any other: an error naming it, kept for Sync, with
// nothing written.
func TestCrossEntropyClassesErrors(t *testing.T) {
	d := New()
	logits, loss, dl := alloc(t, d, engine.F32, 3, 5), alloc(t, d, engine.F32, 3), alloc(t, d, engine.F32, 3, 5)
	ok := upInts(t, d, []int{0, -100, 2}, 3)
	for _, bad := range []int{-1, 6, math.MaxInt} {
		o := engine.CrossEntropyOpts{IgnoreIndex: -100, GradScale: 1, Classes: bad}
		var err error
		noPanic(t, "cross entropy", func() { err = d.CrossEntropy(loss, dl, logits, ok, o) })
		wantArgError(t, fmt.Sprintf("classes %d", bad), err, "cross entropy")
		if err == nil || !strings.Contains(err.Error(), "classes") {
			t.Errorf("classes %d: error %v should name the classes", bad, err)
		}
		if err := d.Sync(); err != nil {
			t.Errorf("classes %d: an argument error reached Sync: %v", bad, err)
		}
	}
	// Classes == W and Classes == 0 are the same op.
	for _, c := range []int{0, 5} {
		if err := d.CrossEntropy(loss, dl, logits, ok, engine.CrossEntropyOpts{IgnoreIndex: -100, GradScale: 1, Classes: c}); err != nil {
			t.Errorf("classes %d: %v", c, err)
		}
	}
	poison := func(x *engine.Tensor) {
		if err := d.Fill(x, 7); err != nil {
			t.Fatal(err)
		}
	}
	for _, bad := range []int{3, 4} {
		poison(loss)
		poison(dl)
		o := engine.CrossEntropyOpts{IgnoreIndex: -100, GradScale: 1, Classes: 3}
		var err error
		noPanic(t, "cross entropy", func() { err = d.CrossEntropy(loss, dl, logits, upInts(t, d, []int{0, -100, bad}, 3), o) })
		if err == nil || !strings.Contains(err.Error(), "targets[2]") || !strings.Contains(err.Error(), "[0, 3)") {
			t.Errorf("target %d in the pad: error %v should name targets[2] and [0, 3)", bad, err)
		}
		if d.Sync() == nil {
			t.Errorf("target %d in the pad: Sync reported nothing", bad)
		}
		for name, x := range map[string]*engine.Tensor{"loss": loss, "dLogits": dl} {
			for i, v := range down(t, x) {
				if v != 7 {
					t.Errorf("target %d in the pad: %s[%d] = %g was written", bad, name, i, v)
					break
				}
			}
		}
	}
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
