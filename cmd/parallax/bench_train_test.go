package main

import (
	"encoding/json"
	"math"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/engine"
)

// TestBenchTrain runs "bench train" on the CPU with the tiny preset and a
// tiny shape (the text and the JSON report) and checks that bad input is a
// usage error.
func TestBenchTrain(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // the run's temporary directory must be gone afterwards
	base := []string{"bench", "train", "--device", "cpu", "--config", "tiny",
		"--batch", "2", "--seq", "32", "--steps", "4", "--warmup", "1"}
	with := func(extra ...string) []string { return append(append([]string(nil), base...), extra...) }

	cases := []struct {
		name  string
		args  []string
		code  int
		want  string // in stdout for exit 0, in stderr otherwise
		check func(t *testing.T, stdout string)
	}{
		{name: "text", args: base, want: "train parallax tiny [2,32], muon, bpe tokens in a 4096 vocabulary, on cpu:0", check: checkBenchTrainText},
		{name: "json", args: with("--attention", "softmax", "--json", "--peak-tflops", "0.5"),
			want: `"op": "train softmax"`, check: checkBenchTrainJSON},

		{name: "unknown config", args: with("--config", "huge"), code: 2, want: `--config: unknown model preset "huge"`},
		{name: "untrainable preset", args: with("--config", "mad"), code: 2, want: "--config mad: its 16-token vocabulary has no tokenizer"},
		{name: "steps equal warmup", args: with("--steps", "3", "--warmup", "3"), code: 2, want: "--steps 3 must be more than --warmup 3"},
		{name: "steps below warmup", args: with("--steps", "1", "--warmup", "2"), code: 2, want: "--steps 1 must be more than --warmup 2"},
		{name: "negative warmup", args: with("--warmup", "-1"), code: 2, want: "--warmup -1 must be >= 0"},
		{name: "zero batch", args: with("--batch", "0"), code: 2, want: "--batch 0 must be >= 1"},
		{name: "negative batch", args: with("--batch", "-4"), code: 2, want: "--batch -4 must be >= 1"},
		{name: "zero seq", args: with("--seq", "0"), code: 2, want: "--seq 0 must be >= 1"},
		{name: "unknown optimizer", args: with("--optimizer", "sgd"), code: 2, want: `--optimizer "sgd": want muon or adamw`},
		{name: "adamw", args: with("--optimizer", "adamw", "--steps", "2"), want: "train parallax tiny [2,32], adamw, bpe tokens"},
		{name: "unknown attention", args: with("--attention", "linear"), code: 2, want: `--attention "linear": want parallax or softmax`},
		{name: "negative peak", args: with("--peak-tflops", "-1"), code: 2, want: "--peak-tflops -1"},
		{name: "NaN peak", args: with("--peak-tflops", "NaN"), code: 2, want: "--peak-tflops NaN"},
		{name: "op flag", args: with("--shape", "1,2,3"), code: 2, want: "unknown flag: --shape"},
		{name: "positional", args: with("tiny"), code: 2, want: `unexpected argument "tiny"`},
		{name: "unknown device", args: with("--device", "nope:0"), code: 1, want: `parallax bench: bench train: open device "nope:0"`},
		{name: "profile without timers", args: with("--profile"), code: 2, want: "--profile: cpu:0 ("},
		{name: "profile not a bool", args: with("--profile=often"), code: 2, want: `invalid argument "often" for "--profile" flag`},

		{name: "help", args: []string{"bench", "train", "--help"}, want: "--warmup int"},
		{name: "help lists profile", args: []string{"bench", "train", "--help"}, want: "time every op of the first step after the warm-up"},
		{name: "bench help lists profile", args: []string{"bench", "--help"}, want: "--profile                 also time every op of step W+1"},
		{name: "bench help lists train", args: []string{"bench", "--help"}, want: "parallax bench train [--device ID]"},
		{name: "missing kind", args: []string{"bench"}, code: 2, want: "attention, decode, matmul or train"},
		{name: "unknown kind", args: []string{"bench", "frob"}, code: 2, want: `unknown benchmark "frob": attention, decode, matmul or train`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, c.args...)
			got := stdout
			if c.code != 0 {
				got = stderr
			}
			if code != c.code || !strings.Contains(got, c.want) {
				t.Fatalf("parallax %s: exit %d (want %d), want %q in\nstdout: %s\nstderr: %s",
					strings.Join(c.args, " "), code, c.code, c.want, stdout, stderr)
			}
			if c.check != nil {
				c.check(t, stdout)
			}
			if left, _ := os.ReadDir(tmp); len(left) > 0 {
				t.Errorf("left behind in the temporary directory: %s", left[0].Name())
			}
		})
	}
}

