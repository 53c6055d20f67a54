// Package assets holds the data the engine ships with: the default training
// corpus, Jane Austen's six novels (see README.md for their provenance),
// stored gzip-compressed and embedded in the binary.
package assets

//go:generate go run gen.go -src ../../shared/data/austen -out corpus

import (
	"bytes"
	"compress/gzip"
	"embed"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"sync"
)

//go:embed corpus/*.txt.gz
var corpusFS embed.FS

// Document is one text of the corpus.
type Document struct {
	Name string // the file name without extension, such as "emma"
	Text string
}

// ValidationDocument names the novel held out for validation: Northanger
// Abbey, the shortest of the six (433 kB, about 11% of the corpus). The
// other five are for training.
const ValidationDocument = "northangerabbey"

// documentSeparator goes between documents in TrainText.
const documentSeparator = "\n\n"

var corpus = sync.OnceValues(loadCorpus)

func loadCorpus() ([]Document, error) {
	entries, err := corpusFS.ReadDir("corpus")
	if err != nil {
		return nil, fmt.Errorf("assets: %w", err)
	}
	var docs []Document
	for _, e := range entries {
		name := e.Name()
		z, err := corpusFS.ReadFile(path.Join("corpus", name))
		if err != nil {
			return nil, fmt.Errorf("assets: %w", err)
		}
		zr, err := gzip.NewReader(bytes.NewReader(z))
		if err != nil {
			return nil, fmt.Errorf("assets: corpus/%s: %w", name, err)
		}
		text, err := io.ReadAll(zr)
		if err != nil {
			return nil, fmt.Errorf("assets: corpus/%s: %w", name, err)
		}
		docs = append(docs, Document{Name: strings.TrimSuffix(name, ".txt.gz"), Text: string(text)})
	}
	sort.Slice(docs, func(i, j int) bool { return docs[i].Name < docs[j].Name })
	return docs, nil
}

// Corpus returns every document of the corpus, sorted by name. The texts
// are decompressed once and shared.
func Corpus() ([]Document, error) {
	docs, err := corpus()
	if err != nil {
		return nil, err
	}
	return append([]Document(nil), docs...), nil
}

// TrainDocuments returns every document except ValidationDocument.
func TrainDocuments() ([]Document, error) {
	docs, err := corpus()
	if err != nil {
		return nil, err
	}
	var train []Document
	for _, d := range docs {
		if d.Name != ValidationDocument {
			train = append(train, d)
		}
	}
	return train, nil
}

// TrainText returns the training documents' texts in name order, separated
// by a blank line.
func TrainText() (string, error) {
	docs, err := TrainDocuments()
	if err != nil {
		return "", err
	}
	texts := make([]string, len(docs))
	for i, d := range docs {
		texts[i] = d.Text
	}
	return strings.Join(texts, documentSeparator), nil
}

// ValidText returns the text of ValidationDocument.
func ValidText() (string, error) {
	docs, err := corpus()
	if err != nil {
		return "", err
	}
	for _, d := range docs {
		if d.Name == ValidationDocument {
			return d.Text, nil
		}
	}
	return "", fmt.Errorf("assets: the corpus has no %q", ValidationDocument)
}
