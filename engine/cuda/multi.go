//go:build cgo

package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/parallax-engine/parallax/engine"
)

// The multi-tensor ops (engine.MultiTensorOps): one launch over a list of
// tensors, MT_CHUNK elements a block. A list's table (each tensor's
// operands, size and dtypes, then every tensor's first block) lives on the
// device and is cached by its content, since an optimizer passes the same
// lists every step: after the first step no table is uploaded again.

const (
	mtChunk     = 16384 // MT_CHUNK of elementwise.cu
	mtEntrySize = 48    // sizeof(mt_entry)
	mtMaxTables = 64    // cached tables kept before the cache is emptied
)

type mtTable struct {
	buf    *buffer
	n      int // tensors
	blocks int
}

// mtTableFor returns the device table of entries, each up to four operands
// (the element count and dtypes come from the first two).
func (d *Device) mtTableFor(ops [][4]*engine.Tensor) (*mtTable, error) {
	var key strings.Builder
	for _, o := range ops {
		for _, t := range o {
			if t != nil {
				key.WriteString(strconv.FormatUint(ptr(t), 36))
				key.WriteByte(':')
				key.WriteString(strconv.Itoa(t.Numel()))
				key.WriteByte(':')
				key.WriteString(strconv.Itoa(dt(t)))
			}
			key.WriteByte(',')
		}
	}
	k := key.String()
	if t, ok := d.mt[k]; ok {
		return t, nil
	}
	T := len(ops)
	b := make([]byte, T*mtEntrySize+4*(T+1))
	blocks := 0
	for i, o := range ops {
		e := b[i*mtEntrySize:]
		for j, t := range o {
			if t != nil {
				binary.LittleEndian.PutUint64(e[8*j:], ptr(t))
			}
		}
		n := o[0].Numel()
		binary.LittleEndian.PutUint64(e[32:], uint64(n))
		binary.LittleEndian.PutUint32(e[40:], uint32(dt(o[0])))
		if o[1] != nil {
			binary.LittleEndian.PutUint32(e[44:], uint32(dt(o[1])))
		}
		binary.LittleEndian.PutUint32(b[T*mtEntrySize+4*i:], uint32(blocks))
		blocks += (n + mtChunk - 1) / mtChunk
		if blocks > math.MaxInt32 {
			return nil, fmt.Errorf("cuda: multi-tensor list of %d tensors is too large", T)
		}
	}
	binary.LittleEndian.PutUint32(b[T*mtEntrySize+4*T:], uint32(blocks))
	if len(d.mt) >= mtMaxTables {
		d.mtFree()
	}
	buf, err := d.scratch(int64(len(b)))
	if err != nil {
		return nil, err
	}
	if err := d.htod(buf.ptr, b); err != nil {
		d.alloc.put(buf)
		return nil, err
	}
	if d.mt == nil {
		d.mt = map[string]*mtTable{}
	}
	t := &mtTable{buf: buf, n: T, blocks: blocks}
	d.mt[k] = t
	return t, nil
}

// mtFree returns the cached tables' buffers (every launch that reads them
// is enqueued before, and the stream runs in order).
func (d *Device) mtFree() {
	for k, t := range d.mt {
		d.alloc.put(t.buf)
		delete(d.mt, k)
	}
}

// mtNarrow keeps the multi-tensor and Muon kernels at one element a
// thread (PARALLAX_CUDA_MT8=0), for comparing against the 16-byte forms.
var mtNarrow = os.Getenv("PARALLAX_CUDA_MT8") == "0"

// mtWide names the multi-tensor kernels with an eight-elements-a-thread
// form (kernel + "8", MT_LOOP8 in multi.cuh).
// (mt_fill's measured slower in that form on the H200 and has none.)
var mtWide = map[string]bool{"mt_cast": true, "mt_scale": true, "mt_adamw": true}

// wide8 reports whether every tensor has a multiple of 8 elements, a
// 16-byte aligned base and a floating dtype, as the 16-byte kernels need.
func wide8(ts ...*engine.Tensor) bool {
	for _, t := range ts {
		if t != nil && (t.Numel()%8 != 0 || ptr(t)%16 != 0 || !t.DType().IsFloat()) {
			return false
		}
	}
	return true
}

// mtLaunch runs kernel over the table with the given trailing arguments,
// in its 16-byte form where it has one and every operand allows it.
func (d *Device) mtLaunch(kernel string, ops [][4]*engine.Tensor, pre func(a *args), post func(a *args)) error {
	tab, err := d.mtTableFor(ops)
	if err != nil {
		return err
	}
	if tab.blocks == 0 {
		return nil
	}
	if mtWide[kernel] && !mtNarrow {
		all := true
		for _, op := range ops {
			all = all && wide8(op[:]...)
		}
		if all {
			kernel += "8"
		}
	}
	a := newArgs()
	if pre != nil {
		pre(a)
	}
	a.p(tab.buf.ptr).i(tab.n)
	if post != nil {
		post(a)
	}
	return d.launch(ew, kernel, [3]int{tab.blocks, 1, 1}, threads256, 0, a)
}

