package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/model/safetensors"
)

// attnDims are the sizes of a test input.
type attnDims struct{ B, Hq, Hkv, Lq, Lk, D int }

func (d attnDims) qShape() []int { return []int{d.B, d.Hq, d.Lq, d.D} }
func (d attnDims) kShape() []int { return []int{d.B, d.Hkv, d.Lk, d.D} }

// refOpts are the options the float64 reference needs.
type refOpts struct {
	mech   string
	causal bool
	scale  float64
	window int
	lambda float64
}

// visible is the half-open key range query row i attends to.
func (o refOpts) visible(d attnDims, i int) (lo, hi int) {
	hi = d.Lk
	if o.causal {
		hi = min(d.Lk, i+d.Lk-d.Lq+1)
		if o.window > 0 {
			lo = max(0, i+d.Lk-d.Lq+1-o.window)
		}
	}
	return lo, hi
}

// refAttention is a naive float64 implementation of every mechanism, written
// straight from the definitions in docs/MATH.md. It returns the
// output o and, where the mechanism has them, lse, vbar, tbar (parallax,
// softmax) and rho_star, eta (lla).
func refAttention(d attnDims, o refOpts, in map[string][]float64) map[string][]float64 {
	q, k, v, r := in["q"], in["k"], in["v"], in["r"]
	probe := r
	if probe == nil && (o.mech == mechLinear || o.mech == mechAffine) {
		probe = q
	}
	D := d.D
	rows := d.B * d.Hq * d.Lq
	out := map[string][]float64{"o": make([]float64, rows*D)}
	switch o.mech {
	case mechParallax, mechSoftmax:
		out["lse"] = make([]float64, rows)
		if r != nil {
			out["vbar"] = make([]float64, rows*D)
			out["tbar"] = make([]float64, rows)
		}
	case mechLLA:
		out["rho_star"] = make([]float64, rows*D)
		out["eta"] = make([]float64, rows)
	}
	dot := func(a []float64, ai int, b []float64, bi int) float64 {
		s := 0.0
		for x := range D {
			s += a[ai+x] * b[bi+x]
		}
		return s
	}
	G := d.Hq / d.Hkv
	for b := range d.B {
		for h := range d.Hq {
			kvh := h / G
			for i := range d.Lq {
				row := (b*d.Hq+h)*d.Lq + i
				qi := row * D
				kv := func(j int) int { return ((b*d.Hkv+kvh)*d.Lk + j) * D }
				lo, hi := o.visible(d, i)
				n := hi - lo
				// Weights p over the visible keys.
				p := make([]float64, n)
				switch o.mech {
				case mechLinear, mechAffine:
					for j := range p {
						p[j] = 1 / float64(n)
					}
				default:
					m := math.Inf(-1)
					for j := range p {
						p[j] = o.scale * dot(q, qi, k, kv(lo+j))
						m = math.Max(m, p[j])
					}
					sum := 0.0
					for j := range p {
						p[j] = math.Exp(p[j] - m)
						sum += p[j]
					}
					for j := range p {
						p[j] /= sum
					}
					if out["lse"] != nil {
						out["lse"][row] = m + math.Log(sum)
					}
				}
				// Probe scores t = probe.k (unscaled).
				t := make([]float64, n)
				if probe != nil {
					for j := range t {
						t[j] = dot(probe, qi, k, kv(lo+j))
					}
				}
				tbar := 0.0
				for j := range p {
					tbar += p[j] * t[j]
				}
				oi := out["o"][qi : qi+D]
				switch o.mech {
				case mechParallax, mechSoftmax, mechAffine:
					// o = sum_j p_j (1 + tbar - t_j) v_j
					for j := range p {
						w := p[j] * (1 + tbar - t[j])
						for x := range D {
							oi[x] += w * v[kv(lo+j)+x]
						}
					}
					if vb := out["vbar"]; vb != nil {
						for j := range p {
							for x := range D {
								vb[qi+x] += p[j] * v[kv(lo+j)+x]
							}
						}
						out["tbar"][row] = tbar
					}
				case mechLinear:
					for j := range p {
						for x := range D {
							oi[x] += t[j] * v[kv(lo+j)+x]
						}
					}
				case mechLLA:
					// mu = sum p (k - q), Sig = sum p (k-q)(k-q)^T + lambda I,
					// rho = Sig^-1 mu, o = sum p (1 - rho.(k-q)) v / (1 - mu.rho).
					mu := make([]float64, D)
					sig := make([][]float64, D)
					for x := range sig {
						sig[x] = make([]float64, D)
						sig[x][x] = o.lambda
					}
					diff := func(j int) []float64 {
						dv := make([]float64, D)
						for x := range D {
							dv[x] = k[kv(lo+j)+x] - q[qi+x]
						}
						return dv
					}
					for j := range p {
						dj := diff(j)
						for x := range D {
							mu[x] += p[j] * dj[x]
							for y := range D {
								sig[x][y] += p[j] * dj[x] * dj[y]
							}
						}
					}
					rho := solve(sig, mu)
					copy(out["rho_star"][qi:qi+D], rho)
					// eta = (kbar - q)^T (Sigma_KK + lambda I)^-1 (kbar - q),
					// Sigma_KK = sum p (k - kbar)(k - kbar)^T.
					kbar := make([]float64, D)
					for j := range p {
						for x := range D {
							kbar[x] += p[j] * k[kv(lo+j)+x]
						}
					}
					skk := make([][]float64, D)
					for x := range skk {
						skk[x] = make([]float64, D)
						skk[x][x] = o.lambda
						for y := range D {
							for j := range p {
								skk[x][y] += p[j] * (k[kv(lo+j)+x] - kbar[x]) * (k[kv(lo+j)+y] - kbar[y])
							}
						}
					}
					c := make([]float64, D)
					for x := range D {
						c[x] = kbar[x] - q[qi+x]
					}
					sc := solve(skk, c)
					for x := range D {
						out["eta"][row] += c[x] * sc[x]
					}
					den := 1.0
					for x := range D {
						den -= mu[x] * rho[x]
					}
					for j := range p {
						dj := diff(j)
						w := 1.0
						for x := range D {
							w -= rho[x] * dj[x]
						}
						w *= p[j] / den
						for x := range D {
							oi[x] += w * v[kv(lo+j)+x]
						}
					}
				}
			}
		}
	}
	return out
}

