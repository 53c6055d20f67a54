package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The test binary runs the command line instead of the tests when
// PARALLAX_CLI_MAIN=1, so that a test can start it as a program (in tmux).
func init() {
	if os.Getenv("PARALLAX_CLI_MAIN") == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
}

// chatTemplateConfig is a tokenizer_config.json with a small ChatML
// template over the test tokenizer's <|endoftext|>.
const chatTemplateConfig = `{
  "eos_token": "<|endoftext|>",
  "chat_template": "{%- for m in messages %}{{ m.role + ': ' + m.content | trim }}\n{% endfor %}{%- if add_generation_prompt %}assistant:{% endif %}"
}`

// writeChatModel is writeInferModel's model with a chat template and a
// generation_config.json.
func writeChatModel(t *testing.T) string {
	t.Helper()
	dir := writeInferModel(t, inferConfig(), true, nil)
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(chatTemplateConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	gc := `{"eos_token_id": [299], "temperature": 0.0, "top_p": 0.9, "top_k": 5}`
	if err := os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(gc), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestChatPiped(t *testing.T) {
	dir := writeChatModel(t)
	tests := []struct {
		name  string
		args  []string
		input string
		want  []string
	}{
		{"two turns and reset", nil, "Hello there\nHow are you?\n/reset\nAgain\n", []string{"> ", "(new conversation)"}},
		{"system and stop", []string{"--system", "Be brief.", "--stop", "a", "--max-tokens", "8"}, "Hi\n", []string{"> "}},
		{"quit", nil, "/quit\nnot read\n", []string{"> "}},
		{"empty lines", nil, "\n\n", []string{"> > > "}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			args := append([]string{"--model", dir, "--device", "cpu", "--max-tokens", "12"}, tt.args...)
			err := chatLoop(args, strings.NewReader(tt.input), &out, &errOut, nil)
			if err != nil {
				t.Fatalf("chat: %v\nstderr: %s", err, errOut.String())
			}
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			if strings.Contains(out.String(), "\uFFFD") {
				t.Errorf("output has a replacement character:\n%s", out.String())
			}
		})
	}
}

func TestChatErrors(t *testing.T) {
	dir := writeChatModel(t)
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"bad temperature", []string{"chat", "--model", dir, "--temperature", "-1"}, 2, "--temperature -1"},
		{"bad top-p", []string{"chat", "--model", dir, "--top-p", "2"}, 2, "--top-p 2"},
		{"empty stop", []string{"chat", "--model", dir, "--stop", ""}, 2, "--stop wants"},
		{"positional", []string{"chat", "--model", dir, "x"}, 2, `unexpected argument "x"`},
		{"no model", []string{"chat", "--model", filepath.Join(dir, "missing"), "--device", "cpu"}, 1, "missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expectCLI(t, tt.code, tt.want, tt.args...)
		})
	}
	broken := writeChatModel(t)
	os.WriteFile(filepath.Join(broken, "tokenizer_config.json"), []byte(`{"chat_template": "{% for m in messages %}"}`), 0o644)
	expectCLI(t, 1, "template", "chat", "--model", broken, "--device", "cpu")
	badGC := writeChatModel(t)
	os.WriteFile(filepath.Join(badGC, "generation_config.json"), []byte(`{"eos_token_id": "x"}`), 0o644)
	expectCLI(t, 1, "eos_token_id", "chat", "--model", badGC, "--device", "cpu")
}

func TestGeneratePromptFileAndStop(t *testing.T) {
	dir := writeChatModel(t)
	path := filepath.Join(t.TempDir(), "prompt.txt")
	os.WriteFile(path, []byte("It is a truth"), 0o644)
	out := expectCLI(t, 0, "It is a truth", "generate", "--model", dir, "--device", "cpu", "--prompt-file", path, "--max-tokens", "5")
	if !strings.HasPrefix(out, "It is a truth") {
		t.Errorf("output %q does not start with the prompt", out)
	}
	expectCLI(t, 2, "not both", "generate", "--model", dir, "--prompt", "x", "--prompt-file", path)
	// Greedy (generation_config.json's temperature 0): the same text twice.
	a := expectCLI(t, 0, "", "generate", "--model", dir, "--device", "cpu", "--prompt", "a single", "--max-tokens", "10", "--seed", "1")
	b := expectCLI(t, 0, "", "generate", "--model", dir, "--device", "cpu", "--prompt", "a single", "--max-tokens", "10", "--seed", "2")
	if a != b {
		t.Errorf("generation_config.json's temperature 0 was not used: %q vs %q", a, b)
	}
	// A stop string cuts the text before it.
	cont := strings.TrimPrefix(strings.TrimSuffix(a, "\n"), "a single")
	if len(cont) > 2 {
		stop := cont[1:2]
		s := expectCLI(t, 0, "", "generate", "--model", dir, "--device", "cpu", "--prompt", "a single", "--max-tokens", "10", "--stop", stop)
		if got := strings.TrimSuffix(s, "\n"); got != "a single"+cont[:strings.Index(cont, stop)] {
			t.Errorf("--stop %q: %q, want the text up to it (of %q)", stop, got, a)
		}
	}
}