// FillMany sets every element of every tensor to value in one launch.
func (d *Device) FillMany(ts []*engine.Tensor, value float32) error {
	ops := make([][4]*engine.Tensor, 0, len(ts))
	for i, t := range ts {
		if t == nil {
			return &engine.ArgError{Op: "fill", Operand: fmt.Sprintf("tensor %d", i), Msg: "missing"}
		}
		if err := engine.CheckFill(d.own, t); err != nil {
			return err
		}
		if t.Numel() > 0 {
			ops = append(ops, [4]*engine.Tensor{t})
		}
	}
	return d.mtLaunch("mt_fill", ops, nil, func(a *args) { a.f(value) })
}

// CastMany casts every srcs[i] into dsts[i] in one launch; pairs of one
// dtype (a copy) or of I32 take the single Cast.
func (d *Device) CastMany(dsts, srcs []*engine.Tensor) error {
	if len(dsts) != len(srcs) {
		return &engine.ArgError{Op: "cast", Operand: "tensors", Msg: fmt.Sprintf("lists of %d and %d tensors (want equal lengths)", len(dsts), len(srcs))}
	}
	ops := make([][4]*engine.Tensor, 0, len(dsts))
	for i := range dsts {
		n, err := engine.CheckCast(d.own, dsts[i], srcs[i])
		if err != nil {
			return fmt.Errorf("cast tensor %d of %d: %w", i, len(dsts), err)
		}
		dd, sd := dsts[i].DType(), srcs[i].DType()
		if dd == sd || dd == engine.I32 || sd == engine.I32 {
			if err := d.Cast(dsts[i], srcs[i]); err != nil {
				return fmt.Errorf("cast tensor %d of %d: %w", i, len(dsts), err)
			}
			continue
		}
		if n > 0 {
			ops = append(ops, [4]*engine.Tensor{dsts[i], srcs[i]})
		}
	}
	return d.mtLaunch("mt_cast", ops, nil, nil)
}

// ScaleMany multiplies every tensor by s in place in one launch.
func (d *Device) ScaleMany(ts []*engine.Tensor, s float32) error {
	ops := make([][4]*engine.Tensor, 0, len(ts))
	for i, t := range ts {
		if _, err := engine.CheckElementwise(d.own, "scale", []string{fmt.Sprintf("tensor %d", i)}, t); err != nil {
			return err
		}
		if t.Numel() > 0 {
			ops = append(ops, [4]*engine.Tensor{t})
		}
	}
	return d.mtLaunch("mt_scale", ops, nil, func(a *args) { a.f(s) })
}

// SumSquaresMany writes (or adds to) out the sum of squares of every tensor:
// each block adds its chunk's double sum into one accumulator.
func (d *Device) SumSquaresMany(out *engine.Tensor, xs []*engine.Tensor, accumulate bool) error {
	ops := make([][4]*engine.Tensor, 0, len(xs))
	for _, x := range xs {
		if _, err := engine.CheckSumSquares(d.own, out, x); err != nil {
			return err
		}
		if x.Numel() > 0 {
			ops = append(ops, [4]*engine.Tensor{x})
		}
	}
	if len(xs) == 0 {
		if _, err := engine.CheckSumSquares(nil, out, out); err != nil {
			return err
		}
	}
	acc, err := d.zeroedScratch(8)
	if err != nil {
		return err
	}
	defer d.alloc.put(acc)
	if err := d.mtLaunch("mt_sumsq", ops, func(a *args) { a.p(acc.ptr) }, nil); err != nil {
		return err
	}
	f := 0
	if accumulate {
		f = 1
	}
	return d.launch(ew, "sumsq_final", [3]int{1, 1, 1}, [3]int{32, 1, 1}, 0, newArgs().p(ptr(out)).p(acc.ptr).i(f))
}

// AdamWMany applies one AdamW step with options o to every parameter in
// one launch (the same double arithmetic as AdamW).
func (d *Device) AdamWMany(ps, gs, ms, vs []*engine.Tensor, o engine.AdamWOpts) error {
	ops := make([][4]*engine.Tensor, 0, len(ps))
	for i := range ps {
		if _, err := engine.CheckAdamW(d.own, ps[i], gs[i], ms[i], vs[i], o); err != nil {
			return err
		}
		if ps[i].Numel() > 0 {
			ops = append(ops, [4]*engine.Tensor{ps[i], gs[i], ms[i], vs[i]})
		}
	}
	decay, step, bc2 := o.Factors()
	return d.mtLaunch("mt_adamw", ops, nil, func(a *args) {
		for _, x := range []float64{decay, step, bc2, float64(o.Beta1), float64(o.Beta2), float64(o.Eps)} {
			a.l(int64(math.Float64bits(x)))
		}
		a.f(o.Scale())
	})
}

var _ engine.MultiTensorOps = (*Device)(nil)
