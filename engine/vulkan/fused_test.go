package vulkan

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/cpu"
)

// The fused decode-step ops (engine.NormLinear: the GEMV kernel with its
// NORM prologue; engine.DecodePreparer: decode_prep.comp) against the CPU
// backend's compositions (RMSNorm into a scratch of x's dtype, then the
// products; RMSNormRoPE, SwapAxes12 and KVAppendAt) on the same inputs.
//
// Rounding model (docs/ENGINE.md, "Conformance bounds"). With h the exact
// normed rows, y = h W^T and E = sum_k |h_k| |W_k|: the composition rounds
// h to x's dtype (u_h E), and both sum in f32 (delta = gamma_{K+4} E: K
// additions, the product, the scaling by g and by rstd, rstd's own
// rounding), then round to the output dtype (u_o (|y| + u_h E + delta)).
// So
//
//	|vulkan - cpu| <= 2 u_o (|y| + u_h E + delta) + u_h E + 2 delta.

// normRows returns the exact RMSNorm of the rows of x [m, k] with g [k].
func normRows(x, g []float64, m, k int, eps float64) []float64 {
	h := make([]float64, m*k)
	for i := range m {
		var ss float64
		for _, v := range x[i*k : (i+1)*k] {
			ss += v * v
		}
		r := 1 / math.Sqrt(ss/float64(k)+eps)
		for j := range k {
			h[i*k+j] = x[i*k+j] * r * g[j]
		}
	}
	return h
}

// normLinearBound is the bound above for outputs y with conditions e (and
// the outputs' subnormal spacing, tiny, for a rounding below the normal
// range).
func normLinearBound(xdt, odt engine.DType, y, e []float64, k int) []float64 {
	uh, uo, g := unitRound(xdt), unitRound(odt), gammaN(k+4)
	b := make([]float64, len(y))
	for i := range y {
		delta := g * e[i]
		b[i] = 2*uo*(math.Abs(y[i])+uh*e[i]+delta) + uh*e[i] + 2*delta + tiny(odt)
	}
	return b
}

// tiny is the spacing of a dtype's subnormals: a rounding's absolute error
// below its normal range is at most half of it.
func tiny(dt engine.DType) float64 {
	switch dt {
	case engine.F16:
		return 0x1p-24
	case engine.BF16:
		return 0x1p-133
	}
	return 0x1p-149
}

// nlCase is one NormLinear shape: m rows (over batch sequences) of width k
// against weights of ns columns; gdt is the norm weight's dtype.
type nlCase struct {
	dt, gdt engine.DType
	m, k    int
	ns      []int
	batch   int
}

func (c nlCase) String() string {
	return fmt.Sprintf("%v norm %v M%d K%d N%v batch %d", c.dt, c.gdt, c.m, c.k, c.ns, c.batch)
}

// nlCases are every row count 1..8 for each dtype, K a multiple of 8
// (16-byte loads) and not (element-wise), one to four weights, the norm
// weight in x's dtype and in f32, a batch of two sharing the weights.
func nlCases() []nlCase {
	type shape struct {
		k  int
		ns []int
	}
	shapes := []shape{{72, []int{40, 24, 24}}, {264, []int{16, 8, 8, 16}}, {32, []int{9, 33}}, {37, []int{12}},
		{1024, []int{20, 8}}, {12, []int{5, 7, 3}}}
	var cs []nlCase
	for _, dt := range []engine.DType{engine.BF16, engine.F16, engine.F32} {
		for m := 1; m <= gemvMaxRows; m++ {
			s := shapes[(m+int(dt))%len(shapes)]
			gdt := dt
			if m%2 == 0 {
				gdt = engine.F32
			}
			batch := 1
			if m == 4 || m == 6 {
				batch = 2
			}
			cs = append(cs, nlCase{dt: dt, gdt: gdt, m: m, k: s.k, ns: s.ns, batch: batch})
		}
	}
	return cs
}

// nlInputs are a case's values, exact in their dtypes.
type nlInputs struct {
	x, g []float32
	ws   [][]float32
}

func (c nlCase) inputs(rng *rand.Rand) nlInputs {
	in := nlInputs{x: randVals(rng, c.dt, c.m*c.k, 2), g: randVals(rng, c.gdt, c.k, 1)}
	for _, n := range c.ns {
		in.ws = append(in.ws, randVals(rng, c.dt, n*c.k, 1))
	}
	return in
}

// xShape is x's shape ([m, k], or [batch, m/batch, k]); rowShape(n) an
// output's.
func (c nlCase) xShape() []int { return c.rowShape(c.k) }
func (c nlCase) rowShape(n int) []int {
	if c.batch > 1 {
		return []int{c.batch, c.m / c.batch, n}
	}
	return []int{c.m, n}
}

// profiled runs fn, under a profile on a Vulkan device, and returns the
// names of its dispatches there ("" elsewhere).
func profiled(t *testing.T, dev engine.Device, fn func() error) string {
	t.Helper()
	if d, ok := dev.(*Device); ok {
		return kernelsRun(t, d, fn)
	}
	if err := fn(); err != nil {
		t.Fatal(err)
	}
	return ""
}

