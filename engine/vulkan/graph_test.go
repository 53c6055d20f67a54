package vulkan

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/engine"
)

// stepSet is the tensors of one decode-like step: a token's activation
// rows x, a KV cache with device-held lengths and append starts, weights
// for the GEMV, multi-weight and SwiGLU kernels, and every output.
type stepSet struct {
	x, wq, wk, wv, wg, wu, wo, norm   *engine.Tensor
	h, q, k, v, kh, vh, act, mlp, o   *engine.Tensor
	kc, vc, lens, starts, att, ss, id *engine.Tensor
}

const (
	gsDim, gsHeads, gsD, gsCap, gsFFN = 32, 2, 16, 40, 48
)

func newStepSet(t *testing.T, ts *tensors, rng *rand.Rand) *stepSet {
	dt := engine.BF16
	mk := func(dt engine.DType, scale float64, shape ...int) *engine.Tensor {
		n := 1
		for _, s := range shape {
			n *= s
		}
		return ts.make(dt, randVals(rng, dt, n, scale), shape...)
	}
	zero := func(dt engine.DType, shape ...int) *engine.Tensor {
		n := 1
		for _, s := range shape {
			n *= s
		}
		return ts.make(dt, make([]float32, n), shape...)
	}
	kv := gsHeads * gsD
	s := &stepSet{
		x: mk(dt, 1, 1, gsDim), norm: mk(dt, 1, gsDim),
		wq: mk(dt, 0.2, kv, gsDim), wk: mk(dt, 0.2, kv, gsDim), wv: mk(dt, 0.2, kv, gsDim),
		wg: mk(dt, 0.2, gsFFN, gsDim), wu: mk(dt, 0.2, gsFFN, gsDim), wo: mk(dt, 0.2, gsDim, gsFFN),
		h: zero(dt, 1, gsDim), q: zero(dt, 1, kv), k: zero(dt, 1, kv), v: zero(dt, 1, kv),
		act: zero(dt, 1, gsFFN), mlp: zero(dt, 1, gsDim), o: zero(engine.F32, 1, gsDim),
		kc: zero(dt, 1, gsHeads, gsCap, gsD), vc: zero(dt, 1, gsHeads, gsCap, gsD),
		lens: ts.make(engine.I32, []float32{0}, 1), starts: ts.make(engine.I32, []float32{0}, 1),
		att: zero(dt, 1, gsHeads, 1, gsD), ss: zero(engine.F32, 1),
	}
	var err error
	if s.id, err = ts.dev.Alloc(engine.I32, 1); err != nil {
		t.Fatal(err)
	}
	ts.all = append(ts.all, s.id)
	return s
}

// step enqueues the ops: h = rmsnorm(x), q, k, v = h W^T (one dispatch),
// the cache appends at starts, decode attention over lens (two splits:
// the persistent partial states and the combine), act = swiglu(h), mlp =
// x + act Wo^T (accumulated), o = mlp Wq^T (an f32 output), the sum of
// squares of the attention output (scratch), and the argmax of o.
func (s *stepSet) step(d *Device) error {
	steps := []func() error{
		func() error { return d.RMSNorm(s.h, nil, s.x, s.norm, 1e-5) },
		func() error {
			done, err := d.LinearMulti([]*engine.Tensor{s.q, s.k, s.v}, []*engine.Tensor{s.wq, s.wk, s.wv}, s.h)
			if err == nil && !done {
				err = errors.New("linear multi declined")
			}
			return err
		},
		func() error { return d.KVAppendAt(s.kc, mustReshape(s.k, 1, gsHeads, 1, gsD), s.starts) },
		func() error { return d.KVAppendAt(s.vc, mustReshape(s.v, 1, gsHeads, 1, gsD), s.starts) },
		func() error {
			return d.DecodeAttention(engine.DecodeArgs{Q: mustReshape(s.q, 1, gsHeads, 1, gsD), KCache: s.kc, VCache: s.vc,
				Lens: s.lens, O: s.att, Splits: 2})
		},
		func() error {
			done, err := d.LinearSwiGLU(s.act, s.h, s.wg, s.wu)
			if err == nil && !done {
				err = errors.New("linear swiglu declined")
			}
			return err
		},
		func() error { return d.Cast(s.mlp, s.x) },
		func() error { return d.MatMul(s.mlp, s.act, s.wo, engine.MatMulOpts{TransB: true, Accumulate: true}) },
		func() error { return d.MatMul(s.o, s.mlp, s.wq, engine.MatMulOpts{TransB: true}) },
		func() error { return d.SumSquares(s.ss, s.att, false) },
		func() error { return d.ArgMaxRows(s.id, s.o, gsDim) },
	}
	for i, f := range steps {
		if err := f(); err != nil {
			return fmt.Errorf("op %d: %w", i, err)
		}
	}
	return nil
}

