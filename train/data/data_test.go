package data

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func seqTokens(n, vocab int) []int32 {
	t := make([]int32, n)
	for i := range t {
		t[i] = int32((i*7 + i/13) % vocab)
	}
	return t
}

func TestShardRoundTrip(t *testing.T) {
	dir := t.TempDir()
	for _, vocab := range []int{300, 1 << 16, 70000} {
		toks := seqTokens(1000, vocab)
		p := filepath.Join(dir, "s.bin")
		if err := WriteShard(p, toks, vocab, 3); err != nil {
			t.Fatal(err)
		}
		s, err := ReadShard(p)
		if err != nil {
			t.Fatal(err)
		}
		if s.Vocab != vocab || s.Docs != 3 || !slices.Equal(s.Tokens(), toks) {
			t.Fatalf("vocab %d: round trip differs", vocab)
		}
		st, _ := os.Stat(p)
		width := 2
		if vocab > 1<<16 {
			width = 4
		}
		if st.Size() != int64(headerSize+width*len(toks)) {
			t.Errorf("vocab %d: file size %d, want %d", vocab, st.Size(), headerSize+width*len(toks))
		}
	}
	if err := WriteShard(filepath.Join(dir, "x.bin"), []int32{5, 300}, 300, 1); err == nil {
		t.Error("a token outside the vocabulary was written")
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".*tmp*"))
	if len(left) != 0 {
		t.Errorf("temporary files left behind: %v", left)
	}
}

func TestShardCorruptionRefused(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "s.bin")
	if err := WriteShard(p, seqTokens(100, 500), 500, 1); err != nil {
		t.Fatal(err)
	}
	good, _ := os.ReadFile(p)
	cases := map[string]func([]byte) []byte{
		"flipped byte": func(b []byte) []byte { b[headerSize+10] ^= 1; return b },
		"truncated":    func(b []byte) []byte { return b[:len(b)-3] },
		"bad magic":    func(b []byte) []byte { b[0] = 'X'; return b },
		"empty":        func(b []byte) []byte { return nil },
	}
	want := map[string]string{"flipped byte": "checksum", "truncated": "truncated", "bad magic": "not a token shard", "empty": "not a token shard"}
	for name, f := range cases {
		b := f(slices.Clone(good))
		os.WriteFile(p, b, 0o644)
		_, err := ReadShard(p)
		if err == nil || !strings.Contains(err.Error(), want[name]) {
			t.Errorf("%s: got error %v, want one mentioning %q", name, err, want[name])
		}
	}
}

func TestBuildAndOpen(t *testing.T) {
	dir := t.TempDir()
	enc := func(s string) ([]int32, error) {
		out := make([]int32, len(s))
		for i := range s {
			out[i] = int32(s[i])
		}
		return out, nil
	}
	train := []Document{{"a", strings.Repeat("abc", 50)}, {"b", strings.Repeat("xy", 40)}}
	val := []Document{{"c", "validation text"}}
	d, err := Build(dir, enc, train, val, BuildOptions{Vocab: 256, EOT: 0, ShardTokens: 64})
	if err != nil {
		t.Fatal(err)
	}
	if d.Meta.TrainTokens != 150+1+80+1 || d.Meta.ValTokens != 16 {
		t.Fatalf("token counts %d/%d", d.Meta.TrainTokens, d.Meta.ValTokens)
	}
	if len(d.Train) != 4 || len(d.Val) != 1 {
		t.Fatalf("got %d train and %d val shards, want 4 and 1", len(d.Train), len(d.Val))
	}
	var all []int32
	for _, s := range d.Train {
		all = append(all, s.Tokens()...)
	}
	a, _ := enc(train[0].Text)
	if !slices.Equal(all[:150], a) || all[150] != 0 {
		t.Error("train stream does not start with document a and its separator")
	}
	os.Remove(filepath.Join(dir, "train_00002.bin"))
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("opening a dataset with a missing shard: %v", err)
	}
}

