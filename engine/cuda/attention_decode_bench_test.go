//go:build cgo

package cuda_test

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/cuda"
	"github.com/parallax-engine/parallax/engine/enginetest"
)

// TestDecodeSweep times the tensor-core decode (Parallax, bf16, Hkv 8,
// D 128, one query) under several plans when PARALLAX_CUDA_DECODE_SWEEP=1:
// medians of 30 CUDA-event timings with the L2 flushed before each run
// ("cold", as TestBench and scripts/bench-peers.py time) and without
// ("warm", as `parallax bench decode` does, the launch included), and the
// largest difference of o from the automatic plan's.
// DEC_SWEEP_SHAPES="G,B,L ..." picks the shapes; DEC_SWEEP_PLANS the
// plans: auto, old, or S:N (S stages, N splits; 0 for the rule's).
//
//	PARALLAX_CUDA_DECODE_SWEEP=1 go test ./engine/cuda -run TestDecodeSweep -v
func TestDecodeSweep(t *testing.T) {
	if os.Getenv("PARALLAX_CUDA_DECODE_SWEEP") != "1" {
		t.Skip("set PARALLAX_CUDA_DECODE_SWEEP=1 to run the decode plan sweep")
	}
	d := openGPU(t)
	shapes := strings.Fields(os.Getenv("DEC_SWEEP_SHAPES"))
	if len(shapes) == 0 {
		for _, g := range []int{4, 1} {
			for _, b := range []int{1, 8} {
				for _, l := range []int{4096, 16384, 32768} {
					shapes = append(shapes, fmt.Sprintf("%d,%d,%d", g, b, l))
				}
			}
		}
	}
	plans := strings.Fields(os.Getenv("DEC_SWEEP_PLANS"))
	if len(plans) == 0 {
		plans = []string{"auto", "old", "6:8", "6:12", "6:24", "6:32", "4:16", "3:16", "3:33"}
	}
	const Hkv, D = 8, 128
	t.Logf("%-14s %-6s %6s %6s %-6s %9s %9s %9s", "G,B,L", "plan", "splits", "stages", "rule", "cold us", "warm us", "max diff")
	for _, sh := range shapes {
		var G, B, L int
		if _, err := fmt.Sscanf(sh, "%d,%d,%d", &G, &B, &L); err != nil {
			t.Fatalf("DEC_SWEEP_SHAPES %q: want G,B,L", sh)
		}
		Hq := G * Hkv
		q, r := alloc(t, d, engine.BF16, 1, 1, B, Hq, 1, D), alloc(t, d, engine.BF16, 2, 0.1, B, Hq, 1, D)
		k, v := alloc(t, d, engine.BF16, 3, 1, B, Hkv, L, D), alloc(t, d, engine.BF16, 4, 1, B, Hkv, L, D)
		o := alloc(t, d, engine.BF16, 0, 0, B, Hq, 1, D)
		ls := make([]float64, B)
		for i := range ls {
			ls[i] = float64(L)
		}
		lens, err := enginetest.Upload(d, engine.I32, ls, B)
		must(t, err)
		a := engine.DecodeArgs{Q: q, R: r, KCache: k, VCache: v, Lens: lens, O: o}
		run := func() error { return d.DecodeAttention(a) }
		var ref []float64
		for _, pl := range plans {
			splits, stages, old := 0, 0, pl == "old"
			if pl != "auto" && !old {
				s, n, ok := strings.Cut(pl, ":")
				var e1, e2 error
				stages, e1 = strconv.Atoi(s)
				splits, e2 = strconv.Atoi(n)
				if !ok || e1 != nil || e2 != nil {
					t.Fatalf("DEC_SWEEP_PLANS %q: want auto, old or S:N", pl)
				}
			}
			restore := cuda.SetDecodeOverrides(splits, stages, old)
			ns, nst, rule, err := cuda.DecodePlan(d, B, Hkv, L, D, 0)
			must(t, err)
			cold, err := cuda.Median(d, 3, 30, func() error { return cuda.FlushL2(d) }, run)
			must(t, err)
			warm, err := cuda.Median(d, 3, 30, nil, run)
			must(t, err)
			must(t, d.Sync())
			got, err := enginetest.Download(o)
			must(t, err)
			restore()
			diff := 0.0
			if ref == nil {
				ref = got
			}
			for i := range got {
				if e := math.Abs(got[i] - ref[i]); e > diff || math.IsNaN(e) {
					diff = e
				}
			}
			t.Logf("%-14s %-6s %6d %6d %-6s %9.2f %9.2f %9.2g", sh, pl, ns, nst, rule, cold*1e3, warm*1e3, diff)
		}
		for _, x := range []*engine.Tensor{q, r, k, v, o, lens} {
			d.Free(x)
		}
	}
}