// solve returns A^-1 b by Gaussian elimination with partial pivoting.
func solve(a [][]float64, b []float64) []float64 {
	n := len(b)
	m := make([][]float64, n)
	for i := range m {
		m[i] = append(append([]float64(nil), a[i]...), b[i])
	}
	for c := range n {
		p := c
		for r := c + 1; r < n; r++ {
			if math.Abs(m[r][c]) > math.Abs(m[p][c]) {
				p = r
			}
		}
		m[c], m[p] = m[p], m[c]
		for r := c + 1; r < n; r++ {
			f := m[r][c] / m[c][c]
			for x := c; x <= n; x++ {
				m[r][x] -= f * m[c][x]
			}
		}
	}
	x := make([]float64, n)
	for r := n - 1; r >= 0; r-- {
		s := m[r][n]
		for c := r + 1; c < n; c++ {
			s -= m[r][c] * x[c]
		}
		x[r] = s / m[r][r]
	}
	return x
}

// refGradient is the gradient of L = sum(o * do) with respect to input
// tensor name, by central finite differences of refAttention in float64.
func refGradient(d attnDims, o refOpts, in map[string][]float64, name string) []float64 {
	do := in["do"]
	loss := func() float64 {
		out := refAttention(d, o, in)["o"]
		s := 0.0
		for i := range out {
			s += out[i] * do[i]
		}
		return s
	}
	x := in[name]
	g := make([]float64, len(x))
	const h = 1e-5
	for i := range x {
		orig := x[i]
		x[i] = orig + h
		lp := loss()
		x[i] = orig - h
		lm := loss()
		x[i] = orig
		g[i] = (lp - lm) / (2 * h)
	}
	return g
}

// attnCase is one round trip through "parallax op attention".
type attnCase struct {
	name  string
	dims  attnDims
	meta  map[string]string
	r, do bool
	dtype string   // storage dtype of the inputs; "" is F32
	want  []string // output tensors expected, besides o
	grads map[string]string
}

