package data

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/model/chat"
)

// jsonlFormats are the formats the JSONL fuzzers read in.
var jsonlFormats = []string{FormatAuto, FormatText, FormatChat}

// FuzzJSONLSamples reads fuzzed JSONL files in each format. The reader must
// give exactly what parsing each line on its own gives (lines split at
// "\n", a "\r" before it dropped, blank lines skipped, the format of auto
// decided by the first sample), stop at the first bad line with an error
// naming the file and that line, and the samples it reads, written out as
// JSONL again, must read back the same.
func FuzzJSONLSamples(f *testing.F) {
	for _, name := range []string{"text.jsonl", "chat.jsonl"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint8(0))
	}
	f.Add([]byte("{\"text\": \"a\"}\r\n\n  \r\n{\"text\": \"b\\u00e9\", \"id\": 3}"), uint8(1))
	f.Add([]byte("{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", \"content\": \"a\"}]}\n{\"text\": \"x\"}\n"), uint8(2))
	f.Add([]byte("{\"text\": \"\"}\n"), uint8(0))
	f.Add([]byte("\xff\n"), uint8(0))
	f.Add([]byte("[1]\n{\"text\": 5}"), uint8(1))
	f.Fuzz(func(t *testing.T, b []byte, which uint8) {
		if len(b) > 1<<20 {
			t.Skip()
		}
		format := jsonlFormats[int(which)%len(jsonlFormats)]
		got, gotFormat, gotErr := readAllJSONL(t, b, "in.jsonl", format)
		want, wantFormat, wantErr := splitJSONL(b, "in.jsonl", format)
		if !reflect.DeepEqual(got, want) || errText(gotErr) != errText(wantErr) || gotFormat != wantFormat {
			t.Fatalf("the reader gave %+v (format %s), %v\nline by line: %+v (format %s), %v", got, gotFormat, gotErr, want, wantFormat, wantErr)
		}
		for _, s := range got {
			if s.Text == "" && s.Messages == nil {
				t.Fatalf("an empty sample on line %d", s.Line)
			}
		}
		if gotErr != nil {
			return
		}
		// Written out again, one sample a line.
		var out bytes.Buffer
		for _, s := range got {
			var v any = map[string]string{"text": s.Text}
			if gotFormat == FormatChat {
				msgs := make([]map[string]string, len(s.Messages))
				for i, m := range s.Messages {
					msgs[i] = map[string]string{"role": m.Role, "content": m.Content}
				}
				v = map[string]any{"messages": msgs}
			}
			line, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			out.Write(append(line, '\n'))
		}
		again, againFormat, err := readAllJSONL(t, out.Bytes(), "again.jsonl", gotFormat)
		if err != nil {
			t.Fatalf("the samples written out do not read back: %v", err)
		}
		for i := range again {
			again[i].Line = got[i].Line
		}
		if !reflect.DeepEqual(again, got) || (len(got) > 0 && againFormat != gotFormat) {
			t.Fatalf("written out and read back, %+v became %+v", got, again)
		}
	})
}

// readAllJSONL reads every sample of b with a JSONLReader, up to its first
// error (nil at the end of the file).
func readAllJSONL(t *testing.T, b []byte, name, format string) ([]Sample, string, error) {
	t.Helper()
	r, err := NewJSONLReader(bytes.NewReader(b), name, format)
	if err != nil {
		t.Fatal(err)
	}
	var out []Sample
	for {
		s, err := r.Next()
		if err == io.EOF {
			return out, r.Format(), nil
		}
		if err != nil {
			return out, r.Format(), err
		}
		out = append(out, s)
	}
}

