package model

import (
	"math"
	"testing"

	"github.com/parallax-engine/parallax/engine"
)

// TestInspector: the inspector's queries and probes are the same whether a
// sequence is prefilled at once or decoded token by token, and its
// correction strength over a prefilled sequence equals the COR of a
// training forward over it.
func TestInspector(t *testing.T) {
	const T, P = 12, 7
	cfg := testConfig(AttentionParallax, true)
	m := newTestModel(t, cfg, 31)
	defer m.Free()
	tokens, _ := testBatch(cfg, 1, T, 32)

	kv, err := m.NewKVCache(1, T)
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Free()
	in, err := m.NewInspector(kv)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Step(kv, tokens, 1, T, true); err != nil {
		t.Fatal(err)
	}
	read := func(ts []*engine.Tensor) [][]float32 {
		var out [][]float32
		for _, x := range ts {
			v, err := engine.Float32s(x)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, v)
		}
		return out
	}
	q, r := read(in.Q), read(in.R)
	cor := read([]*engine.Tensor{in.COR})[0]
	in.Free()
	if m.inspect != nil {
		t.Fatal("Free left the inspector attached")
	}

	if _, err := m.Forward(tokens, nil, 1, T); err != nil {
		t.Fatal(err)
	}
	want, err := m.CORs()
	if err != nil {
		t.Fatal(err)
	}
	for l := range want {
		if math.Abs(float64(cor[l])-want[l]) > 1e-4*math.Max(1, want[l]) || !(cor[l] > 0) {
			t.Errorf("layer %d: inspector COR %v, training forward %v", l, cor[l], want[l])
		}
	}

	// Prefill P tokens, then decode the rest one by one.
	kv.Reset()
	in2, err := m.NewInspector(kv)
	if err != nil {
		t.Fatal(err)
	}
	defer in2.Free()
	if _, err := m.Step(kv, tokens[:P], 1, P, true); err != nil {
		t.Fatal(err)
	}
	for i := P; i < T; i++ {
		if _, err := m.Step(kv, tokens[i:i+1], 1, 1, true); err != nil {
			t.Fatal(err)
		}
	}
	q2, r2 := read(in2.Q), read(in2.R)
	for l := range q {
		for i := range q[l] {
			if math.Abs(float64(q[l][i]-q2[l][i])) > 1e-4 || math.Abs(float64(r[l][i]-r2[l][i])) > 1e-4 {
				t.Fatalf("layer %d element %d: prefill q %v r %v, decode q %v r %v", l, i, q[l][i], r[l][i], q2[l][i], r2[l][i])
			}
		}
	}
	last := read([]*engine.Tensor{in2.COR})[0]
	for l, v := range last {
		if !(v > 0) || math.IsInf(float64(v), 0) {
			t.Errorf("layer %d: decode-step COR %v", l, v)
		}
	}
}

// TestInspectorSoftmax: a softmax model has no probes and no correction.
func TestInspectorSoftmax(t *testing.T) {
	cfg := testConfig(AttentionSoftmax, true)
	m := newTestModel(t, cfg, 33)
	defer m.Free()
	tokens, _ := testBatch(cfg, 1, 5, 34)
	kv, err := m.NewKVCache(1, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Free()
	if _, err := m.NewInspector(nil); err == nil {
		t.Error("an inspector without a cache was accepted")
	}
	in, err := m.NewInspector(kv)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Free()
	if in.R != nil {
		t.Error("softmax model: R should be nil")
	}
	if _, err := m.Step(kv, tokens, 1, 5, true); err != nil {
		t.Fatal(err)
	}
	cor, err := engine.Float32s(in.COR)
	if err != nil {
		t.Fatal(err)
	}
	for l, v := range cor {
		if v != 0 {
			t.Errorf("layer %d: COR %v, want 0", l, v)
		}
	}
	q, err := engine.Float32s(in.Q[0])
	if err != nil {
		t.Fatal(err)
	}
	D := cfg.HeadDim
	nonzero := func(pos int) bool { // head 0, position pos
		for _, v := range q[pos*D : (pos+1)*D] {
			if v != 0 {
				return true
			}
		}
		return false
	}
	if !nonzero(4) || nonzero(5) {
		t.Error("Q should hold positions 0..4 and nothing after")
	}
}
