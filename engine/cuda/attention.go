//go:build cgo

package cuda

import (
	"fmt"
	"math"
	"strings"

	"github.com/parallax-engine/parallax/engine"
)

// Host side of the attention family. Tensor-core kernels
// (shaders/cuda/attention_mma.cu) take bf16 tensors with head dimensions
// 32, 64 and 128 (decode also 16); everything else runs the SIMT kernels
// of attention_simt.cu, in f32 arithmetic (double for linear attention and
// LLA), which is also the f32 path.

const (
	wgmmaMod = "attention_wgmma"
	mmaMod   = "attention_mma"
	simtMod  = "attention_simt"
	maxD     = 256 // the SIMT kernels keep D/32 <= 8 elements per lane
)

// Tile sizes, as in attention_mma.cu.
const (
	fwdBM   = 64
	decKeys = 64 // keys a decode stage
)

// wStages is the number of K/V (or Q/dO/R) tiles attention_wgmma.cu's
// kernels keep in flight (its STAGES); the fused backward keeps two.
func wStages(d int, px bool) int {
	switch {
	case d == 64 && px:
		return 4 // STAGES64, at most 4
	case d == 64:
		return 3
	}
	return 2
}

// Tile sizes of attention_wgmma.cu's forward.
const (
	wfwdBM = 128
	wfwdBN = 64
)

// wrowSmem is the dynamic shared memory of the row-parallel wgmma kernels
// (forward and dq/dr): nq row tiles of 128 rows (Q, R; dq/dr also dO),
// wStages K/V tile pairs of bn keys, and 1 KiB for aligning the swizzled
// tiles.
func wrowSmem(D, nq, bn int, px bool) int {
	return (wfwdBM*nq+2*wStages(D, px)*bn)*D*2 + 1024 + 64 // 64: the TMA kernels' mbarriers
}

// wfwdTMASmem is the dynamic shared memory of attn_fwd_tma: wrowSmem and a
// panel of ones (bn x 128 bytes) after each stage's V, the kernel's row
// sums (RSUM).
func wfwdTMASmem(D, bn int, px bool) int {
	nq := 1
	if px {
		nq = 2
	}
	return wrowSmem(D, nq, bn, px) + wStages(D, px)*bn*128
}

// Tile sizes of attention_wgmma.cu's backward: 128 keys a block, query
// tiles of 64 rows.
const (
	wbwdBK = 128
	wbwdBQ = 64
)

// wbwdSmem is the dynamic shared memory of attn_dkv_wgmma: K and V, the
// buffers of the Q, dO (and R) tiles and their four row statistics, the
// two warpgroups' dS and dT tiles with dq, their dS, dT and Pe tiles for
// Parallax (used at D = 128, the kernel's SMEMFRAG), and 1 KiB for
// alignment.
func wbwdSmem(D int, px, dq bool) int {
	nq := 2
	if px {
		nq = 3
	}
	ns := wStages(D, px)
	if dq {
		ns = 2
	}
	n := 2*wbwdBK*D*2 + ns*nq*wbwdBQ*D*2 + ns*4*wbwdBQ*4 + 1024 + 64 // 64: the TMA kernel's mbarriers
	switch {
	case px: // (at D = 64 only if SMEMFRAG is switched on there)
		n += 2 * 3 * 64 * 64 * 2
	case dq:
		n += 2 * 2 * 64 * 64 * 2
	}
	return n
}

// attnBwdFused is the Hopper backward after the row pre-pass: one kernel
// computes dK and dV and adds dQ and dR into zeroed f32 buffers, which are
// then rounded to bf16.
func (d *Device) attnBwdFused(a engine.AttentionBackwardArgs, dm engine.AttnDims, T, Bv uint64) error {
	px, D := a.R != nil, dm.D
	n := int64(dm.B*dm.Hq*dm.Lq) * int64(D)
	nb := int64(1)
	if px {
		nb = 2
	}
	acc, err := d.scratch(nb * n * 4)
	if err != nil {
		return err
	}
	defer d.alloc.put(acc)
	if err := d.zero(acc.ptr, nb*n*4); err != nil {
		return err
	}
	dqf, drf := acc.ptr, uint64(0)
	if px {
		drf = acc.ptr + uint64(n)*4
	}
	if err := d.launch(wgmmaMod, fmt.Sprintf("attn_dkv_wgmma_d%d_%s_dq", D, kind(px)),
		[3]int{(dm.Lk + wbwdBK - 1) / wbwdBK, dm.Hkv, dm.B}, [3]int{256, 1, 1}, wbwdSmem(D, px, true),
		newArgs().p(ptr(a.Q)).p(ptr(a.R)).p(ptr(a.K)).p(ptr(a.V)).p(ptr(a.DO)).p(ptr(a.LSE)).p(T).p(Bv).p(ptr(a.Tbar)).
			p(ptr(a.DK)).p(ptr(a.DV)).p(dqf).p(drf).i(dm.Hq).i(dm.Hkv).i(dm.Lq).i(dm.Lk).f(dm.Scale).i(b2i(dm.Causal)).i(dm.Window)); err != nil {
		return err
	}
	if err := d.castRaw(ptr(a.DQ), a.DQ.DType(), dqf, engine.F32, n); err != nil {
		return err
	}
	if !px {
		return nil
	}
	return d.castRaw(ptr(a.DR), a.DR.DType(), drf, engine.F32, n)
}

