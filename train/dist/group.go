package dist

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Options tune a Group. Zero fields take the defaults; OptionsFromEnv reads
// them from PARALLAX_DIST_* variables.
type Options struct {
	// Timeout bounds the rendezvous: rank 0 waits this long for every rank
	// to join, the others this long to reach rank 0. Default 5 minutes.
	Timeout time.Duration
	// HeartbeatTimeout is how long a rank may stay silent (no heartbeat, no
	// data) before the job fails naming it: a killed process is noticed at
	// once (its connection closes), a frozen one after this. Default 30 s.
	HeartbeatTimeout time.Duration
	// HangTimeout is how long a rank may stay at one progress mark (see
	// Progress) while another rank is ahead, or every rank at the same mark,
	// before the job fails naming it. Default 10 minutes; negative disables.
	HangTimeout time.Duration
	// Listener, on rank 0, is used instead of listening on the port of
	// Env.Addr (tests pass one on port 0). The group closes it.
	Listener net.Listener
	// Logf receives warnings; nil discards them.
	Logf func(format string, args ...any)
}

// Defaults of Options.
const (
	DefaultTimeout          = 5 * time.Minute
	DefaultHeartbeatTimeout = 30 * time.Second
	DefaultHangTimeout      = 10 * time.Minute
)

// OptionsFromEnv reads PARALLAX_DIST_TIMEOUT, PARALLAX_DIST_HEARTBEAT_TIMEOUT
// and PARALLAX_DIST_HANG_TIMEOUT: a Go duration ("90s", "10m") or a number
// of seconds.
func OptionsFromEnv(getenv func(string) string) (Options, error) {
	var o Options
	for _, v := range []struct {
		name string
		dst  *time.Duration
	}{
		{"PARALLAX_DIST_TIMEOUT", &o.Timeout},
		{"PARALLAX_DIST_HEARTBEAT_TIMEOUT", &o.HeartbeatTimeout},
		{"PARALLAX_DIST_HANG_TIMEOUT", &o.HangTimeout},
	} {
		s := strings.TrimSpace(getenv(v.name))
		if s == "" {
			continue
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			f, ferr := strconv.ParseFloat(s, 64)
			if ferr != nil || math.IsNaN(f) || math.IsInf(f, 0) {
				return o, fmt.Errorf("distributed: %s=%q is neither a duration (90s, 10m) nor a number of seconds", v.name, s)
			}
			d = time.Duration(f * float64(time.Second))
		}
		*v.dst = d
	}
	return o, nil
}

