// Package enginetest is the conformance suite every engine backend must pass:
// each op, forward and backward, on fresh random inputs, compared with a
// float64 reference (package engine/ref), with per-dtype tolerances; every
// backward op is also compared with float64 central finite differences.
//
// A backend's tests call Run(t, dev); `parallax conformance` calls Cases and
// Check to print a table a user can read to certify their own device.
package enginetest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/parallax-engine/parallax/engine"
)

// Metric is one compared output of a case: its relative max-norm error
// max|got - want| / max|want| and the tolerance it must meet.
type Metric struct {
	Name string // output name: "o", "dq", "loss", ...
	Err  float64
	Tol  float64
}

// Pass reports whether the metric is within tolerance; NaN never passes.
func (m Metric) Pass() bool { return !math.IsNaN(m.Err) && m.Err <= m.Tol }

// Case is one conformance check: an op on one shape and dtype.
type Case struct {
	Op    string       // the op under test, e.g. "attention backward"
	Name  string       // the variant: shapes and options
	DType engine.DType // the dtype of the floating inputs
	// Run executes the op on dev with inputs drawn from rng and returns the
	// compared outputs. An error means the op failed to run.
	Run func(dev engine.Device, rng *rand.Rand) ([]Metric, error)
}

// Result is the outcome of running one Case.
type Result struct {
	Case    Case
	Metrics []Metric
	Err     error
	Elapsed time.Duration
}

// Pass reports whether the case ran and every metric is within tolerance.
func (r Result) Pass() bool {
	if r.Err != nil || len(r.Metrics) == 0 {
		return false
	}
	for _, m := range r.Metrics {
		if !m.Pass() {
			return false
		}
	}
	return true
}

// Worst returns the metric with the largest Err/Tol ratio (NaN first).
func (r Result) Worst() Metric {
	var w Metric
	wr := -1.0
	for _, m := range r.Metrics {
		var q float64
		switch {
		case math.IsNaN(m.Err):
			q = math.Inf(1)
		case m.Tol > 0:
			q = m.Err / m.Tol
		case m.Err > 0: // an exact metric that is not exact
			q = math.Inf(1)
		}
		if q > wr {
			w, wr = m, q
		}
	}
	return w
}

// Options select which cases run.
type Options struct {
	// DTypes to test; nil means the device's DeviceInfo.DTypes.
	DTypes []engine.DType
	// Short keeps to the smaller shapes (CI on slow devices).
	Short bool
	// Seed seeds the inputs; 0 picks a fresh seed (reported in failures).
	Seed uint64
}

var registry []func(o Options, dt engine.DType) []Case

// register adds a case generator; each file of the suite registers its ops.
func register(gen func(o Options, dt engine.DType) []Case) { registry = append(registry, gen) }

// Cases lists the suite for the given options and device.
func Cases(dev engine.Device, o Options) []Case {
	dts := o.DTypes
	if dts == nil {
		dts = dev.Info().DTypes
	}
	var out []Case
	for _, dt := range dts {
		for _, gen := range registry {
			out = append(out, gen(o, dt)...)
		}
	}
	return out
}

// Check runs one case with inputs seeded by seed, recovering a panic in the
// backend into an error so one broken op cannot hide the rest of the table.
func Check(dev engine.Device, c Case, seed uint64) (res Result) {
	res.Case = c
	start := time.Now()
	defer func() {
		if p := recover(); p != nil {
			res.Err = fmt.Errorf("panic: %v", p)
		}
		res.Elapsed = time.Since(start)
	}()
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	res.Metrics, res.Err = c.Run(dev, rng)
	if res.Err == nil {
		if err := dev.Sync(); err != nil {
			res.Err = err
		}
	}
	return res
}

// Seed returns o.Seed, or PARALLAX_TEST_SEED, or a fresh time-based seed.
func Seed(o Options) uint64 {
	if o.Seed != 0 {
		return o.Seed
	}
	if s := os.Getenv("PARALLAX_TEST_SEED"); s != "" {
		if v, err := strconv.ParseUint(s, 10, 64); err == nil {
			return v
		}
	}
	return uint64(time.Now().UnixNano())
}

// Run runs the whole suite on dev as subtests named op/variant/dtype.
func Run(t *testing.T, dev engine.Device, o Options) {
	t.Helper()
	seed := Seed(o)
	t.Logf("conformance on %s (%s), seed %d (set PARALLAX_TEST_SEED to repeat)", dev.Info().ID(), dev.Info().Name, seed)
	for i, c := range Cases(dev, o) {
		t.Run(c.Op+"/"+c.Name+"/"+c.DType.String(), func(t *testing.T) {
			r := Check(dev, c, seed+uint64(i))
			if r.Err != nil {
				t.Fatalf("%s %s: %v", c.Op, c.Name, r.Err)
			}
			if len(r.Metrics) == 0 {
				t.Fatalf("%s %s: compared nothing", c.Op, c.Name)
			}
			for _, m := range r.Metrics {
				if !m.Pass() {
					t.Errorf("%s: relative error %.3g exceeds %.3g", m.Name, m.Err, m.Tol)
				}
			}
		})
	}
}

// RelErr is the relative max-norm error max|got - want| / max|want| (the
// absolute error when want is all zero). Any NaN or Inf in got, or a length
// mismatch, yields +Inf; a NaN never compares as small.
func RelErr(got, want []float64) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	var num, den float64
	for i := range got {
		if math.IsNaN(got[i]) || math.IsInf(got[i], 0) {
			return math.Inf(1)
		}
		num = max(num, math.Abs(got[i]-want[i]))
		den = max(den, math.Abs(want[i]))
	}
	if den == 0 {
		return num
	}
	return num / den
}

