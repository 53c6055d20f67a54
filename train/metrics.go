package train

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/parallax-engine/parallax/internal/atomicfile"
)

// Record is one line of metrics.jsonl. Training steps fill the first group;
// evaluation points (Eval true) fill ValLoss, PPL and the stable ranks.
// Fields that were not measured are omitted.
type Record struct {
	Step       int       `json:"step"`
	Loss       *float64  `json:"loss,omitempty"`
	LR         *float64  `json:"lr,omitempty"`       // the main group's rate: Muon's, or AdamW's for --optimizer adamw
	LRAdamW    *float64  `json:"lr_adamw,omitempty"` // AdamW's rate when Muon is the main group
	GradNorm   *float64  `json:"grad_norm,omitempty"`
	TokensPerS *float64  `json:"tokens_per_s,omitempty"`
	MFU        *float64  `json:"mfu,omitempty"` // model FLOPs utilisation, when a peak is known
	Tokens     int64     `json:"tokens,omitempty"`
	ElapsedS   *float64  `json:"elapsed_s,omitempty"`
	COR        []float64 `json:"cor,omitempty"`     // per layer, Parallax only
	Gate       []float64 `json:"gate,omitempty"`    // per layer mean probe gate, with --probe-gate
	Skipped    bool      `json:"skipped,omitempty"` // the step was skipped (non-finite loss or gradient)

	Eval        bool        `json:"eval,omitempty"`
	ValLoss     *float64    `json:"val_loss,omitempty"`
	PPL         *float64    `json:"ppl,omitempty"`
	SRankQ      []float64   `json:"srank_q,omitempty"`       // per layer
	SRankK      []float64   `json:"srank_k,omitempty"`       // per layer
	SRankR      []float64   `json:"srank_r,omitempty"`       // per layer
	SRankRK     []float64   `json:"srank_rk,omitempty"`      // per layer, mean over heads of W_R^T W_K
	SRankRKHead [][]float64 `json:"srank_rk_head,omitempty"` // per layer and head
}

// f returns a pointer to v for optional fields, nil for NaN.
func f(v float64) *float64 {
	if math.IsNaN(v) {
		return nil
	}
	return &v
}

// MetricsLog appends Records to a JSONL file.
type MetricsLog struct {
	f *os.File
	w *bufio.Writer
}

// OpenMetrics opens path for appending (creating it). With truncateAfter >=
// 0, records of steps after truncateAfter are dropped first, so a resumed
// run does not leave lines of steps it repeats, and a fresh run (0) starts
// its own file. A symbolic link at path is written through; a path that is
// not a regular file (a directory, pipe or device) is refused.
func OpenMetrics(path string, truncateAfter int) (*MetricsLog, error) {
	target, err := atomicfile.Target(path)
	if err != nil {
		return nil, fmt.Errorf("metrics %s: %w", path, err)
	}
	if truncateAfter >= 0 {
		if err := truncateMetrics(target, truncateAfter); err != nil {
			return nil, err
		}
	}
	fh, err := os.OpenFile(target, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	// A last line cut by a crash is ended, so that the first record
	// appended does not join it and become unreadable with it.
	cut, err := endsInsideLine(target)
	if err == nil && cut {
		_, err = fh.Write([]byte{'\n'})
	}
	if err != nil {
		fh.Close()
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return &MetricsLog{f: fh, w: bufio.NewWriter(fh)}, nil
}

// endsInsideLine reports whether the file at path is not empty and does
// not end with a newline.
func endsInsideLine(path string) (bool, error) {
	fh, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil || st.Size() == 0 {
		return false, err
	}
	b := make([]byte, 1)
	if _, err := fh.ReadAt(b, st.Size()-1); err != nil {
		return false, err
	}
	return b[0] != '\n', nil
}

func truncateMetrics(path string, after int) error {
	recs, err := ReadMetrics(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	var keep []Record
	for _, r := range recs {
		if r.Step <= after {
			keep = append(keep, r)
		}
	}
	if len(keep) == len(recs) {
		return nil
	}
	// Replaced whole, so a crash here leaves the old lines, not half of them.
	err = atomicfile.Write(path, func(w io.Writer) error {
		enc := json.NewEncoder(w)
		for _, r := range keep {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("metrics %s: %w", path, err)
	}
	return nil
}

// Write appends one record and flushes it.
func (l *MetricsLog) Write(r Record) error {
	if l == nil { // a data-parallel rank other than 0 writes no metrics
		return nil
	}
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	l.w.Write(append(b, '\n'))
	if err := l.w.Flush(); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}

// Close closes the file.
func (l *MetricsLog) Close() error {
	if l == nil {
		return nil
	}
	l.w.Flush()
	return l.f.Close()
}

// ReadMetrics reads every record of a metrics.jsonl file, skipping a
// truncated last line.
func ReadMetrics(path string) ([]Record, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	var out []Record
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			continue // a line cut by a crash
		}
		out = append(out, r)
	}
	return out, sc.Err()
}
