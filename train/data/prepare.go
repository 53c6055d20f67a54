package data

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
)

// PrepareOptions modify Prepare.
type PrepareOptions struct {
	// Format of a .jsonl input: FormatAuto (default), FormatText or
	// FormatChat. A .txt (any other) input is plain text.
	Format string
	// Encode tokenizes plain text ({"text"} samples and .txt input);
	// EncodeSpecial tokenizes rendered chat text, turning the template's
	// special-token text into their ids (Encode when nil).
	Encode, EncodeSpecial EncodeFunc
	// Renderer renders chat samples (required for chat input).
	Renderer  Renderer
	Vocab     int    // vocabulary size of the tokenizer (required)
	Tokenizer string // fingerprint recorded in dataset.json
	// EOT is appended after every sample (and at the end of a text
	// input); -1 for none. In chat samples it is not a target.
	EOT int32
	// ValFrac is the fraction of samples (JSONL) or text chunks (.txt)
	// held out for validation, every round(1/ValFrac)-th one; 0 holds out
	// nothing, a negative value means the default 0.01.
	ValFrac float64
	// ShardTokens is the size of a shard in tokens; 0 means 1<<24. A JSONL
	// sample never straddles two shards (a longer one has a shard of its
	// own).
	ShardTokens int
	// Workers tokenize in parallel; 0 means GOMAXPROCS.
	Workers int
	// Progress, if set, is called after each batch with the samples read
	// so far.
	Progress func(samples int)
}

// textChunk is the size of the pieces a .txt input is tokenized in: cut
// at a blank line (else a line break, else anywhere valid) near it.
const textChunk = 256 << 10

// batchSamples is how many samples are tokenized together (then written
// in order), which bounds the memory of a streaming pass.
const batchSamples = 4096

// Prepare tokenizes the file in (a .jsonl of samples, or text) in one
// streaming pass into a dataset directory out, which Open reads and
// training uses; nothing of the input is held in memory beyond a batch.
// JSONL samples get a document index and, for chat, the loss mask, so the
// sampler packs whole samples into rows (see Sampler). The dataset is
// written into a temporary directory beside out and renamed into place at
// the end: a failure leaves no partial dataset. An existing out is
// replaced only if it is an empty directory or a dataset.
func Prepare(in, out string, o PrepareOptions) (*Dataset, error) {
	d, err := prepare(in, out, o)
	if err != nil {
		return nil, fmt.Errorf("prepare dataset: %w", err)
	}
	return d, nil
}

func prepare(in, out string, o PrepareOptions) (*Dataset, error) {
	if o.Vocab <= 0 {
		return nil, fmt.Errorf("vocabulary size %d must be positive", o.Vocab)
	}
	if o.Encode == nil {
		return nil, errors.New("no encoder")
	}
	if o.EncodeSpecial == nil {
		o.EncodeSpecial = o.Encode
	}
	if o.ShardTokens <= 0 {
		o.ShardTokens = 1 << 24
	}
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if o.ValFrac < 0 {
		o.ValFrac = 0.01
	}
	if o.ValFrac >= 1 || math.IsNaN(o.ValFrac) {
		return nil, fmt.Errorf("validation fraction %v must be in [0, 1)", o.ValFrac)
	}
	every := 0
	if o.ValFrac > 0 {
		every = max(2, int(math.Round(1/o.ValFrac)))
	}
	if err := checkReplaceable(out); err != nil {
		return nil, err
	}
	f, err := os.Open(in)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	parent := filepath.Dir(filepath.Clean(out))
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, err
	}
	stage, err := os.MkdirTemp(parent, "."+filepath.Base(out)+".tmp-")
	if err != nil {
		return nil, err
	}
	done := false
	defer func() {
		if !done {
			os.RemoveAll(stage)
		}
	}()
	name := filepath.Base(in)
	meta := Meta{Vocab: o.Vocab, Tokenizer: o.Tokenizer, EOT: o.EOT}
	tw := &shardWriter{dir: stage, prefix: "train", limit: o.ShardTokens, vocab: o.Vocab}
	vw := &shardWriter{dir: stage, prefix: "val", limit: o.ShardTokens, vocab: o.Vocab}
	if strings.EqualFold(filepath.Ext(in), ".jsonl") {
		tw.docs, vw.docs = true, true
		if err := prepareJSONL(f, name, o, every, tw, vw, &meta); err != nil {
			return nil, err
		}
	} else {
		meta.Format = "plain"
		if err := prepareText(f, name, o, every, tw, vw, &meta); err != nil {
			return nil, err
		}
	}
	if err := tw.flush(); err != nil {
		return nil, err
	}
	if err := vw.flush(); err != nil {
		return nil, err
	}
	if tw.total == 0 {
		return nil, fmt.Errorf("%s: no training samples", in)
	}
	meta.TrainTokens, meta.ValTokens = tw.total, vw.total
	meta.TrainDocs = []string{fmt.Sprintf("%s (%d samples)", name, meta.TrainSamples)}
	if meta.ValSamples > 0 {
		meta.ValDocs = []string{fmt.Sprintf("%s (%d samples held out)", name, meta.ValSamples)}
	}
	mb, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := WriteAtomic(filepath.Join(stage, MetaFile), func(w io.Writer) error {
		_, err := w.Write(append(mb, '\n'))
		return err
	}); err != nil {
		return nil, err
	}
	if _, err := Open(stage); err != nil {
		return nil, err
	}
	if err := os.RemoveAll(out); err != nil {
		return nil, err
	}
	if err := os.Rename(stage, out); err != nil {
		return nil, err
	}
	done = true
	return Open(out)
}

