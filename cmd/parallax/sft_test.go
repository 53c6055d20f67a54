package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/parallax-engine/parallax/model/chat"
	"github.com/parallax-engine/parallax/train"
	"github.com/parallax-engine/parallax/train/data"
)

// Supervised fine-tuning end to end: a chat JSONL of arithmetic questions
// whose answers always read "Answer: N." (testdata/sft-chat.jsonl, written
// by sftConversations), the chat template of testdata/sft-template over the
// tokenizer of the Hugging Face Qwen3 fixture, the loss mask that data
// preparation and train derive from it, and a fine-tuned model that answers
// in the trained format in parallax chat where the initial one does not.

const (
	sftData      = "testdata/sft-chat.jsonl"
	sftTemplate  = "testdata/sft-template"
	sftSamples   = 600             // conversations in sftData
	sftSeed      = 20261202        // seed of the generator
	sftEndMarker = "<|endoftext|>" // the template's eos_token, closing assistant turns
	sftSteps     = 100             // fine-tuning steps of TestSFTChat
	sftTrainSeed = 1               // its seed
)

// sftQuestions are the prompts the fine-tuned model is asked in chat; the
// generator leaves them out of the data, so the answers are to questions
// the model has not seen.
var sftQuestions = []string{
	"What is 7 plus 5?",
	"What is 13 minus 4?",
	"What number comes after 16?",
	"What is double 9?",
	"What is 2 plus 18?",
	"What is 20 minus 11?",
	"What number comes after 3?",
	"What is double 14?",
}

// sftAnswer is the trained format of an answer, and a reply follows it when
// it matches: "Answer: ", a number, a full stop, nothing more.
var sftAnswer = regexp.MustCompile(`^Answer: [0-9]+\.$`)

// sftMessage is one turn as the JSONL stores it.
type sftMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// sftQA draws one question of the generator's four kinds and its answer in
// the trained format.
func sftQA(rng *rand.Rand) (q, a string) {
	x, y := rng.IntN(21), rng.IntN(21)
	switch rng.IntN(4) {
	case 0:
		return fmt.Sprintf("What is %d plus %d?", x, y), fmt.Sprintf("Answer: %d.", x+y)
	case 1:
		x, y = max(x, y), min(x, y)
		return fmt.Sprintf("What is %d minus %d?", x, y), fmt.Sprintf("Answer: %d.", x-y)
	case 2:
		return fmt.Sprintf("What number comes after %d?", x), fmt.Sprintf("Answer: %d.", x+1)
	default:
		return fmt.Sprintf("What is double %d?", x), fmt.Sprintf("Answer: %d.", 2*x)
	}
}

// sftConversations generates the n conversations of sftData,
// deterministically: half open with a system message, a quarter have a
// second exchange, no two are the same and no user turn is one of
// sftQuestions.
func sftConversations(n int) [][]sftMessage {
	rng := rand.New(rand.NewPCG(sftSeed, 1))
	systems := []string{"You are a calculator.", "Be exact.", "Reply briefly."}
	qa := func() (string, string) {
		for {
			if q, a := sftQA(rng); !slices.Contains(sftQuestions, q) {
				return q, a
			}
		}
	}
	convs := make([][]sftMessage, 0, n)
	seen := map[string]bool{}
	for len(convs) < n {
		var c []sftMessage
		if rng.IntN(2) == 0 {
			c = append(c, sftMessage{"system", systems[rng.IntN(len(systems))]})
		}
		turns := 1
		if rng.IntN(4) == 0 {
			turns = 2
		}
		for range turns {
			q, a := qa()
			c = append(c, sftMessage{"user", q}, sftMessage{"assistant", a})
		}
		if key := fmt.Sprint(c); !seen[key] {
			seen[key] = true
			convs = append(convs, c)
		}
	}
	return convs
}

