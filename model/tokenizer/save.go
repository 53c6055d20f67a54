package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/parallax-engine/parallax/internal/atomicfile"
)

// SaveHF writes the tokenizer as a Hugging Face tokenizer.json, which LoadHF
// and the tokenizers library both read: a BPE model with GPT-2's ByteLevel
// pre-tokenizer and decoder, the special tokens as added tokens (or, for a
// tokenizer loaded from a tokenizer.json of another layout, that file).
func (t *Tokenizer) SaveHF(path string) error {
	if err := atomicfile.WriteFile(path, t.hfJSON()); err != nil {
		return fmt.Errorf("tokenizer: save %s: %w", path, err)
	}
	return nil
}

// Save writes tokenizer.json, vocab.json and merges.txt into dir, creating
// it if needed. LoadHF reads the first, LoadGPT2 the other two.
func (t *Tokenizer) Save(dir string) error {
	merges, err := t.mergesTxt()
	if err != nil {
		return fmt.Errorf("tokenizer: save: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("tokenizer: save: %w", err)
	}
	for _, f := range []struct {
		name string
		data []byte
	}{
		{"tokenizer.json", t.hfJSON()},
		{"vocab.json", t.vocabJSON("")},
		{"merges.txt", merges},
	} {
		path := filepath.Join(dir, f.name)
		if err := atomicfile.WriteFile(path, f.data); err != nil {
			return fmt.Errorf("tokenizer: save %s: %w", path, err)
		}
	}
	return nil
}

// jsonString quotes s as JSON without escaping <, > and &.
func jsonString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(s) // a string always encodes
	return strings.TrimSuffix(b.String(), "\n")
}

// vocabJSON writes the vocabulary as a JSON object in id order, one token a
// line, each line after the first starting with indent.
func (t *Tokenizer) vocabJSON(indent string) []byte {
	var b bytes.Buffer
	b.WriteString("{")
	first := true
	for id, tok := range t.tokens {
		if tok == "" {
			continue
		}
		if !first {
			b.WriteString(",")
		}
		first = false
		fmt.Fprintf(&b, "\n%s  %s: %d", indent, jsonString(tok), id)
	}
	fmt.Fprintf(&b, "\n%s}", indent)
	if indent == "" {
		b.WriteString("\n")
	}
	return b.Bytes()
}

// mergesTxt writes merges.txt. A merge with a space in a token cannot be
// written in that format.
func (t *Tokenizer) mergesTxt() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("#version: 0.2\n")
	for rank, m := range t.ranked {
		a, c := t.tokens[m[0]], t.tokens[m[1]]
		if strings.ContainsAny(a+c, " \n\r") {
			return nil, fmt.Errorf("merge %d (%q %q) has white space in a token; merges.txt cannot hold it", rank, a, c)
		}
		fmt.Fprintf(&b, "%s %s\n", a, c)
	}
	return b.Bytes(), nil
}

// hfJSON writes tokenizer.json in the layout the tokenizers library writes;
// a tokenizer read from a tokenizer.json that is not in GPT-2's layout
// writes that file back as it was.
func (t *Tokenizer) hfJSON() []byte {
	if t.pipe != nil {
		return t.pipe.source
	}
	var b bytes.Buffer
	b.WriteString("{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [")
	for i, s := range t.Specials() {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "\n    {\"id\": %d, \"content\": %s, \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": true}",
			t.specialIDs[s], jsonString(s))
	}
	if len(t.specialIDs) > 0 {
		b.WriteString("\n  ")
	}
	b.WriteString("],\n")
	const byteLevel = `{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}`
	fmt.Fprintf(&b, "  \"normalizer\": null,\n  \"pre_tokenizer\": %s,\n  \"post_processor\": %s,\n  \"decoder\": %s,\n", byteLevel, byteLevel, byteLevel)
	fmt.Fprintf(&b, "  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": null,\n    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n    \"fuse_unk\": false,\n    \"byte_fallback\": false,\n    \"ignore_merges\": %v,\n", t.ignoreMerges)
	b.WriteString("    \"vocab\": ")
	b.Write(t.vocabJSON("    "))
	b.WriteString(",\n    \"merges\": [")
	// Pairs when a token holds a space (which "a b" cannot say), else the
	// "a b" strings that every version of the library reads.
	pairs := false
	for _, m := range t.ranked {
		if strings.Contains(t.tokens[m[0]]+t.tokens[m[1]], " ") {
			pairs = true
		}
	}
	for i, m := range t.ranked {
		if i > 0 {
			b.WriteString(",")
		}
		a, c := t.tokens[m[0]], t.tokens[m[1]]
		if pairs {
			fmt.Fprintf(&b, "\n      [%s, %s]", jsonString(a), jsonString(c))
		} else {
			fmt.Fprintf(&b, "\n      %s", jsonString(a+" "+c))
		}
	}
	if len(t.ranked) > 0 {
		b.WriteString("\n    ")
	}
	b.WriteString("]\n  }\n}\n")
	return b.Bytes()
}
