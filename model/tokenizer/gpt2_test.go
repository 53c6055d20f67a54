package tokenizer

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// gpt2Dir holds GPT-2's tokenizer files, in the shared/ folder beside the
// repository.
var gpt2Dir = filepath.Join("..", "..", "..", "shared", "data", "gpt2-tokenizer")

var gpt2Once = sync.OnceValues(func() (*Tokenizer, error) {
	return LoadGPT2(filepath.Join(gpt2Dir, "encoder.json"), filepath.Join(gpt2Dir, "vocab.bpe"))
})

// gpt2 returns GPT-2's tokenizer. Without the files the test is skipped,
// except under CI, which always has them.
func gpt2(t testing.TB) *Tokenizer {
	t.Helper()
	if _, err := os.Stat(gpt2Dir); err != nil && os.Getenv("CI") == "" {
		t.Skipf("no GPT-2 tokenizer files at %s", gpt2Dir)
	}
	tok, err := gpt2Once()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestGPT2Known(t *testing.T) {
	tok := gpt2(t)
	tests := []struct {
		name string
		text string
		want []int
	}{
		{"hello world", "Hello world", []int{15496, 995}},
		{"space prefix", " Hello", []int{18435}},
		{"empty", "", nil},
		{"contraction", "I'm", []int{40, 1101}},
		{"contraction t", "don't", []int{9099, 470}},
		{"contractions are lower case only", "I'M", []int{40, 6, 44}},
		{"contraction starts a word", "'tis", []int{470, 271}},
		{"digits", "12345", []int{10163, 2231}},
		{"number with space", " 2024", []int{48609}},
		{"decimal", "3.14159", []int{18, 13, 1415, 19707}},
		{"two newlines", "\n\n", []int{628}},
		{"newlines between words", "a\n\nb", []int{64, 198, 198, 65}},
		{"three spaces", "a   b", []int{64, 220, 220, 275}},
		{"trailing spaces", "trailing  ", []int{9535, 4386, 220, 220}},
		{"tabs", "\t\tx", []int{197, 197, 87}},
		{"crlf", "line1\r\nline2", []int{1370, 16, 201, 198, 1370, 17}},
		{"no-break space", "a\u00a0b", []int{64, 1849, 65}},
		{"accents", "naïve café", []int{2616, 38776, 40304}},
		{"cjk", "你好世界", []int{19526, 254, 25001, 121, 10310, 244, 45911, 234}},
		{"emoji", "👋🌍", []int{41840, 233, 8582, 234, 235}},
		{"special as text", "<|endoftext|>", []int{27, 91, 437, 1659, 5239, 91, 29}},
		{"control bytes", "\x7f\x01\x00", []int{221, 189, 188}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tok.Encode(tt.text); !slices.Equal(got, tt.want) {
				t.Errorf("Encode(%q) = %v, want %v", tt.text, got, tt.want)
			}
			if got, err := tok.Decode(tt.want); err != nil || got != tt.text {
				t.Errorf("Decode(%v) = %q, %v; want %q", tt.want, got, err, tt.text)
			}
		})
	}
}

type goldenCase struct {
	Text string `json:"text"`
	IDs  []int  `json:"ids"`
}

func readGolden(t testing.TB) []goldenCase {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "gpt2-golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []goldenCase
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	return cases
}

func TestGPT2Golden(t *testing.T) {
	tok := gpt2(t)
	cases := readGolden(t)
	if len(cases) < 300 {
		t.Fatalf("only %d golden cases", len(cases))
	}
	for i, c := range cases {
		got := tok.Encode(c.Text)
		if !slices.Equal(got, c.IDs) {
			t.Errorf("case %d: Encode(%.60q) = %v, want %v", i, c.Text, clipIDs(got), clipIDs(c.IDs))
		}
		if back, err := tok.Decode(got); err != nil || back != c.Text {
			t.Errorf("case %d: Decode(Encode(%.60q)) = %.60q, %v", i, c.Text, back, err)
		}
	}
}

func clipIDs(ids []int) []int {
	if len(ids) > 20 {
		return ids[:20]
	}
	return ids
}

