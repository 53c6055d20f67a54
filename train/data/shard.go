// Package data turns text into token shards on disk and serves training
// windows from them: a deterministic, seeded sampler of [B, T+1] token
// windows whose position can be saved and restored exactly, and sequential
// windows over a held-out validation stream.
//
// Shards written by Prepare (JSONL samples) also carry each document's
// start and a per-token loss mask; the sampler then packs whole samples
// into rows instead of cutting windows anywhere (see Sampler), and a token
// that is not a training target is served as Ignored(id) (see SplitWindow).
package data

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"

	"github.com/parallax-engine/parallax/internal/atomicfile"
)

// Shard file layout (little-endian):
//
//	offset  size  field
//	0       8     magic "PLXTOKS1"
//	8       4     version (1 or 2)
//	12      4     bytes per token: 2 (uint16) or 4 (uint32)
//	16      8     token count n
//	24      4     vocabulary size (every token is < this)
//	28      4     number of documents in the shard
//	32      4     CRC-32 (Castagnoli) of the token bytes
//	36      4     version 2: section flags (1: document index, 2: loss mask)
//	40      4     version 2: CRC-32 (Castagnoli) of the sections
//	44      20    reserved, zero
//	64      ...   the tokens
//
// Version 2 follows the tokens with its sections, in this order: the
// document index (one uint64 start offset per document, strictly
// increasing from 0) and the loss mask (ceil(n/8) bytes, bit i%8 of byte
// i/8 set when token i is a training target). Version 1 has neither.
const (
	shardMagic   = "PLXTOKS1"
	shardVersion = 1
	headerSize   = 64

	shardVersion2 = 2
	flagDocIndex  = 1
	flagLossMask  = 2
)

// maxShardVocab is the largest vocabulary a shard may record: every token
// (< vocab) is then an int32.
const maxShardVocab = 1 << 31

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Shard is a token stream loaded from one shard file.
type Shard struct {
	Path  string
	Vocab int // vocabulary size recorded by the writer
	Docs  int // number of documents concatenated in the shard
	u16   []uint16
	u32   []uint32
	// starts holds each document's first token (version 2 shards with a
	// document index; nil otherwise); mask the loss mask (nil: every token
	// is a target).
	starts []int64
	mask   []byte
}

// Len is the number of tokens.
func (s *Shard) Len() int {
	if s.u16 != nil {
		return len(s.u16)
	}
	return len(s.u32)
}

// At returns token i.
func (s *Shard) At(i int) int32 {
	if s.u16 != nil {
		return int32(s.u16[i])
	}
	return int32(s.u32[i])
}

// Copy writes tokens [start, start+len(dst)) into dst.
func (s *Shard) Copy(dst []int32, start int) {
	if s.u16 != nil {
		for i, t := range s.u16[start : start+len(dst)] {
			dst[i] = int32(t)
		}
		return
	}
	for i, t := range s.u32[start : start+len(dst)] {
		dst[i] = int32(t)
	}
}

// Tokens returns a copy of the whole stream.
func (s *Shard) Tokens() []int32 {
	out := make([]int32, s.Len())
	s.Copy(out, 0)
	return out
}

// DocStarts returns the first token of each document, or nil when the
// shard has no document index.
func (s *Shard) DocStarts() []int64 { return s.starts }

// Target reports whether token i is a training target by the shard's loss
// mask (true without a mask).
func (s *Shard) Target(i int) bool {
	return s.mask == nil || s.mask[i>>3]&(1<<(i&7)) != 0
}

// NewShard wraps tokens held in memory as a Shard (no file).
func NewShard(tokens []int32, vocab int) (*Shard, error) {
	s := &Shard{Vocab: vocab, Docs: 1, u32: make([]uint32, len(tokens))}
	for i, t := range tokens {
		if t < 0 || int(t) >= vocab {
			return nil, fmt.Errorf("token %d at %d is outside the vocabulary [0, %d)", t, i, vocab)
		}
		s.u32[i] = uint32(t)
	}
	return s, nil
}

// WriteShard writes tokens to path atomically (a temporary file in the same
// directory, synced, then renamed). Tokens are stored as uint16 when vocab
// fits, else uint32.
func WriteShard(path string, tokens []int32, vocab, docs int) error {
	return writeShard(path, tokens, vocab, docs, nil, nil)
}

