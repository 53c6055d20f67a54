package dist

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/parallax-engine/parallax/internal/concurrent"
)

// TestMain lets the test binary act as a rank in a child process
// (PARALLAX_DIST_HELPER names the role).
func TestMain(m *testing.M) {
	if role := os.Getenv("PARALLAX_DIST_HELPER"); role != "" {
		os.Exit(helper(role))
	}
	os.Exit(m.Run())
}

func helper(role string) int {
	switch role {
	case "exit3":
		time.Sleep(100 * time.Millisecond)
		return 3
	case "sleep":
		time.Sleep(time.Minute)
		return 0
	case "ok":
		return 0
	case "join": // join the job of the environment and wait in barriers
		e, ok, err := FromEnv(os.Getenv)
		if err != nil || !ok {
			fmt.Fprintln(os.Stderr, "helper:", err, ok)
			return 2
		}
		g, err := Join(context.Background(), e, Options{Timeout: 10 * time.Second, HeartbeatTimeout: 2 * time.Second})
		if err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			return 2
		}
		for {
			if err := g.Barrier(); err != nil {
				fmt.Fprintln(os.Stderr, "helper:", err)
				return 1
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return 99
}

// listen returns a listener on a free loopback port and its address.
func listen(t *testing.T) (net.Listener, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln, ln.Addr().String()
}

// join forms an n-rank job of goroutines; the groups are closed at the
// end of the test.
func join(t *testing.T, n int, o Options) []*Group {
	t.Helper()
	ln, addr := listen(t)
	gs := make([]*Group, n)
	errs := concurrent.Each(n, func(r int) (err error) {
		ro := o
		if r == 0 {
			ro.Listener = ln
		}
		gs[r], err = Join(context.Background(), Env{Rank: r, World: n, Addr: addr, Job: "test"}, ro)
		return err
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	t.Cleanup(func() {
		for _, g := range gs {
			g.Close(nil)
		}
	})
	return gs
}

// each runs f on every rank concurrently and returns the errors by rank.
func each(gs []*Group, f func(r int, g *Group) error) []error {
	return concurrent.Each(len(gs), func(r int) error { return f(r, gs[r]) })
}

func TestHostCollectives(t *testing.T) {
	gs := join(t, 3, Options{})
	errs := each(gs, func(r int, g *Group) error {
		if err := g.Barrier(); err != nil {
			return err
		}
		v := []float64{float64(r), 1, 0.5}
		if err := g.AllReduceFloat64(v); err != nil {
			return err
		}
		if v[0] != 3 || v[1] != 3 || v[2] != 1.5 {
			return fmt.Errorf("all-reduce: %v", v)
		}
		b, err := g.BroadcastBytes(2, []byte(fmt.Sprintf("from %d", r)))
		if err != nil || string(b) != "from 2" {
			return fmt.Errorf("broadcast: %q %v", b, err)
		}
		all, err := g.GatherBytes([]byte{byte(r)})
		if err != nil {
			return err
		}
		if r == 0 && (len(all) != 3 || all[2][0] != 2) || r != 0 && all != nil {
			return fmt.Errorf("gather on rank %d: %v", r, all)
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	if d := gs[1].Describe(2); !strings.Contains(d, "rank 2 (pid") {
		t.Errorf("describe: %q", d)
	}
}

func TestRendezvousErrors(t *testing.T) {
	t.Run("missing rank", func(t *testing.T) {
		ln, addr := listen(t)
		start := time.Now()
		// Ranks 0 and 1 of 3; rank 2 never comes.
		errs := concurrent.Each(2, func(r int) error {
			o := Options{Timeout: 300 * time.Millisecond}
			if r == 0 {
				o.Listener = ln
			}
			_, err := Join(context.Background(), Env{Rank: r, World: 3, Addr: addr}, o)
			return err
		})
		if errs[0] == nil || !strings.Contains(errs[0].Error(), "rank 2 of 3 did not join") {
			t.Errorf("rank 0: %v", errs[0])
		}
		if errs[1] == nil || !strings.Contains(errs[1].Error(), "rank 0") {
			t.Errorf("rank 1: %v", errs[1])
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("the timeout took %s", d)
		}
	})
	t.Run("no rank 0", func(t *testing.T) {
		ln, addr := listen(t)
		ln.Close()
		_, err := Join(context.Background(), Env{Rank: 1, World: 2, Addr: addr}, Options{Timeout: 200 * time.Millisecond})
		if err == nil || !strings.Contains(err.Error(), "could not join rank 0 at "+addr) || !strings.Contains(err.Error(), "MASTER_ADDR") {
			t.Errorf("got %v", err)
		}
	})
	t.Run("refused", func(t *testing.T) {
		ln, addr := listen(t)
		o := Options{Timeout: 2 * time.Second}
		done := make(chan error, 1)
		go func() {
			o0 := o
			o0.Listener = ln
			g, err := Join(context.Background(), Env{Rank: 0, World: 2, Addr: addr, Job: "a"}, o0)
			if err == nil {
				g.Close(nil)
			}
			done <- err
		}()
		for _, tc := range []struct {
			env  Env
			want string
		}{
			{Env{Rank: 1, World: 3, Addr: addr, Job: "a"}, "WORLD_SIZE 3, rank 0 has 2"},
			{Env{Rank: 1, World: 2, Addr: addr, Job: "b"}, `belongs to job "b"`},
		} {
			_, err := Join(context.Background(), tc.env, o)
			if err == nil || !strings.Contains(err.Error(), "refused") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%+v: got %v, want a refusal with %q", tc.env, err, tc.want)
			}
		}
		// The right process still gets in.
		g, err := Join(context.Background(), Env{Rank: 1, World: 2, Addr: addr, Job: "a"}, o)
		if err != nil {
			t.Fatal(err)
		}
		g.Close(nil)
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

// waitErr waits for every group of gs to fail and returns the errors.
func waitErr(t *testing.T, within time.Duration, gs ...*Group) []error {
	t.Helper()
	var out []error
	for _, g := range gs {
		select {
		case <-g.Done():
			out = append(out, g.Err())
		case <-time.After(within):
			t.Fatalf("%s did not fail within %s", g.self, within)
		}
	}
	return out
}

func TestFailures(t *testing.T) {
	// Generous heartbeats, so that a loaded machine does not fail a healthy
	// rank; "no heartbeats" shortens them.
	fast := Options{HeartbeatTimeout: 3 * time.Second, HangTimeout: 500 * time.Millisecond}
	t.Run("a rank fails", func(t *testing.T) {
		gs := join(t, 3, fast)
		errs := each(gs, func(r int, g *Group) error {
			if r == 2 {
				time.Sleep(50 * time.Millisecond)
				g.Close(errors.New("boom at step 7"))
				return nil
			}
			return g.Barrier()
		})
		for r := range 2 {
			if errs[r] == nil || !strings.Contains(errs[r].Error(), "rank 2 (pid") || !strings.Contains(errs[r].Error(), "failed: boom at step 7") {
				t.Errorf("rank %d: %v", r, errs[r])
			}
		}
	})
	t.Run("a connection drops", func(t *testing.T) {
		gs := join(t, 3, fast)
		gs[1].links[0].conn.Close() // as if the process were killed
		for r, err := range waitErr(t, 3*time.Second, gs[0], gs[2]) {
			if !strings.Contains(err.Error(), "rank 1 (pid") || !strings.Contains(err.Error(), "exited or was killed") {
				t.Errorf("rank %d: %v", 2*r, err)
			}
		}
	})
	t.Run("rank 0 goes away", func(t *testing.T) {
		gs := join(t, 2, fast)
		for _, l := range gs[0].links[1:] {
			l.conn.Close()
		}
		err := waitErr(t, 3*time.Second, gs[1])[0]
		if !strings.Contains(err.Error(), "rank 0 (pid") {
			t.Errorf("rank 1: %v", err)
		}
	})
	t.Run("no heartbeats", func(t *testing.T) {
		gs := join(t, 2, Options{HeartbeatTimeout: 300 * time.Millisecond})
		close(gs[1].stop) // rank 1's watchdog stops: no more heartbeats
		start := time.Now()
		err := waitErr(t, 5*time.Second, gs[0])[0]
		if !strings.Contains(err.Error(), "rank 1 (pid") || !strings.Contains(err.Error(), "no heartbeat") {
			t.Errorf("rank 0: %v", err)
		}
		if d := time.Since(start); d < 250*time.Millisecond {
			t.Errorf("failed after %s, before the heartbeat timeout", d)
		}
	})
	t.Run("a rank hangs", func(t *testing.T) {
		gs := join(t, 3, fast)
		errs := each(gs, func(r int, g *Group) error {
			g.Progress(1, "step 1: forward and backward")
			if r == 1 {
				<-g.Done() // stuck in its step until the job fails
				return g.Err()
			}
			g.Progress(2, "step 1: gradient reduction")
			return g.Barrier()
		})
		for r, err := range errs {
			if err == nil || !strings.Contains(err.Error(), "rank 1 (pid") || !strings.Contains(err.Error(), `is hung: it has been at "step 1: forward and backward"`) {
				t.Errorf("rank %d: %v", r, err)
			}
		}
	})
	t.Run("a slow rank that works is not hung", func(t *testing.T) {
		gs := join(t, 2, Options{HeartbeatTimeout: 3 * time.Second, HangTimeout: time.Second})
		errs := each(gs, func(r int, g *Group) error {
			g.Progress(1, "step 1: forward and backward")
			if r == 1 {
				for range 30 { // 1.5 s behind rank 0, but busy
					time.Sleep(50 * time.Millisecond)
					g.Touch()
				}
			}
			g.Progress(2, "step 1: gradient reduction")
			return g.Barrier()
		})
		for r, err := range errs {
			if err != nil {
				t.Errorf("rank %d: %v", r, err)
			}
		}
	})
	t.Run("collective mismatch", func(t *testing.T) {
		gs := join(t, 2, fast)
		errs := each(gs, func(r int, g *Group) error {
			if r == 1 {
				_, err := g.BroadcastBytes(0, nil)
				return err
			}
			return g.Barrier()
		})
		for r, err := range errs {
			if err == nil || !strings.Contains(err.Error(), "collective mismatch") {
				t.Errorf("rank %d: %v", r, err)
			}
		}
	})
	t.Run("a rank finishes early", func(t *testing.T) {
		gs := join(t, 2, fast)
		gs[1].Close(nil)
		err := gs[0].Barrier()
		if err == nil || !strings.Contains(err.Error(), "has left the job") {
			t.Errorf("rank 0: %v", err)
		}
	})
}

// TestKilledProcess runs rank 1 as a separate process, kills it with
// SIGKILL, and checks that rank 0 stops with an error naming it.
func TestKilledProcess(t *testing.T) {
	ln, addr := listen(t)
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	var p int
	fmt.Sscan(port, &p)
	cmd.Env = append(ChildEnv(os.Environ(), 1, 2, "127.0.0.1", p, "kill-test"), "PARALLAX_DIST_HELPER=join")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	g, err := Join(context.Background(), Env{Rank: 0, World: 2, Addr: addr, Job: "kill-test"},
		Options{Listener: ln, Timeout: 20 * time.Second, HeartbeatTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(nil)
	for range 3 {
		if err := g.Barrier(); err != nil {
			t.Fatal(err)
		}
	}
	cmd.Process.Signal(syscall.SIGKILL)
	start := time.Now()
	for err == nil {
		err = g.Barrier()
	}
	cmd.Wait()
	if !strings.Contains(err.Error(), "rank 1 (pid") || !strings.Contains(err.Error(), "exited or was killed") {
		t.Errorf("rank 0: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("noticed after %s", d)
	}
	t.Logf("rank 0 stopped after %s: %v", time.Since(start).Round(time.Millisecond), err)
}

func TestLaunch(t *testing.T) {
	helperCmd := func(role string) *exec.Cmd {
		c := exec.Command(os.Args[0], "-test.run=^$")
		c.Env = append(os.Environ(), "PARALLAX_DIST_HELPER="+role)
		return c
	}
	if err := Launch(context.Background(), []*exec.Cmd{helperCmd("ok"), helperCmd("ok")}, LaunchOptions{}); err != nil {
		t.Errorf("all ranks succeed: %v", err)
	}
	start := time.Now()
	var logs []string
	err := Launch(context.Background(), []*exec.Cmd{helperCmd("sleep"), helperCmd("exit3")},
		LaunchOptions{Grace: 200 * time.Millisecond, Logf: func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) }})
	if err == nil || !strings.HasPrefix(err.Error(), "rank 1 (pid") || !strings.Contains(err.Error(), "exited with status 3") ||
		!strings.Contains(err.Error(), "then rank 0") || !strings.Contains(err.Error(), "signal terminated") {
		t.Errorf("one rank fails: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %s", d)
	}
	t.Logf("%v\n%s", err, strings.Join(logs, "\n"))
}

func TestLineWriter(t *testing.T) {
	var b strings.Builder
	w := &LineWriter{Prefix: "[rank 1] ", W: &b}
	fmt.Fprint(w, "a\nb")
	fmt.Fprint(w, "c\n\nd")
	w.Flush()
	if got, want := b.String(), "[rank 1] a\n[rank 1] bc\n[rank 1] \n[rank 1] d\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
