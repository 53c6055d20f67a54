//go:build cgo

package cuda

// #include "shim.h"
import "C"

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/parallax-engine/parallax/engine"
)

// Muon's batched kernels (muon.cu) and the Newton-Schulz iteration with the
// a X term folded into the Gram matrix (engine.NewtonSchulzOps).

const muonMod = "muon"

// muonEntry is one matrix of a muon.cu table: up to four operand words,
// the element count and two dtype codes (struct mt_entry, shaders/cuda/multi.cuh).
type muonEntry struct {
	p  [4]uint64
	n  int
	dt [2]int
}

// muonLaunch runs kernel over a table of entries (built and uploaded once
// per distinct content, then cached with the multi-tensor tables), with
// the trailing arguments post adds; wide takes the kernel's 16-byte form
// (kernel + "8"), which the caller grants when every operand allows it.
func (d *Device) muonLaunch(kernel string, es []muonEntry, wide bool, post func(a *args)) error {
	T := len(es)
	b := make([]byte, T*mtEntrySize+4*(T+1))
	blocks := 0
	for i, e := range es {
		w := b[i*mtEntrySize:]
		for j, p := range e.p {
			binary.LittleEndian.PutUint64(w[8*j:], p)
		}
		binary.LittleEndian.PutUint64(w[32:], uint64(e.n))
		binary.LittleEndian.PutUint32(w[40:], uint32(e.dt[0]))
		binary.LittleEndian.PutUint32(w[44:], uint32(e.dt[1]))
		binary.LittleEndian.PutUint32(b[T*mtEntrySize+4*i:], uint32(blocks))
		blocks += (e.n + mtChunk - 1) / mtChunk
		if blocks > math.MaxInt32 {
			return fmt.Errorf("cuda: muon table of %d matrices is too large", T)
		}
	}
	binary.LittleEndian.PutUint32(b[T*mtEntrySize+4*T:], uint32(blocks))
	if blocks == 0 {
		return nil
	}
	key := kernel + ":" + string(b)
	tab, ok := d.mt[key]
	if !ok {
		if len(d.mt) >= mtMaxTables {
			d.mtFree()
		}
		buf, err := d.scratch(int64(len(b)))
		if err != nil {
			return err
		}
		if err := d.htod(buf.ptr, b); err != nil {
			d.alloc.put(buf)
			return err
		}
		if d.mt == nil {
			d.mt = map[string]*mtTable{}
		}
		tab = &mtTable{buf: buf, n: T, blocks: blocks}
		d.mt[key] = tab
	}
	a := newArgs().p(tab.buf.ptr).i(tab.n)
	post(a)
	if wide && !mtNarrow {
		kernel += "8"
	}
	return d.launch(muonMod, kernel, [3]int{tab.blocks, 1, 1}, threads256, 0, a)
}

// slotPtr is the address of matrix i of stack [n, rows, cols].
func slotPtr(stack *engine.Tensor, i int) uint64 {
	return ptr(stack) + uint64(i*stack.Dim(1)*stack.Dim(2)*stack.DType().Size())
}

// MuonMomentumMany runs MuonMomentum for every matrix into its slot of
// stack in one launch (muon_mt_momentum).
func (d *Device) MuonMomentumMany(stack *engine.Tensor, ms, gs []*engine.Tensor, o engine.MuonMomentumOpts) error {
	per, err := engine.CheckMuonMomentumMany(stack, ms, gs, o)
	if err != nil {
		return err
	}
	if err := d.own("muon momentum", stack); err != nil {
		return err
	}
	if per == 0 {
		return nil
	}
	es := make([]muonEntry, len(ms))
	for i := range ms {
		if err := d.own("muon momentum", ms[i], gs[i]); err != nil {
			return err
		}
		es[i] = muonEntry{p: [4]uint64{slotPtr(stack, i), ptr(gs[i]), ptr(ms[i])}, n: per, dt: [2]int{dt(stack), dt(gs[i])}}
	}
	wide := wide8(stack)
	for i := range ms {
		wide = wide && wide8(ms[i], gs[i])
	}
	return d.muonMomentum(es, wide && per%8 == 0, o)
}

