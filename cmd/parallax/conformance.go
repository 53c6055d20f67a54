package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/enginetest"
)

const conformanceUsage = `
Usage:
  parallax conformance [--device all|ID] [--dtype LIST] [--run REGEXP] [--short] [--json]

Certifies a device: runs the conformance suite (every op, forward and
backward, on fresh random inputs, against a float64 reference, with
per-dtype tolerances; backward ops also against finite differences) and
prints one row per case: op, variant, dtype, the worst output, its relative
max-norm error and the tolerance. Exits with status 1 if any case fails.
`

const conformanceExamples = `
  parallax conformance                      # every device found
  parallax conformance --device cpu --dtype f32 --run attention
  parallax conformance --device vulkan:0 --json > report.json
`

// jsonFloat is a float64 that JSON can always carry: infinities and NaN
// (a failed case's error) are written as the strings "+Inf", "-Inf" and
// "NaN".
type jsonFloat float64

// MarshalJSON writes f as a number, or as a string when it is not finite.
func (f jsonFloat) MarshalJSON() ([]byte, error) {
	v := float64(f)
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return json.Marshal(strconv.FormatFloat(v, 'g', -1, 64))
	}
	return json.Marshal(v)
}

// conformanceRow is one line of the report (and of --json).
type conformanceRow struct {
	Device  string    `json:"device"`
	Op      string    `json:"op"`
	Variant string    `json:"variant"`
	DType   string    `json:"dtype"`
	Output  string    `json:"output"`
	Err     jsonFloat `json:"max_rel_error"`
	Tol     float64   `json:"tolerance"`
	Pass    bool      `json:"pass"`
	Error   string    `json:"error,omitempty"`
	Millis  float64   `json:"ms"`
}

func runConformance(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("conformance", conformanceUsage, conformanceExamples, stdout)
	devFlag := fs.String("device", "all", `device ID ("cpu", "vulkan:0", ...) or "all"`)
	dtypeFlag := fs.String("dtype", "", "comma-separated dtypes to test (default: each device's own)")
	runFlag := fs.String("run", "", "only cases whose \"op/variant/dtype\" matches this regular expression")
	short := fs.Bool("short", false, "smaller shapes only")
	seed := fs.Uint64("seed", 0, "input seed (0 = fresh; printed so a failure can be repeated)")
	asJSON := fs.Bool("json", false, "print the rows as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	var dtypes []engine.DType
	if *dtypeFlag != "" {
		for _, s := range strings.Split(*dtypeFlag, ",") {
			dt, err := engine.ParseDType(strings.TrimSpace(s))
			if err != nil || !dt.IsFloat() {
				return usagef("--dtype: %q is not f32, bf16 or f16", s)
			}
			dtypes = append(dtypes, dt)
		}
	}
	var filter *regexp.Regexp
	if *runFlag != "" {
		re, err := regexp.Compile(*runFlag)
		if err != nil {
			return usagef("--run: %v", err)
		}
		filter = re
	}
	var ids []string
	if *devFlag == "all" {
		for _, b := range engine.List() {
			for _, d := range b.Devices {
				ids = append(ids, d.ID())
			}
		}
	} else {
		ids = []string{*devFlag}
	}
	opts := enginetest.Options{DTypes: dtypes, Short: *short, Seed: *seed}
	s := enginetest.Seed(opts)
	var rows []conformanceRow
	failed, total := 0, 0
	for _, id := range ids {
		dev, err := engine.Open(id)
		if err != nil {
			return err
		}
		if !*asJSON {
			fmt.Fprintf(stderr, "conformance on %s (%s), seed %d\n", dev.Info().ID(), dev.Info().Name, s)
		}
		for i, c := range enginetest.Cases(dev, opts) {
			if filter != nil && !filter.MatchString(c.Op+"/"+c.Name+"/"+c.DType.String()) {
				continue
			}
			r := enginetest.Check(dev, c, s+uint64(i))
			w := r.Worst()
			row := conformanceRow{Device: dev.Info().ID(), Op: c.Op, Variant: c.Name, DType: c.DType.String(),
				Output: w.Name, Err: jsonFloat(w.Err), Tol: w.Tol, Pass: r.Pass(), Millis: float64(r.Elapsed.Microseconds()) / 1000}
			if r.Err != nil {
				row.Error = r.Err.Error()
			}
			rows = append(rows, row)
			total++
			if !row.Pass {
				failed++
			}
		}
		dev.Close()
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rows); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(stdout, 2, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "DEVICE\tOP\tVARIANT\tDTYPE\tWORST\tMAX ERR\tTOL\tRESULT")
		for _, r := range rows {
			res := "pass"
			if !r.Pass {
				res = "FAIL"
				if r.Error != "" {
					res = "FAIL: " + r.Error
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.2e\t%.1e\t%s\n", r.Device, r.Op, r.Variant, r.DType, r.Output, float64(r.Err), r.Tol, res)
		}
		tw.Flush()
		fmt.Fprintf(stdout, "%d of %d cases passed\n", total-failed, total)
	}
	if total == 0 {
		return fmt.Errorf("no cases ran (check --run and --dtype)")
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d cases failed (seed %d)", failed, total, s)
	}
	return nil
}