func (o *Options) fill() {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.HeartbeatTimeout <= 0 {
		o.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	if o.HangTimeout == 0 {
		o.HangTimeout = DefaultHangTimeout
	}
}

// RankError is the failure of a job as seen by one rank: which rank failed
// (-1 when none can be named) and how.
type RankError struct {
	Rank int
	Desc string // "rank 1 (pid 4242 on node7)"
	Msg  string // "closed its connection: the process exited or was killed"
}

func (e *RankError) Error() string {
	if e.Desc == "" {
		return "distributed: " + e.Msg
	}
	return "distributed: " + e.Desc + " " + e.Msg
}

// Group is one rank's membership of a job: the control connections, the
// liveness watchdog and the host-level collectives (Barrier,
// AllReduceFloat64, BroadcastBytes, GatherBytes). Collectives are called by
// every rank in the same order, one at a time per rank.
type Group struct {
	env   Env
	opts  Options
	self  string  // this rank's description
	links []*link // rank 0: indexed by rank (links[0] nil); others: links[0] is rank 0
	descs []string

	collMu sync.Mutex // one collective at a time
	seq    uint64

	failMu  sync.Mutex
	failErr error
	done    chan struct{} // closed when the group fails or closes
	closed  bool
	hooks   []func(error)
	ticks   []func() error

	pmu    sync.Mutex
	prog   int64
	touch  int64
	label  string
	progAt time.Time

	stop chan struct{}
	wg   sync.WaitGroup
}

type hello struct {
	Proto string `json:"proto"`
	Rank  int    `json:"rank"`
	World int    `json:"world"`
	Job   string `json:"job"`
	Host  string `json:"host"`
	PID   int    `json:"pid"`
}

type welcome struct {
	Ranks []string `json:"ranks"` // each rank's description
}

type abortMsg struct {
	Rank int    `json:"rank"`
	Desc string `json:"desc"`
	Msg  string `json:"msg"`
}

func describe(rank, pid int, host string) string {
	return fmt.Sprintf("rank %d (pid %d on %s)", rank, pid, host)
}

// Join takes part in the rendezvous of env's job and returns this rank's
// Group once every rank has joined. Rank 0 listens on env.Addr's port (on
// every interface); the others connect to env.Addr, retrying until
// opts.Timeout.
func Join(ctx context.Context, env Env, opts Options) (*Group, error) {
	opts.fill()
	if env.World < 1 || env.Rank < 0 || env.Rank >= env.World {
		return nil, fmt.Errorf("distributed: rank %d of %d", env.Rank, env.World)
	}
	host, _ := os.Hostname()
	g := &Group{env: env, opts: opts, self: describe(env.Rank, os.Getpid(), host),
		done: make(chan struct{}), stop: make(chan struct{}), progAt: time.Now()}
	me := hello{Proto: protocol, Rank: env.Rank, World: env.World, Job: env.Job, Host: host, PID: os.Getpid()}
	var err error
	if env.Rank == 0 {
		err = g.serve(ctx, me)
	} else {
		err = g.dial(ctx, me)
	}
	if err != nil {
		return nil, err
	}
	for _, l := range g.links {
		if l != nil {
			g.wg.Add(1)
			go g.read(l)
		}
	}
	g.wg.Add(1)
	go g.watch()
	return g, nil
}

// serve is rank 0's side of the rendezvous.
func (g *Group) serve(ctx context.Context, me hello) error {
	ln := g.opts.Listener
	if ln == nil {
		_, port, err := net.SplitHostPort(g.env.Addr)
		if err != nil {
			return fmt.Errorf("distributed: rendezvous address %q: %w", g.env.Addr, err)
		}
		if ln, err = net.Listen("tcp", net.JoinHostPort("", port)); err != nil {
			return fmt.Errorf("distributed: rank 0 cannot listen on port %s: %w (another job on this port? set MASTER_PORT)", port, err)
		}
	}
	defer ln.Close()
	g.links = make([]*link, g.env.World)
	g.descs = make([]string, g.env.World)
	g.descs[0] = g.self

	type joined struct {
		conn net.Conn
		h    hello
		err  error
	}
	arrivals := make(chan joined)
	quit := make(chan struct{})
	defer close(quit)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				c.SetDeadline(time.Now().Add(10 * time.Second))
				typ, b, err := readFrame(c, maxHello)
				var h hello
				if err == nil && typ != frameHello {
					err = fmt.Errorf("the first frame is not a hello")
				}
				if err == nil {
					err = json.Unmarshal(b, &h)
				}
				if err == nil && h.Proto != protocol {
					err = fmt.Errorf("protocol %q, want %q", h.Proto, protocol)
				}
				select {
				case arrivals <- joined{c, h, err}:
				case <-quit:
					c.Close()
				}
			}()
		}
	}()
	timer := time.NewTimer(g.opts.Timeout)
	defer timer.Stop()
	var refused []string
	closeAll := func() {
		for _, l := range g.links {
			if l != nil {
				l.conn.Close()
			}
		}
	}
	for n := 1; n < g.env.World; {
		select {
		case <-ctx.Done():
			closeAll()
			return fmt.Errorf("distributed: rendezvous: %w", ctx.Err())
		case <-timer.C:
			closeAll()
			var missing []string
			for r := 1; r < g.env.World; r++ {
				if g.links[r] == nil {
					missing = append(missing, strconv.Itoa(r))
				}
			}
			msg := fmt.Sprintf("distributed: rendezvous timed out after %s: rank %s of %d did not join rank 0 at port %s",
				g.opts.Timeout, strings.Join(missing, ", "), g.env.World, portOf(ln.Addr()))
			if len(refused) > 0 {
				msg += "; refused: " + strings.Join(refused, "; ")
			}
			return errors.New(msg + " (were they started, with the same MASTER_ADDR/MASTER_PORT and WORLD_SIZE?)")
		case j := <-arrivals:
			refuse := func(why string) {
				refused = append(refused, why)
				j.conn.SetDeadline(time.Now().Add(2 * time.Second))
				writeFrame(j.conn, frameRefuse, []byte(why))
				j.conn.Close()
				if g.opts.Logf != nil {
					g.opts.Logf("distributed: refused a process: %s", why)
				}
			}
			h := j.h
			switch {
			case j.err != nil:
				refuse(fmt.Sprintf("a connection from %s: %v", j.conn.RemoteAddr(), j.err))
			case h.World != g.env.World:
				refuse(fmt.Sprintf("%s has WORLD_SIZE %d, rank 0 has %d", describe(h.Rank, h.PID, h.Host), h.World, g.env.World))
			case h.Rank <= 0 || h.Rank >= g.env.World:
				refuse(fmt.Sprintf("a process (pid %d on %s) claims rank %d of %d", h.PID, h.Host, h.Rank, g.env.World))
			case h.Job != g.env.Job && h.Job != "" && g.env.Job != "":
				refuse(fmt.Sprintf("%s belongs to job %q, rank 0 to %q", describe(h.Rank, h.PID, h.Host), h.Job, g.env.Job))
			case g.links[h.Rank] != nil:
				refuse(fmt.Sprintf("%s claims rank %d, which %s already holds", describe(h.Rank, h.PID, h.Host), h.Rank, g.links[h.Rank].desc))
			default:
				d := describe(h.Rank, h.PID, h.Host)
				g.links[h.Rank] = newLink(h.Rank, d, j.conn)
				g.descs[h.Rank] = d
				n++
			}
		}
	}
	w, _ := json.Marshal(welcome{Ranks: g.descs})
	for _, l := range g.links[1:] {
		l.conn.SetDeadline(time.Now().Add(10 * time.Second))
		if err := writeFrame(l.conn, frameWelcome, w); err != nil {
			closeAll()
			return fmt.Errorf("distributed: rendezvous: welcoming %s: %w", l.desc, err)
		}
		l.conn.SetDeadline(time.Time{})
	}
	return nil
}