// tmuxSession drives the CLI in a tmux session.
type tmuxSession struct {
	t    *testing.T
	name string
	sock string
}

func (s *tmuxSession) tmux(args ...string) string {
	s.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-S", s.sock}, args...)...).CombinedOutput()
	if err != nil {
		s.t.Fatalf("tmux %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (s *tmuxSession) screen() string {
	out, _ := exec.Command("tmux", "-S", s.sock, "capture-pane", "-p", "-J", "-t", s.name).CombinedOutput()
	return string(out)
}

// waitFor waits until the screen shows want n times.
func (s *tmuxSession) waitFor(want string, n int) string {
	s.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		sc := s.screen()
		if strings.Count(sc, want) >= n {
			return sc
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("the screen does not show %q %d times:\n%s", want, n, sc)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestChatTmux runs parallax chat in a terminal (tmux): two turns, Ctrl-C
// at the prompt, /reset, Ctrl-D; on a model trained by the tests and on
// the Hugging Face Qwen3 folder converted to Parallax (with its chat
// template).
func TestChatTmux(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		dir   func(t *testing.T) string
		extra string
	}{
		{"trained", writeChatModel, ""},
		{"hf-converted", hfChatFolder, "--convert-parallax"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := tc.dir(t)
			s := &tmuxSession{t: t, name: "chat", sock: filepath.Join(t.TempDir(), "tmux.sock")}
			// The shell traps Ctrl-C, which the terminal sends to it too, so
			// that it outlives the chat and reports its exit status.
			cmd := fmt.Sprintf("trap true INT; PARALLAX_CLI_MAIN=1 %q chat --model %q --device cpu --max-tokens 8 %s; echo chat-exited-$?; sleep 30", self, dir, tc.extra)
			s.tmux("new-session", "-d", "-s", s.name, "-x", "120", "-y", "40", "sh", "-c", cmd)
			defer exec.Command("tmux", "-S", s.sock, "kill-server").Run()
			s.waitFor("> ", 1)
			s.tmux("send-keys", "-t", s.name, "Hello", "Enter")
			s.waitFor("> ", 2)
			s.tmux("send-keys", "-t", s.name, "And again", "Enter")
			s.waitFor("> ", 3)
			s.tmux("send-keys", "-t", s.name, "C-c")
			s.waitFor("(Ctrl-D quits)", 1)
			s.tmux("send-keys", "-t", s.name, "/reset", "Enter")
			s.waitFor("(new conversation)", 1)
			s.tmux("send-keys", "-t", s.name, "C-d")
			sc := s.waitFor("chat-exited-", 1)
			if !strings.Contains(sc, "chat-exited-0") {
				t.Errorf("chat did not exit 0:\n%s", sc)
			}
			for _, want := range []string{"> Hello", "> And again"} {
				if !strings.Contains(sc, want) {
					t.Errorf("the screen lacks %q:\n%s", want, sc)
				}
			}
			t.Logf("screen:\n%s", sc)
		})
	}
}

// TestTokenizerRender renders a conversation with the CLI: exactly the
// template's text, no newline added.
func TestTokenizerRender(t *testing.T) {
	dir := writeChatModel(t)
	msgs := filepath.Join(t.TempDir(), "messages.json")
	b, _ := json.Marshal([]map[string]string{{"role": "user", "content": "  Hi  "}})
	os.WriteFile(msgs, b, 0o644)
	out := expectCLI(t, 0, "", "tokenizer", "render", "--tokenizer", dir, "--messages", msgs, "--add-generation-prompt")
	if want := "user: Hi\nassistant:"; out != want {
		t.Errorf("render = %q, want %q", out, want)
	}
	expectCLI(t, 2, "required", "tokenizer", "render", "--tokenizer", dir)
	expectCLI(t, 2, "NAME=VALUE", "tokenizer", "render", "--tokenizer", dir, "--messages", msgs, "--var", "x")
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`{"role": "user"}`), 0o644)
	expectCLI(t, 1, "want a JSON list", "tokenizer", "render", "--tokenizer", dir, "--messages", bad)
	expectCLI(t, 1, "no chat template", "tokenizer", "render", "--tokenizer", t.TempDir(), "--messages", msgs)
}

