package vulkan

import (
	"fmt"
	"math"

	"github.com/parallax-engine/parallax/engine"
)

// The attention forward through GL_KHR_cooperative_matrix
// (shaders/attn_fwd_coop_khr.comp): attn_fwd_coop's algorithm with the
// fragment edge and the subgroup size taken from the device, for the GPUs
// without VK_NV_cooperative_matrix (AMD, Intel) and for lavapipe, where CI
// certifies it.

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
	f, dm := d.khrAttn, c.dims
	if f == 0 || c.lens != nil || c.mode != modeSoftmax || d.opts.Attention == "scalar" || c.k.dt != c.v.dt ||
		dm.D%16 != 0 || dm.D > 128 || !d.hasSubgroupOps(subgroupBasic|subgroupVote|subgroupShuffle) {
		return false
	}
	dts := []engine.DType{c.q.dt, c.k.dt}
	if c.hasR {
		dts = append(dts, c.r.dt)
	}
	for _, dt := range dts {
		if dt != engine.BF16 && dt != engine.F16 {
			return false
		}
	}
	return khrAttnShared(dm.D, f) <= int(d.pd.lim.maxSharedMemory)
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

// checkAttnKHR runs a small causal Parallax forward (two heads of a GQA
// group, a ragged last row block, f16 operands, the statistics saved)
// through attn_fwd_coop_khr and through the scalar kernel and returns why
// the former is not kept: an error, or outputs further apart than f16's
// rounding of the probabilities allows.
func (d *Device) checkAttnKHR() string {
	const B, Hq, Hkv, L, D = 1, 2, 1, 37, 32
	var ins []*engine.Tensor
	defer func() {
		for _, t := range ins {
			d.Free(t)
		}
	}()
	for i, h := range []int{Hq, Hkv, Hkv, Hq} {
		t, err := engine.FromFloat32(d, engine.F16, selfTestValues(B*h*L*D, uint32(i+1)), B, h, L, D)
		if err != nil {
			return err.Error()
		}
		ins = append(ins, t)
	}
	saved := d.opts.Attention
	defer func() { d.opts.Attention = saved }()
	var got [2][]float32
	for i, path := range []string{saved, "scalar"} {
		d.opts.Attention = path
		o, err := d.Alloc(engine.F32, B, Hq, L, D)
		if err != nil {
			return err.Error()
		}
		lse, err := d.Alloc(engine.F32, B, Hq, L)
		if err != nil {
			d.Free(o)
			return err.Error()
		}
		err = d.Attention(engine.AttentionArgs{Q: ins[0], K: ins[1], V: ins[2], R: ins[3], O: o, LSE: lse,
			AttentionOpts: engine.AttentionOpts{Causal: true}})
		if err == nil {
			got[i], err = engine.Float32s(o)
		}
		if err == nil {
			err = d.Sync()
		}
		d.Free(o)
		d.Free(lse)
		if err != nil {
			return err.Error()
		}
	}
	var worst, scale float64
	for i := range got[0] {
		worst = max(worst, math.Abs(float64(got[0][i]-got[1][i])))
		scale = max(scale, math.Abs(float64(got[1][i])))
	}
	// The probabilities and P T are rounded to f16 (2^-11 relative) before
	// their products: a few times that of the output's scale, where a
	// misplaced fragment or row would be off by the whole scale.
	if !(worst <= 1e-2*max(scale, 1)) {
		return fmt.Sprintf("mismatch %.3g against the scalar kernel", worst)
	}
	return ""
}
