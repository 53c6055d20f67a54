// Package serve is an OpenAI-compatible HTTP server over a model:
// POST /v1/chat/completions and /v1/completions (streamed as server-sent
// events or not), GET /v1/models, /health, /metrics (Prometheus text) and a
// chat page at /. Requests are batched continuously: a request joins the
// running batch between decode steps, in a slot of a model.BatchCache, and
// leaves it when it is done or its client goes away. See docs/SERVE.md.
package serve

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parallax-engine/parallax/model"
)

// Config configures a Server.
type Config struct {
	Model     *model.Model
	Tokenizer Tokenizer
	// Template renders chat messages; nil means PlainTemplate.
	Template Template
	// ModelName is the id the API lists and requests must name.
	ModelName string
	// MaxBatch is the number of sequences decoded together (the batch
	// cache's slots); 0 means 8.
	MaxBatch int
	// MaxQueue is how many requests may wait for a slot; beyond, requests
	// are answered 429. 0 means 64; negative means none may wait.
	MaxQueue int
	// Ctx is the positions each sequence may use, prompt and output (at
	// most the model's MaxSeq); 0 means MaxSeq.
	Ctx int
	// APIKey, if set, is required as "Authorization: Bearer KEY" on /v1/.
	APIKey string
	// Suppress lists ids that are never sampled (those the tokenizer
	// cannot decode); Stop the ids that end a sequence (the model's EOS).
	Suppress []int
	Stop     []int
	// Logf logs server events; nil discards them.
	Logf func(format string, args ...any)
}

// Server serves one model. Create it with New, serve Handler, and Close it
// after the HTTP server has shut down.
type Server struct {
	cfg      Config
	bc       *model.BatchCache
	stop     map[int]bool
	queue    chan *job
	inflight atomic.Int64 // queued + running jobs
	quit     chan struct{}
	stopped  chan struct{}
	once     sync.Once
	metrics  *metrics
	created  int64
	ids      atomic.Uint64

	testHookStep func() // tests: runs before every decode step
}

// New validates cfg, allocates the batch cache and starts the scheduler.
func New(cfg Config) (*Server, error) {
	if cfg.Model == nil || cfg.Tokenizer == nil {
		return nil, errors.New("serve: a model and a tokenizer are required")
	}
	if cfg.ModelName == "" {
		return nil, errors.New("serve: the model needs a name")
	}
	if cfg.Template == nil {
		cfg.Template = PlainTemplate{}
	}
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = 8
	}
	if cfg.MaxQueue == 0 {
		cfg.MaxQueue = 64
	}
	cfg.MaxQueue = max(cfg.MaxQueue, 0)
	if cfg.Ctx == 0 {
		cfg.Ctx = cfg.Model.Config.MaxSeq
	}
	switch {
	case cfg.MaxBatch < 0:
		return nil, fmt.Errorf("serve: max batch %d must be positive", cfg.MaxBatch)
	case cfg.Ctx < 1 || cfg.Ctx > cfg.Model.Config.MaxSeq:
		return nil, fmt.Errorf("serve: context %d must be in [1, %d] (the model's max_seq)", cfg.Ctx, cfg.Model.Config.MaxSeq)
	}
	for _, t := range cfg.Suppress {
		if t < 0 || t >= cfg.Model.Config.Vocab {
			return nil, fmt.Errorf("serve: suppressed id %d is outside the vocabulary [0, %d)", t, cfg.Model.Config.Vocab)
		}
	}
	bc, err := cfg.Model.NewBatchCache(cfg.MaxBatch, cfg.Ctx)
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	s := &Server{
		cfg: cfg, bc: bc, stop: map[int]bool{},
		queue:   make(chan *job, cfg.MaxBatch+cfg.MaxQueue),
		quit:    make(chan struct{}),
		stopped: make(chan struct{}),
		metrics: newMetrics(),
		created: time.Now().Unix(),
	}
	for _, t := range cfg.Stop {
		s.stop[t] = true
	}
	go s.loop()
	return s, nil
}

