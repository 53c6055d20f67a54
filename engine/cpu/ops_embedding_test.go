package cpu

import (
	"fmt"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/enginetest"
	"github.com/parallax-engine/parallax/engine/ref"
)

func TestEmbedding(t *testing.T) {
	for _, dt := range []engine.DType{engine.F32, engine.BF16} {
		for _, outDT := range []engine.DType{dt, engine.F32} {
			for _, d := range testDevices() {
				t.Run(fmt.Sprintf("%v->%v/threads=%d", dt, outDT, d.threads), func(t *testing.T) {
					rng := newRng(7)
					const v, dim = 50, 24
					ids := make([]int, 2*300)
					for i := range ids {
						ids[i] = rng.IntN(v / 5) // many repeats
					}
					ids[3] = v - 1
					tv := enginetest.Normal(rng, dt, v*dim, 1)
					table, idt := up(t, d, dt, tv, v, dim), upInts(t, d, ids, 2, 300)
					out := alloc(t, d, outDT, 2, 300, dim)
					if err := d.Embedding(out, table, idt); err != nil {
						t.Fatal(err)
					}
					near(t, "out", down(t, out), roundTo(outDT, ref.Embedding(tv, ids, dim)), 0)

					gv := enginetest.Normal(rng, outDT, len(ids)*dim, 1)
					g0 := enginetest.Normal(rng, dt, v*dim, 1)
					dTable, g := up(t, d, dt, g0, v, dim), up(t, d, outDT, gv, 2, 300, dim)
					if err := d.EmbeddingBackward(dTable, idt, g); err != nil {
						t.Fatal(err)
					}
					want := ref.AddScaled(ref.EmbeddingBackward(gv, ids, v, dim), g0, 1, 1)
					near(t, "dTable", down(t, dTable), want, tolFor(dt, len(ids)))
				})
			}
		}
	}
}

func TestEmbeddingBadIDs(t *testing.T) {
	d := New()
	table := alloc(t, d, engine.F32, 10, 4)
	out := up(t, d, engine.F32, make([]float64, 12), 3, 4)
	for _, bad := range []int{10, -1, 1 << 30} {
		ids := upInts(t, d, []int{1, bad, 2}, 3)
		var err error
		noPanic(t, "embedding", func() { err = d.Embedding(out, table, ids) })
		if err == nil || !strings.Contains(err.Error(), "ids[1]") || !strings.Contains(err.Error(), fmt.Sprint(bad)) {
			t.Errorf("id %d: error %v should name ids[1] and the value", bad, err)
		}
		if serr := d.Sync(); serr == nil {
			t.Errorf("id %d: Sync reported no error", bad)
		}
		if err := d.Sync(); err != nil {
			t.Errorf("second Sync still reports %v", err)
		}
		for _, v := range down(t, out) {
			if v != 0 {
				t.Fatalf("id %d: the failed gather wrote to out", bad)
			}
		}
		noPanic(t, "embedding backward", func() { err = d.EmbeddingBackward(table, ids, out) })
		if err == nil || d.Sync() == nil {
			t.Errorf("backward with id %d: op error %v; Sync must report it too", bad, err)
		}
	}
	f := func(dt engine.DType, s ...int) *engine.Tensor { return alloc(t, d, dt, s...) }
	wantArgError(t, "float ids", d.Embedding(out, table, f(engine.F32, 3)), "embedding")
	wantArgError(t, "out shape", d.Embedding(f(engine.F32, 3, 5), table, f(engine.I32, 3)), "embedding")
	wantArgError(t, "table rank", d.Embedding(out, f(engine.F32, 40), f(engine.I32, 3)), "embedding")
	wantArgError(t, "int table", d.Embedding(out, f(engine.I32, 10, 4), f(engine.I32, 3)), "embedding")
	wantArgError(t, "backward float ids", d.EmbeddingBackward(table, f(engine.F32, 3), out), "embedding backward")
	wantArgError(t, "backward dOut shape", d.EmbeddingBackward(table, f(engine.I32, 3), f(engine.F32, 3, 5)), "embedding backward")
}
