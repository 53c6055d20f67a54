package dist

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/parallax-engine/parallax/engine"
)

// ReduceOp is how a reducing collective combines the ranks' values.
type ReduceOp int

// Reductions.
const (
	Sum ReduceOp = iota // the sum over the ranks
	Avg                 // the mean over the ranks
)

func (op ReduceOp) String() string {
	if op == Avg {
		return "avg"
	}
	return "sum"
}

// Comm runs collectives on engine tensors (F32, BF16 or F16; the copying
// ones also I32) of one device per rank. Every rank calls the same
// collectives in the same order with tensors of the same shapes and dtypes;
// a rank that does not fails the job with a message naming it. Tensor
// collectives are ordered with the device's other ops (NCCL enqueues them
// on the device's stream; the TCP implementation reads and writes the
// tensors, which waits for the ops before). One goroutine drives a Comm,
// as one drives its device; the started collectives (StartAllReduce,
// StartReduce) run in the order they were called, before any collective
// called after them.
type Comm interface {
	Rank() int
	Size() int
	// Backend is "nccl" or "tcp".
	Backend() string
	// Group is the control group the communicator belongs to.
	Group() *Group

	// AllReduce replaces every tensor by its reduction over the ranks. The
	// tensors form one bucket: NCCL runs them as one group.
	AllReduce(op ReduceOp, ts ...*engine.Tensor) error
	// Reduce leaves the reduction of ts[i] in ts[i] on rank roots[i];
	// elsewhere ts[i] is undefined afterwards (the TCP implementation leaves
	// it unchanged). With the roots spread over the ranks it is a
	// reduce-scatter whose blocks are whole tensors.
	Reduce(op ReduceOp, roots []int, ts ...*engine.Tensor) error
	// Broadcast copies ts[i] of rank roots[i] to every rank. With the roots
	// spread over the ranks it is an all-gather of whole tensors.
	Broadcast(roots []int, ts ...*engine.Tensor) error
	// ReduceScatter reduces in (Size() equal blocks, flattened) over the
	// ranks and leaves block Rank() of the result in out.
	ReduceScatter(op ReduceOp, out, in *engine.Tensor) error
	// AllGather writes in of rank r into block r of out (Size() blocks of
	// in's element count) on every rank.
	AllGather(out, in *engine.Tensor) error

	// StartAllReduce starts AllReduce and returns without waiting for it,
	// so that the device computes on while the collective runs: NCCL runs
	// it on a second stream after the ops enqueued so far; the TCP
	// implementation reads the tensors now, exchanges them on a goroutine
	// and writes the result at Wait. The tensors must not be written
	// before Wait, nor read for the result. Errors come from Wait.
	StartAllReduce(op ReduceOp, ts ...*engine.Tensor) Pending
	// StartReduce is Reduce as StartAllReduce is AllReduce.
	StartReduce(op ReduceOp, roots []int, ts ...*engine.Tensor) Pending

	// Barrier returns once every rank has called it (a host-side barrier:
	// device work enqueued before it may still be running).
	Barrier() error
	// AllReduceHost replaces small host values (losses, token counts,
	// flags) by their sums over the ranks, identical on every rank.
	AllReduceHost(vals []float64) error

	// Close releases the communicator (not its Group). After a failure it
	// aborts outstanding work instead of waiting for it.
	Close() error
}

// Pending is a started collective.
type Pending interface {
	// Wait finishes the collective and reports its error: afterwards its
	// tensors hold the result (on NCCL, for the ops enqueued after Wait on
	// the device's stream). Call it once, on the goroutine driving the Comm.
	Wait() error
}

// donePending is a collective that already finished (or failed).
type donePending struct{ err error }

func (p donePending) Wait() error { return p.err }

// Backends NewComm accepts.
const (
	BackendAuto = "auto" // NCCL when every rank's device offers it, else TCP
	BackendNCCL = "nccl"
	BackendTCP  = "tcp"
)

