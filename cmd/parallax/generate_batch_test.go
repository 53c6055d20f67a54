package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/model"
)

// batchPrompts are prompts of different lengths for the test model
// (inferConfig: a context of 64). The one at index 1 is long, so that with
// --max-tokens 20 it reaches the context (finish "capacity") before the
// others are done, and its record must wait for prompt 0's.
func batchPrompts(t *testing.T, dir string) []string {
	t.Helper()
	tok, err := loadTokenizer(dir)
	if err != nil {
		t.Fatal(err)
	}
	long := "It is a truth universally acknowledged"
	for len(tok.EncodeHF(long, true)) < 52 {
		long += ", that a single man"
	}
	if n := len(tok.EncodeHF(long, true)); n > 60 {
		t.Fatalf("the long prompt has %d tokens, want at most 60", n)
	}
	return []string{"It is", long, "a single man in possession", "of a good fortune, must be in want of a wife", "Emma"}
}

// writePromptsFile writes prompts one a line, with a blank line, a line of
// spaces and CRLF endings that readPrompts skips and drops.
func writePromptsFile(t *testing.T, prompts []string) string {
	t.Helper()
	var b strings.Builder
	for i, p := range prompts {
		b.WriteString(p)
		if i%2 == 0 {
			b.WriteString("\r\n\n   \n")
		} else {
			b.WriteString("\n")
		}
	}
	path := filepath.Join(t.TempDir(), "prompts.txt")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// runBatch runs generate --prompts-file and parses its JSONL: one record a
// prompt, in the prompts' order, nothing else on standard output.
func runBatch(t *testing.T, prompts []string, args ...string) []batchRecord {
	t.Helper()
	code, stdout, stderr := runCLI(t, append([]string{"generate"}, args...)...)
	if code != 0 {
		t.Fatalf("parallax generate %s: exit %d\nstderr: %s", strings.Join(args, " "), code, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if len(lines) != len(prompts) {
		t.Fatalf("%d lines of output for %d prompts:\n%s", len(lines), len(prompts), stdout)
	}
	var recs []batchRecord
	for i, line := range lines {
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		var r batchRecord
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("line %d is not a record: %v\n%s", i+1, err, line)
		}
		if r.Index != i || r.Prompt != prompts[i] {
			t.Fatalf("line %d is the record of prompt %d (%q), want prompt %d (%q): out of order", i+1, r.Index, r.Prompt, i, prompts[i])
		}
		switch r.Finish {
		case finishLength, finishStop, finishEOS, finishCapacity:
		default:
			t.Errorf("prompt %d: finish %q", i, r.Finish)
		}
		recs = append(recs, r)
	}
	return recs
}

// singleGenerate returns the continuation 'generate --prompt' prints.
func singleGenerate(t *testing.T, prompt string, args ...string) string {
	t.Helper()
	code, stdout, stderr := runCLI(t, append([]string{"generate", "--prompt", prompt}, args...)...)
	if code != 0 {
		t.Fatalf("generate --prompt %q: exit %d\nstderr: %s", prompt, code, stderr)
	}
	if !strings.HasPrefix(stdout, prompt) || !strings.HasSuffix(stdout, "\n") {
		t.Fatalf("generate --prompt %q printed %q", prompt, stdout)
	}
	return strings.TrimSuffix(strings.TrimPrefix(stdout, prompt), "\n")
}

// jsonText is s as a JSON string carries it: each byte of invalid UTF-8
// (the test model's untrained output is full of them) replaced by U+FFFD.
func jsonText(s string) string {
	var b strings.Builder
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		if r == utf8.RuneError && n == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[:n])
		}
		s = s[n:]
	}
	return b.String()
}

