package dist

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/cpu"
	"github.com/parallax-engine/parallax/internal/concurrent"
)

// comms joins n goroutine ranks and makes their communicators over one CPU
// device each.
func comms(t *testing.T, n int, backend string) ([]Comm, []engine.Device) {
	t.Helper()
	gs := join(t, n, Options{})
	cs := make([]Comm, n)
	devs := make([]engine.Device, n)
	for r := range devs {
		devs[r] = cpu.New()
	}
	errs := each(gs, func(r int, g *Group) error {
		var err error
		cs[r], err = NewComm(g, devs[r], backend)
		return err
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return cs, devs
}

func vals(dev engine.Device, t *testing.T, dt engine.DType, v []float32, shape ...int) *engine.Tensor {
	t.Helper()
	x, err := engine.FromFloat32(dev, dt, v, shape...)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func read32(x *engine.Tensor) []float32 {
	b := make([]byte, x.Bytes())
	x.Device().Read(x, b)
	return engine.DecodeFloat32(x.DType(), b)
}

func same(got, want []float32) error {
	if len(got) != len(want) {
		return fmt.Errorf("got %v, want %v", got, want)
	}
	for i := range got {
		if math.Abs(float64(got[i]-want[i])) > 1e-6*math.Max(1, math.Abs(float64(want[i]))) {
			return fmt.Errorf("got %v, want %v", got, want)
		}
	}
	return nil
}

// TestTCPComm checks every tensor collective of the TCP implementation on
// three ranks, rank r holding values derived from r.
func TestTCPComm(t *testing.T) {
	const n = 3
	cs, devs := comms(t, n, BackendAuto)
	if cs[0].Backend() != BackendTCP {
		t.Fatalf("backend %s on the CPU", cs[0].Backend())
	}
	errs := make([]error, n)
	done := make(chan struct{})
	for r := range n {
		go func() {
			defer func() { done <- struct{}{} }()
			dev, c := devs[r], cs[r]
			fr := float32(r)
			check := func(what string, err error) bool {
				if err != nil && errs[r] == nil {
					errs[r] = fmt.Errorf("%s: %w", what, err)
				}
				return errs[r] == nil
			}
			// all-reduce, f32 and bf16 in one bucket
			a := vals(dev, t, engine.F32, []float32{fr, 2 * fr, 1}, 3)
			b := vals(dev, t, engine.BF16, []float32{fr + 1, 4}, 2)
			if !check("all-reduce", c.AllReduce(Sum, a, b)) ||
				!check("all-reduce f32", same(read32(a), []float32{3, 6, 3})) ||
				!check("all-reduce bf16", same(read32(b), []float32{6, 12})) {
				return
			}
			m := vals(dev, t, engine.F32, []float32{fr, 3 * fr}, 2)
			if !check("all-reduce avg", c.AllReduce(Avg, m)) || !check("avg", same(read32(m), []float32{1, 3})) {
				return
			}
			// reduce to roots 2 and 0
			p := vals(dev, t, engine.F32, []float32{fr, 1}, 2)
			q := vals(dev, t, engine.F32, []float32{10 * fr}, 1)
			if !check("reduce", c.Reduce(Sum, []int{2, 0}, p, q)) {
				return
			}
			wantP, wantQ := []float32{fr, 1}, []float32{10 * fr}
			if r == 2 {
				wantP = []float32{3, 3}
			}
			if r == 0 {
				wantQ = []float32{30}
			}
			if !check("reduce p", same(read32(p), wantP)) || !check("reduce q", same(read32(q), wantQ)) {
				return
			}
			// broadcast from roots 1 and 2 (an all-gather of whole tensors)
			u := vals(dev, t, engine.F32, []float32{fr, fr}, 2)
			w := vals(dev, t, engine.BF16, []float32{fr}, 1)
			if !check("broadcast", c.Broadcast([]int{1, 2}, u, w)) ||
				!check("broadcast u", same(read32(u), []float32{1, 1})) || !check("broadcast w", same(read32(w), []float32{2})) {
				return
			}
			// reduce-scatter and all-gather
			in := vals(dev, t, engine.F32, []float32{fr, 1, 2, 3, 4, 5}, 3, 2)
			out := vals(dev, t, engine.F32, []float32{0, 0}, 2)
			if !check("reduce-scatter", c.ReduceScatter(Sum, out, in)) {
				return
			}
			want := [][]float32{{3, 3}, {6, 9}, {12, 15}}[r]
			if !check("reduce-scatter result", same(read32(out), want)) {
				return
			}
			g := vals(dev, t, engine.F32, make([]float32, 6), 6)
			if !check("all-gather", c.AllGather(g, out)) || !check("all-gather result", same(read32(g), []float32{3, 3, 6, 9, 12, 15})) {
				return
			}
			h := []float64{float64(r), 1}
			check("host all-reduce", c.AllReduceHost(h))
			if h[0] != 3 || h[1] != 3 {
				check("host all-reduce", fmt.Errorf("got %v", h))
			}
			check("barrier", c.Barrier())
		}()
	}
	for range n {
		<-done
	}
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

func TestCommMismatchAndChoice(t *testing.T) {
	cs, devs := comms(t, 2, BackendTCP)
	errs := each([]*Group{cs[0].Group(), cs[1].Group()}, func(r int, g *Group) error {
		x := vals(devs[r], t, engine.F32, make([]float32, 2+r), 2+r)
		return cs[r].AllReduce(Sum, x)
	})
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "rank 1 (pid") || !strings.Contains(err.Error(), "same shapes") {
			t.Errorf("rank %d: %v", r, err)
		}
	}

	// NCCL asked for on CPU devices: a clear error naming the ranks.
	gs := join(t, 2, Options{})
	errs = each(gs, func(r int, g *Group) error {
		_, err := NewComm(g, cpu.New(), BackendNCCL)
		return err
	})
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "--comm nccl") || !strings.Contains(err.Error(), "cpu:0 has no native collectives") {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// TestTCPStartedCollectives starts collectives, calls a synchronous one
// before waiting for them, and waits in reverse order: the results are
// those of the same calls made one by one.
func TestTCPStartedCollectives(t *testing.T) {
	const n = 3
	cs, devs := comms(t, n, BackendTCP)
	errs := concurrent.Each(n, func(r int) error {
		dev, c := devs[r], cs[r]
		fr := float32(r)
		a := vals(dev, t, engine.F32, []float32{fr, 2 * fr}, 2)
		b := vals(dev, t, engine.BF16, []float32{fr + 1}, 1)
		x := vals(dev, t, engine.F32, []float32{10 * fr, 1}, 2)
		pa := c.StartAllReduce(Sum, a)
		pb := c.StartReduce(Avg, []int{2}, b)
		host := []float64{float64(r)}
		if err := c.AllReduceHost(host); err != nil {
			return err
		}
		px := c.StartAllReduce(Avg, x)
		for _, p := range []Pending{px, pb, pa} {
			if err := p.Wait(); err != nil {
				return err
			}
		}
		if host[0] != 3 {
			return fmt.Errorf("host all-reduce: got %v, want 3", host[0])
		}
		if err := same(read32(a), []float32{3, 6}); err != nil {
			return fmt.Errorf("all-reduce: %w", err)
		}
		wantB := []float32{fr + 1} // unchanged off the root
		if r == 2 {
			wantB = []float32{2}
		}
		if err := same(read32(b), wantB); err != nil {
			return fmt.Errorf("reduce: %w", err)
		}
		if err := same(read32(x), []float32{10, 1}); err != nil {
			return fmt.Errorf("all-reduce avg: %w", err)
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}
