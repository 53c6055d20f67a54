package cpu

import (
	"fmt"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/enginetest"
	"github.com/parallax-engine/parallax/engine/ref"
)

func TestMatMul(t *testing.T) {
	type mm struct {
		batch, m, n, k int
		transA, transB bool
		sharedB, acc   bool
		da, db, dout   engine.DType
	}
	f32, bf16 := engine.F32, engine.BF16
	cases := []mm{
		{1, 1, 1, 1, false, false, false, false, f32, f32, f32},
		{1, 5, 7, 3, false, false, false, false, f32, f32, f32},
		{1, 67, 45, 300, false, false, false, false, f32, f32, f32}, // edges, k > kc
		{1, 67, 45, 300, true, false, false, false, f32, f32, f32},
		{1, 67, 45, 300, false, true, false, false, f32, f32, f32},
		{1, 67, 45, 300, true, true, false, true, f32, f32, f32},
		{3, 20, 33, 17, false, true, false, false, f32, f32, f32},
		{3, 20, 33, 17, true, false, true, true, f32, f32, f32},
		{2, 130, 9, 513, false, false, true, false, f32, f32, f32},
		{1, 1, 200, 64, false, true, false, false, f32, f32, f32}, // row path
		{4, 2, 77, 33, true, false, false, true, f32, f32, f32},
		{2, 1, 131, 65, false, false, true, false, f32, f32, f32},
		{1, 3, 1, 9, false, false, false, false, f32, f32, f32},
		{1, 40, 24, 96, false, true, false, false, bf16, bf16, bf16},
		{2, 33, 18, 40, true, false, false, true, bf16, f32, f32}, // mixed
		{1, 2, 50, 40, false, true, false, true, f32, bf16, bf16},
		{1, 16, 16, 16, false, false, false, false, engine.F16, engine.F16, engine.F16},
	}
	for ci, c := range cases {
		for _, d := range testDevices() {
			name := fmt.Sprintf("%dx%dx%dx%d/tA=%v/tB=%v/shared=%v/acc=%v/%v,%v->%v/threads=%d",
				c.batch, c.m, c.n, c.k, c.transA, c.transB, c.sharedB, c.acc, c.da, c.db, c.dout, d.threads)
			t.Run(name, func(t *testing.T) {
				rng := newRng(uint64(ci))
				aShape := []int{c.batch, c.m, c.k}
				if c.transA {
					aShape = []int{c.batch, c.k, c.m}
				}
				bShape := []int{c.batch, c.k, c.n}
				if c.transB {
					bShape = []int{c.batch, c.n, c.k}
				}
				nb := c.batch
				if c.sharedB {
					bShape, nb = bShape[1:], 1
				}
				av := enginetest.Normal(rng, c.da, c.batch*c.m*c.k, 1)
				bv := enginetest.Normal(rng, c.db, nb*c.k*c.n, 1)
				ov := enginetest.Normal(rng, c.dout, c.batch*c.m*c.n, 1)
				a, b := up(t, d, c.da, av, aShape...), up(t, d, c.db, bv, bShape...)
				out := up(t, d, c.dout, ov, c.batch, c.m, c.n)
				if err := d.MatMul(out, a, b, engine.MatMulOpts{TransA: c.transA, TransB: c.transB, Accumulate: c.acc}); err != nil {
					t.Fatal(err)
				}
				want := ref.MatMul(av, bv, c.batch, c.m, c.n, c.k, c.transA, c.transB, c.sharedB)
				if c.acc {
					want = ref.AddScaled(want, ov, 1, 1)
				}
				near(t, "out", down(t, out), want, tolFor(c.dout, c.k))
			})
		}
	}
}

func TestMatMulZeroSizes(t *testing.T) {
	d := New()
	a, b := alloc(t, d, engine.F32, 3, 0), alloc(t, d, engine.F32, 0, 4)
	out := up(t, d, engine.F32, []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, 3, 4)
	if err := d.MatMul(out, a, b, engine.MatMulOpts{Accumulate: true}); err != nil {
		t.Fatal(err)
	}
	if got := down(t, out); got[11] != 12 {
		t.Errorf("k = 0 with accumulate changed out: %v", got)
	}
	if err := d.MatMul(out, a, b, engine.MatMulOpts{}); err != nil {
		t.Fatal(err)
	}
	for _, v := range down(t, out) {
		if v != 0 {
			t.Fatalf("k = 0 without accumulate: out %v, want zeros", down(t, out))
		}
	}
	e := alloc(t, d, engine.F32, 0, 5)
	if err := d.MatMul(alloc(t, d, engine.F32, 0, 4), e, alloc(t, d, engine.F32, 5, 4), engine.MatMulOpts{}); err != nil {
		t.Fatal(err)
	}
}

