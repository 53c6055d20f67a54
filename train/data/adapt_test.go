package data

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// byteEnc tokenizes bytes as ids; "<s>" and "</s>" (the test template's
// special tokens) are ids 256 and 257.
func byteEnc(s string) ([]int32, error) {
	var out []int32
	for len(s) > 0 {
		switch {
		case strings.HasPrefix(s, "<s>"):
			out, s = append(out, 256), s[3:]
		case strings.HasPrefix(s, "</s>"):
			out, s = append(out, 257), s[4:]
		default:
			out, s = append(out, int32(s[0])), s[1:]
		}
	}
	return out, nil
}

// testTemplate renders "<s>role\ncontent</s>\n" per message and "<s>assistant\n"
// as the generation prompt, like ChatML.
type testTemplate struct{ rewrite bool }

func (t testTemplate) Render(msgs []Message, gen bool) (string, error) {
	var b strings.Builder
	for i, m := range msgs {
		c := m.Content
		if t.rewrite && m.Role == "assistant" && i < len(msgs)-1 {
			c = "(earlier)"
		}
		fmt.Fprintf(&b, "<s>%s\n%s</s>\n", m.Role, c)
	}
	if gen {
		b.WriteString("<s>assistant\n")
	}
	return b.String(), nil
}

func TestChatTokensMask(t *testing.T) {
	msgs := []Message{{"system", "S"}, {"user", "Hi"}, {"assistant", "Yo"}, {"user", "Q"}, {"assistant", "A!"}}
	toks, mask, err := ChatTokens(testTemplate{}, byteEnc, msgs)
	if err != nil {
		t.Fatal(err)
	}
	var trained strings.Builder
	for i, m := range mask {
		if m {
			if toks[i] == 257 {
				trained.WriteString("</s>")
			} else {
				trained.WriteByte(byte(toks[i]))
			}
		} else {
			trained.WriteByte('.')
		}
	}
	// Exactly the assistant contents and their closing "</s>\n" are trained.
	n := func(s string) int { t, _ := byteEnc(s); return len(t) }
	want := strings.Repeat(".", n("<s>system\nS</s>\n<s>user\nHi</s>\n<s>assistant\n")) + "Yo</s>\n" +
		strings.Repeat(".", n("<s>user\nQ</s>\n<s>assistant\n")) + "A!</s>\n"
	got := trained.String()
	if got != want {
		t.Errorf("trained tokens\n got %q\nwant %q", got, want)
	}
	full, _ := testTemplate{}.Render(msgs, false)
	all, _ := byteEnc(full)
	if !slices.Equal(all, toks) {
		t.Error("the tokens are not those of the whole rendering")
	}
	if _, _, err := ChatTokens(testTemplate{rewrite: true}, byteEnc, msgs); err == nil || !strings.Contains(err.Error(), "rewrites") {
		t.Errorf("a template that rewrites earlier turns: %v", err)
	}
}

func TestParseSamplesErrors(t *testing.T) {
	cases := []struct {
		line, format, want string
	}{
		{`{"text": "ok"}`, FormatText, ""},
		{`not json`, FormatText, "not valid JSON"},
		{`{"txt": "x"}`, FormatText, `no "text" key`},
		{`{"text": 3}`, FormatText, "not a string"},
		{`{"text": ""}`, FormatText, "empty"},
		{`["text"]`, FormatText, "want a JSON object"},
		{`{"messages": [{"role": "user", "content": "x"}]}`, FormatChat, "no assistant turn"},
		{`{"messages": []}`, FormatChat, "empty"},
		{`{"messages": {}}`, FormatChat, "not a list"},
		{`{"messages": [{"role": "assistant"}]}`, FormatChat, `"content"`},
		{`{"messages": [{"role": 1, "content": "x"}]}`, FormatChat, "not a string"},
		{`{"messages": [{"role": "assistant", "content": "x"}]}`, FormatChat, ""},
		{`{"text": "x"}`, FormatChat, `no "messages" key`},
	}
	for _, c := range cases {
		var err error
		if c.format == FormatText {
			_, err = ParseTextSample([]byte(c.line))
		} else {
			_, err = ParseChatSample([]byte(c.line))
		}
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s %s: error %v, want %q", c.format, c.line, err, c.want)
		}
	}
}

func TestJSONLReaderNamesLine(t *testing.T) {
	in := "{\"text\": \"a\"}\n\n{\"text\": \"b\"}\n{\"text\": 5}\n"
	r, _ := NewJSONLReader(strings.NewReader(in), "f.jsonl", FormatAuto)
	for range 2 {
		if _, err := r.Next(); err != nil {
			t.Fatal(err)
		}
	}
	_, err := r.Next()
	if err == nil || !strings.HasPrefix(err.Error(), "f.jsonl:4: ") {
		t.Errorf("error %v, want one at f.jsonl:4", err)
	}
}

