package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"
)

// LoadGPT2 loads a tokenizer from GPT-2's two files: vocabPath, a JSON object
// from token to id (vocab.json, or encoder.json in OpenAI's release), and
// mergesPath, one merge "a b" per line in rank order after a "#version"
// line (merges.txt, or vocab.bpe). Tokens that are neither a single byte nor
// the result of a merge, such as <|endoftext|>, become special tokens.
func LoadGPT2(vocabPath, mergesPath string) (*Tokenizer, error) {
	vocab, err := os.ReadFile(vocabPath)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	merges, err := os.Open(mergesPath)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	defer merges.Close()
	return ReadGPT2(bytes.NewReader(vocab), vocabPath, merges, mergesPath)
}

// ReadGPT2 is LoadGPT2 on readers; the names are used in errors.
func ReadGPT2(vocab io.Reader, vocabName string, merges io.Reader, mergesName string) (*Tokenizer, error) {
	data, err := io.ReadAll(vocab)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", vocabName, err)
	}
	entries, err := parseVocabJSON(data, vocabName, false)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	ms, err := parseMergesTxt(merges, mergesName)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := build(entries, ms, nil, false)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s, %s: %w", vocabName, mergesName, err)
	}
	return t, nil
}

// parseVocabJSON reads a JSON object from token to id, keeping each token's
// position for errors and refusing duplicate tokens and ids that are not
// integers.
func parseVocabJSON(data []byte, name string, keyed bool) ([]vocabEntry, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	lc := lineCounter{data: data}
	at := func() string {
		off := dec.InputOffset()
		for off < int64(len(data)) && strings.IndexByte(" \t\r\n,", data[off]) >= 0 {
			off++ // to the start of the next key or value
		}
		line, col := lc.at(off)
		return fmt.Sprintf("%s:%d:%d", name, line, col)
	}
	fail := func(err error) error {
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			line, col := lineCol(data, syn.Offset-1)
			return fmt.Errorf("%s:%d:%d: %v", name, line, col, err)
		}
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%s: unexpected end of file", name)
		}
		return fmt.Errorf("%s: %v", at(), err)
	}
	start := at()
	tok, err := dec.Token()
	if err != nil {
		return nil, fail(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("%s: want a JSON object from token to id", start)
	}
	var entries []vocabEntry
	seen := make(map[string]bool)
	for dec.More() {
		where := at()
		key, err := dec.Token()
		if err != nil {
			return nil, fail(err)
		}
		token := key.(string) // object keys are always strings
		if keyed {
			where = fmt.Sprintf("%s[%q]", name, token)
		}
		val, err := dec.Token()
		if err != nil {
			return nil, fail(err)
		}
		id, err := intID(val)
		if err != nil && keyed {
			return nil, fmt.Errorf("%s: %v", where, err)
		} else if err != nil {
			return nil, fmt.Errorf("%s: token %q: %v", where, token, err)
		}
		if seen[token] {
			return nil, fmt.Errorf("%s: token %q appears twice", where, token)
		}
		seen[token] = true
		entries = append(entries, vocabEntry{token: token, id: id, where: where})
	}
	if _, err := dec.Token(); err != nil {
		return nil, fail(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%s: data after the JSON object", at())
	}
	return entries, nil
}

// intID converts a JSON value to a token id.
func intID(v any) (int, error) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, fmt.Errorf("id is %s, not a number", jsonKind(v))
	}
	i, err := n.Int64()
	if err != nil || i < 0 || i >= maxID {
		return 0, fmt.Errorf("id %s is not an integer in [0, %d)", n, maxID)
	}
	return int(i), nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case string:
		return "a string"
	case json.Delim:
		return "an array or object"
	}
	return fmt.Sprintf("%T", v)
}

// jsonTypeName says in JSON's words what a Go type wants.
func jsonTypeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Pointer:
		return jsonTypeName(t.Elem())
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		if t == reflect.TypeFor[json.RawMessage]() {
			return "a JSON value"
		}
		return "a list"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "an integer"
	case reflect.Float64, reflect.Float32:
		return "a number"
	}
	return t.String()
}

