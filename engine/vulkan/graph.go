package vulkan

/*
#include "pxvk.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	vk "github.com/vulkan-go/vulkan"

	"github.com/parallax-engine/parallax/engine"
)

// Recorded graphs (engine.GraphRecorder). Between BeginGraph and EndGraph
// every op is recorded into a command buffer of its own, a frame that is
// never reset (no ONE_TIME_SUBMIT), with the barriers the hazard tracker
// puts between dependent commands, as in a batch. Push descriptors are
// part of the commands; without them the descriptor sets come from pools
// the graph owns, so they stay valid for the graph's life. A replay is one
// vkQueueSubmit of that command buffer after the batch recorded so far
// (which holds the host's uploads), numbered like a batch: every region
// the graph touches is marked with the replay's number, so a later Read,
// Write or reuse of freed memory waits for it as it would for a batch.
//
// Scratch that ops allocate and free while recording (d.tmp) is reused
// within the recording and then belongs to the graph until it is freed;
// the device's persistent scratch (the decode partial states) is
// addressed as it is at recording, so reallocating it makes the graph
// stale (scratchGen, as in the CUDA backend).

var _ engine.GraphRecorder = (*Device)(nil)

// recording is the state of a graph being recorded.
type recording struct {
	f       *frame
	regions map[*region]struct{} // every region a recorded command touches
	spare   []*region            // scratch released while recording: the graph's
	freed   []*region            // tensors Free was refused for: released when the recording ends
	err     error                // the first refused or failed call
}

// keep takes a region released while recording: the graph may address it.
func (r *recording) keep(x *region) {
	x.freed = true
	r.spare = append(r.spare, x)
}

// spareFor returns a kept scratch region of exactly size bytes, or nil.
func (r *recording) spareFor(size uint64) *region {
	for i, x := range r.spare {
		if x.size == size {
			r.spare = append(r.spare[:i], r.spare[i+1:]...)
			x.freed = false
			return x
		}
	}
	return nil
}

// refuse records (and returns) the error of a call that is not allowed
// while a graph is recorded.
func (d *Device) refuse(what string) error {
	err := fmt.Errorf("vulkan %s: not allowed while a graph is being recorded", what)
	if d.b.rec.err == nil {
		d.b.rec.err = err
	}
	return err
}

// recordFailed keeps err for EndGraph when it broke the recording of a
// command into the graph, and returns it.
func (b *batcher) recordFailed(f *frame, err error) error {
	if f.graph && b.rec != nil && b.rec.err == nil {
		b.rec.err = err
	}
	return err
}

// BeginGraph starts recording the ops enqueued from now on into a
// reusable command buffer; see engine.GraphRecorder.
func (d *Device) BeginGraph() error {
	switch {
	case d.closed:
		return fmt.Errorf("vulkan: begin graph: %w", errClosed)
	case d.b.rec != nil:
		return errors.New("vulkan: begin graph: a graph is being recorded already")
	case d.prof.on:
		return errors.New("vulkan: begin graph: a profile is being recorded")
	case d.b.err != nil:
		return fmt.Errorf("vulkan: begin graph: %w", d.b.err)
	}
	cmds := make([]vk.CommandBuffer, 1)
	ai := &vk.CommandBufferAllocateInfo{
		SType:              vk.StructureTypeCommandBufferAllocateInfo,
		CommandPool:        vkOf[vk.CommandPool](d.b.cmdPool),
		Level:              vk.CommandBufferLevelPrimary,
		CommandBufferCount: 1,
	}
	res := vk.AllocateCommandBuffers(d.dev, ai, cmds)
	runtime.KeepAlive(ai)
	if res != vk.Success {
		return fmt.Errorf("vulkan: begin graph: %w", vkErr("vkAllocateCommandBuffers", res))
	}
	f := &frame{cmd: cmds[0], graph: true}
	var fence vk.Fence
	if res := vk.CreateFence(d.dev, &vk.FenceCreateInfo{SType: vk.StructureTypeFenceCreateInfo}, nil, &fence); res != vk.Success {
		d.freeFrame(f)
		return fmt.Errorf("vulkan: begin graph: %w", vkErr("vkCreateFence", res))
	}
	f.fence = toHandle(fence)
	if err := checkHandle("VkFence", f.fence); err != nil {
		d.freeFrame(f)
		return fmt.Errorf("vulkan: begin graph: %w", err)
	}
	// Not ONE_TIME_SUBMIT: the command buffer is submitted at every replay
	// (one replay at a time: Replay waits for the previous one).
	bi := &vk.CommandBufferBeginInfo{SType: vk.StructureTypeCommandBufferBeginInfo}
	if res := vk.BeginCommandBuffer(f.cmd, bi); res != vk.Success {
		d.freeFrame(f)
		return fmt.Errorf("vulkan: begin graph: %w", vkErr("vkBeginCommandBuffer", res))
	}
	// Ordered after everything submitted before the replay.
	C.px_barrier(d.px, unsafe.Pointer(f.cmd), 0, nil, nil, nil)
	d.b.rec = &recording{f: f, regions: map[*region]struct{}{}}
	return nil
}

// EndGraph stops recording and returns the graph; see
// engine.GraphRecorder. After a refused or failed call it returns that
// error and no graph, and the device records batches again.
func (d *Device) EndGraph() (engine.Graph, error) {
	rec := d.b.rec
	if rec == nil {
		return nil, errors.New("vulkan: end graph: no graph is being recorded")
	}
	d.b.rec = nil
	f := rec.f
	err := rec.err
	if err == nil {
		err = d.b.err
	}
	if err == nil {
		C.px_barrier_host(d.px, unsafe.Pointer(f.cmd))
		if res := vk.EndCommandBuffer(f.cmd); res != vk.Success {
			err = vkErr("vkEndCommandBuffer", res)
		}
	}
	for _, r := range rec.freed {
		r.blk.a.release(r)
	}
	if err != nil {
		// Nothing recorded ever runs: its scratch goes back at once.
		d.freeFrame(f)
		d.releaseHeld(rec.spare)
		return nil, fmt.Errorf("vulkan: end graph: %w", err)
	}
	g := &graph{d: d, f: f, held: rec.spare, gen: d.scratchGen}
	g.regions = make([]*region, 0, len(rec.regions))
	for r := range rec.regions {
		g.regions = append(g.regions, r)
	}
	if d.graphs == nil {
		d.graphs = map[*graph]struct{}{}
	}
	d.graphs[g] = struct{}{}
	return g, nil
}

// graph is a recorded command buffer, the regions its commands touch and
// the scratch it owns.
type graph struct {
	d       *Device
	f       *frame // nil once freed
	regions []*region
	held    []*region
	gen     uint64 // d.scratchGen when recorded
	replays int    // for tests
}

// Replay submits the graph once, after the work enqueued before it; see
// engine.Graph. While profiling, the replay is one op ("graph replay").
func (g *graph) Replay() error {
	d := g.d
	switch {
	case g.f == nil:
		return errors.New("vulkan replay: the graph was freed")
	case d.closed:
		return fmt.Errorf("vulkan replay: %w", errClosed)
	case d.b.rec != nil:
		return d.refuse("graph replay")
	case g.gen != d.scratchGen:
		return engine.ErrGraphStale
	case d.b.err != nil:
		return fmt.Errorf("vulkan replay: %w", d.b.err)
	}
	b := &d.b
	f := g.f
	if f.seq != 0 {
		// The previous replay may still run: a command buffer is not
		// resubmitted while pending.
		if err := b.waitFor(f.seq); err != nil {
			return fmt.Errorf("vulkan replay: %w", err)
		}
	}
	prof := d.prof.on
	var q int
	if prof {
		bf, err := b.beginBatch()
		if err != nil {
			return fmt.Errorf("vulkan replay: %w", err)
		}
		if q, err = d.profBegin(bf); err != nil {
			return fmt.Errorf("vulkan replay: %w", err)
		}
	}
	// The batch first: the uploads the replay reads are in it.
	if err := b.submit(); err != nil {
		return fmt.Errorf("vulkan replay: %w", err)
	}
	if res := C.px_submit(d.px, unsafe.Pointer(d.queue), unsafe.Pointer(f.cmd), C.pxHandle(f.fence)); res != 0 {
		return fmt.Errorf("vulkan replay: %w", b.setErr(vkErr("vkQueueSubmit", vk.Result(res))))
	}
	f.seq = b.seq
	b.seq++
	b.submits++
	b.replays = append(b.replays, f)
	for _, r := range g.regions {
		r.lastUse = f.seq
	}
	g.replays++
	if prof {
		bf, err := b.beginBatch()
		if err != nil {
			return fmt.Errorf("vulkan replay: %w", err)
		}
		d.profEnd(bf, q, profOp{name: "graph replay"})
	}
	return nil
}

// Free waits for the graph's last replay, then releases its command
// buffer, descriptor pools and scratch. Later calls do nothing.
func (g *graph) Free() {
	f := g.f
	if f == nil {
		return
	}
	d := g.d
	g.f = nil
	delete(d.graphs, g)
	if d.closed {
		return // Close released everything
	}
	if f.seq != 0 {
		if err := d.b.waitFor(f.seq); err != nil {
			// A lost device may still use it: leak it (as Close does).
			return
		}
	}
	d.freeFrame(f)
	d.releaseHeld(g.held)
	g.held, g.regions = nil, nil
}

// freeFrame destroys a graph's command buffer, fence and descriptor pools
// (none of which may be in use).
func (d *Device) freeFrame(f *frame) {
	for _, p := range f.pools {
		vk.DestroyDescriptorPool(d.dev, vkOf[vk.DescriptorPool](p), nil)
	}
	f.pools = nil
	if f.fence != 0 {
		vk.DestroyFence(d.dev, vkOf[vk.Fence](f.fence), nil)
		f.fence = 0
	}
	if f.cmd != nil {
		vk.FreeCommandBuffers(d.dev, vkOf[vk.CommandPool](d.b.cmdPool), 1, []vk.CommandBuffer{f.cmd})
		f.cmd = nil
	}
}

// releaseHeld returns scratch a recording kept to the pool.
func (d *Device) releaseHeld(rs []*region) {
	for _, r := range rs {
		r.freed = false
		d.mem.release(r)
	}
}

// closeGraphs releases every graph's and the recording's Vulkan objects
// (Close, with the device idle).
func (d *Device) closeGraphs() {
	for g := range d.graphs {
		d.freeFrame(g.f)
		g.f, g.held, g.regions = nil, nil, nil
	}
	d.graphs = nil
	if rec := d.b.rec; rec != nil {
		d.freeFrame(rec.f)
		d.b.rec = nil
	}
}
