package engine_test

import (
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/engine"
)

func TestEnv(t *testing.T) {
	vars := map[string]string{"S": " wide ", "N": "12", "BADN": "1x", "ON": "1", "OFF": "0", "BADSW": "yes"}
	for _, tc := range []struct {
		name   string
		read   func(e *engine.Env) any
		want   any
		errHas string // "" for no error
	}{
		{"string, trimmed", func(e *engine.Env) any { return e.String("S") }, "wide", ""},
		{"unset string", func(e *engine.Env) any { return e.String("NONE") }, "", ""},
		{"int", func(e *engine.Env) any { return e.Int("N") }, 12, ""},
		{"unset int", func(e *engine.Env) any { return e.Int("NONE") }, 0, ""},
		{"malformed int", func(e *engine.Env) any { return e.Int("BADN") }, 0, `BADN="1x": want an integer`},
		{"switch on", func(e *engine.Env) any { return e.Switch("ON", "1", "0") }, true, ""},
		{"switch off", func(e *engine.Env) any { return e.Switch("OFF", "1", "0") }, false, ""},
		{"unset switch", func(e *engine.Env) any { return e.Switch("NONE", "1", "0") }, false, ""},
		{"malformed switch", func(e *engine.Env) any { return e.Switch("BADSW", "1", "0") }, false, `BADSW="yes": want 1 or 0`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := engine.Env{Get: func(k string) string { return vars[k] }}
			if got := tc.read(&e); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
			if (e.Err == nil) != (tc.errHas == "") || (e.Err != nil && !strings.Contains(e.Err.Error(), tc.errHas)) {
				t.Errorf("Err = %v, want %q", e.Err, tc.errHas)
			}
		})
	}
	// The first error is kept.
	e := engine.Env{Get: func(k string) string { return vars[k] }}
	e.Int("BADN")
	e.Switch("BADSW", "1", "0")
	if e.Err == nil || !strings.Contains(e.Err.Error(), "BADN") {
		t.Errorf("Err = %v, want the first malformed variable's", e.Err)
	}
}