// runNormLinearMulti runs engine.NormLinearMulti on dev and returns the
// outputs' values and the dispatches it ran.
func runNormLinearMulti(t *testing.T, dev engine.Device, c nlCase, in nlInputs) ([][]float64, string) {
	t.Helper()
	ts := &tensors{t: t, dev: dev}
	defer ts.free()
	x, g := ts.make(c.dt, in.x, c.xShape()...), ts.make(c.gdt, in.g, c.k)
	var outs, ws []*engine.Tensor
	for i, n := range c.ns {
		ws = append(ws, ts.make(c.dt, in.ws[i], n, c.k))
		outs = append(outs, ts.make(c.dt, make([]float32, c.m*n), c.rowShape(n)...))
	}
	ran := profiled(t, dev, func() error { return engine.NormLinearMulti(dev, outs, ws, x, g, 1e-6, nil) })
	var vs [][]float64
	for _, o := range outs {
		vs = append(vs, heldValues(t, o))
	}
	return vs, ran
}

func f64s(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, f := range v {
		out[i] = float64(f)
	}
	return out
}

// TestNormLinearMulti checks the fused norm and multi-weight GEMV against
// the CPU composition, and that it is one dispatch of the kernel.
func TestNormLinearMulti(t *testing.T) {
	d := testDevice(t)
	if _, _, ok := d.gemvShape(); !ok {
		t.Skip("no GEMV kernel on this device")
	}
	c := cpu.New()
	rng := rand.New(rand.NewPCG(3, 5))
	for _, tc := range nlCases() {
		t.Run(tc.String(), func(t *testing.T) {
			in := tc.inputs(rng)
			got, ran := runNormLinearMulti(t, d, tc, in)
			if !strings.Contains(ran, "gemv norm multi") || strings.Count(ran, ";") != 0 {
				t.Fatalf("ran %q, want one gemv norm multi dispatch", ran)
			}
			want, _ := runNormLinearMulti(t, c, tc, in)
			h := normRows(f64s(in.x), f64s(in.g), tc.m, tc.k, 1e-6)
			for i, n := range tc.ns {
				y, e := gemvRef(h, f64s(in.ws[i]), nil, tc.m, n, tc.k)
				b := normLinearBound(tc.dt, tc.dt, y, e, tc.k)
				checkBound(t, fmt.Sprintf("out %d", i), got[i], want[i], b)
			}
		})
	}
}

// runNormSwiGLU runs engine.NormLinearSwiGLU on dev ([m, n] act) and
// returns act's values and the dispatches it ran.
func runNormSwiGLU(t *testing.T, dev engine.Device, c nlCase, in nlInputs) ([]float64, string) {
	t.Helper()
	ts := &tensors{t: t, dev: dev}
	defer ts.free()
	n := c.ns[0]
	x, g := ts.make(c.dt, in.x, c.xShape()...), ts.make(c.gdt, in.g, c.k)
	wg, wu := ts.make(c.dt, in.ws[0], n, c.k), ts.make(c.dt, in.ws[1], n, c.k)
	act := ts.make(c.dt, make([]float32, c.m*n), c.rowShape(n)...)
	ran := profiled(t, dev, func() error { return engine.NormLinearSwiGLU(dev, act, x, g, wg, wu, 1e-6, nil, nil, nil) })
	return heldValues(t, act), ran
}

// swigluBound bounds |vulkan - cpu| of act = silu(gate) up: the gate's and
// up's errors (normLinearBound, with the composition's rounding of each to
// act's dtype, u_o |z|) through |up silu'(gate)| and |silu(gate)|, the
// outputs' rounding (2 u_o |act|) and f32's exp and products.
func swigluBound(dt engine.DType, gate, up, eg, eu []float64, k int) []float64 {
	uo := unitRound(dt)
	bg, bu := normLinearBound(dt, engine.F32, gate, eg, k), normLinearBound(dt, engine.F32, up, eu, k)
	b := make([]float64, len(gate))
	for i, z := range gate {
		s := 1 / (1 + math.Exp(-z))
		act := z * s * up[i]
		dg := bg[i] + uo*math.Abs(z)
		du := bu[i] + uo*math.Abs(up[i])
		b[i] = (2*uo+16*u32)*math.Abs(act) + math.Abs(up[i]*s*(1+z*(1-s)))*dg*1.01 + math.Abs(z*s)*du*1.01 + dg*du
	}
	return b
}