func TestPackRows(t *testing.T) {
	// Documents of 3, 4, 2 and 9 tokens in rows of T+1 = 6.
	lens := []int{3, 4, 2, 9}
	var toks []int32
	var starts []int64
	for d, n := range lens {
		starts = append(starts, int64(len(toks)))
		for i := range n {
			toks = append(toks, int32(10*(d+1)+i))
		}
	}
	p := filepath.Join(t.TempDir(), "s.bin")
	if err := WriteDocShard(p, toks, 100, starts, nil); err != nil {
		t.Fatal(err)
	}
	s, err := ReadShard(p)
	if err != nil {
		t.Fatal(err)
	}
	I := Ignored
	want := [][]int32{
		{I(10), 11, 12, I(0), I(0), I(0)}, // doc 0; doc 1 would straddle
		{I(20), 21, 22, 23, I(30), 31},    // docs 1 and 2
		{I(40), 41, 42, 43, 44, 45},       // doc 3, first chunk
		{45, 46, 47, 48, I(0), I(0)},      // doc 3, second chunk (stride T)
	}
	got := EvalWindows([]*Shard{s}, 5, 0)
	if len(got) != len(want) {
		t.Fatalf("%d rows, want %d: %v", len(got), len(want), got)
	}
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("row %d: %v, want %v", i, got[i], want[i])
		}
	}
	in, tgt := make([]int32, 5), make([]int32, 5)
	SplitWindow(got[1], in, tgt, -100)
	if !slices.Equal(in, []int32{20, 21, 22, 23, 30}) || !slices.Equal(tgt, []int32{21, 22, 23, -100, 31}) {
		t.Errorf("split: in %v tgt %v", in, tgt)
	}
	sm, err := NewSampler([]*Shard{s}, 5, 3)
	if err != nil {
		t.Fatal(err)
	}
	if sm.WindowsPerEpoch() != 4 {
		t.Errorf("%d windows per epoch, want 4", sm.WindowsPerEpoch())
	}
	buf := make([]int32, 4*6)
	sm.Next(buf, 4)
	var rows [][]int32
	for r := range 4 {
		rows = append(rows, buf[r*6:(r+1)*6])
	}
	for _, w := range want {
		if !slices.ContainsFunc(rows, func(r []int32) bool { return slices.Equal(r, w) }) {
			t.Errorf("an epoch does not visit row %v", w)
		}
	}
}

func TestShardV2Corruption(t *testing.T) {
	p := filepath.Join(t.TempDir(), "s.bin")
	toks := seqTokens(50, 300)
	mask := make([]bool, 50)
	mask[7] = true
	if err := WriteDocShard(p, toks, 300, []int64{0, 20}, mask); err != nil {
		t.Fatal(err)
	}
	s, err := ReadShard(p)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.DocStarts(), []int64{0, 20}) || !s.Target(7) || s.Target(8) {
		t.Error("sections did not round-trip")
	}
	b, _ := os.ReadFile(p)
	b[len(b)-1] ^= 0x80
	os.WriteFile(p, b, 0o644)
	if _, err := ReadShard(p); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Errorf("flipped mask bit: %v", err)
	}
	if err := WriteDocShard(p, toks, 300, []int64{0, 60}, nil); err == nil {
		t.Error("a document start past the tokens was written")
	}
}

