package tokenizer

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fuzzMaxInput bounds the fuzzers' inputs: larger files say nothing new
// about the parsers and only slow the fuzzer down.
const fuzzMaxInput = 1 << 20

// fuzzTexts are the short strings a loaded tokenizer must encode and decode.
var fuzzTexts = []string{"", "Hello world", " I'm  here\n\tnow!", "a\xffb\xc3", "你好 👋", "tttt ttt tt"}

// fuzzHFSeeds returns the tokenizer.json files of testdata.
func fuzzHFSeeds(tb testing.TB) [][]byte {
	tb.Helper()
	var out [][]byte
	for _, name := range []string{"hf-merges-strings.json", "hf-merges-pairs.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, b)
	}
	// The small file in the other layouts (the fixtures of testdata/hf
	// are too large to fuzz quickly).
	for _, layout := range []struct{ normalizer, pre, post, decoder string }{
		{`{"type": "NFC"}`, `{"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "` + jsonEscape(qwen2Pattern) + `"}, "behavior": "Isolated", "invert": false}, {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]}`, `{"type": "ByteLevel"}`, `{"type": "ByteLevel"}`},
		{`null`, `{"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "` + jsonEscape(llama3Pattern) + `"}, "behavior": "Isolated"}, {"type": "ByteLevel", "use_regex": false}]}`, `{"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}], "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [263], "tokens": ["<|endoftext|>"]}}}`, `{"type": "ByteLevel"}`},
		{`{"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}`, `{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false}`, `null`, `{"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}`},
		{`{"type": "Lowercase"}`, `{"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": true}, {"type": "Punctuation"}, {"type": "Whitespace"}]}`, `null`, `{"type": "Metaspace"}`},
	} {
		s := string(out[0])
		s = strings.Replace(s, `"normalizer": null`, `"normalizer": `+layout.normalizer, 1)
		s = strings.Replace(s, `"pre_tokenizer": {`, `"pre_tokenizer": `+layout.pre+`, "old_pre_tokenizer": {`, 1)
		s = strings.Replace(s, `"post_processor": {`, `"post_processor": `+layout.post+`, "old_post_processor": {`, 1)
		s = strings.Replace(s, `"decoder": {`, `"decoder": `+layout.decoder+`, "old_decoder": {`, 1)
		out = append(out, []byte(s))
	}
	return out
}

func jsonEscape(s string) string { return strings.Trim(jsonString(s), `"`) }

// fuzzCheckLoaded checks what every tokenizer a loader accepts must do: encode
// and decode short strings (to themselves, unless a special token is also a
// token that BPE produces, whose decoding is then its content).
func fuzzCheckLoaded(t *testing.T, tok *Tokenizer) {
	t.Helper()
	if tok.pipe != nil {
		fuzzCheckPipeline(t, tok)
		return
	}
	if tok.VocabSize() < 256 {
		t.Fatalf("vocabulary of %d tokens, fewer than the 256 bytes", tok.VocabSize())
	}
	exact := true
	produced := map[int]bool{}
	for _, id := range tok.byteIDs {
		produced[int(id)] = true
	}
	for _, m := range tok.merges {
		produced[int(m.id)] = true
	}
	for _, id := range tok.specialIDs {
		if produced[id] {
			exact = false
		}
	}
	_ = tok.Specials()
	texts := append(slices.Clone(fuzzTexts), strings.Join(tok.Specials(), "x"))
	for _, s := range texts {
		for _, ids := range [][]int{tok.Encode(s), tok.EncodeWithSpecials(s)} {
			for _, id := range ids {
				if _, ok := tok.TokenBytes(id); !ok {
					t.Fatalf("Encode(%q) gave id %d, which has no token", s, id)
				}
			}
			got, err := tok.Decode(ids)
			if err != nil {
				t.Fatalf("Decode(Encode(%q)): %v", s, err)
			}
			if exact && got != s {
				t.Fatalf("Decode(Encode(%q)) = %q", s, got)
			}
		}
	}
}

// fuzzCheckPipeline checks a tokenizer.json pipeline: every encoding gives
// ids of the vocabulary, which decode; nothing panics.
func fuzzCheckPipeline(t *testing.T, tok *Tokenizer) {
	t.Helper()
	texts := append(slices.Clone(fuzzTexts), strings.Join(tok.Specials(), "x"), " \u2581a\u0301 12345 <0x41>")
	for _, s := range texts {
		for _, ids := range [][]int{tok.Encode(s), tok.EncodeWithSpecials(s), tok.EncodeHF(s, true)} {
			for _, id := range ids {
				if id < 0 || id >= tok.VocabSize() || tok.Token(id) == "" {
					t.Fatalf("encoding %q gave id %d, which has no token", s, id)
				}
			}
			if _, err := tok.Decode(ids); err != nil {
				t.Fatalf("Decode(encoding of %q): %v", s, err)
			}
			for _, skip := range []bool{false, true} {
				if _, err := tok.DecodeHF(ids, skip); err != nil {
					t.Fatalf("DecodeHF(encoding of %q): %v", s, err)
				}
			}
		}
	}
}

