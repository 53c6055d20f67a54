package tokenizer

import (
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
)

// zipfText returns deterministic text of n bytes drawn from a Zipf
// distribution over made-up words, with punctuation and line breaks.
func zipfText(seed uint64, n int) string {
	rng := rand.New(rand.NewPCG(seed, 7))
	syll := []string{"ka", "lo", "mi", "ne", "ru", "sa", "ti", "po", "e", "an", "th", "qu", "é", "ß"}
	words := make([]string, 400)
	for i := range words {
		var w strings.Builder
		for k := 1 + rng.IntN(4); k > 0; k-- {
			w.WriteString(syll[rng.IntN(len(syll))])
		}
		words[i] = w.String()
	}
	z := rand.NewZipf(rng, 1.2, 2, uint64(len(words)-1))
	var b strings.Builder
	for b.Len() < n {
		w := words[z.Uint64()]
		switch rng.IntN(12) {
		case 0:
			w = strings.ToUpper(w[:1]) + w[1:]
		case 1:
			w += "'s"
		case 2:
			w += ","
		case 3:
			w += ".\n"
		case 4:
			w += " 19" + string(rune('0'+rng.IntN(10)))
		}
		b.WriteString(w)
		if rng.IntN(20) == 0 {
			b.WriteString("\n\n")
		} else {
			b.WriteString(" ")
		}
	}
	return b.String()
}

// naiveTrain is byte-level BPE training without incremental updates: count
// every pair afresh at each step. It returns the merges as byte strings.
func naiveTrain(counts map[string]int64, vocabSize, numSpecials int) [][2]string {
	type word struct {
		seq  []int32
		freq int64
	}
	var raw []string
	rawID := map[string]int32{}
	byteID := [256]int32{}
	for id, b := range byteOrder {
		raw = append(raw, string([]byte{b}))
		rawID[raw[id]] = int32(id)
		byteID[b] = int32(id)
	}
	for i := 0; i < numSpecials; i++ {
		raw = append(raw, "\x00special")
	}
	var words []word
	for w, f := range counts {
		seq := make([]int32, len(w))
		for i := 0; i < len(w); i++ {
			seq[i] = byteID[w[i]]
		}
		words = append(words, word{seq, f})
	}
	var merges [][2]string
	for len(raw) < vocabSize {
		pairs := map[uint64]int64{}
		for _, w := range words {
			for i := 0; i+1 < len(w.seq); i++ {
				pairs[pairKey(w.seq[i], w.seq[i+1])] += w.freq
			}
		}
		var best uint64
		var bestCount int64
		for k, c := range pairs {
			if c > bestCount || (c == bestCount && k < best) {
				best, bestCount = k, c
			}
		}
		if bestCount == 0 {
			break
		}
		a, b := int32(best>>32), int32(uint32(best))
		s := raw[a] + raw[b]
		x, ok := rawID[s]
		if !ok {
			x = int32(len(raw))
			raw = append(raw, s)
			rawID[s] = x
		}
		merges = append(merges, [2]string{raw[a], raw[b]})
		for i := range words {
			var out []int32
			seq := words[i].seq
			for j := 0; j < len(seq); j++ {
				if j+1 < len(seq) && seq[j] == a && seq[j+1] == b {
					out = append(out, x)
					j++
				} else {
					out = append(out, seq[j])
				}
			}
			words[i].seq = out
		}
	}
	return merges
}

func TestTrainMatchesNaive(t *testing.T) {
	for _, tt := range []struct {
		seed      uint64
		size      int
		vocabSize int
		specials  []string
	}{
		{1, 60_000, 700, nil},
		{2, 20_000, 400, []string{"<|endoftext|>"}},
		{3, 3_000, 300, []string{"<a>", "<b>"}},
	} {
		text := zipfText(tt.seed, tt.size)
		tr := NewTrainer(tt.specials...)
		tr.Add(text)
		tok, err := tr.Train(tt.vocabSize)
		if err != nil {
			t.Fatal(err)
		}
		want := naiveTrain(tr.counts, tt.vocabSize, len(tt.specials))
		var got [][2]string
		for _, m := range tok.ranked {
			got = append(got, [2]string{tok.raw[m[0]], tok.raw[m[1]]})
		}
		if len(got) != len(want) {
			t.Errorf("seed %d: %d merges, naive training made %d", tt.seed, len(got), len(want))
		}
		for i := range min(len(got), len(want)) {
			if got[i] != want[i] {
				t.Fatalf("seed %d: merge %d is %q, naive training says %q", tt.seed, i, got[i], want[i])
			}
		}
		if tok.VocabSize() != tt.vocabSize {
			t.Errorf("seed %d: VocabSize() = %d, want %d", tt.seed, tok.VocabSize(), tt.vocabSize)
		}
		if got, err := tok.Decode(tok.Encode(text)); err != nil || got != text {
			t.Errorf("seed %d: round trip failed: %v", tt.seed, err)
		}
	}
}

