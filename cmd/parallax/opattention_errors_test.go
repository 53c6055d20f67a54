package main

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/model/safetensors"
)

// f32 returns an F32 tensor of the given shape filled with small values.
func f32(name string, shape ...int) safetensors.Tensor {
	vals := make([]float32, prod(shape))
	for i := range vals {
		vals[i] = float32(i%7)/7 - 0.4
	}
	return safetensors.F32Tensor(name, shape, vals)
}

// qkv returns q [1,2,4,8], k and v [1,1,4,8] and the extra tensors.
func qkv(extra ...safetensors.Tensor) []safetensors.Tensor {
	return append([]safetensors.Tensor{f32("q", 1, 2, 4, 8), f32("k", 1, 1, 4, 8), f32("v", 1, 1, 4, 8)}, extra...)
}

func TestOpAttentionBadInput(t *testing.T) {
	cases := []struct {
		name    string
		tensors []safetensors.Tensor
		meta    map[string]string
		want    []string // substrings of stderr
	}{
		{"k wrong rank", []safetensors.Tensor{f32("q", 1, 2, 4, 8), f32("k", 2, 3), f32("v", 1, 1, 4, 8)}, nil,
			[]string{"k: want rank 4 [B,Hkv,Lk,D], got [2,3]"}},
		{"q wrong rank", []safetensors.Tensor{f32("q", 2, 4, 8), f32("k", 1, 1, 4, 8), f32("v", 1, 1, 4, 8)}, nil,
			[]string{"q: want rank 4 [B,Hq,Lq,D], got [2,4,8]"}},
		{"heads not a multiple", []safetensors.Tensor{f32("q", 1, 3, 4, 8), f32("k", 1, 2, 4, 8), f32("v", 1, 2, 4, 8)}, nil,
			[]string{"k: 2 key/value heads do not divide the 3 query heads"}},
		{"head dim mismatch", []safetensors.Tensor{f32("q", 1, 2, 4, 8), f32("k", 1, 1, 4, 6), f32("v", 1, 1, 4, 6)}, nil,
			[]string{"k: shape [1,1,4,6] does not match q [1,2,4,8]"}},
		{"v mismatch", []safetensors.Tensor{f32("q", 1, 2, 4, 8), f32("k", 1, 1, 4, 8), f32("v", 1, 1, 5, 8)}, nil,
			[]string{"v: want the shape of k [1,1,4,8], got [1,1,5,8]"}},
		{"r mismatch", qkv(f32("r", 1, 2, 3, 8)), nil, []string{"r: want the shape of q [1,2,4,8], got [1,2,3,8]"}},
		{"do mismatch", qkv(f32("do", 1, 1, 4, 8)), nil, []string{"do: want the shape of q"}},
		{"causal Lq > Lk", []safetensors.Tensor{f32("q", 1, 2, 5, 8), f32("k", 1, 1, 3, 8), f32("v", 1, 1, 3, 8)}, nil,
			[]string{"invalid input", "causal attention needs Lq <= Lk, got Lq 5 > Lk 3"}},
		{"missing v", []safetensors.Tensor{f32("q", 1, 2, 4, 8), f32("k", 1, 1, 4, 8)}, nil,
			[]string{`missing tensor "v" [B,Hkv,Lk,D]`}},
		{"unknown tensor", qkv(f32("x", 1), f32("bias", 2)), nil,
			[]string{`unknown tensor(s) "bias", "x" (accepted: q, k, v, and optionally r, do)`}},
		{"integer dtype", []safetensors.Tensor{safetensors.I32Tensor("q", []int{1, 1, 1, 1}, []int32{1}), f32("k", 1, 1, 1, 1), f32("v", 1, 1, 1, 1)}, nil,
			[]string{"q: want dtype F32 (BF16, F16 and F64 are converted), got I32"}},
		{"unknown mechanism", qkv(), map[string]string{"mechanism": "foo"},
			[]string{`metadata "mechanism": unknown "foo" (want parallax, softmax, lla, linear, affine-linear)`}},
		{"bad causal", qkv(), map[string]string{"causal": "yes"},
			[]string{`metadata "causal": want "true" or "false", got "yes"`}},
		{"bad scale", qkv(), map[string]string{"scale": "abc"}, []string{`metadata "scale": want a finite non-zero number`}},
		{"zero scale", qkv(), map[string]string{"scale": "0"}, []string{`metadata "scale"`}},
		{"bad window", qkv(), map[string]string{"window": "-1"}, []string{`metadata "window": want a non-negative integer`}},
		{"window without causal", qkv(), map[string]string{"window": "2", "causal": "false"}, []string{`metadata "window": a sliding window (2) needs causal "true"`}},
		{"unknown metadata key", qkv(), map[string]string{"casual": "false"},
			[]string{`unknown metadata key(s) "casual" (accepted: mechanism, causal, scale, window, lambda, solver, format)`}},
		{"lambda for parallax", qkv(), map[string]string{"lambda": "0.1"}, []string{`metadata "lambda": only used by mechanism "lla"`}},
		{"bad lambda", qkv(), map[string]string{"mechanism": "lla", "lambda": "-1"}, []string{`metadata "lambda": want a finite number >= 0, got "-1"`}},
		{"bad solver", qkv(), map[string]string{"mechanism": "lla", "solver": "qr"}, []string{`metadata "solver": want "cg" or "direct", got "qr"`}},
		{"scale for linear", qkv(), map[string]string{"mechanism": "linear", "scale": "1"}, []string{`metadata "scale": not used by mechanism "linear"`}},
		{"lla backward", qkv(f32("do", 1, 2, 4, 8)), map[string]string{"mechanism": "lla"}, []string{"lla has no backward"}},
		{"lla with r", qkv(f32("r", 1, 2, 4, 8)), map[string]string{"mechanism": "lla"}, []string{`r: mechanism "lla"`}},
		{"softmax with r", qkv(f32("r", 1, 2, 4, 8)), map[string]string{"mechanism": "softmax"}, []string{`r: mechanism "softmax" takes no probe`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			in, out := filepath.Join(dir, "in.safetensors"), filepath.Join(dir, "out.safetensors")
			if err := safetensors.Write(in, c.tensors, c.meta); err != nil {
				t.Fatal(err)
			}
			code, _, stderr := runCLI(t, "op", "attention", "--in", in, "--out", out, "--device", "cpu")
			if code != 1 {
				t.Errorf("exit code %d, want 1", code)
			}
			for _, w := range append([]string{"parallax op attention: " + in + ": "}, c.want...) {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q does not contain %q", stderr, w)
				}
			}
			if _, err := os.Stat(out); err == nil {
				t.Errorf("a failed run wrote %s", out)
			}
		})
	}
}

func TestOpAttentionBadFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.safetensors")
	if err := safetensors.Write(good, qkv(), nil); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	hlen := int(binary.LittleEndian.Uint64(data))
	corrupt := append([]byte(nil), data...)
	copy(corrupt[8:], `{"q":[`) // breaks the header JSON
	badLen := append([]byte(nil), data...)
	binary.LittleEndian.PutUint64(badLen, 1<<40)

	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"truncated data", data[:len(data)-10], "file truncated?"},
		{"truncated header", data[:8+hlen/2], "exceeds the"},
		{"truncated length", data[:5], "shorter than the 8-byte header length prefix"},
		{"empty", nil, "shorter than the 8-byte"},
		{"corrupt header", corrupt, "header JSON"},
		{"absurd header length", badLen, "exceeds the 100000000-byte limit"},
		{"not safetensors", []byte("hello, this is plain text and not a tensor file"), "not a valid safetensors file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_")+".safetensors")
			if err := os.WriteFile(in, c.data, 0o644); err != nil {
				t.Fatal(err)
			}
			code, _, stderr := runCLI(t, "op", "attention", "--in", in, "--out", filepath.Join(dir, "out.safetensors"))
			if code != 1 {
				t.Errorf("exit code %d, want 1", code)
			}
			for _, w := range []string{in, "not a valid safetensors file", c.want} {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q does not contain %q", stderr, w)
				}
			}
		})
	}

	// Every truncation of a valid input fails cleanly.
	for n := 0; n < len(data); n += 7 {
		in := filepath.Join(dir, "cut.safetensors")
		if err := os.WriteFile(in, data[:n], 0o644); err != nil {
			t.Fatal(err)
		}
		if code, _, stderr := runCLI(t, "op", "attention", "--in", in, "--out", filepath.Join(dir, "o.safetensors")); code != 1 || !strings.Contains(stderr, in) {
			t.Fatalf("input cut to %d bytes: exit %d, stderr %q", n, code, stderr)
		}
	}

	code, _, stderr := runCLI(t, "op", "attention", "--in", filepath.Join(dir, "missing.safetensors"), "--out", filepath.Join(dir, "o.safetensors"))
	if code != 1 || !strings.Contains(stderr, "missing.safetensors") || !strings.Contains(stderr, "no such file") {
		t.Errorf("missing input: exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = runCLI(t, "op", "attention", "--in", good, "--out", filepath.Join(dir, "o.safetensors"), "--device", "nosuch:0")
	if code != 1 || !strings.Contains(stderr, `backend "nosuch" is not built into this program`) {
		t.Errorf("unknown device: exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = runCLI(t, "op", "attention", "--in", good, "--out", filepath.Join(dir, "no", "such", "dir", "o.safetensors"))
	if code != 1 || !strings.Contains(stderr, "o.safetensors") {
		t.Errorf("unwritable output: exit %d, stderr %q", code, stderr)
	}
}
