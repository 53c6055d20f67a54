package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// A piece is a part of the text on its way through the pipeline.
type piece struct {
	s string
	// first: the piece starts at the beginning of the input (Metaspace's
	// "first" prepend scheme looks at it).
	first bool
	// bytes: s holds raw bytes that stand for their byte-level characters
	// (a trailing ByteLevel pre-tokenizer leaves the mapping to the model).
	bytes bool
}

// A preTokenizer splits a piece into smaller ones, as a tokenizer.json
// "pre_tokenizer" does; empty pieces are never emitted.
type preTokenizer interface {
	split(p piece, emit func(piece))
}

// Split behaviors: what becomes of the matches of a pattern.
const (
	splitRemoved = iota
	splitIsolated
	splitMergedWithPrevious
	splitMergedWithNext
	splitContiguous
)

func parseBehavior(s, where string, def int) (int, error) {
	switch s {
	case "":
		return def, nil
	case "Removed":
		return splitRemoved, nil
	case "Isolated":
		return splitIsolated, nil
	case "MergedWithPrevious":
		return splitMergedWithPrevious, nil
	case "MergedWithNext":
		return splitMergedWithNext, nil
	case "Contiguous":
		return splitContiguous, nil
	}
	return 0, fmt.Errorf("%s: behavior %q is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous", where, s)
}

const preTokenizerTypes = "Split, ByteLevel, Metaspace, Digits, Whitespace, WhitespaceSplit, Punctuation, CharDelimiterSplit, BertPreTokenizer, Sequence"

// parsePreTokenizer reads a pre-tokenizer; last says that nothing follows
// it, which lets a ByteLevel step leave its mapping to the model.
func parsePreTokenizer(raw json.RawMessage, where string, last bool) (preTokenizer, error) {
	c, err := parseComponent(raw, where)
	if err != nil {
		return nil, err
	}
	switch c.Type {
	case "Split":
		m, err := compilePattern(c.Pattern, where)
		if err != nil {
			return nil, err
		}
		b, err := parseBehavior(c.Behavior, where, splitRemoved)
		if err != nil {
			return nil, err
		}
		if c.Behavior == "" {
			return nil, fmt.Errorf("%s: Split has no \"behavior\"", where)
		}
		return &splitter{m: m, behavior: b, invert: c.Invert}, nil
	case "ByteLevel":
		useRegex := c.UseRegex == nil || *c.UseRegex
		bl := &byteLevelPre{prefix: c.AddPrefixSpace != nil && *c.AddPrefixSpace, lazy: last}
		if useRegex {
			bl.re = scanMatcher(nextPretoken)
		}
		return bl, nil
	case "Metaspace":
		ms, err := parseMetaspace(c, where)
		if err != nil {
			return nil, err
		}
		return ms, nil
	case "Digits":
		b := splitContiguous
		if c.IndividualDigits {
			b = splitIsolated
		}
		return &splitter{m: charMatcher(unicode.IsNumber), behavior: b}, nil
	case "Whitespace":
		return &splitter{m: scanMatcher(nextWord), behavior: splitRemoved, invert: true, skipSpace: true}, nil
	case "WhitespaceSplit":
		return &splitter{m: charMatcher(unicode.IsSpace), behavior: splitRemoved}, nil
	case "Punctuation":
		b, err := parseBehavior(c.Behavior, where, splitIsolated)
		if err != nil {
			return nil, err
		}
		return &splitter{m: charMatcher(isPunctuation), behavior: b}, nil
	case "BertPreTokenizer":
		return preSeq{
			&splitter{m: charMatcher(unicode.IsSpace), behavior: splitRemoved},
			&splitter{m: charMatcher(isPunctuation), behavior: splitIsolated},
		}, nil
	case "CharDelimiterSplit":
		if c.Delimiter == nil || utf8.RuneCountInString(*c.Delimiter) != 1 {
			return nil, fmt.Errorf("%s: CharDelimiterSplit wants a one-character \"delimiter\"", where)
		}
		d, _ := utf8.DecodeRuneInString(*c.Delimiter)
		return &splitter{m: charMatcher(func(r rune) bool { return r == d }), behavior: splitRemoved}, nil
	case "Sequence":
		var seq preSeq
		for i, p := range c.Pretokenizers {
			x, err := parsePreTokenizer(p, fmt.Sprintf("%s.pretokenizers[%d]", where, i), last && i == len(c.Pretokenizers)-1)
			if err != nil {
				return nil, err
			}
			seq = append(seq, x)
		}
		return seq, nil
	}
	return nil, fmt.Errorf("%s: type %q is not supported (supported: %s)", where, c.Type, preTokenizerTypes)
}

