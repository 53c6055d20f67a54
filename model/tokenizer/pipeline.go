package tokenizer

import (
	"fmt"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// pipeline is a tokenizer.json's encoding and decoding when it is not in
// GPT-2's layout.
type pipeline struct {
	source     []byte       // the tokenizer.json, which SaveHF writes back
	added      []addedToken // in the order of added_tokens
	raw        *addedMatcher
	normalized *addedMatcher
	normalizer normalizer   // nil: none
	pre        preTokenizer // nil: none
	post       postProcessor
	decoder    decoder // nil: the tokens joined by spaces

	vocab map[string]int32 // the model's vocabulary (not the added tokens)
	// decodeAs holds what the decoder gets for added tokens with the
	// normalized flag: their normalized content, as in the library.
	decodeAs     map[int]string
	byteFallback bool
	fallback     [256]int32 // id of "<0xXX>", -1 where there is none
	byteSym      [256]int32 // id of each byte's byte-level character, -1 where there is none
	unk          int32      // -1: no unk_token
	fuseUnk      bool
	prefix       string // continuing_subword_prefix
	suffix       string // end_of_word_suffix
}

// addedToken is one of added_tokens with its flags.
type addedToken struct {
	content                         string
	id                              int
	special, lstrip, rstrip, single bool
	normalized                      bool
}

func buildPipeline(f *hfFile, data []byte, vocab []vocabEntry, merges []mergeEntry) (*Tokenizer, error) {
	m := f.Model
	p := &pipeline{source: data, unk: -1, fuseUnk: m.FuseUnk, byteFallback: m.ByteFallback}
	if m.ContinuingSubwordPrefix != nil {
		p.prefix = *m.ContinuingSubwordPrefix
	}
	if m.EndOfWordSuffix != nil {
		p.suffix = *m.EndOfWordSuffix
	}
	t := &Tokenizer{
		ids:          make(map[string]int, len(vocab)+len(f.AddedTokens)),
		merges:       make(map[uint64]merge, len(merges)),
		specialIDs:   make(map[string]int),
		special:      make(map[int]bool),
		ignoreMerges: m.IgnoreMerges,
		cache:        make(map[string][]int32),
		pipe:         p,
	}
	size := 0
	for _, e := range vocab {
		size = max(size, e.id+1)
	}
	for i, a := range f.AddedTokens {
		if *a.ID < 0 || *a.ID >= maxID {
			return nil, fmt.Errorf("added_tokens[%d]: token %q has id %d, outside [0, %d)", i, *a.Content, *a.ID, maxID)
		}
		size = max(size, *a.ID+1)
	}
	t.tokens = make([]string, size)
	p.vocab = make(map[string]int32, len(vocab))
	for _, e := range vocab {
		if e.token == "" {
			return nil, fmt.Errorf("%s: empty token (id %d)", e.where, e.id)
		}
		if old := t.tokens[e.id]; old != "" {
			return nil, fmt.Errorf("%s: id %d is given to both %q and %q", e.where, e.id, old, e.token)
		}
		t.tokens[e.id] = e.token
		t.ids[e.token] = e.id
		p.vocab[e.token] = int32(e.id)
	}
	for i, a := range f.AddedTokens {
		where := fmt.Sprintf("added_tokens[%d]", i)
		c, id := *a.Content, *a.ID
		if c == "" {
			continue // the library ignores empty added tokens
		}
		if other, ok := t.ids[c]; ok && other != id {
			return nil, fmt.Errorf("%s: token %q has id %d and also id %d", where, c, id, other)
		}
		if old := t.tokens[id]; old != "" && old != c {
			return nil, fmt.Errorf("%s: id %d is given to both %q and %q", where, id, old, c)
		}
		t.tokens[id] = c
		t.ids[c] = id
		t.specialIDs[c] = id
		if a.Special {
			t.special[id] = true
		}
		normalized := !a.Special
		if a.Normalized != nil {
			normalized = *a.Normalized
		}
		p.added = append(p.added, addedToken{content: c, id: id, special: a.Special, lstrip: a.LStrip, rstrip: a.RStrip, single: a.SingleWord, normalized: normalized})
	}

	// The model.
	if m.UnkToken != nil {
		id, ok := p.vocab[*m.UnkToken]
		if !ok {
			return nil, fmt.Errorf("model.unk_token %q is not in model.vocab", *m.UnkToken)
		}
		p.unk = id
	}
	for b := range 256 {
		p.fallback[b], p.byteSym[b] = -1, -1
		if id, ok := p.vocab[fmt.Sprintf("<0x%02X>", b)]; ok {
			p.fallback[b] = id
		}
		if id, ok := p.vocab[string(byteRune[b])]; ok {
			p.byteSym[b] = id
			t.byteIDs[b] = id
		}
	}
	keys := make([]uint64, len(merges))
	for rank, e := range merges {
		a, okA := p.vocab[e.a]
		b, okB := p.vocab[e.b]
		switch {
		case !okA:
			return nil, fmt.Errorf("%s: merge %q %q: %q is not in the vocabulary", e.where, e.a, e.b, e.a)
		case !okB:
			return nil, fmt.Errorf("%s: merge %q %q: %q is not in the vocabulary", e.where, e.a, e.b, e.b)
		}
		result := e.a + strings.TrimPrefix(e.b, p.prefix)
		if p.prefix == "" {
			result = e.a + e.b
		}
		id, ok := p.vocab[result]
		if !ok {
			return nil, fmt.Errorf("%s: merge %q %q: the result %q is not in the vocabulary", e.where, e.a, e.b, result)
		}
		keys[rank] = pairKey(a, b)
		t.merges[keys[rank]] = merge{rank: int32(rank), id: id}
	}
	for rank, k := range keys {
		if t.merges[k].rank == int32(rank) {
			t.ranked = append(t.ranked, [2]int32{int32(k >> 32), int32(uint32(k))})
		}
	}

	var err error
	if !isNull(f.Normalizer) {
		if p.normalizer, err = parseNormalizer(f.Normalizer, "normalizer"); err != nil {
			return nil, err
		}
	}
	if !isNull(f.PreTokenizer) {
		if p.pre, err = parsePreTokenizer(f.PreTokenizer, "pre_tokenizer", true); err != nil {
			return nil, err
		}
	}
	if !isNull(f.PostProcessor) {
		if p.post, err = parsePostProcessor(f.PostProcessor, "post_processor", t.TokenID); err != nil {
			return nil, err
		}
		if err := checkIDs(p.post, size); err != nil {
			return nil, err
		}
	}
	if !isNull(f.Decoder) {
		if p.decoder, err = parseDecoder(f.Decoder, "decoder"); err != nil {
			return nil, err
		}
	}
	p.pre = fuse(p.pre)
	if lazyByteLevel(p.pre) {
		for b, id := range p.byteSym {
			if id < 0 && p.unk < 0 && (!p.byteFallback || p.fallback[b] < 0) {
				return nil, fmt.Errorf("the vocabulary has no token %q for byte 0x%02x, which the ByteLevel pre-tokenizer produces, and no unk_token or byte fallback for it", string(byteRune[b]), b)
			}
		}
		if p.prefix != "" || p.suffix != "" {
			// The model must see the characters to add them.
			p.pre = setEager(p.pre)
		}
	}
	var specials []addedToken
	var normal []addedToken
	for _, a := range p.added {
		if a.normalized {
			a.content = p.normalize(a.content)
			if a.content != t.tokens[a.id] {
				if p.decodeAs == nil {
					p.decodeAs = map[int]string{}
				}
				p.decodeAs[a.id] = a.content
			}
			if a.content == "" {
				continue
			}
			normal = append(normal, a)
		} else {
			specials = append(specials, a)
		}
	}
	p.raw = newAddedMatcher(specials)
	p.normalized = newAddedMatcher(normal)

	for s := range t.specialIDs {
		t.specials = append(t.specials, s)
	}
	sort.Slice(t.specials, func(i, j int) bool {
		a, b := t.specials[i], t.specials[j]
		return len(a) > len(b) || (len(a) == len(b) && a < b)
	})
	t.raw = make([]string, size)
	for id, tok := range t.tokens {
		if tok == "" {
			continue
		}
		if _, ok := t.specialIDs[tok]; ok {
			t.raw[id] = tok
			continue
		}
		if b, ok := fallbackByte(tok); ok && p.byteFallback {
			t.raw[id] = string([]byte{b})
			continue
		}
		t.raw[id] = p.decodeTokens([]string{tok}, false, 1)
	}
	return t, nil
}

// checkIDs makes sure that a post-processor adds only ids of the vocabulary.
func checkIDs(pp postProcessor, size int) error {
	var check func(pp postProcessor) error
	check = func(pp postProcessor) error {
		switch x := pp.(type) {
		case template:
			for _, item := range x {
				for _, id := range item {
					if id < 0 || id >= size {
						return fmt.Errorf("post_processor: token id %d is outside the vocabulary [0, %d)", id, size)
					}
				}
			}
		case postSeq:
			for _, p := range x {
				if err := check(p); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return check(pp)
}

// fuse replaces the pre-tokenizer of Qwen's and Llama 3's layout, a Split
// scanner (Isolated) and a ByteLevel without its own split, by one step
// that does both.
func fuse(pt preTokenizer) preTokenizer {
	seq, ok := pt.(preSeq)
	if !ok || len(seq) != 2 {
		return pt
	}
	sp, ok1 := seq[0].(*splitter)
	bl, ok2 := seq[1].(*byteLevelPre)
	if !ok1 || !ok2 || bl.prefix || bl.re != nil || !bl.lazy || sp.behavior != splitIsolated || sp.invert || sp.skipSpace {
		return pt
	}
	scan, ok := sp.m.(scanMatcher)
	if !ok {
		return pt
	}
	return splitBytes(scan)
}

// splitBytes is a scanner's split followed by a lazy ByteLevel.
type splitBytes scanMatcher

func (next splitBytes) split(p piece, emit func(piece)) {
	s := p.text()
	for i := 0; i < len(s); {
		j := next(s, i)
		emit(piece{s: s[i:j], first: p.first && i == 0, bytes: true})
		i = j
	}
}

// lazyByteLevel reports whether the pre-tokenizer ends with a ByteLevel
// step that leaves its mapping to the model.
func lazyByteLevel(pt preTokenizer) bool {
	switch x := pt.(type) {
	case *byteLevelPre:
		return x.lazy
	case splitBytes:
		return true
	case preSeq:
		return len(x) > 0 && lazyByteLevel(x[len(x)-1])
	}
	return false
}

func setEager(pt preTokenizer) preTokenizer {
	switch x := pt.(type) {
	case splitBytes:
		return preSeq{&splitter{m: scanMatcher(x), behavior: splitIsolated}, &byteLevelPre{}}
	case *byteLevelPre:
		x.lazy = false
	case preSeq:
		if len(x) > 0 {
			x[len(x)-1] = setEager(x[len(x)-1])
		}
	}
	return pt
}

func (p *pipeline) normalize(s string) string {
	if p.normalizer == nil {
		return s
	}
	return p.normalizer.normalize(s)
}

// encode appends the ids of text to dst: added tokens (when added is set),
// the normalizer, the pre-tokenizer and the model, as the library's
// encode(text, add_special_tokens=False) does.
func (t *Tokenizer) encodePipeline(dst []int, text string, added bool) []int {
	p := t.pipe
	model := func(q piece) {
		dst = t.appendPiece(dst, q)
	}
	pretok := func(q piece) {
		if p.pre == nil {
			model(q)
			return
		}
		p.pre.split(q, model)
	}
	normalized := func(q piece) {
		q.s = p.normalize(q.s)
		if q.s == "" {
			return
		}
		if !added || p.normalized.empty() {
			pretok(q)
			return
		}
		p.normalized.split(q, func(q piece, id int) {
			if id >= 0 {
				dst = append(dst, id)
			} else {
				pretok(q)
			}
		})
	}
	start := piece{s: text, first: true}
	if !added || p.raw.empty() {
		normalized(start)
		return dst
	}
	p.raw.split(start, func(q piece, id int) {
		if id >= 0 {
			dst = append(dst, id)
		} else {
			normalized(q)
		}
	})
	return dst
}

// appendPiece appends the model's tokens of one pre-token.
func (t *Tokenizer) appendPiece(dst []int, q piece) []int {
	if q.s == "" {
		return dst
	}
	if q.bytes && len(q.s) == 1 && !t.ignoreMerges {
		if id := t.pipe.byteSym[q.s[0]]; id >= 0 {
			return append(dst, int(id))
		}
	}
	t.mu.RLock()
	ids, ok := t.cache[q.s]
	t.mu.RUnlock()
	if !ok {
		ids = t.pipe.tokenize(t, q)
		if len(q.s) > maxCachedPiece {
			return appendIDs(dst, ids)
		}
		t.mu.Lock()
		if len(t.cache) >= cacheLimit {
			clear(t.cache)
		}
		t.cache[strings.Clone(q.s)] = ids
		t.mu.Unlock()
	}
	return appendIDs(dst, ids)
}

// maxCachedPiece bounds the pre-tokens the word cache keeps (a
// pre-tokenizer that does not split at spaces makes whole texts one).
const maxCachedPiece = 256

func appendIDs(dst []int, ids []int32) []int {
	for _, id := range ids {
		dst = append(dst, int(id))
	}
	return dst
}

// tokenize runs the BPE model on one pre-token as the library does: each
// character becomes its token (or its <0xXX> byte tokens, or unk), then the
// merge of lowest rank, leftmost first, is applied until none applies.
func (p *pipeline) tokenize(t *Tokenizer, q piece) []int32 {
	w := q.s
	if q.bytes {
		if t.ignoreMerges {
			if id, ok := p.vocab[byteString([]byte(w))]; ok {
				return []int32{id}
			}
		}
		ok := true
		for i := 0; i < len(w); i++ {
			if p.byteSym[w[i]] < 0 {
				ok = false
				break
			}
		}
		if !ok {
			w = byteString([]byte(w))
		} else {
			sym := make([]int32, len(w))
			for i := 0; i < len(w); i++ {
				sym[i] = p.byteSym[w[i]]
			}
			return t.mergeSymbols(sym)
		}
	} else if t.ignoreMerges {
		if id, ok := p.vocab[w]; ok {
			return []int32{id}
		}
	}
	sym := make([]int32, 0, len(w))
	unk, unkPending := int32(-1), false
	for i := 0; i < len(w); {
		_, n := utf8.DecodeRuneInString(w[i:])
		c := w[i : i+n]
		if i > 0 && p.prefix != "" {
			c = p.prefix + c
		}
		if i+n == len(w) && p.suffix != "" {
			c += p.suffix
		}
		if id, ok := p.vocab[c]; ok {
			if unkPending {
				sym = append(sym, unk)
				unkPending = false
			}
			sym = append(sym, id)
			i += n
			continue
		}
		if p.byteFallback {
			all := true
			for k := 0; k < len(c); k++ {
				if p.fallback[c[k]] < 0 {
					all = false
					break
				}
			}
			if all {
				for k := 0; k < len(c); k++ {
					sym = append(sym, p.fallback[c[k]])
				}
				i += n
				continue
			}
		}
		if p.unk >= 0 {
			if unkPending && !p.fuseUnk {
				sym = append(sym, unk)
			}
			unk, unkPending = p.unk, true
		}
		i += n
	}
	if unkPending {
		sym = append(sym, unk)
	}
	return t.mergeSymbols(sym)
}

// mergeSymbols applies the merges to a symbol sequence: the pending merge
// of lowest (rank, position) first, each merge making new candidates with
// its neighbours.
func (t *Tokenizer) mergeSymbols(sym []int32) []int32 {
	n := int32(len(sym))
	if n < 2 {
		return sym
	}
	next := make([]int32, n)
	prev := make([]int32, n)
	for i := range n {
		next[i] = i + 1
		prev[i] = i - 1
	}
	var h pairHeap
	push := func(pos int32) {
		if pos < 0 || next[pos] >= n {
			return
		}
		if m, ok := t.merges[pairKey(sym[pos], sym[next[pos]])]; ok {
			h.push(candidate{m.rank, pos})
		}
	}
	for i := int32(0); i+1 < n; i++ {
		push(i)
	}
	for len(h) > 0 {
		c := h.pop()
		p := c.pos
		if sym[p] < 0 || next[p] >= n {
			continue
		}
		q := next[p]
		m, ok := t.merges[pairKey(sym[p], sym[q])]
		if !ok || m.rank != c.rank {
			continue // stale: a symbol here was merged already
		}
		sym[p] = m.id
		sym[q] = -1
		next[p] = next[q]
		if next[q] < n {
			prev[next[q]] = p
		}
		push(prev[p])
		push(p)
	}
	out := make([]int32, 0, 4)
	for i := int32(0); i < n; i = next[i] {
		out = append(out, sym[i])
	}
	return out
}

// tokenString is the string the decoder gets for id.
func (t *Tokenizer) tokenString(id int) string {
	if s, ok := t.pipe.decodeAs[id]; ok {
		return s
	}
	return t.tokens[id]
}

// decodeTokens runs the decoder on token strings.
func (p *pipeline) decodeTokens(tokens []string, lossy bool, first int) string {
	if p.decoder == nil {
		return strings.Join(tokens, " ")
	}
	return strings.Join(p.decoder.decode(tokens, lossy, first), "")
}

// addedMatcher finds added tokens in text: at the leftmost place where one
// occurs the longest, as the library's leftmost-longest automaton does.
type addedMatcher struct {
	tokens []addedToken
	first  [256][]int // by first byte: indexes into tokens, longest first
}

func newAddedMatcher(tokens []addedToken) *addedMatcher {
	m := &addedMatcher{tokens: tokens}
	for i, a := range tokens {
		m.first[a.content[0]] = append(m.first[a.content[0]], i)
	}
	for b := range m.first {
		l := m.first[b]
		sort.SliceStable(l, func(i, j int) bool { return len(tokens[l[i]].content) > len(tokens[l[j]].content) })
	}
	return m
}

func (m *addedMatcher) empty() bool { return m == nil || len(m.tokens) == 0 }

// split calls fn with the parts of p in order: each added token found (with
// its id) and the text between them (id -1), as the library's
// find_matches, with the lstrip, rstrip and single_word flags.
func (m *addedMatcher) split(p piece, fn func(q piece, id int)) {
	s := p.s
	part := func(start, end int) {
		if start < end {
			fn(piece{s: s[start:end], first: p.first && start == 0}, -1)
		}
	}
	done := 0 // end of the last match
	for i := 0; i < len(s); {
		l := m.first[s[i]]
		k := -1
		for _, j := range l {
			if strings.HasPrefix(s[i:], m.tokens[j].content) {
				k = j
				break
			}
		}
		if k < 0 {
			i++
			continue
		}
		a := m.tokens[k]
		start, stop := i, i+len(a.content)
		i = stop
		if a.single {
			before := start == 0 || !endsWithWord(s[:start])
			after := stop == len(s) || !startsWithWord(s[stop:])
			if !before || !after {
				continue
			}
		}
		if a.lstrip {
			start = max(len(strings.TrimRightFunc(s[:start], unicode.IsSpace)), done)
		}
		if a.rstrip {
			stop += len(s[stop:]) - len(strings.TrimLeftFunc(s[stop:], unicode.IsSpace))
		}
		if start < done {
			start = done // an earlier match's rstrip took these characters
		}
		part(done, start)
		fn(piece{}, a.id)
		done = stop
		i = max(i, stop)
	}
	part(done, len(s))
}

func isAlphanumeric(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.Is(unicode.Other_Alphabetic, r)
}

func endsWithWord(s string) bool {
	r, _ := utf8.DecodeLastRuneInString(s)
	return isAlphanumeric(r)
}

func startsWithWord(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return isAlphanumeric(r)
}
