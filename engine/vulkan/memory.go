package vulkan

/*
#include <string.h>
*/
import "C"

import (
	"errors"
	"fmt"
	"sort"
	"unsafe"

	vk "github.com/vulkan-go/vulkan"

	"github.com/parallax-engine/parallax/engine"
)

// Memory. Tensors are sub-allocated from large blocks of device memory, each
// block one VkDeviceMemory with one VkBuffer over all of it; a tensor is a
// (buffer, offset, size) region bound to shaders with exactly its range.
// Freed regions return to their block's free list (coalesced with their
// neighbours) and are reused in stream order: the barrier tracker works on
// memory ranges, not tensors, so a region freed while ops that use it are
// still queued is safe to hand out again at once. Large tensors get a
// block of their own, released when the last batch that used it completes.
//
// On a device whose tensor memory is also host-visible and coherent
// (lavapipe, integrated GPUs) the blocks stay mapped and uploads, downloads
// and zero fills are plain memory copies whenever no queued command touches
// the region; otherwise, and always on discrete GPUs, they go through
// host-visible staging buffers and vkCmdCopyBuffer/vkCmdFillBuffer recorded
// in the batch, so they are ordered with the ops around them.

const (
	defaultBlock  = 64 << 20 // bytes per pooled block
	regionAlign   = 256      // offset alignment of every region
	maxStageBatch = 256 << 20
)

// allocator hands out regions of one memory type.
type allocator struct {
	d         *Device
	memType   uint32
	mapped    bool // host-visible and coherent: blocks are mapped
	blockSize uint64
	align     uint64
	blocks    []*block
	name      string
}

// block is one VkDeviceMemory with a VkBuffer over all of it.
type block struct {
	a         *allocator
	mem, buf  handle
	size      uint64
	ptr       unsafe.Pointer // mapped base address (C memory), or nil
	free      []span         // sorted by offset, coalesced
	dedicated bool
	live      int
}

// span is a free range; lastUse is the batch that last touched it.
type span struct{ off, size, lastUse uint64 }

// region is an allocated range of a block: a tensor's storage.
type region struct {
	blk       *block
	off, size uint64
	lastUse   uint64 // sequence number of the last batch that touched it
	freed     bool
}

func (r *region) buffer() handle { return r.blk.buf }

// bytes returns the mapped memory of a host-visible region.
func (r *region) bytes() []byte {
	if r.blk.ptr == nil {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Add(r.blk.ptr, r.off)), r.size)
}

func roundUp(x, a uint64) uint64 { return (x + a - 1) / a * a }

const (
	memDeviceLocal  = vk.MemoryPropertyFlags(vk.MemoryPropertyDeviceLocalBit)
	memHostVisible  = vk.MemoryPropertyFlags(vk.MemoryPropertyHostVisibleBit)
	memHostCoherent = vk.MemoryPropertyFlags(vk.MemoryPropertyHostCoherentBit)
	memHostCached   = vk.MemoryPropertyFlags(vk.MemoryPropertyHostCachedBit)
	bufferUsage     = vk.BufferUsageFlags(vk.BufferUsageStorageBufferBit | vk.BufferUsageTransferSrcBit | vk.BufferUsageTransferDstBit)
)

