package vulkan

import (
	"fmt"
	"math"

	"github.com/parallax-engine/parallax/engine"
)

// Attention and its backward through GL_KHR_cooperative_matrix
// (shaders/attn_fwd_coop_khr.comp, attn_dq_coop_khr.comp,
// attn_dkv_coop_khr.comp): the NV kernels' algorithms with the fragment
// edge and the subgroup size taken from the device, for the GPUs without
// VK_NV_cooperative_matrix (AMD, Intel) and for lavapipe, where CI
// certifies them.

// subgroupShuffle is VK_SUBGROUP_FEATURE_SHUFFLE_BIT: the KHR forward
// reduces a row's softmax statistics over its invocations by shuffles.
const subgroupShuffle = 0x10

// khrAttention reports the fragment edge F attn_fwd_coop_khr runs with on
// a device whose matmul path is mm (square F x F x F fragments, F 8 or 16)
// and whose subgroups are sg wide, or why it cannot: its softmax gives a
// row LPR = sg / F invocations (1, 2 or 4) of KPL = F / LPR keys each (4
// or 8), so sg is F, 2 F or 4 F with F^2 / sg keys an invocation.
func khrAttention(mm matmulPath, sg int) (int, string) {
	if mm.kind != coopKHR {
		return 0, "no KHR cooperative-matrix path"
	}
	f := mm.shape.M
	if mm.shape.N != f || mm.shape.K != f || (f != 8 && f != 16) {
		return 0, fmt.Sprintf("fragments %dx%dx%d (the attention kernel takes 8x8x8 or 16x16x16)", mm.shape.M, mm.shape.N, mm.shape.K)
	}
	if sg%f != 0 || (sg/f != 1 && sg/f != 2 && sg/f != 4) || (f*f/sg != 4 && f*f/sg != 8) {
		return 0, fmt.Sprintf("%d-wide subgroups with %d-wide fragments", sg, f)
	}
	return f, ""
}

// khrAttnShared is the shared memory attn_fwd_coop_khr declares at head
// dimension D and fragment edge f, with the probe (the larger case).
func khrAttnShared(D, f int) int {
	sd, br, ff := D+8, 2*f, f*f
	return 2*2*br*sd + 2*2*f*sd + 4*2*2*ff + 2*2*2*ff + 4*4*br + 4*2*br
}

// useFwdCoopKHR reports whether attn_fwd_coop_khr serves a forward: the
// operands useFwdCoop takes (softmax or Parallax without a KV cache, Q, K,
// V and R in bf16 or f16, K and V of one dtype) and its head dimensions
// (multiples of 16 up to 128: the two tensor-core paths take the same
// shapes, so a case runs alike on both, non-finite inputs included, which
// the f16 paths report rather than propagate), on a device whose KHR
// kernel passed its self-test and has shuffles and votes in compute
// shaders.
// Options.Attention "scalar" keeps attn_fwd.
func (d *Device) useFwdCoopKHR(c fwdCall) bool {
	dts := []engine.DType{c.q.dt, c.k.dt, c.v.dt}
	if c.hasR {
		dts = append(dts, c.r.dt)
	}
	return c.lens == nil && d.khrAttnTakes(c.dims, c.mode, subgroupShuffle, dts...) &&
		khrAttnShared(c.dims.D, d.khrAttn) <= int(d.pd.lim.maxSharedMemory)
}

// khrAttnTakes reports what the KHR attention kernels need of a call: the
// kernels kept at open, softmax weighting, the attention option not
// "scalar", D a multiple of 16 up to 128, the subgroup operations ops
// besides basic and vote ones, and 16-bit operands dts (the first three
// Q, K and V: K and V of one dtype).
func (d *Device) khrAttnTakes(dm engine.AttnDims, mode int, ops uint32, dts ...engine.DType) bool {
	return d.khrAttn != 0 && mode == modeSoftmax && d.opts.Attention != "scalar" && dts[1] == dts[2] &&
		dm.D%16 == 0 && dm.D <= 128 && d.hasSubgroupOps(subgroupBasic|subgroupVote|ops) && sixteenBit(dts...)
}

