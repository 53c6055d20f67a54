package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parallax-engine/parallax/internal/serve"
)

// openaiScript asks the server the same questions four ways through the
// official OpenAI client library and prints the answers as JSON.
const openaiScript = `
const OpenAI = require("openai");
const [baseURL, model, prompt, chatText] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "test-key", maxRetries: 0 });
const opts = { model, max_tokens: 20, temperature: 0.8, top_p: 0.95, seed: 7 };
(async () => {
  const out = {};
  const c = await client.completions.create({ ...opts, prompt });
  out.completion = c.choices[0].text;
  out.usage = c.usage;
  let s = "";
  for await (const ch of await client.completions.create({ ...opts, prompt, stream: true })) s += ch.choices[0] ? ch.choices[0].text : "";
  out.completionStream = s;
  const messages = [{ role: "user", content: chatText }];
  const cc = await client.chat.completions.create({ ...opts, messages });
  out.chat = cc.choices[0].message.content;
  out.chatRole = cc.choices[0].message.role;
  s = "";
  for await (const ch of await client.chat.completions.create({ ...opts, messages, stream: true })) s += (ch.choices[0] && ch.choices[0].delta.content) || "";
  out.chatStream = s;
  out.models = (await client.models.list()).data.map(m => m.id);
  try {
    await client.completions.create({ ...opts, model: "nope", prompt });
    out.badModel = "accepted";
  } catch (e) {
    out.badModel = String(e.status);
  }
  console.log(JSON.stringify(out));
})().catch(e => { console.error(e); process.exit(1); });
`

// nodeModules is where the test finds the openai package:
// $PARALLAX_NODE_MODULES, or .ci/cache/npm/node_modules (.ci/setup.sh
// installs it there).
func nodeModules() string {
	if d := os.Getenv("PARALLAX_NODE_MODULES"); d != "" {
		return d
	}
	return filepath.Join("..", "..", ".ci", "cache", "npm", "node_modules")
}

// TestServeOpenAIClient: the official OpenAI Node client talks to
// 'parallax serve' over a model trained here: completions and chat,
// streamed and not, each equal to 'parallax generate' with the same seed.
func TestServeOpenAIClient(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed")
	}
	mods, _ := filepath.Abs(nodeModules())
	if _, err := os.Stat(filepath.Join(mods, "openai", "package.json")); err != nil {
		t.Skipf("the openai npm package is not in %s (run .ci/setup.sh)", mods)
	}
	dir := t.TempDir()
	cfgPath := writeSmallConfig(t, dir)
	text := strings.Repeat("It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife.\n\n", 60)
	textPath := filepath.Join(dir, "text.txt")
	if err := os.WriteFile(textPath, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(dir, "run")
	if code, _, stderr := runCLI(t, "train", "--config", cfgPath, "--data", textPath, "--vocab", "300", "--device", "cpu",
		"--batch", "2", "--seq", "16", "--steps", "30", "--out", run); code != 0 {
		t.Fatalf("train: exit %d\n%s", code, stderr)
	}
	const prompt, chatText = "It is a truth", "Who is in want of a wife?"
	generate := func(p string) string {
		code, stdout, stderr := runCLI(t, "generate", "--model", run, "--prompt", p, "--max-tokens", "20",
			"--temperature", "0.8", "--top-p", "0.95", "--seed", "7", "--device", "cpu")
		if code != 0 || !strings.HasPrefix(stdout, p) {
			t.Fatalf("generate: exit %d\n%s%s", code, stdout, stderr)
		}
		return jsonString(strings.TrimSuffix(strings.TrimPrefix(stdout, p), "\n"))
	}
	wantCompletion := generate(prompt)
	rendered, err := serve.PlainTemplate{}.Render([]serve.Message{{Role: "user", Content: chatText}})
	if err != nil {
		t.Fatal(err)
	}
	wantChat := generate(rendered)

	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	done := make(chan error, 1)
	var serveOut bytes.Buffer
	go func() {
		done <- serveContext(ctx, []string{"--model", run, "--device", "cpu", "--port", "0", "--name", "tiny",
			"--api-key", "test-key", "--max-batch", "4"}, io.Discard, &serveOut, func(a string) { addrc <- a })
	}()
	var addr string
	select {
	case addr = <-addrc:
	case err := <-done:
		t.Fatalf("serve exited: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not start")
	}
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v\n%s", err, serveOut.String())
		}
	}()
	script := filepath.Join(dir, "client.cjs")
	if err := os.WriteFile(script, []byte(openaiScript), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, script, "http://"+addr+"/v1", "tiny", prompt, chatText)
	cmd.Env = append(os.Environ(), "NODE_PATH="+mods)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node client: %v\n%s", err, stderr.String())
	}
	var got struct {
		Completion, CompletionStream, Chat, ChatStream, ChatRole, BadModel string
		Models                                                             []string
		Usage                                                              struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		}
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("client output %s: %v", out, err)
	}
	t.Logf("completion %q, chat %q", got.Completion, got.Chat)
	for _, c := range []struct{ name, got, want string }{
		{"completion", got.Completion, wantCompletion},
		{"streamed completion", got.CompletionStream, wantCompletion},
		{"chat", got.Chat, wantChat},
		{"streamed chat", got.ChatStream, wantChat},
	} {
		if c.got != c.want {
			t.Errorf("%s: %q, parallax generate %q", c.name, c.got, c.want)
		}
	}
	if got.ChatRole != "assistant" || got.BadModel != "404" || len(got.Models) != 1 || got.Models[0] != "tiny" || got.Usage.PromptTokens == 0 {
		t.Errorf("role %q, unknown model %q, models %v, usage %+v", got.ChatRole, got.BadModel, got.Models, got.Usage)
	}
}

// jsonString is s after a trip through JSON (invalid UTF-8 bytes become
// U+FFFD, as in a response).
func jsonString(s string) string {
	b, _ := json.Marshal(s)
	var out string
	_ = json.Unmarshal(b, &out)
	return out
}

// TestServeFlags: bad flags exit 2 before anything loads.
func TestServeFlags(t *testing.T) {
	cfgDir := configOnlyDir(t, inferConfig())
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-batch", "0"}, "--max-batch"},
		{[]string{"--max-queue", "-1"}, "--max-queue"},
		{[]string{"--port", "70000"}, "--port"},
		{[]string{"--ctx", "100000"}, "exceeds the model's max_seq"},
		{[]string{"extra"}, "extra"},
	} {
		expectCLI(t, 2, c.want, append([]string{"serve", "--model", cfgDir}, c.args...)...)
	}
	expectCLI(t, 2, "--clients", "serve-bench", "--clients", "0")
}