// deviceComm is a device's own communicator, what the OpenComm of an
// engine.Collectives device returns (engine/cuda's *NCCL).
type deviceComm interface {
	AllReduce(avg bool, ts ...*engine.Tensor) error
	Reduce(avg bool, roots []int, ts ...*engine.Tensor) error
	Broadcast(roots []int, ts ...*engine.Tensor) error
	ReduceScatter(avg bool, out, in *engine.Tensor) error
	AllGather(out, in *engine.Tensor) error
	AsyncError() error
	Abort(why string)
	Close() error
}

// asyncDeviceComm is a deviceComm that can run collectives on a second
// stream of its device, alongside the device's own work (engine/cuda's
// *NCCL): Start* enqueue there after the work enqueued so far on the
// device's stream; Join makes the device's stream wait for everything
// started.
type asyncDeviceComm interface {
	StartAllReduce(avg bool, ts ...*engine.Tensor) error
	StartReduce(avg bool, roots []int, ts ...*engine.Tensor) error
	Join() error
}

type commOffer struct {
	Device string `json:"device"`
	Native bool   `json:"native"`
	Why    string `json:"why"` // why not native
}

type commChoice struct {
	Backend string `json:"backend"`
	ID      []byte `json:"id"`
	Err     string `json:"err"`
}

// NewComm makes the communicator of g's ranks over their devices (every
// rank calls it). backend is BackendAuto, BackendNCCL or BackendTCP; rank
// 0 chooses, from what each rank's device offers, and hands the NCCL
// unique id to the others over g.
func NewComm(g *Group, dev engine.Device, backend string) (Comm, error) {
	switch backend {
	case "", BackendAuto:
		backend = BackendAuto
	case BackendNCCL, BackendTCP:
	default:
		return nil, fmt.Errorf("distributed: collectives backend %q: want auto, nccl or tcp", backend)
	}
	cd, native := dev.(engine.Collectives)
	offer := commOffer{Device: dev.Info().ID(), Native: native}
	if !native {
		offer.Why = dev.Info().ID() + " has no native collectives"
	} else if err := cd.CommAvailable(); err != nil {
		offer.Native, offer.Why = false, err.Error()
	}
	ob, _ := json.Marshal(offer)
	all, err := g.GatherBytes(ob)
	if err != nil {
		return nil, err
	}
	var choice commChoice
	if g.Rank() == 0 {
		choice = choose(g, backend, all)
		if choice.Backend == BackendNCCL {
			if choice.ID, err = cd.CommID(); err != nil {
				choice = commChoice{Err: "rank 0: " + err.Error()}
			}
		}
	}
	cb, _ := json.Marshal(choice)
	if cb, err = g.BroadcastBytes(0, cb); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(cb, &choice); err != nil {
		return nil, fmt.Errorf("distributed: a malformed collectives choice from rank 0: %w", err)
	}
	if choice.Err != "" {
		return nil, errors.New("distributed: " + choice.Err)
	}
	if choice.Backend == BackendTCP {
		return &tcpComm{g: g}, nil
	}
	c, err := cd.OpenComm(choice.ID, g.Rank(), g.Size())
	if err != nil {
		return nil, fmt.Errorf("distributed: %w", err)
	}
	dc, ok := c.(deviceComm)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("distributed: %s's communicator lacks the collectives", dev.Info().ID())
	}
	nc := &nativeComm{g: g, dc: dc}
	g.OnFail(func(err error) { dc.Abort(err.Error()) })
	g.onTick(dc.AsyncError)
	if err := g.Barrier(); err != nil {
		dc.Abort(err.Error())
		return nil, err
	}
	return nc, nil
}

func choose(g *Group, backend string, all [][]byte) commChoice {
	var why []string
	for r, b := range all {
		var o commOffer
		if err := json.Unmarshal(b, &o); err != nil {
			return commChoice{Err: fmt.Sprintf("%s sent a malformed offer", g.Describe(r))}
		}
		if !o.Native {
			why = append(why, fmt.Sprintf("%s: %s", g.Describe(r), o.Why))
		}
	}
	switch {
	case backend == BackendTCP:
		return commChoice{Backend: BackendTCP}
	case len(why) == 0:
		return commChoice{Backend: BackendNCCL}
	case backend == BackendNCCL:
		return commChoice{Err: "NCCL was asked for (--comm nccl) but not every rank can use it: " + strings.Join(why, "; ")}
	}
	if len(why) < len(all) && g.opts.Logf != nil {
		g.opts.Logf("distributed: collectives over TCP, since not every rank can use NCCL: %s", strings.Join(why, "; "))
	}
	return commChoice{Backend: BackendTCP}
}

