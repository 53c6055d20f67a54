package enginetest

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/ref"
)

// Non-finite inputs. A NaN or an infinity in an op's input must come out
// where the float64 reference (plain IEEE arithmetic) puts it: a backend
// may not clamp, mask or skip it into a finite value (a max initialised to
// -inf whose exp(m - m) is guarded to 0 turns a NaN row into o = 0), nor
// leak it into outputs the reference keeps finite (a NaN key the causal
// mask hides, a NaN past a KV cache's length, a NaN logit of an ignored
// row or of a pad column). Each case injects one value into one tensor of
// random inputs; the metric (NonFiniteErr) is +Inf unless every NaN of the
// reference is NaN on the device and every infinity the same infinity, and
// is otherwise the relative error over the finite entries, held to a loose
// tolerance (nonFiniteTol: the regular cases hold them to the tight ones).

func init() { register(nonFiniteCases) }

// NonFiniteErr compares got with a reference want that may hold NaN and
// infinities: +Inf unless got is NaN wherever want is NaN, and NaN or
// want's infinity wherever want is infinite (an algebraically equal form
// may meet inf - inf where the reference's does not); otherwise RelErr over
// the entries where want is finite (where a non-finite got counts +Inf). A
// length mismatch is +Inf.
func NonFiniteErr(got, want []float64) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	var g, w []float64
	for i, x := range want {
		switch {
		case math.IsNaN(x):
			if !math.IsNaN(got[i]) {
				return math.Inf(1)
			}
		case math.IsInf(x, 0):
			if got[i] != x && !math.IsNaN(got[i]) {
				return math.Inf(1)
			}
		default:
			g, w = append(g, got[i]), append(w, x)
		}
	}
	return RelErr(g, w)
}

// nonFiniteTol is the tolerance of the finite entries of a non-finite
// case's outputs.
func nonFiniteTol(dt engine.DType) float64 {
	if dt == engine.F32 {
		return 1e-3
	}
	return 0.1
}

// nfMetrics gathers a non-finite case's metrics.
type nfMetrics struct {
	list []Metric
	err  error
	tol  float64
}

func (m *nfMetrics) cmp(name string, t *engine.Tensor, want []float64) {
	if m.err != nil || t == nil {
		return
	}
	got, err := Download(t)
	if err != nil {
		m.err = fmt.Errorf("%s: %w", name, err)
		return
	}
	m.list = append(m.list, Metric{Name: name, Err: NonFiniteErr(got, want), Tol: m.tol})
}

func (m *nfMetrics) do(err error) {
	if m.err == nil && err != nil {
		m.err = err
	}
}

func (m *nfMetrics) result() ([]Metric, error) { return m.list, m.err }

// poke is one injected value: x[at] = v in the input named in.
type poke struct {
	in string
	at int
	v  float64
}

func (p poke) String() string {
	return fmt.Sprintf("%v in %s[%d]", p.v, p.in, p.at)
}

// apply writes p into the named input of ins.
func (p poke) apply(ins map[string][]float64) {
	ins[p.in][p.at] = p.v
}

var (
	nan    = math.NaN()
	posInf = math.Inf(1)
	negInf = math.Inf(-1)
)

func nonFiniteCases(o Options, dt engine.DType) []Case {
	var cs []Case
	cs = append(cs, nonFiniteAttentionCases(dt)...)
	cs = append(cs, nonFiniteDecodeCases(dt)...)
	cs = append(cs, nonFiniteOpCases(dt)...)
	return cs
}

// ---- attention ----

