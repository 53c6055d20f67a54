package chat

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// FuzzTemplate parses and renders arbitrary templates: an error is fine, a
// panic or a hang is not.
func FuzzTemplate(f *testing.F) {
	for _, name := range []string{"qwen3", "llama31"} {
		data, err := os.ReadFile(filepath.Join("testdata", "templates", name, ConfigFile))
		if err != nil {
			f.Fatal(err)
		}
		var cfg struct {
			ChatTemplate string `json:"chat_template"`
		}
		if err := json.Unmarshal(data, &cfg); err != nil {
			f.Fatal(err)
		}
		f.Add(cfg.ChatTemplate)
	}
	f.Add("{% for m in messages %}{{ m.role }}{% endfor %}")
	f.Add("{{ messages[0].content | tojson(indent=2) }}{% raw %}{{{% endraw %}")
	f.Add("{% set ns = namespace(a=1) %}{{ ns.a }}{{ raise_exception('x') }}")
	msgs := []Message{{Role: "system", Content: "s"}, {Role: "user", Content: "u"},
		{Role: "assistant", Content: "a", ReasoningContent: "r", ToolCalls: []ToolCall{{Function: FunctionCall{Name: "f", Arguments: json.RawMessage(`{"x": 1}`)}}}},
		{Role: "tool", Content: "t", ToolCallID: "1"}}
	f.Fuzz(func(t *testing.T, src string) {
		if len(src) > 1<<14 {
			t.Skip()
		}
		tmpl, err := ParseTemplate(src)
		if err != nil {
			return
		}
		tmpl.Render(msgs, RenderOptions{AddGenerationPrompt: true, Tools: []json.RawMessage{json.RawMessage(`{"type": "function"}`)}})
	})
}

// FuzzGenerationConfig parses arbitrary generation_config.json files; what
// it accepts must be in range.
func FuzzGenerationConfig(f *testing.F) {
	f.Add([]byte(`{"eos_token_id": [151645, 151643], "temperature": 0.6, "top_p": 0.95, "top_k": 20, "do_sample": true}`))
	f.Add([]byte(`{"eos_token_id": 2, "bos_token_id": 1}`))
	f.Add([]byte(`{"eos_token_id": null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := ParseGenerationConfig(data)
		if err != nil {
			return
		}
		for _, id := range g.EOS {
			if id < 0 || id >= maxTokenID {
				t.Fatalf("eos id %d accepted", id)
			}
		}
		if g.TopP != nil && !(*g.TopP > 0 && *g.TopP <= 1) || g.TopK != nil && *g.TopK < 0 || g.Temperature != nil && !(*g.Temperature >= 0) {
			t.Fatalf("out-of-range sampling settings accepted: %+v", g)
		}
	})
}
