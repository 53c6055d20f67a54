package chat

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// chatCase is one conversation of testdata/cases.json.
type chatCase struct {
	Name     string            `json:"name"`
	Messages json.RawMessage   `json:"messages"`
	Tools    []json.RawMessage `json:"tools"`
	Vars     map[string]any    `json:"vars"`
}

// render is one entry of testdata/rendered.json: what transformers'
// apply_chat_template made of a case (or the error it raised).
type render struct {
	Template            string `json:"template"`
	Case                string `json:"case"`
	AddGenerationPrompt bool   `json:"add_generation_prompt"`
	Prompt              string `json:"prompt"`
	Error               string `json:"error"`
}

type renderedFile struct {
	MadeBy  string   `json:"made_by"`
	Renders []render `json:"renders"`
}

func readCases(t *testing.T) map[string]chatCase {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []chatCase
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	out := map[string]chatCase{}
	for _, c := range cases {
		out[c.Name] = c
	}
	return out
}

func renderCase(tmpl *Template, c chatCase, agp bool) (string, error) {
	return tmpl.RenderJSON(c.Messages, RenderOptions{AddGenerationPrompt: agp, Tools: c.Tools, Vars: c.Vars})
}

// TestRenderMatchesTransformers renders every case of testdata/cases.json
// with each template of testdata/templates and compares the prompts with
// testdata/rendered.json, made by scripts/tokenizer-fixtures.py with
// transformers' apply_chat_template.
func TestRenderMatchesTransformers(t *testing.T) {
	cases := readCases(t)
	data, err := os.ReadFile(filepath.Join("testdata", "rendered.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rf renderedFile
	if err := json.Unmarshal(data, &rf); err != nil {
		t.Fatal(err)
	}
	t.Logf("fixtures made by %s", rf.MadeBy)
	templates := map[string]*Template{}
	for _, r := range rf.Renders {
		tmpl := templates[r.Template]
		if tmpl == nil {
			tmpl, err = LoadTemplate(filepath.Join("testdata", "templates", r.Template))
			if err != nil {
				t.Fatal(err)
			}
			templates[r.Template] = tmpl
		}
		c, ok := cases[r.Case]
		if !ok {
			t.Fatalf("rendered.json names case %q, which cases.json lacks", r.Case)
		}
		got, err := renderCase(tmpl, c, r.AddGenerationPrompt)
		name := r.Template + "/" + r.Case
		if r.AddGenerationPrompt {
			name += "/generation prompt"
		}
		if r.Error != "" {
			if err == nil || !strings.Contains(err.Error(), r.Error) {
				t.Errorf("%s: err = %v, want an error with %q", name, err, r.Error)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got != r.Prompt {
			t.Errorf("%s:\ngot  %q\nwant %q", name, got, r.Prompt)
		}
	}
	if len(rf.Renders) < 2*len(cases) {
		t.Errorf("rendered.json has %d renders for %d cases", len(rf.Renders), len(cases))
	}
}
