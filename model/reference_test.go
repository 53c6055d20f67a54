package model

import (
	"math"
	"testing"

	"github.com/parallax-engine/parallax/engine"
)

// refModel is a compact float64 reimplementation of the whole model,
// written straight from docs/MATH.md sections 9 and 2
// (the direct form o_i = sum_j p_ij (1 + tbar_i - t_ij) v_j), sharing no code
// with the engine path. The engine's forward is compared with it, and the
// engine's gradients with its central finite differences.
type refModel struct {
	cfg Config
	w   map[string][]float64
}

// refFrom downloads m's parameters as float64.
func refFrom(t *testing.T, m *Model) *refModel {
	t.Helper()
	r := &refModel{cfg: m.Config, w: map[string][]float64{}}
	for _, p := range m.Params() {
		v, err := engine.Float32s(p.W)
		if err != nil {
			t.Fatal(err)
		}
		w := make([]float64, len(v))
		for i, x := range v {
			w[i] = float64(x)
		}
		r.w[p.Name] = w
	}
	return r
}

func refRMSNorm(x []float64, rows, n int, g []float64, eps float64) []float64 {
	out := make([]float64, len(x))
	for i := range rows {
		row := x[i*n : (i+1)*n]
		var ss float64
		for _, v := range row {
			ss += v * v
		}
		rstd := 1 / math.Sqrt(ss/float64(n)+eps)
		for j, v := range row {
			out[i*n+j] = v * rstd * g[j]
		}
	}
	return out
}

// refLinear is y = x W^T, x [rows, in], W [out, in].
func refLinear(x []float64, rows, in int, w []float64, out int) []float64 {
	y := make([]float64, rows*out)
	for i := range rows {
		for o := range out {
			var s float64
			for k := range in {
				s += x[i*in+k] * w[o*in+k]
			}
			y[i*out+o] = s
		}
	}
	return y
}

// refRoPE rotates x [B, T, H, D] in place at positions t (rotate half).
func refRoPE(x []float64, B, T, H, D int, theta float64) {
	half := D / 2
	for b := range B {
		for t := range T {
			for h := range H {
				row := x[((b*T+t)*H+h)*D:]
				for i := range half {
					ang := float64(t) * math.Pow(theta, -2*float64(i)/float64(D))
					c, s := math.Cos(ang), math.Sin(ang)
					x0, x1 := row[i], row[i+half]
					row[i], row[i+half] = x0*c-x1*s, x1*c+x0*s
				}
			}
		}
	}
}

// forward returns the logits [B*T, V] and the mean loss over counted
// targets (0 if targets is nil).
func (r *refModel) forward(tokens, targets []int32, B, T int) ([]float64, float64) {
	c := r.cfg
	N, d, Hq, Hkv, D, F, V := B*T, c.Dim, c.Heads, c.KVHeads, c.HeadDim, c.FFN, c.Vocab
	G := Hq / Hkv
	eps := c.NormEps
	emb := r.w["model.embed_tokens.weight"]
	x := make([]float64, N*d)
	for n, tok := range tokens {
		copy(x[n*d:(n+1)*d], emb[int(tok)*d:])
	}
	for l := range c.Layers {
		w := func(s string) []float64 { return r.w["model.layers."+itoa(l)+"."+s+".weight"] }
		h := refRMSNorm(x, N, d, w("input_layernorm"), eps)
		q := refLinear(h, N, d, w("self_attn.q_proj"), Hq*D)
		k := refLinear(h, N, d, w("self_attn.k_proj"), Hkv*D)
		v := refLinear(h, N, d, w("self_attn.v_proj"), Hkv*D)
		q = refRMSNorm(q, N*Hq, D, w("self_attn.q_norm"), eps)
		k = refRMSNorm(k, N*Hkv, D, w("self_attn.k_norm"), eps)
		refRoPE(q, B, T, Hq, D, c.RopeTheta)
		refRoPE(k, B, T, Hkv, D, c.RopeTheta)
		var rr []float64
		if c.Parallax() {
			rr = refLinear(h, N, d, w("self_attn.r_proj"), Hq*D)
			rr = refRMSNorm(rr, N*Hq, D, w("self_attn.r_norm"), eps)
			if c.ProbeGate {
				z := refLinear(h, N, d, w("self_attn.r_gate"), Hq)
				for i, zi := range z {
					s := 1 / (1 + math.Exp(-zi))
					for j := i * D; j < (i+1)*D; j++ {
						rr[j] *= s
					}
				}
			}
			refRoPE(rr, B, T, Hq, D, c.RopeTheta)
		}
		att := make([]float64, N*Hq*D)
		scale := 1 / math.Sqrt(float64(D))
		for b := range B {
			for hh := range Hq {
				kh := hh / G
				for i := range T {
					qi := q[((b*T+i)*Hq+hh)*D:][:D]
					p := make([]float64, i+1)
					tt := make([]float64, i+1)
					mx := math.Inf(-1)
					for j := 0; j <= i; j++ {
						kj := k[((b*T+j)*Hkv+kh)*D:][:D]
						var s float64
						for e := range D {
							s += qi[e] * kj[e]
						}
						p[j] = s * scale
						mx = math.Max(mx, p[j])
						if rr != nil {
							ri := rr[((b*T+i)*Hq+hh)*D:][:D]
							var u float64
							for e := range D {
								u += ri[e] * kj[e]
							}
							tt[j] = u
						}
					}
					var z float64
					for j := range p {
						p[j] = math.Exp(p[j] - mx)
						z += p[j]
					}
					var tbar float64
					for j := range p {
						p[j] /= z
						tbar += p[j] * tt[j]
					}
					o := att[((b*T+i)*Hq+hh)*D:][:D]
					for j := range p {
						vj := v[((b*T+j)*Hkv+kh)*D:][:D]
						wgt := p[j] * (1 + tbar - tt[j])
						for e := range D {
							o[e] += wgt * vj[e]
						}
					}
				}
			}
		}
		ao := refLinear(att, N, Hq*D, w("self_attn.o_proj"), d)
		for i := range x {
			x[i] += ao[i]
		}
		h2 := refRMSNorm(x, N, d, w("post_attention_layernorm"), eps)
		gate := refLinear(h2, N, d, w("mlp.gate_proj"), F)
		up := refLinear(h2, N, d, w("mlp.up_proj"), F)
		for i, g := range gate {
			gate[i] = g / (1 + math.Exp(-g)) * up[i]
		}
		mo := refLinear(gate, N, F, w("mlp.down_proj"), d)
		for i := range x {
			x[i] += mo[i]
		}
	}
	xf := refRMSNorm(x, N, d, r.w["model.norm.weight"], eps)
	head := r.w["lm_head.weight"]
	if c.TiedEmbeddings {
		head = emb
	}
	logits := refLinear(xf, N, d, head, V)
	if targets == nil {
		return logits, 0
	}
	var sum float64
	var count int
	for n, tg := range targets {
		if tg == IgnoreIndex {
			continue
		}
		row := logits[n*V : (n+1)*V]
		mx := math.Inf(-1)
		for _, v := range row {
			mx = math.Max(mx, v)
		}
		var z float64
		for _, v := range row {
			z += math.Exp(v - mx)
		}
		sum += mx + math.Log(z) - row[tg]
		count++
	}
	if count == 0 {
		return logits, 0
	}
	return logits, sum / float64(count)
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}