func TestPrepare(t *testing.T) {
	dir := t.TempDir()
	o := PrepareOptions{Encode: byteEnc, Renderer: testTemplate{}, Vocab: 258, EOT: 0, ValFrac: 0}
	d, err := Prepare("testdata/chat.jsonl", filepath.Join(dir, "chat"), o)
	if err != nil {
		t.Fatal(err)
	}
	if d.Meta.Format != FormatChat || d.Meta.TrainSamples != 2 || len(d.Train) != 1 {
		t.Fatalf("meta %+v", d.Meta)
	}
	sh := d.Train[0]
	if !slices.Equal(sh.DocStarts()[:1], []int64{0}) || len(sh.DocStarts()) != 2 {
		t.Errorf("document starts %v", sh.DocStarts())
	}
	// The trained tokens of sample 0 are "Hello.</s>\n".
	var tr []byte
	for i := range int(sh.DocStarts()[1]) {
		if sh.Target(i) {
			v := sh.At(i)
			if v == 257 {
				tr = append(tr, '|')
			} else {
				tr = append(tr, byte(v))
			}
		}
	}
	if string(tr) != "Hello.|\n" {
		t.Errorf("trained tokens of sample 0: %q", tr)
	}

	o.ValFrac = 0.5
	d, err = Prepare("testdata/text.jsonl", filepath.Join(dir, "text"), o)
	if err != nil {
		t.Fatal(err)
	}
	if d.Meta.Format != FormatText || d.Meta.TrainSamples != 2 || d.Meta.ValSamples != 1 {
		t.Errorf("meta %+v", d.Meta)
	}
	if d.Train[0].mask != nil {
		t.Error("text samples got a loss mask")
	}

	txt := filepath.Join(dir, "in.txt")
	os.WriteFile(txt, []byte(strings.Repeat("Some words here.\n\n", 40000)), 0o644)
	o.ValFrac = 0.5
	d, err = Prepare(txt, filepath.Join(dir, "plain"), o)
	if err != nil {
		t.Fatal(err)
	}
	if d.Meta.TrainTokens+d.Meta.ValTokens != 18*40000+1 || d.Meta.ValTokens == 0 || d.Train[0].DocStarts() != nil {
		t.Errorf("plain text: %+v", d.Meta)
	}
}

func TestPrepareBadInputLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	cases := map[string]string{
		"bad.jsonl":    "{\"text\": \"a\"}\n{\"text\": \"b\"\n",
		"noasst.jsonl": "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}\n",
		"empty.jsonl":  "\n\n",
	}
	want := map[string]string{"bad.jsonl": "bad.jsonl:2: not valid JSON", "noasst.jsonl": "noasst.jsonl:1: no assistant turn", "empty.jsonl": "no samples"}
	for name, body := range cases {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(body), 0o644)
		out := filepath.Join(dir, "out-"+name)
		_, err := Prepare(p, out, PrepareOptions{Encode: byteEnc, Renderer: testTemplate{}, Vocab: 258, EOT: 0})
		if err == nil || !strings.Contains(err.Error(), want[name]) {
			t.Errorf("%s: error %v, want %q", name, err, want[name])
		}
		if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: the output directory exists after a failure", name)
		}
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".*tmp*"))
	if len(left) != 0 {
		t.Errorf("staging left behind: %v", left)
	}
	busy := filepath.Join(dir, "busy")
	os.MkdirAll(busy, 0o755)
	os.WriteFile(filepath.Join(busy, "keep.txt"), []byte("x"), 0o644)
	if _, err := Prepare("testdata/text.jsonl", busy, PrepareOptions{Encode: byteEnc, Vocab: 258, EOT: 0}); err == nil {
		t.Error("a non-dataset directory was replaced")
	}
}

func FuzzParseTextSample(f *testing.F) {
	for _, s := range []string{`{"text": "x"}`, `{"text": 1}`, `{`, `[]`, `{"text": "\u00e9"}`, "\xff"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseTextSample(b)
		if err == nil && s == "" {
			t.Error("accepted an empty text")
		}
	})
}

func FuzzParseChatSample(f *testing.F) {
	for _, s := range []string{
		`{"messages": [{"role": "assistant", "content": "x"}]}`,
		`{"messages": [{"role": "user", "content": "x"}]}`,
		`{"messages": [{"role": "", "content": 1}]}`, `{"messages": null}`, `{}`, `7`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		msgs, err := ParseChatSample(b)
		if err != nil {
			return
		}
		if !slices.ContainsFunc(msgs, func(m Message) bool { return m.Role == "assistant" }) {
			t.Error("accepted a sample without an assistant turn")
		}
		if _, _, err := ChatTokens(testTemplate{}, byteEnc, msgs); err != nil {
			t.Errorf("a valid sample failed to render: %v", err)
		}
	})
}

func FuzzJSONLReader(f *testing.F) {
	f.Add([]byte("{\"text\": \"a\"}\n{\"text\": \"b\"}\n"), false)
	f.Add([]byte("{\"messages\": [{\"role\": \"assistant\", \"content\": \"x\"}]}\r\n\n"), true)
	f.Fuzz(func(t *testing.T, b []byte, chat bool) {
		format := FormatAuto
		if chat {
			format = FormatChat
		}
		r, err := NewJSONLReader(strings.NewReader(string(b)), "f", format)
		if err != nil {
			t.Fatal(err)
		}
		for range 1000 {
			s, err := r.Next()
			if err != nil {
				if err.Error() != "EOF" && !strings.HasPrefix(err.Error(), "f:") {
					t.Errorf("error without file and line: %v", err)
				}
				return
			}
			if s.Line < 1 {
				t.Errorf("line %d", s.Line)
			}
		}
	})
}