// MuonMomentum updates m and writes the direction u: muon_mt_momentum over
// a table of one matrix, so that a matrix's momentum is the same bits
// alone or in a stack.
func (d *Device) MuonMomentum(u, m, g *engine.Tensor, o engine.MuonMomentumOpts) error {
	n, err := engine.CheckMuonMomentum(d.own, u, m, g, o)
	if err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	e := muonEntry{p: [4]uint64{ptr(u), ptr(g), ptr(m)}, n: n, dt: [2]int{dt(u), dt(g)}}
	return d.muonMomentum([]muonEntry{e}, wide8(u, m, g), o)
}

// muonMomentum launches muon_mt_momentum (its 16-byte form with wide) over
// es.
func (d *Device) muonMomentum(es []muonEntry, wide bool, o engine.MuonMomentumOpts) error {
	nest := 0
	if o.Nesterov {
		nest = 1
	}
	return d.muonLaunch("muon_mt_momentum", es, wide, func(a *args) { a.f(o.Beta).i(nest).f(o.Scale()) })
}

// MuonApplyMany runs MuonApply for every parameter from its slot of stack
// in one launch (muon_mt_apply: muon_apply's arithmetic).
func (d *Device) MuonApplyMany(ps []*engine.Tensor, stack *engine.Tensor, lr, wd float32, lrScales, scales []float32) error {
	per, err := engine.CheckMuonApplyMany(ps, stack, lrScales, scales)
	if err != nil {
		return err
	}
	if err := d.own("muon apply", stack); err != nil {
		return err
	}
	if per == 0 {
		return nil
	}
	es := make([]muonEntry, len(ps))
	for i, p := range ps {
		if err := d.own("muon apply", p); err != nil {
			return err
		}
		es[i] = muonEntry{p: [4]uint64{ptr(p), slotPtr(stack, i), uint64(math.Float32bits(scales[i])), uint64(math.Float32bits(engine.ScaledLR(1, lrScales, i)))}, n: per, dt: [2]int{dt(p), dt(stack)}}
	}
	wide := wide8(stack) && per%8 == 0
	for _, p := range ps {
		wide = wide && wide8(p)
	}
	return d.muonLaunch("muon_mt_apply", es, wide, func(a *args) { a.f(lr).f(wd) })
}

