package tokenizer

import (
	"fmt"
	"sort"
)

// maxID bounds token ids read from files, so that a corrupt id cannot make
// the vocabulary tables huge.
const maxID = 1 << 24

// vocabEntry is one token of a vocabulary file; where names it in errors.
type vocabEntry struct {
	token string
	id    int
	where string
}

// mergeEntry is one merge of a merges list, in rank order.
type mergeEntry struct {
	a, b  string
	where string
}

// build checks a vocabulary, its merges and its special tokens and makes a
// Tokenizer of them. Specials not in vocab are added with their ids. When
// specials is nil, every token that is neither a single byte nor the result
// of a merge is taken to be special (GPT-2's <|endoftext|>).
func build(vocab []vocabEntry, merges []mergeEntry, specials []vocabEntry, ignoreMerges bool) (*Tokenizer, error) {
	t := &Tokenizer{
		ids:          make(map[string]int, len(vocab)+len(specials)),
		merges:       make(map[uint64]merge, len(merges)),
		specialIDs:   make(map[string]int),
		ignoreMerges: ignoreMerges,
		cache:        make(map[string][]int32),
	}
	size := 0
	for _, e := range append(vocab[:len(vocab):len(vocab)], specials...) {
		if e.id < 0 || e.id >= maxID {
			return nil, fmt.Errorf("%s: token %q has id %d, outside [0, %d)", e.where, e.token, e.id, maxID)
		}
		if e.token == "" {
			return nil, fmt.Errorf("%s: empty token (id %d)", e.where, e.id)
		}
		size = max(size, e.id+1)
	}
	t.tokens = make([]string, size)
	add := func(e vocabEntry) error {
		if other, ok := t.ids[e.token]; ok && other != e.id {
			return fmt.Errorf("%s: token %q has id %d and also id %d", e.where, e.token, e.id, other)
		}
		if old := t.tokens[e.id]; old != "" && old != e.token {
			return fmt.Errorf("%s: id %d is given to both %q and %q", e.where, e.id, old, e.token)
		}
		t.ids[e.token] = e.id
		t.tokens[e.id] = e.token
		return nil
	}
	for _, e := range vocab {
		if err := add(e); err != nil {
			return nil, err
		}
	}
	for _, e := range specials {
		if err := add(e); err != nil {
			return nil, err
		}
		t.specialIDs[e.token] = e.id
	}

	for b := 0; b < 256; b++ {
		s := string(byteRune[b])
		id, ok := t.ids[s]
		if !ok {
			return nil, fmt.Errorf("the vocabulary has no token %q for byte 0x%02x: not a byte-level BPE vocabulary", s, b)
		}
		t.byteIDs[b] = int32(id)
	}

	merged := make(map[int]bool, len(merges))
	keys := make([]uint64, len(merges))
	for rank, m := range merges {
		a, okA := t.ids[m.a]
		b, okB := t.ids[m.b]
		switch {
		case !okA:
			return nil, fmt.Errorf("%s: merge %q %q: %q is not in the vocabulary", m.where, m.a, m.b, m.a)
		case !okB:
			return nil, fmt.Errorf("%s: merge %q %q: %q is not in the vocabulary", m.where, m.a, m.b, m.b)
		}
		id, ok := t.ids[m.a+m.b]
		if !ok {
			return nil, fmt.Errorf("%s: merge %q %q: the result %q is not in the vocabulary", m.where, m.a, m.b, m.a+m.b)
		}
		// As in GPT-2 and Hugging Face, a merge listed twice keeps its last rank.
		keys[rank] = pairKey(int32(a), int32(b))
		t.merges[keys[rank]] = merge{rank: int32(rank), id: int32(id)}
		merged[id] = true
	}
	for rank, k := range keys {
		if t.merges[k].rank == int32(rank) {
			t.ranked = append(t.ranked, [2]int32{int32(k >> 32), int32(uint32(k))})
		}
	}

	if specials == nil {
		for _, id := range t.byteIDs {
			merged[int(id)] = true
		}
		for _, e := range vocab {
			if !merged[e.id] {
				t.specialIDs[e.token] = e.id
			}
		}
	}
	for s := range t.specialIDs {
		t.specials = append(t.specials, s)
	}
	sort.Slice(t.specials, func(i, j int) bool {
		a, b := t.specials[i], t.specials[j]
		return len(a) > len(b) || (len(a) == len(b) && a < b)
	})

	t.raw = make([]string, size)
	for id, tok := range t.tokens {
		if _, special := t.specialIDs[tok]; special || tok == "" {
			t.raw[id] = tok
			continue
		}
		if raw, ok := unbyteString(tok); ok {
			t.raw[id] = string(raw)
		} else {
			t.raw[id] = tok // not byte-level text: stands for itself
		}
	}
	return t, nil
}