// lineCol converts a byte offset in data to a 1-based line and column.
func lineCol(data []byte, off int64) (line, col int) {
	off = min(max(off, 0), int64(len(data)))
	before := data[:off]
	line = 1 + bytes.Count(before, []byte{'\n'})
	col = 1 + len(before) - (bytes.LastIndexByte(before, '\n') + 1)
	return line, col
}

// lineCounter is lineCol for offsets that only grow, in linear time overall.
type lineCounter struct {
	data      []byte
	off       int // bytes counted so far
	line      int // newlines in data[:off]
	lineStart int // offset just after the last of them
}

func (c *lineCounter) at(off int64) (line, col int) {
	o := min(max(int(off), 0), len(c.data))
	if o < c.off {
		return lineCol(c.data, off)
	}
	for i, b := range c.data[c.off:o] {
		if b == '\n' {
			c.line++
			c.lineStart = c.off + i + 1
		}
	}
	c.off = o
	return c.line + 1, o - c.lineStart + 1
}

// parseMergesTxt reads merges.txt: an optional first line "#version: ...",
// then one merge "a b" per line. Empty lines are skipped.
func parseMergesTxt(r io.Reader, name string) ([]mergeEntry, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var merges []mergeEntry
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSuffix(line, "\r")
		if line == "" || (i == 0 && strings.HasPrefix(line, "#version")) {
			continue
		}
		a, b, ok := strings.Cut(line, " ")
		if !ok || a == "" || b == "" || strings.Contains(b, " ") {
			return nil, fmt.Errorf("%s:%d: want a merge \"a b\" (two tokens and one space), have %q", name, i+1, line)
		}
		merges = append(merges, mergeEntry{a: a, b: b, where: fmt.Sprintf("%s:%d", name, i+1)})
	}
	return merges, nil
}

// LoadHF loads a Hugging Face tokenizer.json whose model is byte-level BPE
// with GPT-2's pre-tokenization: model.type "BPE", model.vocab, model.merges
// as "a b" strings or ["a", "b"] pairs, and added_tokens, which become special
// tokens. Post-processing (such as adding a BOS token) is not applied.
func LoadHF(path string) (*Tokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := parseHF(data, path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return t, nil
}

// ReadHF is LoadHF on a reader; name is used in errors.
func ReadHF(r io.Reader, name string) (*Tokenizer, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", name, err)
	}
	t, err := parseHF(data, name)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return t, nil
}

type hfFile struct {
	AddedTokens []struct {
		ID      *int    `json:"id"`
		Content *string `json:"content"`
	} `json:"added_tokens"`
	Normalizer   json.RawMessage `json:"normalizer"`
	PreTokenizer json.RawMessage `json:"pre_tokenizer"`
	Model        *struct {
		Type                    string          `json:"type"`
		Dropout                 *float64        `json:"dropout"`
		ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
		EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
		IgnoreMerges            bool            `json:"ignore_merges"`
		Vocab                   json.RawMessage `json:"vocab"`
		Merges                  json.RawMessage `json:"merges"`
	} `json:"model"`
}

type hfByteLevel struct {
	Type           string `json:"type"`
	AddPrefixSpace bool   `json:"add_prefix_space"`
	UseRegex       *bool  `json:"use_regex"`
}

