package engine

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Profiler is implemented by a Device that can time every op it executes
// with device timers (CUDA events, Vulkan timestamp queries). Between
// StartProfile and StopProfile each kernel, library matmul and device copy
// the device enqueues is timed on the device itself, without waiting for
// the host per op, so the profiled work runs almost as it would unprofiled.
// Use it from the goroutine that drives the device, like its other methods.
type Profiler interface {
	// StartProfile begins timing every op enqueued from now on. It does not
	// wait for the device. It fails if the device has no usable timers or
	// a profile is being recorded already.
	StartProfile() error
	// StopProfile ends the profile, waits for the timed ops to finish and
	// returns their times aggregated by name. It fails if no profile was
	// started or the timers could not be read.
	StopProfile() (Profile, error)
}

// ProfileEntry is the total of every call of one op in a profile: of one
// kernel, or of matrix products of one shape (see GemmName).
type ProfileEntry struct {
	Name   string  `json:"name"`
	Calls  int     `json:"calls"`
	Millis float64 `json:"ms"`              // device time of all the calls
	FLOPs  float64 `json:"flops,omitempty"` // floating-point operations of all the calls; 0 if not known
	Bytes  float64 `json:"bytes,omitempty"` // bytes the calls must move at least; 0 if not known
}

// TFLOPs is the achieved rate in TFLOP/s, or 0 when the FLOPs or the time
// are not known.
func (e ProfileEntry) TFLOPs() float64 {
	if e.FLOPs <= 0 || !(e.Millis > 0) {
		return 0
	}
	return e.FLOPs / (e.Millis * 1e-3) / 1e12
}

// GBs is the achieved bandwidth in GB/s, or 0 when the bytes or the time
// are not known.
func (e ProfileEntry) GBs() float64 {
	if e.Bytes <= 0 || !(e.Millis > 0) {
		return 0
	}
	return e.Bytes / (e.Millis * 1e-3) / 1e9
}

// Profile is a per-op time breakdown, one entry per name, the most
// expensive first (AggregateProfile's order).
type Profile []ProfileEntry

// AggregateProfile merges entries of the same name, summing their calls,
// times, FLOPs and bytes, and sorts the result by descending time (then by
// name, so equal times list in a stable order). Backends pass one entry per
// timed call.
func AggregateProfile(entries []ProfileEntry) Profile {
	idx := make(map[string]int, len(entries))
	out := Profile{}
	for _, e := range entries {
		i, ok := idx[e.Name]
		if !ok {
			idx[e.Name] = len(out)
			out = append(out, ProfileEntry{Name: e.Name})
			i = len(out) - 1
		}
		s := &out[i]
		s.Calls += e.Calls
		s.Millis += e.Millis
		s.FLOPs += e.FLOPs
		s.Bytes += e.Bytes
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Millis != out[j].Millis {
			return out[i].Millis > out[j].Millis
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// TotalMillis is the device time of every entry together.
func (p Profile) TotalMillis() float64 {
	t := 0.0
	for _, e := range p {
		t += e.Millis
	}
	return t
}

// TotalCalls is the number of timed calls of every entry together.
func (p Profile) TotalCalls() int {
	n := 0
	for _, e := range p {
		n += e.Calls
	}
	return n
}

// Table formats the profile as a text table in the profile's order: op,
// calls, ms, share of the total time and the achieved rate (TFLOP/s where
// the FLOPs are known, else GB/s where the bytes are; in G or M units
// below 1), then a total row.
// Columns are separated by spaces, numbers right-aligned.
func (p Profile) Table() string {
	total := p.TotalMillis()
	share := func(ms float64) string {
		if !(total > 0) {
			return "-"
		}
		return strconv.FormatFloat(100*ms/total, 'f', 1, 64) + "%"
	}
	rows := [][]string{{"op", "calls", "ms", "share", "achieved"}}
	for _, e := range p {
		rate := ""
		if v := e.TFLOPs(); v > 0 {
			rate = scaledRate(v, []string{"TFLOP/s", "GFLOP/s", "MFLOP/s"})
		} else if v := e.GBs(); v > 0 {
			rate = scaledRate(v, []string{"GB/s", "MB/s", "kB/s"})
		}
		rows = append(rows, []string{e.Name, strconv.Itoa(e.Calls), fmtMillis(e.Millis), share(e.Millis), rate})
	}
	rows = append(rows, []string{"total", strconv.Itoa(p.TotalCalls()), fmtMillis(total), share(total), ""})

	width := make([]int, len(rows[0]))
	for _, r := range rows {
		for i, c := range r {
			width[i] = max(width[i], len(c))
		}
	}
	var b strings.Builder
	for _, r := range rows {
		var line strings.Builder
		for i, c := range r {
			switch {
			case i == 0:
				fmt.Fprintf(&line, "%-*s", width[i], c)
			case i == len(r)-1:
				fmt.Fprintf(&line, "  %s", c) // last column: left-aligned, no padding
			default:
				fmt.Fprintf(&line, "  %*s", width[i], c)
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " "))
		b.WriteByte('\n')
	}
	return b.String()
}

// scaledRate prints v, in units[0], in the first of units (each 1000
// times smaller than the one before) in which it is at least 1, so that a
// slow device's rates stay readable: 0.25 TFLOP/s is "250 GFLOP/s".
func scaledRate(v float64, units []string) string {
	i := 0
	for i < len(units)-1 && v < 1 {
		v *= 1000
		i++
	}
	return fmt.Sprintf("%.4g %s", v, units[i])
}

// fmtMillis prints a time in milliseconds with three decimals (a
// microsecond), which is what device timers resolve.
func fmtMillis(ms float64) string {
	if math.IsNaN(ms) || math.IsInf(ms, 0) {
		return strconv.FormatFloat(ms, 'g', -1, 64)
	}
	return strconv.FormatFloat(ms, 'f', 3, 64)
}

// GemmName names a matrix product in a profile by what determines its
// speed, in the row-major terms of MatMul: out [M, N] = op(a) [M, K] op(b)
// [K, N], batch products. The name is "gemm", the dtypes ("bf16"; "bf16>f32"
// when the output differs; "f16*bf16>f32" when the inputs do), M x N x K,
// whether a and b are transposed ("nn", "nt", "tn", "tt") and, for more
// than one product, the batch: "gemm bf16 4096x768x768 nt batch 12".
func GemmName(a, b, out DType, m, n, k, batch int, transA, transB bool) string {
	dt := a.String()
	if b != a {
		dt += "*" + b.String()
	}
	if out != a || out != b {
		dt += ">" + out.String()
	}
	t := [2]byte{'n', 'n'}
	if transA {
		t[0] = 't'
	}
	if transB {
		t[1] = 't'
	}
	s := fmt.Sprintf("gemm %s %dx%dx%d %s", dt, m, n, k, t[:])
	if batch > 1 {
		s += " batch " + strconv.Itoa(batch)
	}
	return s
}