// TestGenerateBatchGreedyMatchesSingle: greedy decoding of a prompts file
// gives every prompt the text 'generate --prompt' gives it, whatever
// --batch (one slot reused for every prompt, two, more slots than
// prompts), with sequences ending at different steps (--max-tokens, the
// context, a --stop text).
func TestGenerateBatchGreedyMatchesSingle(t *testing.T) {
	dir := writeInferModel(t, inferConfig(), true, nil)
	prompts := batchPrompts(t, dir)
	file := writePromptsFile(t, prompts)
	common := []string{"--model", dir, "--device", "cpu", "--temperature", "0", "--max-tokens", "20"}
	want := make([]string, len(prompts))
	for i, p := range prompts {
		want[i] = jsonText(singleGenerate(t, p, common...))
	}
	// A stop text from the middle of prompt 0's continuation (an ASCII
	// letter), so that some sequences stop early.
	stop := ""
	for k := len(want[0]) / 2; k < len(want[0]) && stop == ""; k++ {
		if c := want[0][k]; c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
			stop = want[0][k : k+1]
		}
	}
	if stop == "" {
		t.Fatalf("prompt 0's greedy continuation %q has no letter in its second half to stop at", want[0])
	}
	wantStop := make([]string, len(prompts))
	for i, p := range prompts {
		wantStop[i] = jsonText(singleGenerate(t, p, append(common, "--stop", stop)...))
	}
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"batch 1", []string{"--batch", "1"}, want},
		{"batch 2", []string{"--batch", "2"}, want},
		{"batch 10", []string{"--batch", "10"}, want},
		{"default batch", nil, want},
		{"batch 2 stop", []string{"--batch", "2", "--stop", stop}, wantStop},
		{"batch 3 stop", []string{"--batch", "3", "--stop", stop}, wantStop},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append(append([]string{"--prompts-file", file}, common...), tt.args...)
			recs := runBatch(t, prompts, args...)
			stopped := 0
			for i, r := range recs {
				if r.Text != tt.want[i] {
					t.Errorf("prompt %d: text %q, generate --prompt gives %q", i, r.Text, tt.want[i])
				}
				switch r.Finish {
				case finishStop:
					stopped++
					if !strings.Contains(want[i], stop) {
						t.Errorf("prompt %d: finish stop, but its continuation %q has no %q", i, want[i], stop)
					}
				case finishCapacity:
					if i != 1 {
						t.Errorf("prompt %d reached the context, only the long prompt 1 should", i)
					}
					if r.Tokens >= 20 {
						t.Errorf("prompt %d: finish capacity after %d tokens (--max-tokens 20)", i, r.Tokens)
					}
				case finishLength:
					if r.Tokens != 20 {
						t.Errorf("prompt %d: finish length after %d tokens, want 20", i, r.Tokens)
					}
				}
			}
			if recs[1].Finish != finishCapacity && recs[1].Finish != finishStop {
				t.Errorf("long prompt 1: finish %q, want capacity", recs[1].Finish)
			}
			if len(tt.args) > 0 && tt.args[len(tt.args)-2] == "--stop" {
				if stopped == 0 || recs[0].Finish != finishStop {
					t.Errorf("--stop %q (from prompt 0's text) stopped no sequence: %+v", stop, recs)
				}
			}
		})
	}
}

// TestGenerateBatchSampled: sampled text depends on the prompt's index and
// --seed, not on --batch, and is what 'generate --prompt --seed S+i' gives
// (bit for bit on the CPU).
func TestGenerateBatchSampled(t *testing.T) {
	dir := writeInferModel(t, inferConfig(), true, nil)
	prompts := batchPrompts(t, dir)
	file := writePromptsFile(t, prompts)
	common := []string{"--model", dir, "--device", "cpu", "--temperature", "1", "--top-k", "50", "--top-p", "0.9", "--max-tokens", "12", "--seed", "7"}
	one := runBatch(t, prompts, append([]string{"--prompts-file", file, "--batch", "1"}, common...)...)
	three := runBatch(t, prompts, append([]string{"--prompts-file", file, "--batch", "3"}, common...)...)
	for i := range prompts {
		if one[i] != three[i] {
			t.Errorf("prompt %d: --batch 1 %+v, --batch 3 %+v", i, one[i], three[i])
		}
	}
	for i, p := range prompts {
		args := append([]string(nil), common...)
		args[len(args)-1] = fmt.Sprint(7 + i)
		if got := jsonText(singleGenerate(t, p, args...)); got != three[i].Text {
			t.Errorf("prompt %d: batched %q, generate --seed %d %q", i, three[i].Text, 7+i, got)
		}
	}
	// Another seed, other text (the seed is used at all).
	other := runBatch(t, prompts, append([]string{"--prompts-file", file, "--batch", "3"}, append(common[:len(common)-1], "8")...)...)
	same := 0
	for i := range prompts {
		if other[i].Text == three[i].Text {
			same++
		}
	}
	if same == len(prompts) {
		t.Errorf("--seed 7 and --seed 8 give the same texts: %+v", other)
	}
}

// TestGenerateBatchEOS: a sequence that samples an end-of-text id ends
// there (finish "eos"), the id neither counted nor printed.
func TestGenerateBatchEOS(t *testing.T) {
	cfg := inferConfig()
	cfg.EOS = []int{299}
	dir := writeInferModel(t, cfg, true, func(m *model.Model) {
		// A head whose logits are 0 but for id 299's: always the argmax.
		w := make([]float32, m.Head.W.Numel())
		d := m.Config.Dim
		for i := range d {
			w[299*d+i] = 1
		}
		if err := engine.WriteFloat32(m.Head.W, w); err != nil {
			t.Fatal(err)
		}
	})
	prompts := []string{"It is", "a single man"}
	recs := runBatch(t, prompts, "--model", dir, "--device", "cpu", "--temperature", "0", "--prompts-file", writePromptsFile(t, prompts))
	for i, r := range recs {
		if r.Finish != finishEOS || r.Tokens != 0 || r.Text != "" {
			t.Errorf("prompt %d: %+v, want finish eos after 0 tokens", i, r)
		}
	}
}

// TestGenerateBatchStdin: --prompts-file - reads standard input.
func TestGenerateBatchStdin(t *testing.T) {
	dir := writeInferModel(t, inferConfig(), true, nil)
	prompts := []string{"It is", "Emma"}
	f, err := os.Open(writePromptsFile(t, prompts))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	stdin := os.Stdin
	os.Stdin = f
	defer func() { os.Stdin = stdin }()
	recs := runBatch(t, prompts, "--model", dir, "--device", "cpu", "--temperature", "0", "--max-tokens", "4", "--prompts-file", "-")
	for i, r := range recs {
		if r.Finish != finishLength || r.Tokens != 4 {
			t.Errorf("prompt %d: %+v, want 4 tokens and finish length", i, r)
		}
	}
}

