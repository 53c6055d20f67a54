//go:build cgo

package cuda

// #include <stdlib.h>
// #include "nccl_shim.h"
import "C"

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/parallax-engine/parallax/engine"
)

// NCCLIDBytes is the size of an NCCL unique id.
const NCCLIDBytes = C.PXNCCL_ID_BYTES

var (
	ncclOnce sync.Once
	ncclErr  error
	ncclPath string
)

// loadNCCL opens and binds libnccl.so.2 once per process, searched like the
// other libraries (PARALLAX_CUDA_LIB_DIRS, the loader's path, the CUDA
// toolkit, the nvidia/nccl/lib folder of NVIDIA's Python wheel).
func loadNCCL() error {
	ncclOnce.Do(func() {
		dirs := libDirs()
		h, path, err := openLib("libnccl.so", []string{"2"}, dirs, true)
		if err != nil {
			ncclErr = fmt.Errorf("NCCL (libnccl.so.2) not found in the default library path, LD_LIBRARY_PATH, "+
				"/usr/local/cuda/lib64 or Python nvidia/*/lib folders (%s): install NCCL (the libnccl2 package, or "+
				"`pip install nvidia-nccl-cu12`/`nvidia-nccl-cu13`), set PARALLAX_CUDA_LIB_DIRS, or use the TCP "+
				"collectives (--comm tcp): %v", summarize(dirs), err)
			return
		}
		if name := C.pxnccl_bind(h); name != nil {
			ncclErr = fmt.Errorf("NCCL library %s lacks %s (NCCL 2.10 or newer is needed)", path, C.GoString(name))
			return
		}
		ncclPath = path
	})
	return ncclErr
}

// NCCLVersion returns the version of the NCCL library that was loaded
// ("2.28.9") and its path.
func NCCLVersion() (version, path string, err error) {
	if err := loadNCCL(); err != nil {
		return "", "", err
	}
	var v C.int
	if r := C.pxnccl_version(&v); r != 0 {
		return "", ncclPath, ncclError("ncclGetVersion", r, nil)
	}
	n := int(v)
	return fmt.Sprintf("%d.%d.%d", n/10000, n/100%100, n%100), ncclPath, nil
}

// NCCLUniqueID returns a new NCCL unique id: the opaque bytes that rank 0
// creates and every rank passes to NewNCCL. It holds the address on which
// rank 0's NCCL bootstrap listens.
func NCCLUniqueID() ([]byte, error) {
	if err := loadNCCL(); err != nil {
		return nil, err
	}
	id := make([]byte, NCCLIDBytes)
	if r := C.pxnccl_unique_id((*C.char)(unsafe.Pointer(&id[0]))); r != 0 {
		return nil, ncclError("ncclGetUniqueId", r, nil)
	}
	return id, nil
}

// ncclError names the call, NCCL's text for the result and, when the
// library can say, its last detailed message.
func ncclError(what string, r C.int, comm C.ncclComm_t) error {
	msg := C.GoString(C.pxnccl_error_string(r))
	if comm != nil {
		if last := strings.TrimSpace(C.GoString(C.pxnccl_last_error(comm))); last != "" {
			msg += ": " + last
		}
	}
	return fmt.Errorf("nccl %s: %s (code %d)", what, msg, int(r))
}

// NCCL is one rank's NCCL communicator. Its collectives are enqueued on the
// device's stream, after the ops already enqueued and before later ones, so
// they need no synchronisation of their own; errors raised while they run
// surface at the device's Sync or through AsyncError.
//
// Methods are called from one goroutine at a time (the one driving the
// device), except AsyncError and Abort, which a watchdog may call at any
// time.
type NCCL struct {
	d        *Device
	comm     C.ncclComm_t
	rank, n  int
	state    atomic.Int32 // ncclOpen, ncclAborted or ncclClosed
	abortMsg atomic.Value // string: why Abort was called
	// life keeps AsyncError (read-locked) off a communicator that Abort or
	// Close is releasing. Collectives do not take it: one may block on a
	// dead peer, and Abort is what unblocks it.
	life sync.RWMutex
	// side is the second stream of StartAllReduce and StartReduce (nil
	// until first used); sideBusy: it has work the device's stream has not
	// joined (nccl_async.go).
	side     *sideStream
	sideBusy bool
}

const (
	ncclOpen = iota
	ncclAborted
	ncclClosed
)

// Collective kinds of pxnccl_op.
const (
	kindAllReduce = iota
	kindReduce
	kindBroadcast
	kindReduceScatter
	kindAllGather
)