func mustReshape(x *engine.Tensor, shape ...int) *engine.Tensor {
	y, err := x.Reshape(shape...)
	if err != nil {
		panic(err) // test shapes only
	}
	return y
}

// inputs writes a step's varying inputs: x, the cache length and start.
func (s *stepSet) inputs(t *testing.T, d *Device, x []float32, pos int) {
	t.Helper()
	if err := engine.WriteFloat32(s.x, x); err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct {
		t *engine.Tensor
		v int32
	}{{s.lens, int32(pos + 1)}, {s.starts, int32(pos)}} {
		if err := d.Write(p.t, binary.LittleEndian.AppendUint32(nil, uint32(p.v))); err != nil {
			t.Fatal(err)
		}
	}
}

// outputs reads every output of a step as raw bytes.
func (s *stepSet) outputs(t *testing.T, d *Device) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for name, x := range map[string]*engine.Tensor{"h": s.h, "q": s.q, "k": s.k, "v": s.v, "kcache": s.kc, "vcache": s.vc,
		"att": s.att, "act": s.act, "mlp": s.mlp, "o": s.o, "sumsq": s.ss, "argmax": s.id} {
		b := make([]byte, x.Bytes())
		if err := d.Read(x, b); err != nil {
			t.Fatal(err)
		}
		out[name] = b
	}
	return out
}

// TestGraphReplay records a decode-like step (GEMV, multi-weight and
// SwiGLU dispatches, cache appends at device-held starts, a split decode,
// scratch-using reductions, argmax) and replays it over several tokens
// with new inputs written before each replay; every output must equal,
// bit for bit, the same step run eagerly on a second set of tensors. It
// runs with push descriptors and with per-graph descriptor pools.
func TestGraphReplay(t *testing.T) {
	for _, pool := range []bool{false, true} {
		t.Run(fmt.Sprintf("descriptor pools %v", pool), func(t *testing.T) {
			d := testDevice(t)
			if pool {
				var err error
				d, err = OpenWith(0, Options{NoPushDescriptors: true})
				if err != nil {
					t.Fatal(err)
				}
				defer d.Close()
				if d.push {
					t.Fatal("push descriptors still on")
				}
			}
			if _, _, ok := d.gemvShape(); !ok {
				t.Skip("no GEMV kernel on this device")
			}
			testGraphReplay(t, d)
		})
	}
}