// attnForwardCoopKHR runs attn_fwd_coop_khr: a workgroup of two subgroups
// per 2 F rows of each (sequence, KV head).
func (d *Device) attnForwardCoopKHR(c fwdCall) error {
	dm, f := c.dims, d.khrAttn
	br := 2 * f
	nblocks := (dm.G*dm.Lq + br - 1) / br
	flags := flag(c.lse.r != d.dummy) | flag(c.vb.r != d.dummy)<<1 | flag(c.tb.r != d.dummy)<<2
	pc := push(uint32(dm.B), uint32(dm.Hq), uint32(dm.Hkv), uint32(dm.G), uint32(dm.Lq), uint32(dm.Lk),
		dm.Causal, uint32(dm.Window), dm.Scale, uint32(1), uint32(nblocks), flags)
	sp := spec{1: uint32(dm.D), 2: uint32(f), 3: uint32(d.subgroup), 5: flag(c.hasR)}
	return d.launch("attn_fwd_coop_khr", 2*d.subgroup, sp, pc, d.groups1(dm.B*dm.Hkv*nblocks),
		c.q, c.k, c.v, c.r, c.o, c.lse, c.vb, c.tb, d.statusArg())
}

// checkAttnKHR runs a small causal Parallax forward and backward (two
// heads of a GQA group, a ragged last row block, f16 operands) through the
// KHR kernels and through the scalar ones and returns why the former are
// not kept: an error, or results further apart than f16's rounding of the
// probabilities and their gradients allows.
func (d *Device) checkAttnKHR() string {
	const B, Hq, Hkv, L, D = 1, 2, 1, 37, 16
	var ts []*engine.Tensor
	defer func() {
		for _, t := range ts {
			d.Free(t)
		}
	}()
	var err error
	newT := func(dt engine.DType, vals []float32, shape ...int) *engine.Tensor {
		if err != nil {
			return nil
		}
		var t *engine.Tensor
		if vals != nil {
			t, err = engine.FromFloat32(d, dt, vals, shape...)
		} else {
			t, err = d.Alloc(dt, shape...)
		}
		if err == nil {
			ts = append(ts, t)
		}
		return t
	}
	q, k := newT(engine.F16, selfTestValues(B*Hq*L*D, 1), B, Hq, L, D), newT(engine.F16, selfTestValues(B*Hkv*L*D, 2), B, Hkv, L, D)
	v, r := newT(engine.F16, selfTestValues(B*Hkv*L*D, 3), B, Hkv, L, D), newT(engine.F16, selfTestValues(B*Hq*L*D, 4), B, Hq, L, D)
	do := newT(engine.F16, selfTestValues(B*Hq*L*D, 5), B, Hq, L, D)
	if err != nil {
		return err.Error()
	}
	saved := d.opts.Attention
	defer func() { d.opts.Attention = saved }()
	var got [2][5][]float32 // o, dq, dk, dv, dr
	for i, path := range []string{saved, "scalar"} {
		d.opts.Attention = path
		fa := engine.AttentionArgs{Q: q, K: k, V: v, R: r, O: newT(engine.F32, nil, B, Hq, L, D),
			LSE: newT(engine.F32, nil, B, Hq, L), Vbar: newT(engine.F32, nil, B, Hq, L, D), Tbar: newT(engine.F32, nil, B, Hq, L),
			AttentionOpts: engine.AttentionOpts{Causal: true}}
		ba := engine.AttentionBackwardArgs{Q: q, K: k, V: v, R: r, O: fa.O, DO: do, LSE: fa.LSE, Vbar: fa.Vbar, Tbar: fa.Tbar,
			DQ: newT(engine.F32, nil, B, Hq, L, D), DK: newT(engine.F32, nil, B, Hkv, L, D), DV: newT(engine.F32, nil, B, Hkv, L, D),
			DR: newT(engine.F32, nil, B, Hq, L, D), AttentionOpts: fa.AttentionOpts}
		if err == nil {
			err = d.Attention(fa)
		}
		if err == nil {
			err = d.AttentionBackward(ba)
		}
		for j, t := range []*engine.Tensor{fa.O, ba.DQ, ba.DK, ba.DV, ba.DR} {
			if err == nil {
				got[i][j], err = engine.Float32s(t)
			}
		}
		if err == nil {
			err = d.Sync()
		}
		if err != nil {
			return err.Error()
		}
	}
	// The probabilities, P T and the gradients' dS, dT and W are rounded
	// to f16 (2^-11 relative) before their products: a few times that of
	// each result's scale, where a misplaced fragment, row or key would be
	// off by the whole scale.
	for j, name := range []string{"o", "dq", "dk", "dv", "dr"} {
		var worst, scale float64
		for e := range got[1][j] {
			worst = max(worst, math.Abs(float64(got[0][j][e]-got[1][j][e])))
			scale = max(scale, math.Abs(float64(got[1][j][e])))
		}
		if !(worst <= 1e-2*max(scale, 1e-3)) {
			return fmt.Sprintf("%s: mismatch %.3g against the scalar kernels (scale %.3g)", name, worst, scale)
		}
	}
	return ""
}

