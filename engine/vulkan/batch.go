package vulkan

/*
#include "pxvk.h"
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"os"
	"time"
	"unsafe"

	vk "github.com/vulkan-go/vulkan"
)

// Batching. Commands are recorded into one command buffer, the batch,
// which is submitted when the host needs results (Read, Sync) or when it
// holds maxBatchOps commands; a ring of frames lets the next batch be
// recorded while earlier ones run. Every batch is numbered (seq); a region
// remembers the last batch that touched it, which is what Read, Write and
// the allocator wait for.
//
// Barriers. Within a batch the hazard tracker keeps the buffer ranges
// accessed since the last barrier (the epoch). A command that reads or
// writes a range written in the epoch, or writes a range read in it, is
// preceded by one pipeline barrier (compute/transfer to compute/transfer)
// whose buffer memory barriers cover every range written in the epoch (a
// global memory barrier when there are many), and the epoch restarts.
// Independent dispatches therefore run without barriers between them. Each
// batch starts with a global memory barrier (it orders against every
// earlier submission on the queue) and ends with one to the host.
//
// Graphs. While a graph is recorded (graph.go) the ops go into the
// graph's own command buffer, a frame that is never reset, with the same
// hazard tracking; host transfers (Alloc's zero fill, staged uploads)
// still go into the batch, which a replay submits first. A replay is
// numbered like a batch, so the regions it touches carry its number.

const (
	numFrames   = 3
	maxBatchOps = 1024
	maxEpoch    = 64 // accesses tracked before a barrier is forced
)

type frame struct {
	cmd   vk.CommandBuffer
	fence handle
	seq   uint64   // batch in flight (0: idle)
	pools []handle // descriptor pools (without push descriptors)
	used  int      // pools used by the batch
	epoch []access // accesses recorded since the last barrier
	graph bool     // a graph's command buffer: replayed, its descriptor sets kept
}

type access struct {
	buf    handle
	lo, hi uint64
	write  bool
}

type deferred struct {
	seq uint64
	fn  func()
}

type batcher struct {
	d         *Device
	ready     bool
	cmdPool   handle
	frames    [numFrames]*frame
	next      int
	cur       *frame
	seq       uint64 // the batch being recorded, or the next one
	completed uint64 // every batch <= completed has finished
	ops       int    // commands in the current batch
	staged    uint64 // staging bytes used by the current batch
	barriers  int    // barriers recorded (for tests)
	submits   int    // batches submitted (for tests)
	later     []deferred
	err       error // a failed submit or wait: the device is unusable

	rec     *recording // the graph being recorded, or nil
	replays []*frame   // graph replays submitted and not yet waited for
}

func (b *batcher) init(d *Device) error {
	b.d = d
	b.seq = 1
	var pool vk.CommandPool
	ci := &vk.CommandPoolCreateInfo{
		SType:            vk.StructureTypeCommandPoolCreateInfo,
		Flags:            vk.CommandPoolCreateFlags(vk.CommandPoolCreateResetCommandBufferBit),
		QueueFamilyIndex: uint32(d.pd.queueFamily),
	}
	if res := vk.CreateCommandPool(d.dev, ci, nil, &pool); res != vk.Success {
		return vkErr("vkCreateCommandPool", res)
	}
	b.cmdPool = toHandle(pool)
	if err := checkHandle("VkCommandPool", b.cmdPool); err != nil {
		return err
	}
	cmds := make([]vk.CommandBuffer, numFrames)
	ai := &vk.CommandBufferAllocateInfo{
		SType:              vk.StructureTypeCommandBufferAllocateInfo,
		CommandPool:        vkOf[vk.CommandPool](b.cmdPool),
		Level:              vk.CommandBufferLevelPrimary,
		CommandBufferCount: numFrames,
	}
	if res := vk.AllocateCommandBuffers(d.dev, ai, cmds); res != vk.Success {
		return vkErr("vkAllocateCommandBuffers", res)
	}
	for i := range b.frames {
		var fence vk.Fence
		if res := vk.CreateFence(d.dev, &vk.FenceCreateInfo{SType: vk.StructureTypeFenceCreateInfo}, nil, &fence); res != vk.Success {
			return vkErr("vkCreateFence", res)
		}
		b.frames[i] = &frame{cmd: cmds[i], fence: toHandle(fence)}
		if err := checkHandle("VkFence", b.frames[i].fence); err != nil {
			return err
		}
	}
	b.ready = true
	return nil
}

func (b *batcher) destroy() {
	d := b.d
	for _, f := range b.frames {
		if f == nil {
			continue
		}
		for _, p := range f.pools {
			vk.DestroyDescriptorPool(d.dev, vkOf[vk.DescriptorPool](p), nil)
		}
		if f.fence != 0 {
			vk.DestroyFence(d.dev, vkOf[vk.Fence](f.fence), nil)
		}
	}
	if b.cmdPool != 0 {
		vk.DestroyCommandPool(d.dev, vkOf[vk.CommandPool](b.cmdPool), nil)
	}
	b.ready = false
}

// begin returns the frame ops record into: the graph's while one is
// recorded, else the batch's (see beginBatch).
func (b *batcher) begin() (*frame, error) {
	if b.err != nil {
		return nil, b.err
	}
	if b.rec != nil {
		return b.rec.f, nil
	}
	return b.beginBatch()
}

// beginBatch makes sure a batch is being recorded and returns its frame.
func (b *batcher) beginBatch() (*frame, error) {
	if b.err != nil {
		return nil, b.err
	}
	if b.cur != nil {
		return b.cur, nil
	}
	f := b.frames[b.next]
	if f.seq != 0 {
		if err := b.wait(f); err != nil {
			return nil, err
		}
	}
	bi := &vk.CommandBufferBeginInfo{
		SType: vk.StructureTypeCommandBufferBeginInfo,
		Flags: vk.CommandBufferUsageFlags(vk.CommandBufferUsageOneTimeSubmitBit),
	}
	if res := vk.BeginCommandBuffer(f.cmd, bi); res != vk.Success {
		return nil, b.setErr(vkErr("vkBeginCommandBuffer", res))
	}
	f.used = 0
	b.cur = f
	b.ops, b.staged = 0, 0
	f.epoch = f.epoch[:0]
	// Order this batch after everything submitted before it.
	C.px_barrier(b.d.px, unsafe.Pointer(f.cmd), 0, nil, nil, nil)
	return f, nil
}

func (b *batcher) setErr(err error) error {
	if b.err == nil {
		b.err = fmt.Errorf("vulkan %s: %w", b.d.info.ID(), err)
	}
	return b.err
}

// submit ends and submits the current batch (if any) without waiting.
func (b *batcher) submit() error {
	f := b.cur
	if f == nil {
		return b.err
	}
	b.cur = nil
	C.px_barrier_host(b.d.px, unsafe.Pointer(f.cmd))
	if res := vk.EndCommandBuffer(f.cmd); res != vk.Success {
		return b.setErr(vkErr("vkEndCommandBuffer", res))
	}
	// Submitted from C: the binding's QueueSubmit frees its C copy of the
	// submit info from a finalizer that may run during the call.
	if res := C.px_submit(b.d.px, unsafe.Pointer(b.d.queue), unsafe.Pointer(f.cmd), C.pxHandle(f.fence)); res != 0 {
		return b.setErr(vkErr("vkQueueSubmit", vk.Result(res)))
	}
	f.seq = b.seq
	b.seq++
	b.submits++
	b.next = (b.next + 1) % numFrames
	return nil
}

// wait blocks until frame f's batch has finished and retires it. On a
// GPU it first polls the fence for up to d.fenceSpin (fenceSpinFor).
func (b *batcher) wait(f *frame) error {
	if f.seq == 0 {
		return nil
	}
	fences := []vk.Fence{vkOf[vk.Fence](f.fence)}
	if spin := b.d.fenceSpin; spin > 0 {
		until := time.Now().Add(spin)
		for vk.GetFenceStatus(b.d.dev, fences[0]) == vk.NotReady && time.Now().Before(until) {
		}
	}
	// Wait in slices, so a batch that never completes (a driver or shader
	// hang) becomes an error after waitTimeout instead of a stuck process.
	deadline := time.Now().Add(waitTimeout())
	for {
		res := vk.WaitForFences(b.d.dev, 1, fences, vk.True, uint64(time.Second))
		if res == vk.Success {
			break
		}
		if res != vk.Timeout {
			return b.setErr(vkErr("vkWaitForFences", res))
		}
		if time.Now().After(deadline) {
			return b.setErr(fmt.Errorf("a batch of commands did not complete within %v (PARALLAX_VULKAN_TIMEOUT)", waitTimeout()))
		}
	}
	if res := vk.ResetFences(b.d.dev, 1, fences); res != vk.Success {
		return b.setErr(vkErr("vkResetFences", res))
	}
	if f.graph {
		// A replay: its descriptor sets serve the next one.
		for i, r := range b.replays {
			if r == f {
				b.replays = append(b.replays[:i], b.replays[i+1:]...)
				break
			}
		}
	} else {
		for _, p := range f.pools[:f.used] {
			vk.ResetDescriptorPool(b.d.dev, vkOf[vk.DescriptorPool](p), 0)
		}
		f.used = 0
	}
	// Every command buffer starts with a barrier on all earlier work, so
	// the batches and replays before this one have finished too.
	b.completed = max(b.completed, f.seq)
	f.seq = 0
	b.runDeferred()
	return nil
}

// waitFor waits until batch seq has finished (submitting it if it is the
// one being recorded).
func (b *batcher) waitFor(seq uint64) error {
	if seq <= b.completed {
		return b.err
	}
	if b.cur != nil && seq >= b.seq {
		if err := b.submit(); err != nil {
			return err
		}
	}
	// One blocking wait, on the first submission at or after seq: every
	// command buffer starts with a barrier on all earlier work (and a
	// fence signal covers every earlier submission of the queue), so when
	// its fence signals, everything before it has finished too. Waiting
	// for each earlier submission in turn instead (a decode step's
	// uploads, the replay and the read-back) woke the host once per
	// submission, each wake-up adding the driver's and the scheduler's
	// latency to the step.
	for seq > b.completed {
		var first *frame
		for _, f := range b.inFlightFrames() {
			if f.seq >= seq && (first == nil || f.seq < first.seq) {
				first = f
			}
		}
		if first == nil {
			break
		}
		if err := b.wait(first); err != nil {
			return err
		}
	}
	// Retire the earlier ones; their fences have signalled.
	for _, f := range b.inFlightFrames() {
		if f.seq <= b.completed {
			if err := b.wait(f); err != nil {
				return err
			}
		}
	}
	if b.inFlight() == 0 {
		b.d.checkStatus()
	}
	return b.err
}

// inFlightFrames lists the submitted batches and replays not yet waited
// for.
func (b *batcher) inFlightFrames() []*frame {
	var fs []*frame
	for _, f := range b.frames {
		if f.seq != 0 {
			fs = append(fs, f)
		}
	}
	for _, f := range b.replays {
		if f.seq != 0 {
			fs = append(fs, f)
		}
	}
	return fs
}

// inFlight counts the submitted batches and replays not yet waited for.
func (b *batcher) inFlight() int {
	n := len(b.replays)
	for _, f := range b.frames {
		if f.seq != 0 {
			n++
		}
	}
	return n
}

// waitAll submits the current batch and waits for every batch.
func (b *batcher) waitAll() error {
	if err := b.submit(); err != nil {
		return err
	}
	return b.waitFor(b.seq - 1)
}

// afterBatch runs fn once batch seq has completed (at once if it has).
func (b *batcher) afterBatch(seq uint64, fn func()) {
	if seq <= b.completed {
		fn()
		return
	}
	b.later = append(b.later, deferred{seq, fn})
}

func (b *batcher) runDeferred() {
	keep := b.later[:0]
	var run []func()
	for _, x := range b.later {
		if x.seq <= b.completed {
			run = append(run, x.fn)
		} else {
			keep = append(keep, x)
		}
	}
	b.later = keep
	for _, fn := range run {
		fn()
	}
}

// hazard records the accesses of the next command, first recording a
// barrier if it depends on (or overwrites the inputs of) a command of the
// current epoch.
func (b *batcher) hazard(f *frame, acc []access) {
	conflict := len(f.epoch) >= maxEpoch
	for _, a := range acc {
		if conflict {
			break
		}
		for _, e := range f.epoch {
			if e.buf == a.buf && e.lo < a.hi && a.lo < e.hi && (e.write || a.write) {
				conflict = true
				break
			}
		}
	}
	if conflict {
		var bufs, offs, sizes []uint64
		for _, e := range f.epoch {
			if e.write {
				bufs = append(bufs, uint64(e.buf))
				offs = append(offs, e.lo)
				sizes = append(sizes, e.hi-e.lo)
			}
		}
		n := len(bufs)
		if n > 32 || n == 0 {
			C.px_barrier(b.d.px, unsafe.Pointer(f.cmd), 0, nil, nil, nil)
		} else {
			C.px_barrier(b.d.px, unsafe.Pointer(f.cmd), C.int(n), (*C.uint64_t)(&bufs[0]), (*C.uint64_t)(&offs[0]), (*C.uint64_t)(&sizes[0]))
		}
		b.barriers++
		f.epoch = f.epoch[:0]
	}
	f.epoch = append(f.epoch, acc...)
}

// touched marks regions as used by the command just recorded into f and
// counts it: in the batch, which is submitted when it is large, or in the
// graph being recorded, whose replays mark them.
func (b *batcher) touched(f *frame, rs ...*region) error {
	if f.graph {
		for _, r := range rs {
			b.rec.regions[r] = struct{}{}
		}
		return nil
	}
	for _, r := range rs {
		r.lastUse = b.seq
	}
	b.ops++
	if b.ops >= maxBatchOps {
		return b.submit()
	}
	return nil
}

// copy records a buffer copy of n bytes from src+so to dst+do into the
// batch (a host transfer: never into a graph).
func (b *batcher) copy(src *region, so uint64, dst *region, do uint64, n uint64) error {
	f, err := b.beginBatch()
	if err != nil {
		return err
	}
	b.hazard(f, []access{
		{src.buffer(), src.off + so, src.off + so + n, false},
		{dst.buffer(), dst.off + do, dst.off + do + n, true},
	})
	prof := b.d.prof.on
	var q int
	if prof {
		if q, err = b.d.profBegin(f); err != nil {
			return err
		}
	}
	C.px_copy(b.d.px, unsafe.Pointer(f.cmd), C.pxHandle(src.buffer()), C.pxHandle(dst.buffer()),
		C.uint64_t(src.off+so), C.uint64_t(dst.off+do), C.uint64_t(n))
	if prof {
		b.d.profEnd(f, q, profOp{name: "copy buffer", bytes: 2 * float64(n)}) // read and written
	}
	return b.touched(f, src, dst)
}

// fill records vkCmdFillBuffer over [off, off+n) of r (4-byte multiples)
// as an op (into the graph while one is recorded).
func (b *batcher) fill(r *region, off, n uint64, value uint32) error {
	f, err := b.begin()
	if err != nil {
		return err
	}
	return b.fillIn(f, r, off, n, value)
}

// fillBatch records the fill into the batch (Alloc's zero fill, which
// happens once, not at every replay of a graph being recorded).
func (b *batcher) fillBatch(r *region, off, n uint64, value uint32) error {
	f, err := b.beginBatch()
	if err != nil {
		return err
	}
	return b.fillIn(f, r, off, n, value)
}

func (b *batcher) fillIn(f *frame, r *region, off, n uint64, value uint32) error {
	var err error
	b.hazard(f, []access{{r.buffer(), r.off + off, r.off + off + n, true}})
	prof := b.d.prof.on
	var q int
	if prof {
		if q, err = b.d.profBegin(f); err != nil {
			return err
		}
	}
	C.px_fill(b.d.px, unsafe.Pointer(f.cmd), C.pxHandle(r.buffer()), C.uint64_t(r.off+off), C.uint64_t(n), C.uint32_t(value))
	if prof {
		b.d.profEnd(f, q, profOp{name: "fill buffer", bytes: float64(n)})
	}
	return b.touched(f, r)
}

// descriptorPool returns a pool of the current frame with room for a set.
func (b *batcher) descriptorPool(f *frame, fresh bool) (handle, error) {
	if fresh {
		f.used++
	}
	if f.used == 0 {
		f.used = 1
	}
	for len(f.pools) < f.used {
		sizes := []vk.DescriptorPoolSize{{Type: vk.DescriptorTypeStorageBuffer, DescriptorCount: 256 * maxBindings}}
		ci := &vk.DescriptorPoolCreateInfo{
			SType:         vk.StructureTypeDescriptorPoolCreateInfo,
			MaxSets:       256,
			PoolSizeCount: 1,
			PPoolSizes:    sizes,
		}
		var p vk.DescriptorPool
		if res := vk.CreateDescriptorPool(b.d.dev, ci, nil, &p); res != vk.Success {
			return 0, vkErr("vkCreateDescriptorPool", res)
		}
		h := toHandle(p)
		if err := checkHandle("VkDescriptorPool", h); err != nil {
			return 0, err
		}
		f.pools = append(f.pools, h)
	}
	return f.pools[f.used-1], nil
}

// status words written by shaders that detect bad input (see
// shaders/common.glsl): [0] error code, [1..3] details.
const (
	statusIDRange     = 1 // embedding: ids[a] = b outside [0, c)
	statusTargetRange = 2 // cross entropy: targets[a] = b outside [0, c)
	statusLensRange   = 3 // decode: lens[a] = b outside [Lq, Cap = c]
	statusLLASingular = 4 // lla: row a has a singular system
	statusKVRange     = 6 // kv append at: sequence a's start b does not fit capacity c
	statusF16Range    = 5 // tensor-core attention left f16's range: sequence a, KV head b, split or block c; op 0 decode, 1 forward, 2 backward
)

// checkStatus turns a flag raised by a shader into the device's pending
// error and clears it. Called with no batch in flight.
func (d *Device) checkStatus() {
	if d.status == nil {
		return
	}
	buf := d.status.bytes()
	w := func(i int) int32 { return int32(binary.LittleEndian.Uint32(buf[4*i:])) }
	code := w(0)
	if code == 0 {
		return
	}
	a, bb, c, op := w(1), w(2), w(3), w(4)
	var err error
	switch code {
	case statusIDRange:
		name := "embedding"
		if op == 1 {
			name = "embedding backward"
		}
		err = fmt.Errorf("%s: ids[%d] = %d is outside the vocabulary [0, %d)", name, a, bb, c)
	case statusTargetRange:
		err = fmt.Errorf("cross entropy: targets[%d] = %d is outside [0, %d) and is not the ignore index", a, bb, c)
	case statusLensRange:
		err = fmt.Errorf("decode attention: lens: lens[%d] = %d is outside [Lq %d, capacity %d] (sequence %d)", a, bb, op, c, a)
	case statusLLASingular:
		err = fmt.Errorf("lla: row %d (flattened b, head, position): the system is singular or the output is not finite (omega - mu.rho* <= 1e-9 omega); use lambda > 0", a)
	case statusKVRange:
		err = fmt.Errorf("kv append at: starts[%d] = %d: the rows do not fit a cache of capacity %d", a, bb, c)
	case statusF16Range:
		what := fmt.Sprintf("decode attention: sequence %d, KV head %d", a, bb)
		env := "PARALLAX_VULKAN_DECODE=scalar"
		switch op {
		case 1:
			what = fmt.Sprintf("attention: sequence %d, KV head %d, rows %d..%d of its group", a, bb, 32*c, 32*c+31)
			env = "PARALLAX_VULKAN_ATTN=scalar"
		case 2:
			what = fmt.Sprintf("attention backward: sequence %d, KV head %d, block %d", a, bb, c)
			env = "PARALLAX_VULKAN_ATTN=scalar"
		}
		err = fmt.Errorf("%s: a result is not finite on the tensor-core path, whose f16 operands hold only values below 65504 in magnitude (K, V, the queries, the probes and p t); %s uses the f32 kernel", what, env)
	default:
		err = fmt.Errorf("a shader raised error code %d (%d, %d, %d)", code, a, bb, c)
	}
	clear(buf)
	d.fail(err)
}

// defaultFenceSpin is how long a wait on a GPU polls its fence before
// blocking in vkWaitForFences: longer than a decode step, whose read-back
// waits from the submission to the end of the step. A blocked thread is
// woken by the driver some time after the fence signals (an interrupt,
// the driver's own thread, the scheduler), a delay added to every step
// that reads its result; polling keeps the thread running meanwhile.
const defaultFenceSpin = 3 * time.Millisecond

// fenceSpinFor is the fence polling of a device of type t:
// PARALLAX_VULKAN_FENCE_SPIN (a Go duration, 0 to block at once), else
// defaultFenceSpin on GPUs and none on a CPU device such as lavapipe, whose
// own threads run the commands on the host's cores a spinning thread
// would take.
func fenceSpinFor(t vk.PhysicalDeviceType) time.Duration {
	if v := os.Getenv("PARALLAX_VULKAN_FENCE_SPIN"); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d >= 0 {
			return d
		}
	}
	if t == vk.PhysicalDeviceTypeCpu {
		return 0
	}
	return defaultFenceSpin
}

// waitTimeout is how long a batch may run before the device is declared
// hung: PARALLAX_VULKAN_TIMEOUT (a Go duration), default 5 minutes.
func waitTimeout() time.Duration {
	if v := os.Getenv("PARALLAX_VULKAN_TIMEOUT"); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			return d
		}
	}
	return 5 * time.Minute
}
