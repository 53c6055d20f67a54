// Package data turns text into token shards on disk and serves training
// windows from them: a deterministic, seeded sampler of [B, T+1] token
// windows whose position can be saved and restored exactly, and sequential
// windows over a held-out validation stream.
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
//	8       4     version (1)
//	12      4     bytes per token: 2 (uint16) or 4 (uint32)
//	16      8     token count
//	24      4     vocabulary size (every token is < this)
//	28      4     number of documents in the shard
//	32      4     CRC-32 (Castagnoli) of the token bytes
//	36      28    reserved, zero
//	64      ...   the tokens
const (
	shardMagic   = "PLXTOKS1"
	shardVersion = 1
	headerSize   = 64
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Shard is a token stream loaded from one shard file.
type Shard struct {
	Path  string
	Vocab int // vocabulary size recorded by the writer
	Docs  int // number of documents concatenated in the shard
	u16   []uint16
	u32   []uint32
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
	if vocab <= 0 || int64(vocab) > 1<<32 {
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
	return WriteAtomic(path, func(w io.Writer) error {
		if _, err := w.Write(head); err != nil {
			return err
		}
		_, err := w.Write(body)
		return err
	})
}

// ReadShard loads and verifies a shard file.
func ReadShard(path string) (*Shard, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read shard: %w", err)
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("read shard %s: %s", path, fmt.Sprintf(format, a...))
	}
	if len(b) < headerSize || string(b[:8]) != shardMagic {
		return nil, bad("not a token shard (no %q header)", shardMagic)
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != shardVersion {
		return nil, bad("version %d is not supported (want %d)", v, shardVersion)
	}
	width := int(binary.LittleEndian.Uint32(b[12:]))
	if width != 2 && width != 4 {
		return nil, bad("token width %d bytes is invalid (want 2 or 4)", width)
	}
	n := binary.LittleEndian.Uint64(b[16:])
	body := b[headerSize:]
	if uint64(len(body)) != n*uint64(width) {
		return nil, bad("truncated or padded: header says %d tokens (%d bytes), file holds %d bytes", n, n*uint64(width), len(body))
	}
	if crc := crc32.Checksum(body, castagnoli); crc != binary.LittleEndian.Uint32(b[32:]) {
		return nil, bad("checksum mismatch: the file is corrupt")
	}
	s := &Shard{Path: path, Vocab: int(binary.LittleEndian.Uint32(b[24:])), Docs: int(binary.LittleEndian.Uint32(b[28:]))}
	if width == 2 {
		s.u16 = make([]uint16, n)
		for i := range s.u16 {
			s.u16[i] = binary.LittleEndian.Uint16(body[2*i:])
		}
	} else {
		s.u32 = make([]uint32, n)
		for i := range s.u32 {
			s.u32[i] = binary.LittleEndian.Uint32(body[4*i:])
		}
	}
	for i := range s.Len() {
		if int(s.At(i)) >= s.Vocab {
			return nil, bad("token %d at position %d is outside the recorded vocabulary [0, %d)", s.At(i), i, s.Vocab)
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