// fuzzTokenizerDiff reports how a and b differ, "" if in nothing that encoding
// and decoding depend on.
func fuzzTokenizerDiff(a, b *Tokenizer) string {
	switch {
	case !slices.Equal(a.tokens, b.tokens):
		return "tokens"
	case !slices.Equal(a.raw, b.raw):
		return "raw bytes"
	case !maps.Equal(a.specialIDs, b.specialIDs):
		return "special tokens"
	case !slices.Equal(a.ranked, b.ranked):
		return "merges"
	case a.byteIDs != b.byteIDs:
		return "byte tokens"
	case a.ignoreMerges != b.ignoreMerges:
		return "ignore_merges"
	}
	return ""
}

// FuzzReadHF feeds tokenizer.json files to ReadHF, and those it accepts to
// LoadHF too, which must give the same tokenizer. A tokenizer they accept
// must encode and decode, and come back the same through SaveHF's format.
func FuzzReadHF(f *testing.F) {
	for _, b := range fuzzHFSeeds(f) {
		f.Add(b)
	}
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {}, "merges": []}, "pre_tokenizer": {"type": "ByteLevel"}}`))
	f.Add([]byte(`{"model": {"type": "WordPiece"}}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"], "unk_token": "a"}, "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"}]}, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Removed", "invert": true}, "decoder": {"type": "Fuse"}, "added_tokens": [{"id": 3, "content": "<x>", "lstrip": true, "rstrip": true, "single_word": true, "normalized": true, "special": true}]}`))
	// One file, rewritten by each run: the runs of a worker are sequential.
	path := filepath.Join(f.TempDir(), "tokenizer.json")
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > fuzzMaxInput {
			t.Skip()
		}
		tok, err := ReadHF(bytes.NewReader(data), "tokenizer.json")
		if err != nil {
			if tok != nil {
				t.Fatalf("a failed load returned a tokenizer")
			}
			return
		}
		// LoadHF is ReadHF on a file; compared only where ReadHF succeeds,
		// which keeps the runs of rejected inputs fast.
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		fromFile, err := LoadHF(path)
		if err != nil {
			t.Fatalf("ReadHF accepts the file, LoadHF does not: %v", err)
		}
		if d := fuzzTokenizerDiff(tok, fromFile); d != "" {
			t.Fatalf("ReadHF and LoadHF differ in %s", d)
		}
		fuzzCheckLoaded(t, tok)
		again, err := ReadHF(bytes.NewReader(tok.hfJSON()), "saved.json")
		if err != nil {
			t.Fatalf("the saved tokenizer.json does not load: %v", err)
		}
		if d := fuzzTokenizerDiff(tok, again); d != "" {
			t.Fatalf("saving and loading changed the %s", d)
		}
	})
}

// FuzzReadGPT2 feeds vocab.json and merges.txt pairs to ReadGPT2. A tokenizer
// it accepts must encode and decode, and come back the same through Save's
// vocab.json and merges.txt (when its merges fit that format).
func FuzzReadGPT2(f *testing.F) {
	for _, b := range fuzzHFSeeds(f)[:2] { // the GPT-2 layout ones
		tok, err := ReadHF(bytes.NewReader(b), "seed")
		if err != nil {
			f.Fatal(err)
		}
		merges, err := tok.mergesTxt()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(tok.vocabJSON(""), merges)
	}
	tok, err := Train([]string{"the cat sat on the mat, the end"}, 270, []string{"<|endoftext|>"})
	if err != nil {
		f.Fatal(err)
	}
	merges, err := tok.mergesTxt()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(tok.vocabJSON(""), merges)
	f.Add(tok.vocabJSON(""), []byte("#version: 0.2\r\nt h\r\n\r\n"))
	f.Add([]byte(`{"a": 0}`), []byte("a b c\n"))
	f.Add([]byte(`[]`), []byte(""))
	f.Fuzz(func(t *testing.T, vocab, merges []byte) {
		if len(vocab) > fuzzMaxInput || len(merges) > fuzzMaxInput {
			t.Skip()
		}
		tok, err := ReadGPT2(bytes.NewReader(vocab), "vocab.json", bytes.NewReader(merges), "merges.txt")
		if err != nil {
			if tok != nil {
				t.Fatalf("a failed load returned a tokenizer")
			}
			return
		}
		fuzzCheckLoaded(t, tok)
		savedMerges, err := tok.mergesTxt()
		if err != nil {
			return // white space in a merge: merges.txt cannot hold it
		}
		again, err := ReadGPT2(bytes.NewReader(tok.vocabJSON("")), "saved vocab.json", bytes.NewReader(savedMerges), "saved merges.txt")
		if err != nil {
			t.Fatalf("the saved files do not load: %v", err)
		}
		if d := fuzzTokenizerDiff(tok, again); d != "" {
			t.Fatalf("saving and loading changed the %s", d)
		}
	})
}

// TestFuzzSeedsLoad: every tokenizer.json seed loads, so that the fuzzer
// starts from files that get past the parser.
func TestFuzzSeedsLoad(t *testing.T) {
	for i, b := range fuzzHFSeeds(t) {
		tok, err := ReadHF(bytes.NewReader(b), fmt.Sprintf("seed %d", i))
		if err != nil {
			t.Errorf("seed %d: %v", i, err)
			continue
		}
		if (i >= 2) != (tok.pipe != nil) {
			t.Errorf("seed %d: pipeline %v", i, tok.pipe != nil)
		}
		fuzzCheckLoaded(t, tok)
	}
}