// nativeComm runs tensor collectives through the device's communicator and
// the host ones through the group.
type nativeComm struct {
	g  *Group
	dc deviceComm
}

func (c *nativeComm) Rank() int       { return c.g.Rank() }
func (c *nativeComm) Size() int       { return c.g.Size() }
func (c *nativeComm) Backend() string { return BackendNCCL }
func (c *nativeComm) Group() *Group   { return c.g }

// do runs a device collective unless the group failed, and prefers the
// group's failure (which names the rank) to the device's error it caused.
func (c *nativeComm) do(f func() error) error {
	if err := c.g.Err(); err != nil {
		return err
	}
	if err := f(); err != nil {
		return c.g.errOr(err)
	}
	return nil
}

func (c *nativeComm) AllReduce(op ReduceOp, ts ...*engine.Tensor) error {
	return c.do(func() error { return c.dc.AllReduce(op == Avg, ts...) })
}
func (c *nativeComm) Reduce(op ReduceOp, roots []int, ts ...*engine.Tensor) error {
	return c.do(func() error { return c.dc.Reduce(op == Avg, roots, ts...) })
}
func (c *nativeComm) Broadcast(roots []int, ts ...*engine.Tensor) error {
	return c.do(func() error { return c.dc.Broadcast(roots, ts...) })
}
func (c *nativeComm) ReduceScatter(op ReduceOp, out, in *engine.Tensor) error {
	return c.do(func() error { return c.dc.ReduceScatter(op == Avg, out, in) })
}
func (c *nativeComm) AllGather(out, in *engine.Tensor) error {
	return c.do(func() error { return c.dc.AllGather(out, in) })
}

// StartAllReduce runs the all-reduce on the communicator's second stream
// when it has one; otherwise it runs it now, on the device's stream,
// which is still correct but does not overlap anything enqueued later.
func (c *nativeComm) StartAllReduce(op ReduceOp, ts ...*engine.Tensor) Pending {
	a, ok := c.dc.(asyncDeviceComm)
	if !ok {
		return donePending{c.AllReduce(op, ts...)}
	}
	return &nativePending{c: c, a: a, err: c.do(func() error { return a.StartAllReduce(op == Avg, ts...) })}
}

// StartReduce is StartAllReduce for Reduce.
func (c *nativeComm) StartReduce(op ReduceOp, roots []int, ts ...*engine.Tensor) Pending {
	a, ok := c.dc.(asyncDeviceComm)
	if !ok {
		return donePending{c.Reduce(op, roots, ts...)}
	}
	return &nativePending{c: c, a: a, err: c.do(func() error { return a.StartReduce(op == Avg, roots, ts...) })}
}

// nativePending is a collective on the second stream. Waiting joins the
// whole second stream, which may include collectives started later: they
// finish before the ones after Wait read anything either way.
type nativePending struct {
	c   *nativeComm
	a   asyncDeviceComm
	err error
}

func (p *nativePending) Wait() error {
	if p.err != nil {
		return p.err
	}
	return p.c.do(p.a.Join)
}

func (c *nativeComm) Barrier() error                     { return c.g.Barrier() }
func (c *nativeComm) AllReduceHost(vals []float64) error { return c.g.AllReduceFloat64(vals) }
func (c *nativeComm) Close() error {
	if err := c.g.Err(); err != nil {
		c.dc.Abort(err.Error())
		return nil
	}
	return c.dc.Close()
}