// isPunctuation is the library's punctuation: ASCII punctuation or a
// Unicode punctuation character.
func isPunctuation(r rune) bool {
	if r < utf8.RuneSelf {
		return r >= '!' && r <= '/' || r >= ':' && r <= '@' || r >= '[' && r <= '`' || r >= '{' && r <= '~'
	}
	return unicode.IsPunct(r)
}

// isWordRune is the regular expressions' \w: a letter, mark, decimal digit
// or connector punctuation.
func isWordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsMark(r) || unicode.Is(unicode.Nd, r) || unicode.Is(unicode.Pc, r)
}

// nextWord scans `\w+|[^\w\s]+` (the Whitespace pre-tokenizer's pattern);
// white space is returned as runs of its own, which the splitter skips.
func nextWord(s string, i int) int {
	r, n := utf8.DecodeRuneInString(s[i:])
	kind := func(r rune) int {
		switch {
		case isWordRune(r):
			return 0
		case unicode.IsSpace(r):
			return 1
		}
		return 2
	}
	k := kind(r)
	j := i + n
	for j < len(s) {
		r, n := utf8.DecodeRuneInString(s[j:])
		if kind(r) != k {
			break
		}
		j += n
	}
	return j
}

type preSeq []preTokenizer

func (q preSeq) split(p piece, emit func(piece)) { q.run(0, p, emit) }

func (q preSeq) run(i int, p piece, emit func(piece)) {
	if i == len(q) {
		emit(p)
		return
	}
	q[i].split(p, func(r piece) { q.run(i+1, r, emit) })
}

// span is a part of a piece: a match of a pattern or the text between two.
type span struct {
	start, end int
	match      bool
}

// splitter splits pieces at the matches of a pattern, keeping or dropping
// the matches as its behavior says.
type splitter struct {
	m        matcher
	behavior int
	invert   bool
	// skipSpace: the matcher also reports white-space runs, which are not
	// matches (the Whitespace pre-tokenizer's scanner).
	skipSpace bool
}

func (sp *splitter) split(p piece, emit func(piece)) {
	s := p.text()
	sub := func(start, end int) {
		if start < end {
			emit(piece{s: s[start:end], first: p.first && start == 0})
		}
	}
	if sp.behavior == splitIsolated && !sp.skipSpace {
		// Every match and every gap is a piece: no need for the spans.
		last := 0
		sp.m.find(s, func(start, end int) {
			sub(last, start)
			sub(start, end)
			last = end
		})
		sub(last, len(s))
		return
	}
	var spans []span
	last := 0
	sp.m.find(s, func(start, end int) {
		if sp.skipSpace {
			if r, _ := utf8.DecodeRuneInString(s[start:]); unicode.IsSpace(r) {
				return
			}
		}
		if last != start {
			spans = append(spans, span{last, start, false})
		}
		spans = append(spans, span{start, end, true})
		last = end
	})
	if last != len(s) {
		spans = append(spans, span{last, len(s), false})
	}
	if sp.invert {
		for i := range spans {
			spans[i].match = !spans[i].match
		}
	}
	var out []span
	prev := false
	switch sp.behavior {
	case splitIsolated:
		out = spans
	case splitRemoved:
		for _, x := range spans {
			if !x.match {
				out = append(out, x)
			}
		}
	case splitContiguous:
		for _, x := range spans {
			if len(out) > 0 && x.match == prev {
				out[len(out)-1].end = x.end
			} else {
				out = append(out, x)
			}
			prev = x.match
		}
	case splitMergedWithPrevious:
		for _, x := range spans {
			if len(out) > 0 && x.match && !prev {
				out[len(out)-1].end = x.end
			} else {
				out = append(out, x)
			}
			prev = x.match
		}
	case splitMergedWithNext:
		for i := len(spans) - 1; i >= 0; i-- {
			x := spans[i]
			if len(out) > 0 && x.match && !prev {
				out[len(out)-1].start = x.start
			} else {
				out = append(out, x)
			}
			prev = x.match
		}
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	}
	for _, x := range out {
		sub(x.start, x.end)
	}
}

