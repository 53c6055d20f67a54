package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// A decoder turns token strings back into text, as a tokenizer.json
// "decoder" does: each step maps the list of strings to a new list, which is
// joined at the end. lossy replaces invalid UTF-8 with U+FFFD, as the
// library does; without it the exact bytes are kept. first is the index the
// first string has in the whole list (Metaspace treats index 0 apart).
type decoder interface {
	decode(tokens []string, lossy bool, first int) []string
}

const decoderTypes = "ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, Sequence"

func parseDecoder(raw json.RawMessage, where string) (decoder, error) {
	c, err := parseComponent(raw, where)
	if err != nil {
		return nil, err
	}
	switch c.Type {
	case "ByteLevel":
		return byteLevelDecoder{}, nil
	case "Metaspace":
		m, err := parseMetaspace(c, where)
		if err != nil {
			return nil, err
		}
		return metaspaceDecoder{rep: m.rep, strip: m.scheme != prependNever}, nil
	case "ByteFallback":
		return byteFallbackDecoder{}, nil
	case "Fuse":
		return fuseDecoder{}, nil
	case "Strip":
		if c.Content == nil || utf8.RuneCountInString(*c.Content) != 1 {
			return nil, fmt.Errorf("%s: Strip wants a one-character \"content\"", where)
		}
		d := stripDecoder{}
		d.content, _ = utf8.DecodeRuneInString(*c.Content)
		if c.Start != nil {
			d.start = *c.Start
		}
		if c.Stop != nil {
			d.stop = *c.Stop
		}
		if d.start < 0 || d.stop < 0 {
			return nil, fmt.Errorf("%s: Strip start %d and stop %d must be >= 0", where, d.start, d.stop)
		}
		return d, nil
	case "Replace":
		m, err := compilePattern(c.Pattern, where)
		if err != nil {
			return nil, err
		}
		if c.Content == nil {
			return nil, fmt.Errorf("%s: Replace has no \"content\"", where)
		}
		return replaceDecoder{m, *c.Content}, nil
	case "Sequence":
		var seq decoderSeq
		for i, d := range c.Decoders {
			x, err := parseDecoder(d, fmt.Sprintf("%s.decoders[%d]", where, i))
			if err != nil {
				return nil, err
			}
			seq = append(seq, x)
		}
		return seq, nil
	}
	return nil, fmt.Errorf("%s: type %q is not supported (supported: %s)", where, c.Type, decoderTypes)
}

// byteLevelDecoder maps byte-level characters back to bytes; a string with
// a character that stands for no byte is kept as it is.
type byteLevelDecoder struct{}

func (byteLevelDecoder) decode(tokens []string, lossy bool, _ int) []string {
	var b []byte
	for _, t := range tokens {
		if raw, ok := unbyteString(t); ok {
			b = append(b, raw...)
		} else {
			b = append(b, t...)
		}
	}
	if lossy {
		return []string{lossyUTF8(b)}
	}
	return []string{string(b)}
}

// lossyUTF8 is Rust's String::from_utf8_lossy: each maximal invalid
// subsequence becomes one U+FFFD.
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var out strings.Builder
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || n > 1 {
			out.Write(b[i : i+n])
			i += n
			continue
		}
		out.WriteString("\uFFFD")
		i += invalidPrefix(b[i:])
	}
	return out.String()
}

// invalidPrefix returns the length of the maximal prefix of b that begins a
// valid UTF-8 sequence but does not complete one (at least 1).
func invalidPrefix(b []byte) int {
	c := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1
	}
	n := 1
	for k := 0; k < need && n < len(b); k++ {
		x := b[n]
		if k > 0 {
			lo, hi = 0x80, 0xBF
		}
		if x < lo || x > hi {
			break
		}
		n++
	}
	return n
}

// metaspaceDecoder turns the replacement character back into spaces; in
// the first string it drops them when the pre-tokenizer prepends one.
type metaspaceDecoder struct {
	rep   string
	strip bool
}

func (m metaspaceDecoder) decode(tokens []string, _ bool, first int) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		with := " "
		if i+first == 0 && m.strip {
			with = ""
		}
		out[i] = strings.ReplaceAll(t, m.rep, with)
	}
	return out
}

// byteFallbackDecoder turns runs of <0xXX> tokens into their bytes; a run
// that is not valid UTF-8 becomes one U+FFFD a byte (when lossy).
type byteFallbackDecoder struct{}

func (byteFallbackDecoder) decode(tokens []string, lossy bool, _ int) []string {
	var out []string
	var run []byte
	flush := func() {
		if len(run) == 0 {
			return
		}
		if !lossy || utf8.Valid(run) {
			out = append(out, string(run))
		} else {
			for range run {
				out = append(out, "\uFFFD")
			}
		}
		run = run[:0]
	}
	for _, t := range tokens {
		if b, ok := fallbackByte(t); ok {
			run = append(run, b)
			continue
		}
		flush()
		out = append(out, t)
	}
	flush()
	return out
}

// fallbackByte parses a byte-fallback token, "<0x41>".
func fallbackByte(t string) (byte, bool) {
	if len(t) != 6 || !strings.HasPrefix(t, "<0x") || t[5] != '>' {
		return 0, false
	}
	var v byte
	for _, c := range []byte(t[3:5]) {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | (c - '0')
		case c >= 'A' && c <= 'F':
			v = v<<4 | (c - 'A' + 10)
		case c >= 'a' && c <= 'f':
			v = v<<4 | (c - 'a' + 10)
		default:
			return 0, false
		}
	}
	return v, true
}