// TestNormLinearSwiGLU checks the fused norm, gate and up products and
// SwiGLU against the CPU composition.
func TestNormLinearSwiGLU(t *testing.T) {
	d := testDevice(t)
	if _, _, ok := d.gemvShape(); !ok {
		t.Skip("no GEMV kernel on this device")
	}
	c := cpu.New()
	rng := rand.New(rand.NewPCG(9, 1))
	for _, tc := range nlCases() {
		tc.ns = []int{tc.ns[0], tc.ns[0]}
		t.Run(tc.String(), func(t *testing.T) {
			in := tc.inputs(rng)
			for i := range in.ws {
				for j := range in.ws[i] {
					in.ws[i][j] = tc.dt.Round(in.ws[i][j] * 0.3)
				}
			}
			got, ran := runNormSwiGLU(t, d, tc, in)
			if !strings.Contains(ran, "gemv norm swiglu") || strings.Count(ran, ";") != 0 {
				t.Fatalf("ran %q, want one gemv norm swiglu dispatch", ran)
			}
			want, _ := runNormSwiGLU(t, c, tc, in)
			n := tc.ns[0]
			h := normRows(f64s(in.x), f64s(in.g), tc.m, tc.k, 1e-6)
			gate, eg := gemvRef(h, f64s(in.ws[0]), nil, tc.m, n, tc.k)
			up, eu := gemvRef(h, f64s(in.ws[1]), nil, tc.m, n, tc.k)
			checkBound(t, "act", got, want, swigluBound(tc.dt, gate, up, eg, eu, tc.k))
		})
	}
}

// TestNormLinearNonFinite: a NaN or an infinity in a row of x makes that
// row's outputs NaN (its rstd is NaN or 0 against an infinite sum), and a
// NaN in a weight its column, on the fused kernel as in the composition.
func TestNormLinearNonFinite(t *testing.T) {
	d := testDevice(t)
	if _, _, ok := d.gemvShape(); !ok {
		t.Skip("no GEMV kernel on this device")
	}
	c := cpu.New()
	rng := rand.New(rand.NewPCG(4, 4))
	for _, dt := range []engine.DType{engine.BF16, engine.F16, engine.F32} {
		for _, k := range []int{64, 20} {
			tc := nlCase{dt: dt, gdt: dt, m: 4, k: k, ns: []int{12, 12}, batch: 1}
			t.Run(tc.String(), func(t *testing.T) {
				in := tc.inputs(rng)
				in.x[1*k+3] = float32(math.NaN())
				in.x[2*k+5] = float32(math.Inf(1))
				in.ws[1][7*k+2] = float32(math.NaN())
				got, _ := runNormLinearMulti(t, d, tc, in)
				want, _ := runNormLinearMulti(t, c, tc, in)
				for i := range got {
					for j, w := range want[i] {
						row, col := j/tc.ns[i], j%tc.ns[i]
						nan := row == 1 || row == 2 || (i == 1 && col == 7)
						if math.IsNaN(w) != nan || math.IsNaN(got[i][j]) != nan {
							t.Fatalf("out %d [%d, %d] = %v, composition %v; want NaN %v", i, row, col, got[i][j], w, nan)
						}
					}
				}
				sw, _ := runNormSwiGLU(t, d, tc, in)
				for j, v := range sw {
					row, col := j/12, j%12
					if nan := row == 1 || row == 2 || col == 7; math.IsNaN(v) != nan {
						t.Fatalf("act [%d, %d] = %v, want NaN %v", row, col, v, nan)
					}
				}
			})
		}
	}
}

// TestNormLinearDeclines: what the kernel does not take comes back
// (false, nil) with nothing written, so the engine composes; bad operands
// are errors.
func TestNormLinearDeclines(t *testing.T) {
	d := testDevice(t)
	if _, _, ok := d.gemvShape(); !ok {
		t.Skip("no GEMV kernel on this device")
	}
	ts := &tensors{t: t, dev: d}
	defer ts.free()
	rng := rand.New(rand.NewPCG(2, 8))
	mk := func(dt engine.DType, shape ...int) *engine.Tensor {
		n := 1
		for _, s := range shape {
			n *= s
		}
		return ts.make(dt, randVals(rng, dt, n, 1), shape...)
	}
	bf := engine.BF16
	x, x9, g := mk(bf, 4, 16), mk(bf, 9, 16), mk(engine.F32, 16)
	w, w32 := mk(bf, 8, 16), mk(engine.F32, 8, 16)
	o, o9, o16 := mk(bf, 4, 8), mk(bf, 9, 8), mk(engine.F16, 4, 8)
	o2 := mk(bf, 4, 8)
	declined := []struct {
		name string
		run  func(*Device) (bool, error)
	}{
		{"nine rows", func(d *Device) (bool, error) {
			return d.NormLinearMulti([]*engine.Tensor{o9}, []*engine.Tensor{w}, x9, g, 1e-6)
		}},
		{"nine rows swiglu", func(d *Device) (bool, error) { return d.NormLinearSwiGLU(o9, x9, g, w, w, 1e-6) }},
		{"weights of two dtypes", func(d *Device) (bool, error) {
			return d.NormLinearMulti([]*engine.Tensor{o, o2}, []*engine.Tensor{w, w32}, x, g, 1e-6)
		}},
		{"gate and up of two dtypes", func(d *Device) (bool, error) { return d.NormLinearSwiGLU(o, x, g, w, w32, 1e-6) }},
		{"an output of another 16-bit dtype", func(d *Device) (bool, error) {
			return d.NormLinearMulti([]*engine.Tensor{o16}, []*engine.Tensor{w}, x, g, 1e-6)
		}},
		{"five weights", func(d *Device) (bool, error) {
			os := []*engine.Tensor{o, o, o, o, o}
			return d.NormLinearMulti(os, []*engine.Tensor{w, w, w, w, w}, x, g, 1e-6)
		}},
	}
	before := heldValues(t, o)
	for _, c := range declined {
		if done, err := c.run(d); done || err != nil {
			t.Errorf("%s: (%v, %v), want declined", c.name, done, err)
		}
	}
	if after := heldValues(t, o); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Error("a declined call wrote its output")
	}
	// NoGEMV turns the kernel, and so the fusion, off.
	nd := testDeviceWith(t, Options{NoGEMV: true})
	nts := &tensors{t: t, dev: nd}
	defer nts.free()
	nx, ng, nw, no := nts.make(bf, make([]float32, 16), 1, 16), nts.make(bf, make([]float32, 16), 16),
		nts.make(bf, make([]float32, 128), 8, 16), nts.make(bf, make([]float32, 8), 1, 8)
	if done, err := nd.NormLinearMulti([]*engine.Tensor{no}, []*engine.Tensor{nw}, nx, ng, 1e-6); done || err != nil {
		t.Errorf("NoGEMV: (%v, %v), want declined", done, err)
	}
	if done, err := nd.NormLinearSwiGLU(no, nx, ng, nw, nw, 1e-6); done || err != nil {
		t.Errorf("NoGEMV swiglu: (%v, %v), want declined", done, err)
	}
	// Operand errors are reported, not declined.
	if _, err := d.NormLinearMulti([]*engine.Tensor{o}, []*engine.Tensor{w}, x, mk(bf, 15), 1e-6); err == nil {
		t.Error("a norm weight of the wrong width was accepted")
	}
	if _, err := d.NormLinearSwiGLU(mk(bf, 4, 7), x, g, w, w, 1e-6); err == nil {
		t.Error("an activation of the wrong width was accepted")
	}
}