func parseHF(data []byte, name string) (*Tokenizer, error) {
	var f hfFile
	if err := json.Unmarshal(data, &f); err != nil {
		var syn *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &syn):
			line, col := lineCol(data, syn.Offset-1)
			return nil, fmt.Errorf("%s:%d:%d: %v", name, line, col, err)
		case errors.As(err, &typ):
			line, col := lineCol(data, typ.Offset)
			return nil, fmt.Errorf("%s:%d:%d: %s is %s, want %s", name, line, col, typ.Field, typ.Value, jsonTypeName(typ.Type))
		}
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	m := f.Model
	if m == nil {
		return nil, fmt.Errorf("%s: no \"model\"", name)
	}
	if m.Type != "BPE" && m.Type != "" {
		return nil, fmt.Errorf("%s: model.type is %q; only \"BPE\" is supported", name, m.Type)
	}
	if m.Dropout != nil && *m.Dropout != 0 {
		return nil, fmt.Errorf("%s: model.dropout %g is not supported", name, *m.Dropout)
	}
	if m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "" {
		return nil, fmt.Errorf("%s: model.continuing_subword_prefix %q is not supported", name, *m.ContinuingSubwordPrefix)
	}
	if m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "" {
		return nil, fmt.Errorf("%s: model.end_of_word_suffix %q is not supported", name, *m.EndOfWordSuffix)
	}
	if n := bytes.TrimSpace(f.Normalizer); len(n) > 0 && string(n) != "null" {
		return nil, fmt.Errorf("%s: normalizer %s is not supported (GPT-2 byte-level BPE has none)", name, clip(n))
	}
	if err := checkPreTokenizer(f.PreTokenizer); err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	if len(m.Vocab) == 0 {
		return nil, fmt.Errorf("%s: no model.vocab", name)
	}
	vocab, err := parseVocabJSON(m.Vocab, "model.vocab", true)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	merges, err := parseHFMerges(m.Merges)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	specials := []vocabEntry{}
	for i, a := range f.AddedTokens {
		where := fmt.Sprintf("added_tokens[%d]", i)
		if a.ID == nil || a.Content == nil {
			return nil, fmt.Errorf("%s: %s: want both \"id\" and \"content\"", name, where)
		}
		specials = append(specials, vocabEntry{token: *a.Content, id: *a.ID, where: where})
	}
	t, err := build(vocab, merges, specials, m.IgnoreMerges)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	return t, nil
}

// checkPreTokenizer accepts GPT-2's pre-tokenization: ByteLevel with the
// regular expression and no prefix space, alone or as the only step of a
// Sequence.
func checkPreTokenizer(raw json.RawMessage) error {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return fmt.Errorf("pre_tokenizer is missing; byte-level BPE needs ByteLevel")
	}
	var p struct {
		hfByteLevel
		Pretokenizers []json.RawMessage `json:"pretokenizers"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return fmt.Errorf("pre_tokenizer: %v", err)
	}
	if p.Type == "Sequence" && len(p.Pretokenizers) == 1 {
		return checkPreTokenizer(p.Pretokenizers[0])
	}
	if p.Type != "ByteLevel" || p.AddPrefixSpace || (p.UseRegex != nil && !*p.UseRegex) {
		return fmt.Errorf("pre_tokenizer %s is not supported: only ByteLevel with add_prefix_space false and use_regex true (GPT-2's)", clip(raw))
	}
	return nil
}

func clip(b []byte) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}

// parseHFMerges reads model.merges in either encoding: "a b" strings (older
// files) or ["a", "b"] pairs (newer ones, which allow spaces in tokens).
func parseHFMerges(raw json.RawMessage) ([]mergeEntry, error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return nil, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("model.merges: want a list: %v", err)
	}
	merges := make([]mergeEntry, len(items))
	for i, item := range items {
		where := fmt.Sprintf("model.merges[%d]", i)
		var s string
		var pair []string
		if json.Unmarshal(item, &s) == nil {
			a, b, ok := strings.Cut(s, " ")
			if !ok || a == "" || b == "" || strings.Contains(b, " ") {
				return nil, fmt.Errorf("%s: want \"a b\" (two tokens and one space), have %q", where, s)
			}
			merges[i] = mergeEntry{a: a, b: b, where: where}
		} else if json.Unmarshal(item, &pair) == nil {
			if len(pair) != 2 || pair[0] == "" || pair[1] == "" {
				return nil, fmt.Errorf("%s: want a pair of two non-empty tokens, have %s", where, clip(item))
			}
			merges[i] = mergeEntry{a: pair[0], b: pair[1], where: where}
		} else {
			return nil, fmt.Errorf("%s: want \"a b\" or [\"a\", \"b\"], have %s", where, clip(item))
		}
	}
	return merges, nil
}