// NewtonSchulzIterate runs the iteration of engine.NewtonSchulzOps: per
// step three cuBLASLt products over the whole batch, A = X X^T (X^T X when
// tall), B = c A A + b A (A the product's addend C, B its result D) and
// X' = B X + a X (X B + a X; X the addend) into the other buffer; x and y
// swap roles each step. The linear terms ride in the products' epilogues,
// so no pass of its own is spent on b A + a I, and a X is formed in f32
// before the one rounding of X'.
func (d *Device) NewtonSchulzIterate(x, y, a, b *engine.Tensor, steps int) error {
	const op = "newton-schulz"
	if x == nil || y == nil || a == nil || b == nil || x.Rank() < 2 {
		return &engine.ArgError{Op: op, Operand: "x", Msg: fmt.Sprintf("want x of rank >= 2 and y, a, b, got %v, %v, %v, %v", x, y, a, b)}
	}
	if steps < 0 {
		return &engine.ArgError{Op: op, Operand: "steps", Msg: fmt.Sprintf("%d < 0", steps)}
	}
	rows, cols := x.Dim(-2), x.Dim(-1)
	k := min(rows, cols)
	gram := append(x.Shape()[:x.Rank()-2], k, k)
	if !y.Shape().Equal(x.Shape()) || !a.Shape().Equal(gram) || !b.Shape().Equal(gram) {
		return &engine.ArgError{Op: op, Operand: "scratch", Msg: fmt.Sprintf("want y %v and a, b %v, got %v, %v, %v", x.Shape(), gram, y, a, b)}
	}
	for _, t := range []*engine.Tensor{y, a, b} {
		if t.DType() != x.DType() {
			return &engine.ArgError{Op: op, Operand: "scratch", Msg: fmt.Sprintf("%v is not of x's dtype %v", t, x.DType())}
		}
	}
	if !x.DType().IsFloat() {
		return &engine.ArgError{Op: op, Operand: "x", Msg: fmt.Sprintf("want a floating dtype, got %v", x)}
	}
	if err := d.own(op, x, y, a, b); err != nil {
		return err
	}
	if x.Numel() == 0 {
		return nil
	}
	tall := rows > cols
	for range steps {
		var err error
		if tall {
			err = d.gemmScaled(a, x, x, nil, engine.MatMulOpts{TransA: true}, 1, 0)
		} else {
			err = d.gemmScaled(a, x, x, nil, engine.MatMulOpts{TransB: true}, 1, 0)
		}
		if err == nil {
			err = d.gemmScaled(b, a, a, a, engine.MatMulOpts{}, engine.NSC, engine.NSB)
		}
		if err == nil {
			if tall {
				err = d.gemmScaled(y, x, b, x, engine.MatMulOpts{}, 1, engine.NSA)
			} else {
				err = d.gemmScaled(y, b, x, x, engine.MatMulOpts{}, 1, engine.NSA)
			}
		}
		if err != nil {
			return fmt.Errorf("newton-schulz: %w", err)
		}
		x, y = y, x
	}
	return nil
}

// gemmScaled computes out = alpha op(a) op(b) + beta c (c = out when nil)
// for operands of one dtype with the same batch (no shared b): MatMul's
// cuBLASLt call with the epilogue's alpha and beta.
func (d *Device) gemmScaled(out, a, b, c *engine.Tensor, o engine.MatMulOpts, alpha, beta float32) error {
	o.Accumulate = beta != 0
	dims, err := engine.CheckMatMul(out, a, b, o)
	if err != nil {
		return err
	}
	if c == nil {
		c = out
	}
	if !c.Shape().Equal(out.Shape()) || c.DType() != out.DType() {
		return fmt.Errorf("cuda scaled matmul: addend %v is not shaped as the result %v", c, out)
	}
	// A rank-2 b is "shared" across a batch of one too: only a real batch
	// needs b's own stride.
	if (dims.SharedB && dims.Batch > 1) || a.DType() != b.DType() || out.DType() != a.DType() {
		return fmt.Errorf("cuda scaled matmul: want operands of one dtype and one batch, got %v, %v, %v", out, a, b)
	}
	if dims.Batch == 0 || dims.M == 0 || dims.N == 0 || dims.K == 0 {
		return fmt.Errorf("cuda scaled matmul: empty product %v = %v %v", out, a, b)
	}
	M, N, K := dims.M, dims.N, dims.K
	t := ltType(a.DType())
	g := C.pxcu_gemm{
		m: C.int(N), n: C.int(M), k: C.int(K),
		atype: t, btype: t, ctype: t, compute: computeF32,
		ldc: C.longlong(N), batch: C.int(dims.Batch), alpha: C.float(alpha), beta: C.float(beta),
	}
	if o.TransB {
		g.transa, g.lda = 1, C.longlong(K)
	} else {
		g.lda = C.longlong(N)
	}
	if o.TransA {
		g.transb, g.ldb = 1, C.longlong(M)
	} else {
		g.ldb = C.longlong(K)
	}
	g.stridea, g.strideb, g.stridec = C.longlong(K*N), C.longlong(M*K), C.longlong(M*N)
	return d.ltRunCD(&g, ptr(b), ptr(a), ptr(c), ptr(out))
}

var (
	_ engine.MuonMultiOps    = (*Device)(nil)
	_ engine.NewtonSchulzOps = (*Device)(nil)
)
