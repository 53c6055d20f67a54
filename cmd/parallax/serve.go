package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/parallax-engine/parallax/internal/serve"
)

const serveUsage = `
Usage:
  parallax serve --model DIR [flags]

Serves the model over an OpenAI-compatible HTTP API: POST
/v1/chat/completions and /v1/completions (stream: true for server-sent
events), GET /v1/models, /health and /metrics, and a chat page at /.
Requests are batched continuously: up to --max-batch sequences decode
together, a new request joins between two decode steps and leaves when it
is done or its client disconnects; up to --max-queue more wait, and beyond
that requests are answered 429. Chat messages are rendered as
"role: content" lines followed by "assistant:". Sampling with a request's
seed gives the tokens 'parallax generate --seed' gives. SIGINT or SIGTERM
stops accepting requests, lets those in flight finish (up to
--drain-timeout) and exits. See docs/SERVE.md.
`

const serveExamples = `
  parallax serve --model run
  parallax serve --model Qwen3-0.6B --device cuda:0 --dtype bf16 --max-batch 64 --port 8000
  curl http://127.0.0.1:8080/v1/chat/completions -d '{"model":"run","messages":[{"role":"user","content":"Hi"}]}'
`

func runServe(args []string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serveContext(ctx, args, stdout, stderr, nil)
}

// serveContext is runServe until ctx ends; ready, if not nil, is called
// with the listening address.
func serveContext(ctx context.Context, args []string, stdout, stderr io.Writer, ready func(addr string)) error {
	fs := newFlagSet("serve", serveUsage, serveExamples, stdout)
	dir := fs.String("model", "run", "model directory")
	device := fs.String("device", "auto", "device: auto, cpu, vulkan:N, cuda:N")
	dtypeName := fs.String("dtype", "auto", dtypeUsage)
	weightsFlag := fs.String("weights", "stored", weightsUsage)
	host := fs.String("host", "127.0.0.1", "address to listen on (loopback by default; 0.0.0.0 for every interface)")
	port := fs.Int("port", 8080, "port to listen on (0: any free port)")
	addr := fs.String("addr", "", "host:port to listen on (overrides --host and --port)")
	name := fs.String("name", "", "the model id clients name (default: the model directory's base name)")
	maxBatch := fs.Int("max-batch", 8, "sequences decoded together (KV cache slots)")
	maxQueue := fs.Int("max-queue", 64, "requests that may wait for a slot; beyond, 429")
	ctxLen := fs.Int("ctx", 0, "positions per sequence, prompt and output (0: the model's max_seq)")
	apiKey := fs.String("api-key", "", "require Authorization: Bearer KEY on /v1/ (default: $PARALLAX_API_KEY)")
	drain := fs.Duration("drain-timeout", 30*time.Second, "on SIGTERM, how long requests in flight may take to finish")
	convert := fs.Bool("convert-parallax", false, "load a softmax checkpoint as Parallax with W_R = 0")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	switch {
	case *maxBatch < 1 || *maxBatch > 4096:
		return usagef("--max-batch %d must be in [1, 4096]", *maxBatch)
	case *maxQueue < 0:
		return usagef("--max-queue %d must be >= 0", *maxQueue)
	case *ctxLen < 0:
		return usagef("--ctx %d must be >= 0 (0: the model's max_seq)", *ctxLen)
	case *port < 0 || *port > 65535:
		return usagef("--port %d must be in [0, 65535]", *port)
	case *drain < 0:
		return usagef("--drain-timeout %v must be >= 0", *drain)
	}
	listen := *addr
	if listen == "" {
		listen = net.JoinHostPort(*host, strconv.Itoa(*port))
	}
	if *apiKey == "" {
		*apiKey = os.Getenv("PARALLAX_API_KEY")
	}
	if *name == "" {
		*name = filepath.Base(filepath.Clean(*dir))
	}
	dt, err := parseDTypeFlag(*dtypeName)
	if err != nil {
		return err
	}
	weights, err := parseWeightsFlag(*weightsFlag)
	if err != nil {
		return err
	}
	if mc, err := readModelConfig(*dir); err == nil && *ctxLen > mc.MaxSeq {
		return usagef("--ctx %d exceeds the model's max_seq %d", *ctxLen, mc.MaxSeq)
	}
	tok, err := loadTokenizer(*dir)
	if err != nil {
		return err
	}
	dev, m, err := openModel(*dir, *device, dt, *convert, weights)
	if err != nil {
		return err
	}
	defer dev.Close()
	defer m.Free()
	if tok.VocabSize() > m.Config.Vocab {
		return fmt.Errorf("tokenizer in %s has %d tokens but the model only %d: they do not belong together", *dir, tok.VocabSize(), m.Config.Vocab)
	}
	suppress := undecodable(tok, m.Config.Vocab, m.Config.EOS)
	if len(suppress) == m.Config.Vocab {
		return fmt.Errorf("the tokenizer in %s decodes none of the model's %d ids", *dir, m.Config.Vocab)
	}
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, "parallax serve: "+format+"\n", a...) }
	qn := *maxQueue
	if qn == 0 {
		qn = -1 // none may wait
	}
	tmpl, err := chatTemplate(*dir, logf)
	if err != nil {
		return err
	}
	srv, err := serve.New(serve.Config{
		Model: m, Tokenizer: tok, Template: tmpl, ModelName: *name,
		MaxBatch: *maxBatch, MaxQueue: qn, Ctx: *ctxLen, APIKey: *apiKey,
		Suppress: suppress, Stop: m.Config.EOS, Logf: logf,
	})
	if err != nil {
		return err
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", listen, err)
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "parallax serve: %s on %s (%s), up to %d sequences, listening on http://%s\n",
		*name, dev.Info().ID(), m.DType, *maxBatch, ln.Addr())
	if ready != nil {
		ready(ln.Addr().String())
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	logf("shutting down: finishing the requests in flight")
	sctx, cancel := context.WithTimeout(context.Background(), *drain)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		logf("requests still in flight after %v are cut off: %v", *drain, err)
		_ = hs.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}