func TestOpAttentionRoundTrip(t *testing.T) {
	gqa := attnDims{B: 2, Hq: 4, Hkv: 2, Lq: 3, Lk: 5, D: 4}
	sq := attnDims{B: 1, Hq: 2, Hkv: 1, Lq: 6, Lk: 6, D: 3}
	cases := []attnCase{
		{name: "parallax gqa causal offset", dims: gqa, r: true, do: true,
			want:  []string{"lse", "vbar", "tbar"},
			grads: map[string]string{"dq": "q", "dk": "k", "dv": "v", "dr": "r"}},
		{name: "parallax without r non-causal scaled", dims: gqa, do: true,
			meta:  map[string]string{"causal": "false", "scale": "0.7"},
			want:  []string{"lse"},
			grads: map[string]string{"dq": "q", "dk": "k", "dv": "v"}},
		{name: "parallax window", dims: sq, r: true, do: true,
			meta:  map[string]string{"window": "2", "mechanism": "parallax"},
			want:  []string{"lse", "vbar", "tbar"},
			grads: map[string]string{"dq": "q", "dk": "k", "dv": "v", "dr": "r"}},
		{name: "parallax bf16 inputs forward only", dims: gqa, r: true, dtype: "BF16",
			want: []string{"lse", "vbar", "tbar"}},
		{name: "parallax f64 inputs", dims: sq, r: true, dtype: "F64",
			want: []string{"lse", "vbar", "tbar"}},
		{name: "softmax", dims: gqa, do: true,
			meta:  map[string]string{"mechanism": "softmax"},
			want:  []string{"lse"},
			grads: map[string]string{"dq": "q", "dk": "k", "dv": "v"}},
		{name: "lla direct", dims: gqa,
			meta: map[string]string{"mechanism": "lla", "lambda": "0.5", "solver": "direct"},
			want: []string{"rho_star", "eta"}},
		{name: "lla cg default lambda", dims: sq,
			meta: map[string]string{"mechanism": "lla"},
			want: []string{"rho_star", "eta"}},
		{name: "linear probe r", dims: gqa, r: true, do: true,
			meta:  map[string]string{"mechanism": "linear"},
			grads: map[string]string{"dr": "r", "dk": "k", "dv": "v"}},
		{name: "affine-linear probe q", dims: sq, do: true,
			meta:  map[string]string{"mechanism": "affine-linear", "causal": "true"},
			grads: map[string]string{"dq": "q", "dk": "k", "dv": "v"}},
		{name: "linear non-causal probe q", dims: gqa,
			meta: map[string]string{"mechanism": "linear", "causal": "false"}},
	}
	for ci, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ro := refOpts{mech: mechParallax, causal: true, scale: 1 / math.Sqrt(float64(c.dims.D)), lambda: defaultLambda}
			if m := c.meta["mechanism"]; m != "" {
				ro.mech = m
			}
			if c.meta["causal"] == "false" {
				ro.causal = false
			}
			if s := c.meta["scale"]; s != "" {
				fmt.Sscan(s, &ro.scale)
			}
			if s := c.meta["window"]; s != "" {
				fmt.Sscan(s, &ro.window)
			}
			if s := c.meta["lambda"]; s != "" {
				fmt.Sscan(s, &ro.lambda)
			}

			// Random inputs, stored in the case's dtype; the reference uses
			// the values as stored.
			rng := rand.New(rand.NewPCG(uint64(ci), 7))
			names := []string{"q", "k", "v"}
			if c.r {
				names = append(names, "r")
			}
			if c.do {
				names = append(names, "do")
			}
			var tensors []safetensors.Tensor
			for _, n := range names {
				shape := c.dims.qShape()
				if n == "k" || n == "v" {
					shape = c.dims.kShape()
				}
				vals := make([]float64, prod(shape))
				std := 1.0
				if n == "r" {
					std = 0.3
				}
				for i := range vals {
					vals[i] = rng.NormFloat64() * std
				}
				tensors = append(tensors, makeTensor(t, n, c.dtype, shape, vals))
			}
			dir := t.TempDir()
			inPath, outPath := filepath.Join(dir, "in.safetensors"), filepath.Join(dir, "out.safetensors")
			if err := safetensors.Write(inPath, tensors, c.meta); err != nil {
				t.Fatal(err)
			}
			in := readBack(t, inPath, names)

			code, stdout, stderr := runCLI(t, "op", "attention", "--in", inPath, "--out", outPath, "--device", "cpu")
			if code != 0 {
				t.Fatalf("exit code %d\nstderr: %s", code, stderr)
			}
			if !strings.Contains(stdout, " on cpu:0: ") || !strings.Contains(stdout, outPath) {
				t.Errorf("summary %q does not name the device and output", stdout)
			}

			got := readBack(t, outPath, nil)
			wantNames := append([]string{"o"}, c.want...)
			for g := range c.grads {
				wantNames = append(wantNames, g)
			}
			if len(got) != len(wantNames) {
				t.Errorf("output has tensors %v, want %v", keys(got), wantNames)
			}
			ref := refAttention(c.dims, ro, in)
			for _, n := range append([]string{"o"}, c.want...) {
				compare(t, n, got[n], ref[n], 2e-4)
			}
			for g, x := range c.grads {
				compare(t, g, got[g], refGradient(c.dims, ro, in, x), 2e-3)
			}

			f, err := safetensors.Open(outPath)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			meta := f.Metadata()
			if meta["mechanism"] != ro.mech || meta["causal"] != fmt.Sprint(ro.causal) || meta["device"] != "cpu:0" {
				t.Errorf("output metadata %v does not record mechanism %s, causal %v, device cpu:0", meta, ro.mech, ro.causal)
			}
			for _, n := range f.Names() {
				if info, _ := f.Info(n); info.DType != "F32" {
					t.Errorf("output %s has dtype %s, want F32", n, info.DType)
				}
			}
		})
	}
}