// TestTokenizerCLIErrors: an unknown component and ids out of range are
// clear errors with exit 1 or 2, never a panic.
func TestTokenizerCLIErrors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tokenizer.json")
	os.WriteFile(path, []byte(`{"model": {"type": "Unigram", "vocab": [["a", 0]]}}`), 0o644)
	expectCLI(t, 1, `model.type is "Unigram"`, "tokenizer", "encode", "--tokenizer", path, "x")
	os.WriteFile(path, []byte(`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "normalizer": {"type": "Precompiled"}}`), 0o644)
	expectCLI(t, 1, `normalizer: type "Precompiled" is not supported`, "tokenizer", "encode", "--tokenizer", path, "x")
	model := writeChatModel(t)
	expectCLI(t, 1, "token id 5000 is outside the vocabulary", "tokenizer", "decode", "--tokenizer", model, "1,5000")
	expectCLI(t, 1, `"x" is not an integer`, "tokenizer", "decode", "--tokenizer", model, "1,x")
}

// interruptingWriter sends one interrupt on its first write after the
// first prompt has been answered to (the first streamed text), as Ctrl-C
// would in a terminal.
type interruptingWriter struct {
	bytes.Buffer
	interrupts chan os.Signal
	sent       bool
}

func (w *interruptingWriter) Write(p []byte) (int, error) {
	n, err := w.Buffer.Write(p)
	if !w.sent && strings.Count(w.String(), "> ") >= 1 && string(p) != "> " {
		w.sent = true
		w.interrupts <- os.Interrupt
		time.Sleep(50 * time.Millisecond) // let the handler see it
	}
	return n, err
}

// TestChatInterrupt: Ctrl-C stops the answer being generated and the
// conversation goes on.
func TestChatInterrupt(t *testing.T) {
	dir := writeChatModel(t)
	w := &interruptingWriter{interrupts: make(chan os.Signal, 1)}
	var errOut bytes.Buffer
	args := []string{"--model", dir, "--device", "cpu", "--max-tokens", "40", "--temperature", "1"}
	if err := chatLoop(args, strings.NewReader("Hello\nAgain\n"), w, &errOut, w.interrupts); err != nil {
		t.Fatalf("chat: %v\n%s", err, errOut.String())
	}
	if !strings.Contains(w.String(), "(stopped)") || strings.Count(w.String(), "> ") < 3 {
		t.Errorf("no answer was stopped, or the chat did not go on:\n%s", w.String())
	}
}

// TestChatHFFolder chats with the converted Hugging Face Qwen3 folder of
// testdata, given a chat template.
func TestChatHFFolder(t *testing.T) {
	dir := hfChatFolder(t)
	var out, errOut bytes.Buffer
	args := []string{"--model", dir, "--device", "cpu", "--max-tokens", "6", "--temperature", "0", "--system", "Be brief."}
	if err := chatLoop(args, strings.NewReader("Hello\n/reset\nHi again\n"), &out, &errOut, nil); err != nil {
		t.Fatalf("chat: %v\n%s", err, errOut.String())
	}
	if strings.Count(out.String(), "> ") < 4 || !strings.Contains(out.String(), "(new conversation)") {
		t.Errorf("output:\n%s\nstderr:\n%s", out.String(), errOut.String())
	}
}

// hfChatFolder is the Hugging Face Qwen3 fixture (made by transformers)
// with the Qwen3-style chat template beside it, in a temporary folder.
func hfChatFolder(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	entries, err := os.ReadDir(fixtureDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		abs, _ := filepath.Abs(filepath.Join(fixtureDir, e.Name()))
		if err := os.Symlink(abs, filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := os.ReadFile(filepath.Join("..", "..", "model", "chat", "testdata", "templates", "qwen3", "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}