func TestGPT2Vocabulary(t *testing.T) {
	tok := gpt2(t)
	if got := tok.VocabSize(); got != 50257 {
		t.Errorf("VocabSize() = %d, want 50257", got)
	}
	if got := tok.NumMerges(); got != 50000 {
		t.Errorf("NumMerges() = %d, want 50000", got)
	}
	if got := tok.Specials(); !slices.Equal(got, []string{"<|endoftext|>"}) {
		t.Errorf("Specials() = %q, want [<|endoftext|>]", got)
	}
	if id, ok := tok.TokenID("Ġworld"); !ok || id != 995 {
		t.Errorf(`TokenID("Ġworld") = %d, %v; want 995`, id, ok)
	}
	if _, ok := tok.TokenID(" world"); ok {
		t.Error(`TokenID(" world") found a token; tokens are in vocabulary form`)
	}
	if got := tok.Token(995); got != "Ġworld" {
		t.Errorf("Token(995) = %q", got)
	}
	if got, ok := tok.TokenBytes(995); !ok || got != " world" {
		t.Errorf("TokenBytes(995) = %q, %v", got, ok)
	}
	for _, id := range []int{-1, 50257} {
		if got := tok.Token(id); got != "" {
			t.Errorf("Token(%d) = %q, want \"\"", id, got)
		}
	}
	if got := tok.Token(0); got != "!" {
		t.Errorf("Token(0) = %q, want \"!\"", got)
	}
}

func TestGPT2Specials(t *testing.T) {
	tok := gpt2(t)
	tests := []struct {
		text string
		want []int
	}{
		{"<|endoftext|>", []int{50256}},
		{"Hello<|endoftext|> world", []int{15496, 50256, 995}},
		{"<|endoftext|><|endoftext|>", []int{50256, 50256}},
		{"<|endoftext|", []int{27, 91, 437, 1659, 5239, 91}},
		{"", nil},
	}
	for _, tt := range tests {
		if got := tok.EncodeWithSpecials(tt.text); !slices.Equal(got, tt.want) {
			t.Errorf("EncodeWithSpecials(%q) = %v, want %v", tt.text, got, tt.want)
		}
		if got, err := tok.Decode(tt.want); err != nil || got != tt.text {
			t.Errorf("Decode(%v) = %q, %v; want %q", tt.want, got, err, tt.text)
		}
	}
	if id, ok := tok.SpecialID("<|endoftext|>"); !ok || id != 50256 {
		t.Errorf("SpecialID = %d, %v", id, ok)
	}
}

func TestDecodeUnknownID(t *testing.T) {
	tok := gpt2(t)
	for _, ids := range [][]int{{-1}, {50257}, {15496, 1 << 30}} {
		if s, err := tok.Decode(ids); err == nil {
			t.Errorf("Decode(%v) = %q, want an error", ids, s)
		} else if !strings.Contains(err.Error(), "not a token id") {
			t.Errorf("Decode(%v): error %q does not say why", ids, err)
		}
	}
}

// randomText returns text mixing words, white space, punctuation, non-ASCII
// letters and, when raw, bytes that are not valid UTF-8.
func randomText(rng *rand.Rand, n int, raw bool) string {
	pieces := []string{"the", " cat", "'s", "'ll", " ", "  ", "\n", "\n\n", "\t", "\r\n", "!", "?!", "42", " 7",
		"é", "ß", "中文", "٣", "\u00a0", "\u2003", "😀", "e\u0301", "Ġ", "<|endoftext|>", "'", "—", "A", "z"}
	var b strings.Builder
	for b.Len() < n {
		if raw && rng.IntN(6) == 0 {
			b.WriteByte(byte(rng.IntN(256)))
			continue
		}
		b.WriteString(pieces[rng.IntN(len(pieces))])
	}
	return b.String()
}

