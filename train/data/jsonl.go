package data

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// JSONL sample formats (PrepareOptions.Format).
const (
	FormatAuto = "auto" // the first sample's keys decide: "text" or "messages"
	FormatText = "text" // {"text": "..."} per line
	FormatChat = "chat" // {"messages": [{"role": "...", "content": "..."}, ...]} per line
)

// MaxLineBytes is the longest JSONL line accepted (64 MiB).
const MaxLineBytes = 64 << 20

// Message is one turn of a chat sample.
type Message struct {
	Role    string
	Content string
}

// Sample is one line of a JSONL file: a text or a conversation.
type Sample struct {
	Line     int // 1-based line number in its file
	Text     string
	Messages []Message
}

// ParseTextSample parses one {"text": "..."} line. The text must be a
// non-empty string; other keys are ignored.
func ParseTextSample(line []byte) (string, error) {
	var v struct {
		Text *json.RawMessage `json:"text"`
	}
	if err := unmarshalObject(line, &v); err != nil {
		return "", err
	}
	if v.Text == nil {
		return "", errors.New(`no "text" key`)
	}
	var s string
	if err := json.Unmarshal(*v.Text, &s); err != nil {
		return "", fmt.Errorf(`"text" is %s, not a string`, jsonKindOf(*v.Text))
	}
	if s == "" {
		return "", errors.New(`"text" is empty`)
	}
	return s, nil
}

// ParseChatSample parses one {"messages": [...]} line: a non-empty list
// of objects with string "role" (non-empty) and "content" keys, with at
// least one assistant turn (the loss is taken on assistant turns only).
func ParseChatSample(line []byte) ([]Message, error) {
	var v struct {
		Messages *json.RawMessage `json:"messages"`
	}
	if err := unmarshalObject(line, &v); err != nil {
		return nil, err
	}
	if v.Messages == nil {
		return nil, errors.New(`no "messages" key`)
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(*v.Messages, &raw); err != nil {
		return nil, fmt.Errorf(`"messages" is %s, not a list`, jsonKindOf(*v.Messages))
	}
	if len(raw) == 0 {
		return nil, errors.New(`"messages" is empty`)
	}
	msgs := make([]Message, len(raw))
	assistant := false
	for i, r := range raw {
		var m struct {
			Role    *json.RawMessage `json:"role"`
			Content *json.RawMessage `json:"content"`
		}
		if err := unmarshalObject(r, &m); err != nil {
			return nil, fmt.Errorf("message %d: %v", i, err)
		}
		if m.Role == nil || m.Content == nil {
			return nil, fmt.Errorf(`message %d: want "role" and "content" keys`, i)
		}
		if err := json.Unmarshal(*m.Role, &msgs[i].Role); err != nil {
			return nil, fmt.Errorf(`message %d: "role" is %s, not a string`, i, jsonKindOf(*m.Role))
		}
		if err := json.Unmarshal(*m.Content, &msgs[i].Content); err != nil {
			return nil, fmt.Errorf(`message %d: "content" is %s, not a string`, i, jsonKindOf(*m.Content))
		}
		if msgs[i].Role == "" {
			return nil, fmt.Errorf(`message %d: "role" is empty`, i)
		}
		assistant = assistant || msgs[i].Role == "assistant"
	}
	if !assistant {
		return nil, errors.New(`no assistant turn (the loss is taken on assistant turns; a sample without one teaches nothing)`)
	}
	return msgs, nil
}

// unmarshalObject decodes a JSON object (nothing else) into v.
func unmarshalObject(b []byte, v any) error {
	b = bytes.TrimSpace(b)
	if !utf8.Valid(b) {
		return errors.New("not valid UTF-8")
	}
	if !json.Valid(b) {
		var x any
		err := json.Unmarshal(b, &x)
		return fmt.Errorf("not valid JSON: %v", err)
	}
	if len(b) == 0 || b[0] != '{' {
		return fmt.Errorf("want a JSON object, got %s", jsonKindOf(b))
	}
	return json.Unmarshal(b, v)
}

// jsonKindOf names the kind of a JSON value: "a string", "null", ...
func jsonKindOf(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return "empty"
	}
	switch b[0] {
	case '{':
		return "an object"
	case '[':
		return "a list"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// JSONLReader reads samples from a JSONL stream one line at a time (blank
// lines are skipped). Its errors name the file and line.
type JSONLReader struct {
	name   string
	r      *bufio.Reader
	line   int
	format string
}

// NewJSONLReader reads r (named name in errors) in format (FormatAuto,
// FormatText or FormatChat).
func NewJSONLReader(r io.Reader, name, format string) (*JSONLReader, error) {
	switch format {
	case "", FormatAuto:
		format = FormatAuto
	case FormatText, FormatChat:
	default:
		return nil, fmt.Errorf("jsonl format %q: want %s, %s or %s", format, FormatAuto, FormatText, FormatChat)
	}
	return &JSONLReader{name: name, r: bufio.NewReaderSize(r, 1<<20), format: format}, nil
}

// Format is the reader's format: FormatText or FormatChat once the first
// sample has been read in FormatAuto.
func (j *JSONLReader) Format() string { return j.format }

// Next returns the next sample, or io.EOF after the last one.
func (j *JSONLReader) Next() (Sample, error) {
	for {
		b, err := j.readLine()
		if err != nil {
			return Sample{}, err
		}
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		s := Sample{Line: j.line}
		if j.format == FormatAuto {
			j.format = detectFormat(b)
		}
		switch j.format {
		case FormatChat:
			s.Messages, err = ParseChatSample(b)
		default:
			s.Text, err = ParseTextSample(b)
		}
		if err != nil {
			return Sample{}, fmt.Errorf("%s:%d: %v", j.name, j.line, err)
		}
		return s, nil
	}
}

// readLine returns the next line without its newline.
func (j *JSONLReader) readLine() ([]byte, error) {
	var line []byte
	for {
		chunk, err := j.r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > MaxLineBytes {
			return nil, fmt.Errorf("%s:%d: line longer than %d bytes", j.name, j.line+1, MaxLineBytes)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err == io.EOF && len(line) > 0 {
			j.line++
			return line, nil
		}
		if err != nil {
			if err != io.EOF {
				err = fmt.Errorf("%s:%d: %w", j.name, j.line+1, err)
			}
			return nil, err
		}
		j.line++
		return bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r")), nil
	}
}

// detectFormat picks chat for an object with a "messages" key, else text
// (whose parser then reports what is missing).
func detectFormat(b []byte) string {
	var v map[string]json.RawMessage
	if json.Unmarshal(b, &v) == nil {
		if _, ok := v["messages"]; ok {
			return FormatChat
		}
	}
	return FormatText
}
