package tokenizer

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"unicode/utf8"
)

// Trainer learns a byte-level BPE vocabulary. Add text to it, then call
// Train, as often as wanted, for a vocabulary of a chosen size.
type Trainer struct {
	// Progress, if set, is called during Train with the number of tokens so
	// far and the number wanted.
	Progress func(tokens, vocabSize int)

	specials []string
	counts   map[string]int64 // pre-token -> occurrences
}

// NewTrainer returns a Trainer whose vocabularies will have the given special
// tokens. Their contents in added text are not counted as text.
func NewTrainer(specials ...string) *Trainer {
	return &Trainer{specials: specials, counts: make(map[string]int64)}
}

// Add counts the pre-tokens of text, one document: no pre-token spans two
// calls.
func (tr *Trainer) Add(text string) {
	for len(text) > 0 {
		at, n := -1, 0
		for _, s := range tr.specials {
			if s == "" {
				continue
			}
			if i := strings.Index(text, s); i >= 0 && (at < 0 || i < at || (i == at && len(s) > n)) {
				at, n = i, len(s)
			}
		}
		if at < 0 {
			at = len(text)
		}
		pretokens(text[:at], func(w string) {
			if c, ok := tr.counts[w]; ok {
				tr.counts[w] = c + 1
			} else {
				tr.counts[strings.Clone(w)] = 1 // w may point into a large buffer
			}
		})
		text = text[min(at+n, len(text)):]
	}
}

// readChunk is how much AddReader reads at a time (a variable for tests).
var readChunk = 1 << 20

// AddReader counts the pre-tokens of everything r holds, as Add would for
// the whole of it as one text, reading it piece by piece.
func (tr *Trainer) AddReader(r io.Reader) error {
	br := bufio.NewReaderSize(r, readChunk)
	var buf []byte
	for {
		chunk := make([]byte, readChunk)
		n, err := io.ReadFull(br, chunk)
		buf = append(buf, chunk[:n]...)
		eof := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
		if err != nil && !eof {
			return fmt.Errorf("tokenizer: train: %w", err)
		}
		if eof {
			tr.Add(string(buf))
			return nil
		}
		if cut := tr.safeCut(buf); cut > 0 {
			tr.Add(string(buf[:cut]))
			buf = append(buf[:0], buf[cut:]...)
		}
	}
}

// safeCut returns the last place in buf where text can be cut without
// changing how it splits into pre-tokens, or 0 if there is none: just before
// a white-space character that follows anything but white space (no
// pre-token spans such a place, and what follows it does not depend on what
// came before), and not inside a special token.
func (tr *Trainer) safeCut(buf []byte) int {
	s := string(buf)
	longest := 0
	for _, sp := range tr.specials {
		longest = max(longest, len(sp))
	}
	// A special token across a cut must lie wholly inside buf to be seen.
	for i := len(s) - max(longest, 1); i > 0; i-- {
		if s[i] != ' ' && s[i] != '\n' {
			continue
		}
		_, size := utf8.DecodeLastRuneInString(s[:i])
		if c, _ := classAt(s, i-size); c == classSpace {
			continue
		}
		if !tr.straddled(s, i, longest) {
			return i
		}
	}
	return 0
}

// straddled reports whether a special token occurs across position i of s.
func (tr *Trainer) straddled(s string, i, longest int) bool {
	lo, hi := max(0, i-longest+1), min(len(s), i+longest-1)
	for _, sp := range tr.specials {
		if sp == "" {
			continue
		}
		w := s[lo:hi]
		for off := 0; ; {
			j := strings.Index(w[off:], sp)
			if j < 0 {
				break
			}
			start := lo + off + j
			if start < i && start+len(sp) > i {
				return true
			}
			off += j + 1
		}
	}
	return false
}

// Train returns a tokenizer with exactly vocabSize tokens trained on texts
// (each one a document) with the given special tokens.
func Train(texts []string, vocabSize int, specials []string) (*Tokenizer, error) {
	tr := NewTrainer(specials...)
	for _, t := range texts {
		tr.Add(t)
	}
	return tr.Train(vocabSize)
}