func TestRoundTripArbitraryBytes(t *testing.T) {
	tok := gpt2(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 300; i++ {
		s := randomText(rng, rng.IntN(200), true)
		if i%3 == 0 { // fully random bytes
			b := make([]byte, rng.IntN(64))
			for j := range b {
				b[j] = byte(rng.IntN(256))
			}
			s = string(b)
		}
		for _, ids := range [][]int{tok.Encode(s), tok.EncodeWithSpecials(s)} {
			got, err := tok.Decode(ids)
			if err != nil || got != s {
				t.Fatalf("Decode(Encode(%q)) = %q, %v", s, got, err)
			}
		}
	}
}

// referenceBPE is GPT-2's merge loop, literally: find the adjacent pair of
// lowest rank, merge its occurrences left to right, repeat.
func referenceBPE(tok *Tokenizer, w string) []int32 {
	word := make([]int32, len(w))
	for i := 0; i < len(w); i++ {
		word[i] = tok.byteIDs[w[i]]
	}
	for len(word) > 1 {
		best, found := merge{}, false
		var a, b int32
		for i := 0; i+1 < len(word); i++ {
			m, ok := tok.merges[pairKey(word[i], word[i+1])]
			if ok && (!found || m.rank < best.rank) {
				best, found, a, b = m, true, word[i], word[i+1]
			}
		}
		if !found {
			break
		}
		var next []int32
		for i := 0; i < len(word); i++ {
			if i+1 < len(word) && word[i] == a && word[i+1] == b {
				next = append(next, best.id)
				i++
			} else {
				next = append(next, word[i])
			}
		}
		word = next
	}
	return word
}

func TestBPEMatchesReference(t *testing.T) {
	tok := gpt2(t)
	rng := rand.New(rand.NewPCG(3, 4))
	words := []string{"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", strings.Repeat(" ", 300), strings.Repeat("ab", 500),
		strings.Repeat("=", 1000), strings.Repeat("\n", 64), "antidisestablishmentarianism", "Supercalifragilisticexpialidocious"}
	for i := 0; i < 500; i++ {
		alphabet := "abcdeeeeinnorsstt"
		if i%2 == 0 {
			alphabet = "-=*#._ \n"
		}
		b := make([]byte, 2+rng.IntN(120))
		for j := range b {
			b[j] = alphabet[rng.IntN(len(alphabet))]
		}
		words = append(words, string(b))
	}
	for _, w := range words {
		if got, want := tok.bpe(w), referenceBPE(tok, w); !slices.Equal(got, want) {
			t.Errorf("bpe(%.40q) = %v, want %v", w, got, want)
		}
	}
}

func TestLongInput(t *testing.T) {
	tok := gpt2(t)
	// One pre-token of 200 kB: the merge loop must not be quadratic.
	s := strings.Repeat("=", 200_000)
	ids := tok.Encode(s)
	if got, err := tok.Decode(ids); err != nil || got != s {
		t.Fatalf("round trip of a long run failed: %v", err)
	}
	s = strings.Repeat("ab", 100_000)
	if got, err := tok.Decode(tok.Encode(s)); err != nil || got != s {
		t.Fatalf("round trip of a long word failed: %v", err)
	}
}

func TestConcurrentEncode(t *testing.T) {
	tok := gpt2(t)
	cases := readGolden(t)
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range cases {
				c := cases[(i+g*37)%len(cases)]
				if got := tok.Encode(c.Text); !slices.Equal(got, c.IDs) {
					errs <- c.Text
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for s := range errs {
		t.Errorf("concurrent Encode(%.40q) gave wrong ids", s)
	}
}

func TestSaveGPT2(t *testing.T) {
	tok := gpt2(t)
	dir := t.TempDir()
	if err := tok.Save(dir); err != nil {
		t.Fatal(err)
	}
	merges, err := os.ReadFile(filepath.Join(dir, "merges.txt"))
	if err != nil {
		t.Fatal(err)
	}
	orig, err := os.ReadFile(filepath.Join(gpt2Dir, "vocab.bpe"))
	if err != nil {
		t.Fatal(err)
	}
	if string(merges) != string(orig) {
		t.Error("merges.txt written for GPT-2 differs from GPT-2's vocab.bpe")
	}
	fromHF, err := LoadHF(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	fromGPT2, err := LoadGPT2(filepath.Join(dir, "vocab.json"), filepath.Join(dir, "merges.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, again := range []*Tokenizer{fromHF, fromGPT2} {
		sameTokenizer(t, tok, again)
	}
	for _, c := range readGolden(t)[:80] {
		if got := fromHF.EncodeWithSpecials(c.Text); !slices.Equal(got, tok.EncodeWithSpecials(c.Text)) {
			t.Errorf("reloaded tokenizer.json encodes %q as %v", c.Text, got)
		}
	}
}

// sameTokenizer checks that two tokenizers have the same tokens, merges and
// special tokens.
func sameTokenizer(t *testing.T, a, b *Tokenizer) {
	t.Helper()
	if !slices.Equal(a.tokens, b.tokens) {
		t.Errorf("tokens differ (%d and %d)", len(a.tokens), len(b.tokens))
	}
	if !slices.Equal(a.ranked, b.ranked) {
		t.Errorf("merges differ (%d and %d)", len(a.ranked), len(b.ranked))
	}
	if !slices.Equal(a.Specials(), b.Specials()) {
		t.Errorf("specials differ: %q and %q", a.Specials(), b.Specials())
	}
}

func TestPretokens(t *testing.T) {
	tests := []struct {
		text string
		want []string
	}{
		{"Hello world", []string{"Hello", " world"}},
		{"I'm here", []string{"I", "'m", " here"}},
		{"we'll've'd", []string{"we", "'ll", "'ve", "'d"}},
		{"'sup", []string{"'s", "up"}},
		{"I'M", []string{"I", "'", "M"}},
		{"' s", []string{"'", " s"}},
		{"''s", []string{"''", "s"}},
		{"!'s", []string{"!'", "s"}},
		{"it's", []string{"it", "'s"}},
		{"'r'e're", []string{"'", "r", "'", "e", "'re"}},
		{"abc123def", []string{"abc", "123", "def"}},
		{" 123 abc !!", []string{" 123", " abc", " !!"}},
		{"a  b", []string{"a", " ", " b"}},
		{"a   b", []string{"a", "  ", " b"}},
		{"a \n b", []string{"a", " \n", " b"}},
		{"a\n\nb", []string{"a", "\n", "\n", "b"}},
		{"a\n\n\nb", []string{"a", "\n\n", "\n", "b"}},
		{"a\tb", []string{"a", "\t", "b"}},
		{"end  ", []string{"end", "  "}},
		{"   ", []string{"   "}},
		{" ", []string{" "}},
		{"\u00a0x", []string{"\u00a0", "x"}}, // no-break space is white space, but not the optional ' '
		{"a\u00a0\u00a0b", []string{"a", "\u00a0", "\u00a0", "b"}},
		{"x\u3000\u3000", []string{"x", "\u3000\u3000"}},
		{"e\u0301t\u00e9", []string{"e", "\u0301", "t\u00e9"}}, // a combining mark is not a letter
		{"½Ⅻ٣", []string{"½Ⅻ٣"}},                               // \p{N} includes No, Nl, Nd
		{"😀😀 😀", []string{"😀😀", " 😀"}},
		{"a\xffb", []string{"a", "\xff", "b"}}, // invalid UTF-8 counts as punctuation
		{" \xff\xfe!", []string{" \xff\xfe!"}},
		{"\xe4\xb8", []string{"\xe4\xb8"}},
		{"", nil},
	}
	for _, tt := range tests {
		var got []string
		pretokens(tt.text, func(w string) { got = append(got, w) })
		if !slices.Equal(got, tt.want) {
			t.Errorf("pretokens(%q) = %q, want %q", tt.text, got, tt.want)
		}
	}
}

func TestByteMapping(t *testing.T) {
	seen := make(map[rune]bool)
	for b := 0; b < 256; b++ {
		r := byteRune[b]
		if seen[r] {
			t.Fatalf("byte %d maps to %q twice", b, r)
		}
		seen[r] = true
		if printableByte(b) != (r == rune(b)) {
			t.Errorf("byte %d maps to U+%04X", b, r)
		}
	}
	for b, want := range map[byte]rune{' ': 'Ġ', '\n': 'Ċ', 0: 'Ā', 127: 'ġ', 173: 'Ń', 'a': 'a', 0xff: 'ÿ'} {
		if byteRune[b] != want {
			t.Errorf("byte %d maps to %q, want %q", b, byteRune[b], want)
		}
	}
	for i := 1; i < 256; i++ {
		if byteRune[byteOrder[i-1]] >= byteRune[byteOrder[i]] {
			t.Fatal("byteOrder is not in character order")
		}
	}
	raw := make([]byte, 256)
	for i := range raw {
		raw[i] = byte(i)
	}
	back, ok := unbyteString(byteString(raw))
	if !ok || string(back) != string(raw) || !utf8.ValidString(byteString(raw)) {
		t.Error("byteString does not round-trip")
	}
}