// NewNCCL joins the communicator that id names as rank of nranks. It blocks
// until every rank has joined (NCCL's own bootstrap, at the address inside
// id).
func (d *Device) NewNCCL(id []byte, rank, nranks int) (*NCCL, error) {
	if err := loadNCCL(); err != nil {
		return nil, err
	}
	if len(id) != NCCLIDBytes {
		return nil, fmt.Errorf("nccl: unique id of %d bytes, want %d", len(id), NCCLIDBytes)
	}
	if nranks < 1 || rank < 0 || rank >= nranks {
		return nil, fmt.Errorf("nccl: rank %d of %d ranks", rank, nranks)
	}
	cid := C.CBytes(id)
	defer C.free(cid)
	var comm C.ncclComm_t
	if r := C.pxnccl_init_rank(d.ctx, &comm, C.int(nranks), (*C.char)(cid), C.int(rank)); r != 0 {
		return nil, ncclError(fmt.Sprintf("ncclCommInitRank (rank %d of %d on %s)", rank, nranks, d.info.ID()), r, nil)
	}
	return &NCCL{d: d, comm: comm, rank: rank, n: nranks}, nil
}

// Rank is this communicator's rank.
func (c *NCCL) Rank() int { return c.rank }

// Size is the number of ranks.
func (c *NCCL) Size() int { return c.n }

func ncclType(dt engine.DType) (C.int, bool) {
	switch dt {
	case engine.F32:
		return 7, true
	case engine.BF16:
		return 9, true
	case engine.F16:
		return 6, true
	case engine.I32:
		return 2, true
	}
	return 0, false
}

func ncclOp(avg bool) C.int {
	if avg {
		return 4 // ncclAvg
	}
	return 0 // ncclSum
}

func (c *NCCL) usable(what string) error {
	switch c.state.Load() {
	case ncclAborted:
		msg, _ := c.abortMsg.Load().(string)
		return fmt.Errorf("nccl %s: the communicator was aborted (%s)", what, msg)
	case ncclClosed:
		return fmt.Errorf("nccl %s: the communicator is closed", what)
	}
	return nil
}

// check validates one tensor of a collective.
func (c *NCCL) check(what string, t *engine.Tensor) (C.int, error) {
	if t == nil {
		return 0, fmt.Errorf("nccl %s: nil tensor", what)
	}
	if t.Device() != engine.Device(c.d) {
		return 0, fmt.Errorf("nccl %s: tensor %v is not on %s", what, t, c.d.info.ID())
	}
	dt, ok := ncclType(t.DType())
	if !ok {
		return 0, fmt.Errorf("nccl %s: unsupported dtype %v", what, t.DType())
	}
	return dt, nil
}

// run enqueues ops on the device's stream, after whatever was started on
// the second stream, so that the collectives run in the order they were
// called.
func (c *NCCL) run(what string, ops []C.pxnccl_op) error {
	if c.sideBusy && len(ops) > 0 {
		if err := c.Join(); err != nil {
			return err
		}
	}
	return c.runOn(c.d.stream, what, ops)
}

func (c *NCCL) runOn(stream C.CUstream, what string, ops []C.pxnccl_op) error {
	if err := c.usable(what); err != nil {
		return err
	}
	if len(ops) == 0 {
		return nil
	}
	var failed C.int
	if r := C.pxnccl_run(c.d.ctx, c.comm, stream, &ops[0], C.int(len(ops)), &failed); r != 0 {
		return ncclError(fmt.Sprintf("%s (op %d of %d)", what, int(failed), len(ops)), r, c.comm)
	}
	return nil
}

// inPlace runs one in-place op per tensor (all-reduce, reduce, broadcast).
func (c *NCCL) inPlace(what string, kind int, avg bool, roots []int, ts []*engine.Tensor) error {
	ops, err := c.inPlaceOps(what, kind, avg, roots, ts)
	if err != nil {
		return err
	}
	return c.run(what, ops)
}

// inPlaceOps builds inPlace's ops.
func (c *NCCL) inPlaceOps(what string, kind int, avg bool, roots []int, ts []*engine.Tensor) ([]C.pxnccl_op, error) {
	if roots != nil && len(roots) != len(ts) {
		return nil, fmt.Errorf("nccl %s: %d roots for %d tensors", what, len(roots), len(ts))
	}
	ops := make([]C.pxnccl_op, 0, len(ts))
	for i, t := range ts {
		dt, err := c.check(what, t)
		if err != nil {
			return nil, err
		}
		if t.Numel() == 0 {
			continue
		}
		root := 0
		if roots != nil {
			root = roots[i]
			if root < 0 || root >= c.n {
				return nil, fmt.Errorf("nccl %s: root %d is not a rank of %d", what, root, c.n)
			}
		}
		p := C.CUdeviceptr(ptr(t))
		ops = append(ops, C.pxnccl_op{kind: C.int(kind), send: p, recv: p, count: C.size_t(t.Numel()),
			dtype: dt, op: ncclOp(avg), root: C.int(root)})
	}
	return ops, nil
}

