package vulkan

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/cpu"
)

// The int8 products with their RMSNorm folded in (engine.Int8NormLinear:
// one qmatmul.comp dispatch with NORM, and SWIGLU for the MLP) against the CPU backend's composition (RMSNorm
// into a scratch of x's dtype, then the int8 products) on the same
// inputs. The bound is normLinearBound's, with the dequantized weight in
// place of W and twice its h term (the composition may round the weight
// to x's dtype too).

// qnCase is one shape: m rows of width k, weights of ns columns in groups
// of g, the norm weight of dtype gdt.
type qnCase struct {
	dt, gdt engine.DType
	m, k, g int
	ns      []int
}

func (c qnCase) String() string {
	return fmt.Sprintf("%v norm %v M%d K%d G%d N%v", c.dt, c.gdt, c.m, c.k, c.g, c.ns)
}

// qnInputs are a case's values: x and g exact in their dtypes, the int8
// weights and their scales.
type qnInputs struct {
	x, g []float32
	q    [][]int8
	s    [][]float32
}

func (c qnCase) inputs(t *testing.T, rng *rand.Rand) qnInputs {
	in := qnInputs{x: randVals(rng, c.dt, c.m*c.k, 2), g: randVals(rng, c.gdt, c.k, 1)}
	for _, n := range c.ns {
		q, s, err := engine.QuantizeInt8(randVals(rng, engine.F32, n*c.k, 0.3), n, c.k, c.g)
		if err != nil {
			t.Fatal(err)
		}
		in.q, in.s = append(in.q, q), append(in.s, s)
	}
	return in
}

// weights uploads the case's int8 weights to dev.
func (c qnCase) weights(t *testing.T, dev engine.Device, in qnInputs) []engine.Int8Weight {
	var ws []engine.Int8Weight
	for i, n := range c.ns {
		w, err := engine.NewInt8Weight(dev, in.q[i], in.s[i], n, c.k, c.g)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Free(dev) })
		ws = append(ws, w)
	}
	return ws
}

// runQN runs NormLinearMultiInt8 (swiglu false) or NormLinearSwiGLUInt8 on
// dev and returns the outputs' values and the dispatches it ran.
func runQN(t *testing.T, dev engine.Device, c qnCase, in qnInputs, swiglu bool) ([][]float64, string) {
	t.Helper()
	ts := &tensors{t: t, dev: dev}
	defer ts.free()
	x, g := ts.make(c.dt, in.x, c.m, c.k), ts.make(c.gdt, in.g, c.k)
	ws := c.weights(t, dev, in)
	var outs []*engine.Tensor
	var fn func() error
	if swiglu {
		outs = []*engine.Tensor{ts.make(c.dt, make([]float32, c.m*c.ns[0]), c.m, c.ns[0])}
		fn = func() error {
			return engine.NormLinearSwiGLUInt8(dev, outs[0], x, g, ws[0], ws[1], 1e-6, nil, nil, nil)
		}
	} else {
		for _, n := range c.ns {
			outs = append(outs, ts.make(c.dt, make([]float32, c.m*n), c.m, n))
		}
		fn = func() error { return engine.NormLinearMultiInt8(dev, outs, ws, x, g, 1e-6, nil) }
	}
	ran := profiled(t, dev, fn)
	var vs [][]float64
	for _, o := range outs {
		vs = append(vs, heldValues(t, o))
	}
	return vs, ran
}

// qnCases: every row count 1..8, K and G the 16-byte path takes and ones
// it does not, the norm weight in x's dtype and in f32.
func qnCases() []qnCase {
	type shape struct {
		k, g int
		ns   []int
	}
	shapes := []shape{{64, 32, []int{24, 8, 8}}, {256, 128, []int{16, 16}}, {40, 8, []int{12, 5}}, {48, 48, []int{9, 9, 9, 9}}}
	var cs []qnCase
	for _, dt := range []engine.DType{engine.BF16, engine.F32} {
		for m := 1; m <= qmatmulMaxRows; m++ {
			s := shapes[(m+int(dt))%len(shapes)]
			gdt := dt
			if m%2 == 0 {
				gdt = engine.F32
			}
			cs = append(cs, qnCase{dt: dt, gdt: gdt, m: m, k: s.k, g: s.g, ns: s.ns})
		}
	}
	return cs
}