func portOf(a net.Addr) string {
	if t, ok := a.(*net.TCPAddr); ok {
		return strconv.Itoa(t.Port)
	}
	return a.String()
}

// dial is the rendezvous of the other ranks.
func (g *Group) dial(ctx context.Context, me hello) error {
	deadline := time.Now().Add(g.opts.Timeout)
	hb, _ := json.Marshal(me)
	wait := 50 * time.Millisecond
	var lastErr error
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("distributed: rank %d could not join rank 0 at %s within %s: %v (is rank 0 running, and are MASTER_ADDR and MASTER_PORT right?)",
				g.env.Rank, g.env.Addr, g.opts.Timeout, lastErr)
		}
		d := net.Dialer{Timeout: min(5*time.Second, left)}
		c, err := d.DialContext(ctx, "tcp", g.env.Addr)
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("distributed: rendezvous: %w", ctx.Err())
			}
			lastErr = err
			select {
			case <-ctx.Done():
				return fmt.Errorf("distributed: rendezvous: %w", ctx.Err())
			case <-time.After(min(wait, max(time.Until(deadline), 0))):
			}
			wait = min(2*wait, time.Second)
			continue
		}
		// Rank 0 answers once every rank has joined.
		c.SetDeadline(deadline)
		stopWatch := context.AfterFunc(ctx, func() { c.Close() })
		err = writeFrame(c, frameHello, hb)
		var typ byte
		var b []byte
		if err == nil {
			typ, b, err = readFrame(c, maxHello)
		}
		stopWatch()
		if ctx.Err() != nil {
			c.Close()
			return fmt.Errorf("distributed: rendezvous: %w", ctx.Err())
		}
		if err != nil {
			c.Close()
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				return fmt.Errorf("distributed: rank %d reached rank 0 at %s, but not every rank joined within %s", g.env.Rank, g.env.Addr, g.opts.Timeout)
			}
			return fmt.Errorf("distributed: rendezvous at %s: rank 0 closed the connection (%v): it failed or timed out", g.env.Addr, err)
		}
		switch typ {
		case frameRefuse:
			c.Close()
			return fmt.Errorf("distributed: rank 0 at %s refused rank %d: %s", g.env.Addr, g.env.Rank, b)
		case frameWelcome:
			var w welcome
			if err := json.Unmarshal(b, &w); err != nil || len(w.Ranks) != g.env.World {
				c.Close()
				return fmt.Errorf("distributed: rendezvous at %s: a malformed welcome", g.env.Addr)
			}
			c.SetDeadline(time.Time{})
			g.descs = w.Ranks
			g.links = []*link{newLink(0, w.Ranks[0], c)}
			return nil
		default:
			c.Close()
			return fmt.Errorf("distributed: rendezvous at %s: unexpected frame %d", g.env.Addr, typ)
		}
	}
}

