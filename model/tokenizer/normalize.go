package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// A normalizer rewrites a piece of text before pre-tokenization, as a
// tokenizer.json "normalizer" does.
type normalizer interface {
	normalize(s string) string
}

// hfComponent holds the fields of every normalizer, pre-tokenizer,
// post-processor and decoder this package reads; each reads its own.
type hfComponent struct {
	Type string `json:"type"`

	Normalizers   []json.RawMessage `json:"normalizers"`
	Pretokenizers []json.RawMessage `json:"pretokenizers"`
	Processors    []json.RawMessage `json:"processors"`
	Decoders      []json.RawMessage `json:"decoders"`

	Pattern    *hfPattern `json:"pattern"`
	Content    *string    `json:"content"`
	Prepend    *string    `json:"prepend"`
	StripLeft  *bool      `json:"strip_left"`
	StripRight *bool      `json:"strip_right"`
	Start      *int       `json:"start"`
	Stop       *int       `json:"stop"`

	Behavior         string  `json:"behavior"`
	Invert           bool    `json:"invert"`
	AddPrefixSpace   *bool   `json:"add_prefix_space"`
	UseRegex         *bool   `json:"use_regex"`
	Replacement      *string `json:"replacement"`
	PrependScheme    *string `json:"prepend_scheme"`
	Split            *bool   `json:"split"`
	IndividualDigits bool    `json:"individual_digits"`
	Delimiter        *string `json:"delimiter"`

	Single        []json.RawMessage            `json:"single"`
	SpecialTokens map[string]hfTemplateSpecial `json:"special_tokens"`
	Sep           json.RawMessage              `json:"sep"`
	Cls           json.RawMessage              `json:"cls"`
}

// hfPattern is a Split, Replace pattern: a string or a regular expression.
type hfPattern struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

type hfTemplateSpecial struct {
	ID  string `json:"id"`
	IDs []int  `json:"ids"`
}

// parseComponent reads one component; where names it in errors.
func parseComponent(raw json.RawMessage, where string) (*hfComponent, error) {
	var c hfComponent
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("%s: %v", where, err)
	}
	if c.Type == "" {
		return nil, fmt.Errorf("%s %s has no \"type\"", where, clip(raw))
	}
	return &c, nil
}

// compilePattern makes a matcher of a Split or Replace pattern.
func compilePattern(p *hfPattern, where string) (matcher, error) {
	switch {
	case p == nil:
		return nil, fmt.Errorf("%s: no \"pattern\"", where)
	case p.String != nil:
		return literalMatcher(*p.String), nil
	case p.Regex != nil:
		m, err := compileRegex(*p.Regex)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", where, err)
		}
		return m, nil
	}
	return nil, fmt.Errorf("%s: pattern wants \"String\" or \"Regex\"", where)
}

const normalizerTypes = "NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents, Replace, Prepend, Sequence"

func parseNormalizer(raw json.RawMessage, where string) (normalizer, error) {
	c, err := parseComponent(raw, where)
	if err != nil {
		return nil, err
	}
	switch c.Type {
	case "NFC":
		return formNormalizer{norm.NFC}, nil
	case "NFD":
		return formNormalizer{norm.NFD}, nil
	case "NFKC":
		return formNormalizer{norm.NFKC}, nil
	case "NFKD":
		return formNormalizer{norm.NFKD}, nil
	case "Lowercase":
		return lowercase{}, nil
	case "StripAccents":
		return stripAccents{}, nil
	case "Strip":
		return stripNormalizer{left: c.StripLeft == nil || *c.StripLeft, right: c.StripRight == nil || *c.StripRight}, nil
	case "Prepend":
		if c.Prepend == nil {
			return nil, fmt.Errorf("%s: Prepend has no \"prepend\"", where)
		}
		return prependNormalizer(*c.Prepend), nil
	case "Replace":
		m, err := compilePattern(c.Pattern, where)
		if err != nil {
			return nil, err
		}
		if c.Content == nil {
			return nil, fmt.Errorf("%s: Replace has no \"content\"", where)
		}
		return replacer{m, *c.Content}, nil
	case "Sequence":
		var seq normalizerSeq
		for i, n := range c.Normalizers {
			x, err := parseNormalizer(n, fmt.Sprintf("%s.normalizers[%d]", where, i))
			if err != nil {
				return nil, err
			}
			seq = append(seq, x)
		}
		return seq, nil
	}
	return nil, fmt.Errorf("%s: type %q is not supported (supported: %s)", where, c.Type, normalizerTypes)
}

type formNormalizer struct{ f norm.Form }

func (n formNormalizer) normalize(s string) string {
	if isASCII(s) {
		return s // ASCII is in every normal form
	}
	return n.f.String(s)
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// lowercase maps each character to its lower case, as Rust's
// char::to_lowercase does: U+0130 becomes "i\u0307", every other character
// its simple lower case.
type lowercase struct{}

func (lowercase) normalize(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteByte(s[i])
		case r == 0x130:
			b.WriteString("i\u0307")
		default:
			b.WriteRune(unicode.ToLower(r))
		}
		i += n
	}
	return b.String()
}

// stripAccents removes nonspacing marks (Mn), as the library does.
type stripAccents struct{}

func (stripAccents) normalize(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.Is(unicode.Mn, r) {
			return -1
		}
		return r
	}, s)
}

type stripNormalizer struct{ left, right bool }

func (n stripNormalizer) normalize(s string) string {
	if n.left {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
	}
	if n.right {
		s = strings.TrimRightFunc(s, unicode.IsSpace)
	}
	return s
}

type prependNormalizer string

func (p prependNormalizer) normalize(s string) string {
	if s == "" {
		return s
	}
	return string(p) + s
}

type replacer struct {
	m       matcher
	content string
}

func (r replacer) normalize(s string) string { return replaceAll(r.m, s, r.content) }

// replaceAll replaces every match of m in s by content.
func replaceAll(m matcher, s, content string) string {
	var b strings.Builder
	last := 0
	m.find(s, func(start, end int) {
		b.WriteString(s[last:start])
		b.WriteString(content)
		last = end
	})
	if last == 0 && b.Len() == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

type normalizerSeq []normalizer

func (q normalizerSeq) normalize(s string) string {
	for _, n := range q {
		s = n.normalize(s)
	}
	return s
}