// Close stops the scheduler (jobs still queued or running fail with
// ErrShutdown) and frees the batch cache. Shut the HTTP server down first
// to let requests in flight finish.
func (s *Server) Close() {
	s.once.Do(func() {
		close(s.quit)
		<-s.stopped
		s.bc.Free()
	})
}

func (s *Server) logf(format string, args ...any) {
	if s.cfg.Logf != nil {
		s.cfg.Logf(format, args...)
	}
}

// Handler returns the server's HTTP routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/chat/completions", s.method(http.MethodPost, func(w http.ResponseWriter, r *http.Request) { s.complete(w, r, true) }))
	mux.HandleFunc("/v1/completions", s.method(http.MethodPost, func(w http.ResponseWriter, r *http.Request) { s.complete(w, r, false) }))
	mux.HandleFunc("/v1/models", s.method(http.MethodGet, s.models))
	mux.HandleFunc("/v1/models/{id...}", s.method(http.MethodGet, s.modelByID))
	mux.HandleFunc("/health", s.method(http.MethodGet, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok"})
	}))
	mux.HandleFunc("/metrics", s.method(http.MethodGet, s.serveMetrics))
	mux.HandleFunc("/", s.page)
	return s.recoverer(s.auth(mux))
}

// recoverer turns a panic in a handler into a 500 (a bug, logged) so one
// request cannot take the server down.
func (s *Server) recoverer(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.logf("panic serving %s %s: %v", r.Method, r.URL.Path, v)
				writeError(w, &apiError{Status: http.StatusInternalServerError, Type: "server_error", Message: "internal error"})
			}
		}()
		h.ServeHTTP(w, r)
	})
}

// auth enforces the API key on /v1/.
func (s *Server) auth(h http.Handler) http.Handler {
	if s.cfg.APIKey == "" {
		return h
	}
	want := []byte("Bearer " + s.cfg.APIKey)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/") && subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			writeError(w, &apiError{Status: http.StatusUnauthorized, Type: "invalid_request_error", Code: "invalid_api_key",
				Message: "missing or invalid API key (send Authorization: Bearer KEY)"})
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (s *Server) method(m string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != m {
			w.Header().Set("Allow", m)
			writeError(w, &apiError{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error",
				Message: fmt.Sprintf("%s %s is not allowed; use %s", r.Method, r.URL.Path, m)})
			return
		}
		h(w, r)
	}
}

func (s *Server) modelObject() map[string]any {
	return map[string]any{"id": s.cfg.ModelName, "object": "model", "created": s.created, "owned_by": "parallax"}
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []any{s.modelObject()}})
}

func (s *Server) modelByID(w http.ResponseWriter, r *http.Request) {
	if r.PathValue("id") != s.cfg.ModelName {
		writeError(w, s.unknownModel(r.PathValue("id")))
		return
	}
	writeJSON(w, http.StatusOK, s.modelObject())
}

func (s *Server) unknownModel(name string) *apiError {
	return &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Param: "model", Code: "model_not_found",
		Message: fmt.Sprintf("the model %q does not exist; this server serves %q", name, s.cfg.ModelName)}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, e.Status, e.body())
}

// prepared is a validated request turned into a job's inputs.
type prepared struct {
	req    *Request
	prompt []int32
	n      int
}