// Rank is this process's rank.
func (g *Group) Rank() int { return g.env.Rank }

// Size is the number of ranks.
func (g *Group) Size() int { return g.env.World }

// Env is the job description the group was joined with.
func (g *Group) Env() Env { return g.env }

// Describe names a rank for messages: "rank 1 (pid 4242 on node7)".
func (g *Group) Describe(rank int) string {
	if rank >= 0 && rank < len(g.descs) && g.descs[rank] != "" {
		return g.descs[rank]
	}
	return "rank " + strconv.Itoa(rank)
}

// Err returns why the group failed, or nil.
func (g *Group) Err() error {
	g.failMu.Lock()
	defer g.failMu.Unlock()
	return g.failErr
}

// Done is closed when the group fails or is closed.
func (g *Group) Done() <-chan struct{} { return g.done }

// OnFail registers f to be called (on its own goroutine) with the error
// when the group fails; at once if it already has.
func (g *Group) OnFail(f func(error)) {
	g.failMu.Lock()
	defer g.failMu.Unlock()
	if g.failErr != nil {
		go f(g.failErr)
		return
	}
	g.hooks = append(g.hooks, f)
}

// onTick registers f to run at every heartbeat; an error it returns fails
// the group as this rank's failure.
func (g *Group) onTick(f func() error) {
	g.failMu.Lock()
	defer g.failMu.Unlock()
	g.ticks = append(g.ticks, f)
}

// Progress records this rank's progress: a mark that grows as the rank
// works (training uses three per step) and a label for messages ("step 12:
// gradient reduction"). Rank 0 compares the ranks' marks to find a hung one.
func (g *Group) Progress(mark int64, label string) {
	g.pmu.Lock()
	defer g.pmu.Unlock()
	if mark != g.prog {
		g.progAt = time.Now()
	}
	g.prog, g.label = mark, label
}

// Touch tells the hang detector that this rank is working without a new
// mark (a long evaluation, say): its time at the current mark restarts.
func (g *Group) Touch() {
	g.pmu.Lock()
	defer g.pmu.Unlock()
	g.touch++
	g.progAt = time.Now()
}

// fail records the first failure, tells the peers when notify is set
// (rank 0 tells every rank; another rank tells rank 0, which tells the
// rest), closes the connections and runs the OnFail hooks.
func (g *Group) fail(err error, notify bool) {
	g.failMu.Lock()
	if g.failErr != nil || g.closed {
		g.failMu.Unlock()
		return
	}
	g.failErr = err
	close(g.done)
	hooks := g.hooks
	g.failMu.Unlock()
	if notify {
		m := abortMsg{Rank: -1, Msg: err.Error()}
		var re *RankError
		if errors.As(err, &re) {
			m = abortMsg{Rank: re.Rank, Desc: re.Desc, Msg: re.Msg}
		}
		b, _ := json.Marshal(m)
		for _, l := range g.links {
			if l != nil && !l.left.Load() {
				l.conn.SetWriteDeadline(time.Now().Add(2 * time.Second))
				l.send(frameAbort, b)
			}
		}
	}
	for _, l := range g.links {
		if l != nil {
			l.conn.Close()
		}
	}
	for _, h := range hooks {
		go h(err)
	}
}

// Close leaves the job. With err == nil the peers are told this rank
// finished; with an error (this rank's failure) the job fails with it,
// naming this rank. Close after a failure only releases resources.
func (g *Group) Close(err error) error {
	if err != nil {
		// A no-op when the group failed first (err is then its consequence).
		g.fail(&RankError{Rank: g.env.Rank, Desc: g.self, Msg: "failed: " + err.Error()}, true)
	}
	g.failMu.Lock()
	already := g.closed || g.failErr != nil
	g.closed = true
	if !already {
		close(g.done)
	}
	g.failMu.Unlock()
	if !already {
		for _, l := range g.links {
			if l != nil && !l.left.Load() {
				l.conn.SetWriteDeadline(time.Now().Add(2 * time.Second))
				l.send(frameBye)
			}
		}
		for _, l := range g.links {
			if l != nil {
				l.conn.Close()
			}
		}
	}
	select {
	case <-g.stop:
	default:
		close(g.stop)
	}
	g.wg.Wait()
	return nil
}

