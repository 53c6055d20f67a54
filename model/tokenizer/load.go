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