// Tol is the relative max-norm tolerance for outputs computed from inputs of
// dtype dt by a computation of the given depth (the number of accumulated
// terms or chained roundings that dominate its error; 1 for elementwise ops).
// f32 allows sqrt(depth) growth of the unit roundoff with a safety factor;
// bf16 and f16 follow docs/MATH.md section 8 (outputs and gradients
// within 1e-2 relative for bf16).
func Tol(dt engine.DType, depth int) float64 {
	switch dt {
	case engine.BF16:
		return 1.6e-2
	case engine.F16:
		return 4e-3
	}
	return 16 * 0x1p-24 * math.Sqrt(float64(max(depth, 1))) * 4
}

// Rand returns n values uniform in [-scale, scale), rounded to dt, as float64.
func Rand(rng *rand.Rand, dt engine.DType, n int, scale float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = float64(dt.Round(float32((2*rng.Float64() - 1) * scale)))
	}
	return out
}

// Normal returns n standard normal values times scale, rounded to dt.
func Normal(rng *rand.Rand, dt engine.DType, n int, scale float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = float64(dt.Round(float32(rng.NormFloat64() * scale)))
	}
	return out
}

// Upload copies vals (rounded to dt) into a new tensor on dev.
func Upload(dev engine.Device, dt engine.DType, vals []float64, shape ...int) (*engine.Tensor, error) {
	if dt == engine.I32 {
		iv := make([]int32, len(vals))
		for i, v := range vals {
			iv[i] = int32(v)
		}
		return engine.FromInt32(dev, iv, shape...)
	}
	f := make([]float32, len(vals))
	for i, v := range vals {
		f[i] = float32(v)
	}
	return engine.FromFloat32(dev, dt, f, shape...)
}

// Download reads a tensor back as float64.
func Download(t *engine.Tensor) ([]float64, error) {
	f, err := engine.Float32s(t)
	if err != nil {
		return nil, err
	}
	out := make([]float64, len(f))
	for i, v := range f {
		out[i] = float64(v)
	}
	return out, nil
}

// Compare downloads t and returns its metric against want.
func Compare(name string, t *engine.Tensor, want []float64, tol float64) (Metric, error) {
	got, err := Download(t)
	if err != nil {
		return Metric{}, fmt.Errorf("%s: %w", name, err)
	}
	return Metric{Name: name, Err: RelErr(got, want), Tol: tol}, nil
}

// Grad is a central finite-difference gradient of f at x along the listed
// coordinates, step h: (f(x + h e_i) - f(x - h e_i)) / 2h, in float64. x is
// restored afterwards.
func Grad(f func(x []float64) float64, x []float64, idx []int, h float64) []float64 {
	out := make([]float64, len(idx))
	for n, i := range idx {
		old := x[i]
		x[i] = old + h
		fp := f(x)
		x[i] = old - h
		fm := f(x)
		x[i] = old
		out[n] = (fp - fm) / (2 * h)
	}
	return out
}

// Pick returns k distinct random indices in [0, n) (all of them if k >= n).
func Pick(rng *rand.Rand, n, k int) []int {
	if k >= n {
		idx := make([]int, n)
		for i := range idx {
			idx[i] = i
		}
		return idx
	}
	return rng.Perm(n)[:k]
}

// GradMetric compares device gradient values at idx with the float64
// finite-difference gradient fd at the same coordinates, relative to the
// largest magnitude of the full analytic reference gradient ref (so a
// coordinate with a tiny gradient is not held to a relative bound).
func GradMetric(name string, got []float64, ref []float64, idx []int, fd []float64, tol float64) Metric {
	scale := 0.0
	for _, v := range ref {
		scale = max(scale, math.Abs(v))
	}
	var e float64
	for n, i := range idx {
		if math.IsNaN(got[i]) || math.IsInf(got[i], 0) {
			return Metric{Name: name, Err: math.Inf(1), Tol: tol}
		}
		e = max(e, math.Abs(got[i]-fd[n]))
	}
	if scale > 0 {
		e /= scale
	}
	return Metric{Name: name, Err: e, Tol: tol}
}

// Tensors frees a group of tensors when the case ends.
type Tensors struct {
	dev  engine.Device
	list []*engine.Tensor
	err  error
}

// NewTensors starts a group on dev.
func NewTensors(dev engine.Device) *Tensors { return &Tensors{dev: dev} }

// Up uploads vals as a new tensor of dtype dt, remembering the first error.
func (ts *Tensors) Up(dt engine.DType, vals []float64, shape ...int) *engine.Tensor {
	if ts.err != nil {
		return nil
	}
	t, err := Upload(ts.dev, dt, vals, shape...)
	if err != nil {
		ts.err = err
		return nil
	}
	ts.list = append(ts.list, t)
	return t
}

// New allocates a zero tensor, remembering the first error.
func (ts *Tensors) New(dt engine.DType, shape ...int) *engine.Tensor {
	if ts.err != nil {
		return nil
	}
	t, err := ts.dev.Alloc(dt, shape...)
	if err != nil {
		ts.err = err
		return nil
	}
	ts.list = append(ts.list, t)
	return t
}

// Err is the first allocation or upload error.
func (ts *Tensors) Err() error { return ts.err }

// Free releases every tensor of the group.
func (ts *Tensors) Free() {
	for _, t := range ts.list {
		ts.dev.Free(t)
	}
	ts.list = nil
}
