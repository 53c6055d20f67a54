package vulkan

import (
	"fmt"
	"maps"

	"github.com/parallax-engine/parallax/engine"
)

// The attention family (docs/MATH.md sections 2-6) on five kernels:
//
//	attn_fwd       streaming forward: softmax / Parallax / uniform weights,
//	               full or split-KV partial states, over K/V or a KV cache
//	attn_combine   merges split-KV partial states (decode)
//	attn_bwd_pre   T = g.o and Bv = g.vbar per row
//	attn_dq  dq, dr (row-parallel)
//	attn_dkv  dk, dv (column-parallel)
//
// Linear attention is the uniform-weight member of the same kernels: plain
// o = sum (r.k) v and affine o = vbar - Sigma_KV r are the streaming
// forward with every score 0 (and no normalisation for plain).

const (
	modeSoftmax = 0
	modeAffine  = 1
	modePlain   = 2
)

// attnTiles are a kernel's block sizes: WG invocations, BR rows, BC keys.
type attnTiles struct{ wg, br, bc int }

type attnKernel int

const (
	kFwd attnKernel = iota
	kRows
	kCols
)

// sharedBytes is the shared memory the kernel declares for these tiles
// (it mirrors the declarations in the shaders).
func (k attnKernel) sharedBytes(D, br, bc int, softmax, hasR bool) int {
	qsz, rsz := 1, 1
	if softmax {
		qsz = br * D
	}
	if hasR {
		rsz = br * D
	}
	switch k {
	case kFwd:
		return 4 * (qsz + rsz + 2*bc*D + 2*br*bc + 6*br)
	case kRows:
		return 4 * (qsz + rsz + br*D + 2*bc*D + 2*br*bc + 7*br)
	}
	return 4 * (qsz + rsz + br*D + 2*bc*D + 3*br*bc + 7*br)
}

func nextPow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}

// planAttn picks tiles for kernel k with head dimension D and rows rows
// per (batch, KV head) that fit the device's shared memory, keep at most
// 16 accumulator elements per invocation and prefer up to 16 rows and 32
// keys per tile.
func (d *Device) planAttn(k attnKernel, D, rows int, softmax, hasR bool) (attnTiles, error) {
	limit := int(d.pd.lim.maxSharedMemory) - 256
	maxWG := min(256, int(d.pd.lim.maxGroupInvocations), int(d.pd.lim.maxGroupSize[0]))
	for br := min(16, nextPow2(max(rows, 1))); br >= 1; br /= 2 {
		for bc := 32; bc >= 1; bc /= 2 {
			if k.sharedBytes(D, br, bc, softmax, hasR) > limit {
				continue
			}
			acc := br * D
			if k == kCols {
				acc = bc * D
			}
			wg := min(max(64, nextPow2((acc+15)/16)), 256)
			if wg > maxWG || (acc+wg-1)/wg > 16 {
				continue
			}
			return attnTiles{wg, br, bc}, nil
		}
	}
	return attnTiles{}, fmt.Errorf("head dimension %d needs more than this device's %d KiB of shared memory per workgroup",
		D, d.pd.lim.maxSharedMemory/1024)
}

// fwdCall is one attention-family forward.
type fwdCall struct {
	dims           engine.AttnDims
	q, k, v, r     arg
	o, lse, vb, tb arg
	mode           int
	hasR           bool
	lens           *engine.Tensor // decode: per-sequence lengths
	splits         int
}

