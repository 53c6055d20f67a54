//go:build cgo

package cuda

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/parallax-engine/parallax/engine"
)

// Host side of the fused decode-step ops: the RMSNorm folded into the
// matrix-vector products (gemv_norm_* in shaders/cuda/gemv.cu) and the
// attention inputs' norms, rotations and cache appends in one launch
// (shaders/cuda/decode_prep.cu).

const decodePrepModule = "decode_prep"

var (
	_ engine.NormLinear             = (*Device)(nil)
	_ engine.DecodePreparer         = (*Device)(nil)
	_ engine.NormLinearPreparer     = (*Device)(nil)
	_ engine.Int8NormLinearPreparer = (*Device)(nil)
)

// NormLinearMulti runs up to four decode products of RMSNorm(x) in one
// launch (gemv_norm_multi_m*: each block recomputes its rows' sums of
// squares from x) where LinearMulti would take the products of the normed
// rows; see engine.NormLinear.
func (d *Device) NormLinearMulti(outs, ws []*engine.Tensor, x, normW *engine.Tensor, eps float32) (bool, error) {
	set, rows, k, blocks, err := d.normGemvSet("norm linear multi", outs, ws, x, normW)
	if rows == 0 || err != nil {
		return err != nil, err
	}
	return true, d.launch("gemv", fmt.Sprintf("gemv_norm_multi_m%d", rows), [3]int{blocks, 1, 1}, threads256, 0,
		newArgs().blob(set[:], 8).i(dt(outs[0])).p(ptr(x)).i(dt(x)).i(k).p(ptr(normW)).i(dt(normW)).f(eps))
}

// NormLinearSwiGLU runs a decode step's post-attention norm, gate and up
// products and SwiGLU in one launch (gemv_norm_swiglu_m*) where
// LinearSwiGLU would take the normed rows; see engine.NormLinear.
func (d *Device) NormLinearSwiGLU(act, x, normW, wGate, wUp *engine.Tensor, eps float32) (bool, error) {
	const op = "norm linear swiglu"
	if _, err := engine.CheckNormLinear(d.own, op, x, normW); err != nil {
		return true, err
	}
	dims, rows, err := d.swigluRows(op, act, x, wGate, wUp)
	if rows == 0 || err != nil || ptr(normW)%16 != 0 {
		return err != nil, err
	}
	return true, d.launch("gemv", fmt.Sprintf("gemv_norm_swiglu_m%d", rows), [3]int{(dims.N + 7) / 8, 1, 1}, threads256, 0,
		newArgs().p(ptr(act)).i(dt(act)).p(ptr(x)).p(ptr(wGate)).p(ptr(wUp)).i(dt(x)).i(dims.N).i(dims.K).
			p(ptr(normW)).i(dt(normW)).f(eps))
}

// decodePrepMaxPairs is the most rotation pairs (D/2) of decode_prep's
// frequency table (dp_freq).
const decodePrepMaxPairs = 128

// DecodePrep norms and rotates q, k and r, writes q and r in attention's
// layout and appends k and v to the caches in one launch (decode_prep:
// D/16 lanes a row, 16-byte accesses, 4 warps a block); see
// engine.DecodePreparer. It takes head dimensions whose rows the 16-byte
// norm+RoPE kernels take (D/16 a power of two up to 32) with
// D/2 <= decodePrepMaxPairs.
func (d *Device) DecodePrep(a engine.DecodePrepArgs) (bool, error) {
	p, ok, err := d.decodePrepOps(a)
	if !ok || err != nil {
		return err != nil, err
	}
	if p.dd.B*p.dd.L == 0 {
		return true, nil
	}
	rowsPerBlock := 4 * (32 / p.lpr)
	grid := [3]int{min((p.rows+rowsPerBlock-1)/rowsPerBlock, 1<<16), 1, 1}
	return true, d.launch(decodePrepModule, "decode_prep", grid, threads128, 0, p.args(newArgs(), a).p(d.errBuf.ptr))
}