// dpCase is one DecodePrep shape.
type dpCase struct {
	dt, cdt          engine.DType // projections', caches' dtypes
	b, l, hq, hkv, d int
	capacity         int
	perSeq, probe    bool
	theta            float32
	maxPos           int
}

func (c dpCase) String() string {
	return fmt.Sprintf("%v cache %v B%d L%d Hq%d Hkv%d D%d cap %d perSeq %v r %v", c.dt, c.cdt, c.b, c.l, c.hq, c.hkv,
		c.d, c.capacity, c.perSeq, c.probe)
}

// dpSet is a DecodePrep's tensors on one device.
type dpSet struct {
	a        engine.DecodePrepArgs
	kc0, vc0 []float32 // the caches' initial values
}

// dpValues are a case's inputs, shared by the two devices.
type dpValues struct {
	q, k, v, r, qn, kn, rn, kc, vc []float32
	pos, starts                    []float32
}

func (c dpCase) values(rng *rand.Rand) dpValues {
	kv, qs := c.b*c.l*c.hkv*c.d, c.b*c.l*c.hq*c.d
	cs := c.b * c.hkv * c.capacity * c.d
	v := dpValues{q: randVals(rng, c.dt, qs, 2), k: randVals(rng, c.dt, kv, 2), v: randVals(rng, c.dt, kv, 1),
		r: randVals(rng, c.dt, qs, 2), qn: randVals(rng, c.dt, c.d, 1), kn: randVals(rng, c.dt, c.d, 1),
		rn: randVals(rng, c.dt, c.d, 0.5), kc: randVals(rng, c.cdt, cs, 1), vc: randVals(rng, c.cdt, cs, 1)}
	np := c.l
	if c.perSeq {
		np = c.b * c.l
	}
	for range np {
		v.pos = append(v.pos, float32(rng.IntN(c.maxPos)))
	}
	for range c.b {
		v.starts = append(v.starts, float32(rng.IntN(c.capacity-c.l+1)))
	}
	return v
}

func (c dpCase) set(ts *tensors, v dpValues) *dpSet {
	b, l, hq, hkv, d := c.b, c.l, c.hq, c.hkv, c.d
	pshape := []int{l}
	if c.perSeq {
		pshape = []int{b, l}
	}
	s := &dpSet{kc0: v.kc, vc0: v.vc}
	s.a = engine.DecodePrepArgs{
		Q: ts.make(c.dt, v.q, b, l, hq, d), K: ts.make(c.dt, v.k, b, l, hkv, d), V: ts.make(c.dt, v.v, b, l, hkv, d),
		QNorm: ts.make(c.dt, v.qn, d), KNorm: ts.make(c.dt, v.kn, d), QOut: ts.make(c.dt, make([]float32, len(v.q)), b, hq, l, d),
		KCache: ts.make(c.cdt, v.kc, b, hkv, c.capacity, d), VCache: ts.make(c.cdt, v.vc, b, hkv, c.capacity, d),
		Pos: ts.make(engine.I32, v.pos, pshape...), Starts: ts.make(engine.I32, v.starts, b), Eps: 1e-6, Theta: c.theta,
	}
	if c.probe {
		s.a.R, s.a.RNorm = ts.make(c.dt, v.r, b, l, hq, d), ts.make(c.dt, v.rn, d)
		s.a.ROut = ts.make(c.dt, make([]float32, len(v.r)), b, hq, l, d)
	}
	return s
}

