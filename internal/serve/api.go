package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"unicode/utf8"
)

// apiError is an error answered with an OpenAI-style body:
//
//	{"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
type apiError struct {
	Status  int
	Message string
	Type    string // invalid_request_error, server_error, ...
	Param   string // the offending field, if any
	Code    string // a machine-readable code, if any
}

func (e *apiError) Error() string { return e.Message }

// badRequest is a 400 naming the field param.
func badRequest(param, format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: param, Message: fmt.Sprintf(format, args...)}
}

// errorBody is the JSON body of e.
func (e *apiError) body() map[string]any {
	var param, code any
	if e.Param != "" {
		param = e.Param
	}
	if e.Code != "" {
		code = e.Code
	}
	return map[string]any{"error": map[string]any{"message": e.Message, "type": e.Type, "param": param, "code": code}}
}

// Request is a validated completion request, chat or plain.
type Request struct {
	Chat     bool
	Model    string
	Messages []Message // chat
	Prompt   string    // completions
	// MaxTokens is the most tokens to generate; 0 means as many as the
	// context leaves room for.
	MaxTokens    int
	Temperature  float64
	TopP         float64
	TopK         int
	Seed         uint64
	HasSeed      bool
	Stop         []string
	Stream       bool
	IncludeUsage bool // stream_options.include_usage
}

