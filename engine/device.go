package engine

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Kind classifies a device for "auto" selection and for reports.
type Kind int

// Device kinds, from most to least preferred within a backend.
const (
	KindDiscreteGPU Kind = iota
	KindIntegratedGPU
	KindVirtualGPU
	KindSoftware // a GPU API implemented on the CPU, such as lavapipe
	KindCPU
)

// String names the kind ("discrete GPU", ...).
func (k Kind) String() string {
	switch k {
	case KindDiscreteGPU:
		return "discrete GPU"
	case KindIntegratedGPU:
		return "integrated GPU"
	case KindVirtualGPU:
		return "virtual GPU"
	case KindSoftware:
		return "software"
	case KindCPU:
		return "CPU"
	}
	return "unknown"
}

// DeviceInfo describes one device a backend can open.
type DeviceInfo struct {
	Backend  string            // "cpu", "vulkan", "cuda"
	Index    int               // N in "backend:N"
	Name     string            // human-readable device name
	Kind     Kind              // for "auto" selection
	Memory   int64             // bytes of device memory (0 if unknown)
	DTypes   []DType           // floating dtypes the device computes in
	Features map[string]string // backend-specific features worth reporting
	// Kernels names, by op family ("attention forward", "decode", ...),
	// the kernels the device runs under its options: what the backend's
	// environment overrides (docs/ENGINE.md, "Options and overrides")
	// select at Open.
	Kernels map[string]string
}

// ID is the string Open accepts for this device ("vulkan:0").
func (d DeviceInfo) ID() string { return d.Backend + ":" + strconv.Itoa(d.Index) }

// Device owns memory and executes Ops. Methods are safe to call from one
// goroutine at a time; a backend may use many threads internally.
type Device interface {
	Ops

	// Info describes the device.
	Info() DeviceInfo
	// Alloc returns a new zero-filled tensor.
	Alloc(dtype DType, shape ...int) (*Tensor, error)
	// Free releases a tensor's memory; the tensor must not be used afterwards.
	Free(t *Tensor)
	// Write copies len(src) = t.Bytes() little-endian bytes into t.
	Write(t *Tensor, src []byte) error
	// Read copies t's bytes (little-endian) into dst, len(dst) = t.Bytes(),
	// after all previously enqueued ops have finished.
	Read(t *Tensor, dst []byte) error
	// Sync waits for every enqueued op and reports the first error an op
	// raised while executing (shape errors are reported by the op call itself).
	Sync() error
	// Close releases the device; its tensors become invalid.
	Close() error
}

// PendingError keeps, for a backend's Sync, the first error its ops raised
// while executing. The zero value holds none; it is safe for concurrent
// use.
type PendingError struct {
	mu  sync.Mutex
	err error
}

// Fail records err unless an earlier error is pending, and returns err.
func (p *PendingError) Fail(err error) error {
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	p.mu.Unlock()
	return err
}

// Take returns the pending error, or nil, and clears it.
func (p *PendingError) Take() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	err := p.err
	p.err = nil
	return err
}

// The optional capabilities a Device may offer besides Ops. Callers find
// them with a type assertion (dev.(engine.Timer)); every backend asserts
// at compile time the ones it implements. The others declared elsewhere in
// this package: MultiTensorOps, Profiler, MemoryReporter, GraphRecorder.

// Timer is implemented by devices that time enqueued work on the device
// itself (Vulkan timestamp queries, CUDA events), which excludes the
// host's submission and waiting from the measurement.
type Timer interface {
	// Timed runs fn, which enqueues ops on the device, between two device
	// timestamps and returns the device time between them. It waits for
	// everything enqueued before and by fn, and reports an error fn's ops
	// raised.
	Timed(fn func() error) (time.Duration, error)
}

// CacheFlusher is implemented by devices that can evict their caches on
// demand (CUDA: a write over a scratch several times the L2), so that a
// benchmark times an op reading from memory, as it does in a model where
// other layers' data passes through the cache between its calls.
type CacheFlusher interface {
	// FlushCaches enqueues the flush; it does not wait for it.
	FlushCaches() error
}

// Collectives is implemented by devices that run collectives between
// processes themselves (CUDA through NCCL), on their own queue and
// without a copy to the host. train/dist uses it when every rank's device
// offers it and falls back to TCP otherwise.
type Collectives interface {
	// CommAvailable reports why the device cannot run collectives here (a
	// missing library, say), or nil.
	CommAvailable() error
	// CommID returns a new unique id for a communicator; rank 0 makes it
	// and hands it to the other ranks.
	CommID() ([]byte, error)
	// OpenComm joins communicator id as rank of nranks (every rank calls
	// it with the same id). The result is the backend's communicator,
	// which train/dist drives; Close releases it.
	OpenComm(id []byte, rank, nranks int) (io.Closer, error)
}

// Env reads a backend's option overrides (docs/ENGINE.md, "Options and
// overrides") through Get (os.Getenv in a program). An unset or empty
// variable reads as the zero value; the first malformed one is kept in
// Err, so a parser reads every variable and reports once.
type Env struct {
	Get func(string) string
	Err error
}

func (e *Env) fail(name, v, want string) {
	if e.Err == nil {
		e.Err = fmt.Errorf("%s=%q: want %s", name, v, want)
	}
}

// String returns the variable's value, trimmed.
func (e *Env) String(name string) string { return strings.TrimSpace(e.Get(name)) }

