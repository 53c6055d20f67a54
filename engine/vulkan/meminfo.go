package vulkan

import "github.com/parallax-engine/parallax/engine"

// MemInfo reports the memory tensors can still take and the total: the
// size of the largest device-local heap (DeviceInfo.Memory), less the
// blocks this device has allocated from it (pooled and dedicated). Other
// processes' use of the GPU is not seen. It implements
// engine.MemoryReporter.
func (d *Device) MemInfo() (free, total int64, err error) {
	total = d.info.Memory
	var used int64
	if d.mem != nil {
		for _, b := range d.mem.blocks {
			used += int64(b.size)
		}
	}
	return max(0, total-used), total, nil
}

var _ engine.MemoryReporter = (*Device)(nil)
