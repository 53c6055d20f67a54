package chat

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestJinjaWhitespace: trim_blocks, lstrip_blocks and the trim markers act
// on the text right beside a tag, as in Jinja.
func TestJinjaWhitespace(t *testing.T) {
	tests := []struct{ src, want string }{
		{"{% for m in messages %}{{ m.content }}\n{% endfor %}", "a\nb\n"},
		{"{% for m in messages %}\n{{ m.content }}\n{% endfor %}", "a\nb\n"},
		{"{% for m in messages %}  {{ m.content }}{% endfor %}", "  a  b"},
		{"x\n    {%- for m in messages %}{{ m.content }}{% endfor %}", "xab"},
		{"{% for m in messages %}\n    {{ m.content }}\n{% endfor %}", "    a\n    b\n"},
		{"{{ 'x' }}   {% if true %}y{% endif %}", "x   y"},
		{"{{ 'x' }} {{- 'y' }}", "xy"},
		{"{# c #}\n{{ 'x' }}", "x"},
		{"  {% if true %}y{% endif %}", "y"},
		{"{% raw %}{{ x }}{% endraw %}", "{{ x }}"},
		{"{{ '}}' }}{{ \"%}\" }}", "}}%}"},
		{"{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}", "2"},
		{"{{ messages[::-1][0].content }}{{ messages[1:]|length }}{{ 'a,b'.split(',')[-1] }}", "b1b"},
		{"{{ ' x '.strip() }}|{{ 'xxy'.lstrip('x') }}|{{ 'yxx'.rstrip('x') }}|{{ 'ab'.startswith('a') }}|{{ 'ab'.endswith('a') }}", "x|y|y|True|False"},
		{"{% for m in messages %}{{ loop.index0 }}{% if loop.last %}!{% endif %}{% endfor %}", "01!"},
	}
	msgs := []Message{{Role: "user", Content: "a"}, {Role: "assistant", Content: "b"}}
	for _, tt := range tests {
		tmpl, err := ParseTemplate(tt.src)
		if err != nil {
			t.Errorf("%q: %v", tt.src, err)
			continue
		}
		got, err := tmpl.Render(msgs, RenderOptions{})
		if err != nil || got != tt.want {
			t.Errorf("%q: %q, %v; want %q", tt.src, got, err, tt.want)
		}
	}
}

func TestToJSON(t *testing.T) {
	tests := []struct{ json, src, want string }{
		{`{"b": 1, "a": [1.5, 2.0, "x<y>&\u00e9\n"], "c": null, "d": true, "e": {}}`, `{{ v | tojson }}`, `{"b": 1, "a": [1.5, 2.0, "x<y>&é\n"], "c": null, "d": true, "e": {}}`},
		{`{"b": 1, "a": [1, 2]}`, `{{ v | tojson(indent=2) }}`, "{\n  \"b\": 1,\n  \"a\": [\n    1,\n    2\n  ]\n}"},
		{`{"b": 1, "a": 2}`, `{{ v | tojson(sort_keys=true) }}`, `{"a": 2, "b": 1}`},
		{`{"a": "é"}`, `{{ v | tojson(ensure_ascii=true) }}`, `{"a": "\u00e9"}`},
		{`{"a": 1e-7, "b": 1e20, "c": 0.1}`, `{{ v|tojson(separators=[",", ":"]) }}`, `{"a":1e-07,"b":1e+20,"c":0.1}`},
	}
	for _, tt := range tests {
		tmpl, err := ParseTemplate(tt.src)
		if err != nil {
			t.Fatal(err)
		}
		got, err := tmpl.Render(nil, RenderOptions{Vars: map[string]any{"v": json.RawMessage(tt.json)}})
		if err != nil || got != tt.want {
			t.Errorf("%s %s: %q, %v; want %q", tt.json, tt.src, got, err, tt.want)
		}
	}
}

func TestTemplateErrors(t *testing.T) {
	tests := []struct{ src, want string }{
		{"{% for m in messages %}", "template"},
		{"{{ raise_exception('no system messages') }}", "no system messages"},
		{"{{ 1 | nosuchfilter }}", "nosuchfilter"},
		{"{% if %}", "template"},
	}
	for _, tt := range tests {
		tmpl, err := ParseTemplate(tt.src)
		if err == nil {
			_, err = tmpl.Render(nil, RenderOptions{})
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: err = %v, want %q", tt.src, err, tt.want)
		}
	}
}

func TestLoadTemplate(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadTemplate(dir); err == nil || !strings.Contains(err.Error(), "no chat template") {
		t.Errorf("empty dir: %v", err)
	}
	os.WriteFile(filepath.Join(dir, TemplateFile), []byte("{{ bos_token }}{{ eos_token }}"), 0o644)
	os.WriteFile(filepath.Join(dir, ConfigFile), []byte(`{"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>", "pad_token": null}`), 0o644)
	tmpl, err := LoadTemplate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := tmpl.Render(nil, RenderOptions{}); err != nil || s != "<s></s>" {
		t.Errorf("Render = %q, %v", s, err)
	}
	os.WriteFile(filepath.Join(dir, ConfigFile), []byte(`{"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]}`), 0o644)
	if tmpl, err := LoadTemplate(dir); err != nil || tmpl.Source != "D" {
		t.Errorf("named templates: %v", err)
	}
	for _, bad := range []string{`{"chat_template": 3}`, `{"chat_template": "{% if %}"}`, `{"chat_template": "x", "eos_token": 3}`, `{`} {
		os.WriteFile(filepath.Join(dir, ConfigFile), []byte(bad), 0o644)
		if _, err := LoadTemplate(dir); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

func TestGenerationConfig(t *testing.T) {
	tests := []struct {
		json string
		eos  []int
		err  string
	}{
		{`{"eos_token_id": 2}`, []int{2}, ""},
		{`{"eos_token_id": [151645, 151643], "temperature": 0.6, "top_p": 0.95, "top_k": 20, "do_sample": true}`, []int{151645, 151643}, ""},
		{`{}`, nil, ""},
		{`{"eos_token_id": "x"}`, nil, "eos_token_id"},
		{`{"eos_token_id": -1}`, nil, "outside"},
		{`{"temperature": -1}`, nil, "temperature"},
		{`{"top_p": 0}`, nil, "top_p"},
		{`{"top_k": -3}`, nil, "top_k"},
		{`[`, nil, "unexpected end"},
	}
	for _, tt := range tests {
		g, err := ParseGenerationConfig([]byte(tt.json))
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: err = %v, want %q", tt.json, err, tt.err)
			}
			continue
		}
		if err != nil || !slices.Equal(g.EOS, tt.eos) {
			t.Errorf("%s: %v, %v", tt.json, g, err)
		}
	}
	if g, err := LoadGenerationConfig(t.TempDir()); err != nil || g.EOS != nil {
		t.Errorf("missing file: %v, %v", g, err)
	}
}