func prod(s []int) int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

func keys(m map[string][]float64) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// makeTensor stores vals as a dtype tensor.
func makeTensor(t *testing.T, name, dtype string, shape []int, vals []float64) safetensors.Tensor {
	f32 := make([]float32, len(vals))
	for i, v := range vals {
		f32[i] = float32(v)
	}
	switch dtype {
	case "", "F32":
		return safetensors.F32Tensor(name, shape, f32)
	case "BF16":
		return safetensors.BF16Tensor(name, shape, f32)
	case "F16":
		return safetensors.F16Tensor(name, shape, f32)
	case "F64":
		return safetensors.F64Tensor(name, shape, vals)
	}
	t.Fatalf("makeTensor: dtype %s", dtype)
	return safetensors.Tensor{}
}

// readBack reads the named tensors (all if names is nil) as float64, as the
// CLI sees them (float32, after conversion).
func readBack(t *testing.T, path string, names []string) map[string][]float64 {
	t.Helper()
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if names == nil {
		names = f.Names()
	}
	out := map[string][]float64{}
	for _, n := range names {
		v, err := f.Float32(n)
		if err != nil {
			t.Fatal(err)
		}
		out[n] = make([]float64, len(v))
		for i, x := range v {
			out[n][i] = float64(x)
		}
	}
	return out
}

// compare checks got against want with an error bound of tol times the
// largest magnitude in want (at least 1).
func compare(t *testing.T, name string, got, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d values, want %d", name, len(got), len(want))
		return
	}
	scale := 1.0
	for _, w := range want {
		scale = math.Max(scale, math.Abs(w))
	}
	worst, at := 0.0, 0
	for i := range got {
		if e := math.Abs(got[i] - want[i]); e > worst || math.IsNaN(e) {
			worst, at = e, i
			if math.IsNaN(e) {
				break
			}
		}
	}
	if !(worst <= tol*scale) {
		t.Errorf("%s: max error %.3g at element %d (got %.6g, want %.6g), tolerance %.3g", name, worst, at, got[at], want[at], tol*scale)
	}
}

func TestOpAttentionExample(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "ex.safetensors")
	code, stdout, stderr := runCLI(t, "op", "attention", "--example", in, "--example-shape", "2,6,3,5,4", "--seed", "9")
	if code != 0 {
		t.Fatalf("exit code %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, in) {
		t.Errorf("stdout %q does not name the file", stdout)
	}
	got, err := readAttnInput(in)
	if err != nil {
		t.Fatal(err)
	}
	if got.q.shape.String() != "[2,6,5,4]" || got.k.shape.String() != "[2,3,5,4]" || got.r == nil || got.do == nil {
		t.Errorf("example input: q %v, k %v, r %v, do %v", got.q.shape, got.k.shape, got.r != nil, got.do != nil)
	}
	if got.opts.Mechanism != mechParallax || !got.opts.Causal {
		t.Errorf("example options %+v", got.opts)
	}
	for _, bad := range []string{"1,2,3", "1,4,3,8,8", "0,1,1,1,1"} {
		if code, _, stderr := runCLI(t, "op", "attention", "--example", in, "--example-shape", bad); code != 2 || !strings.Contains(stderr, "--example-shape") {
			t.Errorf("--example-shape %s: exit %d, stderr %q", bad, code, stderr)
		}
	}
}
