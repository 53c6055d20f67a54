package mad

import (
	"fmt"
	"strconv"
	"strings"
)

// IgnoreIndex marks a target that is neither trained on nor scored (the
// MADConfig target_ignore_index).
const IgnoreIndex = -100

// The six MAD tasks, named as in the reference code.
const (
	InContextRecall      = "in-context-recall"
	FuzzyInContextRecall = "fuzzy-in-context-recall"
	NoisyInContextRecall = "noisy-in-context-recall"
	SelectiveCopying     = "selective-copying"
	Compression          = "compression"
	Memorization         = "memorization"
)

// Tasks lists the task names in the order tables show them.
func Tasks() []string {
	return []string{InContextRecall, FuzzyInContextRecall, NoisyInContextRecall,
		SelectiveCopying, Compression, Memorization}
}

// ShortName is a compact label for a task ("recall", "fuzzy", ...), for
// charts and narrow tables.
func ShortName(task string) string {
	switch task {
	case InContextRecall:
		return "recall"
	case FuzzyInContextRecall:
		return "fuzzy"
	case NoisyInContextRecall:
		return "noisy"
	case SelectiveCopying:
		return "copy"
	case Compression:
		return "compress"
	case Memorization:
		return "memorize"
	}
	return task
}

// ParseTask accepts a task name or its short name.
func ParseTask(s string) (string, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	for _, t := range Tasks() {
		if s == t || s == ShortName(t) {
			return t, nil
		}
	}
	var names []string
	for _, t := range Tasks() {
		names = append(names, t+" ("+ShortName(t)+")")
	}
	return "", fmt.Errorf("unknown MAD task %q (known: %s)", s, strings.Join(names, ", "))
}

// DefaultSeed is the reference's seed (MADConfig.seed) for data generation
// and the memorization fact table.
const DefaultSeed = 12345

// Setting is one task instance: the task and its difficulty knobs
// (docs/MAD.md). Vocab counts every token id, special and
// noise tokens included.
type Setting struct {
	Task          string  `json:"task"`
	Vocab         int     `json:"vocab_size"`
	SeqLen        int     `json:"seq_len"` // the generator's length; recall tasks feed SeqLen-1 tokens (ModelSeqLen)
	TrainExamples int     `json:"num_train_examples"`
	TestExamples  int     `json:"num_test_examples"`
	FracNoise     float64 `json:"frac_noise,omitempty"`         // noisy recall: share of 2-token slots that are noise
	NoiseVocab    int     `json:"noise_vocab_size,omitempty"`   // noisy recall: number of noise ids (the top of the vocabulary)
	CopyTokens    int     `json:"num_tokens_to_copy,omitempty"` // selective copying
	KMotif        int     `json:"k_motif_size,omitempty"`       // fuzzy recall: longest key
	VMotif        int     `json:"v_motif_size,omitempty"`       // fuzzy recall: longest value
	Seed          uint64  `json:"seed"`
	// Change names the knob that differs from the task's baseline
	// ("baseline", "vocab_size=32", ...); informational.
	Change string `json:"change"`
}

// ModelSeqLen is the number of tokens per example the model sees: SeqLen-1
// for (noisy) in-context recall, whose generator makes SeqLen tokens and
// shifts them, SeqLen for the other tasks.
func (s Setting) ModelSeqLen() int {
	if s.Task == InContextRecall || s.Task == NoisyInContextRecall {
		return s.SeqLen - 1
	}
	return s.SeqLen
}

// ID names the setting's data uniquely and readably:
// "v16-l128-n12800-t1280-s12345" plus the task-specific knobs.
func (s Setting) ID() string {
	var b strings.Builder
	fmt.Fprintf(&b, "v%d-l%d-n%d-t%d", s.Vocab, s.SeqLen, s.TrainExamples, s.TestExamples)
	if s.NoiseVocab > 0 || s.FracNoise > 0 {
		fmt.Fprintf(&b, "-noise%d-f%s", s.NoiseVocab, strconv.FormatFloat(s.FracNoise, 'g', -1, 64))
	}
	if s.CopyTokens > 0 {
		fmt.Fprintf(&b, "-c%d", s.CopyTokens)
	}
	if s.KMotif > 0 || s.VMotif > 0 {
		fmt.Fprintf(&b, "-k%d-m%d", s.KMotif, s.VMotif)
	}
	fmt.Fprintf(&b, "-s%d", s.Seed)
	return b.String()
}