func nonFiniteAttentionCases(dt engine.DType) []Case {
	// GQA, Lq < Lk (row i sees keys j <= i + 3): key 11 is seen by the
	// last row only, key 0 by every row.
	c := AttnShape{B: 1, Hq: 2, Hkv: 1, Lq: 9, Lk: 12, D: 8, Causal: true}
	q := func(h, i, x int) int { return (h*c.Lq+i)*c.D + x }
	k := func(j, x int) int { return j*c.D + x }
	fwd := []poke{
		{"q", q(0, 3, 1), nan},
		{"q", q(1, 5, 2), posInf},
		{"k", k(11, 0), nan},   // only the last row sees it: every other row stays finite
		{"k", k(4, 3), negInf}, // s = +-inf by the sign of q: +inf rows are NaN, -inf rows finite
		{"v", k(2, 5), nan},
		{"v", k(0, 7), posInf},
		{"v", k(9, 1), negInf},
		{"r", q(0, 1, 4), nan},
		{"r", q(1, 6, 0), posInf},
	}
	bwd := []poke{
		{"q", q(1, 2, 0), nan},
		{"k", k(5, 2), nan},
		{"k", k(11, 7), nan},
		{"v", k(3, 3), nan},
		{"r", q(0, 4, 5), nan},
		{"dO", q(1, 7, 6), nan},
		{"dO", q(0, 0, 1), posInf},
	}
	var cs []Case
	for _, backward := range []bool{false, true} {
		list, op := fwd, "attention"
		if backward {
			list, op = bwd, "attention backward"
		}
		for _, p := range list {
			for _, parallax := range []bool{false, true} {
				if p.in == "r" && !parallax {
					continue
				}
				cs = append(cs, Case{Op: op, Name: fmt.Sprintf("%v %s, %v", c, attnKind(parallax), p), DType: dt,
					Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
						return nonFiniteAttentionCase(dev, rng, dt, c, parallax, backward, p)
					}})
			}
		}
	}
	return cs
}

func nonFiniteAttentionCase(dev engine.Device, rng *rand.Rand, dt engine.DType, c AttnShape, parallax, backward bool, p poke) ([]Metric, error) {
	ts := NewTensors(dev)
	defer ts.Free()
	in := newAttnIn(rng, dt, c)
	p.apply(map[string][]float64{"q": in.q, "k": in.k, "v": in.v, "r": in.r, "dO": in.dO})
	f, err := attentionForwardOn(dev, ts, dt, c, in, parallax)
	if err != nil {
		return nil, err
	}
	var r []float64
	if parallax {
		r = in.r
	}
	d := c.Dims()
	m := nfMetrics{tol: nonFiniteTol(dt)}
	if !backward {
		o, vbar, tbar, lse := ref.Attention(d, in.q, in.k, in.v, r)
		m.cmp("o", f.O, o)
		m.cmp("lse", f.LSE, lse)
		if parallax {
			m.cmp("vbar", f.Vbar, vbar)
			m.cmp("tbar", f.Tbar, tbar)
		}
		return m.result()
	}
	a := engine.AttentionBackwardArgs{
		Q: f.Q, K: f.K, V: f.V, R: f.R, O: f.O, DO: ts.Up(dt, in.dO, c.QShape()...),
		LSE: f.LSE, Vbar: f.Vbar, Tbar: f.Tbar,
		DQ: ts.New(dt, c.QShape()...), DK: ts.New(dt, c.KVShape()...), DV: ts.New(dt, c.KVShape()...),
		AttentionOpts: c.Opts(),
	}
	if parallax {
		a.DR = ts.New(dt, c.QShape()...)
	}
	if err := ts.Err(); err != nil {
		return nil, err
	}
	m.do(dev.AttentionBackward(a))
	dq, dk, dv, dr := ref.AttentionBackward(d, in.q, in.k, in.v, r, in.dO)
	m.cmp("dq", a.DQ, dq)
	m.cmp("dk", a.DK, dk)
	m.cmp("dv", a.DV, dv)
	if parallax {
		m.cmp("dr", a.DR, dr)
	}
	return m.result()
}

// ---- decode attention ----

func nonFiniteDecodeCases(dt engine.DType) []Case {
	const B, Hq, Hkv, capacity, D = 2, 4, 2, 40, 16
	lens := []int{40, 17}
	cache := func(b, h, j, x int) int { return ((b*Hkv+h)*capacity+j)*D + x }
	type decCase struct {
		Lq    int
		pokes []poke
	}
	var cs []Case
	for _, dc := range []decCase{
		{1, []poke{
			{"q", (1*Hq+2)*D + 3, nan},
			{"k", cache(1, 0, 30, 4), nan},    // past sequence 1's length: never read
			{"v", cache(1, 1, 25, 0), posInf}, // likewise
			{"k", cache(0, 1, 7, 2), nan},
			{"v", cache(1, 0, 16, 9), nan}, // sequence 1's last valid entry
			{"v", cache(0, 0, 0, 1), negInf},
		}},
		// Two query positions: the first does not see the last valid key,
		// the second does.
		{2, []poke{
			{"v", cache(1, 0, 16, 3), nan},
			{"k", cache(1, 1, 16, 5), posInf},
			{"v", cache(0, 1, 39, 0), negInf},
		}},
	} {
		Lq := dc.Lq
		for _, p := range dc.pokes {
			for _, parallax := range []bool{false, true} {
				for _, splits := range []int{1, 3} {
					name := fmt.Sprintf("B%d Hq%d Hkv%d Lq%d Cap%d D%d lens%v splits%d %s, %v", B, Hq, Hkv, Lq, capacity, D, lens, splits, attnKind(parallax), p)
					cs = append(cs, Case{Op: "decode attention", Name: name, DType: dt,
						Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
							return nonFiniteDecodeCase(dev, rng, dt, ref.Dims{B: B, Hq: Hq, Hkv: Hkv, Lq: Lq, Lk: capacity, D: D, Scale: 1 / math.Sqrt(D)},
								lens, splits, parallax, p)
						}})
				}
			}
		}
	}
	return cs
}

