package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// Character classes of GPT-2's pre-tokenization pattern
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
const (
	classOther  = iota // [^\s\p{L}\p{N}], and any byte that is not valid UTF-8
	classLetter        // \p{L}
	classNumber        // \p{N}
	classSpace         // \s: Unicode White_Space
)

// classAt returns the class of the character starting at s[i] and its length
// in bytes.
func classAt(s string, i int) (class, size int) {
	c := s[i]
	if c < utf8.RuneSelf {
		return asciiClass[c], 1
	}
	r, size := utf8.DecodeRuneInString(s[i:])
	switch {
	case r == utf8.RuneError && size == 1:
		return classOther, 1
	case unicode.IsLetter(r):
		return classLetter, size
	case unicode.IsNumber(r):
		return classNumber, size
	case unicode.IsSpace(r):
		return classSpace, size
	}
	return classOther, size
}

var asciiClass [utf8.RuneSelf]int

func init() {
	for c := range asciiClass {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
			asciiClass[c] = classLetter
		case c >= '0' && c <= '9':
			asciiClass[c] = classNumber
		case c == ' ', c >= '\t' && c <= '\r':
			asciiClass[c] = classSpace
		default:
			asciiClass[c] = classOther
		}
	}
}

// runEnd returns the end of the run of characters of one class that starts
// at s[i].
func runEnd(s string, i, class int) int {
	for i < len(s) {
		c, size := classAt(s, i)
		if c != class {
			break
		}
		i += size
	}
	return i
}

// nextPretoken returns the end of the pre-token that starts at s[i], i <
// len(s). It matches what GPT-2's pattern, a regular expression with
// backtracking and a lookahead, matches there: the first alternative that
// matches, as long as it can.
func nextPretoken(s string, i int) int {
	// 's|'t|'re|'ve|'m|'ll|'d: lower case only, whatever follows.
	if s[i] == '\'' && i+1 < len(s) {
		switch s[i+1] {
		case 's', 't', 'm', 'd':
			return i + 2
		case 'r', 'v':
			if i+2 < len(s) && s[i+2] == 'e' {
				return i + 3
			}
		case 'l':
			if i+2 < len(s) && s[i+2] == 'l' {
				return i + 3
			}
		}
	}
	class, size := classAt(s, i)
	// ` ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+`: an optional ASCII space, then a
	// run of one class.
	if s[i] == ' ' && i+1 < len(s) {
		if next, _ := classAt(s, i+1); next != classSpace {
			return runEnd(s, i+1, next)
		}
	}
	if class != classSpace {
		return runEnd(s, i+size, class)
	}
	// `\s+(?!\S)`: a run of white space that is not followed by anything else
	// or, when it is, the run less its last character, which goes with what
	// follows. Where that leaves nothing (a single white-space character
	// before a non-space), `\s+` takes that one character.
	end, last := i+size, i
	for end < len(s) {
		c, n := classAt(s, end)
		if c != classSpace {
			break
		}
		last = end
		end += n
	}
	if end < len(s) && last > i {
		return last
	}
	return end
}

// pretokens calls yield with each pre-token of s, in order.
func pretokens(s string, yield func(string)) {
	for i := 0; i < len(s); {
		j := nextPretoken(s, i)
		yield(s[i:j])
		i = j
	}
}