// key identifies the setting's data among all tasks' settings.
func (s Setting) key() string { return s.Task + "/" + s.ID() }

// Baseline returns a task's baseline setting (configs/tasks/*.yml of the
// reference): 1,280 test examples and seed 12345 everywhere.
func Baseline(task string) (Setting, error) {
	s := Setting{Task: task, TestExamples: 1280, TrainExamples: 12800, Seed: DefaultSeed, Change: "baseline"}
	switch task {
	case InContextRecall:
		s.Vocab, s.SeqLen = 16, 128
	case FuzzyInContextRecall:
		s.Vocab, s.SeqLen, s.KMotif, s.VMotif = 16, 128, 3, 3
	case NoisyInContextRecall:
		s.Vocab, s.SeqLen, s.NoiseVocab, s.FracNoise = 32, 128, 16, 0.2
	case SelectiveCopying:
		s.Vocab, s.SeqLen, s.CopyTokens = 16, 256, 16
	case Compression:
		s.Vocab, s.SeqLen = 16, 32
	case Memorization:
		s.Vocab, s.SeqLen, s.TrainExamples = 256, 32, 256
	default:
		_, err := ParseTask(task)
		return Setting{}, err
	}
	return s, nil
}

// change is one knob of a task's sweep and the values it takes, easiest
// first as the reference lists them.
type change struct {
	key  string
	vals []float64
}

// sweepChanges lists a task's sweep (make_benchmark_mad_configs), in the
// reference's order; the last value of each knob is its hardest.
func sweepChanges(task string) []change {
	sizes := change{"num_train_examples", []float64{6400, 3200, 1600, 800}}
	switch task {
	case InContextRecall, FuzzyInContextRecall:
		return []change{{"vocab_size", []float64{32, 64, 128}}, {"seq_len", []float64{256, 512, 1024}}, sizes}
	case NoisyInContextRecall:
		// 32/64/128 content tokens plus the 16 noise ids.
		return []change{{"vocab_size", []float64{48, 80, 144}}, {"seq_len", []float64{256, 512, 1024}}, sizes,
			{"frac_noise", []float64{0.4, 0.6, 0.8}}}
	case SelectiveCopying:
		return []change{{"vocab_size", []float64{32, 64, 128}}, {"seq_len", []float64{512, 1024}}, sizes,
			{"num_tokens_to_copy", []float64{32, 64, 96}}}
	case Compression:
		return []change{{"vocab_size", []float64{32, 64, 128}}, {"seq_len", []float64{64, 128, 256}}, sizes}
	case Memorization:
		return []change{{"vocab_size", []float64{512, 1024, 2048, 4096, 8192}}}
	}
	return nil
}

// apply returns base with knob key set to v and Change naming it.
func (c change) apply(base Setting, v float64) Setting {
	s := base
	switch c.key {
	case "vocab_size":
		s.Vocab = int(v)
	case "seq_len":
		s.SeqLen = int(v)
	case "num_train_examples":
		s.TrainExamples = int(v)
	case "frac_noise":
		s.FracNoise = v
	case "num_tokens_to_copy":
		s.CopyTokens = int(v)
	}
	s.Change = c.key + "=" + strconv.FormatFloat(v, 'g', -1, 64)
	return s
}

// Sweep returns a task's settings: the baseline, then each listed change
// applied to the baseline one at a time (not a factorial grid), in the
// reference's order (make_benchmark_mad_configs).
func Sweep(task string) ([]Setting, error) {
	base, err := Baseline(task)
	if err != nil {
		return nil, err
	}
	out := []Setting{base}
	for _, c := range sweepChanges(task) {
		for _, v := range c.vals {
			out = append(out, c.apply(base, v))
		}
	}
	return out, nil
}

