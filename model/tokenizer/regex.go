package tokenizer

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
)

// A matcher finds the non-overlapping matches of a pattern in s, left to
// right, calling fn with each one's byte offsets.
type matcher interface {
	find(s string, fn func(start, end int))
}

// Pre-tokenization patterns of well-known tokenizers, matched by
// hand-written scanners: Go's regexp has no lookahead, and a backtracking
// engine is several times slower. The scanners are tested against the
// regular expressions.
const (
	// gpt2Pattern is GPT-2's (and the ByteLevel pre-tokenizer's).
	gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	// llama3Pattern is Llama 3's.
	llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// qwen2Pattern is Qwen2's, Qwen2.5's and Qwen3's: Llama 3's with single
	// digits.
	qwen2Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// regexTimeout bounds one regular-expression search, so that a pattern
// that backtracks catastrophically fails instead of hanging.
const regexTimeout = 10 * time.Second

// compileRegex compiles a tokenizer.json regular expression (Oniguruma
// syntax, which for the patterns tokenizers use is also .NET's), using a
// scanner for the well-known patterns.
func compileRegex(pattern string) (matcher, error) {
	switch pattern {
	case gpt2Pattern:
		return scanMatcher(nextPretoken), nil
	case llama3Pattern:
		return scanMatcher(func(s string, i int) int { return nextLlama3(s, i, 3) }), nil
	case qwen2Pattern:
		return scanMatcher(func(s string, i int) int { return nextLlama3(s, i, 1) }), nil
	}
	return compileBacktracking(pattern)
}

// compileBacktracking compiles pattern with the backtracking engine.
func compileBacktracking(pattern string) (matcher, error) {
	re, err := regexp2.Compile(pattern, regexp2.Unicode)
	if err != nil {
		return nil, fmt.Errorf("regular expression %q: %v", pattern, err)
	}
	re.MatchTimeout = regexTimeout
	return &regexMatcher{re: re}, nil
}

// regexMatcher matches a regular expression with the backtracking engine.
type regexMatcher struct {
	re *regexp2.Regexp
}

func (m *regexMatcher) find(s string, fn func(start, end int)) {
	if s == "" {
		return
	}
	var old []int // byte offsets in the caller's s, by offset in the valid one
	if !utf8.ValidString(s) {
		// The engine works on characters: give it U+FFFD for each byte of
		// an invalid sequence, as decoding does, and map offsets back.
		var b strings.Builder
		old = make([]int, 0, len(s)+8)
		for i := 0; i < len(s); {
			r, n := utf8.DecodeRuneInString(s[i:])
			at := b.Len()
			b.WriteRune(r)
			for range b.Len() - at {
				old = append(old, i)
			}
			i += n
		}
		old = append(old, len(s))
		s = b.String()
	}
	idx, err := m.re.FindAllStringIndex(s, -1)
	if err != nil {
		return // a timeout: no more matches, so the rest stays whole
	}
	for _, p := range idx {
		if old != nil {
			fn(old[p[0]], old[p[1]])
			continue
		}
		fn(p[0], p[1])
	}
}

// scanMatcher matches with a scanner: next(s, i) returns the end of the
// match that starts at s[i] (every position starts one).
type scanMatcher func(s string, i int) int

func (m scanMatcher) find(s string, fn func(start, end int)) {
	for i := 0; i < len(s); {
		j := m(s, i)
		fn(i, j)
		i = j
	}
}

// literalMatcher matches a string (never an empty one).
type literalMatcher string

func (m literalMatcher) find(s string, fn func(start, end int)) {
	if m == "" {
		return
	}
	for i := 0; i < len(s); {
		j := strings.Index(s[i:], string(m))
		if j < 0 {
			return
		}
		fn(i+j, i+j+len(m))
		i += j + len(m)
	}
}

// charMatcher matches each character for which is reports true, one match
// a character.
type charMatcher func(r rune) bool

func (m charMatcher) find(s string, fn func(start, end int)) {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if m(r) {
			fn(i, i+n)
		}
		i += n
	}
}

// nextLlama3 returns the end of the match of Llama 3's pattern that starts
// at s[i] (Qwen2's with maxDigits 1):
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// taking, as the backtracking engine does, the first alternative that
// matches, as long as it can.
func nextLlama3(s string, i, maxDigits int) int {
	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if s[i] == '\'' && i+1 < len(s) {
		switch s[i+1] | 0x20 {
		case 's', 't', 'm', 'd':
			return i + 2
		case 'r', 'v':
			if i+2 < len(s) && s[i+2]|0x20 == 'e' {
				return i + 3
			}
		case 'l':
			if i+2 < len(s) && s[i+2]|0x20 == 'l' {
				return i + 3
			}
		}
	}
	class, size := classAt(s, i)
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if class == classLetter {
		return runEnd(s, i+size, classLetter)
	}
	if class != classNumber && s[i] != '\r' && s[i] != '\n' && i+size < len(s) {
		if next, _ := classAt(s, i+size); next == classLetter {
			return runEnd(s, i+size, classLetter)
		}
	}
	// \p{N}{1,3}
	if class == classNumber {
		j := i + size
		for k := 1; k < maxDigits && j < len(s); k++ {
			c, n := classAt(s, j)
			if c != classNumber {
				break
			}
			j += n
		}
		return j
	}
	// ` ?[^\s\p{L}\p{N}]+[\r\n]*`
	j := i
	if s[i] == ' ' {
		j = i + 1
	}
	if j < len(s) {
		if c, _ := classAt(s, j); c == classOther {
			e := runEnd(s, j, classOther)
			for e < len(s) && (s[e] == '\r' || s[e] == '\n') {
				e++
			}
			return e
		}
	}
	// White space from here on: `\s*[\r\n]+` takes the run up to its last
	// line break, `\s+(?!\S)` the run less its last character (all of it at
	// the end of the text), `\s+` a single character before a non-space.
	end, last, newline := i, i, -1
	for end < len(s) {
		c, n := classAt(s, end)
		if c != classSpace {
			break
		}
		if s[end] == '\r' || s[end] == '\n' {
			newline = end
		}
		last = end
		end += n
	}
	switch {
	case newline >= 0:
		return newline + 1
	case end == len(s):
		return end
	case last > i:
		return last
	}
	return end
}
