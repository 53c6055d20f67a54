package vulkan

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/engine"
)

// The int8 matrix-vector kernel (qmatmul.comp) at a decode step's shapes:
// rows long enough that every invocation loops over several groups of
// four loads on any subgroup size (K = 2048 and 3072 are 128 and 192
// pieces of 16 weights: more than the four a 32-wide subgroup's
// invocations load at once), for LinearInt8 (accumulating, as the
// output and down projections do), LinearMultiInt8 and LinearSwiGLUInt8,
// against the exact product of the dequantized weight. The kernel's
// arithmetic is f32 (the products of 16-bit x and int8 weights exact, the
// scale applied to each 16-term sum), so its error is at most
// delta = gamma_{K+4} E with E = sum_k |x_k W_nk| (+ |c|), and then the
// rounding to the output dtype: u (|y| + delta) + delta.

// qmBound is that bound for outputs of dtype odt.
func qmBound(odt engine.DType, y, e []float64, k int) []float64 {
	u, g := unitRound(odt), gammaN(k+4)
	b := make([]float64, len(y))
	for i := range y {
		delta := g * e[i]
		b[i] = u*(math.Abs(y[i])+delta) + delta + tiny(odt)
	}
	return b
}

// qmWeight is a random int8 weight [n, k] in groups of g on d, and its
// dequantized values.
func qmWeight(t *testing.T, d *Device, rng *rand.Rand, n, k, g int) (engine.Int8Weight, []float64) {
	t.Helper()
	q, s, err := engine.QuantizeInt8(randVals(rng, engine.F32, n*k, 0.3), n, k, g)
	if err != nil {
		t.Fatal(err)
	}
	w, err := engine.NewInt8Weight(d, q, s, n, k, g)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Free(d) })
	wd, err := engine.DequantizeInt8(q, s, n, k, g)
	if err != nil {
		t.Fatal(err)
	}
	return w, f64s(wd)
}

// onceRan fails unless ran is one dispatch named with prefix.
func onceRan(t *testing.T, ran, prefix string) {
	t.Helper()
	if !strings.HasPrefix(ran, prefix) || strings.Contains(ran, ";") {
		t.Fatalf("ran %q, want one %s dispatch", ran, prefix)
	}
}

func TestQMatMulDecodeShapes(t *testing.T) {
	d := testDevice(t)
	if _, _, ok := d.gemvShape(); !ok {
		t.Skip("no GEMV kernel on this device")
	}
	rng := rand.New(rand.NewPCG(11, 4))
	for _, dt := range []engine.DType{engine.BF16, engine.F32} {
		// The down projection, accumulated into the residual; the last
		// shape's K and G (3000, 100) take the weight-by-weight loads.
		for _, s := range []struct{ m, n, k, g int }{{1, 40, 3072, 128}, {4, 24, 3072, 3072}, {8, 16, 2048, 64}, {2, 24, 3000, 100}} {
			t.Run(fmt.Sprintf("linear %v M%d N%d K%d G%d", dt, s.m, s.n, s.k, s.g), func(t *testing.T) {
				ts := &tensors{t: t, dev: d}
				defer ts.free()
				w, wd := qmWeight(t, d, rng, s.n, s.k, s.g)
				xv, cv := randVals(rng, dt, s.m*s.k, 1), randVals(rng, dt, s.m*s.n, 1)
				x, o := ts.make(dt, xv, s.m, s.k), ts.make(dt, cv, s.m, s.n)
				onceRan(t, kernelsRun(t, d, func() error { return d.LinearInt8(o, x, w, true) }), "qmatmul M")
				y, e := gemvRef(f64s(xv), wd, f64s(cv), s.m, s.n, s.k)
				checkBound(t, "out", heldValues(t, o), y, qmBound(dt, y, e, s.k))
			})
		}
		t.Run(fmt.Sprintf("multi %v", dt), func(t *testing.T) {
			const m, k, g = 2, 2048, 128
			ns := []int{48, 16, 16}
			ts := &tensors{t: t, dev: d}
			defer ts.free()
			xv := randVals(rng, dt, m*k, 1)
			x := ts.make(dt, xv, m, k)
			var ws []engine.Int8Weight
			var wds [][]float64
			var outs []*engine.Tensor
			for _, n := range ns {
				w, wd := qmWeight(t, d, rng, n, k, g)
				ws, wds = append(ws, w), append(wds, wd)
				outs = append(outs, ts.make(dt, make([]float32, m*n), m, n))
			}
			onceRan(t, kernelsRun(t, d, func() error {
				done, err := d.LinearMultiInt8(outs, ws, x)
				if err == nil && !done {
					err = fmt.Errorf("declined")
				}
				return err
			}), "qmatmul multi 3 weights")
			for i, n := range ns {
				y, e := gemvRef(f64s(xv), wds[i], nil, m, n, k)
				checkBound(t, fmt.Sprintf("out %d", i), heldValues(t, outs[i]), y, qmBound(dt, y, e, k))
			}
		})
		t.Run(fmt.Sprintf("swiglu %v", dt), func(t *testing.T) {
			const m, n, k, g = 1, 24, 2048, 128
			ts := &tensors{t: t, dev: d}
			defer ts.free()
			wg, gd := qmWeight(t, d, rng, n, k, g)
			wu, ud := qmWeight(t, d, rng, n, k, g)
			xv := randVals(rng, dt, m*k, 1)
			x, act := ts.make(dt, xv, m, k), ts.make(dt, make([]float32, m*n), m, n)
			onceRan(t, kernelsRun(t, d, func() error {
				done, err := d.LinearSwiGLUInt8(act, x, wg, wu)
				if err == nil && !done {
					err = fmt.Errorf("declined")
				}
				return err
			}), "qmatmul swiglu")
			gate, eg := gemvRef(f64s(xv), gd, nil, m, n, k)
			up, eu := gemvRef(f64s(xv), ud, nil, m, n, k)
			checkBound(t, "act", heldValues(t, act), swiglu(gate, up), qmSwiGLUBound(dt, gate, up, eg, eu, k))
		})
	}
}

// qmSwiGLUBound bounds act = silu(g) u computed from the f32 products g
// and u (each off by at most delta = gamma_{K+4} E) and rounded to dt:
// the products' errors through the activation's partial derivatives
// (with 1% for their variation over the interval, and the second-order
// term), a few f32 roundings of the activation itself and the output's.
func qmSwiGLUBound(dt engine.DType, gate, up, eg, eu []float64, k int) []float64 {
	uo, g := unitRound(dt), gammaN(k+4)
	b := make([]float64, len(gate))
	for i, z := range gate {
		s := 1 / (1 + math.Exp(-z))
		dg, du := g*eg[i], g*eu[i]
		b[i] = (uo+8*u32)*math.Abs(z*s*up[i]) + math.Abs(up[i]*s*(1+z*(1-s)))*dg*1.01 + math.Abs(z*s)*du*1.01 + dg*du + tiny(dt)
	}
	return b
}

// swiglu is silu(g) u elementwise.
func swiglu(g, u []float64) []float64 {
	out := make([]float64, len(g))
	for i, z := range g {
		out[i] = z / (1 + math.Exp(-z)) * u[i]
	}
	return out
}