// checkReplaceable refuses an out that exists and is neither an empty
// directory nor a dataset.
func checkReplaceable(out string) error {
	st, err := os.Stat(out)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s exists and is not a directory", out)
	}
	if _, err := os.Stat(filepath.Join(out, MetaFile)); err == nil {
		return nil
	}
	ents, err := os.ReadDir(out)
	if err != nil {
		return err
	}
	if len(ents) > 0 {
		return fmt.Errorf("%s exists and is not a dataset directory (no %s); choose another --out or remove it", out, MetaFile)
	}
	return nil
}

// tokenized is one sample's tokens (and mask, for chat).
type tokenized struct {
	toks []int32
	mask []bool
	err  error
}

// parallelMap runs f on every index of n, at most workers at a time.
func parallelMap(n, workers int, f func(i int)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, workers)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			f(i)
		}()
	}
	wg.Wait()
}

func prepareJSONL(r io.Reader, name string, o PrepareOptions, every int, tw, vw *shardWriter, meta *Meta) error {
	jr, err := NewJSONLReader(r, name, o.Format)
	if err != nil {
		return err
	}
	seen := 0
	for {
		var batch []Sample
		var rerr error
		for len(batch) < batchSamples {
			s, err := jr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				rerr = err
				break
			}
			batch = append(batch, s)
		}
		if rerr != nil {
			return rerr
		}
		if len(batch) == 0 {
			break
		}
		meta.Format = jr.Format()
		if meta.Format == FormatChat && o.Renderer == nil {
			return fmt.Errorf("%s holds chat samples but there is no chat template to render them", name)
		}
		res := make([]tokenized, len(batch))
		parallelMap(len(batch), o.Workers, func(i int) {
			s := batch[i]
			var t tokenized
			if s.Messages != nil {
				t.toks, t.mask, t.err = ChatTokens(o.Renderer, o.EncodeSpecial, s.Messages)
				if t.err == nil && o.EOT >= 0 {
					t.toks, t.mask = append(t.toks, o.EOT), append(t.mask, false)
				}
			} else {
				t.toks, t.err = o.Encode(s.Text)
				if t.err == nil && o.EOT >= 0 {
					t.toks = append(t.toks, o.EOT)
				}
			}
			if t.err == nil && len(t.toks) == 0 {
				t.err = errors.New("tokenizes to nothing")
			}
			if t.err != nil {
				t.err = fmt.Errorf("%s:%d: %v", name, s.Line, t.err)
			}
			res[i] = t
		})
		for _, t := range res {
			if t.err != nil {
				return t.err
			}
			w := tw
			if every > 0 && seen%every == every-1 {
				w = vw
				meta.ValSamples++
			} else {
				meta.TrainSamples++
			}
			seen++
			if err := w.addDoc(t.toks, t.mask); err != nil {
				return err
			}
		}
		if o.Progress != nil {
			o.Progress(seen)
		}
	}
	if seen == 0 {
		return fmt.Errorf("%s has no samples", name)
	}
	return nil
}

