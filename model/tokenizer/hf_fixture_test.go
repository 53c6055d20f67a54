package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The fixtures of testdata/hf/: for each layout a tokenizer.json and
// cases.json, the encodings and decodings of every text of texts.json, made
// by scripts/tokenizer-fixtures.py with the tokenizers library.
var hfLayouts = []string{"qwen", "llama3", "spbpe", "misc"}

type hfCase struct {
	Text           string `json:"text"`
	IDs            []int  `json:"ids"`
	IDsPlain       []int  `json:"ids_plain"`
	Decoded        string `json:"decoded"`
	DecodedSpecial string `json:"decoded_special"`
}

type hfCases struct {
	MadeBy string   `json:"made_by"`
	Cases  []hfCase `json:"cases"`
}

func readHFCases(t testing.TB, layout string) (*Tokenizer, hfCases) {
	t.Helper()
	dir := filepath.Join("testdata", "hf", layout)
	tok, err := LoadHF(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c hfCases
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	return tok, c
}

// TestHFLibraryFixtures: EncodeHF and DecodeHF give what the tokenizers
// library gives, for every text, with and without the post-processor, and
// with and without skipping special tokens.
func TestHFLibraryFixtures(t *testing.T) {
	texts := readTexts(t)
	for _, layout := range hfLayouts {
		t.Run(layout, func(t *testing.T) {
			tok, c := readHFCases(t, layout)
			t.Logf("%s: %d cases made by %s", layout, len(c.Cases), c.MadeBy)
			if len(c.Cases) != len(texts) {
				t.Errorf("%d cases for %d texts", len(c.Cases), len(texts))
			}
			if tok.pipe == nil {
				t.Errorf("the %s layout took the GPT-2 fast path", layout)
			}
			fails := 0
			for _, tc := range c.Cases {
				if got := tok.EncodeHF(tc.Text, true); !slices.Equal(got, tc.IDs) {
					t.Errorf("EncodeHF(%q, true)\n got %v\nwant %v", tc.Text, got, tc.IDs)
					fails++
				}
				if got := tok.EncodeHF(tc.Text, false); !slices.Equal(got, tc.IDsPlain) {
					t.Errorf("EncodeHF(%q, false)\n got %v\nwant %v", tc.Text, got, tc.IDsPlain)
					fails++
				}
				if got, err := tok.DecodeHF(tc.IDs, true); err != nil || got != tc.Decoded {
					t.Errorf("DecodeHF(ids of %q, true) = %q, %v; want %q", tc.Text, got, err, tc.Decoded)
					fails++
				}
				if got, err := tok.DecodeHF(tc.IDs, false); err != nil || got != tc.DecodedSpecial {
					t.Errorf("DecodeHF(ids of %q, false) = %q, %v; want %q", tc.Text, got, err, tc.DecodedSpecial)
					fails++
				}
				if fails > 20 {
					t.Fatal("too many failures")
				}
			}
		})
	}
}

// TestHFRoundTrip: for the byte-level layouts without a normalizer,
// decoding an encoding gives the text back exactly.
func TestHFRoundTrip(t *testing.T) {
	for _, layout := range []string{"llama3"} {
		tok, c := readHFCases(t, layout)
		for _, tc := range c.Cases {
			got, err := tok.DecodeHF(tc.IDsPlain, false)
			if err != nil || got != tc.Text {
				t.Errorf("%s: DecodeHF(EncodeHF(%q)) = %q, %v", layout, tc.Text, got, err)
			}
		}
	}
}

func readTexts(t testing.TB) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "hf", "texts.json"))
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	if err := json.Unmarshal(data, &texts); err != nil {
		t.Fatal(err)
	}
	return texts
}
