package vulkan_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/parallax-engine/parallax/engine"
)

// TestViewAttention: the viewer's maps are the softmax weights p (rows sum
// to 1) and the effective weights p(1 + tbar - t) (rows sum to 1), and
// summing v under the effective weights gives the Parallax attention output
// of the Attention op (docs/MATH.md section 2); without a probe both maps are p.
func TestViewAttention(t *testing.T) {
	const Hq, Hkv, L, D = 4, 2, 11, 8
	for _, d := range openAll(t) {
		rng := rand.New(rand.NewPCG(5, 6))
		mk := func(h int, scale float64) (*engine.Tensor, []float32) {
			v := make([]float32, h*L*D)
			for i := range v {
				v[i] = float32(scale * rng.NormFloat64())
			}
			x, err := engine.FromFloat32(d, engine.F32, v, 1, h, L, D)
			if err != nil {
				t.Fatal(err)
			}
			return x, v
		}
		q, _ := mk(Hq, 1)
		r, _ := mk(Hq, 0.3)
		k, _ := mk(Hkv, 1)
		v, vh := mk(Hkv, 1)
		o, err := d.Alloc(engine.F32, 1, Hq, L, D)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Attention(engine.AttentionArgs{Q: q, K: k, V: v, R: r, O: o, AttentionOpts: engine.AttentionOpts{Causal: true}}); err != nil {
			t.Fatal(err)
		}
		want, err := engine.Float32s(o)
		if err != nil {
			t.Fatal(err)
		}
		maps, err := d.Alloc(engine.F32, 2*L*L+L)
		if err != nil {
			t.Fatal(err)
		}
		for head := range Hq {
			for _, probe := range []*engine.Tensor{r, nil} {
				if err := d.ViewAttention(maps, q, probe, k, head, L, 0); err != nil {
					t.Fatal(err)
				}
				m, err := engine.Float32s(maps)
				if err != nil {
					t.Fatal(err)
				}
				kv := head / (Hq / Hkv)
				for i := range L {
					var sp, se, pmax float64
					for j := 0; j <= i; j++ {
						p, e := float64(m[i*L+j]), float64(m[L*L+i*L+j])
						sp += p
						se += e
						pmax = math.Max(pmax, p)
						if probe == nil && p != e {
							t.Fatalf("%s head %d: no probe, yet eff %v != p %v at (%d, %d)", d.Info().ID(), head, e, p, i, j)
						}
					}
					if math.Abs(sp-1) > 1e-5 || math.Abs(se-1) > 1e-4 || math.Abs(float64(m[2*L*L+i])-pmax) > 1e-7 {
						t.Fatalf("%s head %d row %d: sum p %v, sum eff %v, row max %v (want %v)", d.Info().ID(), head, i, sp, se, m[2*L*L+i], pmax)
					}
					if probe == nil {
						continue
					}
					for x := range D {
						var s float64
						for j := 0; j <= i; j++ {
							s += float64(m[L*L+i*L+j]) * float64(vh[(kv*L+j)*D+x])
						}
						if got := float64(want[(head*L+i)*D+x]); math.Abs(s-got) > 1e-4*(1+math.Abs(got)) {
							t.Fatalf("%s head %d row %d: sum_j eff v = %v, Attention gives %v", d.Info().ID(), head, i, s, got)
						}
					}
				}
			}
		}
		if err := d.ViewAttention(maps, q, r, k, Hq, L, 0); err == nil {
			t.Error("a head outside the model was accepted")
		}
		if err := d.ViewAttention(maps, q, r, k, 0, L+1, 0); err == nil {
			t.Error("a length past the capacity was accepted")
		}
		for _, x := range []*engine.Tensor{q, r, k, v, o, maps} {
			d.Free(x)
		}
	}
}
