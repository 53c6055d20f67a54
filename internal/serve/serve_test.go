package serve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parallax-engine/parallax/engine/cpu"
	"github.com/parallax-engine/parallax/model"
	"github.com/parallax-engine/parallax/model/tokenizer"
)

const testText = "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife.\n\n"

var (
	tokOnce sync.Once
	testTok *tokenizer.Tokenizer
	tokErr  error
)

// testTokenizer is a 300-token BPE tokenizer trained on testText.
func testTokenizer(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	tokOnce.Do(func() { testTok, tokErr = tokenizer.Train([]string{strings.Repeat(testText, 20)}, 300, nil) })
	if tokErr != nil {
		t.Fatal(tokErr)
	}
	return testTok
}

// testModel is a freshly initialised one-layer model of 300 ids on the CPU.
func testModel(t *testing.T) *model.Model {
	t.Helper()
	cfg := model.Config{Vocab: 300, Dim: 32, Layers: 2, Heads: 2, KVHeads: 1, HeadDim: 16, FFN: 64,
		RopeTheta: 1e4, NormEps: 1e-6, Attention: model.AttentionParallax, RInit: model.RInitLikeQ, MaxSeq: 128}
	m, err := model.New(cpu.New(), cfg, model.Options{Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Free)
	return m
}

// newTestServer starts a server over a test model; edit adjusts the config.
func newTestServer(t *testing.T, edit func(*Config)) (*Server, *httptest.Server) {
	t.Helper()
	cfg := Config{Model: testModel(t), Tokenizer: testTokenizer(t), ModelName: "tiny", MaxBatch: 4, MaxQueue: 8}
	if edit != nil {
		edit(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() { hs.Close(); s.Close() })
	return s, hs
}

func post(t *testing.T, url, body string) (int, []byte) {
	t.Helper()
	res, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

// streamResult is what a streamed response carried.
type streamResult struct {
	text   string
	reason string
	done   bool // saw [DONE]
	events int
}

// readStream parses a server-sent event stream of completion chunks.
func readStream(r io.Reader) (streamResult, error) {
	var out streamResult
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			return out, fmt.Errorf("not an SSE data line: %q", line)
		}
		if out.done {
			return out, fmt.Errorf("data after [DONE]: %q", line)
		}
		if data == "[DONE]" {
			out.done = true
			continue
		}
		out.events++
		var c struct {
			Choices []struct {
				Text  string `json:"text"`
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			return out, fmt.Errorf("chunk %q: %w", data, err)
		}
		if c.Error != nil {
			return out, fmt.Errorf("error event: %s", c.Error.Message)
		}
		for _, ch := range c.Choices {
			out.text += ch.Text + ch.Delta.Content
			if ch.FinishReason != nil {
				out.reason = *ch.FinishReason
			}
		}
	}
	return out, sc.Err()
}

// completionBody is a completions request for prompt i with its own seed.
func completionBody(i int, stream bool) string {
	words := strings.Fields(testText)
	prompt := strings.Join(words[:1+i%len(words)], " ")
	return fmt.Sprintf(`{"model":"tiny","prompt":%q,"max_tokens":%d,"temperature":0.9,"seed":%d,"stream":%v}`,
		prompt, 5+i%13, 1000+i, stream)
}

// TestMatchesGenerate: a completion equals model.Generate's continuation
// with the same seed and sampling options, streamed or not, chat or not.
func TestMatchesGenerate(t *testing.T) {
	s, hs := newTestServer(t, nil)
	tok := testTokenizer(t)
	want := func(prompt string, n int, temp, topP float64, seed uint64) string {
		ids, err := s.cfg.Model.Generate(tok.EncodeWithSpecials(prompt), n,
			model.GenerateOptions{Sample: model.SampleOptions{Temperature: temp, TopP: topP, Seed: seed}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		text, err := tok.Decode(ids)
		if err != nil {
			t.Fatal(err)
		}
		return jsonText(text)
	}
	for _, c := range []struct {
		name   string
		chat   bool
		stream bool
	}{{"completion", false, false}, {"completion stream", false, true}, {"chat", true, false}, {"chat stream", true, true}} {
		t.Run(c.name, func(t *testing.T) {
			prompt := "It is a truth"
			var body, url string
			if c.chat {
				rendered, _ := PlainTemplate{}.Render([]Message{{"user", prompt}})
				wantText := want(rendered, 20, 0.8, 0.95, 42)
				body = fmt.Sprintf(`{"model":"tiny","messages":[{"role":"user","content":%q}],"max_tokens":20,"temperature":0.8,"top_p":0.95,"seed":42,"stream":%v}`, prompt, c.stream)
				url = hs.URL + "/v1/chat/completions"
				got := requestText(t, url, body, c.stream, true)
				if got != wantText {
					t.Errorf("got %q, Generate %q", got, wantText)
				}
				return
			}
			wantText := want(prompt, 20, 0.8, 0.95, 42)
			body = fmt.Sprintf(`{"model":"tiny","prompt":%q,"max_tokens":20,"temperature":0.8,"top_p":0.95,"seed":42,"stream":%v}`, prompt, c.stream)
			url = hs.URL + "/v1/completions"
			if got := requestText(t, url, body, c.stream, false); got != wantText {
				t.Errorf("got %q, Generate %q", got, wantText)
			}
		})
	}
}

// jsonText is s as it reads after a trip through JSON: a random model's
// bytes need not be UTF-8, and each invalid byte becomes U+FFFD.
func jsonText(s string) string {
	b, _ := json.Marshal(s)
	var out string
	_ = json.Unmarshal(b, &out)
	return out
}

// requestText posts a request and returns the generated text.
func requestText(t *testing.T, url, body string, stream, chat bool) string {
	t.Helper()
	code, b := post(t, url, body)
	if code != 200 {
		t.Fatalf("status %d: %s", code, b)
	}
	if stream {
		r, err := readStream(bytes.NewReader(b))
		if err != nil || !r.done || r.reason == "" {
			t.Fatalf("stream: %v (done %v, reason %q)", err, r.done, r.reason)
		}
		return r.text
	}
	var v struct {
		Choices []struct {
			Text    string `json:"text"`
			Message struct {
				Role, Content string
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
			TotalTokens      int `json:"total_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &v); err != nil || len(v.Choices) != 1 {
		t.Fatalf("response %s: %v", b, err)
	}
	if v.Usage.TotalTokens != v.Usage.PromptTokens+v.Usage.CompletionTokens || v.Usage.PromptTokens == 0 {
		t.Errorf("usage %+v", v.Usage)
	}
	if chat {
		if v.Choices[0].Message.Role != "assistant" {
			t.Errorf("role %q", v.Choices[0].Message.Role)
		}
		return v.Choices[0].Message.Content
	}
	return v.Choices[0].Text
}

// TestLoad: 64 concurrent streaming clients each get exactly the text of
// the same request run alone; with the queue full the answer is 429; and
// clients that disconnect free their slots.
func TestLoad(t *testing.T) {
	const clients = 64
	s, hs := newTestServer(t, func(c *Config) { c.MaxBatch, c.MaxQueue = 16, clients-16 })
	url := hs.URL + "/v1/completions"
	alone := make([]streamResult, clients)
	for i := range clients {
		code, b := post(t, url, completionBody(i, true))
		if code != 200 {
			t.Fatalf("request %d alone: %d %s", i, code, b)
		}
		r, err := readStream(bytes.NewReader(b))
		if err != nil || !r.done {
			t.Fatalf("request %d alone: %v", i, err)
		}
		alone[i] = r
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	got := make([]streamResult, clients)
	errs := make([]error, clients)
	for i := range clients {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(completionBody(i, true)))
			req.Header.Set("Content-Type", "application/json")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				errs[i] = err
				return
			}
			defer res.Body.Close()
			if res.StatusCode != 200 {
				b, _ := io.ReadAll(res.Body)
				errs[i] = fmt.Errorf("status %d: %s", res.StatusCode, b)
				return
			}
			got[i], errs[i] = readStream(res.Body)
		})
	}
	wg.Wait()
	for i := range clients {
		switch {
		case errs[i] != nil:
			t.Errorf("client %d: %v", i, errs[i])
		case !got[i].done || got[i].text != alone[i].text || got[i].reason != alone[i].reason:
			t.Errorf("client %d: %q (%s, done %v), alone %q (%s)", i, got[i].text, got[i].reason, got[i].done, alone[i].text, alone[i].reason)
		}
	}
	if t.Failed() {
		return
	}
	_ = s

	t.Run("queue full and disconnects", func(t *testing.T) {
		s, hs := newTestServer(t, func(c *Config) { c.MaxBatch, c.MaxQueue = 2, -1 })
		gate := make(chan struct{})
		var once sync.Once
		blocked := make(chan struct{})
		s.testHookStep = func() {
			once.Do(func() { close(blocked) })
			<-gate
		}
		url := hs.URL + "/v1/completions"
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Go(func() {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(completionBody(i, true)))
				res, err := http.DefaultClient.Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, res.Body)
					res.Body.Close()
				}
			})
		}
		// Both requests hold the two slots (the step is held at the gate).
		select {
		case <-blocked:
		case <-time.After(20 * time.Second):
			t.Fatal("the scheduler never stepped")
		}
		waitFor(t, func() bool { return s.inflight.Load() == 2 })
		res, err := http.Post(url, "application/json", strings.NewReader(completionBody(3, false)))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" || !strings.Contains(string(b), "busy") {
			t.Errorf("queue full: %d (Retry-After %q) %s", res.StatusCode, res.Header.Get("Retry-After"), b)
		}
		// The two clients go away; their slots come back.
		cancel()
		wg.Wait()
		close(gate)
		waitFor(t, func() bool { return s.inflight.Load() == 0 })
		for i := range 2 {
			if code, b := post(t, url, completionBody(i, false)); code != 200 {
				t.Errorf("after the disconnects: %d %s", code, b)
			}
		}
	})
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestBadInput: malformed or invalid requests get a 4xx with an
// OpenAI-style error naming the problem, and the server keeps serving.
func TestBadInput(t *testing.T) {
	_, hs := newTestServer(t, func(c *Config) { c.Ctx = 64 })
	chat, comp := "/v1/chat/completions", "/v1/completions"
	for _, c := range []struct {
		name, path, body string
		status           int
		param, msg       string
	}{
		{"malformed JSON", chat, `{"model": "tiny", "messages": [`, 400, "", "malformed JSON"},
		{"not an object", chat, `[1, 2]`, 400, "", "JSON object"},
		{"empty body", comp, ``, 400, "", "empty"},
		{"trailing data", comp, `{"model":"tiny","prompt":"a"} {}`, 400, "", "after its JSON"},
		{"wrong type max_tokens", comp, `{"model":"tiny","prompt":"a","max_tokens":"ten"}`, 400, "max_tokens", "expected an integer"},
		{"wrong type temperature", chat, `{"model":"tiny","messages":[{"role":"user","content":"a"}],"temperature":"hot"}`, 400, "temperature", "expected a number"},
		{"wrong type stream", comp, `{"model":"tiny","prompt":"a","stream":"yes"}`, 400, "stream", "expected a boolean"},
		{"wrong type messages", chat, `{"model":"tiny","messages":"hello"}`, 400, "messages", "array"},
		{"wrong type content", chat, `{"model":"tiny","messages":[{"role":"user","content":5}]}`, 400, "messages[0].content", "string"},
		{"wrong type prompt", comp, `{"model":"tiny","prompt":5}`, 400, "prompt", "string"},
		{"missing model", comp, `{"prompt":"a"}`, 400, "model", "model"},
		{"unknown model", comp, `{"model":"gpt-9","prompt":"a"}`, 404, "model", "does not exist"},
		{"empty messages", chat, `{"model":"tiny","messages":[]}`, 400, "messages", "at least one"},
		{"missing messages", chat, `{"model":"tiny"}`, 400, "messages", "messages"},
		{"bad role", chat, `{"model":"tiny","messages":[{"role":"wizard","content":"a"}]}`, 400, "messages[0].role", "wizard"},
		{"empty prompt", comp, `{"model":"tiny","prompt":""}`, 400, "prompt", "empty"},
		{"huge max_tokens", comp, `{"model":"tiny","prompt":"a","max_tokens":1000000000}`, 400, "max_tokens", "does not fit"},
		{"max_tokens overflow", comp, `{"model":"tiny","prompt":"a","max_tokens":1e40}`, 400, "max_tokens", "integer"},
		{"zero max_tokens", comp, `{"model":"tiny","prompt":"a","max_tokens":0}`, 400, "max_tokens", "positive"},
		{"long prompt", comp, `{"model":"tiny","prompt":"` + strings.Repeat("wife ", 200) + `"}`, 400, "prompt", "context"},
		{"temperature range", comp, `{"model":"tiny","prompt":"a","temperature":5}`, 400, "temperature", "[0, 2]"},
		{"top_p range", comp, `{"model":"tiny","prompt":"a","top_p":0}`, 400, "top_p", "(0, 1]"},
		{"n", comp, `{"model":"tiny","prompt":"a","n":3}`, 400, "n", "n = 1"},
		{"stop type", comp, `{"model":"tiny","prompt":"a","stop":7}`, 400, "stop", "stop"},
		{"too many stops", comp, `{"model":"tiny","prompt":"a","stop":["a","b","c","d","e"]}`, 400, "stop", "at most 4"},
		{"logprobs", chat, `{"model":"tiny","messages":[{"role":"user","content":"a"}],"logprobs":true}`, 400, "logprobs", "not supported"},
		{"invalid UTF-8", comp, "{\"model\":\"tiny\",\"prompt\":\"a\xff\xfe\"}", 400, "", "UTF-8"},
		{"prompt on chat", chat, `{"model":"tiny","prompt":"a"}`, 400, "prompt", "messages"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, b := post(t, hs.URL+c.path, c.body)
			var e struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
				} `json:"error"`
			}
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatalf("status %d, body not an error JSON: %s", code, b)
			}
			param := ""
			if e.Error.Param != nil {
				param = *e.Error.Param
			}
			if code != c.status || param != c.param || !strings.Contains(e.Error.Message, c.msg) || e.Error.Type == "" {
				t.Errorf("status %d param %q: %s (want %d, param %q, message with %q)", code, param, b, c.status, c.param, c.msg)
			}
		})
	}
	for _, c := range []struct{ method, path string }{{"GET", chat}, {"POST", "/v1/models"}, {"GET", "/nope"}} {
		req, _ := http.NewRequest(c.method, hs.URL+c.path, nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode < 400 || res.StatusCode >= 500 {
			t.Errorf("%s %s: %d", c.method, c.path, res.StatusCode)
		}
	}
	// Still serving.
	if code, b := post(t, hs.URL+comp, `{"model":"tiny","prompt":"It is","max_tokens":3}`); code != 200 {
		t.Errorf("after the bad requests: %d %s", code, b)
	}
}

// TestEndpoints: models, health, metrics, the page, the API key and stop
// sequences.
func TestEndpoints(t *testing.T) {
	_, hs := newTestServer(t, func(c *Config) { c.APIKey = "sekret" })
	get := func(path, key string) (int, string) {
		req, _ := http.NewRequest("GET", hs.URL+path, nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, b := get("/v1/models", ""); code != 401 || !strings.Contains(b, "invalid_api_key") {
		t.Errorf("no key: %d %s", code, b)
	}
	if code, b := get("/v1/models", "wrong"); code != 401 {
		t.Errorf("wrong key: %d %s", code, b)
	}
	if code, b := get("/v1/models", "sekret"); code != 200 || !strings.Contains(b, `"id":"tiny"`) {
		t.Errorf("models: %d %s", code, b)
	}
	if code, b := get("/v1/models/tiny", "sekret"); code != 200 {
		t.Errorf("model: %d %s", code, b)
	}
	if code, b := get("/health", ""); code != 200 || !strings.Contains(b, "ok") {
		t.Errorf("health: %d %s", code, b)
	}
	if code, b := get("/", ""); code != 200 || !strings.Contains(b, "<title>Parallax chat</title>") || strings.Contains(b, "http://") {
		t.Errorf("page: %d (external references or no title)", code)
	}
	req, _ := http.NewRequest("POST", hs.URL+"/v1/completions", strings.NewReader(`{"model":"tiny","prompt":"It is a","max_tokens":30,"temperature":0,"stop":["a"]}`))
	req.Header.Set("Authorization", "Bearer sekret")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	var v struct {
		Choices []struct {
			Text         string `json:"text"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(b, &v); err != nil || len(v.Choices) != 1 || strings.Contains(v.Choices[0].Text, "a") {
		t.Errorf("stop sequence: %s", b)
	}
	if code, b := get("/metrics", ""); code != 200 || !strings.Contains(b, "parallax_queue_length") || !strings.Contains(b, "parallax_time_to_first_token_seconds_count") {
		t.Errorf("metrics: %d %s", code, b)
	}
}

// TestTextStream: stop sequences cut the text, even across tokens, and
// held-back text that does not become a stop is released.
func TestTextStream(t *testing.T) {
	tok := testTokenizer(t)
	ids := tok.Encode("a single man in possession")
	for _, c := range []struct {
		stops []string
		want  string
	}{
		{nil, "a single man in possession"},
		{[]string{"man"}, "a single "},
		{[]string{"in p"}, "a single man "},
		{[]string{"zzz"}, "a single man in possession"},
		{[]string{"possession"}, "a single man in "},
	} {
		ts := &textStream{tok: tok, stops: c.stops}
		var got string
		for _, id := range ids {
			d, stopped, err := ts.push(id)
			if err != nil {
				t.Fatal(err)
			}
			got += d
			if stopped {
				break
			}
		}
		got += ts.flushIfNotStopped(c.stops, got)
		if got != c.want {
			t.Errorf("stops %q: %q, want %q", c.stops, got, c.want)
		}
	}
}

// flushIfNotStopped is flush unless a stop sequence cut the text.
func (ts *textStream) flushIfNotStopped(stops []string, got string) string {
	if ts.firstStop(ts.text) >= 0 {
		return ""
	}
	return ts.flush()
}

// FuzzDecodeRequest: no body makes the decoder panic, and every rejection
// is a 4xx OpenAI error.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"tiny","messages":[{"role":"user","content":"hi"}],"stream":true}`,
		`{"model":"tiny","prompt":["a"],"max_tokens":5,"stop":["x","y"],"seed":-3}`,
		`{"model":"tiny","messages":[{"role":"user","content":[{"type":"text","text":"a"}]}]}`,
		`{"model":1}`, `[]`, `{"stream_options":{"include_usage":true},"stream":true}`, "\xff",
	} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, body []byte, chat bool) {
		r, err := DecodeRequest(body, chat)
		if err != nil {
			e, ok := err.(*apiError)
			if !ok || e.Status < 400 || e.Status >= 500 || e.Message == "" {
				t.Fatalf("error %v (%T) for %q", err, err, body)
			}
			if _, err := json.Marshal(e.body()); err != nil {
				t.Fatal(err)
			}
			return
		}
		if r.Model == "" || (chat && len(r.Messages) == 0) || r.MaxTokens < 0 || len(r.Stop) > 4 {
			t.Fatalf("accepted an invalid request %+v from %q", r, body)
		}
	})
}