// WriteDocShard writes a version 2 shard: tokens with the start of each
// document (strictly increasing from 0) and, unless mask is nil, the loss
// mask (one bool per token: is it a training target).
func WriteDocShard(path string, tokens []int32, vocab int, starts []int64, mask []bool) error {
	if len(starts) == 0 {
		return fmt.Errorf("write shard %s: no documents", path)
	}
	for i, s := range starts {
		if (i == 0 && s != 0) || (i > 0 && s <= starts[i-1]) || s >= int64(len(tokens)) {
			return fmt.Errorf("write shard %s: document %d starts at %d: starts must increase from 0 and lie within the %d tokens", path, i, s, len(tokens))
		}
	}
	if mask != nil && len(mask) != len(tokens) {
		return fmt.Errorf("write shard %s: the loss mask has %d entries for %d tokens", path, len(mask), len(tokens))
	}
	var bits []byte
	if mask != nil {
		bits = make([]byte, (len(mask)+7)/8)
		for i, m := range mask {
			if m {
				bits[i>>3] |= 1 << (i & 7)
			}
		}
	}
	return writeShard(path, tokens, vocab, len(starts), starts, bits)
}

func writeShard(path string, tokens []int32, vocab, docs int, starts []int64, bits []byte) error {
	if vocab <= 0 || int64(vocab) > maxShardVocab {
		return fmt.Errorf("write shard %s: vocabulary size %d out of range", path, vocab)
	}
	width := 4
	if vocab <= 1<<16 {
		width = 2
	}
	body := make([]byte, width*len(tokens))
	for i, t := range tokens {
		if t < 0 || int(t) >= vocab {
			return fmt.Errorf("write shard %s: token %d at position %d is outside the vocabulary [0, %d)", path, t, i, vocab)
		}
		if width == 2 {
			binary.LittleEndian.PutUint16(body[2*i:], uint16(t))
		} else {
			binary.LittleEndian.PutUint32(body[4*i:], uint32(t))
		}
	}
	head := make([]byte, headerSize)
	copy(head, shardMagic)
	binary.LittleEndian.PutUint32(head[8:], shardVersion)
	binary.LittleEndian.PutUint32(head[12:], uint32(width))
	binary.LittleEndian.PutUint64(head[16:], uint64(len(tokens)))
	binary.LittleEndian.PutUint32(head[24:], uint32(vocab))
	binary.LittleEndian.PutUint32(head[28:], uint32(docs))
	binary.LittleEndian.PutUint32(head[32:], crc32.Checksum(body, castagnoli))
	var extra []byte
	if starts != nil || bits != nil {
		flags := uint32(0)
		if starts != nil {
			flags |= flagDocIndex
			extra = make([]byte, 8*len(starts))
			for i, s := range starts {
				binary.LittleEndian.PutUint64(extra[8*i:], uint64(s))
			}
		}
		if bits != nil {
			flags |= flagLossMask
			extra = append(extra, bits...)
		}
		binary.LittleEndian.PutUint32(head[8:], shardVersion2)
		binary.LittleEndian.PutUint32(head[36:], flags)
		binary.LittleEndian.PutUint32(head[40:], crc32.Checksum(extra, castagnoli))
	}
	return WriteAtomic(path, func(w io.Writer) error {
		for _, b := range [][]byte{head, body, extra} {
			if _, err := w.Write(b); err != nil {
				return err
			}
		}
		return nil
	})
}

// ReadShard loads and verifies a shard file. The tokens are mapped from
// the file where the system allows it (they then stay in the page cache,
// not in the process's heap), else read.
func ReadShard(path string) (*Shard, error) {
	b, unmap, err := mapFile(path)
	if err != nil {
		return nil, fmt.Errorf("read shard: %w", err)
	}
	s, err := parseShard(path, b)
	if err != nil {
		unmap()
		return nil, err
	}
	s.keep(b, unmap)
	return s, nil
}