// Hard returns a task's hard set: the baseline, then the hardest value of
// each knob of its sweep (the sweep's last value of each change, applied to
// the baseline alone): for in-context recall vocab_size=128, seq_len=1024
// and num_train_examples=800. It is a subset of Sweep, in Sweep's order, so
// its runs are shared with a full sweep in the same output directory.
func Hard(task string) ([]Setting, error) {
	base, err := Baseline(task)
	if err != nil {
		return nil, err
	}
	out := []Setting{base}
	for _, c := range sweepChanges(task) {
		out = append(out, c.apply(base, c.vals[len(c.vals)-1]))
	}
	return out, nil
}

// Benchmark returns all 66 settings of the MAD benchmark, task by task.
func Benchmark() []Setting {
	var out []Setting
	for _, t := range Tasks() {
		s, _ := Sweep(t)
		out = append(out, s...)
	}
	return out
}

// Validate reports a setting its generator cannot produce.
func (s Setting) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("MAD setting %s %s: %s", s.Task, s.ID(), fmt.Sprintf(format, a...))
	}
	if _, err := ParseTask(s.Task); err != nil {
		return err
	}
	if s.TrainExamples < 1 || s.TestExamples < 1 {
		return bad("needs at least one training and one test example")
	}
	if s.Vocab < 2 || s.SeqLen < 2 {
		return bad("vocab %d and seq_len %d must be >= 2", s.Vocab, s.SeqLen)
	}
	if !(s.FracNoise >= 0 && s.FracNoise < 1) {
		return bad("frac_noise %v must lie in [0, 1)", s.FracNoise)
	}
	if s.FracNoise > 0 && s.NoiseVocab < 1 {
		return bad("frac_noise > 0 needs noise_vocab_size > 0")
	}
	if s.NoiseVocab < 0 {
		return bad("noise_vocab_size %d < 0", s.NoiseVocab)
	}
	noiseOK := s.Task == InContextRecall || s.Task == NoisyInContextRecall || s.Task == FuzzyInContextRecall
	if !noiseOK && (s.NoiseVocab > 0 || s.FracNoise > 0) {
		return bad("this task takes no noise")
	}
	switch s.Task {
	case InContextRecall, NoisyInContextRecall:
		if s.SeqLen%2 != 0 {
			return bad("seq_len %d must be even (key-value pairs)", s.SeqLen)
		}
		if s.Vocab-s.NoiseVocab < 2 {
			return bad("vocab %d leaves fewer than 2 key/value ids after %d noise ids", s.Vocab, s.NoiseVocab)
		}
	case FuzzyInContextRecall:
		if s.KMotif < 1 || s.VMotif < 1 {
			return bad("k_motif_size and v_motif_size must be >= 1")
		}
		n := s.Vocab - 1 - s.NoiseVocab
		if n/2 < s.KMotif || n-n/2 < s.VMotif {
			return bad("vocab %d has %d key and %d value ids, too few for motifs of %d and %d distinct tokens",
				s.Vocab, n/2, n-n/2, s.KMotif, s.VMotif)
		}
		if s.SeqLen-2*(s.KMotif+s.VMotif) < 1 {
			return bad("seq_len %d is too short for motifs of %d+%d tokens", s.SeqLen, s.KMotif, s.VMotif)
		}
	case SelectiveCopying:
		if s.CopyTokens < 1 {
			return bad("num_tokens_to_copy must be >= 1")
		}
		if s.SeqLen <= 2*s.CopyTokens+1 {
			return bad("seq_len %d must exceed 2*num_tokens_to_copy+1 = %d", s.SeqLen, 2*s.CopyTokens+1)
		}
		if s.Vocab < 3 {
			return bad("vocab %d leaves no content token besides blank and copy", s.Vocab)
		}
	case Compression:
		if s.Vocab < 2 {
			return bad("vocab %d leaves no content token besides the compression token", s.Vocab)
		}
	case Memorization:
		if s.Vocab < 3 {
			return bad("vocab %d leaves no fact besides the insert token", s.Vocab)
		}
		if s.SeqLen%2 != 0 {
			return bad("seq_len %d must be even (key, insert pairs)", s.SeqLen)
		}
	}
	return nil
}