// tileMap is the tensor map of a bf16 tensor of heads x rows x D (Q, dO,
// R, K or V) in boxes of 64 rows x 64 columns with the 128-byte swizzle,
// as attention_wgmma.cu's TMA kernels read their tiles.
func (d *Device) tileMap(t *engine.Tensor, heads, rows, D int) (*tensorMap, error) {
	L, w := uint64(rows), uint64(D)
	return d.newTensorMap(tmBF16, ptr(t), []uint64{w, L, uint64(heads)}, []uint64{w * 2, L * w * 2},
		[]uint32{64, 64, 1}, tmSwizzle128)
}

// tmaBlock is the block of attention_wgmma.cu's TMA kernels
// (TMA_THREADS): two warpgroups, and for Parallax at D = 64 a producer
// warpgroup.
func tmaBlock(D int, px bool) [3]int {
	if D == 64 && px {
		return [3]int{384, 1, 1}
	}
	return [3]int{256, 1, 1}
}

// kvMaps are the tensor maps of K and V for the row-parallel TMA kernels.
func (d *Device) kvMaps(k, v *engine.Tensor, dm engine.AttnDims) (mk, mv *tensorMap, err error) {
	if mk, err = d.tileMap(k, dm.B*dm.Hkv, dm.Lk, dm.D); err != nil {
		return nil, nil, err
	}
	if mv, err = d.tileMap(v, dm.B*dm.Hkv, dm.Lk, dm.D); err != nil {
		return nil, nil, err
	}
	return mk, mv, nil
}

// attnFwdTMA launches the forward kernel name (an attn_fwd_tma_*) with
// the K and V tiles read through tensor maps.
func (d *Device) attnFwdTMA(a engine.AttentionArgs, dm engine.AttnDims, name string, smem int) error {
	mk, mv, err := d.kvMaps(a.K, a.V, dm)
	if err != nil {
		return err
	}
	return d.launch(wgmmaMod, name, [3]int{(dm.Lq + wfwdBM - 1) / wfwdBM, dm.Hq, dm.B}, tmaBlock(dm.D, a.R != nil), smem,
		newArgs().p(ptr(a.Q)).p(ptr(a.R)).p(ptr(a.O)).p(ptr(a.Vbar)).p(ptr(a.LSE)).p(ptr(a.Tbar)).
			i(dm.Hq).i(dm.Hkv).i(dm.Lq).i(dm.Lk).f(dm.Scale).i(b2i(dm.Causal)).i(dm.Window).tmap(mk).tmap(mv))
}

// attnDqTMA launches attn_dq_tma: dQ and dR with the K and V tiles read
// through tensor maps.
func (d *Device) attnDqTMA(a engine.AttentionBackwardArgs, dm engine.AttnDims, T, Bv uint64, smem int) error {
	mk, mv, err := d.kvMaps(a.K, a.V, dm)
	if err != nil {
		return err
	}
	return d.launch(wgmmaMod, fmt.Sprintf("attn_dq_tma_d%d_%s", dm.D, kind(a.R != nil)),
		[3]int{(dm.Lq + wfwdBM - 1) / wfwdBM, dm.Hq, dm.B}, tmaBlock(dm.D, a.R != nil), smem,
		newArgs().p(ptr(a.Q)).p(ptr(a.R)).p(ptr(a.DO)).p(ptr(a.LSE)).p(T).p(Bv).p(ptr(a.Tbar)).p(ptr(a.DQ)).p(ptr(a.DR)).
			i(dm.Hq).i(dm.Hkv).i(dm.Lq).i(dm.Lk).f(dm.Scale).i(b2i(dm.Causal)).i(dm.Window).tmap(mk).tmap(mv))
}

