package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// regexAlphabet is what random texts are made of: every class the patterns
// tell apart, contractions in both cases and line breaks.
var regexAlphabet = []string{
	"a", "Z", "é", "ß", "你", "ж", "1", "9", "٣", "½", " ", " ", "  ", "\t", "\n", "\r\n", "\r",
	"\u00a0", "\u3000", "'", "'s", "'S", "'re", "'RE", "'Ll", "'ve", "'d", "'M", "'t", "!", "..", "-", "😀",
	"\u0301", "\u200d", "$", "\xff", "\xe4\xbd",
}

func randomPatternText(rng *rand.Rand) string {
	var b strings.Builder
	for range rng.IntN(24) {
		b.WriteString(regexAlphabet[rng.IntN(len(regexAlphabet))])
	}
	return b.String()
}

func allMatches(m matcher, s string) [][2]int {
	var out [][2]int
	m.find(s, func(start, end int) { out = append(out, [2]int{start, end}) })
	return out
}

// TestScannersMatchRegex checks the hand-written scanners against the
// backtracking engine running the patterns they stand for.
func TestScannersMatchRegex(t *testing.T) {
	tests := []struct {
		name    string
		pattern string
	}{
		{"gpt2", gpt2Pattern},
		{"llama3", llama3Pattern},
		{"qwen2", qwen2Pattern},
	}
	fixed := []string{"", "Hello world", "I'M HERE'S", "a  b", "x \n\n y", "12345 678", " \t!?\r\n\r\nfoo", "end   ", "你好，世界", "'ll'LL", "a\u00a0\u00a0b"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			scan, err := compileRegex(tt.pattern)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := scan.(scanMatcher); !ok {
				t.Fatalf("pattern %q is not matched by a scanner", tt.pattern)
			}
			re, err := compileBacktracking(tt.pattern)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(7, 11))
			texts := slices.Clone(fixed)
			for range 3000 {
				texts = append(texts, randomPatternText(rng))
			}
			for _, s := range texts {
				got, want := allMatches(scan, s), allMatches(re, s)
				if !slices.Equal(got, want) {
					t.Fatalf("text %q:\nscanner %v\nregex   %v", s, got, want)
				}
			}
		})
	}
}

func TestSplitBehaviors(t *testing.T) {
	tests := []struct {
		behavior int
		invert   bool
		want     []string
	}{
		{splitRemoved, false, []string{"the", "final", "countdown"}},
		{splitIsolated, false, []string{"the", "-", "final", "-", "-", "countdown"}},
		{splitMergedWithPrevious, false, []string{"the-", "final-", "-", "countdown"}},
		{splitMergedWithNext, false, []string{"the", "-final", "-", "-countdown"}},
		{splitContiguous, false, []string{"the", "-", "final", "--", "countdown"}},
		{splitRemoved, true, []string{"-", "-", "-"}},
	}
	for _, tt := range tests {
		sp := &splitter{m: literalMatcher("-"), behavior: tt.behavior, invert: tt.invert}
		var got []string
		sp.split(piece{s: "the-final--countdown"}, func(p piece) { got = append(got, p.s) })
		if !slices.Equal(got, tt.want) {
			t.Errorf("behavior %d invert %v: %q, want %q", tt.behavior, tt.invert, got, tt.want)
		}
	}
}