// tcpComm runs every collective through rank 0 over the control
// connections: each rank sends its tensors' bytes, rank 0 reduces in rank
// order (f32 arithmetic) and sends each rank its result. Any device works
// (tensors are read and written through the host); meant for the CPU
// backend, tests, and GPUs without NCCL.
//
// A tensor collective has three parts: reading the tensors and writing
// the result, which touch the device and so stay on the goroutine driving
// it, and the exchange in between (the network and rank 0's reduction),
// which runs on a goroutine of its own, after the exchange of the
// collective started before it: so started collectives overlap the
// caller's computing, and every rank exchanges in call order.
type tcpComm struct {
	g    *Group
	mu   sync.Mutex
	last *tcpPending // the latest collective started
}

// tcpPending is one collective's exchange; finish writes its result into
// the tensors at Wait.
type tcpPending struct {
	done   chan struct{} // closed when the exchange has finished
	res    []byte
	err    error
	finish func(res []byte) error
}

func (p *tcpPending) Wait() error {
	<-p.done
	if p.err != nil {
		return p.err
	}
	f := p.finish
	p.finish = nil
	if f == nil {
		return nil
	}
	return f(p.res)
}

// start runs exchange on a goroutine once the exchanges started before it
// have finished (whether they failed or not: a failure of the group fails
// the later ones too, at once).
func (c *tcpComm) start(exchange func() ([]byte, error), finish func(res []byte) error) *tcpPending {
	p := &tcpPending{done: make(chan struct{}), finish: finish}
	c.mu.Lock()
	prev := c.last
	c.last = p
	c.mu.Unlock()
	go func() {
		defer close(p.done)
		if prev != nil {
			<-prev.done
		}
		p.res, p.err = exchange()
	}()
	return p
}

// drain waits for the exchanges of every collective started, so that a
// collective exchanged on the caller's goroutine comes after them.
func (c *tcpComm) drain() {
	c.mu.Lock()
	p := c.last
	c.mu.Unlock()
	if p != nil {
		<-p.done
	}
}

func (c *tcpComm) Rank() int       { return c.g.Rank() }
func (c *tcpComm) Size() int       { return c.g.Size() }
func (c *tcpComm) Backend() string { return BackendTCP }
func (c *tcpComm) Group() *Group   { return c.g }
func (c *tcpComm) Close() error    { return nil }

func (c *tcpComm) Barrier() error {
	c.drain()
	return c.g.Barrier()
}

func (c *tcpComm) AllReduceHost(vals []float64) error {
	c.drain()
	return c.g.AllReduceFloat64(vals)
}

// describeTensors is the signature every rank's call must match.
func describeTensors(name string, roots []int, ts ...*engine.Tensor) string {
	var b strings.Builder
	b.WriteString(name)
	for i, t := range ts {
		fmt.Fprintf(&b, " %v%v", t.DType(), t.Shape())
		if roots != nil {
			fmt.Fprintf(&b, "@%d", roots[i])
		}
	}
	return b.String()
}

func readTensors(ts []*engine.Tensor, want func(i int) bool) ([]byte, error) {
	n := 0
	for i, t := range ts {
		if want == nil || want(i) {
			n += t.Bytes()
		}
	}
	out := make([]byte, n)
	off := 0
	for i, t := range ts {
		if want != nil && !want(i) {
			continue
		}
		if err := t.Device().Read(t, out[off:off+t.Bytes()]); err != nil {
			return nil, err
		}
		off += t.Bytes()
	}
	return out, nil
}

func writeTensors(ts []*engine.Tensor, b []byte, want func(i int) bool) error {
	off := 0
	for i, t := range ts {
		if want != nil && !want(i) {
			continue
		}
		if off+t.Bytes() > len(b) {
			return fmt.Errorf("distributed: a short reply (%d bytes)", len(b))
		}
		if err := t.Device().Write(t, b[off:off+t.Bytes()]); err != nil {
			return err
		}
		off += t.Bytes()
	}
	return nil
}

// packet is a collective's payload: the call's signature, then data.
func packet(sig string, data []byte) []byte {
	b := make([]byte, 4+len(sig)+len(data))
	binary.LittleEndian.PutUint32(b, uint32(len(sig)))
	copy(b[4:], sig)
	copy(b[4+len(sig):], data)
	return b
}