func prepareText(r io.Reader, name string, o PrepareOptions, every int, tw, vw *shardWriter, meta *Meta) error {
	br := bufio.NewReaderSize(r, 1<<20)
	var pending []byte
	eof := false
	chunks := 0
	for !eof || len(pending) > 0 {
		// Read up to a batch of chunks.
		var batch []string
		for len(batch) < 64 && (!eof || len(pending) > 0) {
			for !eof && len(pending) < 2*textChunk {
				buf := make([]byte, textChunk)
				n, err := io.ReadFull(br, buf)
				pending = append(pending, buf[:n]...)
				if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
					eof = true
				} else if err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
			}
			cut := len(pending)
			if !eof || cut > 2*textChunk {
				cut = cutText(pending, textChunk)
			}
			if cut == 0 {
				break
			}
			batch = append(batch, string(pending[:cut]))
			pending = append(pending[:0:0], pending[cut:]...)
		}
		res := make([]tokenized, len(batch))
		parallelMap(len(batch), o.Workers, func(i int) {
			res[i].toks, res[i].err = o.Encode(batch[i])
		})
		for i, t := range res {
			if t.err != nil {
				return fmt.Errorf("%s: chunk %d: %w", name, chunks+i, t.err)
			}
		}
		for _, t := range res {
			w := tw
			if every > 0 && chunks%every == every-1 {
				w = vw
				meta.ValSamples++
			} else {
				meta.TrainSamples++
			}
			chunks++
			if err := w.addStream(t.toks); err != nil {
				return err
			}
		}
		if o.Progress != nil {
			o.Progress(chunks)
		}
	}
	if chunks == 0 {
		return fmt.Errorf("%s is empty", name)
	}
	if o.EOT >= 0 {
		if err := tw.addStream([]int32{o.EOT}); err != nil {
			return err
		}
	}
	return nil
}

// cutText returns where to cut b near size: after a blank line, else after
// a line break, else after a space, else at a UTF-8 boundary.
func cutText(b []byte, size int) int {
	size = min(size, len(b))
	win := b[:size]
	for _, sep := range []string{"\n\n", "\n", " "} {
		if i := strings.LastIndex(string(win), sep); i > size/2 {
			return i + len(sep)
		}
	}
	for size > 0 && size < len(b) && b[size]&0xC0 == 0x80 {
		size--
	}
	if size == 0 {
		return min(len(b), textChunk)
	}
	return size
}

// shardWriter accumulates one split's tokens and writes full shards.
type shardWriter struct {
	dir, prefix string
	limit       int
	vocab       int
	docs        bool // write the document index (and mask)

	toks   []int32
	starts []int64
	mask   []bool
	masked bool // some token of the shard is not a target
	ndocs  int
	idx    int
	total  int
}

// addDoc adds one whole sample; a shard is written first if it would not
// fit.
func (w *shardWriter) addDoc(toks []int32, mask []bool) error {
	if len(w.toks) > 0 && len(w.toks)+len(toks) > w.limit {
		if err := w.flush(); err != nil {
			return err
		}
	}
	w.starts = append(w.starts, int64(len(w.toks)))
	w.toks = append(w.toks, toks...)
	if mask == nil {
		for range toks {
			w.mask = append(w.mask, true)
		}
	} else {
		w.mask = append(w.mask, mask...)
		for _, m := range mask {
			w.masked = w.masked || !m
		}
	}
	w.ndocs++
	return nil
}

// addStream appends tokens to the running stream, cutting shards anywhere.
func (w *shardWriter) addStream(toks []int32) error {
	if w.ndocs == 0 {
		w.ndocs = 1
	}
	for len(toks) > 0 {
		n := min(len(toks), w.limit-len(w.toks))
		w.toks = append(w.toks, toks[:n]...)
		toks = toks[n:]
		if len(w.toks) == w.limit {
			if err := w.flush(); err != nil {
				return err
			}
			w.ndocs = 1
		}
	}
	return nil
}

func (w *shardWriter) flush() error {
	if len(w.toks) == 0 {
		return nil
	}
	p := filepath.Join(w.dir, fmt.Sprintf("%s_%05d.bin", w.prefix, w.idx))
	var err error
	if w.docs {
		var mask []bool
		if w.masked {
			mask = w.mask
		}
		err = WriteDocShard(p, w.toks, w.vocab, w.starts, mask)
	} else {
		err = WriteShard(p, w.toks, w.vocab, w.ndocs)
	}
	if err != nil {
		return err
	}
	w.total += len(w.toks)
	w.idx++
	w.toks, w.starts, w.mask, w.masked, w.ndocs = w.toks[:0], w.starts[:0], w.mask[:0], false, 0
	return nil
}
