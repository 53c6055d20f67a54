package engine_test

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/engine"
)

func TestAggregateProfile(t *testing.T) {
	one := func(name string, ms, flops, bytes float64) engine.ProfileEntry {
		return engine.ProfileEntry{Name: name, Calls: 1, Millis: ms, FLOPs: flops, Bytes: bytes}
	}
	for _, c := range []struct {
		name string
		in   []engine.ProfileEntry
		want engine.Profile
	}{
		{name: "empty", in: nil, want: engine.Profile{}},
		{name: "one", in: []engine.ProfileEntry{one("cast", 0.5, 0, 64)},
			want: engine.Profile{{Name: "cast", Calls: 1, Millis: 0.5, Bytes: 64}}},
		{
			name: "merged by name, slowest first",
			in: []engine.ProfileEntry{
				one("rmsnorm", 0.25, 0, 0),
				one("gemm bf16 8x8x8 nn", 1, 1024, 384),
				one("rmsnorm", 0.5, 0, 0),
				one("gemm bf16 8x8x8 nn", 2, 1024, 384),
			},
			want: engine.Profile{
				{Name: "gemm bf16 8x8x8 nn", Calls: 2, Millis: 3, FLOPs: 2048, Bytes: 768},
				{Name: "rmsnorm", Calls: 2, Millis: 0.75},
			},
		},
		{
			name: "equal times by name",
			in:   []engine.ProfileEntry{one("b", 1, 0, 0), one("c", 2, 0, 0), one("a", 1, 0, 0)},
			want: engine.Profile{{Name: "c", Calls: 1, Millis: 2}, {Name: "a", Calls: 1, Millis: 1}, {Name: "b", Calls: 1, Millis: 1}},
		},
		{
			name: "calls are summed, not counted",
			in:   []engine.ProfileEntry{{Name: "x", Calls: 3, Millis: 1}, {Name: "x", Calls: 2, Millis: 1}},
			want: engine.Profile{{Name: "x", Calls: 5, Millis: 2}},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := engine.AggregateProfile(c.in)
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("AggregateProfile:\n got %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestProfileRates(t *testing.T) {
	for _, c := range []struct {
		e           engine.ProfileEntry
		tflops, gbs float64
	}{
		{engine.ProfileEntry{Millis: 2, FLOPs: 4e12}, 2000, 0},
		{engine.ProfileEntry{Millis: 0.5, Bytes: 1e9}, 0, 2000},
		{engine.ProfileEntry{Millis: 1, FLOPs: 1e9, Bytes: 1e6}, 1, 1},
		{engine.ProfileEntry{Millis: 0, FLOPs: 1e9, Bytes: 1e6}, 0, 0}, // no time: no rate
		{engine.ProfileEntry{Millis: math.NaN(), FLOPs: 1e9}, 0, 0},
		{engine.ProfileEntry{Millis: 1}, 0, 0},
	} {
		if got := c.e.TFLOPs(); math.Abs(got-c.tflops) > 1e-9*c.tflops {
			t.Errorf("%+v: TFLOPs %v, want %v", c.e, got, c.tflops)
		}
		if got := c.e.GBs(); math.Abs(got-c.gbs) > 1e-9*c.gbs {
			t.Errorf("%+v: GBs %v, want %v", c.e, got, c.gbs)
		}
	}
}

func TestProfileTable(t *testing.T) {
	for _, c := range []struct {
		name string
		p    engine.Profile
		want string
	}{
		{
			name: "rates and shares",
			p: engine.Profile{
				{Name: "gemm bf16 1024x1024x1024 nt", Calls: 4, Millis: 3, FLOPs: 4 * 2 * 1024 * 1024 * 1024},
				{Name: "memset", Calls: 10, Millis: 0.5, Bytes: 5e8},
				{Name: "rmsnorm", Calls: 2, Millis: 0.5},
			},
			want: "" +
				"op                           calls     ms   share  achieved\n" +
				"gemm bf16 1024x1024x1024 nt      4  3.000   75.0%  2.863 TFLOP/s\n" +
				"memset                          10  0.500   12.5%  1000 GB/s\n" +
				"rmsnorm                          2  0.500   12.5%\n" +
				"total                           16  4.000  100.0%\n",
		},
		{
			name: "slow rates in smaller units",
			p: engine.Profile{
				{Name: "gemm f32 64x48x32 nn", Calls: 2, Millis: 4, FLOPs: 4e8},
				{Name: "fill buffer", Calls: 1, Millis: 0.05, Bytes: 12288},
				{Name: "copy buffer", Calls: 1, Millis: 1, Bytes: 1},
				{Name: "gemm f32 1x1x1 nn", Calls: 1, Millis: 1000, FLOPs: 2},
			},
			want: "" +
				"op                    calls        ms   share  achieved\n" +
				"gemm f32 64x48x32 nn      2     4.000    0.4%  100 GFLOP/s\n" +
				"fill buffer               1     0.050    0.0%  245.8 MB/s\n" +
				"copy buffer               1     1.000    0.1%  1 kB/s\n" +
				"gemm f32 1x1x1 nn         1  1000.000   99.5%  2e-06 MFLOP/s\n" +
				"total                     5  1005.050  100.0%\n",
		},
		{
			name: "empty",
			p:    engine.Profile{},
			want: "" +
				"op     calls     ms  share  achieved\n" +
				"total      0  0.000      -\n",
		},
		{
			name: "zero time",
			p:    engine.Profile{{Name: "fill", Calls: 1, Bytes: 4}},
			want: "" +
				"op     calls     ms  share  achieved\n" +
				"fill       1  0.000      -\n" +
				"total      1  0.000      -\n",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.p.Table(); got != c.want {
				t.Errorf("Table:\n%s\nwant:\n%s", got, c.want)
			}
		})
	}
}

func TestProfileTotals(t *testing.T) {
	p := engine.Profile{{Name: "a", Calls: 2, Millis: 1.5}, {Name: "b", Calls: 3, Millis: 0.25}}
	if got := p.TotalMillis(); got != 1.75 {
		t.Errorf("TotalMillis %v, want 1.75", got)
	}
	if got := p.TotalCalls(); got != 5 {
		t.Errorf("TotalCalls %v, want 5", got)
	}
	if !strings.HasSuffix(p.Table(), "total      5  1.750  100.0%\n") {
		t.Errorf("Table's total row:\n%s", p.Table())
	}
}

func TestGemmName(t *testing.T) {
	for _, c := range []struct {
		a, b, out      engine.DType
		m, n, k, batch int
		ta, tb         bool
		want           string
	}{
		{engine.BF16, engine.BF16, engine.BF16, 4096, 768, 768, 1, false, true, "gemm bf16 4096x768x768 nt"},
		{engine.BF16, engine.BF16, engine.F32, 768, 768, 4096, 1, true, false, "gemm bf16>f32 768x768x4096 tn"},
		{engine.F32, engine.F32, engine.F32, 64, 64, 32, 12, false, false, "gemm f32 64x64x32 nn batch 12"},
		{engine.F16, engine.BF16, engine.F32, 1, 2, 3, 1, true, true, "gemm f16*bf16>f32 1x2x3 tt"},
		{engine.F16, engine.BF16, engine.F16, 1, 2, 3, 0, false, false, "gemm f16*bf16>f16 1x2x3 nn"},
	} {
		if got := engine.GemmName(c.a, c.b, c.out, c.m, c.n, c.k, c.batch, c.ta, c.tb); got != c.want {
			t.Errorf("GemmName = %q, want %q", got, c.want)
		}
	}
}
