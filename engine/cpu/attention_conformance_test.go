package cpu_test

import (
	"sort"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/cpu"
	"github.com/parallax-engine/parallax/engine/enginetest"
)

// attentionFamilyOps are the conformance ops of the attention family.
var attentionFamilyOps = map[string]bool{
	"attention": true, "attention backward": true, "decode attention": true, "lla": true,
	"linear attention": true, "linear attention backward": true, "correction ratio": true,
}

// TestAttentionConformance runs the attention family's conformance cases
// on the CPU device with f32 and bf16 inputs, and logs the largest error
// relative to its tolerance per op.
func TestAttentionConformance(t *testing.T) {
	dev := cpu.New()
	o := enginetest.Options{DTypes: []engine.DType{engine.F32, engine.BF16}, Short: testing.Short()}
	seed := enginetest.Seed(o)
	t.Logf("seed %d (set PARALLAX_TEST_SEED to repeat)", seed)
	worst := map[string]enginetest.Metric{}
	n := 0
	for i, c := range enginetest.Cases(dev, o) {
		if !attentionFamilyOps[c.Op] {
			continue
		}
		n++
		r := enginetest.Check(dev, c, seed+uint64(i))
		name := c.Op + "/" + c.Name + "/" + c.DType.String()
		if r.Err != nil {
			t.Errorf("%s: %v", name, r.Err)
			continue
		}
		if len(r.Metrics) == 0 {
			t.Errorf("%s: compared nothing", name)
		}
		for _, m := range r.Metrics {
			if !m.Pass() {
				t.Errorf("%s: %s: relative error %.3g exceeds %.3g", name, m.Name, m.Err, m.Tol)
			}
			key := c.Op + " " + c.DType.String()
			if w, ok := worst[key]; !ok || m.Err/m.Tol > w.Err/w.Tol {
				worst[key] = m
			}
		}
	}
	if n == 0 {
		t.Fatal("no attention-family conformance cases registered")
	}
	keys := make([]string, 0, len(worst))
	for k := range worst {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		m := worst[k]
		t.Logf("%-34s worst %-8s %.3g (tolerance %.3g)", k, m.Name, m.Err, m.Tol)
	}
}

// TestConformanceFlakySeeds repeats the inputs of attention-backward cases
// that failed a fixed bf16 tolerance on this backend (relative error 2.7e-2
// and 2.0e-2 against 1.6e-2) although the kernel rounds nothing but o and
// its outputs: dS = p (dO.v - dO.o) cancels when p concentrates on one key,
// so the rounding of the stored o is large next to dS. The suite's
// tolerance is now the rounding model's bound (docs/ENGINE.md), which these
// inputs must meet. The seeds are the cases' own (a run's seed plus the
// case's index at the time).
func TestConformanceFlakySeeds(t *testing.T) {
	dev := cpu.New()
	cases := enginetest.Cases(dev, enginetest.Options{DTypes: []engine.DType{engine.BF16}})
	for _, tc := range []struct {
		name string // op/variant/dtype
		seed uint64
	}{
		{"attention backward/B1 Hq4 Hkv1 Lq1 Lk20 D16 causal softmax/bf16", 1796151058094830798 + 131},
		{"attention backward/B1 Hq2 Hkv2 Lq9 Lk9 D8 causal parallax/bf16", 1796151064483959811 + 128},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var found bool
			for _, c := range cases {
				if c.Op+"/"+c.Name+"/"+c.DType.String() != tc.name {
					continue
				}
				found = true
				r := enginetest.Check(dev, c, tc.seed)
				if r.Err != nil {
					t.Fatal(r.Err)
				}
				for _, m := range r.Metrics {
					if !m.Pass() {
						t.Errorf("seed %d: %s: relative error %.3g exceeds %.3g", tc.seed, m.Name, m.Err, m.Tol)
					}
				}
			}
			if !found {
				t.Fatalf("no case %q", tc.name)
			}
		})
	}
}