func testGraphReplay(t *testing.T, d *Device) {
	rng := rand.New(rand.NewPCG(1, 2))
	ts := &tensors{t: t, dev: d}
	defer ts.free()
	rec, eager := newStepSet(t, ts, rng), newStepSet(t, ts, rng)
	// The same weights in both sets.
	for _, p := range [][2]*engine.Tensor{{rec.wq, eager.wq}, {rec.wk, eager.wk}, {rec.wv, eager.wv}, {rec.wg, eager.wg},
		{rec.wu, eager.wu}, {rec.wo, eager.wo}, {rec.norm, eager.norm}} {
		if err := d.Cast(p[1], p[0]); err != nil {
			t.Fatal(err)
		}
	}
	// A warm step (pipelines, scratch), as the model does before recording.
	rec.inputs(t, d, randVals(rng, engine.BF16, gsDim, 1), 0)
	if err := rec.step(d); err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := d.BeginGraph(); err != nil {
		t.Fatal(err)
	}
	if err := rec.step(d); err != nil {
		t.Fatal(err)
	}
	g, err := d.EndGraph()
	if err != nil {
		t.Fatal(err)
	}
	defer g.Free()
	// The recording ran nothing: the warm step's outputs are still there.
	warm := rec.outputs(t, d)
	for pos := 0; pos < 6; pos++ {
		// Position 0 again for the recorded set (over the warm step's row).
		x := randVals(rng, engine.BF16, gsDim, 1)
		eager.inputs(t, d, x, pos)
		if err := eager.step(d); err != nil {
			t.Fatal(err)
		}
		rec.inputs(t, d, x, pos)
		if err := g.Replay(); err != nil {
			t.Fatal(err)
		}
		if pos%2 == 1 {
			// Two replays back to back (the second waits for the first's
			// command buffer); the inputs do not change between them, and
			// the cache append rewrites the same position.
			if err := g.Replay(); err != nil {
				t.Fatal(err)
			}
		}
		got, want := rec.outputs(t, d), eager.outputs(t, d)
		for name, w := range want {
			if string(got[name]) != string(w) {
				t.Fatalf("position %d: %s after the replay differs from the eager step", pos, name)
			}
		}
		if pos == 0 && string(got["h"]) == string(warm["h"]) {
			t.Fatal("the replay left h as the warm step wrote it")
		}
	}
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	if gr := g.(*graph); gr.replays != 9 {
		t.Errorf("%d replays counted, want 9", gr.replays)
	}
}

// TestGraphRefusals: host reads, writes, Sync, Free, Timed, profiling, a
// second BeginGraph and a replay are refused while recording; EndGraph
// then fails, and the device works as before (the refused Free takes
// effect when the recording ends).
func TestGraphRefusals(t *testing.T) {
	d := testDevice(t)
	x := upload(t, d, engine.F32, []float32{1, 2, 3, 4}, 4)
	y := upload(t, d, engine.F32, []float32{0, 0, 0, 0}, 4)
	defer d.Free(x)
	defer d.Free(y)
	// A graph to replay while recording another.
	if err := d.BeginGraph(); err != nil {
		t.Fatal(err)
	}
	if err := d.AddScaled(y, x, x, 1, 1); err != nil {
		t.Fatal(err)
	}
	g0, err := d.EndGraph()
	if err != nil {
		t.Fatal(err)
	}
	defer g0.Free()
	victim, err := d.Alloc(engine.F32, 64)
	if err != nil {
		t.Fatal(err)
	}
	refusals := []struct {
		what string
		fn   func() error
	}{
		{"read", func() error { _, err := engine.Float32s(y); return err }},
		{"write", func() error { return engine.WriteFloat32(x, []float32{5, 6, 7, 8}) }},
		{"sync", d.Sync},
		{"timed", func() error { _, err := d.Timed(func() error { return nil }); return err }},
		{"start profile", d.StartProfile},
		{"begin graph", d.BeginGraph},
		{"graph replay", g0.Replay},
	}
	for _, r := range refusals {
		t.Run(r.what, func(t *testing.T) {
			if err := d.BeginGraph(); err != nil {
				t.Fatal(err)
			}
			if err := d.AddScaled(y, x, x, 2, 1); err != nil {
				t.Fatal(err)
			}
			if err := r.fn(); err == nil || !strings.Contains(err.Error(), "record") {
				t.Errorf("%s while recording: err %v, want a refusal", r.what, err)
			}
			g, err := d.EndGraph()
			if r.what == "begin graph" || r.what == "start profile" {
				// Refused without spoiling the recording.
				if err != nil {
					t.Fatalf("EndGraph after a refused %s: %v", r.what, err)
				}
				g.Free()
				return
			}
			if err == nil {
				g.Free()
				t.Fatalf("EndGraph after a refused %s succeeded", r.what)
			}
		})
	}
	// Free while recording: refused, released when the recording ends.
	if err := d.BeginGraph(); err != nil {
		t.Fatal(err)
	}
	d.Free(victim)
	if r := regionOf(victim); r.freed {
		t.Error("a tensor freed while recording was released at once")
	}
	if g, err := d.EndGraph(); err == nil || !strings.Contains(err.Error(), "free") {
		if g != nil {
			g.Free()
		}
		t.Errorf("EndGraph after a Free while recording: err %v, want the refusal", err)
	}
	if r := regionOf(victim); !r.freed {
		t.Error("the tensor freed while recording was not released when the recording ended")
	}
	// Nothing recorded ran (g0 was never replayed, the other recordings
	// failed or were freed), and the device works.
	if v := download(t, y); v[0] != 0 || v[3] != 0 {
		t.Fatalf("y = %v after recordings that never ran, want zeros", v)
	}
	if err := g0.Replay(); err != nil {
		t.Fatal(err)
	}
	if v := download(t, y); v[0] != 2 || v[3] != 8 {
		t.Fatalf("y = %v after replaying x + x, want [2 4 6 8]", v)
	}
	if _, err := d.EndGraph(); err == nil {
		t.Error("EndGraph without BeginGraph succeeded")
	}
	g0.Free()
	if err := g0.Replay(); err == nil {
		t.Error("replaying a freed graph succeeded")
	}
}