// newAllocators picks the memory types: tensors in device-local memory
// (host-visible too on UMA devices, which then need no staging), staging
// in host-visible coherent (preferably cached) memory.
func newAllocators(d *Device) (mem, stage *allocator, err error) {
	p := d.pd
	bits, err := d.bufferMemoryBits()
	if err != nil {
		return nil, nil, err
	}
	pick := func(score func(f vk.MemoryPropertyFlags) int) int {
		best, bestScore := -1, 0
		for i, mt := range p.memTypes {
			if bits&(1<<i) == 0 {
				continue
			}
			if s := score(mt.flags); s > bestScore {
				best, bestScore = i, s
			}
		}
		return best
	}
	const hostVC = memHostVisible | memHostCoherent
	uma := p.devType != vk.PhysicalDeviceTypeDiscreteGpu
	devType := pick(func(f vk.MemoryPropertyFlags) int {
		s := 1
		if f&memDeviceLocal != 0 {
			s += 8
		}
		if f&hostVC == hostVC {
			if uma {
				s += 4
			} else {
				s -= 1 // a small BAR window on a discrete GPU: last resort
			}
		}
		return s
	})
	if devType < 0 {
		return nil, nil, errors.New("no memory type can hold storage buffers")
	}
	block := uint64(defaultBlock)
	block = min(block, p.lim.maxStorageBufferRange)
	if p.lim.maxAllocation > 0 {
		block = min(block, p.lim.maxAllocation)
	}
	align := max(uint64(regionAlign), p.lim.minStorageOffsetAlign)
	block = block / align * align
	flags := p.memTypes[devType].flags
	mem = &allocator{d: d, memType: uint32(devType), mapped: flags&hostVC == hostVC, blockSize: block, align: align, name: "device"}
	if mem.mapped {
		return mem, nil, nil
	}
	stType := pick(func(f vk.MemoryPropertyFlags) int {
		if f&hostVC != hostVC {
			return 0
		}
		s := 2
		if f&memHostCached != 0 {
			s += 2
		}
		if f&memDeviceLocal == 0 {
			s++
		}
		return s
	})
	if stType < 0 {
		return nil, nil, errors.New("no host-visible coherent memory type for staging")
	}
	stage = &allocator{d: d, memType: uint32(stType), mapped: true, blockSize: block, align: align, name: "staging"}
	return mem, stage, nil
}

// bufferMemoryBits returns the memory types a storage buffer may use.
func (d *Device) bufferMemoryBits() (uint32, error) {
	var buf vk.Buffer
	ci := &vk.BufferCreateInfo{SType: vk.StructureTypeBufferCreateInfo, Size: 4096, Usage: bufferUsage, SharingMode: vk.SharingModeExclusive}
	if res := vk.CreateBuffer(d.dev, ci, nil, &buf); res != vk.Success {
		return 0, vkErr("vkCreateBuffer", res)
	}
	h := toHandle(buf)
	var req vk.MemoryRequirements
	vk.GetBufferMemoryRequirements(d.dev, vkOf[vk.Buffer](h), &req)
	req.Deref()
	vk.DestroyBuffer(d.dev, vkOf[vk.Buffer](h), nil)
	return req.MemoryTypeBits, nil
}

// newBlock allocates a block of size bytes.
func (a *allocator) newBlock(size uint64, dedicated bool) (*block, error) {
	d := a.d
	var buf vk.Buffer
	ci := &vk.BufferCreateInfo{SType: vk.StructureTypeBufferCreateInfo, Size: vk.DeviceSize(size), Usage: bufferUsage, SharingMode: vk.SharingModeExclusive}
	if res := vk.CreateBuffer(d.dev, ci, nil, &buf); res != vk.Success {
		return nil, vkErr("vkCreateBuffer", res)
	}
	b := &block{a: a, buf: toHandle(buf), size: size, dedicated: dedicated}
	if err := checkHandle("VkBuffer", b.buf); err != nil {
		return nil, err
	}
	var req vk.MemoryRequirements
	vk.GetBufferMemoryRequirements(d.dev, vkOf[vk.Buffer](b.buf), &req)
	req.Deref()
	if req.MemoryTypeBits&(1<<a.memType) == 0 {
		vk.DestroyBuffer(d.dev, vkOf[vk.Buffer](b.buf), nil)
		return nil, fmt.Errorf("memory type %d cannot back a buffer of %d bytes", a.memType, size)
	}
	var mem vk.DeviceMemory
	ai := &vk.MemoryAllocateInfo{SType: vk.StructureTypeMemoryAllocateInfo, AllocationSize: req.Size, MemoryTypeIndex: a.memType}
	if res := vk.AllocateMemory(d.dev, ai, nil, &mem); res != vk.Success {
		vk.DestroyBuffer(d.dev, vkOf[vk.Buffer](b.buf), nil)
		return nil, fmt.Errorf("allocating %s of %s memory: %w", formatSize(size), a.name, vkErr("vkAllocateMemory", res))
	}
	b.mem = toHandle(mem)
	if res := vk.BindBufferMemory(d.dev, vkOf[vk.Buffer](b.buf), vkOf[vk.DeviceMemory](b.mem), 0); res != vk.Success {
		b.destroy()
		return nil, vkErr("vkBindBufferMemory", res)
	}
	if a.mapped {
		var p unsafe.Pointer
		if res := vk.MapMemory(d.dev, vkOf[vk.DeviceMemory](b.mem), 0, vk.DeviceSize(size), 0, &p); res != vk.Success {
			b.destroy()
			return nil, vkErr("vkMapMemory", res)
		}
		b.ptr = p
	}
	b.free = []span{{0, size, 0}}
	a.blocks = append(a.blocks, b)
	return b, nil
}