func TestPreTokenizers(t *testing.T) {
	tests := []struct {
		name string
		json string
		text string
		want []string
	}{
		{"metaspace always", `{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true}`, "Hey  friend!", []string{"▁Hey", "▁", "▁friend!"}},
		{"metaspace no split", `{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false}`, "Hey friend", []string{"▁Hey▁friend"}},
		{"metaspace legacy", `{"type": "Metaspace", "replacement": "▁", "add_prefix_space": false}`, "a b", []string{"a", "▁b"}},
		{"digits", `{"type": "Digits", "individual_digits": true}`, "a123b", []string{"a", "1", "2", "3", "b"}},
		{"digits contiguous", `{"type": "Digits", "individual_digits": false}`, "a123b45", []string{"a", "123", "b", "45"}},
		{"whitespace", `{"type": "Whitespace"}`, "Hey, friend!  ok", []string{"Hey", ",", "friend", "!", "ok"}},
		{"whitespace split", `{"type": "WhitespaceSplit"}`, "Hey, friend!  ok", []string{"Hey,", "friend!", "ok"}},
		{"punctuation", `{"type": "Punctuation", "behavior": "Isolated"}`, "Hey, you!?", []string{"Hey", ",", " you", "!", "?"}},
		{"split llama3", `{"type": "Split", "pattern": {"Regex": "` + strings.ReplaceAll(llama3Pattern, `\`, `\\`) + `"}, "behavior": "Isolated", "invert": false}`, "I'M 12345 ok\n\n  x", []string{"I", "'M", " ", "123", "45", " ok", "\n\n", " ", " x"}},
		{"bytelevel prefix", `{"type": "ByteLevel", "add_prefix_space": true, "use_regex": true}`, "Hi you", []string{"ĠHi", "Ġyou"}},
		{"bytelevel no regex", `{"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}`, "Hi you", []string{"HiĠyou"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pt, err := parsePreTokenizer([]byte(tt.json), "pre_tokenizer", false)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			pt.split(piece{s: tt.text, first: true}, func(p piece) { got = append(got, p.text()) })
			if !slices.Equal(got, tt.want) {
				t.Errorf("%q: %q, want %q", tt.text, got, tt.want)
			}
		})
	}
}

func TestNormalizers(t *testing.T) {
	tests := []struct {
		name, json, text, want string
	}{
		{"nfc", `{"type": "NFC"}`, "e\u0301", "é"},
		{"nfd", `{"type": "NFD"}`, "é", "e\u0301"},
		{"nfkc", `{"type": "NFKC"}`, "ﬁ①", "fi1"},
		{"nfkd", `{"type": "NFKD"}`, "ﬁé", "fie\u0301"},
		{"lowercase", `{"type": "Lowercase"}`, "HÉLLO İ", "héllo i\u0307"},
		{"strip", `{"type": "Strip", "strip_left": true, "strip_right": false}`, "  a  ", "a  "},
		{"strip accents", `{"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "StripAccents"}]}`, "café", "cafe"},
		{"replace", `{"type": "Replace", "pattern": {"String": " "}, "content": "▁"}`, "a b  c", "a▁b▁▁c"},
		{"replace regex", `{"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "}`, "a \t\nb", "a b"},
		{"prepend", `{"type": "Prepend", "prepend": "▁"}`, "hi", "▁hi"},
		{"prepend empty", `{"type": "Prepend", "prepend": "▁"}`, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := parseNormalizer([]byte(tt.json), "normalizer")
			if err != nil {
				t.Fatal(err)
			}
			if got := n.normalize(tt.text); got != tt.want {
				t.Errorf("%q: %q, want %q", tt.text, got, tt.want)
			}
		})
	}
}

func TestDecoders(t *testing.T) {
	tests := []struct {
		name   string
		json   string
		tokens []string
		want   string
	}{
		{"bytelevel", `{"type": "ByteLevel"}`, []string{"Hello", "Ġworld", "<|end|>"}, "Hello world<|end|>"},
		{"bytelevel lossy", `{"type": "ByteLevel"}`, []string{"a", "ä", "½"}, "a\uFFFD"}, // bytes e4 bd: one incomplete sequence
		{"metaspace", `{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"}`, []string{"▁Hey", "▁friend", "!"}, "Hey friend!"},
		{"metaspace never", `{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never"}`, []string{"▁Hey"}, " Hey"},
		{"llama2", `{"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}`,
			[]string{"▁Hi", "<0xE4>", "<0xBD>", "<0xA0>", "▁", "<0xFF>"}, "Hi你 \uFFFD"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := parseDecoder([]byte(tt.json), "decoder")
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(d.decode(tt.tokens, true, 0), ""); got != tt.want {
				t.Errorf("%q: %q, want %q", tt.tokens, got, tt.want)
			}
		})
	}
}

func TestLossyUTF8(t *testing.T) {
	tests := []struct{ in, want string }{
		{"abc", "abc"},
		{"a\xffb", "a\uFFFDb"},
		{"\xe4\xbd", "\uFFFD"},
		{"\xe4\xbdx", "\uFFFDx"},
		{"\xf0\x9f\x98", "\uFFFD"},
		{"\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD"}, // a surrogate: E0..9F only after ED
		{"\xc0\xaf", "\uFFFD\uFFFD"},
	}
	for _, tt := range tests {
		if got := lossyUTF8([]byte(tt.in)); got != tt.want {
			t.Errorf("lossyUTF8(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