func nonFiniteDecodeCase(dev engine.Device, rng *rand.Rand, dt engine.DType, d ref.Dims, lens []int, splits int, parallax bool, p poke) ([]Metric, error) {
	ts := NewTensors(dev)
	defer ts.Free()
	capacity := d.Lk
	qs, ks := []int{d.B, d.Hq, d.Lq, d.D}, []int{d.B, d.Hkv, capacity, d.D}
	nq, nk := d.B*d.Hq*d.Lq*d.D, d.B*d.Hkv*capacity*d.D
	q := Normal(rng, dt, nq, 1)
	kc, vc := Normal(rng, dt, nk, 1), Normal(rng, dt, nk, 1)
	var r []float64
	if parallax {
		r = Normal(rng, dt, nq, 1/math.Sqrt(float64(d.D)))
	}
	p.apply(map[string][]float64{"q": q, "k": kc, "v": vc})
	lv := make([]float64, len(lens))
	for b, n := range lens {
		lv[b] = float64(n)
	}
	a := engine.DecodeArgs{Q: ts.Up(dt, q, qs...), KCache: ts.Up(dt, kc, ks...), VCache: ts.Up(dt, vc, ks...),
		Lens: ts.Up(engine.I32, lv, d.B), O: ts.New(dt, qs...), Splits: splits}
	if parallax {
		a.R = ts.Up(dt, r, qs...)
	}
	if err := ts.Err(); err != nil {
		return nil, err
	}
	m := nfMetrics{tol: nonFiniteTol(dt)}
	m.do(dev.DecodeAttention(a))
	m.cmp("o", a.O, ref.DecodeAttention(d, q, r, kc, vc, capacity, lens))
	return m.result()
}

// ---- matmul, rmsnorm, cross entropy, swiglu, rope ----