type fuseDecoder struct{}

func (fuseDecoder) decode(tokens []string, _ bool, _ int) []string {
	return []string{strings.Join(tokens, "")}
}

// stripDecoder removes up to start copies of content from the start of
// each string and up to stop from its end.
type stripDecoder struct {
	content     rune
	start, stop int
}

// decode works on the bytes, not on runes, so that bytes of an incomplete
// character (byte-fallback tokens of a prefix of an encoding) pass through
// as they are instead of becoming U+FFFD.
func (d stripDecoder) decode(tokens []string, _ bool, _ int) []string {
	c := string(d.content)
	out := make([]string, len(tokens))
	for i, t := range tokens {
		lo := 0
		for k := 0; k < d.start && strings.HasPrefix(t[lo:], c); k++ {
			lo += len(c)
		}
		hi := len(t)
		for k := 0; k < d.stop && strings.HasSuffix(t[lo:hi], c); k++ {
			hi -= len(c)
		}
		out[i] = t[lo:hi]
	}
	return out
}

type replaceDecoder struct {
	m       matcher
	content string
}

func (d replaceDecoder) decode(tokens []string, _ bool, _ int) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		out[i] = replaceAll(d.m, t, d.content)
	}
	return out
}

type decoderSeq []decoder

func (q decoderSeq) decode(tokens []string, lossy bool, first int) []string {
	for _, d := range q {
		tokens = d.decode(tokens, lossy, first)
	}
	return tokens
}

// A postProcessor adds the special tokens of a template around the ids of
// one sequence, as a tokenizer.json "post_processor" does.
type postProcessor interface {
	process(ids []int) []int
}

const postProcessorTypes = "TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing, Sequence"

func parsePostProcessor(raw json.RawMessage, where string, tokenID func(string) (int, bool)) (postProcessor, error) {
	c, err := parseComponent(raw, where)
	if err != nil {
		return nil, err
	}
	switch c.Type {
	case "ByteLevel":
		return nil, nil // offsets only
	case "TemplateProcessing":
		var tp template
		for i, item := range c.Single {
			w := fmt.Sprintf("%s.single[%d]", where, i)
			var it struct {
				SpecialToken *struct {
					ID string `json:"id"`
				} `json:"SpecialToken"`
				Sequence *struct {
					ID string `json:"id"`
				} `json:"Sequence"`
			}
			if err := json.Unmarshal(item, &it); err != nil {
				return nil, fmt.Errorf("%s: %v", w, err)
			}
			switch {
			case it.Sequence != nil:
				if it.Sequence.ID != "A" {
					return nil, fmt.Errorf("%s: sequence %q in the single template (want A)", w, it.Sequence.ID)
				}
				tp = append(tp, nil)
			case it.SpecialToken != nil:
				st, ok := c.SpecialTokens[it.SpecialToken.ID]
				if !ok {
					return nil, fmt.Errorf("%s: special token %q is not in special_tokens", w, it.SpecialToken.ID)
				}
				if len(st.IDs) == 0 {
					return nil, fmt.Errorf("%s: special token %q has no ids", w, it.SpecialToken.ID)
				}
				tp = append(tp, st.IDs)
			default:
				return nil, fmt.Errorf("%s: want a SpecialToken or a Sequence, have %s", w, clip(item))
			}
		}
		return tp, nil
	case "RobertaProcessing", "BertProcessing":
		cls, err := processorToken(c.Cls, where+".cls", tokenID)
		if err != nil {
			return nil, err
		}
		sep, err := processorToken(c.Sep, where+".sep", tokenID)
		if err != nil {
			return nil, err
		}
		return template{{cls}, nil, {sep}}, nil
	case "Sequence":
		var seq postSeq
		for i, p := range c.Processors {
			x, err := parsePostProcessor(p, fmt.Sprintf("%s.processors[%d]", where, i), tokenID)
			if err != nil {
				return nil, err
			}
			if x != nil {
				seq = append(seq, x)
			}
		}
		if len(seq) == 0 {
			return nil, nil
		}
		return seq, nil
	}
	return nil, fmt.Errorf("%s: type %q is not supported (supported: %s)", where, c.Type, postProcessorTypes)
}

// processorToken reads a ["<s>", 0] pair.
func processorToken(raw json.RawMessage, where string, tokenID func(string) (int, bool)) (int, error) {
	var pair []json.RawMessage
	var tok string
	var id int
	if json.Unmarshal(raw, &pair) != nil || len(pair) != 2 || json.Unmarshal(pair[0], &tok) != nil || json.Unmarshal(pair[1], &id) != nil {
		return 0, fmt.Errorf("%s: want [\"token\", id], have %s", where, clip(raw))
	}
	return id, nil
}

// template is a TemplateProcessing single template: the ids of each item,
// nil for the sequence.
type template [][]int

func (tp template) process(ids []int) []int {
	out := make([]int, 0, len(ids)+len(tp))
	for _, item := range tp {
		if item == nil {
			out = append(out, ids...)
		} else {
			out = append(out, item...)
		}
	}
	return out
}

type postSeq []postProcessor

func (q postSeq) process(ids []int) []int {
	for _, p := range q {
		ids = p.process(ids)
	}
	return ids
}