// checkBenchTrainText checks the one-line report of the tiny run.
func checkBenchTrainText(t *testing.T, stdout string) {
	t.Helper()
	field := func(re string) float64 {
		t.Helper()
		m := regexp.MustCompile(re).FindStringSubmatch(stdout)
		if m == nil {
			t.Fatalf("no %s in %q", re, stdout)
		}
		v, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			t.Fatalf("%s in %q: %v", re, stdout, err)
		}
		return v
	}
	if tps := field(`, (\S+) tokens/s`); !(tps > 0) {
		t.Errorf("tokens/s %v, want > 0", tps)
	}
	if ms := field(`: (\S+) ms/step`); !(ms > 0) {
		t.Errorf("step time %v ms, want > 0", ms)
	}
	if loss := field(`final loss (\S+) \[`); math.IsNaN(loss) || math.IsInf(loss, 0) || loss <= 0 {
		t.Errorf("final loss %v, want a finite positive loss", loss)
	}
	for _, want := range []string{"1.38M parameters", "[wall clock, median of 3 steps after 1 warm-up]"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("report lacks %q: %s", want, stdout)
		}
	}
	if strings.Contains(stdout, "MFU") {
		t.Errorf("MFU reported without a known peak: %s", stdout)
	}
}

// checkBenchTrainJSON checks the JSON report of the tiny softmax run with a
// 0.5 TFLOP/s peak.
func checkBenchTrainJSON(t *testing.T, stdout string) {
	t.Helper()
	var fields map[string]any
	if err := json.Unmarshal([]byte(stdout), &fields); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout)
	}
	for _, k := range []string{"device", "op", "config", "batch", "seq", "steps", "warmup", "params",
		"ms", "tokens_per_s", "mfu", "peak_tflops", "loss", "timer"} {
		if _, ok := fields[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, stdout)
		}
	}
	var r benchTrainResult
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatal(err)
	}
	if r.Device != "cpu:0" || r.Config != "tiny" || r.Batch != 2 || r.Seq != 32 || r.Steps != 4 || r.Warmup != 1 {
		t.Errorf("run settings: %+v", r)
	}
	if !(r.TokensPerS > 0) || !(r.Millis > 0) || r.Params <= 0 {
		t.Errorf("tokens/s %v, step %v ms, %d parameters: want all positive", r.TokensPerS, r.Millis, r.Params)
	}
	if math.IsNaN(r.Loss) || math.IsInf(r.Loss, 0) || r.Loss <= 0 {
		t.Errorf("final loss %v, want a finite positive loss", r.Loss)
	}
	if want := 64 / (r.Millis / 1e3); math.Abs(r.TokensPerS-want) > 1e-9*want {
		t.Errorf("tokens/s %v, want batch*seq / step time = %v", r.TokensPerS, want)
	}
	if want := 6 * float64(r.Params) * r.TokensPerS / 0.5e12; r.PeakTFLOPs != 0.5 || math.Abs(r.MFU-want) > 1e-9*want {
		t.Errorf("MFU %v against %v TFLOP/s, want 6 N tokens/s / peak = %v against 0.5", r.MFU, r.PeakTFLOPs, want)
	}
}