// unpack checks every rank's signature against rank 0's and returns the
// data parts.
func (c *tcpComm) unpack(in [][]byte) ([][]byte, error) {
	data := make([][]byte, len(in))
	var sig0 string
	for r, b := range in {
		if len(b) < 4 || int(binary.LittleEndian.Uint32(b)) > len(b)-4 {
			return nil, fmt.Errorf("%s sent a malformed message", c.g.Describe(r))
		}
		n := int(binary.LittleEndian.Uint32(b))
		sig := string(b[4 : 4+n])
		if r == 0 {
			sig0 = sig
		} else if sig != sig0 {
			return nil, fmt.Errorf("%s called %q while rank 0 called %q (every rank must pass tensors of the same shapes and dtypes)", c.g.Describe(r), sig, sig0)
		}
		data[r] = b[4+n:]
	}
	return data, nil
}

func checkFloat(what string, ts ...*engine.Tensor) error {
	for _, t := range ts {
		if t == nil {
			return fmt.Errorf("distributed: %s: nil tensor", what)
		}
		if !t.DType().IsFloat() {
			return fmt.Errorf("distributed: %s: tensor %v: want a floating dtype", what, t)
		}
	}
	return nil
}

// reduce sums (or averages) the ranks' data in rank order, tensor by
// tensor, in f32, and encodes the result in each tensor's dtype.
func reduce(op ReduceOp, ts []*engine.Tensor, data [][]byte) []byte {
	out := make([]byte, 0, len(data[0]))
	off := 0
	for _, t := range ts {
		n := t.Bytes()
		acc := engine.DecodeFloat32(t.DType(), data[0][off:off+n])
		for _, d := range data[1:] {
			for i, v := range engine.DecodeFloat32(t.DType(), d[off:off+n]) {
				acc[i] += v
			}
		}
		if op == Avg {
			k := float32(len(data))
			for i := range acc {
				acc[i] /= k
			}
		}
		out = append(out, engine.EncodeFloat32(t.DType(), acc)...)
		off += n
	}
	return out
}

func (c *tcpComm) AllReduce(op ReduceOp, ts ...*engine.Tensor) error {
	return c.StartAllReduce(op, ts...).Wait()
}

func (c *tcpComm) StartAllReduce(op ReduceOp, ts ...*engine.Tensor) Pending {
	if err := checkFloat("all-reduce", ts...); err != nil {
		return donePending{err}
	}
	b, err := readTensors(ts, nil)
	if err != nil {
		return donePending{err}
	}
	ts = append([]*engine.Tensor(nil), ts...) // the caller may reuse its slice before Wait
	pk := packet(describeTensors("all-reduce "+op.String(), nil, ts...), b)
	return c.start(func() ([]byte, error) {
		return c.g.round(collAllReduce, pk, func(in [][]byte) ([][]byte, error) {
			data, err := c.unpack(in)
			if err != nil {
				return nil, err
			}
			return repeat(reduce(op, ts, data), len(in)), nil
		})
	}, func(res []byte) error { return writeTensors(ts, res, nil) })
}

func checkRoots(what string, n, size int, roots []int) error {
	if len(roots) != n {
		return fmt.Errorf("distributed: %s: %d roots for %d tensors", what, len(roots), n)
	}
	for _, r := range roots {
		if r < 0 || r >= size {
			return fmt.Errorf("distributed: %s: root %d is not a rank of %d", what, r, size)
		}
	}
	return nil
}

func (c *tcpComm) Reduce(op ReduceOp, roots []int, ts ...*engine.Tensor) error {
	return c.StartReduce(op, roots, ts...).Wait()
}

