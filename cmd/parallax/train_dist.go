package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/train"
	"github.com/parallax-engine/parallax/train/dist"
)

// Data-parallel training from the command line: `--nproc-per-node N`
// starts N copies of the command on this node (one per GPU); a copy
// started with torchrun-style or SLURM variables (by that launcher, by
// torchrun --no-python, or by srun) joins the job they describe.

// failGrace is how long a rank whose job failed may take to return before
// it exits anyway (a device wait that never ends, say).
const failGrace = 15 * time.Second

// deviceCount returns the number of devices of a backend (0 if it has
// none or is not built in).
func deviceCount(backend string) int {
	for _, b := range engine.Backends() {
		if b.Name() == backend {
			devs, err := b.Devices()
			if err != nil {
				return 0
			}
			return len(devs)
		}
	}
	return 0
}

// rankDevice picks local rank local's device from --device: "cpu" stays;
// "auto" means CUDA when there is a CUDA GPU; a GPU backend named without an
// index gets index local, or 0 when the process sees a single device (one
// GPU per task, as srun --gpus-per-task gives); an explicit index is kept
// unless force is set (the launcher's ranks always take GPU local).
func rankDevice(device string, local int, force bool, count func(string) int) (string, error) {
	d := strings.ToLower(strings.TrimSpace(device))
	backend, _, hasIdx := strings.Cut(d, ":")
	switch {
	case backend == "cpu":
		return d, nil
	case d == "" || d == "auto":
		if count("cuda") == 0 {
			return d, nil
		}
		backend = "cuda"
	case hasIdx && !force:
		return d, nil
	}
	n := count(backend)
	switch {
	case n == 0:
		return "", fmt.Errorf("--device %s: the %s backend has no device here", device, backend)
	case local < n:
		return fmt.Sprintf("%s:%d", backend, local), nil
	case n == 1 && !force:
		return backend + ":0", nil
	}
	return "", fmt.Errorf("local rank %d needs %s:%d, but %s has %d device(s)", local, backend, local, backend, n)
}

// launchRanks runs `parallax train` once per local rank with the flags of
// this command line (less --nproc-per-node and --device) and waits.
func launchRanks(fs *pflag.FlagSet, device string, n int, stdout, stderr io.Writer) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("--nproc-per-node: cannot find this program to start the ranks: %w", err)
	}
	port := 0
	if p := os.Getenv("MASTER_PORT"); p != "" {
		if port, err = strconv.Atoi(p); err != nil || port < 1 || port > 65535 {
			return fmt.Errorf("MASTER_PORT=%q is not a TCP port", p)
		}
	} else if port, err = dist.FreePort(); err != nil {
		return fmt.Errorf("--nproc-per-node: no free port for the rendezvous: %w", err)
	}
	devs := make([]string, n)
	for i := range devs {
		if devs[i], err = rankDevice(device, i, true, deviceCount); err != nil {
			return usagef("--nproc-per-node %d: %v", n, err)
		}
	}
	var args []string
	fs.Visit(func(f *pflag.Flag) {
		if f.Name != "nproc-per-node" && f.Name != "device" {
			args = append(args, "--"+f.Name+"="+f.Value.String())
		}
	})
	var tok [8]byte
	rand.Read(tok[:])
	job := "local-" + hex.EncodeToString(tok[:])
	// The ranks' output is copied by several goroutines: serialise the
	// writes unless they go to a file (a terminal, for rank 0's progress).
	stdout, stderr = lockWriter(stdout), lockWriter(stderr)
	var flush []*dist.LineWriter
	cmds := make([]*exec.Cmd, n)
	for i := range cmds {
		c := exec.Command(exe, append(append([]string{"train"}, args...), "--device", devs[i])...)
		c.Env = dist.ChildEnv(os.Environ(), i, n, "127.0.0.1", port, job)
		if devs[i] == "cpu" && os.Getenv("PARALLAX_CPU_THREADS") == "" {
			// CPU ranks share the cores instead of each taking them all.
			c.Env = append(c.Env, fmt.Sprintf("PARALLAX_CPU_THREADS=%d", max(1, runtime.NumCPU()/n)))
		}
		if i == 0 {
			c.Stdout, c.Stderr = stdout, stderr
		} else {
			o := &dist.LineWriter{Prefix: fmt.Sprintf("[rank %d] ", i), W: stdout}
			e := &dist.LineWriter{Prefix: fmt.Sprintf("[rank %d] ", i), W: stderr}
			c.Stdout, c.Stderr = o, e
			flush = append(flush, o, e)
		}
		cmds[i] = c
	}
	fmt.Fprintf(stderr, "parallax train: starting %d ranks (%s), rendezvous at 127.0.0.1:%d\n", n, strings.Join(devs, ", "), port)
	err = dist.Launch(context.Background(), cmds, dist.LaunchOptions{
		Logf: func(format string, a ...any) { fmt.Fprintf(stderr, "parallax train: "+format+"\n", a...) },
	})
	for _, w := range flush {
		w.Flush()
	}
	return err
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func lockWriter(w io.Writer) io.Writer {
	if _, ok := w.(*os.File); ok {
		return w
	}
	return &lockedWriter{w: w}
}

// joinFromEnv joins the job the environment describes, if any: it sets
// cfg.Group, maps cfg.Device to this rank's GPU and silences the progress
// of ranks other than 0. leave must be called with the run's error.
func joinFromEnv(ctx context.Context, cfg *train.Config, stderr io.Writer) (leave func(error), leader bool, err error) {
	env, ok, err := dist.FromEnv(os.Getenv)
	if err != nil || !ok {
		return func(error) {}, true, err
	}
	if cfg.Device, err = rankDevice(cfg.Device, env.LocalRank, false, deviceCount); err != nil {
		return nil, false, fmt.Errorf("rank %d: %w", env.Rank, err)
	}
	o, err := dist.OptionsFromEnv(os.Getenv)
	if err != nil {
		return nil, false, err
	}
	o.Logf = func(format string, a ...any) { fmt.Fprintf(stderr, "parallax train: "+format+"\n", a...) }
	g, err := dist.Join(ctx, env, o)
	if err != nil {
		return nil, false, err
	}
	g.OnFail(func(err error) {
		time.AfterFunc(failGrace, func() {
			fmt.Fprintf(stderr, "parallax train: %v\nparallax train: rank %d did not stop within %s of the failure; exiting\n", err, env.Rank, failGrace)
			os.Exit(exitFailure)
		})
	})
	cfg.Group = g
	if env.Rank != 0 {
		cfg.Stdout = nil
	}
	return func(err error) { g.Close(err) }, env.Rank == 0, nil
}