// attnDkvTMA launches attn_dkv_tma: dK and dV with Q, dO, R and the packed
// row statistics (stats, from bwd_pre_bf16) read through tensor maps.
func (d *Device) attnDkvTMA(a engine.AttentionBackwardArgs, dm engine.AttnDims, stats uint64) error {
	px, D := a.R != nil, dm.D
	bh, Lq := uint64(dm.B*dm.Hq), uint64(dm.Lq)
	rowMap := func(t *engine.Tensor) (*tensorMap, error) { return d.tileMap(t, dm.B*dm.Hq, dm.Lq, D) } // wbwdBQ = 64 rows
	mq, err := rowMap(a.Q)
	if err != nil {
		return err
	}
	mg, err := rowMap(a.DO)
	if err != nil {
		return err
	}
	mr := mq
	if px {
		if mr, err = rowMap(a.R); err != nil {
			return err
		}
	}
	ms, err := d.newTensorMap(tmF32, stats, []uint64{4, Lq, bh}, []uint64{16, Lq * 16}, []uint32{4, wbwdBQ, 1}, tmSwizzle0)
	if err != nil {
		return err
	}
	return d.launch(wgmmaMod, fmt.Sprintf("attn_dkv_tma_d%d_%s", D, kind(px)),
		[3]int{(dm.Lk + wbwdBK - 1) / wbwdBK, dm.Hkv, dm.B}, tmaBlock(dm.D, px), wbwdSmem(D, px, false),
		newArgs().p(ptr(a.K)).p(ptr(a.V)).p(ptr(a.DK)).p(ptr(a.DV)).i(dm.Hq).i(dm.Hkv).i(dm.Lq).i(dm.Lk).f(dm.Scale).
			i(b2i(dm.Causal)).i(dm.Window).tmap(mq).tmap(mg).tmap(mr).tmap(ms))
}

// wgmma reports whether the Hopper kernels of attention_wgmma.cu are
// compiled for this device (sm_90a) and not switched off (Options.NoWGMMA).
func (d *Device) wgmma() bool {
	return d.g.hasWgmma() && !d.opts.NoWGMMA
}

// tma reports whether the wgmma kernels may load through tensor maps: the
// driver encodes them and Options.NoTMA is off.
func (d *Device) tma() bool { return hasTensorMaps() && !d.opts.NoTMA }

func fwdBN(d int) int {
	if d >= 128 {
		return 32
	}
	return 64
}

// allBF16 reports whether every non-nil tensor is bf16.
func allBF16(ts ...*engine.Tensor) bool {
	for _, t := range ts {
		if t != nil && t.DType() != engine.BF16 {
			return false
		}
	}
	return true
}

func mmaD(d int) bool { return d == 32 || d == 64 || d == 128 }

