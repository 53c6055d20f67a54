package serve

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/parallax-engine/parallax/model"
)

// The scheduler is one goroutine that owns the model: it admits queued
// jobs into free slots of the batch cache between decode steps (prefilling
// each prompt as a batch of one while the others wait), runs one decode
// step over every busy slot, samples each sequence with its own sampler,
// hands the tokens to the jobs' handlers and frees the slot of a job that
// finished or whose client went away.

// job is one generation the scheduler runs.
type job struct {
	ctx     context.Context
	prompt  []int32
	n       int // tokens to generate at most
	sampler *model.Sampler
	events  chan event // buffered for every event the job can get: never blocks the scheduler
	queued  time.Time
}

// event is one step of a job's output: a token, or the end (with the
// reason, or an error).
type event struct {
	tok    int
	done   bool
	reason string // "stop" (an end-of-sequence token) or "length"
	err    error
}

// running is a job in a slot.
type running struct {
	j    *job
	next int32 // the token to feed at the next step
	made int   // tokens produced
}

// ErrShutdown fails the jobs still queued or running when the server
// closes.
var ErrShutdown = errors.New("the server is shutting down")

// prefillBudget is how many prompt tokens the scheduler prefills between
// two decode steps while sequences are decoding (at least one prompt), so a
// burst of new requests delays the running ones by a bounded amount.
const prefillBudget = 512

func (s *Server) loop() {
	defer close(s.stopped)
	busy := map[int]*running{}
	defer func() {
		for slot, r := range busy {
			s.finish(r.j, event{done: true, err: ErrShutdown})
			s.bc.Release(slot)
		}
		for {
			select {
			case j := <-s.queue:
				s.finish(j, event{done: true, err: ErrShutdown})
			default:
				return
			}
		}
	}()
	for {
		if len(busy) == 0 {
			select {
			case j := <-s.queue:
				s.admit(j, busy)
			case <-s.quit:
				return
			}
		}
		select {
		case <-s.quit:
			return
		default:
		}
		// Admit more while slots are free, up to the prefill budget.
		spent := 0
	admit:
		for len(busy) < s.cfg.MaxBatch && spent < prefillBudget {
			select {
			case j := <-s.queue:
				spent += len(j.prompt)
				s.admit(j, busy)
			default:
				break admit
			}
		}
		// Drop jobs whose client went away.
		for slot, r := range busy {
			if r.j.ctx.Err() != nil {
				s.finish(r.j, event{done: true, err: r.j.ctx.Err()})
				delete(busy, slot)
				s.bc.Release(slot)
			}
		}
		s.metrics.setBatch(len(busy), len(s.queue))
		if len(busy) == 0 {
			continue
		}
		s.step(busy)
	}
}

// admit prefills a job into a free slot and samples its first token.
func (s *Server) admit(j *job, busy map[int]*running) {
	if err := j.ctx.Err(); err != nil {
		s.finish(j, event{done: true, err: err})
		return
	}
	slot := -1
	for i := range s.cfg.MaxBatch {
		if _, ok := busy[i]; !ok {
			slot = i
			break
		}
	}
	if slot < 0 { // cannot happen: admit runs only with a free slot
		s.finish(j, event{done: true, err: errors.New("no free slot")})
		return
	}
	logits, err := s.cfg.Model.Prefill(s.bc, slot, j.prompt)
	if err != nil {
		s.bc.Release(slot)
		s.finish(j, event{done: true, err: fmt.Errorf("prefill: %w", err)})
		return
	}
	s.metrics.firstToken(time.Since(j.queued))
	r := &running{j: j}
	if s.emit(r, logits) {
		s.bc.Release(slot)
		return
	}
	busy[slot] = r
}

// step runs one decode step over every busy slot.
func (s *Server) step(busy map[int]*running) {
	if s.testHookStep != nil {
		s.testHookStep()
	}
	slots := make([]int, 0, len(busy))
	toks := make([]int32, 0, len(busy))
	for slot := range s.cfg.MaxBatch {
		if r, ok := busy[slot]; ok {
			slots = append(slots, slot)
			toks = append(toks, r.next)
		}
	}
	t0 := time.Now()
	logits, err := s.cfg.Model.StepSlots(s.bc, slots, toks)
	if err != nil {
		// A device error fails the requests in flight; the cache is
		// emptied and the server goes on with the next requests.
		s.logf("decode step failed, failing %d requests: %v", len(slots), err)
		for _, slot := range slots {
			s.finish(busy[slot].j, event{done: true, err: fmt.Errorf("decode step: %w", err)})
			delete(busy, slot)
			s.bc.Release(slot)
		}
		return
	}
	s.metrics.stepped(len(slots), time.Since(t0))
	V := s.cfg.Model.Config.Vocab
	for i, slot := range slots {
		if s.emit(busy[slot], logits[i*V:(i+1)*V]) {
			delete(busy, slot)
			s.bc.Release(slot)
		}
	}
}

// emit samples the next token of r from its logits row and sends it; it
// reports whether the job is done (an end token, or its budget spent).
func (s *Server) emit(r *running, logits []float32) bool {
	for _, t := range s.cfg.Suppress {
		logits[t] = float32(math.Inf(-1))
	}
	tok := r.j.sampler.Sample(logits)
	if s.stop[tok] {
		s.finish(r.j, event{done: true, reason: "stop"})
		return true
	}
	r.made++
	r.next = int32(tok)
	r.j.events <- event{tok: tok}
	s.metrics.tokens(1)
	if r.made >= r.j.n {
		s.finish(r.j, event{done: true, reason: "length"})
		return true
	}
	return false
}

// finish sends a job's last event and gives its place in the server back.
func (s *Server) finish(j *job, e event) {
	j.events <- e
	close(j.events)
	s.inflight.Add(-1)
}
