package chat

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

// fuzzTemplateSeeds returns the chat templates of testdata/templates and a
// few small ones that use what real templates use.
func fuzzTemplateSeeds(tb testing.TB) []string {
	tb.Helper()
	var out []string
	for _, name := range []string{"qwen3", "llama31"} {
		data, err := os.ReadFile(filepath.Join("testdata", "templates", name, ConfigFile))
		if err != nil {
			tb.Fatal(err)
		}
		var cfg struct {
			ChatTemplate string `json:"chat_template"`
		}
		if err := json.Unmarshal(data, &cfg); err != nil {
			tb.Fatal(err)
		}
		out = append(out, cfg.ChatTemplate)
	}
	return append(out,
		"{% for m in messages %}<|{{ m.role }}|>{{ m.content | trim }}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}",
		"{{ bos_token }}{% for m in messages[1:] %}{{ loop.index0 }}{{ m['content'] }}{% if not loop.last %},{% endif %}{% endfor %}{{ eos_token }}",
		"{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}{{ range(3)|list|length }}",
		"{{ messages | tojson(indent=2) }}{% raw %}{{ x }}{% endraw %}{# c #}",
		"{%- if messages[0].role == 'system' %}{{ messages[0].content.split('\\n')[-1].strip() }}{%- else %}{{ raise_exception('no system') }}{%- endif %}",
		"{% macro show(m) %}[{{ m.role }}]{% endmacro %}{% for m in messages %}{{ show(m) }}{% endfor %}",
		"plain text, no tags",
	)
}

// fuzzMessages is the conversation the template fuzzers render: every kind
// of message, the user's content fuzzed.
func fuzzMessages(content string) []Message {
	return []Message{{Role: "system", Content: "s"}, {Role: "user", Content: content},
		{Role: "assistant", Content: "a", ReasoningContent: "r", ToolCalls: []ToolCall{{Function: FunctionCall{Name: "f", Arguments: json.RawMessage(`{"x": 1}`)}}}},
		{Role: "tool", Content: "t", ToolCallID: "1", Name: "f"}}
}

var fuzzTools = []json.RawMessage{json.RawMessage(`{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}`)}