func TestDevicePeakTFLOPs(t *testing.T) {
	for _, c := range []struct {
		feature string
		want    float64
	}{
		{"989", 989},
		{"989 (bf16 dense)", 989},
		{"", 0},
		{"fast", 0},
		{"-5", 0},
		{"+Inf", 0},
	} {
		info := engine.DeviceInfo{Features: map[string]string{"peak_tflops": c.feature}}
		if got := devicePeakTFLOPs(info); got != c.want {
			t.Errorf("peak_tflops %q: got %v, want %v", c.feature, got, c.want)
		}
	}
	if got := devicePeakTFLOPs(engine.DeviceInfo{}); got != 0 {
		t.Errorf("no features: got %v, want 0", got)
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{
		{[]float64{5}, 5},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{9, 1, 1, 1, 9}, 1},
	} {
		if got := median(append([]float64(nil), c.xs...)); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.xs, got, c.want)
		}
	}
	if got := median(nil); !math.IsNaN(got) {
		t.Errorf("median of nothing = %v, want NaN", got)
	}
}

// TestWriteBenchProfile checks the breakdown printed after the result line
// of "bench train --profile".
func TestWriteBenchProfile(t *testing.T) {
	p := engine.Profile{
		{Name: "gemm bf16 8192x768x768 nt", Calls: 12, Millis: 6, FLOPs: 12 * 2 * 8192 * 768 * 768},
		{Name: "attn_fwd", Calls: 12, Millis: 3},
		{Name: "memset", Calls: 40, Millis: 1, Bytes: 2e9},
	}
	for _, c := range []struct {
		name string
		r    benchTrainResult
		want string
	}{
		{
			name: "against the median step",
			r:    benchTrainResult{Millis: 12.5, ProfileStep: 6, Profile: p},
			want: "\nprofile of step 6 (device timers): 64 ops, 10 ms of device time (80% of the median step)\n" +
				"op                         calls      ms   share  achieved\n" +
				"gemm bf16 8192x768x768 nt     12   6.000   60.0%  19.33 TFLOP/s\n" +
				"attn_fwd                      12   3.000   30.0%\n" +
				"memset                        40   1.000   10.0%  2000 GB/s\n" +
				"total                         64  10.000  100.0%\n",
		},
		{
			name: "no ops",
			r:    benchTrainResult{Millis: 1, ProfileStep: 2, Profile: engine.Profile{}},
			want: "\nprofile of step 2 (device timers): 0 ops, 0 ms of device time (0% of the median step)\n" +
				"op     calls     ms  share  achieved\n" +
				"total      0  0.000      -\n",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b strings.Builder
			writeBenchProfile(&b, c.r)
			if b.String() != c.want {
				t.Errorf("got:\n%s\nwant:\n%s", b.String(), c.want)
			}
		})
	}
}

// TestBenchTrainProfileJSON checks the "profile" array of --json and that
// it is absent without --profile.
func TestBenchTrainProfileJSON(t *testing.T) {
	r := benchTrainResult{Device: "cuda:0", Op: "train parallax", ProfileStep: 6, Profile: engine.Profile{
		{Name: "gemm bf16 64x64x64 nn", Calls: 2, Millis: 0.5, FLOPs: 2 * 2 * 64 * 64 * 64, Bytes: 2 * 3 * 64 * 64 * 2},
		{Name: "rmsnorm", Calls: 1, Millis: 0.25},
	}}
	var b strings.Builder
	if err := writeJSON(&b, r); err != nil {
		t.Fatal(err)
	}
	var got struct {
		ProfileStep int              `json:"profile_step"`
		Profile     []map[string]any `json:"profile"`
	}
	if err := json.Unmarshal([]byte(b.String()), &got); err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	if got.ProfileStep != 6 || len(got.Profile) != 2 {
		t.Fatalf("profile_step %d, %d profile entries; want 6 and 2:\n%s", got.ProfileStep, len(got.Profile), b.String())
	}
	want := []map[string]any{
		{"name": "gemm bf16 64x64x64 nn", "calls": 2.0, "ms": 0.5, "flops": 1048576.0, "bytes": 49152.0},
		{"name": "rmsnorm", "calls": 1.0, "ms": 0.25}, // no flops or bytes: unknown
	}
	for i := range want {
		if !reflect.DeepEqual(got.Profile[i], want[i]) {
			t.Errorf("profile[%d] = %v, want %v", i, got.Profile[i], want[i])
		}
	}

	b.Reset()
	if err := writeJSON(&b, benchTrainResult{Device: "cpu:0"}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "profile") {
		t.Errorf("JSON without --profile mentions a profile:\n%s", b.String())
	}
}
