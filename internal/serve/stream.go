package serve

import (
	"strings"

	"github.com/parallax-engine/parallax/model/tokenizer"
)

// Tokenizer turns text into token ids and back.
type Tokenizer interface {
	EncodeWithSpecials(text string) []int
	Decode(ids []int) (string, error)
}

// textStream turns generated tokens into text deltas: it holds back a
// trailing incomplete UTF-8 sequence (a token may end inside a character)
// and any tail that could begin a stop sequence, and cuts the text at the
// first stop sequence.
type textStream struct {
	tok   Tokenizer
	stops []string
	ids   []int
	text  string // decoded so far
	sent  int    // bytes of text already handed out
}

// push adds a token and returns the text that is now final; stopped means
// a stop sequence ended the text (it and what follows are dropped).
func (ts *textStream) push(id int) (delta string, stopped bool, err error) {
	ts.ids = append(ts.ids, id)
	text, err := ts.tok.Decode(ts.ids)
	if err != nil {
		return "", false, err
	}
	ts.text = text
	cut := tokenizer.CompleteRunes(text)
	if i := ts.firstStop(text[:cut]); i >= 0 {
		delta = ""
		if i > ts.sent {
			delta = text[ts.sent:i]
		}
		ts.sent = max(ts.sent, i)
		return delta, true, nil
	}
	safe := cut - ts.holdback(text[:cut])
	if safe > ts.sent {
		delta = text[ts.sent:safe]
		ts.sent = safe
	}
	return delta, false, nil
}

// flush returns the held-back tail at the end of generation.
func (ts *textStream) flush() string {
	if ts.sent >= len(ts.text) {
		return ""
	}
	d := ts.text[ts.sent:]
	ts.sent = len(ts.text)
	return d
}

// firstStop returns where the first stop sequence begins in s, or -1. Only
// text not yet handed out (and what a stop there could overlap) is
// searched.
func (ts *textStream) firstStop(s string) int {
	best := -1
	for _, st := range ts.stops {
		from := max(0, ts.sent-len(st)+1)
		if from > len(s) {
			continue
		}
		if i := strings.Index(s[from:], st); i >= 0 && (best < 0 || from+i < best) {
			best = from + i
		}
	}
	return best
}

// holdback is the length of the longest suffix of s that is a proper
// prefix of a stop sequence.
func (ts *textStream) holdback(s string) int {
	h := 0
	for _, st := range ts.stops {
		for n := min(len(st)-1, len(s)); n > h; n-- {
			if strings.HasSuffix(s, st[:n]) {
				h = n
				break
			}
		}
	}
	return h
}