func TestTrainErrors(t *testing.T) {
	text := []string{zipfText(4, 5000)}
	tests := []struct {
		name      string
		vocabSize int
		specials  []string
		want      string
	}{
		{"below bytes", 255, nil, "vocabulary size 255 is below 256"},
		{"below specials", 257, []string{"<a>", "<b>"}, "vocabulary size 257 is below 258 (256 bytes and 2 special tokens)"},
		{"empty special", 300, []string{""}, "special token 0 is empty"},
		{"duplicate special", 300, []string{"<a>", "<a>"}, `special token "<a>" is given twice`},
		{"byte special", 300, []string{"x"}, `special token "x" is the byte token for 0x78`},
		{"invalid special", 300, []string{"\xff\xfe"}, "not valid UTF-8"},
		{"too little text", 100_000, nil, "the text allows only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := Train(text, tt.vocabSize, tt.specials)
			if err == nil {
				t.Fatalf("Train succeeded with %d tokens, want an error", tok.VocabSize())
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want %q", err, tt.want)
			}
		})
	}
	// Exactly 256 + specials is fine: no merges.
	tok, err := Train(text, 257, []string{"<|endoftext|>"})
	if err != nil {
		t.Fatal(err)
	}
	if tok.VocabSize() != 257 || tok.NumMerges() != 0 {
		t.Errorf("VocabSize() = %d, NumMerges() = %d", tok.VocabSize(), tok.NumMerges())
	}
	if id, _ := tok.SpecialID("<|endoftext|>"); id != 256 {
		t.Errorf("special id %d, want 256", id)
	}
}