// TestGenerateBatchErrors: command-line misuse exits 2 before the model
// loads, a bad prompts file exits 1 with an error naming it.
func TestGenerateBatchErrors(t *testing.T) {
	dir := writeInferModel(t, inferConfig(), true, nil)
	tmp := t.TempDir()
	good := writePromptsFile(t, []string{"It is"})
	blank := filepath.Join(tmp, "blank.txt")
	os.WriteFile(blank, []byte("\n  \r\n\n"), 0o644)
	empty := filepath.Join(tmp, "empty.txt")
	os.WriteFile(empty, nil, 0o644)
	long := filepath.Join(tmp, "long.txt")
	os.WriteFile(long, []byte("It is\n"+strings.Repeat("It is a truth universally acknowledged, ", 20)+"\n"), 0o644)
	missing := filepath.Join(tmp, "missing.txt")
	base := []string{"generate", "--model", dir, "--device", "cpu"}
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"with prompt", []string{"--prompts-file", good, "--prompt", "x"}, 2, "--prompts-file or --prompt/--prompt-file, not both"},
		{"with empty prompt", []string{"--prompts-file", good, "--prompt", ""}, 2, "not both"},
		{"with prompt file", []string{"--prompts-file", good, "--prompt-file", good}, 2, "not both"},
		{"no file name", []string{"--prompts-file", ""}, 2, "--prompts-file wants a file name"},
		{"batch alone", []string{"--prompt", "x", "--batch", "2"}, 2, "--batch applies only with --prompts-file"},
		{"batch negative", []string{"--prompts-file", good, "--batch", "-1"}, 2, "--batch -1: want an integer in [1, 4096], or 0"},
		{"batch too large", []string{"--prompts-file", good, "--batch", "5000"}, 2, "--batch 5000"},
		{"batch not a number", []string{"--prompts-file", good, "--batch", "x"}, 2, "--batch"},
		{"bad temperature", []string{"--prompts-file", missing, "--temperature", "-1"}, 2, "--temperature -1"},
		{"missing file", []string{"--prompts-file", missing}, 1, "read --prompts-file " + missing + ": open " + missing + ": no such file"},
		{"directory", []string{"--prompts-file", tmp}, 1, "read --prompts-file " + tmp},
		{"blank file", []string{"--prompts-file", blank}, 1, "--prompts-file " + blank + " has no prompts"},
		{"empty file", []string{"--prompts-file", empty}, 1, "has no prompts"},
		{"prompt too long", []string{"--prompts-file", long}, 1, "prompt 1 (line 2 of --prompts-file) has"},
		{"no prompt at all", nil, 2, "or --prompts-file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, append(append([]string(nil), base...), tt.args...)...)
			if code != tt.code || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d (want %d), stderr lacks %q\nstderr: %s", code, tt.code, tt.want, stderr)
			}
			if stdout != "" {
				t.Errorf("stdout %q, want nothing", stdout)
			}
		})
	}
	// The flags are checked before the model loads: a directory with no
	// weights still exits 2.
	noWeights := configOnlyDir(t, inferConfig())
	expectCLI(t, 2, "not both", "generate", "--model", noWeights, "--prompts-file", good, "--prompt", "x")
	// Help documents the flags.
	var out bytes.Buffer
	if code := run([]string{"generate", "--help"}, &out, &out); code != 0 {
		t.Fatalf("generate --help: exit %d", code)
	}
	for _, w := range []string{"--prompts-file", "--batch", "JSONL", `"finish"`} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("generate --help lacks %q", w)
		}
	}
}

// TestGenerateBatchCapacity: a --max-tokens past the context (even the
// largest int) generates up to the context, as 'generate --prompt' does,
// and says so.
func TestGenerateBatchCapacity(t *testing.T) {
	dir := writeInferModel(t, inferConfig(), true, nil)
	tok, err := loadTokenizer(dir)
	if err != nil {
		t.Fatal(err)
	}
	prompts := []string{"It is", "a single man in possession"}
	common := []string{"--model", dir, "--device", "cpu", "--temperature", "0", "--max-tokens", "9223372036854775807"}
	recs := runBatch(t, prompts, append([]string{"--prompts-file", writePromptsFile(t, prompts), "--batch", "2"}, common...)...)
	for i, r := range recs {
		room := inferConfig().MaxSeq - len(tok.EncodeHF(prompts[i], true)) + 1
		if r.Finish != finishCapacity || r.Tokens != room {
			t.Errorf("prompt %d: finish %q after %d tokens, want capacity after %d", i, r.Finish, r.Tokens, room)
		}
		if want := jsonText(singleGenerate(t, prompts[i], common...)); r.Text != want {
			t.Errorf("prompt %d: text %q, generate --prompt gives %q", i, r.Text, want)
		}
	}
}
