package vulkan

/*
#include "pxvk.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"time"
	"unsafe"

	vk "github.com/vulkan-go/vulkan"
)

// Timed runs fn, which enqueues ops on d, between two GPU timestamps and
// returns the device time they took (from the first command after the
// timestamp to the end of the last). It waits for everything enqueued
// before and by fn.
func (d *Device) Timed(fn func() error) (time.Duration, error) {
	if d.closed {
		return 0, errClosed
	}
	if d.pd.tsBits == 0 || d.pd.lim.timestampPeriod == 0 {
		return 0, errors.New("vulkan: this device's compute queue has no timestamps")
	}
	if d.b.rec != nil {
		return 0, d.refuse("timed")
	}
	if err := d.b.waitAll(); err != nil {
		return 0, err
	}
	if d.queries == 0 {
		ci := &vk.QueryPoolCreateInfo{SType: vk.StructureTypeQueryPoolCreateInfo, QueryType: vk.QueryTypeTimestamp, QueryCount: 2}
		var qp vk.QueryPool
		if res := vk.CreateQueryPool(d.dev, ci, nil, &qp); res != vk.Success {
			return 0, vkErr("vkCreateQueryPool", res)
		}
		d.queries = toHandle(qp)
	}
	f, err := d.b.begin()
	if err != nil {
		return 0, err
	}
	C.px_reset_queries(d.px, unsafe.Pointer(f.cmd), C.pxHandle(d.queries), 0, 2)
	C.px_timestamp(d.px, unsafe.Pointer(f.cmd), C.pxHandle(d.queries), 0)
	if err := fn(); err != nil {
		d.b.waitAll()
		return 0, err
	}
	if f, err = d.b.begin(); err != nil {
		return 0, err
	}
	// All prior work, then the second timestamp.
	C.px_barrier(d.px, unsafe.Pointer(f.cmd), 0, nil, nil, nil)
	C.px_timestamp(d.px, unsafe.Pointer(f.cmd), C.pxHandle(d.queries), 1)
	if err := d.b.waitAll(); err != nil {
		return 0, err
	}
	var ts [2]uint64
	flags := vk.QueryResultFlags(vk.QueryResult64Bit | vk.QueryResultWaitBit)
	if res := vk.GetQueryPoolResults(d.dev, vkOf[vk.QueryPool](d.queries), 0, 2, 16, unsafe.Pointer(&ts[0]), 8, flags); res != vk.Success {
		return 0, vkErr("vkGetQueryPoolResults", res)
	}
	mask := ^uint64(0)
	if d.pd.tsBits < 64 {
		mask = 1<<d.pd.tsBits - 1
	}
	ticks := (ts[1] - ts[0]) & mask
	ns := float64(ticks) * float64(d.pd.lim.timestampPeriod)
	if ns < 0 || ns > 1e13 {
		return 0, fmt.Errorf("vulkan: implausible timestamps %d, %d", ts[0], ts[1])
	}
	return time.Duration(ns), d.Sync()
}
