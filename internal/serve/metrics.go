package serve

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// metrics are the server's counters, served at /metrics in the Prometheus
// text exposition format (version 0.0.4).
type metrics struct {
	mu        sync.Mutex
	batch     int // sequences in the last decode step
	queued    int // requests waiting for a slot
	tokensN   int64
	steps     int64
	stepSecs  float64
	ttftN     int64
	ttftSecs  float64
	reqN      int64
	reqSecs   float64
	responses map[int]int64 // by HTTP status
	started   time.Time
}

func newMetrics() *metrics { return &metrics{responses: map[int]int64{}, started: time.Now()} }

func (m *metrics) setBatch(batch, queued int) {
	m.mu.Lock()
	m.batch, m.queued = batch, queued
	m.mu.Unlock()
}

func (m *metrics) tokens(n int) {
	m.mu.Lock()
	m.tokensN += int64(n)
	m.mu.Unlock()
}

func (m *metrics) stepped(batch int, d time.Duration) {
	m.mu.Lock()
	m.steps++
	m.stepSecs += d.Seconds()
	m.batch = batch
	m.mu.Unlock()
}

func (m *metrics) firstToken(d time.Duration) {
	m.mu.Lock()
	m.ttftN++
	m.ttftSecs += d.Seconds()
	m.mu.Unlock()
}

func (m *metrics) request(d time.Duration) {
	m.mu.Lock()
	m.reqN++
	m.reqSecs += d.Seconds()
	m.mu.Unlock()
}

func (m *metrics) status(code int) {
	m.mu.Lock()
	m.responses[code]++
	m.mu.Unlock()
}

// serveMetrics writes the metrics in the Prometheus text format.
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) {
	m := s.metrics
	m.mu.Lock()
	var b strings.Builder
	gauge := func(name, help string, v float64) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s gauge\n%s %g\n", name, help, name, name, v)
	}
	counter := func(name, help string, v float64) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s counter\n%s %g\n", name, help, name, name, v)
	}
	summary := func(name, help string, n int64, sum float64) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s summary\n%s_sum %g\n%s_count %d\n", name, help, name, name, sum, name, n)
	}
	gauge("parallax_queue_length", "Requests waiting for a batch slot.", float64(len(s.queue)))
	gauge("parallax_batch_size", "Sequences in the last decode step.", float64(m.batch))
	gauge("parallax_requests_in_flight", "Requests queued or running.", float64(s.inflight.Load()))
	gauge("parallax_batch_slots", "Slots of the batch (--max-batch).", float64(s.cfg.MaxBatch))
	counter("parallax_generated_tokens_total", "Tokens generated.", float64(m.tokensN))
	if el := time.Since(m.started).Seconds(); el > 0 {
		gauge("parallax_tokens_per_second", "Tokens generated per second since the server started.", float64(m.tokensN)/el)
	}
	summary("parallax_decode_step_seconds", "Time of one decode step over the batch.", m.steps, m.stepSecs)
	summary("parallax_time_to_first_token_seconds", "Time from a request's arrival to its first token.", m.ttftN, m.ttftSecs)
	summary("parallax_request_duration_seconds", "Time from a request's arrival to its last byte.", m.reqN, m.reqSecs)
	codes := make([]int, 0, len(m.responses))
	for c := range m.responses {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	b.WriteString("# HELP parallax_responses_total Completion responses by HTTP status (499: the client went away).\n# TYPE parallax_responses_total counter\n")
	for _, c := range codes {
		fmt.Fprintf(&b, "parallax_responses_total{code=\"%d\"} %d\n", c, m.responses[c])
	}
	m.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = w.Write([]byte(b.String()))
}