// ropeBound bounds |vulkan - cpu| of normed, rotated rows of dtype dt:
// both round to dt (2 u |y|), and their f32 arithmetic (the norm, the
// table's f32 frequencies and the reduced angle: up to maxPos 2^-23
// radians) moves each value by at most that angle error plus 32 u32 of
// its pair's magnitude |(y_i, y_{i+D/2})|; tiny(dt) covers the roundings
// below dt's normal range.
func ropeBound(dt engine.DType, y []float64, d, maxPos int) []float64 {
	u, half := unitRound(dt), d/2
	ang := float64(maxPos)*0x1p-23 + 32*u32
	b := make([]float64, len(y))
	for i := range y {
		j := i - i%d + (i%d+half)%d
		mag := math.Hypot(y[i], y[j])
		b[i] = 2*u*math.Abs(y[i]) + (1+2*u)*ang*mag + tiny(dt)
	}
	return b
}

// TestDecodePrep checks the one-dispatch decode preparation against the
// CPU composition: one and several positions, per-sequence positions,
// with and without the probes, caches of the projections' dtype (v's
// rows copied bit for bit) and of f32, any even head dimension; the
// cache rows a sequence does not append must be unchanged.
func TestDecodePrep(t *testing.T) {
	d := testDevice(t)
	c := cpu.New()
	rng := rand.New(rand.NewPCG(6, 6))
	shapes := []dpCase{
		{b: 1, l: 1, hq: 4, hkv: 2, d: 128, capacity: 9, probe: true, theta: 1e6},
		{b: 3, l: 1, hq: 4, hkv: 2, d: 64, capacity: 7, perSeq: true, probe: true, theta: 1e4},
		{b: 2, l: 2, hq: 2, hkv: 1, d: 16, capacity: 6, perSeq: true, theta: 1e4},
		{b: 2, l: 3, hq: 2, hkv: 2, d: 32, capacity: 8, probe: true, theta: 1e4},
		{b: 2, l: 2, hq: 6, hkv: 2, d: 12, capacity: 5, probe: true, theta: 1e4},
		{b: 1, l: 1, hq: 2, hkv: 1, d: 256, capacity: 3, theta: 1e6},
	}
	for _, dt := range []engine.DType{engine.BF16, engine.F16, engine.F32} {
		for i, s := range shapes {
			s.dt, s.cdt, s.maxPos = dt, dt, 64
			if i == 1 && dt != engine.F32 {
				// An f32 cache (with L = 1: the composition's swap of v
				// into VH needs v's dtype).
				s.cdt = engine.F32
			}
			t.Run(s.String(), func(t *testing.T) {
				v := s.values(rng)
				vt, ct := &tensors{t: t, dev: d}, &tensors{t: t, dev: c}
				defer vt.free()
				defer ct.free()
				vs, cs := s.set(vt, v), s.set(ct, v)
				ran := kernelsRun(t, d, func() error {
					done, err := d.DecodePrep(vs.a)
					if err == nil && !done {
						err = errors.New("DecodePrep declined")
					}
					return err
				})
				if ran != "decode prep" {
					t.Fatalf("ran %q, want one decode prep dispatch", ran)
				}
				if err := engine.DecodePrep(c, cs.a); err != nil {
					t.Fatal(err)
				}
				if err := d.Sync(); err != nil {
					t.Fatal(err)
				}
				for _, p := range []struct {
					name     string
					got, ref *engine.Tensor
					dt       engine.DType
				}{{"qOut", vs.a.QOut, cs.a.QOut, s.dt}, {"rOut", vs.a.ROut, cs.a.ROut, s.dt},
					{"kCache", vs.a.KCache, cs.a.KCache, s.cdt}} {
					if p.got == nil {
						continue
					}
					want := heldValues(t, p.ref)
					checkBound(t, p.name, heldValues(t, p.got), want, ropeBound(p.dt, want, s.d, s.maxPos))
				}
				got, want := heldValues(t, vs.a.VCache), heldValues(t, cs.a.VCache)
				for i := range want {
					if got[i] != want[i] {
						t.Fatalf("vCache[%d] = %v, want %v (a copy)", i, got[i], want[i])
					}
				}
				// The rows outside [start, start + L) are as they were.
				kc := heldValues(t, vs.a.KCache)
				for bh := range s.b * s.hkv {
					st := int(v.starts[bh/s.hkv])
					for p := range s.capacity {
						if p >= st && p < st+s.l {
							continue
						}
						for e := range s.d {
							i := (bh*s.capacity+p)*s.d + e
							if kc[i] != float64(v.kc[i]) {
								t.Fatalf("kCache[%d] changed outside the appended rows", i)
							}
						}
					}
				}
			})
		}
	}
}