func (c *tcpComm) StartReduce(op ReduceOp, roots []int, ts ...*engine.Tensor) Pending {
	if err := checkFloat("reduce", ts...); err != nil {
		return donePending{err}
	}
	if err := checkRoots("reduce", len(ts), c.Size(), roots); err != nil {
		return donePending{err}
	}
	b, err := readTensors(ts, nil)
	if err != nil {
		return donePending{err}
	}
	// The caller may reuse its slices before Wait.
	ts, roots = append([]*engine.Tensor(nil), ts...), append([]int(nil), roots...)
	mine := func(i int) bool { return roots[i] == c.Rank() }
	pk := packet(describeTensors("reduce "+op.String(), roots, ts...), b)
	return c.start(func() ([]byte, error) {
		return c.g.round(collReduce, pk, func(in [][]byte) ([][]byte, error) {
			data, err := c.unpack(in)
			if err != nil {
				return nil, err
			}
			all := reduce(op, ts, data)
			out := make([][]byte, len(in))
			off := 0
			for i, t := range ts {
				out[roots[i]] = append(out[roots[i]], all[off:off+t.Bytes()]...)
				off += t.Bytes()
			}
			return out, nil
		})
	}, func(res []byte) error { return writeTensors(ts, res, mine) })
}

func (c *tcpComm) Broadcast(roots []int, ts ...*engine.Tensor) error {
	c.drain()
	if err := checkRoots("broadcast", len(ts), c.Size(), roots); err != nil {
		return err
	}
	mine := func(i int) bool { return roots[i] == c.Rank() }
	b, err := readTensors(ts, mine)
	if err != nil {
		return err
	}
	res, err := c.g.round(collBroadcast, packet(describeTensors("broadcast", roots, ts...), b), func(in [][]byte) ([][]byte, error) {
		data, err := c.unpack(in)
		if err != nil {
			return nil, err
		}
		offs := make([]int, len(in))
		out := make([][]byte, len(in))
		for i, t := range ts {
			src := roots[i]
			part := data[src][offs[src] : offs[src]+t.Bytes()]
			offs[src] += t.Bytes()
			for r := range out {
				if r != src {
					out[r] = append(out[r], part...)
				}
			}
		}
		return out, nil
	})
	if err != nil {
		return err
	}
	return writeTensors(ts, res, func(i int) bool { return !mine(i) })
}

func (c *tcpComm) ReduceScatter(op ReduceOp, out, in *engine.Tensor) error {
	c.drain()
	if err := checkFloat("reduce-scatter", out, in); err != nil {
		return err
	}
	if in.DType() != out.DType() || in.Numel() != out.Numel()*c.Size() {
		return fmt.Errorf("distributed: reduce-scatter: in %v must hold %d blocks of out %v", in, c.Size(), out)
	}
	b, err := readTensors([]*engine.Tensor{in}, nil)
	if err != nil {
		return err
	}
	res, err := c.g.round(collReduceScatter, packet(describeTensors("reduce-scatter "+op.String(), nil, out, in), b), func(pk [][]byte) ([][]byte, error) {
		data, err := c.unpack(pk)
		if err != nil {
			return nil, err
		}
		all := reduce(op, []*engine.Tensor{in}, data)
		blk := out.Bytes()
		res := make([][]byte, len(pk))
		for r := range res {
			res[r] = all[r*blk : (r+1)*blk]
		}
		return res, nil
	})
	if err != nil {
		return err
	}
	return writeTensors([]*engine.Tensor{out}, res, nil)
}

func (c *tcpComm) AllGather(out, in *engine.Tensor) error {
	c.drain()
	if in == nil || out == nil {
		return errors.New("distributed: all-gather: nil tensor")
	}
	if in.DType() != out.DType() || out.Numel() != in.Numel()*c.Size() {
		return fmt.Errorf("distributed: all-gather: out %v must hold %d blocks of in %v", out, c.Size(), in)
	}
	b, err := readTensors([]*engine.Tensor{in}, nil)
	if err != nil {
		return err
	}
	res, err := c.g.round(collAllGather, packet(describeTensors("all-gather", nil, out, in), b), func(pk [][]byte) ([][]byte, error) {
		data, err := c.unpack(pk)
		if err != nil {
			return nil, err
		}
		var all []byte
		for _, d := range data {
			all = append(all, d...)
		}
		return repeat(all, len(pk)), nil
	})
	if err != nil {
		return err
	}
	return writeTensors([]*engine.Tensor{out}, res, nil)
}
