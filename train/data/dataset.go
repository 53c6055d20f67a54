package data

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
)

// Document is one text of a corpus (a novel, an article).
type Document struct {
	Name string
	Text string
}

// EncodeFunc tokenizes one document.
type EncodeFunc func(text string) ([]int32, error)

// Meta describes a dataset directory; it is stored as dataset.json.
type Meta struct {
	Vocab       int      `json:"vocab"`        // tokenizer vocabulary size
	Tokenizer   string   `json:"tokenizer"`    // fingerprint of the tokenizer that produced the tokens
	EOT         int32    `json:"eot"`          // separator appended after each document, -1 for none
	TrainTokens int      `json:"train_tokens"` // tokens over all train shards
	ValTokens   int      `json:"val_tokens"`   // tokens over all validation shards
	TrainDocs   []string `json:"train_docs"`
	ValDocs     []string `json:"val_docs"`
	// Written by Prepare: the input's format (FormatText, FormatChat or
	// "plain" for a text file) and how many samples (text chunks) each
	// split holds.
	Format       string `json:"format,omitempty"`
	TrainSamples int    `json:"train_samples,omitempty"`
	ValSamples   int    `json:"val_samples,omitempty"`
}

// Dataset is a directory of token shards: train_NNNNN.bin, val_NNNNN.bin
// and dataset.json.
type Dataset struct {
	Dir   string
	Meta  Meta
	Train []*Shard
	Val   []*Shard
}

// BuildOptions modify Build.
type BuildOptions struct {
	Vocab       int    // vocabulary size of the tokenizer (required)
	Tokenizer   string // fingerprint recorded in dataset.json
	EOT         int32  // appended after every document; -1 for none
	ShardTokens int    // tokens per shard file; 0 means 1<<26
}

// MetaFile is the name of the dataset description in a dataset directory.
const MetaFile = "dataset.json"

// Build tokenizes train and val documents (in parallel, one document per
// worker) and writes them as shards into dir, which is created if needed.
// Validation is whole held-out documents, never a slice of a training one.
func Build(dir string, encode EncodeFunc, train, val []Document, o BuildOptions) (*Dataset, error) {
	if len(train) == 0 {
		return nil, fmt.Errorf("build dataset: no training documents")
	}
	if o.Vocab <= 0 {
		return nil, fmt.Errorf("build dataset: vocabulary size %d must be positive", o.Vocab)
	}
	if o.ShardTokens <= 0 {
		o.ShardTokens = 1 << 26
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("build dataset: %w", err)
	}
	all := append(append([]Document(nil), train...), val...)
	toks := make([][]int32, len(all))
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for i, d := range all {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			t, err := encode(d.Text)
			if err != nil {
				errs[i] = fmt.Errorf("tokenize %s: %w", d.Name, err)
				return
			}
			if o.EOT >= 0 {
				t = append(t, o.EOT)
			}
			toks[i] = t
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("build dataset: %w", err)
		}
	}
	meta := Meta{Vocab: o.Vocab, Tokenizer: o.Tokenizer, EOT: o.EOT}
	for _, d := range train {
		meta.TrainDocs = append(meta.TrainDocs, d.Name)
	}
	for _, d := range val {
		meta.ValDocs = append(meta.ValDocs, d.Name)
	}
	write := func(prefix string, docs [][]int32) (int, error) {
		var cur []int32
		var ndocs, idx, total int
		flush := func() error {
			if len(cur) == 0 {
				return nil
			}
			p := filepath.Join(dir, fmt.Sprintf("%s_%05d.bin", prefix, idx))
			if err := WriteShard(p, cur, o.Vocab, ndocs); err != nil {
				return err
			}
			total += len(cur)
			idx++
			cur, ndocs = cur[:0], 0
			return nil
		}
		for _, t := range docs {
			ndocs++ // Docs counts the documents that start in a shard
			for len(t) > 0 {
				n := min(len(t), o.ShardTokens-len(cur))
				cur = append(cur, t[:n]...)
				t = t[n:]
				if len(cur) == o.ShardTokens {
					if err := flush(); err != nil {
						return 0, err
					}
				}
			}
		}
		return total, flush()
	}
	// Remove shards of an earlier build so the directory holds exactly one.
	old, _ := filepath.Glob(filepath.Join(dir, "*_[0-9][0-9][0-9][0-9][0-9].bin"))
	for _, p := range old {
		os.Remove(p)
	}
	var err error
	if meta.TrainTokens, err = write("train", toks[:len(train)]); err != nil {
		return nil, fmt.Errorf("build dataset: %w", err)
	}
	if meta.ValTokens, err = write("val", toks[len(train):]); err != nil {
		return nil, fmt.Errorf("build dataset: %w", err)
	}
	mb, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := WriteAtomic(filepath.Join(dir, MetaFile), func(w io.Writer) error {
		_, err := w.Write(append(mb, '\n'))
		return err
	}); err != nil {
		return nil, fmt.Errorf("build dataset: %w", err)
	}
	return Open(dir)
}

