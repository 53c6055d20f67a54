package vulkan

import (
	"fmt"

	"github.com/parallax-engine/parallax/engine"
)

func init() { engine.Register(backend{}) }

// backend is the "vulkan" entry of the engine's registry.
type backend struct{}

func (backend) Name() string { return "vulkan" }

// Devices lists every physical device the Vulkan loader reports, usable or
// not (an unusable one says why in its "unusable" feature).
func (backend) Devices() ([]engine.DeviceInfo, error) {
	rt, err := loadRuntime()
	if err != nil {
		return nil, err
	}
	out := make([]engine.DeviceInfo, len(rt.phys))
	for i, p := range rt.phys {
		out[i] = p.info()
		out[i].Kernels = p.listedKernels()
	}
	return out, nil
}

// Open opens device index as an engine.Device.
func (backend) Open(index int) (engine.Device, error) {
	return Open(index)
}

// Open opens Vulkan device index (the N of "vulkan:N").
func Open(index int) (*Device, error) {
	rt, p, err := usablePhys(index)
	if err != nil {
		return nil, err
	}
	return newDevice(rt, p)
}

// usablePhys is the runtime and physical device index, or why it cannot
// be opened.
func usablePhys(index int) (*vkRuntime, *physDevice, error) {
	rt, err := loadRuntime()
	if err != nil {
		return nil, nil, err
	}
	if index < 0 || index >= len(rt.phys) {
		return nil, nil, fmt.Errorf("vulkan has %d device(s) (indices 0..%d), not vulkan:%d: %w",
			len(rt.phys), len(rt.phys)-1, index, engine.ErrNoDevice)
	}
	p := rt.phys[index]
	if err := p.usable(); err != nil {
		return nil, nil, fmt.Errorf("vulkan:%d: %w", index, err)
	}
	return rt, p, nil
}

// Count returns the number of Vulkan devices, or an error saying why Vulkan
// cannot run here.
func Count() (int, error) {
	rt, err := loadRuntime()
	if err != nil {
		return 0, err
	}
	return len(rt.phys), nil
}
