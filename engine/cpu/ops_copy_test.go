package cpu

import (
	"fmt"
	"math"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/enginetest"
	"github.com/parallax-engine/parallax/engine/ref"
)

var allDTypes = []engine.DType{engine.F32, engine.BF16, engine.F16, engine.I32}

// values returns n values representable at dt (integers for I32).
func values(seed uint64, dt engine.DType, n int) []float64 {
	rng := newRng(seed)
	if dt == engine.I32 {
		v := make([]float64, n)
		for i := range v {
			v[i] = float64(rng.IntN(2001) - 1000)
		}
		return v
	}
	return enginetest.Normal(rng, dt, n, 100)
}

func TestCast(t *testing.T) {
	const n = 3 * (elemChunk + 1)
	for _, from := range allDTypes {
		for _, to := range allDTypes {
			for _, d := range testDevices() {
				t.Run(fmt.Sprintf("%v->%v/threads=%d", from, to, d.threads), func(t *testing.T) {
					xv := values(1, from, n)
					x, y := up(t, d, from, xv, 3, n/3), alloc(t, d, to, n)
					if err := d.Cast(y, x); err != nil {
						t.Fatal(err)
					}
					near(t, "cast", down(t, y), ref.Cast(xv, to), 0)
				})
			}
		}
	}
}

func TestCastSpecialValues(t *testing.T) {
	d := New()
	inf := math.Inf(1)
	xv := []float64{math.NaN(), inf, -inf, 3e9, -3e9, 2.9, -2.9, 1 + 1.0/256 + 1.0/512}
	x := up(t, d, engine.F32, xv, len(xv))
	i32 := alloc(t, d, engine.I32, len(xv))
	if err := d.Cast(i32, x); err != nil {
		t.Fatal(err)
	}
	got, _ := engine.Int32s(i32)
	want := []int32{0, math.MaxInt32, math.MinInt32, math.MaxInt32, math.MinInt32, 2, -2, 1}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("cast %v to i32 = %d, want %d", xv[i], got[i], want[i])
		}
	}
	bf := alloc(t, d, engine.BF16, len(xv))
	if err := d.Cast(bf, x); err != nil {
		t.Fatal(err)
	}
	b := down(t, bf)
	if !math.IsNaN(b[0]) || !math.IsInf(b[1], 1) || !math.IsInf(b[2], -1) || b[7] != 1+1.0/128 {
		t.Errorf("cast to bf16: %v (1+2^-8+2^-9 must round up to 1+2^-7)", b)
	}
	wantArgError(t, "count", d.Cast(alloc(t, d, engine.F32, 3), x), "cast")
	wantArgError(t, "nil", d.Cast(nil, x), "cast")
}

func TestSwapAxes12(t *testing.T) {
	for _, dt := range allDTypes {
		for _, sh := range [][4]int{{1, 1, 1, 1}, {2, 3, 5, 7}, {3, 64, 4, 32}} {
			for _, d := range testDevices() {
				t.Run(fmt.Sprintf("%v/%v/threads=%d", sh, dt, d.threads), func(t *testing.T) {
					n := sh[0] * sh[1] * sh[2] * sh[3]
					xv := values(2, dt, n)
					x := up(t, d, dt, xv, sh[:]...)
					y := alloc(t, d, dt, sh[0], sh[2], sh[1], sh[3])
					if err := d.SwapAxes12(y, x); err != nil {
						t.Fatal(err)
					}
					near(t, "swap", down(t, y), ref.SwapAxes12(xv, sh[0], sh[1], sh[2], sh[3]), 0)
					// Swapping back restores x.
					z := alloc(t, d, dt, sh[:]...)
					if err := d.SwapAxes12(z, y); err != nil {
						t.Fatal(err)
					}
					near(t, "back", down(t, z), xv, 0)
				})
			}
		}
	}
	d := New()
	wantArgError(t, "dtype", d.SwapAxes12(alloc(t, d, engine.BF16, 1, 3, 2, 4), alloc(t, d, engine.F32, 1, 2, 3, 4)), "swapaxes12")
	wantArgError(t, "shape", d.SwapAxes12(alloc(t, d, engine.F32, 1, 2, 3, 4), alloc(t, d, engine.F32, 1, 2, 3, 4)), "swapaxes12")
	wantArgError(t, "rank", d.SwapAxes12(alloc(t, d, engine.F32, 6, 4), alloc(t, d, engine.F32, 6, 4)), "swapaxes12")
}

func TestKVAppend(t *testing.T) {
	type kc struct {
		b, h, capacity, n, d, start int
	}
	for _, c := range []kc{{1, 1, 4, 1, 2, 3}, {2, 3, 10, 4, 8, 5}, {2, 2, 16, 16, 16, 0}, {1, 8, 64, 1, 64, 0}} {
		for _, cdt := range allDTypes {
			for _, xdt := range []engine.DType{cdt, engine.F32} {
				if cdt == engine.I32 && xdt != engine.I32 {
					continue
				}
				for _, d := range testDevices() {
					t.Run(fmt.Sprintf("%+v/%v<-%v/threads=%d", c, cdt, xdt, d.threads), func(t *testing.T) {
						cv := values(3, cdt, c.b*c.h*c.capacity*c.d)
						xv := values(4, xdt, c.b*c.h*c.n*c.d)
						cache := up(t, d, cdt, cv, c.b, c.h, c.capacity, c.d)
						x := up(t, d, xdt, xv, c.b, c.h, c.n, c.d)
						if err := d.KVAppend(cache, x, c.start); err != nil {
							t.Fatal(err)
						}
						want := ref.KVAppend(cv, roundTo(cdt, xv), c.b, c.h, c.capacity, c.n, c.d, c.start)
						near(t, "cache", down(t, cache), want, 0)
					})
				}
			}
		}
	}
	d := New()
	cache, x := alloc(t, d, engine.F32, 2, 3, 10, 8), alloc(t, d, engine.F32, 2, 3, 4, 8)
	for _, start := range []int{7, -1, 10} {
		noPanic(t, "kv append", func() { wantArgError(t, fmt.Sprintf("start %d", start), d.KVAppend(cache, x, start), "kv append") })
	}
	wantArgError(t, "heads", d.KVAppend(cache, alloc(t, d, engine.F32, 2, 2, 4, 8), 0), "kv append")
	wantArgError(t, "width", d.KVAppend(cache, alloc(t, d, engine.F32, 2, 3, 4, 4), 0), "kv append")
	wantArgError(t, "rank", d.KVAppend(cache, alloc(t, d, engine.F32, 6, 4, 8), 0), "kv append")
	wantArgError(t, "i32 rows into a float cache", d.KVAppend(cache, alloc(t, d, engine.I32, 2, 3, 4, 8), 0), "kv append")
	wantArgError(t, "float rows into an i32 cache", d.KVAppend(alloc(t, d, engine.I32, 2, 3, 10, 8), x, 0), "kv append")
	if err := d.KVAppend(cache, x, 6); err != nil {
		t.Errorf("the last positions: %v", err)
	}
}
