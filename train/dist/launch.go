package dist

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// LaunchOptions tune Launch.
type LaunchOptions struct {
	// Grace is how long the other ranks may take to stop by themselves
	// after one failed (they notice through the liveness channel) before
	// they get SIGTERM, and SIGKILL 5 s later. Default 30 s.
	Grace time.Duration
	// Logf receives the launcher's messages; nil discards them.
	Logf func(format string, args ...any)
}

// Launch runs one child process per local rank (cmds[i] is rank i, built
// by the caller with the rank's environment) and waits for all of them.
// Each child gets its own process group, so a Ctrl-C at the terminal
// reaches the launcher alone, which forwards SIGINT and SIGTERM to every
// child exactly once per signal; cancelling ctx sends SIGTERM. Children get
// SIGTERM if the launcher dies. When a child fails (a non-zero exit or a
// signal) the others get o.Grace to stop, then SIGTERM, then SIGKILL.
// Launch returns nil when every child exited with status 0, else an error
// naming the first rank that failed.
func Launch(ctx context.Context, cmds []*exec.Cmd, o LaunchOptions) error {
	if o.Grace <= 0 {
		o.Grace = 30 * time.Second
	}
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	type exit struct {
		rank int
		err  error
		at   time.Time
	}
	exits := make(chan exit, len(cmds))
	running := map[int]*exec.Cmd{}
	var mu sync.Mutex
	send := func(sig syscall.Signal) {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range running {
			syscall.Kill(c.Process.Pid, sig)
		}
	}
	for i, c := range cmds {
		if c.SysProcAttr == nil {
			c.SysProcAttr = &syscall.SysProcAttr{}
		}
		c.SysProcAttr.Setpgid = true
		c.SysProcAttr.Pdeathsig = syscall.SIGTERM
		if err := c.Start(); err != nil {
			send(syscall.SIGKILL)
			mu.Lock()
			for r, c := range running {
				c.Wait()
				delete(running, r)
			}
			mu.Unlock()
			return fmt.Errorf("start rank %d (%s): %w", i, c.Path, err)
		}
		mu.Lock()
		running[i] = c
		mu.Unlock()
		go func(rank int, c *exec.Cmd) {
			err := c.Wait()
			exits <- exit{rank, err, time.Now()}
		}(i, c)
	}

	var first *exit
	var failed []string
	var term, kill <-chan time.Time
	done := ctx.Done()
	for left := len(cmds); left > 0; {
		select {
		case s := <-sigs:
			logf("forwarding %v to %d rank(s)", s, len(running))
			send(s.(syscall.Signal))
		case <-done:
			done = nil
			send(syscall.SIGTERM)
		case e := <-exits:
			left--
			mu.Lock()
			pid := running[e.rank].Process.Pid
			delete(running, e.rank)
			mu.Unlock()
			if e.err == nil {
				continue
			}
			failed = append(failed, fmt.Sprintf("rank %d (pid %d) %s", e.rank, pid, exitText(e.err)))
			if first == nil {
				first = &e
				if left > 0 {
					logf("rank %d (pid %d) %s; waiting up to %s for the other ranks to stop", e.rank, pid, exitText(e.err), o.Grace)
					term = time.After(o.Grace)
				}
			}
		case <-term:
			term = nil
			logf("stopping the remaining rank(s) with SIGTERM")
			send(syscall.SIGTERM)
			kill = time.After(5 * time.Second)
		case <-kill:
			kill = nil
			logf("killing the remaining rank(s)")
			send(syscall.SIGKILL)
		}
	}
	if first == nil {
		return nil
	}
	msg := failed[0]
	if len(failed) > 1 {
		msg += "; then " + strings.Join(failed[1:], ", ")
	}
	return fmt.Errorf("%s (the first failure; see its output above)", msg)
}

// exitText describes how a child ended: "exited with status 3", "was
// killed by signal killed".
func exitText(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "was killed by signal " + ws.Signal().String()
		}
		return fmt.Sprintf("exited with status %d", ee.ExitCode())
	}
	return err.Error()
}

// FreePort returns a TCP port that was free on the loopback interface a
// moment ago, for a one-node job's rendezvous.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// LineWriter writes complete lines to W, each with Prefix in front, one
// Write per line (so the lines of several ranks sharing a terminal do not
// interleave mid-line). Flush writes an unfinished last line.
type LineWriter struct {
	Prefix string
	W      io.Writer
	mu     sync.Mutex
	buf    []byte
}

func (l *LineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		line := append([]byte(l.Prefix), l.buf[:i+1]...)
		l.buf = l.buf[i+1:]
		if _, err := l.W.Write(line); err != nil {
			return len(p), err
		}
	}
	return len(p), nil
}

// Flush writes what is left of an unfinished line.
func (l *LineWriter) Flush() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) == 0 {
		return nil
	}
	_, err := l.W.Write(append(append([]byte(l.Prefix), l.buf...), '\n'))
	l.buf = nil
	return err
}

// ChildEnv returns base (KEY=VALUE entries) with the variables of a
// torchrun-style rank set: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT and PARALLAX_DIST_JOB (which FromEnv prefers to
// SLURM's, should the launcher run inside a SLURM job step).
func ChildEnv(base []string, rank, world int, addr string, port int, job string) []string {
	drop := map[string]bool{"RANK": true, "LOCAL_RANK": true, "WORLD_SIZE": true, "LOCAL_WORLD_SIZE": true,
		"MASTER_ADDR": true, "MASTER_PORT": true, "PARALLAX_DIST_JOB": true}
	var out []string
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if drop[k] {
			continue
		}
		out = append(out, kv)
	}
	add := map[string]string{
		"RANK": fmt.Sprint(rank), "LOCAL_RANK": fmt.Sprint(rank), "WORLD_SIZE": fmt.Sprint(world),
		"LOCAL_WORLD_SIZE": fmt.Sprint(world), "MASTER_ADDR": addr, "MASTER_PORT": fmt.Sprint(port),
		"PARALLAX_DIST_JOB": job,
	}
	keys := make([]string, 0, len(add))
	for k := range add {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out = append(out, k+"="+add[k])
	}
	return out
}
