package tokenizer

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The fixtures' merges: Ġ t, h e, Ġt he, i n, Ġ a, n d, Ġa nd, giving ids
// 256..262 after the 256 byte tokens; <|endoftext|> is 263.
func TestLoadHFFixtures(t *testing.T) {
	tests := []struct {
		file     string
		specials []string
		size     int
	}{
		{"hf-merges-strings.json", []string{"<|endoftext|>"}, 264},
		{"hf-merges-pairs.json", []string{"<|endoftext|>", "<pad>"}, 265},
	}
	encodings := []struct {
		text string
		want []int
	}{
		{" the and in", []int{258, 262, 220, 259}},
		{"the", []int{83, 257}},
		{" then", []int{258, 77}},
		{"hand", []int{71, 64, 261}},
		{" a", []int{260}},
		{"ünd", []int{127, 120, 261}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			tok, err := LoadHF(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			if got := tok.VocabSize(); got != tt.size {
				t.Errorf("VocabSize() = %d, want %d", got, tt.size)
			}
			if got := tok.NumMerges(); got != 7 {
				t.Errorf("NumMerges() = %d, want 7", got)
			}
			if got := tok.Specials(); !slices.Equal(got, tt.specials) {
				t.Errorf("Specials() = %q, want %q", got, tt.specials)
			}
			for _, e := range encodings {
				if got := tok.Encode(e.text); !slices.Equal(got, e.want) {
					t.Errorf("Encode(%q) = %v, want %v", e.text, got, e.want)
				}
			}
			text := " the<|endoftext|>and"
			want := []int{258, 263, 64, 261}
			if got := tok.EncodeWithSpecials(text); !slices.Equal(got, want) {
				t.Errorf("EncodeWithSpecials(%q) = %v, want %v", text, got, want)
			}
			if got, err := tok.Decode(want); err != nil || got != text {
				t.Errorf("Decode(%v) = %q, %v", want, got, err)
			}
			if len(tt.specials) > 1 {
				if got := tok.EncodeWithSpecials("<pad><pad>x"); !slices.Equal(got, []int{264, 264, 87}) {
					t.Errorf("EncodeWithSpecials(<pad><pad>x) = %v", got)
				}
			}
		})
	}
}

func TestHFSaveLoad(t *testing.T) {
	for _, file := range []string{"hf-merges-strings.json", "hf-merges-pairs.json"} {
		tok, err := LoadHF(filepath.Join("testdata", file))
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if err := tok.Save(dir); err != nil {
			t.Fatal(err)
		}
		again, err := LoadHF(filepath.Join(dir, "tokenizer.json"))
		if err != nil {
			t.Fatal(err)
		}
		sameTokenizer(t, tok, again)
		gpt, err := LoadGPT2(filepath.Join(dir, "vocab.json"), filepath.Join(dir, "merges.txt"))
		if err != nil {
			t.Fatal(err)
		}
		sameTokenizer(t, tok, gpt)
	}
}

// TestHFMergesWithSpaces: a pair may hold a token with a space, which only
// the pair encoding can say; SaveHF then writes pairs.
func TestHFMergesWithSpaces(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "hf-merges-pairs.json"))
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(data), `"<|endoftext|>": 263`, `"<|endoftext|>": 263, "a b": 265, "a bc": 266`, 1)
	s = strings.Replace(s, `"Ġa",`+"\n    \"nd\"\n   ]", `"Ġa",`+"\n    \"nd\"\n   ], [\"a b\", \"c\"]", 1)
	if !strings.Contains(s, `"a b", "c"`) {
		t.Fatal("fixture edit failed")
	}
	path := filepath.Join(t.TempDir(), "tokenizer.json")
	os.WriteFile(path, []byte(s), 0o644)
	tok, err := LoadHF(path)
	if err != nil {
		t.Fatal(err)
	}
	if tok.NumMerges() != 8 {
		t.Fatalf("NumMerges() = %d, want 8", tok.NumMerges())
	}
	out := filepath.Join(t.TempDir(), "out.json")
	if err := tok.SaveHF(out); err != nil {
		t.Fatal(err)
	}
	saved, _ := os.ReadFile(out)
	if !strings.Contains(string(saved), `["a b", "c"]`) {
		t.Error("SaveHF did not write merges as pairs")
	}
	again, err := LoadHF(out)
	if err != nil {
		t.Fatal(err)
	}
	sameTokenizer(t, tok, again)
	if err := tok.Save(t.TempDir()); err == nil || !strings.Contains(err.Error(), "merges.txt cannot hold it") {
		t.Errorf("Save with a space in a merge: err = %v, want a merges.txt error", err)
	}
}