func TestMatMulErrors(t *testing.T) {
	d := New()
	other := New()
	f := func(dt engine.DType, s ...int) *engine.Tensor { return alloc(t, d, dt, s...) }
	cases := []struct {
		name      string
		out, a, b *engine.Tensor
		o         engine.MatMulOpts
	}{
		{"inner dims", f(engine.F32, 2, 3), f(engine.F32, 2, 4), f(engine.F32, 5, 3), engine.MatMulOpts{}},
		{"inner dims transposed", f(engine.F32, 2, 3), f(engine.F32, 2, 4), f(engine.F32, 4, 3), engine.MatMulOpts{TransB: true}},
		{"out shape", f(engine.F32, 3, 3), f(engine.F32, 2, 4), f(engine.F32, 4, 3), engine.MatMulOpts{}},
		{"batch dims", f(engine.F32, 2, 2, 3), f(engine.F32, 2, 2, 4), f(engine.F32, 3, 4, 3), engine.MatMulOpts{}},
		{"rank 1", f(engine.F32, 2), f(engine.F32, 4), f(engine.F32, 4, 2), engine.MatMulOpts{}},
		{"int input", f(engine.F32, 2, 3), f(engine.I32, 2, 4), f(engine.F32, 4, 3), engine.MatMulOpts{}},
		{"int output", f(engine.I32, 2, 3), f(engine.F32, 2, 4), f(engine.F32, 4, 3), engine.MatMulOpts{}},
		{"nil b", f(engine.F32, 2, 3), f(engine.F32, 2, 4), nil, engine.MatMulOpts{}},
	}
	for _, c := range cases {
		noPanic(t, c.name, func() { wantArgError(t, c.name, d.MatMul(c.out, c.a, c.b, c.o), "matmul") })
	}
	sq := f(engine.F32, 4, 4)
	view, _ := sq.Reshape(1, 4, 4)
	wantArgError(t, "out aliases a", d.MatMul(sq, sq, f(engine.F32, 4, 4), engine.MatMulOpts{}), "matmul")
	wantArgError(t, "out aliases b (reshaped)", d.MatMul(view, f(engine.F32, 1, 4, 4), sq, engine.MatMulOpts{}), "matmul")
	foreign, _ := other.Alloc(engine.F32, 4, 3)
	noPanic(t, "foreign", func() {
		wantArgError(t, "tensor of another device", d.MatMul(f(engine.F32, 2, 3), f(engine.F32, 2, 4), foreign, engine.MatMulOpts{}), "matmul")
	})
}

// benchMatMul reports GFLOP/s of out [m, n] = a [m, k] op(b) with f32
// operands (b [n, k] when transB, as a linear layer's weight).
func benchMatMul(bm *testing.B, m, n, k int, transB bool) {
	d := New()
	rng := newRng(1)
	a, _ := enginetest.Upload(d, engine.F32, enginetest.Normal(rng, engine.F32, m*k, 1), m, k)
	bShape := []int{k, n}
	if transB {
		bShape = []int{n, k}
	}
	b, _ := enginetest.Upload(d, engine.F32, enginetest.Normal(rng, engine.F32, k*n, 1), bShape...)
	out, _ := d.Alloc(engine.F32, m, n)
	for bm.Loop() {
		if err := d.MatMul(out, a, b, engine.MatMulOpts{TransB: transB}); err != nil {
			bm.Fatal(err)
		}
	}
	bm.ReportMetric(2*float64(m)*float64(n)*float64(k)*float64(bm.N)/bm.Elapsed().Seconds()/1e9, "GFLOP/s")
}

func BenchmarkMatMul(bm *testing.B) {
	bm.Run("512x512x512", func(bm *testing.B) { benchMatMul(bm, 512, 512, 512, false) })
	bm.Run("512x512x512/transB", func(bm *testing.B) { benchMatMul(bm, 512, 512, 512, true) })
	bm.Run("1024x768_by_768x3072", func(bm *testing.B) { benchMatMul(bm, 1024, 3072, 768, false) })
	bm.Run("1024x768_by_768x3072/transB", func(bm *testing.B) { benchMatMul(bm, 1024, 3072, 768, true) })
	bm.Run("1x1024_by_1024x3072/transB", func(bm *testing.B) { benchMatMul(bm, 1, 3072, 1024, true) })
}