func nonFiniteOpCases(dt engine.DType) []Case {
	var cs []Case
	// matmul [2, 7, 12] x [2, 12, 9] (or transposed), accumulating or not.
	const mb, mm, mk, mn = 2, 7, 12, 9
	for _, s := range []struct {
		ta, tb, acc bool
		p           poke
	}{
		{false, false, false, poke{"a", 3*mk + 5, nan}},
		{false, false, false, poke{"b", mk*mn + 4*mn + 2, posInf}},
		{true, true, false, poke{"a", 5*mm + 1, negInf}},
		{false, true, true, poke{"c", mm*mn + 8, nan}},
		{true, false, true, poke{"b", 7*mn + 3, nan}},
	} {
		name := fmt.Sprintf("batch %d %dx%dx%d transA=%v transB=%v", mb, mm, mk, mn, s.ta, s.tb)
		if s.acc {
			name += " accumulate"
		}
		cs = append(cs, Case{Op: "matmul", Name: name + ", " + s.p.String(), DType: dt, Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
			ts := NewTensors(dev)
			defer ts.Free()
			aShape, bShape := []int{mb, mm, mk}, []int{mb, mk, mn}
			if s.ta {
				aShape = []int{mb, mk, mm}
			}
			if s.tb {
				bShape = []int{mb, mn, mk}
			}
			av, bv, cv := Normal(rng, dt, mb*mm*mk, 1), Normal(rng, dt, mb*mk*mn, 1), Normal(rng, dt, mb*mm*mn, 1)
			s.p.apply(map[string][]float64{"a": av, "b": bv, "c": cv})
			a, b, out := ts.Up(dt, av, aShape...), ts.Up(dt, bv, bShape...), ts.Up(dt, cv, mb, mm, mn)
			if err := ts.Err(); err != nil {
				return nil, err
			}
			m := nfMetrics{tol: nonFiniteTol(dt)}
			m.do(dev.MatMul(out, a, b, engine.MatMulOpts{TransA: s.ta, TransB: s.tb, Accumulate: s.acc}))
			want := ref.MatMul(av, bv, mb, mm, mn, mk, s.ta, s.tb, false)
			if s.acc {
				want = ref.AddScaled(want, cv, 1, 1)
			}
			m.cmp("out", out, want)
			return m.result()
		}})
	}

	// rmsnorm [4, 32]: a NaN row, a row with +Inf (rstd 0: its finite
	// entries 0, the infinite one NaN), a NaN gain.
	const rows, n, eps = 4, 32, 1e-6
	for _, p := range []poke{{"x", 1*n + 5, nan}, {"x", 2*n + 9, posInf}, {"w", 7, nan}, {"w", 3, negInf}, {"g", 3*n + 1, nan}} {
		for _, backward := range []bool{false, true} {
			if p.in == "g" && !backward {
				continue
			}
			op := "rmsnorm"
			if backward {
				op = "rmsnorm backward"
			}
			cs = append(cs, Case{Op: op, Name: fmt.Sprintf("[%d,%d], %v", rows, n, p), DType: dt, Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
				ts := NewTensors(dev)
				defer ts.Free()
				xv, wv, gv := Normal(rng, dt, rows*n, 2), Normal(rng, dt, n, 1), Normal(rng, dt, rows*n, 1)
				p.apply(map[string][]float64{"x": xv, "w": wv, "g": gv})
				x, w, out, rstd := ts.Up(dt, xv, rows, n), ts.Up(dt, wv, n), ts.New(dt, rows, n), ts.New(engine.F32, rows)
				if err := ts.Err(); err != nil {
					return nil, err
				}
				m := nfMetrics{tol: nonFiniteTol(dt)}
				m.do(dev.RMSNorm(out, rstd, x, w, eps))
				wo, wr := ref.RMSNorm(xv, wv, rows, n, eps)
				if !backward {
					m.cmp("out", out, wo)
					m.cmp("rstd", rstd, wr)
					return m.result()
				}
				g, dx, dw := ts.Up(dt, gv, rows, n), ts.New(dt, rows, n), ts.New(dt, n)
				if err := ts.Err(); err != nil {
					return nil, err
				}
				m.do(dev.RMSNormBackward(dx, dw, g, x, w, rstd))
				wdx, wdw := ref.RMSNormBackward(gv, xv, wv, rows, n, eps)
				m.cmp("dX", dx, wdx)
				m.cmp("dW", dw, wdw)
				return m.result()
			}})
		}
	}

	// cross entropy [6, 40], classes 36 (pad columns hold NaN, never read),
	// row 1 ignored.
	const cn, cw, cc, ignore = 6, 40, 36, -100
	for _, p := range []poke{
		{"logits", 0*cw + 3, nan},     // a counted row: NaN loss and gradient
		{"logits", 2*cw + 10, posInf}, // max = +inf: exp(inf - inf) is NaN
		{"logits", 3*cw + 20, negInf}, // a class that cannot occur: finite
		{"logits", 4*cw + 0, negInf},  // the target itself: loss +inf
		{"logits", 1*cw + 6, nan},     // an ignored row: loss and gradient 0
	} {
		cs = append(cs, Case{Op: "cross entropy", Name: fmt.Sprintf("logits [%d,%d], classes %d, %v", cn, cw, cc, p), DType: dt,
			Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
				ts := NewTensors(dev)
				defer ts.Free()
				lv := Normal(rng, dt, cn*cw, 3)
				ti, tf := make([]int, cn), make([]float64, cn)
				for i := range ti {
					ti[i] = rng.IntN(cc)
					if i == 1 {
						ti[i] = ignore
					}
					if i == 4 {
						ti[i] = 0
					}
					if i == 3 && ti[i] == 20 {
						ti[i] = 21
					}
					tf[i] = float64(ti[i])
				}
				for i := range lv {
					if i%cw >= cc {
						lv[i] = nan
					}
				}
				p.apply(map[string][]float64{"logits": lv})
				logits, targets := ts.Up(dt, lv, cn, cw), ts.Up(engine.I32, tf, cn)
				loss, dl := ts.New(engine.F32, cn), ts.New(dt, cn, cw)
				if err := ts.Err(); err != nil {
					return nil, err
				}
				const scale = 0.2
				m := nfMetrics{tol: nonFiniteTol(dt)}
				m.do(dev.CrossEntropy(loss, dl, logits, targets, engine.CrossEntropyOpts{IgnoreIndex: ignore, GradScale: scale, Classes: cc}))
				wl, wd := ref.CrossEntropyPadded(lv, ti, cn, cw, cc, ignore, scale)
				m.cmp("loss", loss, wl)
				m.cmp("dLogits", dl, wd)
				return m.result()
			}})
	}

	// swiglu n 64 (silu(-inf) = -inf * 0 is NaN, as IEEE and the reference
	// have it).
	const sn = 64
	for _, p := range []poke{{"gate", 5, nan}, {"up", 9, nan}, {"gate", 12, posInf}, {"gate", 20, negInf}, {"up", 33, negInf}, {"dOut", 40, nan}} {
		for _, backward := range []bool{false, true} {
			if p.in == "dOut" && !backward {
				continue
			}
			op := "swiglu"
			if backward {
				op = "swiglu backward"
			}
			cs = append(cs, Case{Op: op, Name: fmt.Sprintf("n %d, %v", sn, p), DType: dt, Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
				ts := NewTensors(dev)
				defer ts.Free()
				gv, uv, dv := Normal(rng, dt, sn, 3), Normal(rng, dt, sn, 1), Normal(rng, dt, sn, 1)
				p.apply(map[string][]float64{"gate": gv, "up": uv, "dOut": dv})
				g, u := ts.Up(dt, gv, sn), ts.Up(dt, uv, sn)
				m := nfMetrics{tol: nonFiniteTol(dt)}
				if !backward {
					out := ts.New(dt, sn)
					if err := ts.Err(); err != nil {
						return nil, err
					}
					m.do(dev.SwiGLU(out, g, u))
					m.cmp("out", out, ref.SwiGLU(gv, uv))
					return m.result()
				}
				dy, dg, du := ts.Up(dt, dv, sn), ts.New(dt, sn), ts.New(dt, sn)
				if err := ts.Err(); err != nil {
					return nil, err
				}
				m.do(dev.SwiGLUBackward(dg, du, dy, g, u))
				wg, wu := ref.SwiGLUBackward(dv, gv, uv)
				m.cmp("dGate", dg, wg)
				m.cmp("dUp", du, wu)
				return m.result()
			}})
		}
	}

	// rope [1, 2, 4, 16], positions 0, 3, 1, 2: an infinity in the first
	// pair of position 0 (sin 0 = 0: its partner is inf * 0 = NaN) and of
	// position 3 (both infinite), a NaN.
	const rb, rh, rl, rd = 1, 2, 4, 16
	pos := []int{0, 3, 1, 2}
	for _, p := range []poke{{"x", 0, posInf}, {"x", (0*rl+1)*rd + 0, negInf}, {"x", (1*rl+2)*rd + 11, nan}} {
		for _, backward := range []bool{false, true} {
			op := "rope"
			if backward {
				op = "rope backward"
			}
			cs = append(cs, Case{Op: op, Name: fmt.Sprintf("[%d,%d,%d,%d] positions %v, %v", rb, rh, rl, rd, pos, p), DType: dt,
				Run: func(dev engine.Device, rng *rand.Rand) ([]Metric, error) {
					ts := NewTensors(dev)
					defer ts.Free()
					xv := Normal(rng, dt, rb*rh*rl*rd, 1)
					p.apply(map[string][]float64{"x": xv})
					pf := make([]float64, len(pos))
					for i, v := range pos {
						pf[i] = float64(v)
					}
					x, pt, out := ts.Up(dt, xv, rb, rh, rl, rd), ts.Up(engine.I32, pf, rl), ts.New(dt, rb, rh, rl, rd)
					if err := ts.Err(); err != nil {
						return nil, err
					}
					m := nfMetrics{tol: nonFiniteTol(dt)}
					if backward {
						m.do(dev.RoPEBackward(out, x, pt, 1e4))
					} else {
						m.do(dev.RoPE(out, x, pt, 1e4))
					}
					m.cmp("out", out, ref.RoPE(xv, rb, rh, rl, rd, pos, 1e4, backward))
					return m.result()
				}})
		}
	}
	return cs
}