// decodePrep holds decode_prep's laid-out operands (decodePrepOps).
type decodePrep struct {
	dd          engine.DecodePrepDims
	set         [232]byte                    // dp_set
	freq        [8 * decodePrepMaxPairs]byte // dp_freq
	lpr, perSeq int
	rows        int // every row of the four segments (first[4])
}

// args appends decode_prep's operands from the dp_set to lpr (the error
// buffer's address and a kernel's own operands come after).
func (p *decodePrep) args(x *args, a engine.DecodePrepArgs) *args {
	return x.blob(p.set[:], 8).blob(p.freq[:], 8).p(ptr(a.Pos)).p(ptr(a.Starts)).
		i(p.dd.B).i(p.dd.L).i(p.dd.D).i(p.dd.Cap).i(p.perSeq).f(a.Eps).i(p.lpr)
}

// decodePrepOps validates a and lays out decode_prep's operands; ok is
// false (err nil) where its kernels do not take them.
func (d *Device) decodePrepOps(a engine.DecodePrepArgs) (p decodePrep, ok bool, err error) {
	dd, err := engine.CheckDecodePrep(d.own, a)
	if err != nil {
		return p, false, err
	}
	p.dd = dd
	lpr := normRoPELanes(dd.D)
	if lpr == 0 || dd.D/2 > decodePrepMaxPairs {
		return p, false, nil
	}
	ts := []*engine.Tensor{a.Q, a.K, a.V, a.R, a.QNorm, a.KNorm, a.RNorm, a.QOut, a.ROut, a.KCache, a.VCache}
	if a.KeepKV {
		ts = append(ts, a.KH, a.VH)
	}
	for _, t := range ts {
		if t != nil && ptr(t)%16 != 0 {
			return p, false, nil
		}
	}
	// dp_set: x[4], w[4], out[4], out2[4] (pointers), dtx[4], dtw[4],
	// dto[4], dto2[4], heads[4], first[5] (ints), 232 bytes with the tail
	// padding.
	const ints = 128
	set := &p.set
	xs := [4]*engine.Tensor{a.Q, a.K, a.V, a.R}
	ws := [4]*engine.Tensor{a.QNorm, a.KNorm, nil, a.RNorm}
	outs := [4]*engine.Tensor{a.QOut, a.KCache, a.VCache, a.ROut}
	var outs2 [4]*engine.Tensor
	if a.KeepKV {
		outs2[1], outs2[2] = a.KH, a.VH
	}
	heads := [4]int{dd.Hq, dd.Hkv, dd.Hkv, dd.Hq}
	first := 0
	for i := range 4 {
		h := heads[i]
		if xs[i] == nil {
			h = 0
		}
		binary.LittleEndian.PutUint32(set[ints+80+4*i:], uint32(first))
		first += dd.B * dd.L * h
		if h == 0 {
			continue
		}
		binary.LittleEndian.PutUint64(set[8*i:], ptr(xs[i]))
		binary.LittleEndian.PutUint64(set[64+8*i:], ptr(outs[i]))
		binary.LittleEndian.PutUint32(set[ints+4*i:], uint32(dt(xs[i])))
		binary.LittleEndian.PutUint32(set[ints+32+4*i:], uint32(dt(outs[i])))
		binary.LittleEndian.PutUint32(set[ints+64+4*i:], uint32(h))
		if ws[i] != nil {
			binary.LittleEndian.PutUint64(set[32+8*i:], ptr(ws[i]))
			binary.LittleEndian.PutUint32(set[ints+16+4*i:], uint32(dt(ws[i])))
		}
		if outs2[i] != nil {
			binary.LittleEndian.PutUint64(set[96+8*i:], ptr(outs2[i]))
			binary.LittleEndian.PutUint32(set[ints+48+4*i:], uint32(dt(outs2[i])))
		}
	}
	binary.LittleEndian.PutUint32(set[ints+80+16:], uint32(first))
	for i, f := range engine.RoPEFrequencies(a.Theta, dd.D) {
		binary.LittleEndian.PutUint64(p.freq[8*i:], math.Float64bits(f))
	}
	if a.Pos.Rank() == 2 {
		p.perSeq = 1
	}
	p.lpr, p.rows = lpr, first
	return p, true, nil
}