// FuzzLoadTemplate writes a fuzzed tokenizer_config.json and
// chat_template.jinja (each present or not) and loads them. LoadTemplate
// must fail exactly when the files are malformed (read here on their own:
// chat_template a string or a list holding a "default" template, or else
// chat_template.jinja; special tokens strings or {"content": ...}; a
// template that compiles), name the file at fault, and otherwise return
// that source and those special tokens.
func FuzzLoadTemplate(f *testing.F) {
	for _, name := range []string{"qwen3", "llama31"} {
		data, err := os.ReadFile(filepath.Join("testdata", "templates", name, ConfigFile))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, true, []byte(nil), false)
	}
	f.Add([]byte(`{"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>", "pad_token": null}`), true,
		[]byte("{% for m in messages %}{{ m.content }}{% endfor %}"), true)
	f.Add([]byte(`{"chat_template": [{"name": "tool_use", "template": "x"}, {"name": "default", "template": "{{ bos_token }}"}], "bos_token": "<s>"}`), true, []byte(nil), false)
	f.Add([]byte(`{"chat_template": [{"name": "rag", "template": "x"}]}`), true, []byte(nil), false)
	f.Add([]byte(`{"chat_template": 7}`), true, []byte(nil), false)
	f.Add([]byte(`{"chat_template": ""}`), true, []byte("{{ x }"), true)
	f.Add([]byte(`{"unk_token": {"id": 3}}`), true, []byte("{{ unk_token }}"), true)
	f.Add([]byte(nil), false, []byte("{% if %}"), true)
	f.Add([]byte(nil), false, []byte(nil), false)
	f.Add([]byte("not json"), true, []byte("x"), true)
	dir := f.TempDir()
	configPath, jinjaPath := filepath.Join(dir, ConfigFile), filepath.Join(dir, TemplateFile)
	f.Fuzz(func(t *testing.T, config []byte, hasConfig bool, jinja []byte, hasJinja bool) {
		if len(config) > 1<<16 || len(jinja) > 1<<16 {
			t.Skip()
		}
		for _, file := range []struct {
			path    string
			data    []byte
			present bool
		}{{configPath, config, hasConfig}, {jinjaPath, jinja, hasJinja}} {
			if err := os.Remove(file.path); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
			if file.present {
				if err := os.WriteFile(file.path, file.data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		tmpl, err := LoadTemplate(dir)
		want, wantFile, wantErr := expectTemplate(config, hasConfig, jinja, hasJinja)
		if wantErr != "" {
			if err == nil {
				t.Fatalf("LoadTemplate accepted the files, which are wrong: %s", wantErr)
			}
			if tmpl != nil {
				t.Fatalf("a failed load (%v) returned a template", err)
			}
			if wantFile != "" && !strings.Contains(err.Error(), filepath.Join(dir, wantFile)) {
				t.Fatalf("error %q does not name %s (%s)", err, wantFile, wantErr)
			}
			return
		}
		if err != nil {
			t.Fatalf("LoadTemplate: %v", err)
		}
		if tmpl.Source != want.Source || tmpl.BOSToken != want.BOSToken || tmpl.EOSToken != want.EOSToken ||
			tmpl.PadToken != want.PadToken || tmpl.UnkToken != want.UnkToken {
			t.Fatalf("loaded %+v, want %+v", *tmpl, want)
		}
	})
}

// expectTemplate reads the files the way LoadTemplate is documented to:
// the template it must give (source and special tokens), or the file at
// fault ("" for none) and what is wrong.
func expectTemplate(config []byte, hasConfig bool, jinja []byte, hasJinja bool) (Template, string, string) {
	var want Template
	var cfg jsonObject
	if hasConfig {
		v, err := decodeOrdered(config)
		if err != nil || !json.Valid(config) {
			return want, ConfigFile, "not JSON"
		}
		switch v := v.(type) {
		case nil:
		case jsonObject:
			cfg = v
		default:
			return want, ConfigFile, "not a JSON object"
		}
	}
	switch v := cfg.get("chat_template").(type) {
	case nil:
	case string:
		want.Source = v
	case []any:
		found := false
		for _, e := range v {
			var m jsonObject
			switch e := e.(type) {
			case nil: // null decodes into an entry with no name
			case jsonObject:
				m = e
			default:
				return want, ConfigFile, "a chat_template entry is not an object"
			}
			name, nameOK := m.stringField("name", false)
			tmpl, tmplOK := m.stringField("template", false)
			if !nameOK || !tmplOK {
				return want, ConfigFile, "a chat_template entry's name or template is not a string"
			}
			if name != nil && *name == "default" && !found {
				want.Source, found = "", true
				if tmpl != nil {
					want.Source = *tmpl
				}
			}
		}
		if !found {
			return want, ConfigFile, "no default template"
		}
	default:
		return want, ConfigFile, "chat_template is neither a string nor a list"
	}
	where := ConfigFile
	if want.Source == "" {
		if !hasJinja {
			return want, "", "no template"
		}
		want.Source, where = string(jinja), TemplateFile
	}
	if _, err := ParseTemplate(want.Source); err != nil {
		return want, where, "the template does not compile: " + err.Error()
	}
	// The special tokens are read once the template compiles.
	for _, tok := range []struct {
		key string
		dst *string
	}{{"bos_token", &want.BOSToken}, {"eos_token", &want.EOSToken}, {"pad_token", &want.PadToken}, {"unk_token", &want.UnkToken}} {
		switch v := cfg.get(tok.key).(type) {
		case nil:
		case string:
			*tok.dst = v
		case jsonObject:
			c, ok := v.stringField("content", true)
			if !ok || c == nil {
				return want, ConfigFile, tok.key + " has no string content"
			}
			*tok.dst = *c
		default:
			return want, ConfigFile, tok.key + " is neither a string nor an object"
		}
	}
	return want, "", ""
}

// jsonObject is a JSON object with its members in the order written.
type jsonObject []jsonMember

type jsonMember struct {
	key string
	val any
}

// get returns the member encoding/json would decode into a struct field
// tagged key: the last whose name equals key up to case (nil if none).
func (o jsonObject) get(key string) any {
	var v any
	for _, m := range o {
		if strings.EqualFold(m.key, key) {
			v = m.val
		}
	}
	return v
}

// stringField decodes the members named key (up to case) in order as
// encoding/json decodes them into a string field (pointer: a *string
// field): a string sets it, null leaves it (pointer: unsets it), anything
// else is an error (ok false).
func (o jsonObject) stringField(key string, pointer bool) (s *string, ok bool) {
	for _, m := range o {
		if !strings.EqualFold(m.key, key) {
			continue
		}
		switch v := m.val.(type) {
		case string:
			s = &v
		case nil:
			if pointer {
				s = nil
			}
		default:
			return nil, false
		}
	}
	return s, true
}

// decodeOrdered decodes one JSON value: objects as jsonObject, lists as
// []any, numbers as json.Number.
func decodeOrdered(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err == nil {
		return nil, errors.New("data after the value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		obj := jsonObject{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			v, err := decodeValue(dec)
			if err != nil {
				return nil, err
			}
			obj = append(obj, jsonMember{k.(string), v})
		}
		_, err := dec.Token()
		return obj, err
	case json.Delim('['):
		list := []any{}
		for dec.More() {
			v, err := decodeValue(dec)
			if err != nil {
				return nil, err
			}
			list = append(list, v)
		}
		_, err := dec.Token()
		return list, err
	}
	return tok, nil
}

// The template engine has no limits of its own: a template that recurses
// without end (a macro calling itself, a namespace holding itself that is
// printed) overflows the goroutine stack, which kills the process, and a
// string repeated (or indented) a huge number of times, a value doubled in
// a loop or loops nested deep take all the memory or time there is. Render
// bounds what it can from outside (range, see maxRangeItems); the rest
// needs a budget inside the engine. FuzzRenderTemplate therefore renders in
// a child process, under a stack, memory and time limit, and passes over
// the templates that reach one of them.
const (
	renderChildEnv     = "PARALLAX_CHAT_RENDER_CHILD"
	renderChildTimeout = 10 * time.Second
	renderChildMemory  = 1 << 30
	renderChildStack   = 64 << 20
	exitRenderMemory   = 3
)

// renderJob is what the child renders (as bytes, which JSON keeps exactly
// where strings would lose invalid UTF-8); renderResult what it found.
type renderJob struct {
	Source  []byte `json:"source"`
	Content []byte `json:"content"`
	AddGen  bool   `json:"add_generation_prompt"`
}

type renderResult struct {
	Out, OutJSON []byte
	Err, ErrJSON string
}

// FuzzRenderTemplate compiles fuzzed templates and renders those that
// compile with a conversation whose user message is fuzzed. Rendering must
// not panic (errors, prefixed "chat:", are fine) and must give the same
// through Render and through RenderJSON on the conversation's JSON (unless
// the template's output depends on something else: the map order of
// namespace() or dict() keywords, the clock); a template without tags
// renders as itself.
func FuzzRenderTemplate(f *testing.F) {
	for _, src := range fuzzTemplateSeeds(f) {
		f.Add(src, "hello", true)
	}
	f.Add("{{ messages[1].content }}", "a\x00\u00e9\U0001F600", false)
	f.Add("{% for i in range(1000000) %}{% endfor %}", "", false)
	// What the engine does not bound (see renderServer): these are passed
	// over, never a failure.
	f.Add("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "", false)
	f.Add("{% set ns = namespace(a=1) %}{% set ns.a = ns %}{{ ns }}", "", false)
	f.Add("{{ 'ab' * 4000000000 }}", "", false)
	f.Fuzz(func(t *testing.T, src, content string, addGen bool) {
		if len(src) > 1<<14 || len(content) > 1<<10 {
			t.Skip()
		}
		tmpl, err := ParseTemplate(src)
		if err != nil {
			if tmpl != nil || !strings.HasPrefix(err.Error(), "chat: ") {
				t.Fatalf("ParseTemplate failed with %q and %v", err, tmpl)
			}
			return
		}
		if !strings.ContainsAny(src, "{}") {
			got, err := tmpl.Render(fuzzMessages(content), RenderOptions{AddGenerationPrompt: addGen})
			if err != nil || got != src {
				t.Fatalf("a template without tags rendered as %q, %v", got, err)
			}
			return
		}
		r := renderInChild(t, renderJob{Source: []byte(src), Content: []byte(content), AddGen: addGen})
		for _, e := range []string{r.Err, r.ErrJSON} {
			if e != "" && !strings.HasPrefix(e, "chat: ") {
				t.Fatalf("render error %q is not prefixed chat:", e)
			}
		}
		if !utf8.ValidString(content) || dependsOnMore(src) {
			return // JSON makes invalid UTF-8 valid; the output varies
		}
		if !bytes.Equal(r.Out, r.OutJSON) || (r.Err == "") != (r.ErrJSON == "") {
			t.Fatalf("Render and RenderJSON differ:\nRender:     %q, %s\nRenderJSON: %q, %s", r.Out, r.Err, r.OutJSON, r.ErrJSON)
		}
	})
}

// dependsOnMore reports whether a template's output may depend on more
// than its input: the order of keyword arguments, which the engine keeps
// in a map (namespace, dict), or the clock.
func dependsOnMore(src string) bool {
	for _, w := range []string{"namespace", "dict", "strftime_now", "kwargs"} {
		if strings.Contains(src, w) {
			return true
		}
	}
	return false
}

// renderServer is a child process (this test binary running
// TestRenderChild) that renders one job per line of its input and answers
// each with a line of output. One is started per fuzzing process, and
// again after it dies.
type renderServer struct {
	cmd     *exec.Cmd
	in      io.WriteCloser
	lines   chan []byte
	stderr  *syncBuffer
	stopped chan struct{}
}

var (
	renderMu  sync.Mutex
	renderSrv *renderServer
)

func startRenderServer() (*renderServer, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestRenderChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), renderChildEnv+"=1")
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	s := &renderServer{cmd: cmd, in: in, lines: make(chan []byte), stderr: &syncBuffer{}, stopped: make(chan struct{})}
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		defer close(s.lines)
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 1<<26)
		for sc.Scan() {
			if line, ok := bytes.CutPrefix(sc.Bytes(), []byte(renderChildEnv+" ")); ok {
				select {
				case s.lines <- bytes.Clone(line):
				case <-s.stopped:
					return
				}
			}
		}
	}()
	return s, nil
}

