package mad

import "math"

// Scores accumulates MAD's evaluation metrics over an epoch (docs/MAD.md,
// "The protocol"): the argmax prediction at every position whose target is not
// IgnoreIndex, per class, and the summed cross-entropy.
type Scores struct {
	V       int
	TP      []int // correct predictions of class c
	Pred    []int // predictions of class c (TP + FP)
	Support []int // targets of class c (TP + FN)
	LossSum float64
	Count   int // scored positions
}

// NewScores returns an empty accumulator for V classes.
func NewScores(v int) *Scores {
	return &Scores{V: v, TP: make([]int, v), Pred: make([]int, v), Support: make([]int, v)}
}

// AddLogits scores rows of logits [n, V] (row-major) against targets [n].
func (s *Scores) AddLogits(logits []float32, targets []int32) {
	for i, t := range targets {
		if t == IgnoreIndex {
			continue
		}
		row := logits[i*s.V : (i+1)*s.V]
		best := 0
		for c, v := range row {
			if v > row[best] {
				best = c
			}
		}
		s.Add(best, int(t))
	}
}

// Add records one prediction for one target.
func (s *Scores) Add(pred, target int) {
	s.Pred[pred]++
	s.Support[target]++
	if pred == target {
		s.TP[target]++
	}
}

// AddLoss adds a batch's summed loss over its counted targets.
func (s *Scores) AddLoss(st LossStats) {
	s.LossSum += st.Sum
	s.Count += st.Count
}

// Micro is the plain accuracy: correct predictions / scored positions.
func (s *Scores) Micro() float64 {
	var tp, n int
	for c := range s.V {
		tp += s.TP[c]
		n += s.Support[c]
	}
	if n == 0 {
		return 0
	}
	return float64(tp) / float64(n)
}

// Macro is MAD's accuracy, torchmetrics' MulticlassAccuracy with
// average="macro": the recall TP/(TP+FN) of each class, averaged over the
// classes that occur as a target or a prediction (a class predicted but
// never a target counts with recall 0; a class neither predicted nor
// present is left out).
func (s *Scores) Macro() float64 {
	var sum float64
	n := 0
	for c := range s.V {
		if s.Support[c] == 0 && s.Pred[c] == 0 {
			continue
		}
		n++
		if s.Support[c] > 0 {
			sum += float64(s.TP[c]) / float64(s.Support[c])
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// Loss is the mean cross-entropy per counted target.
func (s *Scores) Loss() float64 {
	if s.Count == 0 {
		return math.NaN()
	}
	return s.LossSum / float64(s.Count)
}

// Perplexity is exp(Loss), torchmetrics' Perplexity over the epoch.
func (s *Scores) Perplexity() float64 { return math.Exp(s.Loss()) }