// prepare renders and tokenizes the prompt and checks it and max_tokens
// against the context: a sequence uses len(prompt) + n - 1 positions.
func (s *Server) prepare(req *Request) (*prepared, *apiError) {
	if req.Model != s.cfg.ModelName {
		return nil, s.unknownModel(req.Model)
	}
	text, param := req.Prompt, "prompt"
	if req.Chat {
		param = "messages"
		var err error
		if text, err = s.cfg.Template.Render(req.Messages); err != nil {
			return nil, badRequest("messages", "the chat template cannot render these messages: %v", err)
		}
	}
	ids := s.cfg.Tokenizer.EncodeWithSpecials(text)
	if len(ids) == 0 {
		return nil, badRequest(param, "the %s is empty: there is nothing to continue", param)
	}
	V := s.cfg.Model.Config.Vocab
	prompt := make([]int32, len(ids))
	for i, t := range ids {
		if t < 0 || t >= V {
			return nil, badRequest(param, "the tokenizer produced id %d, outside the model's vocabulary [0, %d)", t, V)
		}
		prompt[i] = int32(t)
	}
	room := s.cfg.Ctx - len(ids) + 1
	if room < 1 {
		return nil, &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: param, Code: "context_length_exceeded",
			Message: fmt.Sprintf("the %s has %d tokens; the context holds %d", param, len(ids), s.cfg.Ctx)}
	}
	n := req.MaxTokens
	if n == 0 {
		n = room
	} else if n > room {
		return nil, &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: "max_tokens", Code: "context_length_exceeded",
			Message: fmt.Sprintf("max_tokens %d does not fit the context: the prompt has %d tokens, the context %d, leaving room for %d", n, len(ids), s.cfg.Ctx, room)}
	}
	return &prepared{req: req, prompt: prompt, n: n}, nil
}

// complete serves both completion endpoints.
func (s *Server) complete(w http.ResponseWriter, r *http.Request, chat bool) {
	start := time.Now()
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			s.fail(w, &apiError{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error", Message: fmt.Sprintf("the request body exceeds %d bytes", MaxBodyBytes)})
			return
		}
		s.fail(w, badRequest("", "cannot read the request body: %v", err))
		return
	}
	req, err := DecodeRequest(body, chat)
	if err != nil {
		var ae *apiError
		if !errors.As(err, &ae) {
			ae = badRequest("", "%v", err)
		}
		s.fail(w, ae)
		return
	}
	p, aerr := s.prepare(req)
	if aerr != nil {
		s.fail(w, aerr)
		return
	}
	seed := req.Seed
	if !req.HasSeed {
		seed = rand.Uint64()
	}
	smp, err := model.NewSampler(model.SampleOptions{Temperature: req.Temperature, TopK: req.TopK, TopP: req.TopP, Seed: seed})
	if err != nil {
		s.fail(w, badRequest("", "%v", err))
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	j := &job{ctx: ctx, prompt: p.prompt, n: p.n, sampler: smp, events: make(chan event, p.n+2), queued: start}
	if !s.enqueue(j) {
		w.Header().Set("Retry-After", "1")
		s.fail(w, &apiError{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Code: "queue_full",
			Message: fmt.Sprintf("the server is busy: %d requests are running and %d waiting; retry later", s.cfg.MaxBatch, s.cfg.MaxQueue)})
		return
	}
	ts := &textStream{tok: s.cfg.Tokenizer, stops: req.Stop}
	id := s.newID(chat)
	if req.Stream {
		s.stream(w, r, j, cancel, ts, p, id)
	} else {
		s.whole(w, j, cancel, ts, p, id)
	}
	s.metrics.request(time.Since(start))
}

// enqueue admits j unless MaxBatch requests run and MaxQueue wait.
func (s *Server) enqueue(j *job) bool {
	select {
	case <-s.quit:
		return false
	default:
	}
	if s.inflight.Add(1) > int64(s.cfg.MaxBatch+s.cfg.MaxQueue) {
		s.inflight.Add(-1)
		return false
	}
	s.queue <- j // never blocks: the channel holds MaxBatch + MaxQueue
	return true
}

func (s *Server) fail(w http.ResponseWriter, e *apiError) {
	s.metrics.status(e.Status)
	writeError(w, e)
}

func (s *Server) newID(chat bool) string {
	p := "cmpl-"
	if chat {
		p = "chatcmpl-"
	}
	return fmt.Sprintf("%s%x%06x", p, s.created, s.ids.Add(1))
}

// collect reads a job's events into text until it ends; it calls fn, if not
// nil, with every new piece of text and stops (cancelling the job) when fn
// returns an error or a stop sequence appears.
func (s *Server) collect(j *job, cancel context.CancelFunc, ts *textStream, fn func(delta string) error) (reason string, tokens int, err error) {
	defer cancel()
	for e := range j.events {
		if e.done {
			if e.err != nil {
				return "", tokens, e.err
			}
			if d := ts.flush(); d != "" && fn != nil {
				if err := fn(d); err != nil {
					return "", tokens, err
				}
			}
			return e.reason, tokens, nil
		}
		tokens++
		delta, stopped, derr := ts.push(e.tok)
		if derr != nil {
			return "", tokens, fmt.Errorf("decode token %d: %w", e.tok, derr)
		}
		if delta != "" && fn != nil {
			if err := fn(delta); err != nil {
				return "", tokens, err
			}
		}
		if stopped {
			return "stop", tokens, nil
		}
	}
	return "", tokens, errors.New("the generation ended without a result")
}

func usage(p *prepared, tokens int) map[string]any {
	return map[string]any{"prompt_tokens": len(p.prompt), "completion_tokens": tokens, "total_tokens": len(p.prompt) + tokens}
}

// serverError is the body of a failure after the request was accepted.
func serverError(err error) *apiError {
	if errors.Is(err, ErrShutdown) {
		return &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Message: err.Error()}
	}
	return &apiError{Status: http.StatusInternalServerError, Type: "server_error", Message: err.Error()}
}