// read handles one connection's incoming frames until it closes.
func (g *Group) read(l *link) {
	defer g.wg.Done()
	defer close(l.data)
	r := seenReader{l}
	for {
		typ, b, err := readFrame(r, maxFrame)
		if err != nil {
			if l.left.Load() || g.Err() != nil || g.isClosed() {
				return
			}
			msg := "closed its connection: the process exited or was killed"
			// A peer that dies with unread data resets the connection.
			if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
				msg = fmt.Sprintf("is unreachable: %v (the process died or the network failed)", err)
			}
			g.fail(&RankError{Rank: l.rank, Desc: l.desc, Msg: msg}, g.env.Rank == 0)
			return
		}
		switch typ {
		case frameHeartbeat:
			if mark, touch, label, ok := decodeProgress(b); ok {
				l.pmu.Lock()
				if mark != l.prog || touch != l.touch {
					l.progAt = time.Now()
				}
				l.prog, l.touch, l.label = mark, touch, label
				l.pmu.Unlock()
			}
		case frameData:
			select {
			case l.data <- b:
			case <-g.done:
				return
			}
		case frameAbort:
			var m abortMsg
			if json.Unmarshal(b, &m) != nil {
				m = abortMsg{Rank: l.rank, Desc: l.desc, Msg: "aborted the job"}
			}
			// Rank 0 relays a rank's failure to the others.
			g.fail(&RankError{Rank: m.Rank, Desc: m.Desc, Msg: m.Msg}, g.env.Rank == 0)
			return
		case frameBye:
			l.left.Store(true)
		}
	}
}

func (g *Group) isClosed() bool {
	g.failMu.Lock()
	defer g.failMu.Unlock()
	return g.closed
}

// watch sends heartbeats and checks the peers' liveness and progress.
func (g *Group) watch() {
	defer g.wg.Done()
	every := min(max(g.opts.HeartbeatTimeout/5, 20*time.Millisecond), 2*time.Second)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-g.done:
			return
		case <-tick.C:
		}
		g.pmu.Lock()
		hb := encodeProgress(g.prog, g.touch, g.label)
		g.pmu.Unlock()
		now := time.Now()
		for _, l := range g.links {
			if l == nil || l.left.Load() {
				continue
			}
			// A write that times out means the peer stopped reading; other
			// write errors (a closed connection) are the reader's to report.
			if _, err := l.trySend(g.opts.HeartbeatTimeout, frameHeartbeat, hb); err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() && g.Err() == nil && !g.isClosed() {
					g.fail(&RankError{Rank: l.rank, Desc: l.desc, Msg: "stopped reading its connection: the process is stopped or hung"}, g.env.Rank == 0)
					return
				}
			}
			if silent := now.Sub(time.Unix(0, l.lastSeen.Load())); silent > g.opts.HeartbeatTimeout {
				g.fail(&RankError{Rank: l.rank, Desc: l.desc, Msg: fmt.Sprintf("sent nothing for %s (no heartbeat): the process is stopped, hung in the system, or unreachable",
					silent.Round(time.Millisecond))}, g.env.Rank == 0)
				return
			}
		}
		if g.env.Rank == 0 && g.opts.HangTimeout > 0 {
			if err := g.checkProgress(now); err != nil {
				g.fail(err, true)
				return
			}
		}
		g.failMu.Lock()
		ticks := g.ticks
		g.failMu.Unlock()
		for _, f := range ticks {
			if err := f(); err != nil {
				g.fail(&RankError{Rank: g.env.Rank, Desc: g.self, Msg: "failed: " + err.Error()}, true)
				return
			}
		}
	}
}

type rankProgress struct {
	rank  int
	mark  int64
	label string
	at    time.Time
}