func (b *block) destroy() {
	d := b.a.d
	if b.ptr != nil {
		vk.UnmapMemory(d.dev, vkOf[vk.DeviceMemory](b.mem))
		b.ptr = nil
	}
	if b.buf != 0 {
		vk.DestroyBuffer(d.dev, vkOf[vk.Buffer](b.buf), nil)
		b.buf = 0
	}
	if b.mem != 0 {
		vk.FreeMemory(d.dev, vkOf[vk.DeviceMemory](b.mem), nil)
		b.mem = 0
	}
}

// take carves size bytes (a multiple of align) out of the block, first fit.
func (b *block) take(size uint64) *region {
	for i, s := range b.free {
		if s.size < size {
			continue
		}
		r := &region{blk: b, off: s.off, size: size, lastUse: s.lastUse}
		if s.size == size {
			b.free = append(b.free[:i], b.free[i+1:]...)
		} else {
			b.free[i].off += size
			b.free[i].size -= size
		}
		b.live++
		return r
	}
	return nil
}

// give returns a region's range to the free list, merging neighbours.
func (b *block) give(r *region) {
	s := span{r.off, r.size, r.lastUse}
	i := sort.Search(len(b.free), func(i int) bool { return b.free[i].off > s.off })
	b.free = append(b.free, span{})
	copy(b.free[i+1:], b.free[i:])
	b.free[i] = s
	if i+1 < len(b.free) && b.free[i].off+b.free[i].size == b.free[i+1].off {
		b.free[i].size += b.free[i+1].size
		b.free[i].lastUse = max(b.free[i].lastUse, b.free[i+1].lastUse)
		b.free = append(b.free[:i+1], b.free[i+2:]...)
	}
	if i > 0 && b.free[i-1].off+b.free[i-1].size == b.free[i].off {
		b.free[i-1].size += b.free[i].size
		b.free[i-1].lastUse = max(b.free[i-1].lastUse, b.free[i].lastUse)
		b.free = append(b.free[:i], b.free[i+1:]...)
	}
	b.live--
}

// alloc returns a region of at least n bytes (4-byte granular, aligned).
func (a *allocator) alloc(n uint64) (*region, error) {
	size := roundUp(max(n, 4), a.align)
	if size > a.blockSize/4 {
		b, err := a.newBlock(size, true)
		if err != nil {
			return nil, err
		}
		return b.take(size), nil
	}
	for _, b := range a.blocks {
		if b.dedicated {
			continue
		}
		if r := b.take(size); r != nil {
			return r, nil
		}
	}
	b, err := a.newBlock(a.blockSize, false)
	if err != nil {
		return nil, err
	}
	return b.take(size), nil
}