// TestDecodePrepBadStart: a start past Cap - L writes nothing into its
// sequence's caches (the other sequence's rows and q still are), and the
// error comes at Sync, as KVAppendAt's.
func TestDecodePrepBadStart(t *testing.T) {
	d := testDevice(t)
	rng := rand.New(rand.NewPCG(1, 9))
	s := dpCase{dt: engine.BF16, cdt: engine.BF16, b: 2, l: 2, hq: 2, hkv: 1, d: 16, capacity: 6, theta: 1e4, maxPos: 16}
	for _, bad := range []float32{5, -1} {
		t.Run(fmt.Sprintf("start %v", bad), func(t *testing.T) {
			v := s.values(rng)
			v.starts = []float32{1, bad}
			ts := &tensors{t: t, dev: d}
			defer ts.free()
			set := s.set(ts, v)
			if done, err := d.DecodePrep(set.a); !done || err != nil {
				t.Fatalf("DecodePrep: (%v, %v)", done, err)
			}
			err := d.Sync()
			if err == nil || !strings.Contains(err.Error(), "start") {
				t.Fatalf("Sync: %v, want the bad start reported", err)
			}
			kc, vc := heldValues(t, set.a.KCache), heldValues(t, set.a.VCache)
			per := s.hkv * s.capacity * s.d
			for i := per; i < 2*per; i++ {
				if kc[i] != float64(v.kc[i]) || vc[i] != float64(v.vc[i]) {
					t.Fatalf("cache element %d of the bad sequence changed", i)
				}
			}
			if string(fmt.Sprint(kc[:per])) == string(fmt.Sprint(f64s(v.kc[:per]))) {
				t.Fatal("the good sequence's k rows were not appended")
			}
			if q := heldValues(t, set.a.QOut); q[len(q)-1] == 0 {
				t.Fatal("qOut of the bad sequence was not written")
			}
		})
	}
}

// fusedStep is a decode-like step on the fused ops: NormLinearMulti (the
// attention norm and q, k, v), DecodePrep, the decode attention,
// the output projection accumulated into the residual, NormLinearSwiGLU
// (the MLP norm, gate, up), the down projection and an f32 logit product.
type fusedStep struct {
	x, n1, n2, qn, kn, wq, wk, wv, wo, wg, wu, wd, wl *engine.Tensor
	q, k, v, qo, kc, vc, att, res, act, mlp, logits   *engine.Tensor
	pos, starts, lens                                 *engine.Tensor
	q8                                                *fusedInt8 // int8 weights for stepInt8, or nil
}

const (
	fsDim, fsHq, fsHkv, fsD, fsCap, fsFFN, fsVocab = 64, 4, 2, 16, 24, 96, 40
)

func newFusedStep(ts *tensors, rng *rand.Rand) *fusedStep {
	dt := engine.BF16
	mk := func(scale float64, shape ...int) *engine.Tensor {
		n := 1
		for _, s := range shape {
			n *= s
		}
		return ts.make(dt, randVals(rng, dt, n, scale), shape...)
	}
	zero := func(dt engine.DType, shape ...int) *engine.Tensor {
		n := 1
		for _, s := range shape {
			n *= s
		}
		return ts.make(dt, make([]float32, n), shape...)
	}
	i32 := func() *engine.Tensor { return ts.make(engine.I32, []float32{0}, 1) }
	return &fusedStep{
		x: mk(1, 1, fsDim), n1: mk(1, fsDim), n2: mk(1, fsDim), qn: mk(1, fsD), kn: mk(1, fsD),
		wq: mk(0.2, fsHq*fsD, fsDim), wk: mk(0.2, fsHkv*fsD, fsDim), wv: mk(0.2, fsHkv*fsD, fsDim),
		wo: mk(0.2, fsDim, fsHq*fsD), wg: mk(0.2, fsFFN, fsDim), wu: mk(0.2, fsFFN, fsDim), wd: mk(0.2, fsDim, fsFFN),
		wl: mk(0.2, fsVocab, fsDim),
		q:  zero(dt, 1, 1, fsHq, fsD), k: zero(dt, 1, 1, fsHkv, fsD), v: zero(dt, 1, 1, fsHkv, fsD),
		qo: zero(dt, 1, fsHq, 1, fsD), kc: zero(dt, 1, fsHkv, fsCap, fsD), vc: zero(dt, 1, fsHkv, fsCap, fsD),
		att: zero(dt, 1, fsHq, 1, fsD), res: zero(dt, 1, fsDim), act: zero(dt, 1, fsFFN), mlp: zero(dt, 1, fsDim),
		logits: zero(engine.F32, 1, fsVocab), pos: i32(), starts: i32(), lens: i32(),
	}
}

// need is a fused op's error, or "declined" when the device did not take it.
func need(what string, done bool, err error) error {
	if err == nil && !done {
		err = fmt.Errorf("%s declined", what)
	}
	return err
}

// runSteps runs the ops of a step in order, naming the first that fails.
func runSteps(steps []func() error) error {
	for i, f := range steps {
		if err := f(); err != nil {
			return fmt.Errorf("op %d: %w", i, err)
		}
	}
	return nil
}

