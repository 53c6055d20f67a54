package model

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/engine"
)

// TestGradHook checks that Backward's hook sees every parameter exactly
// once, the final norm (and untied head) first, then the layers from the
// last to the first, the embedding last; that the gradients it sees are
// already final (bitwise those Backward returns with); and that a second
// model without a hook computes the same gradients.
func TestGradHook(t *testing.T) {
	const B, T = 2, 5
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			cfg := testConfig(v.attention, v.tied)
			cfg.ProbeGate = v.gate
			cfg.Layers = 3
			m, plain := newTestModel(t, cfg, 1), newTestModel(t, cfg, 1)
			tokens, targets := testBatch(cfg, B, T, 2)

			var seen []*Param
			atHook := map[*Param][]float32{}
			m.SetGradHook(func(ps []*Param) error {
				for _, p := range ps {
					v, err := engine.Float32s(p.G)
					if err != nil {
						return err
					}
					atHook[p] = v
				}
				seen = append(seen, ps...)
				return nil
			})
			for _, mm := range []*Model{m, plain} {
				if _, err := mm.Forward(tokens, targets, B, T); err != nil {
					t.Fatal(err)
				}
				if err := mm.Backward(1); err != nil {
					t.Fatal(err)
				}
			}

			// Once each, in GradOrder's order, which is the reverse layer order.
			var want []*Param
			for _, g := range m.GradOrder() {
				want = append(want, g...)
			}
			if !slices.Equal(seen, want) {
				t.Fatalf("the hook saw %d parameters, not GradOrder's %d in order", len(seen), len(want))
			}
			if len(seen) != len(m.Params()) {
				t.Fatalf("the hook saw %d parameters of %d", len(seen), len(m.Params()))
			}
			layer := func(p *Param) int {
				for l := range m.Blocks {
					if slices.Contains(m.Blocks[l].params(), p) {
						return l
					}
				}
				return -1
			}
			last := cfg.Layers
			for i, p := range seen {
				switch l := layer(p); {
				case p == m.Embed:
					if i != len(seen)-1 {
						t.Errorf("the embedding came at %d of %d", i, len(seen))
					}
				case l < 0: // the final norm, the untied head
					if last != cfg.Layers {
						t.Errorf("%s came after a layer", p.Name)
					}
				case l > last:
					t.Errorf("%s (layer %d) came after layer %d", p.Name, l, last)
				default:
					last = l
				}
			}
			for i, p := range m.Params() {
				final, err := engine.Float32s(p.G)
				if err != nil {
					t.Fatal(err)
				}
				other, err := engine.Float32s(plain.Params()[i].G)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(atHook[p], final) {
					t.Errorf("%s: the gradient changed after the hook saw it", p.Name)
				}
				if !slices.Equal(final, other) {
					t.Errorf("%s: the gradient differs from the model's without a hook", p.Name)
				}
			}

			// An error from the hook stops Backward and comes back.
			boom := errors.New("boom")
			m.SetGradHook(func(ps []*Param) error { return boom })
			if _, err := m.Forward(tokens, targets, B, T); err != nil {
				t.Fatal(err)
			}
			if err := m.Backward(1); !errors.Is(err, boom) || !strings.Contains(err.Error(), "gradient hook") {
				t.Errorf("Backward with a failing hook: %v", err)
			}
			m.SetGradHook(nil)
			if _, err := m.Forward(tokens, targets, B, T); err != nil {
				t.Fatal(err)
			}
			if err := m.Backward(1); err != nil {
				t.Errorf("Backward after removing the hook: %v", err)
			}
		})
	}
}