// text returns the piece's text in the form pre-tokenizers see.
func (p piece) text() string {
	if p.bytes {
		return byteString([]byte(p.s))
	}
	return p.s
}

// byteLevelPre is the ByteLevel pre-tokenizer: an optional prefix space,
// GPT-2's split (use_regex), then each byte mapped to its character. When
// it is the last step (lazy), the pieces keep their bytes and the model
// maps them.
type byteLevelPre struct {
	prefix bool
	re     matcher // nil: no split
	lazy   bool
}

func (b *byteLevelPre) split(p piece, emit func(piece)) {
	s := p.text()
	if b.prefix && !strings.HasPrefix(s, " ") {
		s = " " + s
	}
	out := func(start, end int) {
		if start >= end {
			return
		}
		q := piece{s: s[start:end], first: p.first && start == 0, bytes: true}
		if !b.lazy {
			q = piece{s: q.text(), first: q.first}
		}
		emit(q)
	}
	if b.re == nil {
		out(0, len(s))
		return
	}
	last := 0
	b.re.find(s, func(start, end int) {
		out(last, start)
		out(start, end)
		last = end
	})
	out(last, len(s))
}

// Metaspace prepend schemes.
const (
	prependAlways = iota
	prependFirst
	prependNever
)

// metaspace replaces spaces by the replacement character (▁), prepends
// one as its scheme says and splits before each.
type metaspace struct {
	rep    string
	scheme int
	split_ bool
}

func parseMetaspace(c *hfComponent, where string) (*metaspace, error) {
	rep := "\u2581"
	if c.Replacement != nil {
		rep = *c.Replacement
	}
	if utf8.RuneCountInString(rep) != 1 {
		return nil, fmt.Errorf("%s: Metaspace replacement %q is not one character", where, rep)
	}
	m := &metaspace{rep: rep, scheme: prependAlways, split_: c.Split == nil || *c.Split}
	switch {
	case c.PrependScheme != nil:
		switch *c.PrependScheme {
		case "always":
		case "first":
			m.scheme = prependFirst
		case "never":
			m.scheme = prependNever
		default:
			return nil, fmt.Errorf("%s: Metaspace prepend_scheme %q is not always, first or never", where, *c.PrependScheme)
		}
	case c.AddPrefixSpace != nil && !*c.AddPrefixSpace:
		m.scheme = prependNever
	}
	return m, nil
}

func (m *metaspace) split(p piece, emit func(piece)) {
	s := strings.ReplaceAll(p.text(), " ", m.rep)
	if !strings.HasPrefix(s, m.rep) && (m.scheme == prependAlways || m.scheme == prependFirst && p.first) {
		s = m.rep + s
	}
	if !m.split_ {
		if s != "" {
			emit(piece{s: s, first: p.first})
		}
		return
	}
	// MergedWithNext on the replacement: each piece starts with one.
	start := 0
	for i := 0; i < len(s); {
		if strings.HasPrefix(s[i:], m.rep) {
			if i > start {
				emit(piece{s: s[start:i], first: p.first && start == 0})
			}
			start = i
			i += len(m.rep)
			continue
		}
		_, n := utf8.DecodeRuneInString(s[i:])
		i += n
	}
	if start < len(s) {
		emit(piece{s: s[start:], first: p.first && start == 0})
	}
}