// whole answers a request with one JSON body.
func (s *Server) whole(w http.ResponseWriter, j *job, cancel context.CancelFunc, ts *textStream, p *prepared, id string) {
	var text strings.Builder
	reason, tokens, err := s.collect(j, cancel, ts, func(d string) error { text.WriteString(d); return nil })
	if err != nil {
		s.fail(w, serverError(err))
		return
	}
	var choice map[string]any
	object := "text_completion"
	if p.req.Chat {
		object = "chat.completion"
		choice = map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": text.String()},
			"logprobs": nil, "finish_reason": reason}
	} else {
		choice = map[string]any{"index": 0, "text": text.String(), "logprobs": nil, "finish_reason": reason}
	}
	s.metrics.status(http.StatusOK)
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": object, "created": time.Now().Unix(), "model": s.cfg.ModelName,
		"choices": []any{choice}, "usage": usage(p, tokens)})
}

// stream answers a request as server-sent events in OpenAI's chunk format,
// ending with "data: [DONE]".
func (s *Server) stream(w http.ResponseWriter, r *http.Request, j *job, cancel context.CancelFunc, ts *textStream, p *prepared, id string) {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	created := time.Now().Unix()
	object := "text_completion"
	if p.req.Chat {
		object = "chat.completion.chunk"
	}
	send := func(v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return err
		}
		return rc.Flush()
	}
	chunk := func(delta map[string]any, text string, reason any) map[string]any {
		c := map[string]any{"index": 0, "logprobs": nil, "finish_reason": reason}
		if p.req.Chat {
			c["delta"] = delta
		} else {
			c["text"] = text
		}
		return map[string]any{"id": id, "object": object, "created": created, "model": s.cfg.ModelName, "choices": []any{c}}
	}
	if p.req.Chat {
		if err := send(chunk(map[string]any{"role": "assistant", "content": ""}, "", nil)); err != nil {
			cancel()
			return
		}
	}
	reason, tokens, err := s.collect(j, cancel, ts, func(d string) error {
		return send(chunk(map[string]any{"content": d}, d, nil))
	})
	if err != nil {
		if r.Context().Err() == nil {
			// The server failed (not the client): say so in the stream.
			e := serverError(err)
			s.metrics.status(e.Status)
			_ = send(e.body())
			_, _ = fmt.Fprint(w, "data: [DONE]\n\n")
			_ = rc.Flush()
		} else {
			s.metrics.status(499)
		}
		return
	}
	s.metrics.status(http.StatusOK)
	if send(chunk(map[string]any{}, "", reason)) != nil {
		return
	}
	if p.req.IncludeUsage {
		if send(map[string]any{"id": id, "object": object, "created": created, "model": s.cfg.ModelName,
			"choices": []any{}, "usage": usage(p, tokens)}) != nil {
			return
		}
	}
	_, _ = fmt.Fprint(w, "data: [DONE]\n\n")
	_ = rc.Flush()
}