// checkProgress (rank 0) finds a rank that stays behind the others, or a
// job where no rank moves, for longer than HangTimeout. It starts once
// every rank has set a progress mark.
func (g *Group) checkProgress(now time.Time) error {
	ps := make([]rankProgress, g.env.World)
	g.pmu.Lock()
	ps[0] = rankProgress{0, g.prog, g.label, g.progAt}
	g.pmu.Unlock()
	for _, l := range g.links[1:] {
		l.pmu.Lock()
		ps[l.rank] = rankProgress{l.rank, l.prog, l.label, l.progAt}
		l.pmu.Unlock()
		if l.left.Load() {
			return nil // the job is ending
		}
	}
	for _, p := range ps {
		if p.mark <= 0 {
			return nil
		}
	}
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].mark < ps[j].mark })
	low, high := ps[0], ps[len(ps)-1]
	if low.mark < high.mark {
		if d := now.Sub(low.at); d > g.opts.HangTimeout {
			return &RankError{Rank: low.rank, Desc: g.Describe(low.rank), Msg: fmt.Sprintf(
				"is hung: it has been at %q for %s while %s reached %q (PARALLAX_DIST_HANG_TIMEOUT is %s)",
				low.label, d.Round(time.Second), g.Describe(high.rank), high.label, g.opts.HangTimeout)}
		}
		return nil
	}
	latest := ps[0].at
	for _, p := range ps {
		if p.at.After(latest) {
			latest = p.at
		}
	}
	if d := now.Sub(latest); d > g.opts.HangTimeout {
		return &RankError{Rank: -1, Msg: fmt.Sprintf("no rank has made progress for %s: every rank is at %q (a collective or a device is stuck; PARALLAX_DIST_HANG_TIMEOUT is %s)",
			d.Round(time.Second), low.label, g.opts.HangTimeout)}
	}
	return nil
}

// Collective kinds on the control connection.
const (
	collBarrier byte = 1 + iota
	collAllReduceF64
	collBroadcastBytes
	collGatherBytes
	collAllReduce
	collReduce
	collBroadcast
	collReduceScatter
	collAllGather
)

var collNames = map[byte]string{
	collBarrier: "barrier", collAllReduceF64: "host all-reduce", collBroadcastBytes: "host broadcast",
	collGatherBytes: "host gather", collAllReduce: "all-reduce", collReduce: "reduce", collBroadcast: "broadcast",
	collReduceScatter: "reduce-scatter", collAllGather: "all-gather",
}

// combineFunc runs on rank 0 with every rank's payload (in[r] from rank r)
// and returns each rank's reply.
type combineFunc func(in [][]byte) ([][]byte, error)

// round runs one collective through rank 0: every rank sends its payload,
// rank 0 combines them and answers each rank. A rank calling a different
// collective (or the same one with different sizes, which combine checks)
// fails the job with a message naming both.
func (g *Group) round(kind byte, payload []byte, combine combineFunc) ([]byte, error) {
	g.collMu.Lock()
	defer g.collMu.Unlock()
	if err := g.Err(); err != nil {
		return nil, err
	}
	if g.isClosed() {
		return nil, errors.New("distributed: the group is closed")
	}
	g.seq++
	var hdr [9]byte
	hdr[0] = kind
	binary.LittleEndian.PutUint64(hdr[1:], g.seq)
	name := collNames[kind]
	if g.env.World == 1 {
		out, err := combine([][]byte{payload})
		if err != nil {
			return nil, err
		}
		return out[0], nil
	}
	if g.env.Rank != 0 {
		l := g.links[0]
		if err := l.send(frameData, hdr[:], payload); err != nil {
			return nil, g.errOr(fmt.Errorf("distributed: %s: sending to rank 0: %w", name, err))
		}
		b, err := g.recv(l)
		if err != nil {
			return nil, err
		}
		if len(b) < 9 || b[0] != kind || binary.LittleEndian.Uint64(b[1:9]) != g.seq {
			err := fmt.Errorf("distributed: collective mismatch: rank %d is in %s #%d, rank 0 answered another collective", g.env.Rank, name, g.seq)
			g.fail(&RankError{Rank: g.env.Rank, Desc: g.self, Msg: "failed: " + err.Error()}, true)
			return nil, err
		}
		return b[9:], nil
	}
	in := make([][]byte, g.env.World)
	in[0] = payload
	for _, l := range g.links[1:] {
		b, err := g.recv(l)
		if err != nil {
			return nil, err
		}
		if len(b) < 9 || b[0] != kind || binary.LittleEndian.Uint64(b[1:9]) != g.seq {
			other, oseq := "a malformed message", uint64(0)
			if len(b) >= 9 {
				other, oseq = collNames[b[0]], binary.LittleEndian.Uint64(b[1:9])
			}
			err := &RankError{Rank: -1, Msg: fmt.Sprintf("collective mismatch: rank 0 is in %s #%d while %s sent %s #%d (the ranks must call the same collectives in the same order)",
				name, g.seq, l.desc, other, oseq)}
			g.fail(err, true)
			return nil, err
		}
		in[l.rank] = b[9:]
	}
	out, err := combine(in)
	if err != nil {
		re := &RankError{Rank: -1, Msg: fmt.Sprintf("%s #%d: %v", name, g.seq, err)}
		g.fail(re, true)
		return nil, re
	}
	for _, l := range g.links[1:] {
		if err := l.send(frameData, hdr[:], out[l.rank]); err != nil {
			return nil, g.errOr(fmt.Errorf("distributed: %s: answering %s: %w", name, l.desc, err))
		}
	}
	return out[0], nil
}