// TrainReader is Train on all of r's text as one document.
func TrainReader(r io.Reader, vocabSize int, specials []string) (*Tokenizer, error) {
	tr := NewTrainer(specials...)
	if err := tr.AddReader(r); err != nil {
		return nil, err
	}
	return tr.Train(vocabSize)
}

// Train learns merges on the text added so far until the vocabulary has
// vocabSize tokens: the 256 bytes (ids 0..255, in GPT-2's order), then the
// special tokens (ids 256 on), then one token per merge. Each step merges the
// most frequent adjacent pair of tokens over all pre-tokens, the pair of
// smallest ids among equally frequent ones, so the result depends only on
// the text and the arguments. A merge whose result is already a token adds
// no token.
func (tr *Trainer) Train(vocabSize int) (*Tokenizer, error) {
	if err := tr.checkSpecials(); err != nil {
		return nil, err
	}
	base := 256 + len(tr.specials)
	if vocabSize < base {
		return nil, fmt.Errorf("tokenizer: train: vocabulary size %d is below %d (256 bytes and %d special tokens)", vocabSize, base, len(tr.specials))
	}
	if vocabSize > maxID {
		return nil, fmt.Errorf("tokenizer: train: vocabulary size %d is above the limit %d", vocabSize, maxID)
	}

	// Tokens as raw bytes; vocabulary form made at the end.
	raw := make([]string, base, vocabSize)
	rawID := make(map[string]int32, vocabSize)
	var byteID [256]int32
	for id, b := range byteOrder {
		raw[id] = string([]byte{b})
		rawID[raw[id]] = int32(id)
		byteID[b] = int32(id)
	}
	// A merge whose token would read like a special token is never made, so
	// that the two cannot be confused in a vocabulary file.
	isSpecial := make(map[string]bool)
	for i, s := range tr.specials {
		raw[256+i] = s
		isSpecial[s] = true
	}
	banned := make(map[uint64]bool)

	// The words: distinct pre-tokens, sorted, as token sequences.
	keys := make([]string, 0, len(tr.counts))
	for w := range tr.counts {
		keys = append(keys, w)
	}
	sort.Strings(keys)
	words := make([][]int32, len(keys))
	freq := make([]int64, len(keys))
	for i, w := range keys {
		seq := make([]int32, len(w))
		for j := 0; j < len(w); j++ {
			seq[j] = byteID[w[j]]
		}
		words[i], freq[i] = seq, tr.counts[w]
	}

	counts := make(map[uint64]int64)
	where := make(map[uint64][]int32) // pair -> words it occurs in (maybe no longer)
	for i, seq := range words {
		for j := 0; j+1 < len(seq); j++ {
			k := pairKey(seq[j], seq[j+1])
			counts[k] += freq[i]
			if ws := where[k]; len(ws) == 0 || ws[len(ws)-1] != int32(i) {
				where[k] = append(ws, int32(i))
			}
		}
	}
	h := make(countHeap, 0, len(counts))
	for k, c := range counts {
		h = append(h, pairCount{c, k})
	}
	h.init()

	var merges [][2]int32
	seen := make([]int32, len(words)) // last step that visited each word, plus one
	var touched []uint64
	for step := int32(1); len(raw) < vocabSize; step++ {
		if tr.Progress != nil && step%64 == 1 {
			tr.Progress(len(raw), vocabSize)
		}
		// The most frequent pair, skipping stale heap entries.
		var best pairCount
		for {
			if len(h) == 0 {
				return nil, fmt.Errorf("tokenizer: train: the text allows only %d tokens, fewer than the %d asked for; give more text or a smaller vocabulary", len(raw), vocabSize)
			}
			best = h.pop()
			if c := counts[best.key]; c != best.count {
				if c > 0 && c < best.count {
					h.push(pairCount{c, best.key})
				}
				continue
			}
			if banned[best.key] {
				continue
			}
			if a, b := int32(best.key>>32), int32(uint32(best.key)); isSpecial[byteString([]byte(raw[a]+raw[b]))] {
				banned[best.key] = true
				continue
			}
			break
		}
		a, b := int32(best.key>>32), int32(uint32(best.key))
		s := raw[a] + raw[b]
		x, ok := rawID[s]
		if !ok {
			x = int32(len(raw))
			raw = append(raw, s)
			rawID[s] = x
		}
		merges = append(merges, [2]int32{a, b})

		touched = touched[:0]
		for _, wi := range where[best.key] {
			if seen[wi] == step {
				continue
			}
			seen[wi] = step
			seq, f := words[wi], freq[wi]
			if !containsPair(seq, a, b) {
				continue
			}
			for j := 0; j+1 < len(seq); j++ {
				counts[pairKey(seq[j], seq[j+1])] -= f
			}
			out := seq[:0]
			for j := 0; j < len(seq); j++ {
				if j+1 < len(seq) && seq[j] == a && seq[j+1] == b {
					out = append(out, x)
					j++
				} else {
					out = append(out, seq[j])
				}
			}
			words[wi] = out
			for j := 0; j+1 < len(out); j++ {
				k := pairKey(out[j], out[j+1])
				counts[k] += f
				if out[j] == x || out[j+1] == x {
					touched = append(touched, k)
					if ws := where[k]; len(ws) == 0 || ws[len(ws)-1] != wi {
						where[k] = append(ws, wi)
					}
				}
			}
		}
		delete(where, best.key)
		delete(counts, best.key)
		// Only pairs with the new token gained occurrences; give each its
		// current count in the heap. Pairs that lost some are fixed when
		// they come up.
		sort.Slice(touched, func(i, j int) bool { return touched[i] < touched[j] })
		for i, k := range touched {
			if i > 0 && touched[i-1] == k {
				continue
			}
			if c := counts[k]; c > 0 {
				h.push(pairCount{c, k})
			}
		}
	}
	if tr.Progress != nil {
		tr.Progress(len(raw), vocabSize)
	}

	vocab := make([]vocabEntry, 0, len(raw))
	var specials []vocabEntry
	for id, r := range raw {
		if id >= 256 && id < base {
			specials = append(specials, vocabEntry{token: r, id: id, where: "special token"})
			continue
		}
		vocab = append(vocab, vocabEntry{token: byteString([]byte(r)), id: id, where: "trained token"})
	}
	ms := make([]mergeEntry, len(merges))
	for i, m := range merges {
		ms[i] = mergeEntry{a: byteString([]byte(raw[m[0]])), b: byteString([]byte(raw[m[1]])), where: fmt.Sprintf("merge %d", i)}
	}
	t, err := build(vocab, ms, specials, false)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: train: %w", err)
	}
	return t, nil
}

