package data

import (
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fuzzShardSeeds returns shard files of every kind Prepare and Build write:
// version 1 (16- and 32-bit tokens), version 2 with a document index, with
// and without a loss mask.
func fuzzShardSeeds(tb testing.TB) [][]byte {
	tb.Helper()
	dir := tb.TempDir()
	var out [][]byte
	add := func(write func(path string) error) {
		path := filepath.Join(dir, "s.bin")
		if err := write(path); err != nil {
			tb.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, b)
	}
	add(func(p string) error { return WriteShard(p, seqTokens(40, 300), 300, 2) })
	add(func(p string) error { return WriteShard(p, seqTokens(9, 70000), 70000, 1) })
	add(func(p string) error { return WriteShard(p, nil, 5, 0) })
	add(func(p string) error { return WriteDocShard(p, seqTokens(30, 258), 258, []int64{0, 7, 8, 20}, nil) })
	mask := make([]bool, 21)
	for i := range mask {
		mask[i] = i%3 != 0
	}
	add(func(p string) error { return WriteDocShard(p, seqTokens(21, 1<<20), 1<<20, []int64{0, 5}, mask) })
	return out
}

// fixShardCRCs rewrites the checksums of a shard's header to match its
// contents, where the header's sizes fit the file, so that the fuzzer gets
// past them to the checks behind.
func fixShardCRCs(b []byte) {
	if len(b) < headerSize {
		return
	}
	width := uint64(binary.LittleEndian.Uint32(b[12:]))
	n := binary.LittleEndian.Uint64(b[16:])
	rest := uint64(len(b) - headerSize)
	if width != 2 && width != 4 || n > rest/width {
		return
	}
	body := b[headerSize : headerSize+n*width]
	binary.LittleEndian.PutUint32(b[32:], crc32.Checksum(body, castagnoli))
	binary.LittleEndian.PutUint32(b[40:], crc32.Checksum(b[headerSize+len(body):], castagnoli))
}

// FuzzReadShard reads fuzzed shard files (with their checksums fixed up,
// or not). A shard read must hold what its header says, every token inside
// its vocabulary, document starts increasing from 0 inside the tokens; be
// the same read from a file (mapped) and from an unaligned buffer (copied);
// come back the same through WriteShard or WriteDocShard; and serve
// training and evaluation windows of in-vocabulary tokens.
func FuzzReadShard(f *testing.F) {
	for _, b := range fuzzShardSeeds(f) {
		f.Add(b, false, uint8(3))
		f.Add(b, true, uint8(0))
	}
	f.Add([]byte(shardMagic), false, uint8(1))
	dir := f.TempDir()
	path, again := filepath.Join(dir, "in.bin"), filepath.Join(dir, "again.bin")
	f.Fuzz(func(t *testing.T, b []byte, fixCRC bool, seq uint8) {
		if len(b) > 1<<20 {
			t.Skip()
		}
		if fixCRC {
			fixShardCRCs(b)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := ReadShard(path)
		unaligned := append([]byte{0}, b...)[1:]
		s2, err2 := parseShard(path, unaligned)
		if (err == nil) != (err2 == nil) {
			t.Fatalf("from the file: %v; from a buffer: %v", err, err2)
		}
		if err != nil {
			if s != nil || !strings.HasPrefix(err.Error(), "read shard ") {
				t.Fatalf("a failed read (%v) returned a shard, or its error does not say so", err)
			}
			return
		}
		if !slices.Equal(s.Tokens(), s2.Tokens()) || !slices.Equal(s.DocStarts(), s2.DocStarts()) || s.Vocab != s2.Vocab || s.Docs != s2.Docs {
			t.Fatalf("the file and the buffer read differently")
		}
		n := binary.LittleEndian.Uint64(b[16:])
		if uint64(s.Len()) != n || s.Vocab != int(binary.LittleEndian.Uint32(b[24:])) || s.Docs != int(binary.LittleEndian.Uint32(b[28:])) {
			t.Fatalf("read %d tokens, vocabulary %d, %d documents; the header says otherwise", s.Len(), s.Vocab, s.Docs)
		}
		toks := s.Tokens()
		for i, tok := range toks {
			if tok < 0 || int(tok) >= s.Vocab {
				t.Fatalf("token %d at %d is outside the vocabulary [0, %d)", tok, i, s.Vocab)
			}
		}
		starts := s.DocStarts()
		for i, st := range starts {
			if i == 0 && st != 0 || i > 0 && st <= starts[i-1] || st >= int64(s.Len()) {
				t.Fatalf("document starts %v for %d tokens", starts, s.Len())
			}
		}
		if starts != nil && len(starts) != s.Docs {
			t.Fatalf("%d document starts for %d documents", len(starts), s.Docs)
		}
		mask := make([]bool, s.Len())
		for i := range mask {
			mask[i] = s.Target(i)
		}

		// Written again, it reads the same. The writer takes a loss mask
		// only with a document index, which is where the sampler uses it.
		if starts != nil {
			err = WriteDocShard(again, toks, s.Vocab, starts, mask)
		} else {
			err = WriteShard(again, toks, s.Vocab, s.Docs)
		}
		if err != nil {
			t.Fatalf("the shard read does not write: %v", err)
		}
		r, err := ReadShard(again)
		if err != nil {
			t.Fatalf("the shard written does not read: %v", err)
		}
		if !slices.Equal(r.Tokens(), toks) || !slices.Equal(r.DocStarts(), starts) || r.Vocab != s.Vocab || r.Docs != s.Docs {
			t.Fatalf("written and read again, the shard changed")
		}
		for i := range mask {
			if starts != nil && r.Target(i) != mask[i] {
				t.Fatalf("written and read again, the loss mask of token %d changed", i)
			}
		}

		T := 1 + int(seq%16)
		check := func(w []int32, what string) {
			for j, v := range w {
				if tok := TokenOf(v); tok < 0 || int(tok) >= s.Vocab {
					t.Fatalf("%s entry %d is token %d, outside the vocabulary [0, %d)", what, j, tok, s.Vocab)
				}
				if v < 0 && starts == nil {
					t.Fatalf("%s entry %d is an ignored target in an unpacked shard", what, j)
				}
			}
		}
		for _, w := range EvalWindows([]*Shard{s}, T, 8) {
			check(w, "evaluation window")
		}
		sm, err := NewSampler([]*Shard{s}, T, uint64(seq))
		if err != nil {
			return // too short, or no samples
		}
		buf := make([]int32, 3*(T+1))
		for range 3 {
			if err := sm.Next(buf, 3); err != nil {
				t.Fatal(err)
			}
			check(buf, "training window")
		}
	})
}