// Int returns the variable's value as an integer (0 when unset).
func (e *Env) Int(name string) int {
	v := e.String(name)
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		e.fail(name, v, "an integer")
	}
	return n
}

// Switch reports whether the variable is set to on; unset or off reads as
// false, anything else is an error.
func (e *Env) Switch(name, on, off string) bool {
	switch v := e.String(name); v {
	case "", off:
		return false
	case on:
		return true
	default:
		e.fail(name, v, on+" or "+off)
		return false
	}
}

// Backend is what a backend package registers: it lists and opens devices.
type Backend interface {
	// Name is the prefix of device IDs ("cpu", "vulkan", "cuda").
	Name() string
	// Devices lists the devices present. An error means the backend cannot
	// run on this machine (a missing driver library, say) and says why.
	Devices() ([]DeviceInfo, error)
	// Open opens device Index.
	Open(index int) (Device, error)
}

var (
	regMu    sync.Mutex
	backends = map[string]Backend{}
)

// Register makes a backend available to Open. It panics if a backend of the
// same name is registered twice, which is a programming error.
func Register(b Backend) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := backends[b.Name()]; dup {
		panic("engine: backend " + b.Name() + " registered twice")
	}
	backends[b.Name()] = b
}

// Backends returns the registered backends sorted by preference for "auto":
// cuda, vulkan, then the rest alphabetically, cpu last.
func Backends() []Backend {
	regMu.Lock()
	defer regMu.Unlock()
	out := make([]Backend, 0, len(backends))
	for _, b := range backends {
		out = append(out, b)
	}
	rank := func(n string) int {
		switch n {
		case "cuda":
			return 0
		case "vulkan":
			return 1
		case "cpu":
			return 3
		}
		return 2
	}
	sort.Slice(out, func(i, j int) bool {
		ri, rj := rank(out[i].Name()), rank(out[j].Name())
		if ri != rj {
			return ri < rj
		}
		return out[i].Name() < out[j].Name()
	})
	return out
}

// BackendStatus is one backend's entry in a device listing.
type BackendStatus struct {
	Name    string
	Devices []DeviceInfo
	Err     error // why the backend has no usable devices, if it has none
}

// List enumerates every registered backend and its devices.
func List() []BackendStatus {
	var out []BackendStatus
	for _, b := range Backends() {
		devs, err := b.Devices()
		out = append(out, BackendStatus{Name: b.Name(), Devices: devs, Err: err})
	}
	return out
}

// ErrNoDevice is wrapped by Open's errors when the requested device does not
// exist on this machine.
var ErrNoDevice = errors.New("no such device")

// Open opens a device by ID: "auto", "cpu", "cpu:0", "vulkan:N" or "cuda:N"
// ("vulkan" and "cuda" alone mean index 0). "auto" prefers a CUDA device,
// then a discrete Vulkan GPU, then any other hardware Vulkan device, then the
// CPU, and only then a software Vulkan device such as lavapipe (which is
// for certifying the shaders, not for speed).
func Open(id string) (Device, error) {
	id = strings.TrimSpace(strings.ToLower(id))
	if id == "" || id == "auto" {
		return openAuto()
	}
	name, idxStr, hasIdx := strings.Cut(id, ":")
	idx := 0
	if hasIdx {
		n, err := strconv.Atoi(idxStr)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("open device %q: index %q is not a non-negative integer", id, idxStr)
		}
		idx = n
	}
	regMu.Lock()
	b, ok := backends[name]
	regMu.Unlock()
	if !ok {
		var names []string
		for _, b := range Backends() {
			names = append(names, b.Name())
		}
		return nil, fmt.Errorf("open device %q: backend %q is not built into this program (available: %s, or auto): %w",
			id, name, strings.Join(names, ", "), ErrNoDevice)
	}
	devs, err := b.Devices()
	if err != nil {
		return nil, fmt.Errorf("open device %q: %s backend unavailable: %w", id, name, err)
	}
	if idx >= len(devs) {
		return nil, fmt.Errorf("open device %q: %s has %d device(s) (indices 0..%d): %w",
			id, name, len(devs), len(devs)-1, ErrNoDevice)
	}
	d, err := b.Open(idx)
	if err != nil {
		return nil, fmt.Errorf("open device %q: %w", id, err)
	}
	return d, nil
}

func openAuto() (Device, error) {
	type cand struct {
		b    Backend
		info DeviceInfo
		rank int
	}
	var best *cand
	var errs []string
	for bi, b := range Backends() {
		devs, err := b.Devices()
		if err != nil {
			errs = append(errs, b.Name()+": "+err.Error())
			continue
		}
		for _, d := range devs {
			// Backend order first (cuda, vulkan, ..., cpu); within Vulkan a
			// discrete GPU beats an integrated one. A software device (a GPU
			// API emulated on the CPU, such as lavapipe) comes after the CPU
			// backend itself, which runs the same work an order of magnitude
			// faster; it stays the last resort when no CPU backend is built in.
			r := bi*16 + int(d.Kind)
			if d.Kind == KindSoftware {
				r = 1<<20 + bi
			}
			if best == nil || r < best.rank {
				best = &cand{b, d, r}
			}
		}
	}
	if best == nil {
		return nil, fmt.Errorf("open device auto: no backend has a usable device (%s): %w", strings.Join(errs, "; "), ErrNoDevice)
	}
	d, err := best.b.Open(best.info.Index)
	if err != nil {
		return nil, fmt.Errorf("open device auto (%s): %w", best.info.ID(), err)
	}
	return d, nil
}
