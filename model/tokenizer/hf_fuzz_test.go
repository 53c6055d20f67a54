package tokenizer

import (
	"bytes"
	"encoding/binary"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// fuzzMaxText bounds the texts the encoding fuzzers encode.
const fuzzMaxText = 1 << 12

// hfFixtures loads the tokenizer.json files of testdata/hf once.
var hfFixtures = sync.OnceValues(func() (map[string]*Tokenizer, error) {
	out := map[string]*Tokenizer{}
	for _, layout := range hfLayouts {
		tok, err := LoadHF(filepath.Join("testdata", "hf", layout, "tokenizer.json"))
		if err != nil {
			return nil, err
		}
		out[layout] = tok
	}
	return out, nil
})

// hfRoundTrip says what decoding the encoding of a valid UTF-8 text gives
// back, by layout: the text itself (llama3: byte-level, no normalizer), its
// NFC form (qwen), or nothing to compare (spbpe and misc, whose Metaspace
// and normalizers lose characters).
var hfRoundTrip = map[string]func(string) (string, bool){
	"qwen":   func(s string) (string, bool) { return norm.NFC.String(s), true },
	"llama3": func(s string) (string, bool) { return s, true },
}

// FuzzHFEncode encodes fuzzed text with the tokenizer.json fixtures of
// testdata/hf (the Qwen, Llama 3, SentencePiece-BPE and normalizer-heavy
// layouts) and decodes it again; the text's bytes also stand for ids to
// decode. See checkHFText for what must hold.
func FuzzHFEncode(f *testing.F) {
	for _, s := range fuzzTexts {
		f.Add(s)
	}
	for _, s := range readTexts(f) {
		if len(s) <= fuzzMaxText {
			f.Add(s)
		}
	}
	f.Add("<|im_start|>user\nhi<|im_end|><think>x</think><|begin_of_text|><s></s><unk>")
	f.Add("\u2581 \u2581\u2581a  b\u00a0<0x41><0xZZ>")
	f.Add("hi \U0001F999 ok") // byte-fallback tokens: a prefix ends inside the character
	f.Add("ＡＢＣ１２３ ``quoted'' 12345678901")
	toks, err := hfFixtures()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, text string) {
		if len(text) > fuzzMaxText {
			t.Skip()
		}
		for _, layout := range hfLayouts {
			checkHFText(t, layout, toks[layout], text)
		}
	})
}

