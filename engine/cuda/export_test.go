//go:build cgo

package cuda

// The kernel benchmarks of bench_test.go (package cuda_test) reach the
// device's timing helpers through these.

// Median times fn reps times after warm runs, running before (untimed)
// ahead of each, and returns the median in milliseconds.
func Median(d *Device, warm, reps int, before, fn func() error) (float64, error) {
	return d.median(warm, reps, before, fn)
}

// FlushL2 overwrites a scratch buffer several times the L2 cache.
func FlushL2(d *Device) error { return d.flushL2() }

// RandomFill fills t with uniform values in [-scale, scale) from seed.
var RandomFill = (*Device).randomFill

// ReleaseCache frees the allocator's cached memory.
func ReleaseCache(d *Device) error { return d.releaseCache() }
