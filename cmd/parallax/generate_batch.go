package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/parallax-engine/parallax/model"
	"github.com/parallax-engine/parallax/model/tokenizer"
)

// Batched generation: 'generate --prompts-file' continues many prompts
// together through a model.BatchCache, continuously batched the way the
// server's scheduler (internal/serve) runs requests: a prompt is prefilled
// into a free slot, every busy slot advances by one token per decode step,
// and a sequence that ends frees its slot for the next prompt.

// maxAutoBatch caps the default --batch (all prompts): enough sequences to
// keep a GPU's decode step busy, without a KV cache that grows with the
// file.
const maxAutoBatch = 32

// maxBatchSlots is the largest --batch (serve's --max-batch bound).
const maxBatchSlots = 4096

// batchPrompt is one prompt of a --prompts-file and the line it is on.
type batchPrompt struct {
	text string
	line int
}

// batchRecord is the JSONL line printed for one prompt.
type batchRecord struct {
	Index  int    `json:"index"`
	Prompt string `json:"prompt"`
	Text   string `json:"text"`
	Tokens int    `json:"tokens"`
	Finish string `json:"finish"`
}

// The reasons a sequence ends (batchRecord.Finish).
const (
	finishLength   = "length"   // --max-tokens generated
	finishStop     = "stop"     // a --stop text
	finishEOS      = "eos"      // an end-of-text id was sampled
	finishCapacity = "capacity" // the model's context is full
)

// batchOptions configure generateBatch.
type batchOptions struct {
	slots     int // --batch; 0: all prompts, at most maxAutoBatch
	maxTokens int
	sample    model.SampleOptions // Seed is prompt 0's; prompt i's is Seed+i
	stop      []int               // ids that end a sequence (not counted)
	suppress  []int               // ids never sampled
	stopTexts []string            // --stop
}

// readPrompts reads a --prompts-file (- for standard input): one prompt a
// line, a trailing \r (a CRLF file) dropped, blank lines skipped.
func readPrompts(path string) ([]batchPrompt, error) {
	name := path
	if path == "-" {
		name = "standard input"
	}
	b, err := readInput(path)
	if err != nil {
		return nil, fmt.Errorf("read --prompts-file %s: %w", name, err)
	}
	var out []batchPrompt
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSuffix(line, "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		out = append(out, batchPrompt{text: line, line: i + 1})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--prompts-file %s has no prompts (every line is blank)", name)
	}
	return out, nil
}

// batchSeq is a sequence in a slot of the batch cache.
type batchSeq struct {
	index   int // the prompt's
	sampler *model.Sampler
	dec     *streamDecoder // the text, cut at a --stop text; prints nothing
	next    int32          // the token to feed at the next step
	made    int            // tokens generated
}