func TestTrainSkipsSpecials(t *testing.T) {
	doc := strings.Repeat("<|endoftext|>hello world ", 200)
	tok, err := Train([]string{doc}, 266, []string{"<|endoftext|>"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range tok.tokens[257:] {
		if strings.ContainsAny(tok, "<|>") {
			t.Errorf("learned token %q from a special token's text", tok)
		}
	}
	ids := tok.EncodeWithSpecials(doc)
	if got, err := tok.Decode(ids); err != nil || got != doc {
		t.Errorf("round trip failed: %v", err)
	}
}

// TestTrainNeverShadowsSpecial: a merge whose token would read like a
// special token ("Ġx", the vocabulary form of " x") is skipped, so that
// vocabulary files stay unambiguous.
func TestTrainNeverShadowsSpecial(t *testing.T) {
	tok, err := Train([]string{strings.Repeat(" x x x xy", 50)}, 259, []string{"Ġx"})
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := tok.TokenID("Ġx"); id != 256 {
		t.Errorf(`TokenID("Ġx") = %d, want the special's 256`, id)
	}
	if got := tok.Encode(" x"); !slices.Equal(got, []int{220, 87}) {
		t.Errorf(`Encode(" x") = %v, want [220 87]`, got)
	}
	dir := t.TempDir()
	if err := tok.Save(dir); err != nil {
		t.Fatal(err)
	}
	again, err := LoadHF(dir + "/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	sameTokenizer(t, tok, again)
	s := "Ġx x xy"
	if got, err := again.Decode(again.EncodeWithSpecials(s)); err != nil || got != s {
		t.Errorf("round trip %q: %q, %v", s, got, err)
	}
}

func TestAddReaderMatchesAdd(t *testing.T) {
	defer func(n int) { readChunk = n }(readChunk)
	readChunk = 1000
	specials := []string{"<|endoftext|>", "< sep >"}
	text := zipfText(5, 40_000)
	// Special tokens, some with spaces, runs of white space of every kind.
	text = strings.ReplaceAll(text, "\n\n", "\n\n<|endoftext|>")
	text = strings.ReplaceAll(text, "ka ", "ka < sep > \t \u00a0 \u3000  ")
	a := NewTrainer(specials...)
	a.Add(text)
	b := NewTrainer(specials...)
	if err := b.AddReader(strings.NewReader(text)); err != nil {
		t.Fatal(err)
	}
	for w, c := range a.counts {
		if b.counts[w] != c {
			t.Errorf("pre-token %q: AddReader counted %d, Add %d", w, b.counts[w], c)
		}
	}
	for w, c := range b.counts {
		if _, ok := a.counts[w]; !ok {
			t.Errorf("pre-token %q: AddReader counted %d, Add none", w, c)
		}
	}
}

func TestTrainDeterministic(t *testing.T) {
	text := zipfText(6, 30_000)
	var first []string
	for i := 0; i < 3; i++ {
		// Pieces in different orders count the same.
		parts := strings.SplitAfter(text, "\n\n")
		rng := rand.New(rand.NewPCG(uint64(i), 0))
		rng.Shuffle(len(parts), func(a, b int) { parts[a], parts[b] = parts[b], parts[a] })
		tok, err := Train(parts, 600, []string{"<|endoftext|>"})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = tok.tokens
			continue
		}
		if !slices.Equal(tok.tokens, first) {
			t.Fatalf("training run %d gave a different vocabulary", i)
		}
	}
}

var fuzzTokenizer = sync.OnceValues(func() (*Tokenizer, error) {
	return Train([]string{zipfText(8, 50_000)}, 800, []string{"<|endoftext|>", "<pad>"})
})

func FuzzRoundTrip(f *testing.F) {
	for _, s := range []string{"", "Hello world", "I'm  here\n\n\tnow", "a\xffb\xc3", "<|endoftext|>x<pad>",
		"你好 👋🌍", "   ", "'s'S'll", "\u00a0\u3000\r\n", strings.Repeat("ab", 300)} {
		f.Add(s)
	}
	trained, err := fuzzTokenizer()
	if err != nil {
		f.Fatal(err)
	}
	var gpt *Tokenizer
	if tok, err := gpt2Once(); err == nil {
		gpt = tok
	}
	f.Fuzz(func(t *testing.T, s string) {
		var pieces []string
		pretokens(s, func(w string) {
			if w == "" {
				t.Fatalf("empty pre-token in %q", s)
			}
			pieces = append(pieces, w)
		})
		if strings.Join(pieces, "") != s {
			t.Fatalf("pre-tokens %q do not make up %q", pieces, s)
		}
		for _, tok := range []*Tokenizer{trained, gpt} {
			if tok == nil {
				continue
			}
			for _, ids := range [][]int{tok.Encode(s), tok.EncodeWithSpecials(s)} {
				got, err := tok.Decode(ids)
				if err != nil || got != s {
					t.Fatalf("Decode(Encode(%q)) = %q, %v", s, got, err)
				}
			}
			for _, w := range pieces {
				if got, want := tok.bpe(w), referenceBPE(tok, w); !slices.Equal(got, want) {
					t.Fatalf("bpe(%q) = %v, GPT-2's loop gives %v", w, got, want)
				}
			}
		}
	})
}

func TestSpecialsOrder(t *testing.T) {
	tok, err := Train([]string{"abc"}, 259, []string{"<b>", "<a>", "<a><b>"})
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Specials(); !slices.Equal(got, []string{"<b>", "<a>", "<a><b>"}) {
		t.Errorf("Specials() = %q, want id order", got)
	}
	// The longest special wins where several start at one place.
	if got := tok.EncodeWithSpecials("<a><b><a>"); !slices.Equal(got, []int{258, 257}) {
		t.Errorf("EncodeWithSpecials = %v, want [258 257]", got)
	}
	s := sort.StringSlice(tok.specials)
	if !sort.SliceIsSorted(s, func(i, j int) bool { return len(s[i]) > len(s[j]) }) {
		t.Errorf("specials not longest first: %q", s)
	}
}

// TestEncodeWithSpecialsReference compares EncodeWithSpecials with a plain
// scan: at each place, the longest special token that starts there, else one
// more byte of ordinary text.
func TestEncodeWithSpecialsReference(t *testing.T) {
	specials := []string{"<a>", "<a><b>", "<b>", "b><"}
	tok, err := Train([]string{"abc <a> b> <"}, 264, specials)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(9, 9))
	pieces := []string{"<", ">", "a", "b", "<a>", "<b>", " ", "x"}
	for n := 0; n < 2000; n++ {
		var b strings.Builder
		for k := rng.IntN(16); k > 0; k-- {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		s := b.String()
		var want []int
		plain := 0
		for i := 0; i < len(s); {
			longest := ""
			for _, sp := range specials {
				if strings.HasPrefix(s[i:], sp) && len(sp) > len(longest) {
					longest = sp
				}
			}
			if longest == "" {
				i++
				continue
			}
			want = tok.AppendEncode(want, s[plain:i])
			id, _ := tok.SpecialID(longest)
			want = append(want, id)
			i += len(longest)
			plain = i
		}
		want = tok.AppendEncode(want, s[plain:])
		if got := tok.EncodeWithSpecials(s); !slices.Equal(got, want) {
			t.Fatalf("EncodeWithSpecials(%q) = %v, want %v", s, got, want)
		}
	}
}
