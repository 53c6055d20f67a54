package train

import (
	"fmt"
	"math"

	"github.com/parallax-engine/parallax/model"
	"github.com/parallax-engine/parallax/train/data"
)

// EvalLoss returns the mean cross-entropy in nats per token of m over
// windows of T+1 tokens (inputs and shifted targets), evaluated B at a time
// (a last partial batch runs with fewer rows), and the number of tokens
// scored. A window entry marked data.Ignored is an input whose target is
// not scored. A non-finite loss is returned as it is, not as an error.
func EvalLoss(m *model.Model, windows [][]int32, B int) (loss float64, tokens int, err error) {
	if len(windows) == 0 {
		return math.NaN(), 0, nil
	}
	if B < 1 {
		return 0, 0, fmt.Errorf("evaluate: batch %d must be >= 1", B)
	}
	T := len(windows[0]) - 1
	var sum float64
	for i := 0; i < len(windows); i += B {
		rows := windows[i:min(i+B, len(windows))]
		in, tgt := make([]int32, len(rows)*T), make([]int32, len(rows)*T)
		for b, w := range rows {
			if len(w) != T+1 {
				return 0, 0, fmt.Errorf("evaluate: window %d has %d tokens, want %d", i+b, len(w), T+1)
			}
			data.SplitWindow(w, in[b*T:(b+1)*T], tgt[b*T:(b+1)*T], model.IgnoreIndex)
		}
		st, err := m.Evaluate(in, tgt, len(rows), T)
		if err != nil && finite(st.Sum) {
			return 0, 0, fmt.Errorf("evaluate: %w", err)
		}
		sum += st.Sum
		tokens += st.Count
	}
	return sum / float64(max(tokens, 1)), tokens, nil
}
