package tokenizer_test

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/parallax-engine/parallax/assets"
	"github.com/parallax-engine/parallax/model/tokenizer"
)

// TestTrainAusten trains the default-sized vocabulary on the training
// novels and checks its size, determinism, round trip and compression on
// the held-out novel.
func TestTrainAusten(t *testing.T) {
	docs, err := assets.TrainDocuments()
	if err != nil {
		t.Fatal(err)
	}
	valid, err := assets.ValidText()
	if err != nil {
		t.Fatal(err)
	}
	texts := make([]string, len(docs))
	for i, d := range docs {
		texts[i] = d.Text
	}
	const vocabSize = 4096
	start := time.Now()
	tok, err := tokenizer.Train(texts, vocabSize, []string{"<|endoftext|>"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("trained %d tokens on %d novels in %v", tok.VocabSize(), len(texts), time.Since(start).Round(time.Millisecond))
	if tok.VocabSize() != vocabSize {
		t.Errorf("VocabSize() = %d, want %d", tok.VocabSize(), vocabSize)
	}

	start = time.Now()
	ids := tok.Encode(valid)
	elapsed := time.Since(start)
	ratio := float64(len(valid)) / float64(len(ids))
	t.Logf("validation novel: %d bytes -> %d tokens, %.2f bytes/token, encoded in %v", len(valid), len(ids), ratio, elapsed.Round(time.Millisecond))
	if ratio < 2 {
		t.Errorf("%.2f bytes/token on the validation novel, want over 2", ratio)
	}
	if got, err := tok.Decode(ids); err != nil || got != valid {
		t.Errorf("Decode(Encode(validation novel)) differs: %v", err)
	}

	// Same input, same tokenizer, byte for byte.
	again, err := tokenizer.Train(texts, vocabSize, []string{"<|endoftext|>"})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json")
	if err := tok.SaveHF(a); err != nil {
		t.Fatal(err)
	}
	if err := again.SaveHF(b); err != nil {
		t.Fatal(err)
	}
	da, _ := os.ReadFile(a)
	db, _ := os.ReadFile(b)
	if !bytes.Equal(da, db) {
		t.Error("two trainings on the same text gave different tokenizer.json files")
	}

	// Reading the text as a stream gives the same tokenizer.
	streamed, err := tokenizer.TrainReader(strings.NewReader(strings.Join(texts, "")), vocabSize, []string{"<|endoftext|>"})
	if err != nil {
		t.Fatal(err)
	}
	joined, err := tokenizer.Train([]string{strings.Join(texts, "")}, vocabSize, []string{"<|endoftext|>"})
	if err != nil {
		t.Fatal(err)
	}
	for id := 0; id < vocabSize; id++ {
		if streamed.Token(id) != joined.Token(id) {
			t.Fatalf("TrainReader and Train differ at id %d: %q, %q", id, streamed.Token(id), joined.Token(id))
		}
	}

	// Saved and loaded back, it encodes the same.
	if err := tok.Save(dir); err != nil {
		t.Fatal(err)
	}
	for _, load := range []func() (*tokenizer.Tokenizer, error){
		func() (*tokenizer.Tokenizer, error) { return tokenizer.LoadHF(filepath.Join(dir, "tokenizer.json")) },
		func() (*tokenizer.Tokenizer, error) {
			return tokenizer.LoadGPT2(filepath.Join(dir, "vocab.json"), filepath.Join(dir, "merges.txt"))
		},
	} {
		loaded, err := load()
		if err != nil {
			t.Fatal(err)
		}
		sample := valid[:50_000] + "<|endoftext|>" + valid[50_000:60_000]
		if got, want := loaded.EncodeWithSpecials(sample), tok.EncodeWithSpecials(sample); !slices.Equal(got, want) {
			t.Error("a saved and reloaded tokenizer encodes differently")
		}
	}
}

func BenchmarkTrain4096(b *testing.B) {
	text, err := assets.TrainText()
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		if _, err := tokenizer.Train([]string{text}, 4096, []string{"<|endoftext|>"}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncode(b *testing.B) {
	text, err := assets.TrainText()
	if err != nil {
		b.Fatal(err)
	}
	tok, err := tokenizer.Train([]string{text}, 4096, nil)
	if err != nil {
		b.Fatal(err)
	}
	valid, _ := assets.ValidText()
	b.SetBytes(int64(len(valid)))
	for b.Loop() {
		tok.Encode(valid)
	}
}
