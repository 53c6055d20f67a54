package tokenizer

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"
)

// Tokenizer is a byte-level BPE vocabulary with its merges and special
// tokens. Build one with LoadGPT2, LoadHF (or ReadGPT2, ReadHF) or Train
// (or TrainReader, or a Trainer).
type Tokenizer struct {
	tokens  []string       // id -> vocabulary string; "" where no token has the id
	raw     []string       // id -> the bytes the token stands for
	ids     map[string]int // vocabulary string -> id
	byteIDs [256]int32     // byte -> id of its single-byte token
	merges  map[uint64]merge
	ranked  [][2]int32 // merges in rank order (pair of ids)

	specials     []string // special tokens' contents, longest first
	specialIDs   map[string]int
	ignoreMerges bool // HF "ignore_merges": a pre-token in the vocabulary is one token

	// special marks the added tokens that tokenizer.json calls special
	// (DecodeHF skips them); nil when every one of specials is.
	special map[int]bool
	// pipe runs a tokenizer.json that is not in GPT-2's layout; nil for
	// the byte-level fast path.
	pipe *pipeline

	mu    sync.RWMutex
	cache map[string][]int32
}

type merge struct {
	rank int32
	id   int32 // the merged token
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// cacheLimit bounds the per-word cache; it is emptied when it fills up.
const cacheLimit = 1 << 16

// VocabSize returns one more than the largest token id: the number of rows an
// embedding table needs.
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// TokenID returns the id of a token given in its vocabulary form (for GPT-2,
// "Ġworld" for " world") or, for a special token, its content.
func (t *Tokenizer) TokenID(s string) (int, bool) {
	id, ok := t.ids[s]
	return id, ok
}

// Token returns the vocabulary form of token id, or "" if there is none.
func (t *Tokenizer) Token(id int) string {
	if id < 0 || id >= len(t.tokens) {
		return ""
	}
	return t.tokens[id]
}

// TokenBytes returns the bytes token id stands for, and false if there is no
// such token.
func (t *Tokenizer) TokenBytes(id int) (string, bool) {
	if id < 0 || id >= len(t.tokens) || t.tokens[id] == "" {
		return "", false
	}
	return t.raw[id], true
}

// Specials returns the special tokens' contents in id order.
func (t *Tokenizer) Specials() []string {
	s := append([]string(nil), t.specials...)
	sort.Slice(s, func(i, j int) bool { return t.specialIDs[s[i]] < t.specialIDs[s[j]] })
	return s
}

// SpecialID returns the id of a special token by its content.
func (t *Tokenizer) SpecialID(content string) (int, bool) {
	id, ok := t.specialIDs[content]
	return id, ok
}

// NumMerges returns the number of merges.
func (t *Tokenizer) NumMerges() int { return len(t.ranked) }

// Encode returns the token ids of text. Special tokens' contents in text are
// encoded as ordinary text; see EncodeWithSpecials.
func (t *Tokenizer) Encode(text string) []int {
	return t.AppendEncode(nil, text)
}

// AppendEncode appends the token ids of text to dst, as Encode does.
func (t *Tokenizer) AppendEncode(dst []int, text string) []int {
	if t.pipe != nil {
		return t.encodePipeline(dst, text, false)
	}
	pretokens(text, func(w string) { dst = t.appendWord(dst, w) })
	return dst
}

// EncodeWithSpecials is Encode, except that each occurrence of a special
// token's content in text (the longest where several start at one place)
// becomes that special token.
//
// For a tokenizer.json this is the tokenizers library's
// encode(text, add_special_tokens=False): every added token, special or
// not, is matched in the text (with its lstrip, rstrip, single_word and
// normalized flags). EncodeHF also applies the post-processor.
func (t *Tokenizer) EncodeWithSpecials(text string) []int {
	if t.pipe != nil {
		return t.encodePipeline(nil, text, true)
	}
	if len(t.specials) == 0 {
		return t.Encode(text)
	}
	var dst []int
	// next[i] is where t.specials[i] next occurs at or after pos, -1 if
	// nowhere.
	next := make([]int, len(t.specials))
	for i, s := range t.specials {
		next[i] = strings.Index(text, s)
	}
	for pos := 0; pos < len(text); {
		best := -1
		for i, s := range t.specials { // longest first, so ties go to the longest
			if next[i] >= 0 && next[i] < pos {
				if j := strings.Index(text[pos:], s); j >= 0 {
					next[i] = pos + j
				} else {
					next[i] = -1
				}
			}
			if next[i] >= 0 && (best < 0 || next[i] < next[best]) {
				best = i
			}
		}
		if best < 0 {
			return t.AppendEncode(dst, text[pos:])
		}
		at := next[best]
		dst = t.AppendEncode(dst, text[pos:at])
		dst = append(dst, t.specialIDs[t.specials[best]])
		pos = at + len(t.specials[best])
	}
	return dst
}

// EncodeHF returns the ids the tokenizers library's
// Tokenizer.encode(text, add_special_tokens).ids gives: EncodeWithSpecials,
// then, with addSpecialTokens, the post-processor's tokens (such as a BOS
// token).
func (t *Tokenizer) EncodeHF(text string, addSpecialTokens bool) []int {
	ids := t.EncodeWithSpecials(text)
	if addSpecialTokens && t.pipe != nil && t.pipe.post != nil {
		ids = t.pipe.post.process(ids)
	}
	return ids
}

// IsSpecial reports whether id is a special token (one that DecodeHF skips
// when asked to).
func (t *Tokenizer) IsSpecial(id int) bool {
	if id < 0 || id >= len(t.tokens) {
		return false
	}
	if t.special == nil {
		_, ok := t.specialIDs[t.tokens[id]]
		return ok
	}
	return t.special[id]
}

// DecodeHF returns the text the tokenizers library's Tokenizer.decode(ids,
// skip_special_tokens) gives: the decoder's output, with invalid UTF-8
// replaced by U+FFFD. An id with no token is an error (the library would
// drop it).
func (t *Tokenizer) DecodeHF(ids []int, skipSpecialTokens bool) (string, error) {
	toks := make([]string, 0, len(ids))
	kept := make([]int, 0, len(ids))
	for i, id := range ids {
		if id < 0 || id >= len(t.tokens) || t.tokens[id] == "" {
			return "", fmt.Errorf("tokenizer: decode: ids[%d] = %d is not a token id (vocabulary size %d)", i, id, len(t.tokens))
		}
		if skipSpecialTokens && t.IsSpecial(id) {
			continue
		}
		if t.pipe != nil {
			toks = append(toks, t.tokenString(id))
		}
		kept = append(kept, id)
	}
	if t.pipe != nil {
		return t.pipe.decodeTokens(toks, true, 0), nil
	}
	s, err := t.Decode(kept)
	if err != nil {
		return "", err
	}
	return lossyUTF8([]byte(s)), nil
}

// Decode returns the text that ids stand for: the exact bytes, which need not
// be valid UTF-8 when ids is a part of an encoding. A special token gives its
// content. An id with no token is an error. For a tokenizer.json it is
// DecodeHF(ids, false) without the replacement of invalid UTF-8, so that a
// prefix of an encoding decodes to a prefix of the text.
func (t *Tokenizer) Decode(ids []int) (string, error) {
	if t.pipe != nil {
		toks := make([]string, len(ids))
		for i, id := range ids {
			if id < 0 || id >= len(t.tokens) || t.tokens[id] == "" {
				return "", fmt.Errorf("tokenizer: decode: ids[%d] = %d is not a token id (vocabulary size %d)", i, id, len(t.tokens))
			}
			toks[i] = t.tokenString(id)
		}
		return t.pipe.decodeTokens(toks, false, 0), nil
	}
	var b strings.Builder
	for i, id := range ids {
		if id < 0 || id >= len(t.tokens) || t.tokens[id] == "" {
			return "", fmt.Errorf("tokenizer: decode: ids[%d] = %d is not a token id (vocabulary size %d)", i, id, len(t.tokens))
		}
		b.WriteString(t.raw[id])
	}
	return b.String(), nil
}

// CompleteRunes returns the length of s without a trailing incomplete UTF-8
// sequence: the text of a prefix of an encoding may end inside a character
// that the next token completes, so a stream of decoded text holds that
// tail back.
func CompleteRunes(s string) int {
	for i := 1; i <= utf8.UTFMax && i <= len(s); i++ {
		if utf8.RuneStart(s[len(s)-i]) {
			if !utf8.FullRuneInString(s[len(s)-i:]) {
				return len(s) - i
			}
			break
		}
	}
	return len(s)
}

// appendWord appends the tokens of one pre-token.
func (t *Tokenizer) appendWord(dst []int, w string) []int {
	if len(w) == 1 {
		return append(dst, int(t.byteIDs[w[0]]))
	}
	t.mu.RLock()
	ids, ok := t.cache[w]
	t.mu.RUnlock()
	if !ok {
		ids = t.bpe(w)
		t.mu.Lock()
		if len(t.cache) >= cacheLimit {
			clear(t.cache)
		}
		t.cache[strings.Clone(w)] = ids // w may point into a large text
		t.mu.Unlock()
	}
	for _, id := range ids {
		dst = append(dst, int(id))
	}
	return dst
}

// bpe applies the merges to the bytes of one pre-token, as GPT-2 does: take
// the adjacent pair with the lowest rank, merge all its occurrences from left
// to right, and repeat until no adjacent pair has a merge. A heap of
// candidate pairs keeps long pre-tokens from taking quadratic time.
func (t *Tokenizer) bpe(w string) []int32 {
	if t.ignoreMerges {
		if id, ok := t.ids[byteString([]byte(w))]; ok {
			if _, special := t.specialIDs[t.tokens[id]]; !special {
				return []int32{int32(id)}
			}
		}
	}
	n := len(w)
	sym := make([]int32, n)  // token at each position; -1 once merged into its left neighbour
	next := make([]int32, n) // position of the next live symbol, n at the end
	prev := make([]int32, n) // position of the previous live symbol, -1 at the start
	for i := 0; i < n; i++ {
		sym[i] = t.byteIDs[w[i]]
		next[i] = int32(i + 1)
		prev[i] = int32(i - 1)
	}
	var h pairHeap
	push := func(pos int32) {
		if pos < 0 || next[pos] >= int32(n) {
			return
		}
		if m, ok := t.merges[pairKey(sym[pos], sym[next[pos]])]; ok {
			h.push(candidate{m.rank, pos})
		}
	}
	for i := 0; i+1 < n; i++ {
		push(int32(i))
	}
	var round []candidate
	for len(h) > 0 {
		// One round: every occurrence of the lowest-rank pair, left to right.
		rank := h[0].rank
		round = round[:0]
		for len(h) > 0 && h[0].rank == rank {
			round = append(round, h.pop())
		}
		for _, c := range round {
			p := c.pos
			if sym[p] < 0 || next[p] >= int32(n) {
				continue
			}
			q := next[p]
			m, ok := t.merges[pairKey(sym[p], sym[q])]
			if !ok || m.rank != rank {
				continue // stale: a symbol here was merged already
			}
			sym[p] = m.id
			sym[q] = -1
			next[p] = next[q]
			if next[q] < int32(n) {
				prev[next[q]] = p
			}
			push(prev[p])
			push(p)
		}
	}
	out := make([]int32, 0, 4)
	for i := int32(0); i < int32(n); i = next[i] {
		out = append(out, sym[i])
	}
	return out
}

type candidate struct {
	rank int32
	pos  int32
}

func (a candidate) less(b candidate) bool {
	return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos)
}

// pairHeap is a binary min-heap of candidates by (rank, position).
type pairHeap []candidate

func (h *pairHeap) push(c candidate) {
	*h = append(*h, c)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !s[i].less(s[p]) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *pairHeap) pop() candidate {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	for i := 0; ; {
		l := 2*i + 1
		if l >= len(s) {
			break
		}
		m := l
		if r := l + 1; r < len(s) && s[r].less(s[l]) {
			m = r
		}
		if !s[m].less(s[i]) {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}