func flag(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

func (d *Device) attnForward(c fwdCall) error {
	dm := c.dims
	rows := dm.G * dm.Lq
	if dm.B*dm.Hkv == 0 || rows == 0 {
		return nil
	}
	if d.useFwdCoop(c) {
		return d.attnForwardCoop(c)
	}
	if d.useFwdCoopKHR(c) {
		return d.attnForwardCoopKHR(c)
	}
	tl, err := d.planAttn(kFwd, dm.D, rows, c.mode == modeSoftmax, c.hasR)
	if err != nil {
		return err
	}
	nblocks := (rows + tl.br - 1) / tl.br
	S := d.capSplits(dm, c.splits)
	decode := c.lens != nil
	partial := decode && S > 1
	flags := flag(c.lse.r != d.dummy) | flag(c.vb.r != d.dummy)<<1 | flag(c.tb.r != d.dummy)<<2
	pc := push(uint32(dm.B), uint32(dm.Hq), uint32(dm.Hkv), uint32(dm.G), uint32(dm.Lq), uint32(dm.Lk),
		dm.Causal || decode, uint32(dm.Window), dm.Scale, uint32(S), uint32(nblocks), flags)
	sp := spec{1: uint32(dm.D), 2: uint32(tl.br), 3: uint32(tl.bc), 4: uint32(c.mode), 5: flag(c.hasR), 6: flag(decode), 7: flag(partial)}
	lens := d.none()
	if decode {
		lens = in(c.lens)
	}
	part := d.none()
	if partial {
		var release func()
		if part, release, err = d.partialStates(dm, S); err != nil {
			return err
		}
		defer release()
	}
	groups := d.groups1(dm.B * dm.Hkv * nblocks * S)
	if err := d.launch("attn_fwd", tl.wg, sp, pc, groups, c.q, c.k, c.v, c.r, c.o, c.lse, c.vb, c.tb, lens, part, d.statusArg()); err != nil {
		return err
	}
	if !partial {
		return nil
	}
	return d.combineSplits(dm, pc, part, c.o, lens, c.hasR)
}

// coopAttention reports whether the tensor-core attention kernels can take
// head dimension D (a multiple of 16, at most maxD) with operands of the
// dtypes dts (each bf16 or f16) on this device: NV cooperative matrices,
// 32-wide subgroups and the subgroup operations ops in compute shaders.
func (d *Device) coopAttention(D, maxD int, ops uint32, dts ...engine.DType) bool {
	if !d.coop || d.subgroup != 32 || D%16 != 0 || D > maxD || !d.hasSubgroupOps(ops) {
		return false
	}
	for _, dt := range dts {
		if dt != engine.BF16 && dt != engine.F16 {
			return false
		}
	}
	return true
}

// useFwdCoop reports whether attn_fwd_coop (tensor cores, f16 operands)
// serves a forward: softmax or Parallax attention without a KV cache, Q, K,
// V (and R) in bf16 or f16 with K and V of one dtype, D a multiple of 16 up
// to 128, on a device with the NV cooperative-matrix kernels, 32-wide
// subgroups and clustered subgroup operations. Options.Attention "scalar"
// keeps attn_fwd.
func (d *Device) useFwdCoop(c fwdCall) bool {
	dm := c.dims
	dts := []engine.DType{c.q.dt, c.k.dt}
	if c.hasR {
		dts = append(dts, c.r.dt)
	}
	if c.lens != nil || c.mode != modeSoftmax || d.opts.Attention == "scalar" || c.k.dt != c.v.dt ||
		!d.coopAttention(dm.D, 128, subgroupBasic|subgroupVote|subgroupClustered, dts...) {
		return false
	}
	sd := dm.D + 8
	shared := 2*2*32*sd + 2*16*sd*2 + 4*2*2*256 + 2*2*2*256 + 4*4*2*16 + 2*4*32
	return shared <= int(d.pd.lim.maxSharedMemory)
}

// attnForwardCoop runs attn_fwd_coop: one workgroup of two subgroups per
// 32 rows of each (sequence, KV head).
func (d *Device) attnForwardCoop(c fwdCall) error {
	dm := c.dims
	nblocks := (dm.G*dm.Lq + 31) / 32
	flags := flag(c.lse.r != d.dummy) | flag(c.vb.r != d.dummy)<<1 | flag(c.tb.r != d.dummy)<<2
	pc := push(uint32(dm.B), uint32(dm.Hq), uint32(dm.Hkv), uint32(dm.G), uint32(dm.Lq), uint32(dm.Lk),
		dm.Causal, uint32(dm.Window), dm.Scale, uint32(1), uint32(nblocks), flags)
	sp := spec{1: uint32(dm.D), 5: flag(c.hasR)}
	return d.launch("attn_fwd_coop", 64, sp, pc, d.groups1(dm.B*dm.Hkv*nblocks), c.q, c.k, c.v, c.r, c.o, c.lse, c.vb, c.tb, d.statusArg())
}

// useBwdCoop reports whether attn_dq_coop and attn_dkv_coop
// (tensor cores, f16 operands) serve a backward: softmax or Parallax
// attention with 16-bit Q, K, V, dO (and R), K and V of one dtype, D a
// multiple of 16 up to 128, GQA groups of at most 64 heads, on a device
// with the NV cooperative-matrix kernels, 32-wide subgroups and subgroup
// vote operations (the kernels' error check). Options.Attention "scalar"
// keeps the scalar kernels.
func (d *Device) useBwdCoop(c bwdCall) bool {
	dm := c.dims
	dts := []engine.DType{c.q.dt, c.k.dt, c.g.dt}
	if c.hasR {
		dts = append(dts, c.r.dt)
	}
	if c.mode != modeSoftmax || d.opts.Attention == "scalar" || c.k.dt != c.v.dt || dm.G > 64 ||
		!d.coopAttention(dm.D, 128, subgroupBasic|subgroupVote, dts...) {
		return false
	}
	sd := dm.D + 8
	rowsShared := 2*3*32*sd + 2*2*16*sd + 4*2*768 + 2*2*512 + 6*4*32
	colsShared := 2*2*32*sd + 2*3*16*sd + 4*2*768 + 2*2*768 + 6*4*16
	return max(rowsShared, colsShared) <= int(d.pd.lim.maxSharedMemory)
}

// attnBackwardCoop runs the tensor-core backward after the pre-pass: dq
// and dr per 32 rows, dk and dv per 32 keys of each (sequence, KV head).
func (d *Device) attnBackwardCoop(c bwdCall, stats arg) error {
	if err := d.bwdRowsCoop(c, stats); err != nil {
		return err
	}
	return d.bwdColsCoop(c, stats)
}

// bwdRowsCoop launches attn_dq_coop (dq, dr).
func (d *Device) bwdRowsCoop(c bwdCall, stats arg) error {
	dm := c.dims
	rows := dm.G * dm.Lq
	if rows == 0 {
		return nil
	}
	nb := (rows + 31) / 32
	pc := push(uint32(dm.B), uint32(dm.Hq), uint32(dm.Hkv), uint32(dm.G), uint32(dm.Lq), uint32(dm.Lk),
		dm.Causal, uint32(dm.Window), dm.Scale, uint32(1), uint32(nb), uint32(0))
	return d.launch("attn_dq_coop", 64, spec{1: uint32(dm.D), 5: flag(c.hasR)}, pc, d.groups1(dm.B*dm.Hkv*nb),
		c.q, c.k, c.v, c.r, c.g, c.lse, c.tb, stats, c.dq, c.dr, d.statusArg())
}

// bwdColsCoop launches attn_dkv_coop (dk, dv).
func (d *Device) bwdColsCoop(c bwdCall, stats arg) error {
	dm := c.dims
	if dm.Lk == 0 {
		return nil
	}
	nb := (dm.Lk + 31) / 32
	pc := push(uint32(dm.B), uint32(dm.Hq), uint32(dm.Hkv), uint32(dm.G), uint32(dm.Lq), uint32(dm.Lk),
		dm.Causal, uint32(dm.Window), dm.Scale, uint32(1), uint32(nb), uint32(0))
	return d.launch("attn_dkv_coop", 64, spec{1: uint32(dm.D), 5: flag(c.hasR)}, pc, d.groups1(dm.B*dm.Hkv*nb),
		c.q, c.k, c.v, c.r, c.g, c.lse, c.tb, stats, c.dk, c.dv, d.statusArg())
}

// capSplits is the split count S (at least 1), bounded so that the
// split-KV partial states fit one binding.
func (d *Device) capSplits(dm engine.AttnDims, S int) int {
	if S <= 1 {
		return 1
	}
	perSplit := dm.B * dm.Hq * dm.Lq * (3 + 2*dm.D) * 4
	return max(1, min(S, int(d.MaxTensorBytes())/max(perSplit, 1)))
}

// partialStates returns the partial states (m, d1, d2, O1, O2 for each
// row and split) of S splits: the front of the device's decode scratch,
// kept between calls and grown when too small (which stales the graphs
// recorded over the old one). release is a no-op, kept for the callers.
func (d *Device) partialStates(dm engine.AttnDims, S int) (part arg, release func(), err error) {
	bytes := uint64(max(dm.B*dm.Hq*dm.Lq*S*(3+2*dm.D), 1)) * 4
	if lim := uint64(d.MaxTensorBytes()); bytes > lim {
		return arg{}, nil, fmt.Errorf("vulkan: decode partial states of %s exceed this device's limit of %s per binding (maxStorageBufferRange)",
			formatSize(bytes), formatSize(lim))
	}
	if d.decPart == nil || d.decPart.size < bytes {
		r, err := d.mem.alloc(bytes)
		if err != nil {
			return arg{}, nil, err
		}
		// The old states are freed in stream order (or, while a graph is
		// recorded, kept by it); graphs recorded over them are stale.
		d.mem.release(d.decPart)
		d.decPart = r
		d.scratchGen++
	}
	return arg{r: d.decPart, size: bytes, dt: engine.F32, write: true}, func() {}, nil
}

// combineSplits merges the partial states into o (attn_combine, one
// workgroup per row).
func (d *Device) combineSplits(dm engine.AttnDims, pc []uint32, part, o, lens arg, hasR bool) error {
	part.write = false
	return d.launch("attn_combine", 64, spec{1: uint32(dm.D), 5: flag(hasR)}, pc, d.groups1(dm.B*dm.Hq*dm.Lq), part, o, lens)
}

// Attention is the streaming forward of softmax or Parallax attention;
// see engine.Ops.
func (d *Device) Attention(a engine.AttentionArgs) error {
	dims, err := engine.CheckAttention(d.own, a)
	if err != nil {
		return err
	}
	return d.attnForward(fwdCall{
		dims: dims, q: in(a.Q), k: in(a.K), v: in(a.V), r: d.opt(a.R, false),
		o: out(a.O), lse: d.opt(a.LSE, true), vb: d.opt(a.Vbar, true), tb: d.opt(a.Tbar, true),
		mode: modeSoftmax, hasR: a.R != nil, splits: 1,
	})
}

// DecodeAttention is attention over a KV cache with per-sequence lengths,
// split-KV: Splits chunks of each sequence's keys are processed by
// separate workgroups (all G query heads of a KV head together) and a
// combine pass merges their partial states; see engine.Ops. Lengths
// outside [Lq, Cap] are reported by Sync (those sequences' outputs are
// not written).
func (d *Device) DecodeAttention(a engine.DecodeArgs) error {
	dd, err := engine.CheckDecode(d.own, a)
	if err != nil {
		return err
	}
	dims := engine.AttnDims{B: dd.B, Hq: dd.Hq, Hkv: dd.Hkv, G: dd.G, Lq: dd.Lq, Lk: dd.Cap, D: dd.D,
		Offset: dd.Cap - dd.Lq, Scale: dd.Scale, Causal: true, Window: dd.Window}
	if k, ok := d.planDecode(dims, a); ok {
		return d.decodeFast(dims, k, a)
	}
	splits := a.Splits
	if splits == 0 {
		splits = d.decodeSplits(dims)
	}
	return d.attnForward(fwdCall{
		dims: dims, q: in(a.Q), k: in(a.KCache), v: in(a.VCache), r: d.opt(a.R, false),
		o: out(a.O), lse: d.none(), vb: d.none(), tb: d.none(),
		mode: modeSoftmax, hasR: a.R != nil, lens: a.Lens, splits: splits,
	})
}

// decodeLaunch is a decode kernel and how it is launched: its module,
// workgroup size, specialization (without the partial flag), keys per
// tile and the number of workgroups its split count aims for.
type decodeLaunch struct {
	kernel string
	wg     int
	sp     spec
	bc     int
	target int
}

// Subgroup operation bits (VkSubgroupFeatureFlagBits) and the compute
// stage bit.
const (
	subgroupBasic      = 0x1
	subgroupVote       = 0x2
	subgroupArithmetic = 0x4
	subgroupClustered  = 0x40
	stageCompute       = 0x20
)

// hasSubgroupOps reports whether compute shaders have every subgroup
// operation class in ops.
func (d *Device) hasSubgroupOps(ops uint32) bool {
	x := &d.pd.x
	return uint32(x.subgroupOps)&ops == ops && uint32(x.subgroupStages)&stageCompute != 0
}

// planDecode chooses the decode kernel, fastest first:
//
//	attn_decode_coop8  tensor cores (NV cooperative matrix, f16 operands,
//	                   16 x 8 x 16): at most 4 query rows per KV head;
//	attn_decode_coop   the same as 16 x 16 x 16 products: at most 8 rows;
//	attn_decode        scalar, bandwidth-built: any cache dtype, D a power
//	                   of two of whole 16-byte pieces, at most 8 rows;
//
// the tensor-core kernels for bf16 or f16 caches and D a multiple of 16 up
// to 256, all for K and V of one dtype. It returns false for everything
// else, which takes the general attn_fwd path. Options.Decode forces a
// kernel: wide (attn_decode_coop), scalar or generic (attn_fwd);
// Options.DecodeVariant "sh16" stages the tensor-core kernels' K and V as
// 16-bit elements, Options.DecodeKeyTile 16 gives attn_decode_coop8 16-key
// tiles.
func (d *Device) planDecode(dm engine.AttnDims, a engine.DecodeArgs) (decodeLaunch, bool) {
	force := d.opts.Decode
	if force == "generic" {
		return decodeLaunch{}, false
	}
	rows := dm.G * dm.Lq
	dt := a.KCache.DType()
	if rows > 8 || dt != a.VCache.DType() {
		return decodeLaunch{}, false
	}
	hasR := flag(a.R != nil)
	if k, ok := d.planDecodeCoop(dm, dt, rows, force); ok {
		k.sp[5] = hasR
		return k, true
	}
	x := &d.pd.x
	if dm.D&(dm.D-1) != 0 || dm.D < 8 || !d.hasSubgroupOps(subgroupBasic|subgroupArithmetic) {
		return decodeLaunch{}, false
	}
	h16 := dt != engine.F32
	nw := dm.D
	if h16 {
		nw = dm.D / 2
	}
	if nw%4 != 0 {
		return decodeLaunch{}, false
	}
	rp := 4
	if rows > 4 {
		rp = 8
	}
	minSG := int(x.subgroupSize)
	if x.minSubgroupSize != 0 {
		minSG = min(minSG, int(x.minSubgroupSize))
	}
	limit := int(d.pd.lim.maxSharedMemory) - 256
	maxWG := min(int(d.pd.lim.maxGroupInvocations), int(d.pd.lim.maxGroupSize[0]))
	// Loading the next tile during this one's arithmetic measured 4-10%
	// faster on the H200 (docs/PERFORMANCE.md); "plain" is the other.
	kernel := "attn_decode.prefetch"
	if d.opts.DecodeVariant == "plain" {
		kernel = "attn_decode"
	}
	// 32-key tiles measured faster than 64 on the H200 (more workgroups
	// per multiprocessor); 64 remains as a tuning choice.
	for _, bc := range []int{32, 16, 64} {
		if v := d.opts.DecodeKeyTile; v != 0 && v != bc {
			continue // a tuning override
		}
		wg, nv := 2*bc, 2*rp
		shared := 4 * (dm.D*nv + bc*(nw+1) + bc*nw + bc*nv + bc*rp + 16*rp)
		if wg > maxWG || shared > limit || minSG < 1 || wg/minSG > 16 || wg%minSG != 0 ||
			(bc*(nw+1)+bc*nw)/(dm.D*nv) < 1 || (nw < wg && wg%nw != 0) || (nw > wg && nw%wg != 0) ||
			(nw+wg-1)/wg*(dm.D/nw) > 2 || (bc*nw/4+wg-1)/wg > 16 {
			continue
		}
		sp := spec{1: uint32(dm.D), 2: uint32(rp), 3: uint32(bc), 5: hasR}
		return decodeLaunch{kernel: kernel, wg: wg, sp: sp, bc: bc, target: 1024}, true
	}
	return decodeLaunch{}, false
}

// planDecodeCoop chooses a tensor-core decode kernel and its tiles.
func (d *Device) planDecodeCoop(dm engine.AttnDims, dt engine.DType, rows int, force string) (decodeLaunch, bool) {
	if force == "scalar" || !d.coopAttention(dm.D, 256, subgroupBasic|subgroupVote|subgroupClustered, dt) {
		return decodeLaunch{}, false
	}
	kernel, bc, sd, limit := "attn_decode_coop", 16, dm.D+8, int(d.pd.lim.maxSharedMemory)
	shared := 2*16*sd + 2*2*bc*sd + 4*16*16 + 2*16*16 + 4*16*dm.D + 4*8
	if force != "wide" && rows <= 4 && d.pd.hasCoopShapeNV(16, 8, 16) {
		// 32-key tiles halve the per-key barriers and softmax rounds; they
		// need 16 prefetch registers per invocation up to D = 128.
		bc = 32
		if dm.D > 128 || d.opts.DecodeKeyTile == 16 {
			bc = 16
		}
		kernel = "attn_decode_coop8"
		shared = 2*8*sd + 2*2*bc*sd + 4*bc*8 + 2*bc*8 + 4*dm.D*8 + 4*4
	}
	if shared > limit {
		return decodeLaunch{}, false
	}
	if d.opts.DecodeVariant == "sh16" {
		kernel += ".sh16"
	}
	// About 512 workgroups (four per multiprocessor on the H200) measured
	// best: every further split costs a prologue, partial states and
	// combine work (docs/PERFORMANCE.md).
	return decodeLaunch{kernel: kernel, wg: 32, sp: spec{1: uint32(dm.D), 3: uint32(bc)}, bc: bc, target: 512}, true
}

// decodeMinSplitKeys is the fewest keys of an automatic decode split (the
// CUDA backend's default too): a split saves its keys' streaming time but
// costs the combine pass, a dispatch of its own. In a recorded 0.6B decode
// step on the H200 (caches of 193 keys, 8 KV heads, attn_decode_coop8) one
// split took 1.89 ms a step, two 1.94 and the three that two-tile splits
// gave 2.04.
const decodeMinSplitKeys = 128

// decodeFast runs a decode kernel: Splits chunks of each (sequence, KV
// head)'s keys (0: enough for the kernel's target workgroup count, at
// least two tiles and decodeMinSplitKeys keys each), then attn_combine
// when there is more than one.
func (d *Device) decodeFast(dm engine.AttnDims, k decodeLaunch, a engine.DecodeArgs) error {
	if dm.B*dm.Hkv == 0 {
		return nil
	}
	items := dm.B * dm.Hkv
	S := a.Splits
	if S == 0 {
		S = max(1, min((k.target+items-1)/items, dm.Lk/max(2*k.bc, decodeMinSplitKeys), 256))
		if v := d.opts.DecodeSplits; v > 0 {
			S = v // a tuning override
		}
	}
	S = d.capSplits(dm, S)
	partial := S > 1
	pc := push(uint32(dm.B), uint32(dm.Hq), uint32(dm.Hkv), uint32(dm.G), uint32(dm.Lq), uint32(dm.Lk),
		true, uint32(dm.Window), dm.Scale, uint32(S), uint32(1), uint32(0))
	hasR := a.R != nil
	sp := maps.Clone(k.sp)
	sp[7] = flag(partial)
	part := d.none()
	if partial {
		p, release, err := d.partialStates(dm, S)
		if err != nil {
			return err
		}
		defer release()
		part = p
	}
	o := out(a.O)
	if err := d.launch(k.kernel, k.wg, sp, pc, d.groups1(items*S),
		in(a.Q), in(a.KCache), in(a.VCache), d.opt(a.R, false), o, in(a.Lens), part, d.statusArg()); err != nil {
		return err
	}
	if !partial {
		return nil
	}
	return d.combineSplits(dm, pc, part, o, in(a.Lens), hasR)
}

// decodeSplits chooses the split count when the caller leaves it to us:
// enough workgroups to fill a GPU (about 256), chunks of at least 128
// keys of the capacity, at most 64 splits.
func (d *Device) decodeSplits(dims engine.AttnDims) int {
	tl, err := d.planAttn(kFwd, dims.D, dims.G*dims.Lq, true, true)
	if err != nil {
		return 1
	}
	items := dims.B * dims.Hkv * ((dims.G*dims.Lq + tl.br - 1) / tl.br)
	want := (256 + items - 1) / max(items, 1)
	return max(1, min(want, dims.Lk/128, 64))
}

// bwdCall is one attention-family backward.
type bwdCall struct {
	dims           engine.AttnDims
	q, k, v, r, g  arg
	lse, tb        arg
	dq, dk, dv, dr arg
	mode           int
	hasR           bool
	o, vb          arg // for the pre-pass (T = g.o, Bv = g.vbar)
}

func (d *Device) attnBackward(c bwdCall) error {
	dm := c.dims
	if dm.B*dm.Hkv == 0 {
		return nil
	}
	rows := dm.G * dm.Lq
	nrows := dm.B * dm.Hq * dm.Lq
	softmax := c.mode == modeSoftmax
	coop := d.useBwdCoop(c)
	khr := !coop && d.useBwdCoopKHR(c)
	coop = coop || khr
	stats := d.none()
	if (softmax || c.hasR && c.mode == modeAffine) && nrows > 0 {
		// T and Bv per row; for the tensor-core kernels also the largest
		// |dO|, in a last word zeroed first.
		sr, err := d.tmp(2*nrows + 1)
		if err != nil {
			return err
		}
		defer d.mem.release(sr)
		if coop {
			if err := d.b.fill(sr, uint64(8*nrows), 4, 0); err != nil {
				return err
			}
		}
		stats = scratch(sr)
		needT, needBv := softmax, c.hasR && c.mode != modePlain
		pc := push(uint32(nrows), uint32(dm.D), needT, needBv, coop)
		if err := d.launch("attn_bwd_pre", 64, nil, pc, d.strideGroups(nrows, 64), c.o, c.g, c.vb, stats); err != nil {
			return err
		}
		stats.write = false
	}
	switch {
	case khr:
		return d.attnBackwardCoopKHR(c, stats)
	case coop:
		return d.attnBackwardCoop(c, stats)
	}
	if rows > 0 && (softmax || c.hasR) {
		tl, err := d.planAttn(kRows, dm.D, rows, softmax, c.hasR)
		if err != nil {
			return err
		}
		nb := (rows + tl.br - 1) / tl.br
		pc := push(uint32(dm.B), uint32(dm.Hq), uint32(dm.Hkv), uint32(dm.G), uint32(dm.Lq), uint32(dm.Lk),
			dm.Causal, uint32(dm.Window), dm.Scale, uint32(1), uint32(nb), uint32(0))
		sp := spec{1: uint32(dm.D), 2: uint32(tl.br), 3: uint32(tl.bc), 4: uint32(c.mode), 5: flag(c.hasR)}
		if err := d.launch("attn_dq", tl.wg, sp, pc, d.groups1(dm.B*dm.Hkv*nb),
			c.q, c.k, c.v, c.r, c.g, c.lse, c.tb, stats, c.dq, c.dr); err != nil {
			return err
		}
	}
	if dm.Lk == 0 {
		return nil
	}
	tl, err := d.planAttn(kCols, dm.D, rows, softmax, c.hasR)
	if err != nil {
		return err
	}
	nb := (dm.Lk + tl.bc - 1) / tl.bc
	pc := push(uint32(dm.B), uint32(dm.Hq), uint32(dm.Hkv), uint32(dm.G), uint32(dm.Lq), uint32(dm.Lk),
		dm.Causal, uint32(dm.Window), dm.Scale, uint32(1), uint32(nb), uint32(0))
	sp := spec{1: uint32(dm.D), 2: uint32(tl.br), 3: uint32(tl.bc), 4: uint32(c.mode), 5: flag(c.hasR)}
	return d.launch("attn_dkv", tl.wg, sp, pc, d.groups1(dm.B*dm.Hkv*nb),
		c.q, c.k, c.v, c.r, c.g, c.lse, c.tb, stats, c.dk, c.dv)
}

// AttentionBackward computes dQ, dK, dV (and dR) of sum(o * dO); see
// engine.Ops.
func (d *Device) AttentionBackward(a engine.AttentionBackwardArgs) error {
	dims, err := engine.CheckAttentionBackward(d.own, a)
	if err != nil {
		return err
	}
	return d.attnBackward(bwdCall{
		dims: dims, q: in(a.Q), k: in(a.K), v: in(a.V), r: d.opt(a.R, false), g: in(a.DO),
		lse: in(a.LSE), tb: d.opt(a.Tbar, false),
		dq: out(a.DQ), dk: out(a.DK), dv: out(a.DV), dr: d.opt(a.DR, true),
		mode: modeSoftmax, hasR: a.R != nil, o: in(a.O), vb: d.opt(a.Vbar, false),
	})
}

// LinearAttention is plain or affine linear attention with probe R; see
// engine.Ops.
func (d *Device) LinearAttention(a engine.LinearAttentionArgs) error {
	dims, err := engine.CheckLinearAttention(d.own, a)
	if err != nil {
		return err
	}
	mode := modePlain
	if a.Affine {
		mode = modeAffine
	}
	return d.attnForward(fwdCall{
		dims: dims, q: d.none(), k: in(a.K), v: in(a.V), r: in(a.R),
		o: out(a.O), lse: d.none(), vb: d.none(), tb: d.none(),
		mode: mode, hasR: true, splits: 1,
	})
}

// LinearAttentionBackward computes dR, dK, dV of sum(o * dO); see
// engine.Ops. The affine form first reruns the forward for vbar and tbar.
func (d *Device) LinearAttentionBackward(a engine.LinearAttentionBackwardArgs) error {
	dims, err := engine.CheckLinearAttentionBackward(d.own, a)
	if err != nil {
		return err
	}
	c := bwdCall{
		dims: dims, q: d.none(), k: in(a.K), v: in(a.V), r: in(a.R), g: in(a.DO),
		lse: d.none(), tb: d.none(), dq: d.none(), dk: out(a.DK), dv: out(a.DV), dr: out(a.DR),
		mode: modePlain, hasR: true, o: d.none(), vb: d.none(),
	}
	if a.Affine {
		c.mode = modeAffine
		nrows := dims.B * dims.Hq * dims.Lq
		ob, err := d.tmp(nrows * dims.D)
		if err != nil {
			return err
		}
		defer d.mem.release(ob)
		vb, err := d.tmp(nrows * dims.D)
		if err != nil {
			return err
		}
		defer d.mem.release(vb)
		tb, err := d.tmp(nrows)
		if err != nil {
			return err
		}
		defer d.mem.release(tb)
		if err := d.attnForward(fwdCall{
			dims: dims, q: d.none(), k: in(a.K), v: in(a.V), r: in(a.R),
			o: scratch(ob), lse: d.none(), vb: scratch(vb), tb: scratch(tb),
			mode: modeAffine, hasR: true, splits: 1,
		}); err != nil {
			return err
		}
		c.vb, c.tb = scratch(vb), scratch(tb)
		c.vb.write, c.tb.write = false, false
	}
	return d.attnBackward(c)
}