// recv waits for the next data frame from l, or the group's failure.
func (g *Group) recv(l *link) ([]byte, error) {
	select {
	case b, ok := <-l.data:
		if ok {
			return b, nil
		}
	case <-g.done:
	}
	if err := g.Err(); err != nil {
		return nil, err
	}
	if l.left.Load() {
		return nil, &RankError{Rank: l.rank, Desc: l.desc, Msg: "has left the job (it finished or stopped) while this rank still waits for it"}
	}
	return nil, errors.New("distributed: the group is closed")
}

// errOr prefers the group's failure (which names the rank) to a local
// connection error it caused.
func (g *Group) errOr(err error) error {
	if e := g.Err(); e != nil {
		return e
	}
	return err
}

// Barrier returns once every rank has called it.
func (g *Group) Barrier() error {
	_, err := g.round(collBarrier, nil, func(in [][]byte) ([][]byte, error) {
		return make([][]byte, len(in)), nil
	})
	return err
}

// AllReduceFloat64 replaces vals by their element-wise sums over the ranks
// (added in rank order, so every rank gets the same bits).
func (g *Group) AllReduceFloat64(vals []float64) error {
	b := make([]byte, 8*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(v))
	}
	out, err := g.round(collAllReduceF64, b, func(in [][]byte) ([][]byte, error) {
		sum := make([]float64, len(vals))
		for r, p := range in {
			if len(p) != len(b) {
				return nil, fmt.Errorf("%s sent %d values, rank 0 has %d", g.Describe(r), len(p)/8, len(vals))
			}
			for i := range sum {
				sum[i] += math.Float64frombits(binary.LittleEndian.Uint64(p[8*i:]))
			}
		}
		res := make([]byte, len(b))
		for i, v := range sum {
			binary.LittleEndian.PutUint64(res[8*i:], math.Float64bits(v))
		}
		return repeat(res, len(in)), nil
	})
	if err != nil {
		return err
	}
	for i := range vals {
		vals[i] = math.Float64frombits(binary.LittleEndian.Uint64(out[8*i:]))
	}
	return nil
}

// BroadcastBytes returns root's b on every rank.
func (g *Group) BroadcastBytes(root int, b []byte) ([]byte, error) {
	if root < 0 || root >= g.env.World {
		return nil, fmt.Errorf("distributed: broadcast root %d is not a rank of %d", root, g.env.World)
	}
	if g.env.Rank != root {
		b = nil
	}
	return g.round(collBroadcastBytes, b, func(in [][]byte) ([][]byte, error) {
		return repeat(in[root], len(in)), nil
	})
}

// GatherBytes returns every rank's b (indexed by rank) on rank 0, nil on
// the others.
func (g *Group) GatherBytes(b []byte) ([][]byte, error) {
	var all [][]byte
	_, err := g.round(collGatherBytes, b, func(in [][]byte) ([][]byte, error) {
		all = in
		return make([][]byte, len(in)), nil
	})
	if err != nil || g.env.Rank != 0 {
		return nil, err
	}
	return all, nil
}

func repeat(b []byte, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = b
	}
	return out
}