// stop kills the server and returns what it wrote to its standard error.
func (s *renderServer) stop() []byte {
	close(s.stopped)
	s.cmd.Process.Kill()
	s.cmd.Wait()
	return s.stderr.Bytes()
}

// renderInChild renders job in the render server and returns what it
// found; it skips the input if the server ran into its stack, memory or
// time limit.
func renderInChild(t *testing.T, job renderJob) renderResult {
	t.Helper()
	renderMu.Lock()
	defer renderMu.Unlock()
	if renderSrv == nil {
		s, err := startRenderServer()
		if err != nil {
			t.Fatal(err)
		}
		renderSrv = s
	}
	b, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := renderSrv.in.Write(append(b, '\n')); err != nil {
		t.Logf("the render server is gone: %v", err)
	}
	var line []byte
	ok := false
	select {
	case line, ok = <-renderSrv.lines:
	case <-time.After(renderChildTimeout):
		renderSrv.stop()
		renderSrv = nil
		t.Skipf("the render ran past %v (the engine has no time limit)", renderChildTimeout)
	}
	if !ok {
		exited := renderSrv.cmd.Wait()
		stderr := renderSrv.stop()
		renderSrv = nil
		var exit *exec.ExitError
		switch {
		case errors.As(exited, &exit) && exit.ExitCode() == exitRenderMemory:
			t.Skipf("the render took more than %d MiB (the engine has no memory limit)", renderChildMemory>>20)
		case bytes.Contains(stderr, []byte("fatal error: stack overflow")):
			t.Skip("the render recursed without end (the engine has no depth limit)")
		case bytes.Contains(stderr, []byte("out of memory")):
			t.Skip("the render asked for more memory than there is (the engine has no memory limit)")
		}
		t.Fatalf("the render server died (%v):\n%s", exited, stderr)
	}
	var r renderResult
	if err := json.Unmarshal(line, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

// TestRenderChild is FuzzRenderTemplate's render server: with
// $PARALLAX_CHAT_RENDER_CHILD set, it renders the job on each line of its
// standard input under the limits, through Render and RenderJSON, and
// writes what it found as a line prefixed with the variable's name. It
// does nothing in an ordinary test run.
func TestRenderChild(t *testing.T) {
	if _, ok := os.LookupEnv(renderChildEnv); !ok {
		t.Skip("run by FuzzRenderTemplate only")
	}
	debug.SetMaxStack(renderChildStack)
	go func() {
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		for range time.Tick(2 * time.Millisecond) {
			if metrics.Read(s); s[0].Value.Uint64() > renderChildMemory {
				fmt.Fprintln(os.Stderr, "render: memory limit")
				os.Exit(exitRenderMemory)
			}
		}
	}()
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(nil, 1<<26)
	for sc.Scan() {
		var job renderJob
		if err := json.Unmarshal(sc.Bytes(), &job); err != nil {
			t.Fatal(err)
		}
		tmpl, err := ParseTemplate(string(job.Source))
		if err != nil {
			t.Fatal(err)
		}
		msgs := fuzzMessages(string(job.Content))
		o := RenderOptions{AddGenerationPrompt: job.AddGen, Tools: fuzzTools}
		var r renderResult
		out, err := tmpl.Render(msgs, o)
		r.Out, r.Err = []byte(out), errText(err)
		raw, err := json.Marshal(msgs)
		if err != nil {
			t.Fatal(err)
		}
		out, err = tmpl.RenderJSON(raw, o)
		r.OutJSON, r.ErrJSON = []byte(out), errText(err)
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("%s %s\n", renderChildEnv, b)
		runtime.GC() // the next job's memory is counted from here
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// FuzzRenderMessages renders fuzzed conversations with the templates of
// testdata (whose loops are bounded by the conversation, so they render in
// process) and with one that prints every content as it is. Render and
// RenderJSON on the conversation's JSON must agree, errors be prefixed
// "chat:", and the plain template give exactly the contents.
func FuzzRenderMessages(f *testing.F) {
	seeds := fuzzTemplateSeeds(f)
	var templates []*Template
	for _, src := range append(seeds[:2], "{% for m in messages %}{{ m.content }}{% endfor %}") {
		tmpl, err := ParseTemplate(src)
		if err != nil {
			f.Fatal(err)
		}
		templates = append(templates, tmpl)
	}
	plain := templates[len(templates)-1]
	f.Add("system", "You are terse.", "user", "Hi <|im_end|>", "assistant", "<think>\nhm\n</think>\n\nHello", "why", `{"q": [1, 2.5, "x"]}`, true)
	f.Add("user", "", "assistant", "", "tool", "{\"r\": null}", "", `"{\"a\": 1}"`, false)
	f.Add("user", "a\u2028b\\n\"", "user", "{{ not a tag }}", "assistant", "x", "", `{}`, true)
	f.Add("ipython", "é😀\x00", "assistant", "x</think>y", "user", "\t", "r", `[]`, false)
	f.Fuzz(func(t *testing.T, role1, content1, role2, content2, role3, content3, reasoning, args string, addGen bool) {
		msgs := []Message{{Role: role1, Content: content1}, {Role: role2, Content: content2}, {Role: role3, Content: content3, ReasoningContent: reasoning}}
		if json.Valid([]byte(args)) {
			msgs[2].ToolCalls = []ToolCall{{ID: "c1", Type: "function", Function: FunctionCall{Name: "f", Arguments: json.RawMessage(args)}}}
		}
		raw, err := json.Marshal(msgs)
		if err != nil {
			t.Fatal(err)
		}
		valid := true
		for _, m := range msgs {
			valid = valid && utf8.ValidString(m.Role) && utf8.ValidString(m.Content) && utf8.ValidString(m.ReasoningContent)
		}
		for i, tmpl := range templates {
			for _, o := range []RenderOptions{{AddGenerationPrompt: addGen}, {AddGenerationPrompt: addGen, Tools: fuzzTools, Vars: map[string]any{"enable_thinking": false}}} {
				got, err := tmpl.Render(msgs, o)
				gotJSON, errJSON := tmpl.RenderJSON(raw, o)
				for _, e := range []error{err, errJSON} {
					if e != nil && !strings.HasPrefix(e.Error(), "chat: ") {
						t.Fatalf("template %d: error %q is not prefixed chat:", i, e)
					}
				}
				if !valid {
					continue // JSON makes invalid UTF-8 valid
				}
				if got != gotJSON || (err == nil) != (errJSON == nil) {
					t.Fatalf("template %d: Render and RenderJSON differ:\nRender:     %q, %v\nRenderJSON: %q, %v", i, got, err, gotJSON, errJSON)
				}
				if tmpl != plain {
					continue
				}
				want := content1 + content2 + content3
				if strings.Contains(want, guard) {
					continue // the guard character is removed from the output, contents included
				}
				if err != nil || got != want {
					t.Fatalf("the plain template gave %q, %v; want %q", got, err, want)
				}
			}
		}
	})
}

// TestRangeBounded: range() makes at most maxRangeItems items, as in the
// sandbox transformers renders templates in, and refuses more (before, a
// template could ask for 10**12 items, or loop forever on a range whose
// step overflows int64), and otherwise counts as Python's does.
func TestRangeBounded(t *testing.T) {
	for _, c := range []struct {
		src, want, err string
	}{
		{"{{ range(3)|list }}", "[0, 1, 2]", ""},
		{"{{ range(1, 7, 2)|list }}", "[1, 3, 5]", ""},
		{"{{ range(5, 0, -2)|list }}", "[5, 3, 1]", ""},
		{"{{ range(0)|list }}{{ range(3, 1)|list }}{{ range(1, 3, -1)|list }}", "[][][]", ""},
		{"{{ range(-2, 2)|length }}", "4", ""},
		{"{{ range(100000)|length }}", "100000", ""},
		{"{{ range(100001)|length }}", "", "100001 items"},
		{"{{ range(10**12)|length }}", "", "more than the 100000"},
		{"{{ range(9223372036854775800, 9223372036854775807, 100)|list }}", "[9223372036854775800]", ""},
		{"{{ range(-9223372036854775807, 9223372036854775807)|length }}", "", "items"},
		{"{{ range(1, 2, 0) }}", "", "step must not be zero"},
		{"{{ range() }}", "", "1 to 3 arguments"},
	} {
		tmpl, err := ParseTemplate(c.src)
		if err != nil {
			t.Fatalf("%s: %v", c.src, err)
		}
		got, err := tmpl.Render(nil, RenderOptions{})
		switch {
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("%s = %q, %v; want %q", c.src, got, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s = %q, %v; want an error with %q", c.src, got, err, c.err)
		}
	}
}