// qnBound is normLinearBound with the h term doubled (see above).
func qnBound(c qnCase, h []float64, in qnInputs, i, n int, odt engine.DType) ([]float64, []float64) {
	wd, err := engine.DequantizeInt8(in.q[i], in.s[i], n, c.k, c.g)
	if err != nil {
		panic(err)
	}
	y, e := gemvRef(h, f64s(wd), nil, c.m, n, c.k)
	for j := range e {
		e[j] *= 2
	}
	return y, normLinearBound(c.dt, odt, y, e, c.k)
}

// TestNormLinearMultiInt8 checks the folded norm against the CPU
// composition: one qmatmul dispatch for every weight, no RMSNorm.
func TestNormLinearMultiInt8(t *testing.T) {
	d := testDevice(t)
	c := cpu.New()
	rng := rand.New(rand.NewPCG(7, 3))
	for _, tc := range qnCases() {
		t.Run(tc.String(), func(t *testing.T) {
			in := tc.inputs(t, rng)
			got, ran := runQN(t, d, tc, in, false)
			if !strings.HasPrefix(ran, "qmatmul norm multi") || strings.Contains(ran, ";") {
				t.Fatalf("ran %q, want one qmatmul norm multi dispatch and nothing else", ran)
			}
			want, _ := runQN(t, c, tc, in, false)
			h := normRows(f64s(in.x), f64s(in.g), tc.m, tc.k, 1e-6)
			for i, n := range tc.ns {
				_, b := qnBound(tc, h, in, i, n, tc.dt)
				checkBound(t, fmt.Sprintf("out %d", i), got[i], want[i], b)
			}
		})
	}
}

// TestNormLinearSwiGLUInt8 checks the folded norm, int8 gate and up
// products and SwiGLU, one qmatmul dispatch, against the CPU composition.
func TestNormLinearSwiGLUInt8(t *testing.T) {
	d := testDevice(t)
	c := cpu.New()
	rng := rand.New(rand.NewPCG(8, 2))
	for _, tc := range qnCases() {
		tc.ns = []int{tc.ns[0], tc.ns[0]}
		t.Run(tc.String(), func(t *testing.T) {
			in := tc.inputs(t, rng)
			got, ran := runQN(t, d, tc, in, true)
			if !strings.HasPrefix(ran, "qmatmul norm swiglu") || strings.Contains(ran, ";") {
				t.Fatalf("ran %q, want one qmatmul norm swiglu dispatch and nothing else", ran)
			}
			want, _ := runQN(t, c, tc, in, true)
			h := normRows(f64s(in.x), f64s(in.g), tc.m, tc.k, 1e-6)
			n := tc.ns[0]
			gate, _ := qnBound(tc, h, in, 0, n, engine.F32)
			up, _ := qnBound(tc, h, in, 1, n, engine.F32)
			_, eg := gemvRef(h, dq(t, tc, in, 0), nil, tc.m, n, tc.k)
			_, eu := gemvRef(h, dq(t, tc, in, 1), nil, tc.m, n, tc.k)
			for j := range eg {
				eg[j], eu[j] = 2*eg[j], 2*eu[j]
			}
			checkBound(t, "act", got[0], want[0], swigluBound(tc.dt, gate, up, eg, eu, tc.k))
		})
	}
}

// dq is weight i of the case dequantized.
func dq(t *testing.T, c qnCase, in qnInputs, i int) []float64 {
	wd, err := engine.DequantizeInt8(in.q[i], in.s[i], c.ns[i], c.k, c.g)
	if err != nil {
		t.Fatal(err)
	}
	return f64s(wd)
}