// FuzzHFPipeline loads fuzzed tokenizer.json files and, where they load,
// encodes and decodes fuzzed text with them (checkHFText).
func FuzzHFPipeline(f *testing.F) {
	for i, b := range fuzzHFSeeds(f) {
		f.Add(b, fuzzTexts[i%len(fuzzTexts)])
	}
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "<unk>": 3}, "merges": ["a b"], "unk_token": "<unk>", "fuse_unk": true,
		"continuing_subword_prefix": "##", "end_of_word_suffix": "</w>"}, "pre_tokenizer": {"type": "Whitespace"},
		"added_tokens": [{"id": 4, "content": "<x>", "special": true, "normalized": false}]}`), "ab ba<x>c")
	f.Fuzz(func(t *testing.T, data []byte, text string) {
		if len(data) > fuzzMaxInput || len(text) > fuzzMaxText {
			t.Skip()
		}
		tok, err := ReadHF(bytes.NewReader(data), "tokenizer.json")
		if err != nil {
			if tok != nil {
				t.Fatalf("a failed load returned a tokenizer")
			}
			return
		}
		checkHFText(t, "", tok, text)
	})
}

// checkHFText checks what encoding and decoding text with tok must do:
//   - every id of Encode, EncodeWithSpecials and EncodeHF (with and without
//     the post-processor) is a token, EncodeHF without it is
//     EncodeWithSpecials, and encoding again gives the same ids;
//   - Decode and DecodeHF take those ids without error, DecodeHF giving
//     valid UTF-8 that is Decode's text when that is valid UTF-8;
//   - for a GPT-2 layout and the fixtures' byte-level and byte-fallback
//     layouts, the decoding of a prefix of the ids is a prefix of the
//     decoding of all of them (streaming relies on it), and for the
//     byte-level ones (hfRoundTrip) the decoding of the encoding of valid
//     UTF-8 gives the text back;
//   - ids made of text's bytes decode exactly when each is a token.
func checkHFText(t *testing.T, layout string, tok *Tokenizer, text string) {
	t.Helper()
	plain := tok.Encode(text)
	withSpecials := tok.EncodeWithSpecials(text)
	withPost := tok.EncodeHF(text, true)
	if got := tok.EncodeHF(text, false); !slices.Equal(got, withSpecials) {
		t.Fatalf("%s: EncodeHF(%q, false) = %v, EncodeWithSpecials %v", layout, text, got, withSpecials)
	}
	if again := tok.Encode(text); !slices.Equal(again, plain) {
		t.Fatalf("%s: Encode(%q) gave %v, then %v", layout, text, plain, again)
	}
	if again := tok.EncodeWithSpecials(text); !slices.Equal(again, withSpecials) {
		t.Fatalf("%s: EncodeWithSpecials(%q) gave %v, then %v", layout, text, withSpecials, again)
	}
	for _, ids := range [][]int{plain, withSpecials, withPost} {
		for _, id := range ids {
			if id < 0 || id >= tok.VocabSize() || tok.Token(id) == "" {
				t.Fatalf("%s: encoding %q gave id %d, which is not a token (vocabulary %d)", layout, text, id, tok.VocabSize())
			}
		}
		dec, err := tok.Decode(ids)
		if err != nil {
			t.Fatalf("%s: Decode(encoding of %q): %v", layout, text, err)
		}
		for _, skip := range []bool{false, true} {
			hf, err := tok.DecodeHF(ids, skip)
			if err != nil {
				t.Fatalf("%s: DecodeHF(encoding of %q, %v): %v", layout, text, skip, err)
			}
			if !utf8.ValidString(hf) {
				t.Fatalf("%s: DecodeHF(encoding of %q, %v) = %q, not valid UTF-8", layout, text, skip, hf)
			}
			if !skip && utf8.ValidString(dec) && hf != dec {
				t.Fatalf("%s: encoding of %q: DecodeHF %q, Decode %q", layout, text, hf, dec)
			}
		}
	}
	if tok.pipe == nil || layout == "qwen" || layout == "llama3" || layout == "spbpe" {
		full, _ := tok.Decode(plain)
		for _, k := range []int{len(plain) / 3, len(plain) / 2, len(plain) - 1} {
			if k <= 0 {
				continue
			}
			part, err := tok.Decode(plain[:k])
			if err != nil || !strings.HasPrefix(full, part) {
				t.Fatalf("%s: the first %d ids of the encoding of %q decode to %q (%v), not a prefix of %q", layout, k, text, part, err, full)
			}
		}
	}
	if want, ok := roundTrip(layout, text); ok {
		if got, _ := tok.Decode(plain); got != want {
			t.Fatalf("%s: Decode(Encode(%q)) = %q, want %q", layout, text, got, want)
		}
	}
	ids := make([]int, 0, len(text)/2)
	valid := true
	for b := []byte(text); len(b) >= 2; b = b[2:] {
		id := int(binary.LittleEndian.Uint16(b))%(tok.VocabSize()+4) - 2
		ids = append(ids, id)
		valid = valid && id >= 0 && id < tok.VocabSize() && tok.Token(id) != ""
	}
	if _, err := tok.Decode(ids); (err == nil) != valid {
		t.Fatalf("%s: Decode(%v): %v (the ids are tokens: %v)", layout, ids, err, valid)
	}
	if s, err := tok.DecodeHF(ids, false); (err == nil) != valid || !utf8.ValidString(s) {
		t.Fatalf("%s: DecodeHF(%v) = %q, %v (the ids are tokens: %v)", layout, ids, s, err, valid)
	}
}

// roundTrip returns what Decode(Encode(text)) must be, where known:
// hfRoundTrip's answer for valid UTF-8 and a fixture's layout.
func roundTrip(layout string, text string) (string, bool) {
	if rt := hfRoundTrip[layout]; rt != nil && utf8.ValidString(text) {
		return rt(text)
	}
	return "", false
}