// sftJSONL is the text of sftData: one {"messages": [...]} line per
// conversation.
func sftJSONL() []byte {
	var b bytes.Buffer
	for _, c := range sftConversations(sftSamples) {
		line, err := json.Marshal(struct {
			Messages []sftMessage `json:"messages"`
		}{c})
		if err != nil {
			panic(err) // strings only: cannot fail
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// TestSFTChatData: the committed chat JSONL is the generator's output
// (PARALLAX_WRITE_SFT=1 rewrites it).
func TestSFTChatData(t *testing.T) {
	want := sftJSONL()
	if os.Getenv("PARALLAX_WRITE_SFT") == "1" {
		if err := os.WriteFile(sftData, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(sftData)
	if err != nil {
		t.Fatalf("%v (PARALLAX_WRITE_SFT=1 writes it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is not what sftConversations generates (PARALLAX_WRITE_SFT=1 rewrites it)", sftData)
	}
}

// sftBase assembles the model to fine-tune in a temporary folder: the Hugging
// Face Qwen3 fixture (a softmax model made by transformers, random weights)
// with the chat template of sftTemplate.
func sftBase(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, src := range []string{
		filepath.Join(fixtureDir, "config.json"),
		filepath.Join(fixtureDir, "model.safetensors"),
		filepath.Join(fixtureDir, "tokenizer.json"),
		filepath.Join(fixtureDir, "generation_config.json"),
		filepath.Join(sftTemplate, "tokenizer_config.json"),
	} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(src)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// checkSFTMask checks the loss mask of the dataset in dsDir, tokenized from
// sftData with the tokenizer and chat template of base: every conversation
// is there once, as its rendering followed by the end-of-text separator, and
// its training targets are exactly its assistant turns, each the tokens of
// the turn's content and its end marker, contiguous, with nothing of the
// system or user turns or of the template's headers.
func checkSFTMask(t *testing.T, dsDir, base string) {
	t.Helper()
	tok, err := train.LoadTokenizer(base)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := chat.LoadTemplate(base)
	if err != nil {
		t.Fatal(err)
	}
	if tmpl.EOSToken != sftEndMarker {
		t.Fatalf("the template's eos_token is %q, want %q", tmpl.EOSToken, sftEndMarker)
	}
	convs := map[string][]sftMessage{}
	for _, c := range sftConversations(sftSamples) {
		msgs := make([]chat.Message, len(c))
		for i, m := range c {
			msgs[i] = chat.Message{Role: m.Role, Content: m.Content}
		}
		s, err := tmpl.Render(msgs, chat.RenderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		convs[s] = c
	}
	ds, err := data.Open(dsDir)
	if err != nil {
		t.Fatal(err)
	}
	decode := func(ids []int) string {
		s, err := tok.DecodeHF(ids, false)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	seen := map[string]bool{}
	tokens, targets := 0, 0
	for _, sh := range slices.Concat(ds.Train, ds.Val) {
		starts := sh.DocStarts()
		if len(starts) == 0 {
			t.Fatalf("%s has no document index", sh.Path)
		}
		for d, lo := range starts {
			hi := int64(sh.Len())
			if d+1 < len(starts) {
				hi = starts[d+1]
			}
			ids := make([]int, hi-lo)
			mask := make([]bool, hi-lo)
			for i := range ids {
				ids[i], mask[i] = int(sh.At(int(lo)+i)), sh.Target(int(lo)+i)
			}
			text := decode(ids)
			rendered, ok := strings.CutSuffix(text, sftEndMarker)
			conv, known := convs[rendered]
			if !ok || !known {
				t.Fatalf("%s, sample %d is not the rendering of a conversation of %s and the separator: %q", sh.Path, d, sftData, text)
			}
			if seen[rendered] {
				t.Fatalf("conversation %q is in the dataset twice", rendered)
			}
			seen[rendered] = true
			// The contiguous runs of targets, decoded.
			var runs []string
			for i := 0; i < len(ids); {
				if !mask[i] {
					i++
					continue
				}
				j := i
				for j < len(ids) && mask[j] {
					j++
				}
				runs = append(runs, decode(ids[i:j]))
				targets += j - i
				i = j
			}
			var want []string
			for _, m := range conv {
				if m.Role == "assistant" {
					want = append(want, m.Content+sftEndMarker)
				}
			}
			if !slices.Equal(runs, want) {
				t.Fatalf("sample %q: the targets are %q, want exactly the assistant turns %q", rendered, runs, want)
			}
			tokens += len(ids)
		}
	}
	if len(seen) != len(convs) {
		t.Fatalf("the dataset holds %d of the %d conversations", len(seen), len(convs))
	}
	t.Logf("%s: %d conversations, %d tokens, %d of them targets (%.1f%%): the assistant turns only",
		dsDir, len(seen), tokens, targets, 100*float64(targets)/float64(tokens))
}

// TestSFTLossMask prepares the chat JSONL with parallax data prepare (the
// chat template of the model folder) and checks that the loss mask is
// exactly the assistant turns.
func TestSFTLossMask(t *testing.T) {
	base := sftBase(t)
	ds := filepath.Join(t.TempDir(), "ds")
	code, stdout, stderr := runCLI(t, "data", "prepare", "--tokenizer", base, "--in", sftData, "--out", ds)
	if code != 0 {
		t.Fatalf("data prepare: exit %d\n%s%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "chat samples") {
		t.Errorf("data prepare did not read chat samples: %s", stdout)
	}
	checkSFTMask(t, ds, base)
}

// sftChat asks each question in a fresh conversation of parallax chat on
// the model in dir, started as a program with the questions piped into its
// standard input (separated by /reset), greedy, and returns the replies.
func sftChat(t *testing.T, dir string, questions []string) []string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "chat", "--model", dir, "--device", "cpu", "--temperature", "0", "--max-tokens", "16")
	cmd.Env = append(os.Environ(), "PARALLAX_CLI_MAIN=1")
	cmd.Stdin = strings.NewReader(strings.Join(questions, "\n/reset\n") + "\n")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("parallax chat: %v\n%s%s", err, out.String(), errOut.String())
	}
	// "> " answer "\n" per question, "> (new conversation)\n" between them,
	// and "> \n" at the end of the input.
	text, ok := strings.CutSuffix(out.String(), "\n> \n")
	chunks := strings.Split(text, "\n> (new conversation)\n")
	if !ok || len(chunks) != len(questions) {
		t.Fatalf("parallax chat printed %d answers for %d questions:\n%s", len(chunks), len(questions), out.String())
	}
	for i, c := range chunks {
		chunks[i] = strings.TrimPrefix(c, "> ")
	}
	return chunks
}

// inFormat counts the replies that follow the trained format.
func inFormat(replies []string) int {
	n := 0
	for _, r := range replies {
		if sftAnswer.MatchString(r) {
			n++
		}
	}
	return n
}

// TestSFTChat fine-tunes the fixture, converted to Parallax, on the chat
// JSONL on the CPU and checks that parallax chat then answers questions
// the data does not hold in the trained format ("Answer: N."), which the
// initial model does not. The dataset train wrote is checked as in
// TestSFTLossMask.
func TestSFTChat(t *testing.T) {
	if testing.Short() {
		t.Skip("fine-tunes a model (15-25 s on two cores)")
	}
	base := sftBase(t)
	before := sftChat(t, base, sftQuestions)
	if n := inFormat(before); n > len(before)/4 {
		t.Fatalf("the initial model already answers %d of %d questions in the format: %q", n, len(before), before)
	}
	run := filepath.Join(t.TempDir(), "sft")
	start := time.Now()
	code, stdout, stderr := runCLI(t, "train", "--init", base, "--convert-parallax", "--data", sftData,
		"--steps", fmt.Sprint(sftSteps), "--batch", "8", "--seq", "128", "--device", "cpu", "--dtype", "f32",
		"--eval-every", "-1", "--log-every", "25", "--save-every", "-1", "--seed", fmt.Sprint(sftTrainSeed), "--out", run)
	if code != 0 {
		t.Fatalf("train: exit %d\n%s%s", code, stdout, stderr)
	}
	t.Logf("fine-tuned in %s: %s", time.Since(start).Round(time.Millisecond), doneLine(stdout))
	checkSFTMask(t, filepath.Join(run, train.DataDir), base)
	after := sftChat(t, run, sftQuestions)
	var b strings.Builder
	right := 0
	for i, q := range sftQuestions {
		fmt.Fprintf(&b, "> %s\n%s\n", q, after[i])
		if want := sftWant(q); after[i] == want {
			right++
		}
	}
	t.Logf("parallax chat on the fine-tuned model (%d of %d in the format, %d correct):\n%s",
		inFormat(after), len(after), right, b.String())
	t.Logf("the initial model answered: %q", before)
	if n := inFormat(after); n < len(after)-1 {
		t.Errorf("only %d of %d replies follow the trained format", n, len(after))
	}
}

// sftWant is the correct reply to one of sftQuestions.
func sftWant(q string) string {
	var x, y int
	switch {
	case scans(q, "What is %d plus %d?", &x, &y):
		return fmt.Sprintf("Answer: %d.", x+y)
	case scans(q, "What is %d minus %d?", &x, &y):
		return fmt.Sprintf("Answer: %d.", x-y)
	case scans(q, "What number comes after %d?", &x):
		return fmt.Sprintf("Answer: %d.", x+1)
	case scans(q, "What is double %d?", &x):
		return fmt.Sprintf("Answer: %d.", 2*x)
	}
	return ""
}

// scans reports whether s reads as format.
func scans(s, format string, args ...any) bool {
	n, err := fmt.Sscanf(s, format, args...)
	return err == nil && n == len(args)
}

// doneLine is train's summary line ("done: ...") in its output.
func doneLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "done: ") {
			return l
		}
	}
	return "(no summary line)"
}
