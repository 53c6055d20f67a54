package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

const serveBenchUsage = `
Usage:
  parallax serve-bench --url URL [flags]

Load-tests a running 'parallax serve' (or any OpenAI-compatible server):
for each concurrency of --clients, that many clients each send
--requests streaming completions back to back, and the run reports the
generated tokens per second over all clients, the time to first token and
the request latency (p50, p99), as a table and, with --out, as JSON.
Requests use temperature 0 and ignore nothing: a reply may end early at an
end-of-sequence token; the token counts are the server's usage.
`

const serveBenchExamples = `
  parallax serve-bench --url http://127.0.0.1:8080 --clients 1,8,32,64 --max-tokens 128 --out serve.json
`

// Bounds of serve-bench's flags: clients per concurrency, requests per
// client, and requests (whose timings are kept) at one concurrency.
const (
	maxServeBenchClients  = 10000
	maxServeBenchRequests = 1_000_000
	maxServeBenchSamples  = 10_000_000
)

// serveBenchLevel is the result of one concurrency.
type serveBenchLevel struct {
	Clients      int     `json:"clients"`
	Requests     int     `json:"requests"`
	Failed       int     `json:"failed"`
	Tokens       int     `json:"completion_tokens"`
	WallSeconds  float64 `json:"wall_seconds"`
	TokensPerSec float64 `json:"tokens_per_second"`
	TTFTP50      float64 `json:"ttft_p50_seconds"`
	TTFTP99      float64 `json:"ttft_p99_seconds"`
	LatencyP50   float64 `json:"latency_p50_seconds"`
	LatencyP99   float64 `json:"latency_p99_seconds"`
	PerClientTPS float64 `json:"tokens_per_second_per_client"`
	FirstError   string  `json:"first_error,omitempty"`
}

func runServeBench(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve-bench", serveBenchUsage, serveBenchExamples, stdout)
	url := fs.String("url", "http://127.0.0.1:8080", "server base URL")
	modelName := fs.String("model", "", "model id (default: the first of /v1/models)")
	clientsFlag := fs.String("clients", "1,8,32,64", "comma-separated concurrencies")
	requests := fs.Int("requests", 4, "requests per client at each concurrency")
	maxTokens := fs.Int("max-tokens", 128, "max_tokens of each request")
	prompt := fs.String("prompt", "The history of the printing press begins", "prompt of each request (a client's number is appended)")
	apiKey := fs.String("api-key", "", "bearer key (default: $PARALLAX_API_KEY)")
	timeout := fs.Duration("timeout", 10*time.Minute, "limit of the whole run")
	outPath := fs.String("out", "", "write the results as JSON to this file")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	var levels []int
	for _, f := range strings.Split(*clientsFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > maxServeBenchClients {
			return usagef("--clients %q: want integers in [1, %d] separated by commas", *clientsFlag, maxServeBenchClients)
		}
		levels = append(levels, n)
	}
	if err := checkFlags(fs,
		numFlag("requests").atLeast(1).atMost(maxServeBenchRequests),
		numFlag("max-tokens").atLeast(1),
	); err != nil {
		return err
	}
	// The samples of a concurrency are kept until it ends.
	if c := slices.Max(levels); c*(*requests) > maxServeBenchSamples {
		return usagef("--clients %d with --requests %d: %d requests at one concurrency, more than %d", c, *requests, c*(*requests), maxServeBenchSamples)
	}
	if *timeout <= 0 {
		return usagef("--timeout %v: want a duration > 0", *timeout)
	}
	if *apiKey == "" {
		*apiKey = os.Getenv("PARALLAX_API_KEY")
	}
	base := strings.TrimRight(*url, "/")
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024}}
	if *modelName == "" {
		name, err := firstModel(ctx, client, base, *apiKey)
		if err != nil {
			return err
		}
		*modelName = name
	}
	var results []serveBenchLevel
	fmt.Fprintf(stdout, "%8s %9s %8s %12s %10s %10s %10s %10s\n", "clients", "requests", "tokens", "tokens/s", "ttft p50", "ttft p99", "lat p50", "lat p99")
	for _, c := range levels {
		lv := benchLevel(ctx, client, base, *apiKey, *modelName, *prompt, c, *requests, *maxTokens)
		results = append(results, lv)
		fmt.Fprintf(stdout, "%8d %9d %8d %12.1f %9.3fs %9.3fs %9.3fs %9.3fs\n", lv.Clients, lv.Requests, lv.Tokens, lv.TokensPerSec,
			lv.TTFTP50, lv.TTFTP99, lv.LatencyP50, lv.LatencyP99)
		if lv.Failed > 0 {
			fmt.Fprintf(stderr, "parallax serve-bench: %d of %d requests at %d clients failed: %s\n", lv.Failed, lv.Requests, c, lv.FirstError)
		}
		if ctx.Err() != nil {
			break
		}
	}
	if *outPath != "" {
		b, _ := json.MarshalIndent(map[string]any{"url": base, "model": *modelName, "max_tokens": *maxTokens,
			"requests_per_client": *requests, "levels": results}, "", "  ")
		if err := os.WriteFile(*outPath, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", *outPath, err)
		}
	}
	return nil
}