func TestHFErrors(t *testing.T) {
	base, err := os.ReadFile(filepath.Join("testdata", "hf-merges-strings.json"))
	if err != nil {
		t.Fatal(err)
	}
	edit := func(old, new string) string {
		if !strings.Contains(string(base), old) {
			t.Fatalf("fixture has no %q", old)
		}
		return strings.Replace(string(base), old, new, 1)
	}
	tests := []struct {
		name string
		file string
		want string
	}{
		{"syntax", edit(`"version": "1.0",`, `"version": "1.0",,`), "tokenizer.json:2:19: invalid character ','"},
		{"truncated", string(base[:len(base)/2]), "unexpected end of JSON input"},
		{"not BPE", edit(`"type": "BPE"`, `"type": "WordPiece"`), `model.type is "WordPiece"`},
		{"no model", `{"added_tokens": []}`, `no "model"`},
		{"dropout", edit(`"dropout": null`, `"dropout": 0.1`), "model.dropout 0.1 is not supported"},
		{"unknown normalizer", edit(`"normalizer": null`, `"normalizer": {"type": "BertNormalizer"}`), `normalizer: type "BertNormalizer" is not supported`},
		{"unknown nested normalizer", edit(`"normalizer": null`, `"normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Precompiled"}]}`), `normalizer.normalizers[1]: type "Precompiled" is not supported`},
		{"unknown pre-tokenizer", edit(`"pre_tokenizer": {`, `"pre_tokenizer": {"type": "UnicodeScripts"}, "x": {`), `pre_tokenizer: type "UnicodeScripts" is not supported`},
		{"bad regex", edit(`"pre_tokenizer": {`, `"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(a"}, "behavior": "Isolated"}, "x": {`), `pre_tokenizer: regular expression "(a"`},
		{"bad behavior", edit(`"pre_tokenizer": {`, `"pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "Sideways"}, "x": {`), `behavior "Sideways" is not one of`},
		{"unknown decoder", edit(`"decoder": {`, `"decoder": {"type": "WordPiece"}, "x": {`), `decoder: type "WordPiece" is not supported`},
		{"unknown post-processor", edit(`"post_processor": {`, `"post_processor": {"type": "Whatever"}, "y": {`), `post_processor: type "Whatever" is not supported`},
		{"post-processor id", edit(`"post_processor": {`, `"post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}], "special_tokens": {"<s>": {"id": "<s>", "ids": [99999], "tokens": ["<s>"]}}}, "y": {`), `post_processor: token id 99999 is outside the vocabulary`},
		{"unk not in vocab", edit(`"unk_token": null`, `"unk_token": "<unk>"`), `model.unk_token "<unk>" is not in model.vocab`},
		{"unigram", edit(`"type": "BPE"`, `"type": "Unigram"`), `model.type is "Unigram"; only "BPE" is supported`},
		{"truncation", edit(`"truncation": null`, `"truncation": {"max_length": 8}`), `truncation {"max_length": 8} is not supported`},
		{"merge unknown token", edit(`"i n"`, `"i q9"`), `model.merges[3]: merge "i" "q9": "q9" is not in the vocabulary`},
		{"merge result unknown", edit(`"i n"`, `"n i"`), `model.merges[3]: merge "n" "i": the result "ni" is not in the vocabulary`},
		{"merge without space", edit(`"i n"`, `"in"`), `model.merges[3]: want "a b"`},
		{"merge three parts", edit(`"i n"`, `"i n x"`), `model.merges[3]: want "a b"`},
		{"merge bad pair", edit(`"i n"`, `["i", "n", "x"]`), `model.merges[3]: want a pair`},
		{"merge number", edit(`"i n"`, `7`), `model.merges[3]: want "a b" or ["a", "b"], have 7`},
		{"id not integer", edit(`"Ġthe": 258`, `"Ġthe": 2.5`), `model.vocab["Ġthe"]: id 2.5 is not an integer`},
		{"id negative", edit(`"Ġthe": 258`, `"Ġthe": -1`), `id -1 is not an integer`},
		{"id string", edit(`"Ġthe": 258`, `"Ġthe": "258"`), `id is a string`},
		{"duplicate id", edit(`"Ġthe": 258`, `"Ġthe": 257`), `id 257 is given to both`},
		{"duplicate token", edit(`"Ġthe": 258`, `"Ġthe": 258, "Ġthe": 258`), `token "Ġthe" appears twice`},
		{"missing byte", edit(`"Ġ": 220,`, ``), `no token "Ġ" for byte 0x20`},
		{"added id clash", edit(`"id": 263`, `"id": 258`), `added_tokens[0]: token "<|endoftext|>" has id 258 and also id 263`},
		{"added without id", edit(`"id": 263,`, ``), `added_tokens[0]: want both "id" and "content"`},
		{"vocab not object", edit(`"vocab": {`, `"vocab": [], "x": {`), "want a JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "tokenizer.json")
			if err := os.WriteFile(path, []byte(tt.file), 0o644); err != nil {
				t.Fatal(err)
			}
			tok, err := LoadHF(path)
			if err == nil {
				t.Fatalf("LoadHF succeeded (vocabulary of %d), want an error with %q", tok.VocabSize(), tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("error %q\nwant the path and %q", err, tt.want)
			}
		})
	}
	if _, err := LoadHF(filepath.Join(t.TempDir(), "missing.json")); err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Errorf("missing file: err = %v", err)
	}
}