// prepCounters is the most heads (of q, k, v and r together) a
// gemv_norm_prep launch counts: the ints of Device.prepCnt.
const prepCounters = 4096

// NormLinearDecodePrep runs the q, k, v (and r) products of the normed
// rows and DecodePrep in one launch (gemv_norm_prep_m*, gemv.cu) where
// Options.FusedPrep is set and both kernels take the operands (rows <= 8,
// the outputs the projections DecodePrep reads, each head's columns whole
// blocks of 8, no KeepKV); see engine.NormLinearPreparer.
func (d *Device) NormLinearDecodePrep(outs, ws []*engine.Tensor, x, normW *engine.Tensor, eps float32, a engine.DecodePrepArgs) (bool, error) {
	const op = "norm linear decode prep"
	if !d.opts.FusedPrep || a.KeepKV {
		return false, nil
	}
	set, rows, k, blocks, err := d.normGemvSet(op, outs, ws, x, normW)
	if rows == 0 || err != nil {
		return err != nil, err
	}
	p, ok, err := d.decodePrepOps(a)
	if !ok || err != nil {
		return err != nil, err
	}
	if !p.fuses(outs, a, rows) {
		return false, nil
	}
	if err := d.ensurePrepCounters(); err != nil {
		return true, err
	}
	return true, d.launch("gemv", fmt.Sprintf("gemv_norm_prep_m%d", rows), [3]int{blocks, 1, 1}, threads256, 0,
		p.args(newArgs().blob(set[:], 8).i(dt(outs[0])).p(ptr(x)).i(dt(x)).i(k).p(ptr(normW)).i(dt(normW)).f(eps), a).
			p(d.errBuf.ptr).p(d.prepCnt.ptr))
}

// fuses reports whether a gemv_norm_prep or qgemv_norm_prep launch takes
// these products of rows rows (8 output columns a block) with p: the
// outputs are exactly the projections p reads, in order, each a whole
// number of heads of D a multiple of 8, one row of the product per (b, l),
// and the heads fit the counters.
func (p *decodePrep) fuses(outs []*engine.Tensor, a engine.DecodePrepArgs, rows int) bool {
	proj := []*engine.Tensor{a.Q, a.K, a.V}
	if a.R != nil {
		proj = append(proj, a.R)
	}
	if len(outs) != len(proj) {
		return false
	}
	heads := 0
	for i, o := range outs {
		if ptr(o) != ptr(proj[i]) || o.Dim(-1)%p.dd.D != 0 {
			return false
		}
		heads += o.Dim(-1) / p.dd.D
	}
	return p.dd.D%8 == 0 && p.dd.B*p.dd.L == rows && heads <= prepCounters
}

// ensurePrepCounters allocates the per-head counters of the fused preparation
// once, zeroed (the kernels leave them at 0).
func (d *Device) ensurePrepCounters() error {
	if d.prepCnt != nil {
		return nil
	}
	b, err := d.alloc.get(4 * prepCounters)
	if err != nil {
		return err
	}
	if err := d.zero(b.ptr, 4*prepCounters); err != nil {
		d.alloc.put(b)
		return err
	}
	d.prepCnt = b
	return nil
}

// normGemvSet checks the norm operands of a gemv_norm_* launch and lays out
// its products (gemvSet); rows is 0 (err nil) where the kernels do not take
// them. k is x's width.
func (d *Device) normGemvSet(op string, outs, ws []*engine.Tensor, x, normW *engine.Tensor) (set [104]byte, rows, k, blocks int, err error) {
	if k, err = engine.CheckNormLinear(d.own, op, x, normW); err != nil {
		return set, 0, 0, 0, err
	}
	set, rows, _, blocks, err = d.gemvSet(op, outs, ws, x)
	if err != nil || ptr(normW)%16 != 0 {
		rows = 0
	}
	return set, rows, k, blocks, err
}