func (tr *Trainer) checkSpecials() error {
	seen := make(map[string]bool)
	for i, s := range tr.specials {
		switch {
		case s == "":
			return fmt.Errorf("tokenizer: train: special token %d is empty", i)
		case !utf8.ValidString(s):
			return fmt.Errorf("tokenizer: train: special token %q is not valid UTF-8", s)
		case seen[s]:
			return fmt.Errorf("tokenizer: train: special token %q is given twice", s)
		}
		if raw, ok := unbyteString(s); ok && len(raw) == 1 {
			return fmt.Errorf("tokenizer: train: special token %q is the byte token for 0x%02x", s, raw[0])
		}
		seen[s] = true
	}
	return nil
}

func containsPair(seq []int32, a, b int32) bool {
	for j := 0; j+1 < len(seq); j++ {
		if seq[j] == a && seq[j+1] == b {
			return true
		}
	}
	return false
}

// pairCount is a heap entry: a pair of token ids and its count when pushed.
type pairCount struct {
	count int64
	key   uint64 // pairKey(a, b)
}

// before orders the heap: higher count first, then smaller pair.
func (p pairCount) before(q pairCount) bool {
	return p.count > q.count || (p.count == q.count && p.key < q.key)
}

type countHeap []pairCount

func (h countHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h countHeap) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && h[r].before(h[l]) {
			m = r
		}
		if !h[m].before(h[i]) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

func (h *countHeap) push(p pairCount) {
	*h = append(*h, p)
	s := *h
	for i := len(s) - 1; i > 0; {
		up := (i - 1) / 2
		if !s[i].before(s[up]) {
			break
		}
		s[i], s[up] = s[up], s[i]
		i = up
	}
}

func (h *countHeap) pop() pairCount {
	s := *h
	top := s[0]
	s[0] = s[len(s)-1]
	s = s[:len(s)-1]
	s.down(0)
	*h = s
	return top
}
