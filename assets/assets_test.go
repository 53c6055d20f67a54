package assets

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var wantNames = []string{"emma", "mansfieldpark", "northangerabbey", "persuasion", "prideprejudice", "sensesensibility"}

func TestCorpus(t *testing.T) {
	docs, err := Corpus()
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) != len(wantNames) {
		t.Fatalf("Corpus() has %d documents, want %d", len(docs), len(wantNames))
	}
	total := 0
	for i, d := range docs {
		if d.Name != wantNames[i] {
			t.Errorf("document %d is %q, want %q", i, d.Name, wantNames[i])
		}
		if len(d.Text) < 400_000 {
			t.Errorf("%s: %d bytes, want a whole novel (over 400 kB)", d.Name, len(d.Text))
		}
		if !strings.Contains(d.Text, "Austen") {
			t.Errorf("%s: no \"Austen\" in the text", d.Name)
		}
		total += len(d.Text)
	}
	if total < 4_000_000 {
		t.Errorf("corpus has %d bytes, want about 4 MB", total)
	}
	// Corpus returns a copy of the list.
	docs[0].Name = "changed"
	again, _ := Corpus()
	if again[0].Name != wantNames[0] {
		t.Error("changing Corpus()'s result changed the corpus")
	}
}

func TestSplit(t *testing.T) {
	docs, err := Corpus()
	if err != nil {
		t.Fatal(err)
	}
	train, err := TrainDocuments()
	if err != nil {
		t.Fatal(err)
	}
	if len(train) != len(docs)-1 {
		t.Fatalf("%d training documents, want %d", len(train), len(docs)-1)
	}
	for _, d := range train {
		if d.Name == ValidationDocument {
			t.Errorf("the validation document %q is among the training documents", d.Name)
		}
	}
	valid, err := ValidText()
	if err != nil {
		t.Fatal(err)
	}
	trainText, err := TrainText()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(valid, "NORTHANGER ABBEY") {
		t.Errorf("ValidText() starts %q, want Northanger Abbey", valid[:40])
	}
	// Disjoint: no long passage of the validation novel is in the training
	// text (the title page's short lines may well repeat).
	lines := strings.Split(valid, "\n")
	for i := 100; i+3 < len(lines); i += 500 {
		passage := strings.Join(lines[i:i+3], "\n")
		if len(passage) > 100 && strings.Contains(trainText, passage) {
			t.Errorf("validation passage at line %d is in the training text: %q", i+1, passage)
		}
	}
	want := 0
	for _, d := range train {
		want += len(d.Text) + len(documentSeparator)
	}
	want -= len(documentSeparator)
	if len(trainText) != want {
		t.Errorf("TrainText() has %d bytes, want %d", len(trainText), want)
	}
	if len(valid)+len(trainText) < 4_000_000 {
		t.Errorf("train and validation text together have %d bytes, want the whole corpus", len(valid)+len(trainText))
	}
	smallest := docs[0]
	for _, d := range docs {
		if len(d.Text) < len(smallest.Text) {
			smallest = d
		}
	}
	if smallest.Name != ValidationDocument {
		t.Errorf("the smallest novel is %q, but ValidationDocument is %q", smallest.Name, ValidationDocument)
	}
}

// TestCorpusFresh checks the embedded novels against their source in
// ../../shared/data/austen, when that folder is present (`go generate`
// rewrites them from there).
func TestCorpusFresh(t *testing.T) {
	src := filepath.Join("..", "..", "shared", "data", "austen")
	if _, err := os.Stat(src); err != nil {
		t.Skipf("no source corpus at %s", src)
	}
	docs, err := Corpus()
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(src, "*.txt"))
	if len(files) != len(docs) {
		t.Errorf("%s has %d novels, the embedded corpus %d: run go generate ./assets", src, len(files), len(docs))
	}
	for _, d := range docs {
		want, err := os.ReadFile(filepath.Join(src, d.Name+".txt"))
		if err != nil {
			t.Errorf("%s: %v", d.Name, err)
			continue
		}
		if string(want) != d.Text {
			t.Errorf("%s: embedded text differs from %s: run go generate ./assets", d.Name, src)
		}
	}
}

func TestGPT2Tokenizer(t *testing.T) {
	vocab, merges, err := GPT2Tokenizer()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(vocab, []byte(`"<|endoftext|>": 50256`)) {
		t.Error("encoder.json lacks <|endoftext|> = 50256")
	}
	if n := bytes.Count(merges, []byte("\n")); n < 50000 {
		t.Errorf("vocab.bpe has %d lines, want >= 50000", n)
	}
}