// parseShard checks a shard file's bytes and views its tokens in place
// (copies them on a big-endian host or an unaligned buffer).
func parseShard(path string, b []byte) (*Shard, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("read shard %s: %s", path, fmt.Sprintf(format, a...))
	}
	if len(b) < headerSize || string(b[:8]) != shardMagic {
		return nil, bad("not a token shard (no %q header)", shardMagic)
	}
	version := binary.LittleEndian.Uint32(b[8:])
	if version != shardVersion && version != shardVersion2 {
		return nil, bad("version %d is not supported (want %d or %d)", version, shardVersion, shardVersion2)
	}
	width := int(binary.LittleEndian.Uint32(b[12:]))
	if width != 2 && width != 4 {
		return nil, bad("token width %d bytes is invalid (want 2 or 4)", width)
	}
	n := binary.LittleEndian.Uint64(b[16:])
	vocab := binary.LittleEndian.Uint32(b[24:])
	if vocab == 0 || vocab > maxShardVocab {
		// Tokens are served as int32, negative ones marking ignored
		// targets: a larger vocabulary would let a token turn negative.
		return nil, bad("vocabulary size %d is out of range [1, %d]", vocab, maxShardVocab)
	}
	docs := binary.LittleEndian.Uint32(b[28:])
	flags := uint32(0)
	if version == shardVersion2 {
		flags = binary.LittleEndian.Uint32(b[36:])
		if flags&^(flagDocIndex|flagLossMask) != 0 {
			return nil, bad("unknown section flags %#x", flags)
		}
	}
	rest := uint64(len(b) - headerSize)
	if n > rest/uint64(width) {
		return nil, bad("truncated: header says %d tokens (%d bytes), file holds %d bytes", n, n*uint64(width), rest)
	}
	want := n * uint64(width)
	if flags&flagDocIndex != 0 {
		want += 8 * uint64(docs)
	}
	if flags&flagLossMask != 0 {
		want += (n + 7) / 8
	}
	if rest != want {
		return nil, bad("truncated or padded: header says %d tokens (%d bytes with the sections), file holds %d bytes", n, want, rest)
	}
	body := b[headerSize : headerSize+int(n)*width]
	if crc := crc32.Checksum(body, castagnoli); crc != binary.LittleEndian.Uint32(b[32:]) {
		return nil, bad("checksum mismatch: the file is corrupt")
	}
	extra := b[headerSize+len(body):]
	if version == shardVersion2 {
		if crc := crc32.Checksum(extra, castagnoli); crc != binary.LittleEndian.Uint32(b[40:]) {
			return nil, bad("checksum mismatch in the document index or loss mask: the file is corrupt")
		}
	}
	s := &Shard{Path: path, Vocab: int(vocab), Docs: int(docs)}
	viewTokens(s, body, width)
	if flags&flagDocIndex != 0 {
		if docs == 0 {
			return nil, bad("a document index with no documents")
		}
		s.starts = make([]int64, docs)
		for i := range s.starts {
			v := binary.LittleEndian.Uint64(extra[8*i:])
			if (i == 0 && v != 0) || (i > 0 && int64(v) <= s.starts[i-1]) || v >= n {
				return nil, bad("document %d starts at %d: starts must increase from 0 and lie within the %d tokens", i, v, n)
			}
			s.starts[i] = int64(v)
		}
		extra = extra[8*int(docs):]
	}
	if flags&flagLossMask != 0 {
		s.mask = extra
	}
	for i := range s.Len() {
		if tok := uint32(s.At(i)); tok >= uint32(s.Vocab) { // unsigned: the stored bits
			return nil, bad("token %d at position %d is outside the recorded vocabulary [0, %d)", tok, i, s.Vocab)
		}
	}
	return s, nil
}

// WriteAtomic creates path with the content fill writes: it writes a
// temporary file in the same directory, syncs it and renames it over path,
// so readers see either the old file or the complete new one.
func WriteAtomic(path string, fill func(w io.Writer) error) error {
	if err := atomicfile.Write(path, fill); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// ErrNoShards is returned when a dataset directory has no shard of a split.
var ErrNoShards = errors.New("no token shards")

// readWhole is mapFile's fallback: the file read into memory.
func readWhole(path string) ([]byte, func(), error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	return b, func() {}, nil
}
