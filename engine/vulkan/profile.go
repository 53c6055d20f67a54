package vulkan

/*
#include "pxvk.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"strconv"
	"unsafe"

	vk "github.com/vulkan-go/vulkan"

	"github.com/parallax-engine/parallax/engine"
)

var _ engine.Profiler = (*Device)(nil)

// queriesPerPool is the size of each timestamp query pool of a profile
// (two queries an op). Pools are created as a profile needs them and kept
// for the next one.
const queriesPerPool = 2048

// profiler is a device's per-op timing (engine.Profiler). While on, every
// dispatch, buffer copy and fill is recorded between two timestamps
// written at the bottom of the pipe, i.e. when every earlier command has
// finished: an op's time is how far its completion moved the end of the
// device's work. Dispatches without a barrier between them overlap; then
// each is charged the part of the timeline it added, and the times still
// add up to the busy time of the batch. Nothing waits for the timestamps
// before StopProfile.
type profiler struct {
	on    bool
	pools []queryPool
	next  int      // queries used by this profile
	ops   []profOp // the ops timed so far
	tag   profOp   // name, FLOPs and bytes for the next dispatch (profileAs; launch takes it)
}

// queryPool is one timestamp query pool of queriesPerPool queries.
type queryPool struct {
	pool  handle
	reset bool // reset (in a command buffer) for this profile
}

// profOp is one timed op: its name, FLOPs and bytes when known, and its
// first query (the second is q+1).
type profOp struct {
	name         string
	flops, bytes float64
	q            int
}

// StartProfile starts timing every command recorded from now on; it fails
// if the compute queue has no timestamps. It does not wait for the device.
func (d *Device) StartProfile() error {
	if d.closed {
		return fmt.Errorf("vulkan: start profile: %w", errClosed)
	}
	if d.pd.tsBits == 0 || d.pd.lim.timestampPeriod == 0 {
		return fmt.Errorf("vulkan: start profile: %s cannot time ops: its compute queue (family %d) has no timestamps (timestampValidBits %d, timestampPeriod %g)",
			d.pd.name, d.pd.queueFamily, d.pd.tsBits, d.pd.lim.timestampPeriod)
	}
	p := &d.prof
	if p.on {
		return errors.New("vulkan: start profile: a profile is being recorded already")
	}
	if d.b.rec != nil {
		return errors.New("vulkan: start profile: a graph is being recorded")
	}
	p.on, p.next, p.ops, p.tag = true, 0, p.ops[:0], profOp{}
	for i := range p.pools {
		p.pools[i].reset = false
	}
	return nil
}

// StopProfile waits for the recorded work once and reads the timestamps.
func (d *Device) StopProfile() (engine.Profile, error) {
	p := &d.prof
	if !p.on {
		return nil, errors.New("vulkan: stop profile: no profile was started")
	}
	p.on, p.tag = false, profOp{}
	ops := p.ops
	p.ops = ops[:0]
	if d.closed {
		return nil, fmt.Errorf("vulkan: stop profile: %w", errClosed)
	}
	if err := d.b.waitAll(); err != nil {
		return nil, fmt.Errorf("vulkan: stop profile: %w", err)
	}
	// Every batch has completed, so each query written is available; the
	// results come with an availability word, so an unwritten query (an op
	// whose recording failed) is never waited for.
	ts := make([]uint64, 0, 2*p.next)
	for c := 0; c*queriesPerPool < p.next; c++ {
		n := min(queriesPerPool, p.next-c*queriesPerPool)
		buf := make([]uint64, 2*n)
		flags := vk.QueryResultFlags(vk.QueryResult64Bit | vk.QueryResultWithAvailabilityBit)
		res := vk.GetQueryPoolResults(d.dev, vkOf[vk.QueryPool](p.pools[c].pool), 0, uint32(n), uint(8*len(buf)), unsafe.Pointer(&buf[0]), 16, flags)
		if res != vk.Success && res != vk.NotReady {
			return nil, fmt.Errorf("vulkan: stop profile: %w", vkErr("vkGetQueryPoolResults", res))
		}
		ts = append(ts, buf...)
	}
	mask := ^uint64(0)
	if d.pd.tsBits < 64 {
		mask = 1<<d.pd.tsBits - 1
	}
	entries := make([]engine.ProfileEntry, len(ops))
	for i, op := range ops {
		t0, a0, t1, a1 := ts[2*op.q], ts[2*op.q+1], ts[2*op.q+2], ts[2*op.q+3]
		if a0 == 0 || a1 == 0 {
			return nil, fmt.Errorf("vulkan: stop profile: the timestamps of op %d of %d (%s) are not available after the device finished", i+1, len(ops), op.name)
		}
		// The counter wraps at timestampValidBits; the difference modulo
		// that is right for any op shorter than a wrap.
		ns := float64((t1-t0)&mask) * float64(d.pd.lim.timestampPeriod)
		if ns > 1e13 {
			return nil, fmt.Errorf("vulkan: stop profile: op %d of %d (%s): implausible timestamps %d, %d", i+1, len(ops), op.name, t0, t1)
		}
		entries[i] = engine.ProfileEntry{Name: op.name, Calls: 1, Millis: ns / 1e6, FLOPs: op.flops, Bytes: op.bytes}
	}
	return engine.AggregateProfile(entries), nil
}

// profileAs names the next dispatch in a profile (instead of its kernel)
// and gives its FLOPs and bytes when known; a no-op when not profiling.
func (d *Device) profileAs(name string, flops, bytes float64) {
	if d.prof.on {
		d.prof.tag = profOp{name: name, flops: flops, bytes: bytes}
	}
}

// profileGemm names the next dispatch, nz of a MatMul's products, for a
// profile (engine.GemmName) with its FLOPs (2 M N K each) and the bytes it
// must move at least (each operand once, the output twice when
// accumulated).
func (d *Device) profileGemm(o, a, b *engine.Tensor, opts engine.MatMulOpts, dims engine.MatMulDims, nz int) {
	if !d.prof.on {
		return
	}
	m, n, k, z := float64(dims.M), float64(dims.N), float64(dims.K), float64(nz)
	bz, oz := z, z
	if dims.SharedB {
		bz = 1
	}
	if opts.Accumulate {
		oz *= 2
	}
	bytes := m*k*z*float64(a.DType().Size()) + k*n*bz*float64(b.DType().Size()) + m*n*oz*float64(o.DType().Size())
	d.profileAs(engine.GemmName(a.DType(), b.DType(), o.DType(), dims.M, dims.N, dims.K, dims.Batch, opts.TransA, opts.TransB),
		2*m*n*k*z, bytes)
}

// profBegin writes the timestamp before the next command into f and
// returns its query. The pair of queries it takes is used once per
// profile: a query must be reset before it is written again.
func (d *Device) profBegin(f *frame) (int, error) {
	p := &d.prof
	q := p.next
	c := q / queriesPerPool // a pair never straddles two pools: queriesPerPool is even
	if c == len(p.pools) {
		ci := &vk.QueryPoolCreateInfo{SType: vk.StructureTypeQueryPoolCreateInfo, QueryType: vk.QueryTypeTimestamp, QueryCount: queriesPerPool}
		var qp vk.QueryPool
		if res := vk.CreateQueryPool(d.dev, ci, nil, &qp); res != vk.Success {
			return 0, fmt.Errorf("vulkan: profile: %w", vkErr("vkCreateQueryPool", res))
		}
		h := toHandle(qp)
		if err := checkHandle("VkQueryPool", h); err != nil {
			return 0, fmt.Errorf("vulkan: profile: %w", err)
		}
		p.pools = append(p.pools, queryPool{pool: h})
	}
	pool := &p.pools[c]
	if !pool.reset {
		// Reset on the queue, ahead of the first timestamp into the pool
		// (query commands on one queue execute in order).
		C.px_reset_queries(d.px, unsafe.Pointer(f.cmd), C.pxHandle(pool.pool), 0, queriesPerPool)
		pool.reset = true
	}
	C.px_timestamp(d.px, unsafe.Pointer(f.cmd), C.pxHandle(pool.pool), C.uint32_t(q%queriesPerPool))
	p.next += 2
	return q, nil
}

// profEnd writes the timestamp after the command begun at query q and
// counts the command as op.
func (d *Device) profEnd(f *frame, q int, op profOp) {
	p := &d.prof
	C.px_timestamp(d.px, unsafe.Pointer(f.cmd), C.pxHandle(p.pools[q/queriesPerPool].pool), C.uint32_t(q%queriesPerPool+1))
	op.q = q
	p.ops = append(p.ops, op)
}

// takeTag returns the profileAs tag for a dispatch of kernel (its name and
// mode without one) and clears it, so it never names a later dispatch.
func (d *Device) takeTag(kernel string, sp spec) profOp {
	op := d.prof.tag
	d.prof.tag = profOp{}
	if op.name == "" {
		op = profOp{name: profName(kernel, sp)}
	}
	return op
}

// profFree destroys the query pools (Close, once the device is idle).
func (d *Device) profFree() {
	for _, qp := range d.prof.pools {
		vk.DestroyQueryPool(d.dev, vkOf[vk.QueryPool](qp.pool), nil)
	}
	d.prof = profiler{}
}

// modeNames names the modes of kernels that do several jobs, picked by
// specialization constant 1, so that a profile tells them apart.
var modeNames = map[string]map[uint32]string{
	"elementwise": {
		ewAddScaled: "add scaled", ewSwiGLU: "swiglu", ewSwiGLUBwd: "swiglu backward", ewAdamW: "adamw",
		ewMuonMom: "muon momentum", ewMuonApply: "muon apply", ewScaleBlocks: "scale blocks",
	},
	"rmsnorm": {0: "forward", 1: "backward dx", 2: "backward dw partials", 3: "backward dw sum"},
	"reduce":  {0: "partials", 1: "sum"},
}

// profName is a dispatch's name in a profile: the kernel, with its mode
// for the kernels of modeNames.
func profName(kernel string, sp spec) string {
	modes, ok := modeNames[kernel]
	if !ok {
		return kernel
	}
	mode, ok := modes[sp[1]]
	if !ok {
		mode = "mode " + strconv.FormatUint(uint64(sp[1]), 10)
	}
	return kernel + " " + mode
}
