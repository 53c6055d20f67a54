// Package chat renders conversations into prompts with a model's chat
// template, the Jinja template a Hugging Face tokenizer_config.json carries
// as chat_template, the way transformers' apply_chat_template does: the
// template sees messages, tools, add_generation_prompt, the special tokens
// (bos_token, eos_token, pad_token, unk_token) and any extra variables, with
// trim_blocks and lstrip_blocks on, and its tojson filter is Python's
// json.dumps with ensure_ascii=False.
//
// It also reads generation_config.json, whose EOS ids and sampling defaults
// generation uses.
package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/ardanlabs/jinja"
)

// Message is one message of a conversation, in OpenAI's JSON form.
type Message struct {
	Role             string     `json:"role"`
	Content          string     `json:"content"`
	ReasoningContent string     `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID       string     `json:"tool_call_id,omitempty"`
	Name             string     `json:"name,omitempty"`
}

// ToolCall is a call of a tool that an assistant message makes.
type ToolCall struct {
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names the function a ToolCall calls and its arguments: a
// JSON object, or a JSON string holding one (as OpenAI sends them).
type FunctionCall struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// RenderOptions configure Render.
type RenderOptions struct {
	// AddGenerationPrompt ends the prompt with the start of an assistant
	// message.
	AddGenerationPrompt bool
	// Tools are the tool (function) definitions, each a JSON object in
	// OpenAI's form; nil for none.
	Tools []json.RawMessage
	// Vars are extra template variables (enable_thinking, say); they can
	// replace the standard ones.
	Vars map[string]any
}

// Template is a compiled chat template with the special tokens it refers
// to.
type Template struct {
	// Source is the template's Jinja source.
	Source string
	// BOSToken, EOSToken, PadToken and UnkToken are the contents of the
	// special tokens tokenizer_config.json names ("" where it names none).
	BOSToken, EOSToken, PadToken, UnkToken string

	tmpl *jinja.Template
}

// ConfigFile is the name of the file LoadTemplate reads.
const ConfigFile = "tokenizer_config.json"

// TemplateFile is where newer transformers save the template instead of
// tokenizer_config.json.
const TemplateFile = "chat_template.jinja"

// LoadTemplate reads the chat template of the model in dir: chat_template
// of tokenizer_config.json (a string, or a list of named templates, of
// which it takes "default") or else chat_template.jinja, and the special
// tokens of tokenizer_config.json.
func LoadTemplate(dir string) (*Template, error) {
	path := filepath.Join(dir, ConfigFile)
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("chat: %w", err)
	}
	var cfg struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
		BOS          json.RawMessage `json:"bos_token"`
		EOS          json.RawMessage `json:"eos_token"`
		Pad          json.RawMessage `json:"pad_token"`
		Unk          json.RawMessage `json:"unk_token"`
	}
	if data != nil {
		if err := json.Unmarshal(data, &cfg); err != nil {
			return nil, fmt.Errorf("chat: %s: %v", path, err)
		}
	}
	src, err := templateSource(cfg.ChatTemplate)
	if err != nil {
		return nil, fmt.Errorf("chat: %s: %v", path, err)
	}
	where := path
	if src == "" {
		jpath := filepath.Join(dir, TemplateFile)
		b, err := os.ReadFile(jpath)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("chat: no chat template in %s (neither chat_template in %s nor %s)", dir, ConfigFile, TemplateFile)
			}
			return nil, fmt.Errorf("chat: %w", err)
		}
		src, where = string(b), jpath
	}
	t, err := ParseTemplate(src)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	for _, f := range []struct {
		raw  json.RawMessage
		dst  *string
		name string
	}{{cfg.BOS, &t.BOSToken, "bos_token"}, {cfg.EOS, &t.EOSToken, "eos_token"}, {cfg.Pad, &t.PadToken, "pad_token"}, {cfg.Unk, &t.UnkToken, "unk_token"}} {
		if *f.dst, err = tokenContent(f.raw); err != nil {
			return nil, fmt.Errorf("chat: %s: %s: %v", path, f.name, err)
		}
	}
	return t, nil
}

// templateSource reads chat_template: a string or [{"name", "template"}].
func templateSource(raw json.RawMessage) (string, error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", fmt.Errorf("chat_template is neither a string nor a list of named templates")
	}
	for _, n := range named {
		if n.Name == "default" {
			return n.Template, nil
		}
	}
	return "", fmt.Errorf("chat_template has no template named \"default\"")
}

// tokenContent reads a special token: a string, {"content": ...} or null.
func tokenContent(raw json.RawMessage) (string, error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if json.Unmarshal(raw, &obj) != nil || obj.Content == nil {
		return "", fmt.Errorf("want a string or an object with \"content\"")
	}
	return *obj.Content, nil
}

// tojsonFilter finds uses of the tojson filter, which the template engine
// gets as our own filter: Python's json.dumps, with its options.
var tojsonFilter = regexp.MustCompile(`\|\s*tojson\b`)

// ParseTemplate compiles a chat template.
func ParseTemplate(src string) (t *Template, err error) {
	defer func() {
		if r := recover(); r != nil {
			t, err = nil, fmt.Errorf("chat: template: %v", r)
		}
	}()
	tmpl, err := jinja.Compile(guardAdjacentTags(tojsonFilter.ReplaceAllString(src, "|"+tojsonName)))
	if err != nil {
		return nil, fmt.Errorf("chat: template: %w", err)
	}
	return &Template{Source: src, tmpl: tmpl}, nil
}

const tojsonName = "__parallax_tojson"

// Render renders a conversation into a prompt.
func (t *Template) Render(msgs []Message, o RenderOptions) (string, error) {
	list := make([]jinja.Value, len(msgs))
	for i, m := range msgs {
		v, err := messageValue(m)
		if err != nil {
			return "", fmt.Errorf("chat: messages[%d]: %w", i, err)
		}
		list[i] = v
	}
	return t.render(jinja.NewList(list), o)
}

// RenderJSON is Render on messages given as a JSON list, which the template
// sees exactly as written: fields Message lacks, null contents, contents
// that are lists of parts.
func (t *Template) RenderJSON(messages []byte, o RenderOptions) (string, error) {
	v, err := ParseJSONValue(messages)
	if err != nil {
		return "", fmt.Errorf("chat: messages: %w", err)
	}
	if !v.IsList() {
		return "", errors.New("chat: messages: want a JSON list of messages")
	}
	for i, m := range v.AsList().Items {
		if !m.IsDict() {
			return "", fmt.Errorf("chat: messages[%d]: want an object", i)
		}
	}
	return t.render(v, o)
}

func (t *Template) render(messages jinja.Value, o RenderOptions) (out string, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = "", fmt.Errorf("chat: render: %v", r)
		}
	}()
	data := map[string]jinja.Value{
		"messages":              messages,
		"add_generation_prompt": jinja.NewBool(o.AddGenerationPrompt),
		"tools":                 jinja.None(),
		"documents":             jinja.None(),
		tojsonName:              jinja.NewCallable("tojson", tojson),
		"range":                 jinja.NewCallable("range", rangeFunc),
	}
	for name, s := range map[string]string{"bos_token": t.BOSToken, "eos_token": t.EOSToken, "pad_token": t.PadToken, "unk_token": t.UnkToken} {
		if s != "" {
			data[name] = jinja.NewString(s)
		}
	}
	if o.Tools != nil {
		tools := make([]jinja.Value, len(o.Tools))
		for i, raw := range o.Tools {
			v, err := ParseJSONValue(raw)
			if err != nil {
				return "", fmt.Errorf("chat: tools[%d]: %w", i, err)
			}
			tools[i] = v
		}
		data["tools"] = jinja.NewList(tools)
	}
	for k, v := range o.Vars {
		if raw, ok := v.(json.RawMessage); ok {
			jv, err := ParseJSONValue(raw)
			if err != nil {
				return "", fmt.Errorf("chat: variable %s: %w", k, err)
			}
			data[k] = jv
			continue
		}
		data[k] = jinja.FromGoValue(v)
	}
	s, err := t.tmpl.RenderValues(data)
	if err != nil {
		return "", fmt.Errorf("chat: render: %s", strings.TrimPrefix(err.Error(), "jinja: "))
	}
	return strings.ReplaceAll(s, guard, ""), nil
}

// messageValue converts a Message as transformers would see its JSON:
// the optional fields only where set.
func messageValue(m Message) (jinja.Value, error) {
	d := jinja.NewDict()
	dict := d.AsDict()
	dict.Set("role", jinja.NewString(m.Role))
	dict.Set("content", jinja.NewString(m.Content))
	if m.ReasoningContent != "" {
		dict.Set("reasoning_content", jinja.NewString(m.ReasoningContent))
	}
	if len(m.ToolCalls) > 0 {
		b, err := json.Marshal(m.ToolCalls)
		if err != nil {
			return jinja.Value{}, err
		}
		v, err := ParseJSONValue(b)
		if err != nil {
			return jinja.Value{}, err
		}
		dict.Set("tool_calls", v)
	}
	if m.ToolCallID != "" {
		dict.Set("tool_call_id", jinja.NewString(m.ToolCallID))
	}
	if m.Name != "" {
		dict.Set("name", jinja.NewString(m.Name))
	}
	return d, nil
}

// maxRangeItems bounds the lists range makes, as the sandbox transformers
// renders chat templates in does (its MAX_RANGE): the engine's own range
// builds the whole list, so range(10**12) would exhaust the memory, and
// counts with an int64 that can overflow and never end.
const maxRangeItems = 100_000

// rangeFunc is Python's range(stop), range(start, stop[, step]), with
// arguments converted to integers as the engine's range converts them,
// refusing more than maxRangeItems items.
func rangeFunc(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) < 1 || len(args) > 3 {
		return jinja.Value{}, fmt.Errorf("range: expected 1 to 3 arguments, got %d", len(args))
	}
	n := make([]int64, len(args))
	for i, a := range args {
		switch {
		case a.IsInt():
			n[i] = a.AsInt()
		case a.IsFloat():
			n[i] = int64(a.AsFloat())
		case a.IsBool() && a.AsBool():
			n[i] = 1
		case a.IsString():
			fmt.Sscanf(a.AsString(), "%d", &n[i])
		}
	}
	start, stop, step := int64(0), n[0], int64(1)
	if len(n) > 1 {
		start, stop = n[0], n[1]
	}
	if len(n) > 2 {
		step = n[2]
	}
	if step == 0 {
		return jinja.Value{}, errors.New("range: step must not be zero")
	}
	// The count in uint64, which holds any difference of two int64s.
	var count uint64
	switch {
	case step > 0 && start < stop:
		count = (uint64(stop)-uint64(start)-1)/uint64(step) + 1
	case step < 0 && start > stop:
		count = (uint64(start)-uint64(stop)-1)/(-uint64(step)) + 1
	}
	if count > maxRangeItems {
		return jinja.Value{}, fmt.Errorf("range(%d, %d, %d) would make %d items, more than the %d allowed", start, stop, step, count, maxRangeItems)
	}
	items := make([]jinja.Value, count)
	for i := range items {
		items[i] = jinja.NewInt(start + int64(i)*step)
	}
	return jinja.NewList(items), nil
}
