package engine

import "fmt"

// MemoryReporter is implemented by devices that can tell how much of their
// memory is free: CUDA (cuMemGetInfo), Vulkan (the device-local heap less
// what the device has allocated) and the CPU (the memory the operating
// system and the process's cgroup leave available).
type MemoryReporter interface {
	// MemInfo reports the bytes free for new tensors and the device's
	// total memory.
	MemInfo() (free, total int64, err error)
}

// MemoryOf reports dev's free and total memory in bytes: its MemInfo when
// dev is a MemoryReporter, else DeviceInfo.Memory for both (the device is
// taken to be empty). Both are 0 when the device reports nothing (known is
// false then).
func MemoryOf(dev Device) (free, total int64, known bool) {
	if r, ok := dev.(MemoryReporter); ok {
		if f, t, err := r.MemInfo(); err == nil && (f > 0 || t > 0) {
			if t == 0 {
				t = f
			}
			return f, t, true
		}
	}
	if m := dev.Info().Memory; m > 0 {
		return m, m, true
	}
	return 0, 0, false
}

// FormatBytes writes a byte count with a binary unit: "512 B", "3.0 KiB",
// "1.5 GiB".
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n)/unit, 0
	for v >= unit && i < 5 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGTPE"[i])
}
