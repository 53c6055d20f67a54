//go:build cgo

package cuda

import "github.com/parallax-engine/parallax/engine"

// Collectives that overlap the device's own work. NCCL's kernels run on a
// second stream that first waits (an event, on the device) for the ops
// enqueued so far on the device's stream: those wrote the tensors. The ops
// enqueued afterwards on the device's stream (the rest of a backward pass)
// run alongside; Join puts the device's stream behind the collectives
// again before anything reads their results. The tensors of a started
// collective must not be written before Join, and Device.Sync does not
// wait for the second stream: Join first.

// StartAllReduce is AllReduce on the second stream: it returns once the
// collective is enqueued, without ordering the device's later ops after
// it.
func (c *NCCL) StartAllReduce(avg bool, ts ...*engine.Tensor) error {
	return c.start("all-reduce", kindAllReduce, avg, nil, ts)
}

// StartReduce is Reduce on the second stream, as StartAllReduce.
func (c *NCCL) StartReduce(avg bool, roots []int, ts ...*engine.Tensor) error {
	return c.start("reduce", kindReduce, avg, roots, ts)
}

func (c *NCCL) start(what string, kind int, avg bool, roots []int, ts []*engine.Tensor) error {
	ops, err := c.inPlaceOps(what, kind, avg, roots, ts)
	if err != nil || len(ops) == 0 {
		return err
	}
	if err := c.usable(what); err != nil {
		return err
	}
	if c.side == nil {
		if c.side, err = c.d.newSideStream(); err != nil {
			return err
		}
	}
	if err := c.side.after(); err != nil {
		return err
	}
	c.sideBusy = true
	return c.runOn(c.side.s, what, ops)
}

// Join makes the device's stream wait (on the device; the host goes on)
// for every collective started so far. Cheap when nothing was started.
func (c *NCCL) Join() error {
	if !c.sideBusy {
		return nil
	}
	if err := c.side.join(); err != nil {
		return err
	}
	c.sideBusy = false
	return nil
}