// khrBwdShared is the larger shared memory of attn_dq_coop_khr and
// attn_dkv_coop_khr at head dimension D and fragment edge f.
func khrBwdShared(D, f int) int {
	sd, ff := D+8, f*f
	rows := 2*3*2*f*sd + 2*2*f*sd + 4*2*3*ff + 2*2*2*ff + 6*4*2*f
	cols := 2*2*2*f*sd + 2*3*f*sd + 4*2*3*ff + 2*2*3*ff + 6*4*f + 2*4*64
	return max(rows, cols)
}

// useBwdCoopKHR reports whether attn_dq_coop_khr and attn_dkv_coop_khr
// serve a backward: the operands useBwdCoop takes (softmax or Parallax,
// 16-bit Q, K, V, dO and R, K and V of one dtype, GQA groups of at most
// 64 heads) with the KHR forward's head dimensions and device conditions.
func (d *Device) useBwdCoopKHR(c bwdCall) bool {
	dts := []engine.DType{c.q.dt, c.k.dt, c.v.dt, c.g.dt}
	if c.hasR {
		dts = append(dts, c.r.dt)
	}
	return c.dims.G <= 64 && d.khrAttnTakes(c.dims, c.mode, 0, dts...) &&
		khrBwdShared(c.dims.D, d.khrAttn) <= int(d.pd.lim.maxSharedMemory)
}

// attnBackwardCoopKHR runs the KHR backward after the pre-pass: dq and dr
// per 2 F rows, dk and dv per 2 F keys of each (sequence, KV head).
func (d *Device) attnBackwardCoopKHR(c bwdCall, stats arg) error {
	dm, f := c.dims, d.khrAttn
	sp := spec{1: uint32(dm.D), 2: uint32(f), 3: uint32(d.subgroup), 5: flag(c.hasR)}
	launch := func(kernel string, n int, outA, outB arg) error {
		if n == 0 {
			return nil
		}
		nb := (n + 2*f - 1) / (2 * f)
		pc := push(uint32(dm.B), uint32(dm.Hq), uint32(dm.Hkv), uint32(dm.G), uint32(dm.Lq), uint32(dm.Lk),
			dm.Causal, uint32(dm.Window), dm.Scale, uint32(1), uint32(nb), uint32(0))
		return d.launch(kernel, 2*d.subgroup, sp, pc, d.groups1(dm.B*dm.Hkv*nb),
			c.q, c.k, c.v, c.r, c.g, c.lse, c.tb, stats, outA, outB, d.statusArg())
	}
	if err := launch("attn_dq_coop_khr", dm.G*dm.Lq, c.dq, c.dr); err != nil {
		return err
	}
	return launch("attn_dkv_coop_khr", dm.Lk, c.dk, c.dv)
}

// sixteenBit reports whether every dtype is bf16 or f16: the tensor-core
// attention kernels' operands.
func sixteenBit(dts ...engine.DType) bool {
	for _, dt := range dts {
		if dt != engine.BF16 && dt != engine.F16 {
			return false
		}
	}
	return true
}
