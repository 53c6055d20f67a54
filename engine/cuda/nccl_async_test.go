//go:build cgo

package cuda_test

import (
	"fmt"
	"testing"

	"github.com/parallax-engine/parallax/engine"
)

// TestNCCLStartJoin checks the collectives on the second stream on two
// GPUs: a started all-reduce sees the ops enqueued before it (a Fill), the
// device's stream computes on meanwhile, Join orders later ops (a Fill that
// must land after the result, a read) behind it, and a collective on the
// device's stream after a started one, without a Join, runs after it.
func TestNCCLStartJoin(t *testing.T) {
	devs, comms := ncclPair(t)
	if comms == nil {
		return
	}
	const n = 1 << 22 // 16 MiB: long enough that unordered work would show
	onGPUs(t, 2, func(r int) error {
		d, c := devs[r], comms[r]
		fr := float32(r)
		alloc := func() (*engine.Tensor, error) { return d.Alloc(engine.F32, n) }
		a, err := alloc()
		if err != nil {
			return err
		}
		b, err := alloc()
		if err != nil {
			return err
		}
		x, err := alloc()
		if err != nil {
			return err
		}
		y, err := alloc()
		if err != nil {
			return err
		}
		defer func() {
			for _, u := range []*engine.Tensor{a, b, x, y} {
				d.Free(u)
			}
		}()
		for range 3 {
			if err := d.Fill(a, fr+1); err != nil {
				return err
			}
			if err := d.Fill(b, 10*(fr+1)); err != nil {
				return err
			}
			if err := c.StartAllReduce(true, a); err != nil {
				return err
			}
			if err := c.StartReduce(false, []int{1}, b); err != nil {
				return err
			}
			// Work on the device's stream alongside the collectives.
			for i := range 20 {
				if err := d.Fill(x, float32(i)); err != nil {
					return err
				}
			}
			if err := c.Join(); err != nil {
				return err
			}
			if err := closeTo(download(a)[:4], []float32{1.5, 1.5, 1.5, 1.5}, 0); err != nil {
				return fmt.Errorf("started all-reduce: %w", err)
			}
			if r == 1 {
				if err := closeTo(download(b)[n-4:], []float32{30, 30, 30, 30}, 0); err != nil {
					return fmt.Errorf("started reduce: %w", err)
				}
			}
			// After Join, a write lands after the collective's.
			if err := c.StartAllReduce(false, a); err != nil {
				return err
			}
			if err := c.Join(); err != nil {
				return err
			}
			if err := d.Fill(a, 7); err != nil {
				return err
			}
			if err := closeTo(download(a)[n-4:], []float32{7, 7, 7, 7}, 0); err != nil {
				return fmt.Errorf("a write after Join: %w", err)
			}
			// A collective on the device's stream after a started one.
			if err := d.Fill(y, fr); err != nil {
				return err
			}
			if err := c.StartAllReduce(false, a); err != nil {
				return err
			}
			if err := c.AllReduce(false, y, a); err != nil {
				return err
			}
			if err := closeTo(download(a)[:4], []float32{28, 28, 28, 28}, 0); err != nil {
				return fmt.Errorf("all-reduce after a started one: %w", err)
			}
			if err := closeTo(download(y)[:4], []float32{1, 1, 1, 1}, 0); err != nil {
				return fmt.Errorf("all-reduce after a started one: %w", err)
			}
		}
		if err := d.Sync(); err != nil {
			return err
		}
		return c.AsyncError()
	})
}