func (s *fusedStep) step(d *Device) error {
	steps := []func() error{
		func() error {
			done, err := d.NormLinearMulti([]*engine.Tensor{mustReshape(s.q, 1, fsHq*fsD), mustReshape(s.k, 1, fsHkv*fsD),
				mustReshape(s.v, 1, fsHkv*fsD)}, []*engine.Tensor{s.wq, s.wk, s.wv}, s.x, s.n1, 1e-6)
			return need("norm linear multi", done, err)
		},
		func() error {
			done, err := d.DecodePrep(engine.DecodePrepArgs{Q: s.q, K: s.k, V: s.v, QNorm: s.qn, KNorm: s.kn, QOut: s.qo,
				KCache: s.kc, VCache: s.vc, Pos: s.pos, Starts: s.starts, Eps: 1e-6, Theta: 1e4})
			return need("decode prep", done, err)
		},
		func() error {
			return d.DecodeAttention(engine.DecodeArgs{Q: s.qo, KCache: s.kc, VCache: s.vc, Lens: s.lens, O: s.att, Splits: 2})
		},
		func() error { return d.Cast(s.res, s.x) },
		func() error {
			return d.MatMul(s.res, mustReshape(s.att, 1, fsHq*fsD), s.wo, engine.MatMulOpts{TransB: true, Accumulate: true})
		},
		func() error {
			done, err := d.NormLinearSwiGLU(s.act, s.res, s.n2, s.wg, s.wu, 1e-6)
			return need("norm linear swiglu", done, err)
		},
		func() error { return d.MatMul(s.mlp, s.act, s.wd, engine.MatMulOpts{TransB: true}) },
		func() error { return d.MatMul(s.logits, s.mlp, s.wl, engine.MatMulOpts{TransB: true}) },
	}
	return runSteps(steps)
}

func (s *fusedStep) inputs(t *testing.T, d *Device, x []float32, pos int) {
	t.Helper()
	if err := engine.WriteFloat32(s.x, x); err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct {
		t *engine.Tensor
		v int32
	}{{s.pos, int32(pos)}, {s.starts, int32(pos)}, {s.lens, int32(pos + 1)}} {
		if err := d.Write(p.t, binary.LittleEndian.AppendUint32(nil, uint32(p.v))); err != nil {
			t.Fatal(err)
		}
	}
}

func (s *fusedStep) outputs(t *testing.T, d *Device) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for name, x := range map[string]*engine.Tensor{"q": s.q, "k": s.k, "v": s.v, "qOut": s.qo, "kcache": s.kc,
		"vcache": s.vc, "att": s.att, "res": s.res, "act": s.act, "mlp": s.mlp, "logits": s.logits} {
		b := make([]byte, x.Bytes())
		if err := d.Read(x, b); err != nil {
			t.Fatal(err)
		}
		out[name] = b
	}
	return out
}

// TestFusedStepGraph records a decode-like step on the fused ops and
// replays it over several positions (the positions, starts and lengths
// device-held, rewritten before each replay); every output must equal, bit
// for bit, the step run eagerly on a second set of tensors. The eager step
// is also counted: the fused ops are one dispatch each.
func TestFusedStepGraph(t *testing.T) {
	d := testDevice(t)
	if _, _, ok := d.gemvShape(); !ok {
		t.Skip("no GEMV kernel on this device")
	}
	rng := rand.New(rand.NewPCG(5, 7))
	ts := &tensors{t: t, dev: d}
	defer ts.free()
	rec, eager := newFusedStep(ts, rng), newFusedStep(ts, rng)
	testStepGraph(t, d, rng, rec, eager, (*fusedStep).step, []string{"gemv norm multi", "decode prep", "gemv norm swiglu"})
}

// TestFusedStepGraphInt8 is TestFusedStepGraph with int8 weights: the
// int8 forms of the fused ops (NormLinearMultiInt8, NormLinearSwiGLUInt8)
// and LinearInt8 must be one dispatch each, allocate nothing (the fused
// SwiGLU once took f32 scratch from Alloc, whose zero fill and Free made
// every int8 step refuse recording) and replay bit for bit.
func TestFusedStepGraphInt8(t *testing.T) {
	d := testDevice(t)
	if _, _, ok := d.gemvShape(); !ok {
		t.Skip("no GEMV kernel on this device")
	}
	rng := rand.New(rand.NewPCG(6, 8))
	ts := &tensors{t: t, dev: d}
	defer ts.free()
	rec, eager := newFusedStep(ts, rng), newFusedStep(ts, rng)
	// The int8 weights, shared by both steps (they only read them), with
	// the shapes of the 16-bit ones.
	q8 := &fusedInt8{}
	for _, p := range []struct {
		w  *engine.Int8Weight
		of *engine.Tensor
	}{{&q8.wq, rec.wq}, {&q8.wk, rec.wk}, {&q8.wv, rec.wv}, {&q8.wo, rec.wo}, {&q8.wg, rec.wg}, {&q8.wu, rec.wu},
		{&q8.wd, rec.wd}, {&q8.wl, rec.wl}} {
		n, k := p.of.Dim(0), p.of.Dim(1)
		q, sc, err := engine.QuantizeInt8(randVals(rng, engine.F32, n*k, 0.2), n, k, 32)
		if err != nil {
			t.Fatal(err)
		}
		if *p.w, err = engine.NewInt8Weight(d, q, sc, n, k, 32); err != nil {
			t.Fatal(err)
		}
		defer p.w.Free(d)
	}
	rec.q8, eager.q8 = q8, q8
	ran := testStepGraph(t, d, rng, rec, eager, (*fusedStep).stepInt8,
		[]string{"qmatmul norm multi 3 weights", "decode prep", "qmatmul norm swiglu"})
	for _, k := range []string{"fill", "elementwise", "rms"} {
		if strings.Contains(ran, k) {
			t.Fatalf("the int8 step ran %q: want no %s dispatch", ran, k)
		}
	}
}