func TestSamplerDeterministicAndResumable(t *testing.T) {
	s1, _ := NewShard(seqTokens(5000, 1000), 1000)
	s2, _ := NewShard(seqTokens(777, 1000), 1000)
	shards := []*Shard{s1, s2}
	const T, B = 16, 4
	draw := func(s *Sampler, n int) [][]int32 {
		var out [][]int32
		for range n {
			buf := make([]int32, B*(T+1))
			if err := s.Next(buf, B); err != nil {
				t.Fatal(err)
			}
			out = append(out, buf)
		}
		return out
	}
	a, _ := NewSampler(shards, T, 42)
	steps := 2*a.WindowsPerEpoch()/B + 7 // crosses two epoch boundaries
	want := draw(a, steps)

	b, _ := NewSampler(shards, T, 42)
	got := draw(b, 50)
	st := b.State()
	c, _ := NewSampler(shards, T, 1) // a different seed, overwritten by Restore
	if err := c.Restore(st); err != nil {
		t.Fatal(err)
	}
	got = append(got, draw(c, steps-50)...)
	for i := range want {
		if !slices.Equal(want[i], got[i]) {
			t.Fatalf("batch %d differs after restoring the state at batch 50", i)
		}
	}
	if st := c.State(); st.Epoch != 2 {
		t.Errorf("epoch %d, want 2", st.Epoch)
	}

	d, _ := NewSampler(shards, T, 43)
	if slices.Equal(draw(d, 1)[0], want[0]) {
		t.Error("different seeds gave the same first batch")
	}
	// Windows are real slices of the stream: consecutive tokens of a shard.
	for r := range B {
		w := want[0][r*(T+1) : (r+1)*(T+1)]
		found := false
		for _, sh := range shards {
			all := sh.Tokens()
			for st := 0; st+T+1 <= len(all) && !found; st++ {
				found = slices.Equal(all[st:st+T+1], w)
			}
		}
		if !found {
			t.Fatalf("window %d is not a slice of any shard", r)
		}
	}
}

func TestSamplerCoversEpoch(t *testing.T) {
	s, _ := NewShard(seqTokens(1601, 50000), 50000)
	sm, _ := NewSampler([]*Shard{s}, 16, 7)
	n := sm.WindowsPerEpoch()
	seen := map[int32]int{}
	buf := make([]int32, 17)
	for range n {
		sm.Next(buf, 1)
		seen[buf[0]]++
	}
	if len(seen) < n*9/10 { // first tokens are (nearly) unique in this stream
		t.Errorf("an epoch visited %d distinct windows of %d", len(seen), n)
	}
	if st := sm.State(); st.Epoch != 0 || st.Pos != n {
		t.Errorf("state after one epoch: %+v", st)
	}
}

func TestSamplerTooShort(t *testing.T) {
	s, _ := NewShard(seqTokens(10, 50), 50)
	if _, err := NewSampler([]*Shard{s}, 16, 1); err == nil {
		t.Error("a stream shorter than one window was accepted")
	}
}

func TestEvalWindows(t *testing.T) {
	s, _ := NewShard(seqTokens(100, 50), 50)
	w := EvalWindows([]*Shard{s}, 10, 0)
	if len(w) != 9 || w[1][0] != s.At(10) || w[0][10] != s.At(10) {
		t.Errorf("got %d windows", len(w))
	}
	if len(EvalWindows([]*Shard{s}, 10, 3)) != 3 {
		t.Error("limit ignored")
	}
}

func TestSplitDocuments(t *testing.T) {
	tr, va := SplitDocuments([]Document{{"a", "x"}, {"b", "y"}, {"c", "z"}}, 0.1)
	if len(tr) != 2 || len(va) != 1 || va[0].Name != "c" {
		t.Errorf("multi-document split: %v / %v", tr, va)
	}
	text := strings.Repeat("para one two three.\n\n", 100)
	tr, va = SplitDocuments([]Document{{"a", text}}, 0.1)
	if tr[0].Text+va[0].Text != text || !strings.HasPrefix(va[0].Text, "para") {
		t.Errorf("single-document split lost text or did not cut at a paragraph")
	}
}
