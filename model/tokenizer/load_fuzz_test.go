package tokenizer

import (
	"bytes"
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
	return out
}

// fuzzCheckLoaded checks what every tokenizer a loader accepts must do: encode
// and decode short strings (to themselves, unless a special token is also a
// token that BPE produces, whose decoding is then its content).
func fuzzCheckLoaded(t *testing.T, tok *Tokenizer) {
	t.Helper()
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
	for _, b := range fuzzHFSeeds(f) {
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
