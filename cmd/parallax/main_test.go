package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/engine"
)

// runCLI runs the command line in-process and returns its exit code and
// output. It fails the test if the command panicked (run reports a panic as
// an internal error).
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	if strings.Contains(errOut.String(), "internal error") {
		t.Fatalf("parallax %s panicked:\n%s", strings.Join(args, " "), errOut.String())
	}
	return code, out.String(), errOut.String()
}

func TestMainUsage(t *testing.T) {
	cases := []struct {
		name     string
		args     []string
		code     int
		stdout   string
		stderr   string
		noStdout bool
	}{
		{name: "no args", args: nil, code: 2, stderr: "Commands:"},
		{name: "help flag", args: []string{"--help"}, code: 0, stdout: "devices"},
		{name: "help command", args: []string{"help"}, code: 0, stdout: "op "},
		{name: "help for op", args: []string{"help", "op"}, code: 0, stdout: "attention"},
		{name: "help for devices", args: []string{"help", "devices"}, code: 0, stdout: "--json"},
		{name: "help unknown", args: []string{"help", "nope"}, code: 2, stderr: `unknown command "nope"`},
		{name: "unknown command", args: []string{"frobnicate"}, code: 2, stderr: `unknown command "frobnicate"; the commands are: ` + commandNames()},
		{name: "flag first", args: []string{"--device", "cpu"}, code: 2, stderr: "flag --device before a command"},
		{name: "version", args: []string{"version"}, code: 0, stdout: "parallax "},
		{name: "version flag", args: []string{"--version"}, code: 0, stdout: "parallax "},
		{name: "version extra arg", args: []string{"version", "x"}, code: 2, stderr: `unexpected argument "x"`},
		{name: "devices help", args: []string{"devices", "-h"}, code: 0, stdout: "Examples:"},
		{name: "devices bad flag", args: []string{"devices", "--nope"}, code: 2, stderr: "unknown flag: --nope"},
		{name: "op no name", args: []string{"op"}, code: 2, stderr: "missing the op to run (ops: attention)"},
		{name: "op unknown", args: []string{"op", "conv"}, code: 2, stderr: `unknown op "conv"; the ops are: attention`},
		{name: "op help", args: []string{"op", "--help"}, code: 0, stdout: "attention"},
		{name: "op attention help", args: []string{"op", "attention", "--help"}, code: 0, stdout: "mechanism"},
		{name: "op attention bad flag", args: []string{"op", "attention", "--nope"}, code: 2, stderr: "parallax op attention: unknown flag: --nope\nRun 'parallax op attention --help' for usage."},
		{name: "op attention missing in", args: []string{"op", "attention", "--out", "x"}, code: 2, stderr: "missing --in"},
		{name: "op attention missing out", args: []string{"op", "attention", "--in", "x"}, code: 2, stderr: "missing --out"},
		{name: "op attention positional", args: []string{"op", "attention", "in.safetensors"}, code: 2, stderr: `unexpected argument "in.safetensors"`},
		{name: "example with in", args: []string{"op", "attention", "--example", "a", "--in", "b"}, code: 2, stderr: "cannot be combined"},
		{name: "seed without example", args: []string{"op", "attention", "--in", "a", "--out", "b", "--seed", "3"}, code: 2, stderr: "only apply with --example"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, c.args...)
			if code != c.code {
				t.Errorf("exit code %d, want %d\nstdout: %s\nstderr: %s", code, c.code, stdout, stderr)
			}
			if !strings.Contains(stdout, c.stdout) {
				t.Errorf("stdout %q does not contain %q", stdout, c.stdout)
			}
			if !strings.Contains(stderr, c.stderr) {
				t.Errorf("stderr %q does not contain %q", stderr, c.stderr)
			}
		})
	}
}

func TestDevices(t *testing.T) {
	code, stdout, stderr := runCLI(t, "devices")
	if code != 0 {
		t.Fatalf("exit code %d: %s", code, stderr)
	}
	for _, want := range []string{"cpu: 1 device", "cpu:0", "kind:    CPU", "dtypes:  f32"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("devices output lacks %q:\n%s", want, stdout)
		}
	}

	code, stdout, stderr = runCLI(t, "devices", "--json")
	if code != 0 {
		t.Fatalf("exit code %d: %s", code, stderr)
	}
	var list struct {
		Backends []struct {
			Name      string
			Available bool
			Devices   []struct {
				ID     string
				Kind   string
				DTypes []string
			}
		}
	}
	if err := json.Unmarshal([]byte(stdout), &list); err != nil {
		t.Fatalf("devices --json is not JSON: %v\n%s", err, stdout)
	}
	found := false
	for _, b := range list.Backends {
		for _, d := range b.Devices {
			if d.ID == "cpu:0" && b.Available && d.Kind == "CPU" && len(d.DTypes) > 0 {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("devices --json lists no available cpu:0:\n%s", stdout)
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "unknown", 512: "512 B", 1536: "1.5 KiB", 150 << 30: "150.0 GiB"} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// An unavailable backend is named once, whether or not its error says
// "unavailable" itself.
func TestDevicesTextUnavailable(t *testing.T) {
	var b strings.Builder
	writeDevicesText(&b, []engine.BackendStatus{
		{Name: "vulkan", Err: errors.New("vulkan unavailable: the loader found no driver")},
		{Name: "cuda", Err: errors.New("no libcuda.so.1")},
	})
	want := "vulkan: unavailable: the loader found no driver\ncuda: unavailable: no libcuda.so.1\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}
