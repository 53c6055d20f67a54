package tokenizer

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/assets"
)

// BenchmarkEncodeThroughput measures encoding throughput (MB/s) on an
// Austen novel: the GPT-2 layout's fast path and the tokenizer.json
// pipelines of testdata/hf (the Qwen layout's NFC and Split scanner, Llama
// 3's, SentencePiece's Metaspace with byte fallback).
func BenchmarkEncodeThroughput(b *testing.B) {
	docs, err := assets.TrainDocuments()
	if err != nil {
		b.Fatal(err)
	}
	text := docs[0].Text
	if len(text) > 1<<20 {
		text = text[:1<<20]
	}
	gpt2, err := Train([]string{text}, 3000, []string{"<|endoftext|>"})
	if err != nil {
		b.Fatal(err)
	}
	tokenizers := []struct {
		name string
		tok  *Tokenizer
	}{{"gpt2-layout", gpt2}}
	for _, layout := range hfLayouts {
		tok, err := LoadHF(filepath.Join("testdata", "hf", layout, "tokenizer.json"))
		if err != nil {
			b.Fatal(err)
		}
		tokenizers = append(tokenizers, struct {
			name string
			tok  *Tokenizer
		}{layout, tok})
	}
	for _, tt := range tokenizers {
		b.Run(tt.name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				tt.tok.EncodeHF(text, true)
			}
		})
		// Without the word cache's help: every word new.
		b.Run(tt.name+"-uncached", func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				tt.tok.mu.Lock()
				clear(tt.tok.cache)
				tt.tok.mu.Unlock()
				tt.tok.EncodeHF(strings.Clone(text), true)
			}
		})
	}
}
