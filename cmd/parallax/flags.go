package main

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/model"
)

// Checks of flag values, run right after parsing and before any work. A NaN,
// an infinity or a number outside a flag's range is a mistake on the command
// line (exit status 2), never replaced by a default: the value the user typed
// is either used or refused.
//
// A rule applies only to a flag the user set (pflag's Changed), so a flag
// whose default is a sentinel ("-1: computed from the steps", "0: the
// config's") needs no exception for it; the values a flag's help documents
// as special ("-1: never") are accepted with Or. Usage:
//
//	if err := checkFlags(fs,
//		numFlag("lr").above(0),
//		numFlag("beta1").atLeast(0).below(1),
//		numFlag("eval-every").atLeast(1).or(-1, "never"),
//	); err != nil {
//		return err
//	}
//
// Integer, unsigned and float flags are checked alike (as float64), as are
// the elements of slice flags (IntSlice, Float64Slice, StringSlice of
// numbers). A rule for a flag the set does not define is a programming
// error and panics, so that a renamed flag cannot silently lose its check.

// flagRule is the set of values one numeric flag accepts: a finite number
// within [lo, hi] (bounds excluded where open), or one of the documented
// special values.
type flagRule struct {
	name           string
	lo, hi         float64
	loOpen, hiOpen bool
	special        []specialValue
}

type specialValue struct {
	v       float64
	meaning string
}

// numFlag starts the rule of flag name: any finite number.
func numFlag(name string) flagRule {
	return flagRule{name: name, lo: math.Inf(-1), hi: math.Inf(1)}
}

// atLeast requires values >= lo.
func (r flagRule) atLeast(lo float64) flagRule { r.lo, r.loOpen = lo, false; return r }

// above requires values > lo.
func (r flagRule) above(lo float64) flagRule { r.lo, r.loOpen = lo, true; return r }

// atMost requires values <= hi.
func (r flagRule) atMost(hi float64) flagRule { r.hi, r.hiOpen = hi, false; return r }

// below requires values < hi.
func (r flagRule) below(hi float64) flagRule { r.hi, r.hiOpen = hi, true; return r }

// or also accepts v, a value the flag's help documents as meaning what
// meaning says.
func (r flagRule) or(v float64, meaning string) flagRule {
	r.special = append(append([]specialValue(nil), r.special...), specialValue{v, meaning})
	return r
}

// accepts reports whether v is allowed.
func (r flagRule) accepts(v float64) bool {
	for _, s := range r.special {
		if v == s.v {
			return true
		}
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return false
	}
	if v < r.lo || (r.loOpen && v == r.lo) || v > r.hi || (r.hiOpen && v == r.hi) {
		return false
	}
	return true
}

// want describes the accepted values: "a finite number > 0",
// "an integer >= 1, or -1 (never)".
func (r flagRule) want(integer bool) string {
	var b strings.Builder
	if integer {
		b.WriteString("an integer")
	} else {
		b.WriteString("a finite number")
	}
	bound := func(v float64) string {
		if v == math.Trunc(v) && math.Abs(v) < 1e15 {
			return strconv.FormatFloat(v, 'f', -1, 64)
		}
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	switch lo, hi := !math.IsInf(r.lo, -1), !math.IsInf(r.hi, 1); {
	case lo && hi:
		open, shut := "[", "]"
		if r.loOpen {
			open = "("
		}
		if r.hiOpen {
			shut = ")"
		}
		fmt.Fprintf(&b, " in %s%s, %s%s", open, bound(r.lo), bound(r.hi), shut)
	case lo && r.loOpen:
		fmt.Fprintf(&b, " > %s", bound(r.lo))
	case lo:
		fmt.Fprintf(&b, " >= %s", bound(r.lo))
	case hi && r.hiOpen:
		fmt.Fprintf(&b, " < %s", bound(r.hi))
	case hi:
		fmt.Fprintf(&b, " <= %s", bound(r.hi))
	}
	for _, s := range r.special {
		fmt.Fprintf(&b, ", or %s (%s)", bound(s.v), s.meaning)
	}
	return b.String()
}

// checkFlags applies each rule to its flag if the user set it, returning a
// usage error for the first value refused: "--lr NaN: want a finite number
// > 0".
func checkFlags(fs *pflag.FlagSet, rules ...flagRule) error {
	for _, r := range rules {
		f := fs.Lookup(r.name)
		if f == nil {
			panic("checkFlags: no flag --" + r.name)
		}
		if !f.Changed {
			continue
		}
		vals := []string{f.Value.String()}
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			vals = sv.GetSlice()
		}
		integer := strings.Contains(strings.ToLower(f.Value.Type()), "int")
		for _, s := range vals {
			v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
			if err != nil {
				return usagef("--%s %q is not a number (want %s)", r.name, s, r.want(integer))
			}
			if !r.accepts(v) {
				return usagef("--%s %s: want %s", r.name, s, r.want(integer))
			}
		}
	}
	return nil
}

// checkDTypeFlag refuses a --dtype (flag name) that is not auto (when
// allowAuto) or one of the floating dtypes f32, bf16, f16.
func checkDTypeFlag(fs *pflag.FlagSet, name string, allowAuto bool) error {
	f := fs.Lookup(name)
	if f == nil {
		panic("checkDTypeFlag: no flag --" + name)
	}
	s := f.Value.String()
	if allowAuto && s == "auto" {
		return nil
	}
	if dt, err := engine.ParseDType(s); err == nil && dt.IsFloat() {
		return nil
	}
	if allowAuto {
		return usagef("--%s %q: want auto, f32, bf16 or f16", name, s)
	}
	return usagef("--%s %q: want f32, bf16 or f16", name, s)
}

// checkModelConfigFlag refuses a --config (flag name) that is neither a
// model preset nor an existing file or directory. Whether the file is a
// valid config is for the command to find out (a bad file exits 1).
func checkModelConfigFlag(fs *pflag.FlagSet, name string) error {
	f := fs.Lookup(name)
	if f == nil {
		panic("checkModelConfigFlag: no flag --" + name)
	}
	s := f.Value.String()
	if _, err := model.PresetConfig(s); err == nil {
		return nil
	}
	if _, err := os.Stat(s); err == nil {
		return nil
	}
	return usagef("--%s %q is neither a model preset (%s) nor an existing config.json or model directory",
		name, s, strings.Join(model.Presets(), ", "))
}