// TestGraphStale: a graph recorded over the decode partial states is
// stale once a larger decode reallocates them; a new recording works.
func TestGraphStale(t *testing.T) {
	d := testDevice(t)
	ts := &tensors{t: t, dev: d}
	defer ts.free()
	rng := rand.New(rand.NewPCG(6, 6))
	const H, D, Cap = 2, 16, 64
	q := ts.make(engine.F32, randVals(rng, engine.F32, H*D, 1), 1, H, 1, D)
	kc := ts.make(engine.F32, randVals(rng, engine.F32, H*Cap*D, 1), 1, H, Cap, D)
	vc := ts.make(engine.F32, randVals(rng, engine.F32, H*Cap*D, 1), 1, H, Cap, D)
	o := ts.make(engine.F32, make([]float32, H*D), 1, H, 1, D)
	lens := ts.make(engine.I32, []float32{Cap}, 1)
	decode := func(splits int) error {
		return d.DecodeAttention(engine.DecodeArgs{Q: q, KCache: kc, VCache: vc, Lens: lens, O: o, Splits: splits})
	}
	if err := decode(2); err != nil {
		t.Fatal(err)
	}
	if err := d.BeginGraph(); err != nil {
		t.Fatal(err)
	}
	if err := decode(2); err != nil {
		t.Fatal(err)
	}
	g, err := d.EndGraph()
	if err != nil {
		t.Fatal(err)
	}
	defer g.Free()
	if err := g.Replay(); err != nil {
		t.Fatalf("a fresh graph: %v", err)
	}
	if err := decode(8); err != nil { // more splits: larger partial states
		t.Fatal(err)
	}
	if err := g.Replay(); !errors.Is(err, engine.ErrGraphStale) {
		t.Fatalf("replay after the partial states grew: %v, want ErrGraphStale", err)
	}
	if err := d.BeginGraph(); err != nil {
		t.Fatal(err)
	}
	if err := decode(2); err != nil {
		t.Fatal(err)
	}
	g2, err := d.EndGraph()
	if err != nil {
		t.Fatal(err)
	}
	defer g2.Free()
	if err := decode(2); err != nil {
		t.Fatal(err)
	}
	want := download(t, o)
	if err := engine.WriteFloat32(o, make([]float32, H*D)); err != nil {
		t.Fatal(err)
	}
	if err := g2.Replay(); err != nil {
		t.Fatal(err)
	}
	got := download(t, o)
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("o[%d] = %v after the new graph's replay, want %v", i, got[i], want[i])
		}
	}
}