// Open loads a dataset directory written by Build.
func Open(dir string) (*Dataset, error) {
	mb, err := os.ReadFile(filepath.Join(dir, MetaFile))
	if err != nil {
		return nil, fmt.Errorf("open dataset: %w", err)
	}
	d := &Dataset{Dir: dir}
	if err := json.Unmarshal(mb, &d.Meta); err != nil {
		return nil, fmt.Errorf("open dataset %s: %s is not valid JSON: %w", dir, MetaFile, err)
	}
	load := func(prefix string) ([]*Shard, int, error) {
		paths, _ := filepath.Glob(filepath.Join(dir, prefix+"_[0-9][0-9][0-9][0-9][0-9].bin"))
		sort.Strings(paths)
		var out []*Shard
		n := 0
		for _, p := range paths {
			s, err := ReadShard(p)
			if err != nil {
				return nil, 0, err
			}
			if s.Vocab != d.Meta.Vocab {
				return nil, 0, fmt.Errorf("shard %s has vocabulary %d, %s says %d", p, s.Vocab, MetaFile, d.Meta.Vocab)
			}
			out = append(out, s)
			n += s.Len()
		}
		return out, n, nil
	}
	var n int
	if d.Train, n, err = load("train"); err != nil {
		return nil, fmt.Errorf("open dataset: %w", err)
	}
	if len(d.Train) == 0 {
		return nil, fmt.Errorf("open dataset %s: %w for the train split (train_00000.bin ...)", dir, ErrNoShards)
	}
	if n != d.Meta.TrainTokens {
		return nil, fmt.Errorf("open dataset %s: train shards hold %d tokens, %s says %d (a shard is missing)", dir, n, MetaFile, d.Meta.TrainTokens)
	}
	if d.Val, n, err = load("val"); err != nil {
		return nil, fmt.Errorf("open dataset: %w", err)
	}
	if n != d.Meta.ValTokens {
		return nil, fmt.Errorf("open dataset %s: validation shards hold %d tokens, %s says %d (a shard is missing)", dir, n, MetaFile, d.Meta.ValTokens)
	}
	return d, nil
}

// ReadDocuments reads text documents from path: a directory contributes
// every *.txt file in it (sorted by name, one document each), a file is one
// document. Empty documents are an error.
func ReadDocuments(path string) ([]Document, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("read documents: %w", err)
	}
	var paths []string
	if st.IsDir() {
		paths, _ = filepath.Glob(filepath.Join(path, "*.txt"))
		sort.Strings(paths)
		if len(paths) == 0 {
			return nil, fmt.Errorf("read documents: %s has no *.txt files", path)
		}
	} else {
		paths = []string{path}
	}
	var docs []Document
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("read documents: %w", err)
		}
		if strings.TrimSpace(string(b)) == "" {
			return nil, fmt.Errorf("read documents: %s is empty", p)
		}
		docs = append(docs, Document{Name: filepath.Base(p), Text: string(b)})
	}
	return docs, nil
}

// SplitDocuments holds out validation documents: the last document when
// there are several, otherwise the final valFrac of the single document,
// cut at a paragraph break (a blank line) where one is near.
func SplitDocuments(docs []Document, valFrac float64) (train, val []Document) {
	if len(docs) > 1 {
		return docs[:len(docs)-1], docs[len(docs)-1:]
	}
	if len(docs) == 0 {
		return nil, nil
	}
	d := docs[0]
	cut := int(float64(len(d.Text)) * (1 - valFrac))
	if i := strings.LastIndex(d.Text[:cut], "\n\n"); i > 0 && cut-i < len(d.Text)/20+1 {
		cut = i + 2
	}
	return []Document{{Name: d.Name + " (train part)", Text: d.Text[:cut]}},
		[]Document{{Name: d.Name + " (validation part)", Text: d.Text[cut:]}}
}