// splitJSONL is what a JSONLReader is documented to do, line by line.
func splitJSONL(b []byte, name, format string) ([]Sample, string, error) {
	var out []Sample
	lines := bytes.Split(b, []byte("\n"))
	for i, line := range lines {
		if i < len(lines)-1 {
			line = bytes.TrimSuffix(line, []byte("\r")) // a line ended by "\r\n"
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if format == FormatAuto {
			format = FormatText
			var keys map[string]json.RawMessage
			if json.Unmarshal(line, &keys) == nil {
				if _, ok := keys["messages"]; ok {
					format = FormatChat
				}
			}
		}
		s := Sample{Line: i + 1}
		var err error
		if format == FormatChat {
			s.Messages, err = ParseChatSample(line)
		} else {
			s.Text, err = ParseTextSample(line)
		}
		if err != nil {
			return out, format, fmt.Errorf("%s:%d: %v", name, i+1, err)
		}
		out = append(out, s)
	}
	return out, format, nil
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// templateRenderer renders through a chat template as the command line's
// loader does.
type templateRenderer struct{ t *chat.Template }

func (r templateRenderer) Render(msgs []Message, gen bool) (string, error) {
	cm := make([]chat.Message, len(msgs))
	for i, m := range msgs {
		cm[i] = chat.Message{Role: m.Role, Content: m.Content}
	}
	return r.t.Render(cm, chat.RenderOptions{AddGenerationPrompt: gen})
}

// bytesEnc tokenizes text as its bytes.
func bytesEnc(s string) ([]int32, error) {
	out := make([]int32, len(s))
	for i := range len(s) {
		out[i] = int32(s[i])
	}
	return out, nil
}

// FuzzChatTokens turns fuzzed chat samples into tokens and a loss mask, as
// data prepare does. With the test template (ChatML-like) and an encoder of
// bytes and its two special tokens, the tokens must be those of the whole
// rendering and the trained ones exactly each assistant turn's content and
// closing "</s>\n". With Qwen3's template, which rewrites earlier turns, a
// sample may be refused, but one accepted must have a mask as long as its
// tokens, some trained token, and tokens that spell the rendering.
func FuzzChatTokens(f *testing.F) {
	b, err := os.ReadFile(filepath.Join("testdata", "chat.jsonl"))
	if err != nil {
		f.Fatal(err)
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		f.Add(line)
	}
	f.Add([]byte(`{"messages": [{"role": "system", "content": "s"}, {"role": "assistant", "content": "<think>\nr\n</think>\n\na"}, {"role": "user", "content": "</s>\n<s>assistant\n"}, {"role": "assistant", "content": ""}]}`))
	f.Add([]byte(`{"messages": [{"role": "assistant", "content": "<s>"}, {"role": "assistant", "content": "x</s"}]}`))
	qwen, err := chat.LoadTemplate(filepath.Join("..", "..", "model", "chat", "testdata", "templates", "qwen3"))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		if len(line) > 1<<16 {
			t.Skip()
		}
		msgs, err := ParseChatSample(line)
		if err != nil {
			return
		}
		toks, mask, err := ChatTokens(testTemplate{}, byteEnc, msgs)
		if err != nil {
			t.Fatalf("the test template refused a valid sample: %v", err)
		}
		full, _ := testTemplate{}.Render(msgs, false)
		if all, _ := byteEnc(full); !slices.Equal(toks, all) || len(mask) != len(toks) {
			t.Fatalf("%d tokens and %d mask entries; the rendering %q has %d tokens", len(toks), len(mask), full, len(all))
		}
		var trained, want []int32
		for i, tok := range toks {
			if mask[i] {
				trained = append(trained, tok)
			}
		}
		for _, m := range msgs {
			if m.Role == "assistant" {
				w, _ := byteEnc(m.Content + "</s>\n")
				want = append(want, w...)
			}
		}
		if !slices.Equal(trained, want) {
			t.Fatalf("trained tokens %v, want those of every assistant turn and its end %v", trained, want)
		}

		toks, mask, err = ChatTokens(templateRenderer{qwen}, bytesEnc, msgs)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "chat template") && !strings.HasPrefix(err.Error(), "chat sample") {
				t.Fatalf("an error that does not say where: %v", err)
			}
			return
		}
		full, err = templateRenderer{qwen}.Render(msgs, false)
		if err != nil {
			t.Fatalf("the sample rendered for its tokens, not whole: %v", err)
		}
		if string(int32sToBytes(toks)) != full || len(mask) != len(toks) || !slices.Contains(mask, true) {
			t.Fatalf("%d tokens (%d mask entries, trained: %v) for the rendering %q", len(toks), len(mask), slices.Contains(mask, true), full)
		}
	})
}

func int32sToBytes(toks []int32) []byte {
	out := make([]byte, len(toks))
	for i, t := range toks {
		out[i] = byte(t)
	}
	return out
}