func kind(parallax bool) string {
	if parallax {
		return "px"
	}
	return "sm"
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func needD(op string, d int) error {
	if d > maxD {
		return &engine.ArgError{Op: op, Operand: "q", Msg: fmt.Sprintf("head dimension %d exceeds the CUDA backend's %d", d, maxD)}
	}
	return nil
}

// warpRows is the grid of the one-warp-per-row SIMT kernels (4 warps a
// block).
func warpRows(rows int) [3]int { return [3]int{max(1, (rows+3)/4), 1, 1} }

var threads128 = [3]int{128, 1, 1}

// Attention is the streaming forward (docs/MATH.md sections 2-3).
func (d *Device) Attention(a engine.AttentionArgs) error {
	dims, err := engine.CheckAttention(d.own, a)
	if err != nil {
		return err
	}
	if err := needD("attention", dims.D); err != nil {
		return err
	}
	rows := dims.B * dims.Hq * dims.Lq
	if rows == 0 {
		return nil
	}
	px := a.R != nil
	if allBF16(a.Q, a.K, a.V, a.R, a.O, a.Vbar) && d.wgmma() && (dims.D == 64 || dims.D == 128) {
		// attention_wgmma.cu: 128 query rows a block, two warpgroups, key
		// tiles of 64 or 128 with wStages in flight; 1 KiB for aligning
		// the swizzled tiles.
		nq := 1
		if px {
			nq = 2
		}
		// 64-key tiles: since the kernels' leaner elementwise step they
		// measured faster than 128 at D = 64 and 128, softmax and Parallax
		// (H200); Options.ForwardKeyTile = 128 takes 128 (Parallax at
		// D = 128 has no registers for them).
		name, bn := fmt.Sprintf("attn_fwd_wgmma_d%d_%s", dims.D, kind(px)), wfwdBN
		if d.opts.ForwardKeyTile == 128 && (!px || dims.D == 64) {
			name, bn = fmt.Sprintf("attn_fwd_wgmma_d%d_bn128_%s", dims.D, kind(px)), 128
		}
		smem := wrowSmem(dims.D, nq, bn, px)
		// TMA K/V loads unless Options.ForwardLoads is cp.async (or no
		// tensor maps).
		if d.opts.ForwardLoads != "cp.async" && d.tma() {
			return d.attnFwdTMA(a, dims, strings.Replace(name, "_wgmma_", "_tma_", 1), wfwdTMASmem(dims.D, bn, px))
		}
		return d.launch(wgmmaMod, name,
			[3]int{(dims.Lq + wfwdBM - 1) / wfwdBM, dims.Hq, dims.B}, [3]int{256, 1, 1}, smem,
			newArgs().p(ptr(a.Q)).p(ptr(a.R)).p(ptr(a.K)).p(ptr(a.V)).p(ptr(a.O)).p(ptr(a.Vbar)).p(ptr(a.LSE)).p(ptr(a.Tbar)).
				i(dims.Hq).i(dims.Hkv).i(dims.Lq).i(dims.Lk).f(dims.Scale).i(b2i(dims.Causal)).i(dims.Window))
	}
	if allBF16(a.Q, a.K, a.V, a.R, a.O, a.Vbar) && mmaD(dims.D) {
		D, bn := dims.D, fwdBN(dims.D)
		name := fmt.Sprintf("attn_fwd_mma_d%d_%s", D, kind(px))
		if D == 128 && d.opts.ForwardKeyTile != 32 {
			// 64-key tiles measured 8-10% faster than 32 on the H200
			// despite a few spilled registers in the Parallax variant.
			name, bn = "attn_fwd_mma_d128_bn64_"+kind(px), 64
		}
		sd := D + 8
		nq := 1
		if px {
			nq = 2
		}
		smem := (fwdBM*sd*nq + 4*bn*sd) * 2
		return d.launch(mmaMod, name, [3]int{(dims.Lq + fwdBM - 1) / fwdBM, dims.Hq, dims.B}, threads128, smem,
			newArgs().p(ptr(a.Q)).p(ptr(a.R)).p(ptr(a.K)).p(ptr(a.V)).p(ptr(a.O)).p(ptr(a.Vbar)).p(ptr(a.LSE)).p(ptr(a.Tbar)).
				i(dims.Hq).i(dims.Hkv).i(dims.Lq).i(dims.Lk).f(dims.Scale).i(b2i(dims.Causal)).i(dims.Window))
	}
	return d.attnSIMT(a.Q, a.R, a.K, a.V, a.O, a.Vbar, a.LSE, a.Tbar, dims.B, dims.Hq, dims.Hkv, dims.Lq, dims.Lk, dims.D,
		dims.Scale, dims.Causal, dims.Window, nil)
}

// simtSmallD is SMALLD of attention_simt.cu: the largest head dimension
// of its lane-per-key kernels.
const simtSmallD = 16

// simtKernel is the SIMT attention kernel name for head dimension D
// (simtForm), rows the tensors the kernel streams row by row (nil: an
// absent operand).
func (d *Device) simtKernel(name string, D int, rows ...*engine.Tensor) string {
	v4 := !d.opts.NoSmallV4
	for _, t := range rows {
		if t != nil && (t.DType() != engine.F32 || ptr(t)%16 != 0) {
			v4 = false
		}
	}
	return name + simtForm(d.opts.SmallHeads, D, v4)
}

// simtForm is the suffix of a SIMT attention kernel: the lane-per-key
// "_small" form up to simtSmallD under Options.SmallHeads, and of it the
// "_small_v4" form (16-byte loads of each row, the same arithmetic) where
// D % 4 == 0 and the streamed rows are F32 and 16-byte aligned (f32rows).
func simtForm(small bool, D int, f32rows bool) string {
	switch {
	case !small || D > simtSmallD:
		return ""
	case D%4 == 0 && f32rows:
		return "_small_v4"
	}
	return "_small"
}

func dtOr(t *engine.Tensor) int {
	if t == nil {
		return 0
	}
	return dt(t)
}

func (d *Device) attnSIMT(q, r, k, v, o, vbar, lse, tbar *engine.Tensor, B, Hq, Hkv, Lq, Lk, D int, scale float32,
	causal bool, window int, lens *engine.Tensor) error {
	return d.launch(simtMod, d.simtKernel("attn_fwd_simt", D, k, v), warpRows(B*Hq*Lq), threads128, 4*2*D*4,
		newArgs().p(ptr(q)).p(ptr(r)).p(ptr(k)).p(ptr(v)).p(ptr(o)).p(ptr(vbar)).p(ptr(lse)).p(ptr(tbar)).
			i(dt(q)).i(dtOr(r)).i(dt(k)).i(dt(v)).i(dt(o)).i(dtOr(vbar)).
			i(B).i(Hq).i(Hkv).i(Lq).i(Lk).i(D).f(scale).i(b2i(causal)).i(window).p(ptr(lens)).p(d.errBuf.ptr))
}

// AttentionBackward computes dQ, dK, dV (and dR): a row pre-pass T = g.o,
// Bv = g.vbar, then a row-parallel dq/dr kernel and a column-parallel
// dk/dv kernel (docs/MATH.md section 4).
func (d *Device) AttentionBackward(a engine.AttentionBackwardArgs) error {
	dims, err := engine.CheckAttentionBackward(d.own, a)
	if err != nil {
		return err
	}
	if err := needD("attention backward", dims.D); err != nil {
		return err
	}
	B, Hq, Hkv, Lq, Lk, D := dims.B, dims.Hq, dims.Hkv, dims.Lq, dims.Lk, dims.D
	rows := B * Hq * Lq
	px := a.R != nil
	if rows == 0 {
		if Lk > 0 && B*Hkv > 0 {
			if err := d.zero(ptr(a.DK), int64(a.DK.Bytes())); err != nil {
				return err
			}
			return d.zero(ptr(a.DV), int64(a.DV.Bytes()))
		}
		return nil
	}
	bf16 := allBF16(a.Q, a.K, a.V, a.R, a.O, a.DO, a.Vbar, a.DQ, a.DK, a.DV, a.DR)
	// On Hopper: wgmma dq/dr and dk/dv kernels fed by TMA (Parallax at
	// D = 128: dq/dr by cp.async); Options.Backward "split" takes the
	// mma.sync dq/dr kernel instead, "fused" the one-kernel backward with
	// f32 dq/dr reductions (attnBwdFused), "wgmma" the two wgmma kernels
	// with cp.async loads, "tma" the TMA kernels for both.
	mode := d.opts.Backward
	hopper := bf16 && d.wgmma() && (D == 64 || D == 128)
	tma := hopper && (mode == "" || mode == "tma") && d.tma()
	// T and Bv, then (TMA) the packed row statistics, 256-byte aligned
	packed := (int64(rows)*8 + 255) &^ 255
	n := int64(rows) * 8
	if tma {
		n = packed + int64(rows)*16
	}
	st, err := d.scratch(n)
	if err != nil {
		return err
	}
	defer d.alloc.put(st)
	T, Bv, stats := st.ptr, st.ptr+uint64(rows)*4, uint64(0)
	if !px {
		Bv = 0
	}
	if tma {
		stats = st.ptr + uint64(packed)
	}
	if allBF16(a.DO, a.O, a.Vbar) && D%8 == 0 && D <= 256 && D&(D-1) == 0 {
		err = d.launch(simtMod, "bwd_pre_bf16", [3]int{(rows*(D/8) + 255) / 256, 1, 1}, [3]int{256, 1, 1}, 0,
			newArgs().p(ptr(a.DO)).p(ptr(a.O)).p(ptr(a.Vbar)).p(T).p(Bv).l(int64(rows)).i(D).p(ptr(a.LSE)).p(ptr(a.Tbar)).p(stats).f(dims.Scale))
	} else {
		err = d.launch(simtMod, "bwd_pre", warpRows(rows), threads128, 0,
			newArgs().p(ptr(a.DO)).p(ptr(a.O)).p(ptr(a.Vbar)).i(dt(a.DO)).i(dt(a.O)).i(dtOr(a.Vbar)).p(T).p(Bv).l(int64(rows)).i(D))
	}
	if err != nil {
		return err
	}
	common := func(x *args) *args {
		return x.i(Hq).i(Hkv).i(Lq).i(Lk).f(dims.Scale).i(b2i(dims.Causal)).i(dims.Window)
	}
	if hopper && mode == "fused" {
		return d.attnBwdFused(a, dims, T, Bv)
	}
	if bf16 && mmaD(D) {
		sd, bn, bq := D+8, fwdBN(D), fwdBN(D)
		nq := 2
		if px {
			nq = 3
		}
		in := func() *args {
			return newArgs().p(ptr(a.Q)).p(ptr(a.R)).p(ptr(a.K)).p(ptr(a.V)).p(ptr(a.DO)).p(ptr(a.LSE)).p(T).p(Bv).p(ptr(a.Tbar))
		}
		var err error
		dq32 := D == 128 && d.opts.DQKeyTile == 32
		// The TMA dq kernel measured 3-4% slower for Parallax at D = 128
		// (H200, B8 L2048 .. B1 L16384), faster elsewhere; =tma forces it.
		if tma && !dq32 && (mode == "tma" || !(px && D == 128)) {
			err = d.attnDqTMA(a, dims, T, Bv, wrowSmem(D, nq, 64, px))
		} else if hopper && mode != "split" {
			name, wbn := fmt.Sprintf("attn_dq_wgmma_d%d_%s", D, kind(px)), 64
			if dq32 {
				name, wbn = fmt.Sprintf("attn_dq_wgmma_d%d_bn32_%s", D, kind(px)), 32
			}
			err = d.launch(wgmmaMod, name, [3]int{(Lq + wfwdBM - 1) / wfwdBM, Hq, B}, [3]int{256, 1, 1},
				wrowSmem(D, nq, wbn, px), common(in().p(ptr(a.DQ)).p(ptr(a.DR))))
		} else {
			err = d.launch(mmaMod, fmt.Sprintf("attn_dq_mma_d%d_%s", D, kind(px)), [3]int{(Lq + fwdBM - 1) / fwdBM, Hq, B},
				threads128, (fwdBM*sd*nq+4*bn*sd)*2, common(in().p(ptr(a.DQ)).p(ptr(a.DR))))
		}
		if err != nil || Lk == 0 {
			return err
		}
		if tma {
			return d.attnDkvTMA(a, dims, stats)
		}
		if hopper {
			return d.launch(wgmmaMod, fmt.Sprintf("attn_dkv_wgmma_d%d_%s", D, kind(px)),
				[3]int{(Lk + wbwdBK - 1) / wbwdBK, Hkv, B}, [3]int{256, 1, 1}, wbwdSmem(D, px, false),
				common(in().p(ptr(a.DK)).p(ptr(a.DV)).p(0).p(0)))
		}
		smemKV := (2*64*sd+2*bq*sd*nq)*2 + 2*4*bq*4
		return d.launch(mmaMod, fmt.Sprintf("attn_dkv_mma_d%d_%s", D, kind(px)),
			[3]int{(Lk + 63) / 64, Hkv, B}, threads128, smemKV, common(in().p(ptr(a.DK)).p(ptr(a.DV))))
	}
	in := func() *args {
		return newArgs().p(ptr(a.Q)).p(ptr(a.R)).p(ptr(a.K)).p(ptr(a.V)).p(ptr(a.DO)).p(ptr(a.LSE)).p(T).p(Bv).p(ptr(a.Tbar))
	}
	dts := func(x *args, o1, o2 *engine.Tensor) *args {
		return x.i(dt(a.Q)).i(dtOr(a.R)).i(dt(a.K)).i(dt(a.V)).i(dt(a.DO)).i(dt(o1)).i(dtOr(o2)).i(B).i(Hq).i(Hkv).i(Lq).i(Lk).i(D).
			f(dims.Scale).i(b2i(dims.Causal)).i(dims.Window)
	}
	if err := d.launch(simtMod, d.simtKernel("attn_dq_simt", D, a.K, a.V), warpRows(rows), threads128, 4*3*D*4,
		dts(in().p(ptr(a.DQ)).p(ptr(a.DR)), a.DQ, a.DR)); err != nil {
		return err
	}
	return d.launch(simtMod, d.simtKernel("attn_dkv_simt", D, a.Q, a.R, a.DO), warpRows(B*Hkv*Lk), threads128, 4*2*D*4,
		dts(in().p(ptr(a.DK)).p(ptr(a.DV)), a.DK, a.DV))
}

// decodeScratch returns the split partials (n floats) and the per-(batch,
// KV head) completion counters (m ints), kept between calls: the counters
// are zeroed once when allocated and the last block of each group resets
// its own, so a call needs no memset.
func (d *Device) decodeScratch(n, m int) (part, cnt uint64, err error) {
	if d.decPart == nil || d.decPart.size < int64(n)*4 {
		d.scratchGen++
		if d.decPart != nil {
			d.alloc.put(d.decPart)
		}
		if d.decPart, err = d.alloc.get(int64(n) * 4); err != nil {
			d.decPart = nil
			return 0, 0, err
		}
	}
	if d.decCnt == nil || d.decCnt.size < int64(m)*4 {
		d.scratchGen++
		if d.decCnt != nil {
			d.alloc.put(d.decCnt)
		}
		if d.decCnt, err = d.alloc.get(int64(m) * 4); err != nil {
			d.decCnt = nil
			return 0, 0, err
		}
		if err := d.zero(d.decCnt.ptr, d.decCnt.size); err != nil {
			return 0, 0, err
		}
	}
	return d.decPart.ptr, d.decCnt.ptr, nil
}

// DecodeAttention is split-KV attention over a KV cache (Flash-Decoding).
// On the tensor-core path (bf16, D in 16..128, G*Lq up to 8 x
// maxDecodeTiles rows, in tiles of 8) it is one launch: the G query heads
// of a KV head share its blocks, planDecode
// picks the splits and the ring depth, and the last block of each (batch,
// KV head) to finish merges the splits. Nothing on the host depends on the
// lengths (a device tensor), so the launch replays in a CUDA graph.
func (d *Device) DecodeAttention(a engine.DecodeArgs) error {
	dims, err := engine.CheckDecode(d.own, a)
	if err != nil {
		return err
	}
	if err := needD("decode attention", dims.D); err != nil {
		return err
	}
	B, Hq, Hkv, Lq, D := dims.B, dims.Hq, dims.Hkv, dims.Lq, dims.D
	if B*Hq*Lq == 0 {
		return nil
	}
	px := a.R != nil
	env, err := decodeEnvNow()
	if err != nil {
		return err
	}
	tiles := decodeTiles(dims.G, Lq)
	if allBF16(a.Q, a.R, a.KCache, a.VCache, a.O) && (D == 16 || mmaD(D)) && tiles <= env.maxTiles() {
		p, err := planDecode(decodeGPU{sms: d.g.sms, smemOptin: d.g.smemOptin, minKeys: d.opts.DecodeSplitKeys},
			B*Hkv*tiles, dims.Cap, D, a.Splits, env)
		if err != nil {
			return err
		}
		if env.report {
			reportDecode(p, B, Hkv, dims.G, Lq, dims.Cap, D, px)
		}
		splits := p.splits
		pst := 24 + 16*D
		pp, cp := uint64(0), uint64(0)
		if splits > 1 {
			if pp, cp, err = d.decodeScratch(B*Hkv*tiles*splits*pst, B*Hkv*tiles); err != nil {
				return err
			}
		}
		return d.launch(mmaMod, decodeKernel(D, p.stages, px), [3]int{splits * tiles, Hkv, B}, threads128, decodeSmem(D, p.stages),
			newArgs().p(ptr(a.Q)).p(ptr(a.R)).p(ptr(a.KCache)).p(ptr(a.VCache)).p(ptr(a.O)).p(ptr(a.Lens)).
				i(Hq).i(Hkv).i(Lq).i(dims.Cap).f(dims.Scale).i(dims.Window).i(splits).i(tiles).p(pp).p(cp).p(d.errBuf.ptr))
	}
	// The SIMT path streams each row's keys in one pass; splitting only
	// changes rounding, so Splits is not needed there.
	return d.attnSIMT(a.Q, a.R, a.KCache, a.VCache, a.O, nil, nil, nil, B, Hq, Hkv, Lq, dims.Cap, D, dims.Scale,
		true, dims.Window, a.Lens)
}

// LLA is exact local linear attention, one block per query row in double
// precision; Sig and the weights of a chunk of rows live in a scratch.
func (d *Device) LLA(a engine.LLAArgs) error {
	dims, err := engine.CheckLLA(d.own, a)
	if err != nil {
		return err
	}
	if err := needD("lla", dims.D); err != nil {
		return err
	}
	if err := engine.CheckLLASolvable(dims, a.Lambda); err != nil {
		return err
	}
	tol, maxIter := a.CGLimits(dims.D)
	rows := dims.B * dims.Hq * dims.Lq
	if rows == 0 {
		return nil
	}
	per := int64(dims.D*dims.D+dims.Lk) * 8
	chunk := int(max(1, min(int64(rows), (256<<20)/per)))
	scr, err := d.scratch(int64(chunk) * per)
	if err != nil {
		return err
	}
	defer d.alloc.put(scr)
	direct := b2i(a.Solver == engine.SolveDirect)
	for r0 := 0; r0 < rows; r0 += chunk {
		n := min(chunk, rows-r0)
		x := newArgs().p(ptr(a.Q)).p(ptr(a.K)).p(ptr(a.V)).p(ptr(a.O)).p(ptr(a.RhoStar)).p(ptr(a.Eta)).
			i(dt(a.Q)).i(dt(a.K)).i(dt(a.V)).i(dt(a.O)).i(dtOr(a.RhoStar)).
			i(dims.B).i(dims.Hq).i(dims.Hkv).i(dims.Lq).i(dims.Lk).i(dims.D).f(dims.Scale).i(b2i(dims.Causal)).i(dims.Window)
		x.l(int64(f64bits(float64(a.Lambda)))).i(direct).l(int64(f64bits(tol))).i(maxIter).p(scr.ptr).l(int64(r0)).p(d.errBuf.ptr)
		if err := d.launch(simtMod, "lla_row", [3]int{n, 1, 1}, threads128, 7*dims.D*8, x); err != nil {
			return err
		}
	}
	return nil
}

// LinearAttention is plain or affine linear attention, one warp per row
// (double sums).
func (d *Device) LinearAttention(a engine.LinearAttentionArgs) error {
	dims, err := engine.CheckLinearAttention(d.own, a)
	if err != nil {
		return err
	}
	if err := needD("linear attention", dims.D); err != nil {
		return err
	}
	rows := dims.B * dims.Hq * dims.Lq
	if rows == 0 {
		return nil
	}
	return d.launch(simtMod, "lin_fwd", warpRows(rows), threads128, 4*dims.D*4,
		newArgs().p(ptr(a.R)).p(ptr(a.K)).p(ptr(a.V)).p(ptr(a.O)).i(dt(a.R)).i(dt(a.K)).i(dt(a.V)).i(dt(a.O)).
			i(dims.B).i(dims.Hq).i(dims.Hkv).i(dims.Lq).i(dims.Lk).i(dims.D).i(b2i(dims.Causal)).i(dims.Window).i(b2i(a.Affine)))
}

// LinearAttentionBackward computes dR (row-parallel) and dK, dV
// (column-parallel) after a per-row statistics pass.
func (d *Device) LinearAttentionBackward(a engine.LinearAttentionBackwardArgs) error {
	dims, err := engine.CheckLinearAttentionBackward(d.own, a)
	if err != nil {
		return err
	}
	if err := needD("linear attention backward", dims.D); err != nil {
		return err
	}
	B, Hq, Hkv, Lq, Lk, D := dims.B, dims.Hq, dims.Hkv, dims.Lq, dims.Lk, dims.D
	rows := B * Hq * Lq
	if rows == 0 {
		if err := d.zero(ptr(a.DK), int64(a.DK.Bytes())); err != nil {
			return err
		}
		return d.zero(ptr(a.DV), int64(a.DV.Bytes()))
	}
	st, err := d.scratch(int64(rows) * 24)
	if err != nil {
		return err
	}
	defer d.alloc.put(st)
	tail := func(x *args) *args {
		return x.i(B).i(Hq).i(Hkv).i(Lq).i(Lk).i(D).i(b2i(dims.Causal)).i(dims.Window)
	}
	if err := d.launch(simtMod, "lin_stats", warpRows(rows), threads128, 4*2*D*4,
		tail(newArgs().p(ptr(a.R)).p(ptr(a.K)).p(ptr(a.V)).p(ptr(a.DO)).i(dt(a.R)).i(dt(a.K)).i(dt(a.V)).i(dt(a.DO)).p(st.ptr))); err != nil {
		return err
	}
	if err := d.launch(simtMod, "lin_dr", warpRows(rows), threads128, 4*D*4,
		tail(newArgs().p(ptr(a.K)).p(ptr(a.V)).p(ptr(a.DO)).p(ptr(a.DR)).i(dt(a.K)).i(dt(a.V)).i(dt(a.DO)).i(dt(a.DR)).p(st.ptr)).
			i(b2i(a.Affine))); err != nil {
		return err
	}
	return d.launch(simtMod, "lin_dkv", warpRows(B*Hkv*Lk), threads128, 4*2*D*4,
		tail(newArgs().p(ptr(a.R)).p(ptr(a.K)).p(ptr(a.V)).p(ptr(a.DO)).p(ptr(a.DK)).p(ptr(a.DV)).
			i(dt(a.R)).i(dt(a.K)).i(dt(a.V)).i(dt(a.DO)).i(dt(a.DK)).i(dt(a.DV)).p(st.ptr)).i(b2i(a.Affine)))
}

func f64bits(x float64) uint64 { return math.Float64bits(x) }