// TestNormLinearInt8NonFinite: a NaN or an infinity in a row of x makes
// that row's outputs NaN, on the folded norm as in the composition.
func TestNormLinearInt8NonFinite(t *testing.T) {
	d := testDevice(t)
	c := cpu.New()
	rng := rand.New(rand.NewPCG(5, 5))
	for _, dt := range []engine.DType{engine.BF16, engine.F32} {
		for _, k := range []int{64, 40} {
			tc := qnCase{dt: dt, gdt: dt, m: 4, k: k, g: 8, ns: []int{12, 12}}
			t.Run(tc.String(), func(t *testing.T) {
				in := tc.inputs(t, rng)
				in.x[1*k+3] = float32(math.NaN())
				in.x[2*k+5] = float32(math.Inf(1))
				for _, swiglu := range []bool{false, true} {
					got, _ := runQN(t, d, tc, in, swiglu)
					want, _ := runQN(t, c, tc, in, swiglu)
					for i := range got {
						for j, w := range want[i] {
							row := j / tc.ns[0]
							nan := row == 1 || row == 2
							if math.IsNaN(w) != nan || math.IsNaN(got[i][j]) != nan {
								t.Fatalf("swiglu %v out %d [%d, %d] = %v, composition %v; want NaN %v", swiglu, i, row, j%tc.ns[0], got[i][j], w, nan)
							}
						}
					}
				}
			})
		}
	}
}

// TestNormLinearInt8Declines: more rows than the kernel takes come back
// (false, nil), so the engine composes; bad operands are errors.
func TestNormLinearInt8Declines(t *testing.T) {
	d := testDevice(t)
	ts := &tensors{t: t, dev: d}
	defer ts.free()
	rng := rand.New(rand.NewPCG(2, 9))
	tc := qnCase{dt: engine.BF16, gdt: engine.F32, m: 9, k: 32, g: 16, ns: []int{8, 8}}
	in := tc.inputs(t, rng)
	ws := tc.weights(t, d, in)
	x9, x4, g := ts.make(tc.dt, in.x, 9, 32), ts.make(tc.dt, in.x[:4*32], 4, 32), ts.make(tc.gdt, in.g, 32)
	o9, o4 := ts.make(tc.dt, make([]float32, 9*8), 9, 8), ts.make(tc.dt, make([]float32, 4*8), 4, 8)
	if done, err := d.NormLinearMultiInt8([]*engine.Tensor{o9, o9}, ws, x9, g, 1e-6); done || err != nil {
		t.Errorf("multi, 9 rows: (%v, %v), want (false, nil)", done, err)
	}
	if done, err := d.NormLinearSwiGLUInt8(o9, x9, g, ws[0], ws[1], 1e-6); done || err != nil {
		t.Errorf("swiglu, 9 rows: (%v, %v), want (false, nil)", done, err)
	}
	if done, err := d.NormLinearMultiInt8([]*engine.Tensor{o4, o4, o4, o4, o4}, append(ws, ws[0], ws[1], ws[0]), x4, g, 1e-6); done || err != nil {
		t.Errorf("multi, 5 weights: (%v, %v), want (false, nil)", done, err)
	}
	if done, err := d.NormLinearMultiInt8([]*engine.Tensor{o9}, ws[:1], x4, g, 1e-6); !done || err == nil {
		t.Errorf("multi, an output of the wrong rows: (%v, %v), want an error", done, err)
	}
	if done, err := d.NormLinearSwiGLUInt8(o4, x4, ts.make(tc.gdt, in.g[:16], 16), ws[0], ws[1], 1e-6); !done || err == nil {
		t.Errorf("swiglu, a norm weight of the wrong width: (%v, %v), want an error", done, err)
	}
	// The composition gives the same answer as the fused form would
	// decline to: 9 rows through engine.NormLinearMultiInt8.
	if err := engine.NormLinearMultiInt8(d, []*engine.Tensor{o9, o9}, ws, x9, g, 1e-6, nil); err != nil {
		t.Errorf("composition of 9 rows: %v", err)
	}
}