// AllReduce replaces every tensor by its sum (or mean, avg) over the ranks,
// as one NCCL group.
func (c *NCCL) AllReduce(avg bool, ts ...*engine.Tensor) error {
	return c.inPlace("all-reduce", kindAllReduce, avg, nil, ts)
}

// Reduce replaces ts[i] on rank roots[i] by its sum (or mean) over the
// ranks; on the other ranks ts[i] is undefined afterwards. One NCCL group.
func (c *NCCL) Reduce(avg bool, roots []int, ts ...*engine.Tensor) error {
	return c.inPlace("reduce", kindReduce, avg, roots, ts)
}

// Broadcast copies ts[i] of rank roots[i] into ts[i] of every rank. One
// NCCL group: with the roots spread over the ranks it is an all-gather of
// whole tensors.
func (c *NCCL) Broadcast(roots []int, ts ...*engine.Tensor) error {
	return c.inPlace("broadcast", kindBroadcast, false, roots, ts)
}

// ReduceScatter reduces in (Size() blocks of out's element count) over the
// ranks and leaves block Rank() of the result in out.
func (c *NCCL) ReduceScatter(avg bool, out, in *engine.Tensor) error {
	dt, err := c.check("reduce-scatter", out)
	if err != nil {
		return err
	}
	if _, err := c.check("reduce-scatter", in); err != nil {
		return err
	}
	if in.DType() != out.DType() || in.Numel() != out.Numel()*c.n {
		return fmt.Errorf("nccl reduce-scatter: in %v must hold %d blocks of out %v", in, c.n, out)
	}
	return c.run("reduce-scatter", []C.pxnccl_op{{kind: kindReduceScatter, send: C.CUdeviceptr(ptr(in)),
		recv: C.CUdeviceptr(ptr(out)), count: C.size_t(out.Numel()), dtype: dt, op: ncclOp(avg)}})
}

// AllGather writes in of rank r into block r of out (Size() blocks of in's
// element count) on every rank.
func (c *NCCL) AllGather(out, in *engine.Tensor) error {
	dt, err := c.check("all-gather", out)
	if err != nil {
		return err
	}
	if _, err := c.check("all-gather", in); err != nil {
		return err
	}
	if in.DType() != out.DType() || out.Numel() != in.Numel()*c.n {
		return fmt.Errorf("nccl all-gather: out %v must hold %d blocks of in %v", out, c.n, in)
	}
	return c.run("all-gather", []C.pxnccl_op{{kind: kindAllGather, send: C.CUdeviceptr(ptr(in)),
		recv: C.CUdeviceptr(ptr(out)), count: C.size_t(in.Numel()), dtype: dt}})
}

// AsyncError reports an error NCCL raised while running (a peer that went
// away, a network failure), or nil. Safe to call from any goroutine.
func (c *NCCL) AsyncError() error {
	c.life.RLock()
	defer c.life.RUnlock()
	if c.state.Load() != ncclOpen {
		return nil
	}
	var e C.int
	if r := C.pxnccl_async_error(c.comm, &e); r != 0 {
		return ncclError("ncclCommGetAsyncError", r, nil)
	}
	if e != 0 && e != 7 { // 7: ncclInProgress
		return ncclError("asynchronous error", e, nil)
	}
	return nil
}

// Abort stops the communicator's outstanding work (kernels waiting for a
// peer that died return) and releases it; later collectives fail with why.
// Safe to call from any goroutine, and more than once.
func (c *NCCL) Abort(why string) {
	c.life.Lock()
	defer c.life.Unlock()
	if !c.state.CompareAndSwap(ncclOpen, ncclAborted) {
		return
	}
	c.abortMsg.Store(why)
	C.pxnccl_abort(c.comm)
}

// Close finishes the outstanding collectives and releases the
// communicator. After a failure use Abort: Close would wait for peers.
func (c *NCCL) Close() error {
	c.life.Lock()
	defer c.life.Unlock()
	if !c.state.CompareAndSwap(ncclOpen, ncclClosed) {
		return nil
	}
	r := C.pxnccl_destroy(c.d.ctx, c.comm)
	if c.side != nil {
		c.side.close()
		c.side = nil
	}
	if r != 0 {
		return ncclError("ncclCommDestroy", r, nil)
	}
	return nil
}

// The three methods below let packages that may not import a backend (the
// training layer's train/dist) reach NCCL through a type assertion on
// engine.Device; the io.Closer they get back is an *NCCL.

// CommAvailable reports nil when NCCL can be used, else why not.
func (d *Device) CommAvailable() error { return loadNCCL() }

// CommID returns a new NCCL unique id (NCCLUniqueID).
func (d *Device) CommID() ([]byte, error) { return NCCLUniqueID() }

// OpenComm is NewNCCL with an interface-typed result.
func (d *Device) OpenComm(id []byte, rank, nranks int) (io.Closer, error) {
	c, err := d.NewNCCL(id, rank, nranks)
	if err != nil {
		return nil, err
	}
	return c, nil
}
