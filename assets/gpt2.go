package assets

import (
	"bytes"
	"compress/gzip"
	"embed"
	"fmt"
	"io"
	"sync"
)

// The GPT-2 tokenizer files, byte-identical to OpenAI's (see README.md),
// gzip-compressed: encoder.json (token -> id) and vocab.bpe (merges).
//
//go:generate sh -c "gzip -9 -n -c ../../shared/data/gpt2-tokenizer/encoder.json > gpt2/encoder.json.gz && gzip -9 -n -c ../../shared/data/gpt2-tokenizer/vocab.bpe > gpt2/vocab.bpe.gz"

//go:embed gpt2/encoder.json.gz gpt2/vocab.bpe.gz
var gpt2FS embed.FS

var gpt2 = sync.OnceValues(func() ([2][]byte, error) {
	var out [2][]byte
	for i, name := range []string{"gpt2/encoder.json.gz", "gpt2/vocab.bpe.gz"} {
		z, err := gpt2FS.ReadFile(name)
		if err != nil {
			return out, fmt.Errorf("assets: %w", err)
		}
		zr, err := gzip.NewReader(bytes.NewReader(z))
		if err != nil {
			return out, fmt.Errorf("assets: %s: %w", name, err)
		}
		if out[i], err = io.ReadAll(zr); err != nil {
			return out, fmt.Errorf("assets: %s: %w", name, err)
		}
	}
	return out, nil
})

// GPT2Tokenizer returns GPT-2's vocabulary (encoder.json: token -> id, 50257
// entries, <|endoftext|> = 50256) and its 50000 BPE merges (vocab.bpe), for
// tokenizer.ReadGPT2.
func GPT2Tokenizer() (vocab, merges []byte, err error) {
	f, err := gpt2()
	return f[0], f[1], err
}