// TestGraphOrdering: a replay reads inputs written just before it and
// its outputs are read right after it (Read waits for the replay); a host
// write to a tensor a pending replay reads is ordered after it; freed
// scratch of a live graph is not handed out.
func TestGraphOrdering(t *testing.T) {
	d := testDevice(t)
	ts := &tensors{t: t, dev: d}
	defer ts.free()
	const n = 1 << 16
	x := ts.make(engine.F32, make([]float32, n), n)
	y := ts.make(engine.F32, make([]float32, n), n)
	s := ts.make(engine.F32, []float32{0}, 1)
	if err := d.BeginGraph(); err != nil {
		t.Fatal(err)
	}
	if err := d.AddScaled(y, x, x, 3, 0); err != nil {
		t.Fatal(err)
	}
	if err := d.SumSquares(s, x, false); err != nil { // its partial sums are scratch the graph keeps
		t.Fatal(err)
	}
	g, err := d.EndGraph()
	if err != nil {
		t.Fatal(err)
	}
	defer g.Free()
	held := g.(*graph).held
	if len(held) == 0 {
		t.Fatal("the graph keeps no scratch")
	}
	for round := 1; round <= 3; round++ {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(round)
		}
		if err := engine.WriteFloat32(x, v); err != nil {
			t.Fatal(err)
		}
		if err := g.Replay(); err != nil {
			t.Fatal(err)
		}
		// Written while the replay may still read x: ordered after it.
		if err := engine.WriteFloat32(x, make([]float32, n)); err != nil {
			t.Fatal(err)
		}
		// Scratch allocated now must not be the graph's.
		sc, err := d.tmp(1024)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range held {
			if h.blk == sc.blk && h.off < sc.off+sc.size && sc.off < h.off+h.size {
				t.Fatal("scratch a live graph owns was handed out")
			}
		}
		d.mem.release(sc)
		got := download(t, y)
		if got[0] != 3*float32(round) || got[n-1] != 3*float32(round) {
			t.Fatalf("round %d: y = %v ... %v, want %v", round, got[0], got[n-1], 3*round)
		}
		if ss := download(t, s); ss[0] != float32(n*round*round) {
			t.Fatalf("round %d: sum of squares %v, want %v", round, ss[0], n*round*round)
		}
	}
}

// TestGraphProfile: a replay while profiling is one op, "graph replay";
// recording while profiling is refused.
func TestGraphProfile(t *testing.T) {
	d := testDevice(t)
	x := upload(t, d, engine.F32, []float32{1, 2}, 2)
	defer d.Free(x)
	if d.pd.tsBits == 0 || d.pd.lim.timestampPeriod == 0 {
		t.Skip("no timestamps")
	}
	if err := d.StartProfile(); err != nil {
		t.Fatal(err)
	}
	if err := d.BeginGraph(); err == nil || !strings.Contains(err.Error(), "profile") {
		t.Errorf("BeginGraph while profiling: %v, want a refusal", err)
	}
	if _, err := d.StopProfile(); err != nil {
		t.Fatal(err)
	}
	if err := d.BeginGraph(); err != nil {
		t.Fatal(err)
	}
	if err := d.AddScaled(x, x, x, 1, 1); err != nil {
		t.Fatal(err)
	}
	g, err := d.EndGraph()
	if err != nil {
		t.Fatal(err)
	}
	defer g.Free()
	if names := kernelsRun(t, d, g.Replay); names != "graph replay" {
		t.Errorf("profiled replay: %q, want one graph replay", names)
	}
	if v := download(t, x); v[0] != 2 || v[1] != 4 {
		t.Errorf("x = %v after one replay of x += x, want [2 4]", v)
	}
}