// fusedInt8 are the int8 weights of a fusedStep (stepInt8).
type fusedInt8 struct{ wq, wk, wv, wo, wg, wu, wd, wl engine.Int8Weight }

// stepInt8 is step over the int8 weights q8.
func (s *fusedStep) stepInt8(d *Device) error {
	w := s.q8
	steps := []func() error{
		func() error {
			done, err := d.NormLinearMultiInt8([]*engine.Tensor{mustReshape(s.q, 1, fsHq*fsD), mustReshape(s.k, 1, fsHkv*fsD),
				mustReshape(s.v, 1, fsHkv*fsD)}, []engine.Int8Weight{w.wq, w.wk, w.wv}, s.x, s.n1, 1e-6)
			return need("norm linear multi int8", done, err)
		},
		func() error {
			done, err := d.DecodePrep(engine.DecodePrepArgs{Q: s.q, K: s.k, V: s.v, QNorm: s.qn, KNorm: s.kn, QOut: s.qo,
				KCache: s.kc, VCache: s.vc, Pos: s.pos, Starts: s.starts, Eps: 1e-6, Theta: 1e4})
			return need("decode prep", done, err)
		},
		func() error {
			return d.DecodeAttention(engine.DecodeArgs{Q: s.qo, KCache: s.kc, VCache: s.vc, Lens: s.lens, O: s.att, Splits: 2})
		},
		func() error { return d.Cast(s.res, s.x) },
		func() error { return d.LinearInt8(s.res, mustReshape(s.att, 1, fsHq*fsD), w.wo, true) },
		func() error {
			done, err := d.NormLinearSwiGLUInt8(s.act, s.res, s.n2, w.wg, w.wu, 1e-6)
			return need("norm linear swiglu int8", done, err)
		},
		func() error { return d.LinearInt8(s.mlp, s.act, w.wd, false) },
		func() error { return d.LinearInt8(s.logits, s.mlp, w.wl, false) },
	}
	return runSteps(steps)
}

// testStepGraph runs step eagerly once on rec (counting its dispatches:
// each of once must run exactly once), records it, and replays it over
// five positions against eager, which runs the step eagerly over the same
// inputs; it returns the eager step's dispatches.
func testStepGraph(t *testing.T, d *Device, rng *rand.Rand, rec, eager *fusedStep, step func(*fusedStep, *Device) error, once []string) string {
	t.Helper()
	for _, p := range [][2]*engine.Tensor{{rec.n1, eager.n1}, {rec.n2, eager.n2}, {rec.qn, eager.qn}, {rec.kn, eager.kn},
		{rec.wq, eager.wq}, {rec.wk, eager.wk}, {rec.wv, eager.wv}, {rec.wo, eager.wo}, {rec.wg, eager.wg},
		{rec.wu, eager.wu}, {rec.wd, eager.wd}, {rec.wl, eager.wl}} {
		if err := d.Cast(p[1], p[0]); err != nil {
			t.Fatal(err)
		}
	}
	rec.inputs(t, d, randVals(rng, engine.BF16, fsDim, 1), 0)
	ran := kernelsRun(t, d, func() error { return step(rec, d) })
	for _, k := range once {
		if strings.Count(ran, k) != 1 {
			t.Fatalf("the step ran %q: want one %s", ran, k)
		}
	}
	t.Logf("%d dispatches: %s", strings.Count(ran, ";")+1, ran)
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := d.BeginGraph(); err != nil {
		t.Fatal(err)
	}
	if err := step(rec, d); err != nil {
		t.Fatal(err)
	}
	g, err := d.EndGraph()
	if err != nil {
		t.Fatal(err)
	}
	defer g.Free()
	for pos := 0; pos < 5; pos++ {
		x := randVals(rng, engine.BF16, fsDim, 1)
		eager.inputs(t, d, x, pos)
		if err := step(eager, d); err != nil {
			t.Fatal(err)
		}
		rec.inputs(t, d, x, pos)
		if err := g.Replay(); err != nil {
			t.Fatal(err)
		}
		got, want := rec.outputs(t, d), eager.outputs(t, d)
		for name, w := range want {
			if string(got[name]) != string(w) {
				t.Fatalf("position %d: %s after the replay differs from the eager step", pos, name)
			}
		}
	}
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	return ran
}