// wireRequest is the JSON of both endpoints; fields that can take several
// types are kept raw and decoded by hand.
type wireRequest struct {
	Model               *string         `json:"model"`
	Messages            json.RawMessage `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	MaxTokens           *int64          `json:"max_tokens"`
	MaxCompletionTokens *int64          `json:"max_completion_tokens"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	TopK                *int64          `json:"top_k"`
	Seed                *int64          `json:"seed"`
	Stop                json.RawMessage `json:"stop"`
	N                   *int64          `json:"n"`
	Stream              *bool           `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage *bool `json:"include_usage"`
	} `json:"stream_options"`
	Logprobs json.RawMessage `json:"logprobs"`
	Echo     *bool           `json:"echo"`
}

type wireMessage struct {
	Role    *string         `json:"role"`
	Content json.RawMessage `json:"content"`
}

// MaxBodyBytes bounds a request body.
const MaxBodyBytes = 8 << 20

// roles are the message roles a conversation may hold.
var roles = map[string]bool{"system": true, "developer": true, "user": true, "assistant": true, "tool": true}

// DecodeRequest parses and validates the JSON body of a chat
// (/v1/chat/completions) or completions (/v1/completions) request. Every
// failure is an *apiError naming the field: malformed JSON, a field of the
// wrong type, invalid UTF-8, a value out of range, a missing field or an
// unsupported option.
func DecodeRequest(body []byte, chat bool) (*Request, error) {
	if !utf8.Valid(body) {
		i := 0
		for i < len(body) {
			r, n := utf8.DecodeRune(body[i:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			i += n
		}
		return nil, badRequest("", "the request body is not valid UTF-8 (first bad byte at offset %d)", i)
	}
	var w wireRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&w); err != nil {
		return nil, jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, badRequest("", "the request body holds data after its JSON object")
	}
	r := &Request{Chat: chat, Temperature: 1, TopP: 1}
	if w.Model == nil || *w.Model == "" {
		return nil, badRequest("model", "you must provide a model parameter")
	}
	r.Model = *w.Model
	var err error
	if chat {
		if len(w.Prompt) > 0 && string(w.Prompt) != "null" {
			return nil, badRequest("prompt", "chat completions take messages, not a prompt (use /v1/completions)")
		}
		if r.Messages, err = decodeMessages(w.Messages); err != nil {
			return nil, err
		}
	} else {
		if len(w.Messages) > 0 && string(w.Messages) != "null" {
			return nil, badRequest("messages", "completions take a prompt, not messages (use /v1/chat/completions)")
		}
		if r.Prompt, err = decodePrompt(w.Prompt); err != nil {
			return nil, err
		}
	}
	maxTok, param := w.MaxTokens, "max_tokens"
	if w.MaxCompletionTokens != nil {
		maxTok, param = w.MaxCompletionTokens, "max_completion_tokens"
	}
	if maxTok != nil {
		if *maxTok < 1 || *maxTok > math.MaxInt32 {
			return nil, badRequest(param, "%s must be a positive integer, got %d", param, *maxTok)
		}
		r.MaxTokens = int(*maxTok)
	}
	if w.Temperature != nil {
		if t := *w.Temperature; !(t >= 0 && t <= 2) {
			return nil, badRequest("temperature", "temperature must be in [0, 2], got %v", t)
		}
		r.Temperature = *w.Temperature
	}
	if w.TopP != nil {
		if p := *w.TopP; !(p > 0 && p <= 1) {
			return nil, badRequest("top_p", "top_p must be in (0, 1], got %v", p)
		}
		r.TopP = *w.TopP
	}
	if w.TopK != nil {
		if k := *w.TopK; k < 0 || k > math.MaxInt32 {
			return nil, badRequest("top_k", "top_k must be an integer >= 0 (0: all tokens), got %d", k)
		}
		r.TopK = int(*w.TopK)
	}
	if w.Seed != nil {
		r.Seed, r.HasSeed = uint64(*w.Seed), true
	}
	if w.N != nil && *w.N != 1 {
		return nil, badRequest("n", "only n = 1 is supported, got %d", *w.N)
	}
	if r.Stop, err = decodeStop(w.Stop); err != nil {
		return nil, err
	}
	if w.Stream != nil {
		r.Stream = *w.Stream
	}
	if w.StreamOptions != nil && w.StreamOptions.IncludeUsage != nil {
		if !r.Stream {
			return nil, badRequest("stream_options", "stream_options is only allowed with stream: true")
		}
		r.IncludeUsage = *w.StreamOptions.IncludeUsage
	}
	switch strings.TrimSpace(string(w.Logprobs)) {
	case "", "null", "false", "0":
	default:
		return nil, badRequest("logprobs", "logprobs are not supported")
	}
	if w.Echo != nil && *w.Echo {
		return nil, badRequest("echo", "echo is not supported")
	}
	return r, nil
}

// jsonError turns a decoding error into a 400 naming the field.
func jsonError(err error) *apiError {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return badRequest("", "malformed JSON at byte offset %d: %v", syn.Offset, err)
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			return badRequest("", "the request body must be a JSON object, got %s", typ.Value)
		}
		return badRequest(field, "invalid type for %s: expected %s, got %s", field, typeName(typ.Type.String()), typ.Value)
	case errors.Is(err, io.EOF):
		return badRequest("", "the request body is empty (want a JSON object)")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("", "malformed JSON: the body ends inside a value")
	}
	return badRequest("", "malformed JSON: %v", err)
}

// typeName renders a Go type as a JSON type name.
func typeName(t string) string {
	t = strings.TrimPrefix(t, "*")
	switch {
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"):
		return "an integer"
	case strings.HasPrefix(t, "float"):
		return "a number"
	case t == "bool":
		return "a boolean"
	case t == "string":
		return "a string"
	case strings.HasPrefix(t, "[]"):
		return "an array"
	}
	return "an object"
}

func decodeMessages(raw json.RawMessage) ([]Message, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badRequest("messages", "you must provide a messages parameter")
	}
	var ws []wireMessage
	if err := json.Unmarshal(raw, &ws); err != nil {
		var typ *json.UnmarshalTypeError
		if errors.As(err, &typ) {
			if typ.Field == "" {
				return nil, badRequest("messages", "invalid type for messages: expected an array of message objects, got %s", typ.Value)
			}
			return nil, badRequest("messages."+typ.Field, "invalid type for messages[].%s: expected %s, got %s", typ.Field, typeName(typ.Type.String()), typ.Value)
		}
		return nil, badRequest("messages", "invalid messages: %v", err)
	}
	if len(ws) == 0 {
		return nil, badRequest("messages", "messages must hold at least one message")
	}
	out := make([]Message, len(ws))
	for i, m := range ws {
		p := fmt.Sprintf("messages[%d]", i)
		if m.Role == nil {
			return nil, badRequest(p+".role", "%s has no role", p)
		}
		if !roles[*m.Role] {
			return nil, badRequest(p+".role", "%s has role %q; want system, developer, user, assistant or tool", p, *m.Role)
		}
		text, err := decodeContent(m.Content, p+".content")
		if err != nil {
			return nil, err
		}
		out[i] = Message{Role: *m.Role, Content: text}
	}
	return out, nil
}

// decodeContent accepts a string, null, or an array of text parts
// [{"type": "text", "text": ...}] (joined).
func decodeContent(raw json.RawMessage, param string) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type *string `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badRequest(param, "invalid type for %s: expected a string or an array of text parts", param)
	}
	var b strings.Builder
	for i, p := range parts {
		if p.Type == nil || *p.Type != "text" || p.Text == nil {
			return "", badRequest(fmt.Sprintf("%s[%d]", param, i), "%s[%d]: only parts {\"type\": \"text\", \"text\": ...} are supported", param, i)
		}
		b.WriteString(*p.Text)
	}
	return b.String(), nil
}

// decodePrompt accepts a string or an array of one string.
func decodePrompt(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", badRequest("prompt", "you must provide a prompt parameter")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var ss []string
	if err := json.Unmarshal(raw, &ss); err != nil {
		return "", badRequest("prompt", "invalid type for prompt: expected a string or an array of one string")
	}
	if len(ss) != 1 {
		return "", badRequest("prompt", "prompt must be a string or an array of exactly one string, got %d", len(ss))
	}
	return ss[0], nil
}

// decodeStop accepts null, a string or an array of up to 4 strings.
func decodeStop(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		if s == "" {
			return nil, badRequest("stop", "stop sequences must not be empty")
		}
		return []string{s}, nil
	}
	var ss []string
	if err := json.Unmarshal(raw, &ss); err != nil {
		return nil, badRequest("stop", "invalid type for stop: expected a string or an array of strings")
	}
	if len(ss) > 4 {
		return nil, badRequest("stop", "at most 4 stop sequences, got %d", len(ss))
	}
	for _, s := range ss {
		if s == "" {
			return nil, badRequest("stop", "stop sequences must not be empty")
		}
	}
	return ss, nil
}