func TestGPT2FileErrors(t *testing.T) {
	vocab := `{"a": 0}`
	var b strings.Builder
	b.WriteString("{")
	for i := 0; i < 256; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		if i%16 == 0 {
			b.WriteString("\n")
		}
		b.WriteString(jsonString(string(byteRune[byteOrder[i]])) + ": " + strconv.Itoa(i))
	}
	full := b.String() + `, "ab": 256, "abc": 257}`
	tests := []struct {
		name, vocab, merges, want string
	}{
		{"ok", full, "#version: 0.2\na b\nab c\n", ""},
		{"ok without version line", full, "a b\r\nab c\r\n", ""},
		{"missing bytes", vocab, "#version: 0.2\n", `no token "Ā" for byte 0x00`},
		{"bad merge line", full, "#version: 0.2\na b\nabc\n", `merges.txt:3: want a merge "a b"`},
		{"merge not in vocab", full, "#version: 0.2\na b\nab d\nx y\n", `merges.txt:3: merge "ab" "d": the result "abd" is not in the vocabulary`},
		{"vocab syntax", full[:len(full)-1] + ",}", "", "vocab.json:17:"},
		{"vocab truncated", full[:100], "", "vocab.json: unexpected end of file"},
		{"vocab duplicate", full[:len(full)-1] + `, "ab": 256}`, "", `vocab.json:17:200: token "ab" appears twice`},
		{"vocab not object", `[1, 2]`, "", "vocab.json:1:1: want a JSON object"},
		{"vocab trailing data", full + "{}", "", "data after the JSON object"},
		{"id too large", `{"a": 99999999999}`, "", `token "a": id 99999999999 is not an integer in [0,`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			vp, mp := filepath.Join(dir, "vocab.json"), filepath.Join(dir, "merges.txt")
			os.WriteFile(vp, []byte(tt.vocab), 0o644)
			os.WriteFile(mp, []byte(tt.merges), 0o644)
			tok, err := LoadGPT2(vp, mp)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got := tok.Encode("abc abc"); !slices.Equal(got, []int{257, 220, 257}) {
					t.Errorf("Encode = %v", got)
				}
				return
			}
			if err == nil {
				t.Fatalf("LoadGPT2 succeeded, want an error with %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q\nwant %q", err, tt.want)
			}
		})
	}
}