// release frees r: its range is reusable at once (in stream order); a
// dedicated block is destroyed when the last batch using it completes.
func (a *allocator) release(r *region) {
	if r == nil || r.freed {
		return
	}
	if rec := a.d.b.rec; rec != nil && a == a.d.mem {
		// A graph being recorded may address it: kept until the graph is
		// freed (and reused by the recording's own scratch meanwhile).
		rec.keep(r)
		return
	}
	r.freed = true
	b := r.blk
	b.give(r)
	if b.dedicated && b.live == 0 {
		a.d.b.afterBatch(r.lastUse, func() {
			b.destroy()
			for i, x := range a.blocks {
				if x == b {
					a.blocks = append(a.blocks[:i], a.blocks[i+1:]...)
					break
				}
			}
		})
	}
}

func (a *allocator) destroy() {
	for _, b := range a.blocks {
		b.destroy()
	}
	a.blocks = nil
}

func formatSize(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// ---- Tensors ----

// regionOf returns a tensor's storage.
func regionOf(t *engine.Tensor) *region {
	r, _ := t.Storage().(*region)
	return r
}

// MaxTensorBytes is the largest tensor the device stores: one storage
// buffer binding addresses at most maxStorageBufferRange bytes.
func (d *Device) MaxTensorBytes() int64 {
	m := d.pd.lim.maxStorageBufferRange
	if d.pd.lim.maxAllocation > 0 {
		m = min(m, d.pd.lim.maxAllocation)
	}
	return int64(m)
}

// Alloc returns a new zero-filled tensor. A tensor larger than the device's
// maxStorageBufferRange is refused: shaders address each tensor through
// one storage-buffer binding.
func (d *Device) Alloc(dtype engine.DType, shape ...int) (*engine.Tensor, error) {
	s, size, err := engine.CheckAlloc("vulkan", dtype, shape)
	if err != nil {
		return nil, err
	}
	if d.closed {
		return nil, fmt.Errorf("vulkan alloc: %w", errClosed)
	}
	n := uint64(size)
	if lim := uint64(d.MaxTensorBytes()); roundUp(n, 4) > lim {
		return nil, fmt.Errorf("vulkan alloc %v%v: %s exceeds this device's limit of %s per tensor (maxStorageBufferRange %s on %s: one storage-buffer binding cannot address more); split the tensor",
			dtype, s, formatSize(n), formatSize(lim), formatSize(d.pd.lim.maxStorageBufferRange), d.pd.name)
	}
	r, err := d.mem.alloc(n)
	if err != nil {
		return nil, fmt.Errorf("vulkan alloc %v%v: %w", dtype, s, err)
	}
	if err := d.zero(r); err != nil {
		d.mem.release(r)
		return nil, fmt.Errorf("vulkan alloc %v%v: %w", dtype, s, err)
	}
	return engine.NewTensor(d, dtype, s, r), nil
}

// zero clears a region: directly when it is mapped and idle, else with a
// fill command recorded in the batch (also while a graph is recorded: the
// tensor is zeroed once, before any replay).
func (d *Device) zero(r *region) error {
	if r.blk.ptr != nil && r.lastUse <= d.b.completed {
		clear(r.bytes())
		return nil
	}
	return d.b.fillBatch(r, 0, r.size, 0)
}

// Free returns the tensor's memory to the pool; commands already recorded
// that use it still see its contents (reuse is ordered after them). While
// a graph is recorded it is refused: the recording fails (EndGraph returns
// the error) and the memory is released when the recording ends.
func (d *Device) Free(t *engine.Tensor) {
	if t == nil || d.closed {
		return
	}
	r := regionOf(t)
	if r == nil || r.blk.a.d != d || r.freed {
		return
	}
	if rec := d.b.rec; rec != nil {
		d.refuse("free")
		rec.freed = append(rec.freed, r)
		return
	}
	r.blk.a.release(r)
}

func (d *Device) checkHost(op string, t *engine.Tensor, n int) (*region, error) {
	if d.closed {
		return nil, fmt.Errorf("vulkan %s: %w", op, errClosed)
	}
	if t == nil || t.Device() != engine.Device(d) {
		return nil, fmt.Errorf("vulkan %s: tensor %v is not on %s", op, t, d.info.ID())
	}
	r := regionOf(t)
	if r == nil || r.freed {
		return nil, fmt.Errorf("vulkan %s %v: the tensor was freed", op, t)
	}
	if n != t.Bytes() {
		return nil, fmt.Errorf("vulkan %s %v: got %d bytes, want %d", op, t, n, t.Bytes())
	}
	if d.b.rec != nil {
		return nil, d.refuse(op)
	}
	return r, nil
}

// Write copies little-endian bytes into t, ordered after every op already
// enqueued.
func (d *Device) Write(t *engine.Tensor, src []byte) error {
	r, err := d.checkHost("write", t, len(src))
	if err != nil {
		return err
	}
	if err := d.writeRegion(r, src); err != nil {
		return fmt.Errorf("vulkan write %v: %w", t, err)
	}
	return nil
}

// writeRegion copies src into the start of r, ordered after every command
// already recorded: directly when r is mapped and idle, else through
// staging and a recorded copy.
func (d *Device) writeRegion(r *region, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	if r.blk.ptr != nil && r.lastUse <= d.b.completed {
		copy(r.bytes(), src)
		return nil
	}
	for off := 0; off < len(src); off += maxStageBatch {
		end := min(off+maxStageBatch, len(src))
		if err := d.stagedWrite(r, uint64(off), src[off:end]); err != nil {
			return err
		}
	}
	return nil
}

func (d *Device) stagingAllocator() *allocator {
	if d.stage != nil {
		return d.stage
	}
	return d.mem
}

func (d *Device) stagedWrite(r *region, off uint64, src []byte) error {
	sa := d.stagingAllocator()
	if d.b.staged+uint64(len(src)) > maxStageBatch {
		if err := d.b.submit(); err != nil {
			return err
		}
	}
	s, err := sa.alloc(uint64(len(src)))
	if err != nil {
		return err
	}
	if s.lastUse > d.b.completed {
		// A reused staging range still read by a queued copy: wait for it.
		if err := d.b.waitFor(s.lastUse); err != nil {
			sa.release(s)
			return err
		}
	}
	copy(s.bytes(), src)
	err = d.b.copy(s, 0, r, off, uint64(len(src)))
	d.b.staged += uint64(len(src))
	// Keep the staging range out of the pool until the copy has run.
	d.b.afterBatch(s.lastUse, func() { sa.release(s) })
	return err
}

// Read copies t's bytes into dst after every op enqueued so far that
// touches t has finished.
func (d *Device) Read(t *engine.Tensor, dst []byte) error {
	r, err := d.checkHost("read", t, len(dst))
	if err != nil {
		return err
	}
	if len(dst) == 0 {
		return nil
	}
	if r.blk.ptr != nil {
		if r.lastUse > d.b.completed {
			if err := d.b.waitFor(r.lastUse); err != nil {
				return fmt.Errorf("vulkan read %v: %w", t, err)
			}
		}
		copy(dst, r.bytes())
		return nil
	}
	sa := d.stagingAllocator()
	for off := 0; off < len(dst); off += maxStageBatch {
		end := min(off+maxStageBatch, len(dst))
		n := uint64(end - off)
		s, err := sa.alloc(n)
		if err != nil {
			return fmt.Errorf("vulkan read %v: %w", t, err)
		}
		if err := d.b.copy(r, uint64(off), s, 0, n); err != nil {
			sa.release(s)
			return fmt.Errorf("vulkan read %v: %w", t, err)
		}
		if err := d.b.waitFor(s.lastUse); err != nil {
			sa.release(s)
			return fmt.Errorf("vulkan read %v: %w", t, err)
		}
		copy(dst[off:end], s.bytes()[:n])
		sa.release(s)
	}
	return nil
}