func firstModel(ctx context.Context, client *http.Client, base, key string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/models", nil)
	if err != nil {
		return "", err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	res, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("list models: %w", err)
	}
	defer res.Body.Close()
	var v struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(res.Body).Decode(&v); err != nil || len(v.Data) == 0 {
		return "", fmt.Errorf("list models: status %d, no model in the answer (%v)", res.StatusCode, err)
	}
	return v.Data[0].ID, nil
}

// benchLevel runs clients clients of requests requests each.
func benchLevel(ctx context.Context, client *http.Client, base, key, modelName, prompt string, clients, requests, maxTokens int) serveBenchLevel {
	type sample struct {
		ttft, lat float64
		tokens    int
		err       error
	}
	samples := make([]sample, 0, clients*requests)
	var mu sync.Mutex
	var wg sync.WaitGroup
	t0 := time.Now()
	for c := range clients {
		wg.Go(func() {
			for r := range requests {
				body, _ := json.Marshal(map[string]any{"model": modelName, "prompt": fmt.Sprintf("%s %d.%d", prompt, c, r),
					"max_tokens": maxTokens, "temperature": 0, "stream": true, "stream_options": map[string]any{"include_usage": true}})
				ttft, lat, toks, err := benchRequest(ctx, client, base+"/v1/completions", key, body)
				mu.Lock()
				samples = append(samples, sample{ttft, lat, toks, err})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	wall := time.Since(t0).Seconds()
	lv := serveBenchLevel{Clients: clients, Requests: len(samples), WallSeconds: wall}
	var ttfts, lats []float64
	for _, s := range samples {
		if s.err != nil {
			lv.Failed++
			if lv.FirstError == "" {
				lv.FirstError = s.err.Error()
			}
			continue
		}
		lv.Tokens += s.tokens
		ttfts = append(ttfts, s.ttft)
		lats = append(lats, s.lat)
	}
	if wall > 0 {
		lv.TokensPerSec = float64(lv.Tokens) / wall
		lv.PerClientTPS = lv.TokensPerSec / float64(clients)
	}
	lv.TTFTP50, lv.TTFTP99 = percentile(ttfts, 0.50), percentile(ttfts, 0.99)
	lv.LatencyP50, lv.LatencyP99 = percentile(lats, 0.50), percentile(lats, 0.99)
	return lv
}

// benchRequest sends one streaming request and times it.
func benchRequest(ctx context.Context, client *http.Client, url, key string, body []byte) (ttft, lat float64, tokens int, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	t0 := time.Now()
	res, err := client.Do(req)
	if err != nil {
		return 0, 0, 0, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(res.Body, 512))
		return 0, 0, 0, fmt.Errorf("status %d: %s", res.StatusCode, bytes.TrimSpace(b))
	}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	done := false
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			break
		}
		var c struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			return 0, 0, 0, fmt.Errorf("bad chunk: %w", err)
		}
		if c.Error != nil {
			return 0, 0, 0, fmt.Errorf("server error: %s", c.Error.Message)
		}
		if ttft == 0 && len(c.Choices) > 0 && c.Choices[0].Text != "" {
			ttft = time.Since(t0).Seconds()
		}
		if c.Usage != nil {
			tokens = c.Usage.CompletionTokens
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, 0, err
	}
	if !done {
		return 0, 0, 0, fmt.Errorf("the stream ended without [DONE]")
	}
	lat = time.Since(t0).Seconds()
	if ttft == 0 {
		ttft = lat
	}
	return ttft, lat, tokens, nil
}

// percentile is the nearest-rank q-quantile of xs (0 for none).
func percentile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}