// generateBatch continues every prompt and prints one batchRecord a prompt
// to stdout, in the prompts' order.
func generateBatch(m *model.Model, tok *tokenizer.Tokenizer, prompts []batchPrompt, o batchOptions, stdout io.Writer) error {
	maxSeq, V := m.Config.MaxSeq, m.Config.Vocab
	ids := make([][]int32, len(prompts))
	capacity := 0
	for i, p := range prompts {
		enc := tok.EncodeHF(p.text, true)
		switch {
		case len(enc) == 0:
			return fmt.Errorf("prompt %d (line %d of --prompts-file) encodes to no tokens", i, p.line)
		case len(enc) > maxSeq:
			return fmt.Errorf("prompt %d (line %d of --prompts-file) has %d tokens; the model's context is %d", i, p.line, len(enc), maxSeq)
		}
		ids[i] = make([]int32, len(enc))
		for k, t := range enc {
			ids[i][k] = int32(t)
		}
		// A sequence of P prompt tokens that generates N holds P+N-1
		// positions (the last token is never fed back); N is clamped
		// first so that a huge --max-tokens cannot overflow.
		capacity = max(capacity, len(enc)+min(o.maxTokens, maxSeq)-1)
	}
	capacity = min(capacity, maxSeq)
	slots := o.slots
	if slots == 0 {
		slots = maxAutoBatch
	}
	slots = min(slots, len(prompts))
	for _, t := range o.suppress {
		if t < 0 || t >= V {
			return fmt.Errorf("suppressed id %d is outside the vocabulary [0, %d)", t, V)
		}
	}
	stop := make(map[int]bool, len(o.stop))
	for _, t := range o.stop {
		stop[t] = true
	}
	bc, err := m.NewBatchCache(slots, capacity)
	if err != nil {
		return fmt.Errorf("allocate the KV cache of %d sequences of %d positions (a smaller --batch or --max-tokens needs less): %w", slots, capacity, err)
	}
	defer bc.Free()

	// Records are printed in the prompts' order: one that ends before an
	// earlier prompt's waits in done.
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false) // the text as it is, not <, > and & escaped
	done := make([]*batchRecord, len(prompts))
	printed := 0
	end := func(q *batchSeq, why string) error {
		done[q.index] = &batchRecord{Index: q.index, Prompt: prompts[q.index].text, Text: q.dec.finish(), Tokens: q.made, Finish: why}
		for printed < len(done) && done[printed] != nil {
			if err := enc.Encode(done[printed]); err != nil {
				return fmt.Errorf("write the record of prompt %d: %w", printed, err)
			}
			done[printed] = nil
			printed++
		}
		return nil
	}
	// Greedy over a contiguous range of ids (the suppressed ones, if any,
	// past it) picks on the device and reads back one id a sequence, not
	// the logits of every slot.
	classes := model.GreedyClasses(o.sample.Temperature, o.suppress, V)
	// advance takes t as q's next token and returns why the sequence
	// ends, or "" if it goes on.
	advance := func(q *batchSeq, slot int, t int) (string, error) {
		if stop[t] {
			return finishEOS, nil
		}
		q.made++
		if !q.dec.push(t) {
			if q.dec.err != nil {
				return "", fmt.Errorf("prompt %d (line %d): %w", q.index, prompts[q.index].line, q.dec.err)
			}
			return finishStop, nil
		}
		switch {
		case q.made >= o.maxTokens:
			return finishLength, nil
		case bc.Len(slot) >= bc.Cap:
			return finishCapacity, nil
		}
		q.next = int32(t)
		return "", nil
	}
	// emit samples q's next token from its logits row (in slot) and
	// returns why the sequence ends, or "" if it goes on.
	emit := func(q *batchSeq, slot int, logits []float32) (string, error) {
		for _, t := range o.suppress {
			logits[t] = float32(math.Inf(-1))
		}
		return advance(q, slot, q.sampler.Sample(logits))
	}

	busy := make([]*batchSeq, slots) // by slot; nil: free
	active, next := 0, 0
	ss := make([]int, 0, slots)
	toks := make([]int32, 0, slots)
	for next < len(prompts) || active > 0 {
		// Fill every free slot (the whole prompt in one prefill, as
		// Generate runs it), then step all busy slots once.
		for s := range busy {
			for busy[s] == nil && next < len(prompts) {
				i := next
				next++
				so := o.sample
				so.Seed += uint64(i)
				smp, err := model.NewSampler(so)
				if err != nil {
					return fmt.Errorf("prompt %d: %w", i, err)
				}
				q := &batchSeq{index: i, sampler: smp, dec: newStreamDecoder(tok, o.stopTexts, io.Discard)}
				logits, err := m.Prefill(bc, s, ids[i])
				if err != nil {
					return fmt.Errorf("prompt %d (line %d): %w", i, prompts[i].line, err)
				}
				why, err := emit(q, s, logits)
				if err != nil {
					return err
				}
				if why != "" {
					bc.Release(s)
					if err := end(q, why); err != nil {
						return err
					}
					continue
				}
				busy[s] = q
				active++
			}
		}
		if active == 0 {
			continue
		}
		ss, toks = ss[:0], toks[:0]
		for s, q := range busy {
			if q != nil {
				ss = append(ss, s)
				toks = append(toks, q.next)
			}
		}
		var logits []float32
		var picked []int32
		var err error
		if classes > 0 {
			picked, err = m.StepSlotsGreedy(bc, ss, toks, classes)
		} else {
			logits, err = m.StepSlots(bc, ss, toks)
		}
		if err != nil {
			return fmt.Errorf("decode step of %d sequences: %w", len(ss), err)
		}
		for k, s := range ss {
			q := busy[s]
			var why string
			if picked != nil {
				why, err = advance(q, s, int(picked[k]))
			} else {
				why, err = emit(q, s, logits[k*V:(k+1)*V])
			}
			if err != nil {
				return err
			}
			if why == "" {
				continue
			}
			busy[s] = nil
			active--
			bc.Release(s)
			if err := end(q, why); err != nil {
				return err
			}
		}
	}
	return nil
}
