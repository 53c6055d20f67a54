package train

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/parallax-engine/parallax/assets"
	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/model"
	"github.com/parallax-engine/parallax/model/tokenizer"
	"github.com/parallax-engine/parallax/train/data"
	"github.com/parallax-engine/parallax/train/dist"
)

// Files a run writes into its output directory, besides the model's
// config.json and model.safetensors and OptimizerFile.
const (
	TokenizerFile = "tokenizer.json" // the tokenizer (Hugging Face format)
	MetricsFile   = "metrics.jsonl"  // one Record per logged step and evaluation
	PlotFile      = "curves.png"     // loss, learning rate and COR curves
	DataDir       = "data"           // the tokenized corpus (token shards)
	EOTToken      = "<|endoftext|>"  // separates documents in the token stream
)

// Config describes a training run. Zero fields take the defaults of
// DefaultConfig; JSON-tagged fields are stored in the checkpoint so a resumed
// run uses the same settings.
type Config struct {
	Out       string `json:"-"`          // output directory (checkpoint, metrics, plot)
	Model     string `json:"model"`      // preset name or a config.json path
	Attention string `json:"attention"`  // "parallax" or "softmax"; "" keeps the model config's
	ProbeGate bool   `json:"probe_gate"` // the gate ablation r = sigmoid(w_g . h) r (Parallax only)
	// Vocab is the size of the BPE vocabulary trained on the corpus; 0 uses
	// the model config's vocabulary size. Ignored with Tokenizer.
	Vocab     int    `json:"vocab"`
	Tokenizer string `json:"tokenizer"` // an existing tokenizer.json to use instead of training one, or "gpt2" for the embedded GPT-2 tokenizer
	// KeepVocab keeps the model config's vocabulary when it is larger than
	// the tokenizer's (the ids past the tokenizer's are never seen): a
	// preset's true shape, e.g. Qwen3's 151936-token head, trained on
	// GPT-2's tokens.
	KeepVocab bool `json:"keep_vocab"`
	// Data is the training text: "" for the embedded Austen corpus, a text
	// file, a directory of *.txt documents (the last one held out for
	// validation) or a dataset directory written by data.Build.
	Data string `json:"data"`
	// Adaptation (init.go, freeze.go): Init starts from the weights of a
	// model directory (ours or a Hugging Face Qwen3 one) instead of random
	// ones, with its config and, unless Tokenizer is set, its tokenizer;
	// ConvertParallax adds W_R (zero unless ProbeInitScale) to a softmax
	// model; Freeze lists glob patterns of parameter names left untrained.
	Init            string   `json:"init,omitempty"`
	ConvertParallax bool     `json:"convert_parallax,omitempty"`
	ProbeInitScale  float64  `json:"probe_init_scale,omitempty"`
	Freeze          []string `json:"freeze,omitempty"`
	Device          string   `json:"-"`     // "auto", "cpu", "vulkan:N", "cuda:N"
	DType           string   `json:"dtype"` // activation dtype: "auto", "f32", "bf16", "f16"

	Steps    int         `json:"steps"` // optimizer steps of the whole run
	Batch    int         `json:"batch"` // sequences per micro-batch
	Seq      int         `json:"seq"`   // tokens per sequence
	Accum    int         `json:"accum"` // micro-batches per step
	Optim    OptimConfig `json:"optim"`
	Schedule Schedule    `json:"schedule"` // Total is set to Steps
	ClipNorm float64     `json:"clip_norm"`
	Seed     uint64      `json:"seed"`

	// The intervals are stored in the checkpoint: a resumed run keeps them
	// unless it is given others (0 keeps them).
	EvalEvery   int `json:"eval_every,omitempty"` // evaluate every N steps (and at the end); < 0 never
	EvalBatches int `json:"-"`                    // validation batches per evaluation; 0 = all held-out windows
	SaveEvery   int `json:"save_every,omitempty"` // checkpoint every N steps (and at the end); < 0 only at the end
	LogEvery    int `json:"log_every,omitempty"`  // metrics line every N steps

	Resume bool `json:"-"` // continue the checkpoint in Out
	// Force lets a fresh run use an Out that holds another run's files (a
	// checkpoint, metrics, tokenizer, tokenized data), removing them first;
	// without it such an Out is refused.
	Force         bool    `json:"-"`
	SkipNonFinite bool    `json:"-"` // skip a step with a NaN/Inf loss or gradient instead of stopping
	PeakFLOPS     float64 `json:"-"` // device peak FLOP/s for MFU; 0: the device's own figure, if any
	// NoSave writes no checkpoint, not even at the end or when interrupted,
	// so a benchmark of a large model does not write gigabytes it throws
	// away; the run cannot be resumed.
	NoSave bool `json:"-"`
	// ProfileStep times every op of that step (1-based, as Record.Step)
	// with the device's own timers into Result.Profile; 0 profiles
	// nothing. The device must implement engine.Profiler.
	ProfileStep int `json:"-"`

	// Data parallel (parallel.go): Group is this rank's membership of a
	// job of several processes (nil: one process); Batch stays the global
	// micro-batch. Comm picks the collectives ("auto", "nccl", "tcp"),
	// ZeRO shards the optimizer state, BucketMB sizes the gradient buckets
	// (0: 25 MiB). None of these changes the run's definition.
	Group    *dist.Group `json:"-"`
	Comm     string      `json:"-"`
	ZeRO     bool        `json:"-"`
	BucketMB float64     `json:"-"`

	Stdout io.Writer            `json:"-"` // progress and messages; nil for none
	OnStep func(rec Record)     `json:"-"` // called after every step (tests, custom loggers)
	Logf   func(string, ...any) `json:"-"`
}

// DefaultConfig returns the defaults: the tiny preset with Parallax
// attention on the embedded corpus, Muon, 16 x 128 tokens per step, 500
// steps of WSD, clipping at 1.0, evaluation every 100 steps.
func DefaultConfig() Config {
	return Config{
		Model: "tiny", Device: "auto", DType: "auto",
		Steps: 500, Batch: 16, Seq: 128, Accum: 1,
		Optim: DefaultOptimConfig(OptMuon), ClipNorm: 1, Seed: 1,
		EvalEvery: 100, EvalBatches: 8, SaveEvery: 500, LogEvery: 10,
	}
}

// Result summarises a finished (or interrupted) run.
type Result struct {
	Out         string
	Step        int     // steps completed
	Loss        float64 // last training loss
	ValLoss     float64 // last validation loss (NaN if none)
	TokensPerS  float64 // mean training throughput of this invocation
	Interrupted bool    // stopped early by the context; the checkpoint is saved
	AlreadyDone bool    // a resumed checkpoint had reached Steps already: nothing was trained
	Params      int64
	Profile     engine.Profile // per-op device times of Config.ProfileStep (nil without)
}

// runner holds a run's state.
type runner struct {
	cfg     Config
	dev     engine.Device
	m       *model.Model
	tok     *tokenizer.Tokenizer
	ds      *data.Dataset
	opt     *Optimizer
	sampler *data.Sampler
	sched   Schedule
	st      TrainState
	metrics *MetricsLog
	prog    *Progress
	acc     *engine.Tensor
	par     *parallel // nil in one process
	flops   float64   // per token
	peak    float64
	runJSON json.RawMessage
	out     *outputs // what the run created in Out (rank 0)
}

// Run trains a model as cfg describes, writing the checkpoint, metrics and
// plot into cfg.Out. Cancelling ctx (Ctrl-C) finishes the current step,
// saves a checkpoint and returns with Result.Interrupted set.
func Run(ctx context.Context, cfg Config) (res Result, err error) {
	r := &runner{}
	defer func() {
		if err != nil && !errors.Is(err, errKilled) { // a kill would leave the files
			r.out.discard()
		}
	}()
	defer r.close()
	if err := r.setup(cfg); err != nil {
		return Result{}, err
	}
	return r.loop(ctx)
}

func (r *runner) logf(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	if r.cfg.Logf != nil {
		r.cfg.Logf("%s", msg)
		return
	}
	if r.prog != nil {
		r.prog.Println(msg)
	} else if r.cfg.Stdout != nil {
		fmt.Fprintln(r.cfg.Stdout, msg)
	}
}

func (r *runner) close() {
	r.metrics.Close()
	if r.par != nil {
		r.par.comm.Close()
	}
	if r.m != nil {
		r.m.Free()
	}
	if r.opt != nil {
		r.opt.Free()
	}
	if r.dev != nil {
		r.dev.Close()
	}
}

// fill sets defaults for zero fields.
func (c *Config) fill() {
	d := DefaultConfig()
	if c.Init != "" {
		c.Model = c.Init // the model's shape is the initial weights'
	}
	if c.Model == "" {
		c.Model = d.Model
	}
	if c.Device == "" {
		c.Device = d.Device
	}
	if c.DType == "" {
		c.DType = d.DType
	}
	if c.Steps == 0 {
		c.Steps = d.Steps
	}
	if c.Batch == 0 {
		c.Batch = d.Batch
	}
	if c.Seq == 0 {
		c.Seq = d.Seq
	}
	if c.Accum == 0 {
		c.Accum = d.Accum
	}
	if c.Optim.Name == "" {
		c.Optim = d.Optim
	}
	if c.Schedule.Kind == "" {
		c.Schedule = DefaultSchedule(c.Steps)
	}
	c.Schedule.Total = c.Steps
	if c.EvalEvery == 0 {
		c.EvalEvery = d.EvalEvery
	}
	if c.SaveEvery == 0 {
		c.SaveEvery = d.SaveEvery
	}
	if c.LogEvery <= 0 {
		c.LogEvery = d.LogEvery
	}
	if c.EvalBatches < 0 {
		c.EvalBatches = 0
	}
}

// Validate reports the first invalid setting.
func (c Config) Validate() error {
	switch {
	case c.Out == "":
		return errors.New("train: no output directory")
	case c.Steps < 1:
		return fmt.Errorf("train: steps %d must be >= 1", c.Steps)
	case c.Batch < 1 || c.Seq < 1 || c.Accum < 1:
		return fmt.Errorf("train: batch %d, seq %d and accum %d must be >= 1", c.Batch, c.Seq, c.Accum)
	case !(c.ClipNorm >= 0):
		return fmt.Errorf("train: clip norm %v must be >= 0 (0 disables clipping)", c.ClipNorm)
	case c.Vocab < 0 || (c.Vocab > 0 && c.Vocab < 257):
		return fmt.Errorf("train: vocab %d is too small (a byte-level BPE needs 256 bytes + the end-of-text token)", c.Vocab)
	}
	switch c.Attention {
	case "", model.AttentionParallax, model.AttentionSoftmax:
	default:
		return fmt.Errorf("train: attention %q: want %s or %s", c.Attention, model.AttentionParallax, model.AttentionSoftmax)
	}
	if err := c.Optim.Validate(); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	if err := c.Schedule.Validate(); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	if c.Force && c.Resume {
		return errors.New("train: force starts a fresh run; it cannot be combined with resume")
	}
	return c.validateAdapt()
}

func (r *runner) setup(cfg Config) error {
	askedSteps := cfg.Steps
	asked := cfg // before the defaults: 0 intervals keep a resumed checkpoint's
	cfg.fill()
	if err := cfg.Validate(); err != nil {
		return err
	}
	out, err := prepareOut(cfg)
	if err != nil {
		return err
	}
	r.out = out
	statePath := filepath.Join(cfg.Out, OptimizerFile)
	var recovered string
	if cfg.Resume {
		if recovered, err = recoverCheckpoint(cfg.Out); err != nil {
			return fmt.Errorf("train: --resume: %w", err)
		}
		st, _, err := ReadState(statePath)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("train: --resume: %s holds no checkpoint (%s is missing)", cfg.Out, OptimizerFile)
			}
			return fmt.Errorf("train: --resume: %w", err)
		}
		if err := verifyCheckpoint(cfg.Out, st.Step); err != nil {
			return fmt.Errorf("train: --resume: %w", err)
		}
		var saved Config
		if err := json.Unmarshal(st.Run, &saved); err != nil {
			return fmt.Errorf("train: --resume: the checkpoint's run settings are unreadable: %v: %w", err, ErrCorrupt)
		}
		// The run's definition comes from the checkpoint; how it is
		// operated (device, logging, evaluation, saving) from cfg, the
		// intervals staying the checkpoint's where cfg leaves them 0. More
		// steps may be asked for, which stretches the schedule.
		saved.Out, saved.Device, saved.Resume = cfg.Out, cfg.Device, true
		saved.EvalEvery = keepOr(asked.EvalEvery, saved.EvalEvery)
		saved.SaveEvery = keepOr(asked.SaveEvery, saved.SaveEvery)
		saved.LogEvery = keepOr(asked.LogEvery, saved.LogEvery)
		saved.EvalBatches = cfg.EvalBatches
		saved.SkipNonFinite, saved.PeakFLOPS = cfg.SkipNonFinite, cfg.PeakFLOPS
		saved.ProfileStep = cfg.ProfileStep
		saved.Stdout, saved.OnStep, saved.Logf = cfg.Stdout, cfg.OnStep, cfg.Logf
		saved.Group, saved.Comm, saved.ZeRO, saved.BucketMB = cfg.Group, cfg.Comm, cfg.ZeRO, cfg.BucketMB
		if askedSteps > 0 && askedSteps != saved.Steps {
			if askedSteps <= st.Step {
				return fmt.Errorf("train: --resume: the checkpoint is at step %d already; ask for more --steps than that", st.Step)
			}
			saved.Steps = askedSteps
		}
		saved.fill() // intervals a checkpoint of an earlier version did not store
		saved.Schedule.Total = saved.Steps
		cfg = saved
		r.st = st
	}
	r.cfg = cfg
	if recovered != "" {
		r.logf("%s", recovered)
	}
	rj, err := json.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	r.runJSON = rj

	dev, err := engine.Open(cfg.Device)
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	r.dev = dev
	if err := r.setupComm(); err != nil {
		return err
	}
	if err := r.precheckMemory(); err != nil {
		return err
	}
	if err := r.setupInputs(); err != nil {
		return err
	}
	if err := r.setupModel(); err != nil {
		return err
	}
	r.sched = cfg.Schedule
	if r.acc, err = dev.Alloc(engine.F32, 1); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	r.flops = FLOPsPerToken(r.m.Config, cfg.Seq)
	r.peak = cfg.PeakFLOPS
	if r.peak == 0 {
		r.peak = DevicePeak(dev.Info())
	}
	truncate := 0 // a fresh run starts its own metrics
	if cfg.Resume {
		truncate = r.st.Step
	}
	if !r.leader() {
		return nil // rank 0 writes the metrics
	}
	if r.metrics, err = OpenMetrics(filepath.Join(cfg.Out, MetricsFile), truncate); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	return nil
}

// DevicePeak reads the peak FLOP/s figure a backend may report in its
// features ("peak_tflops" or "peak_flops"), the one MFU is measured
// against; 0 if none.
func DevicePeak(info engine.DeviceInfo) float64 {
	if s, ok := info.Features["peak_tflops"]; ok {
		if v, err := strconv.ParseFloat(strings.Fields(s + " x")[0], 64); err == nil {
			return v * 1e12
		}
	}
	if s, ok := info.Features["peak_flops"]; ok {
		if v, err := strconv.ParseFloat(strings.Fields(s + " x")[0], 64); err == nil {
			return v
		}
	}
	return 0
}

// documents returns the training and validation documents of cfg.Data.
func (r *runner) documents() (train, val []data.Document, err error) {
	if r.cfg.Data == "" {
		docs, err := assets.Corpus()
		if err != nil {
			return nil, nil, fmt.Errorf("train: embedded corpus: %w", err)
		}
		for _, d := range docs {
			dd := data.Document{Name: d.Name, Text: d.Text}
			if d.Name == assets.ValidationDocument {
				val = append(val, dd)
			} else {
				train = append(train, dd)
			}
		}
		return train, val, nil
	}
	docs, err := data.ReadDocuments(r.cfg.Data)
	if err != nil {
		return nil, nil, fmt.Errorf("train: --data: %w", err)
	}
	train, val = data.SplitDocuments(docs, 0.1)
	return train, val, nil
}

// isDatasetDir reports whether path is a directory written by data.Build.
func isDatasetDir(path string) bool {
	_, err := os.Stat(filepath.Join(path, data.MetaFile))
	return path != "" && err == nil
}

func (r *runner) setupTokenizer() error {
	path := filepath.Join(r.cfg.Out, TokenizerFile)
	if r.cfg.Resume {
		t, err := tokenizer.LoadHF(path)
		if err != nil {
			return fmt.Errorf("train: --resume: %w", err)
		}
		r.tok = t
		return nil
	}
	if r.cfg.Tokenizer == "" && r.cfg.Vocab == 0 && r.cfg.Init == "" {
		// A model sized for GPT-2's vocabulary gets GPT-2's tokenizer: a
		// 50257-token BPE cannot be learned from the embedded corpus.
		if mc, err := r.modelConfig(); err == nil && mc.Vocab == GPT2Vocab {
			r.cfg.Tokenizer = "gpt2"
		}
	}
	if r.cfg.Tokenizer == "gpt2" {
		vocab, merges, err := assets.GPT2Tokenizer()
		if err == nil {
			r.tok, err = tokenizer.ReadGPT2(bytes.NewReader(vocab), "encoder.json", bytes.NewReader(merges), "vocab.bpe")
		}
		if err != nil {
			return fmt.Errorf("train: gpt2 tokenizer: %w", err)
		}
		r.logf("using GPT-2's tokenizer (%d tokens)", r.tok.VocabSize())
	} else if r.cfg.Tokenizer != "" || r.cfg.Init != "" {
		t, err := r.loadGivenTokenizer()
		if err != nil {
			return fmt.Errorf("train: --tokenizer: %w", err)
		}
		r.tok = t
	} else {
		if isDatasetDir(r.cfg.Data) {
			return fmt.Errorf("train: --data %s is a tokenized dataset; pass the tokenizer that made it with --tokenizer", r.cfg.Data)
		}
		vocab := r.cfg.Vocab
		if vocab == 0 {
			mc, err := r.modelConfig()
			if err != nil {
				return err
			}
			vocab = mc.Vocab
		}
		train, _, err := r.documents()
		if err != nil {
			return err
		}
		texts := make([]string, len(train))
		for i, d := range train {
			texts[i] = d.Text
		}
		start := time.Now()
		t, err := tokenizer.Train(texts, vocab, []string{EOTToken})
		if err != nil {
			return fmt.Errorf("train: tokenizer: %w", err)
		}
		r.logf("trained a %d-token BPE tokenizer on the training text in %s", t.VocabSize(), FormatDuration(time.Since(start)))
		r.tok = t
	}
	if err := r.tok.SaveHF(path); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	return nil
}

// tokenizerID fingerprints the saved tokenizer.
func (r *runner) tokenizerID() (string, error) {
	c, err := FileCRC(filepath.Join(r.cfg.Out, TokenizerFile))
	if err != nil {
		return "", fmt.Errorf("train: %w", err)
	}
	return fmt.Sprintf("crc32c:%08x", c), nil
}

func (r *runner) setupData() error {
	id, err := r.tokenizerID()
	if err != nil {
		return err
	}
	check := func(ds *data.Dataset) error {
		if ds.Meta.Tokenizer != "" && ds.Meta.Tokenizer != id {
			return fmt.Errorf("train: dataset %s was tokenized by a different tokenizer (%s, this run's is %s)", ds.Dir, ds.Meta.Tokenizer, id)
		}
		if ds.Meta.Vocab > r.tok.VocabSize() {
			return fmt.Errorf("train: dataset %s has vocabulary %d, larger than the tokenizer's %d", ds.Dir, ds.Meta.Vocab, r.tok.VocabSize())
		}
		return nil
	}
	var dir string
	switch {
	case isDatasetDir(r.cfg.Data):
		dir = r.cfg.Data
	case r.cfg.Resume:
		dir = filepath.Join(r.cfg.Out, DataDir)
		if !isDatasetDir(dir) {
			return fmt.Errorf("train: --resume: the tokenized data %s is missing", dir)
		}
	}
	if dir != "" {
		ds, err := data.Open(dir)
		if err != nil {
			return fmt.Errorf("train: %w", err)
		}
		if err := check(ds); err != nil {
			return err
		}
		r.ds = ds
		return nil
	}
	if IsJSONL(r.cfg.Data) {
		return r.prepareJSONL(id)
	}
	train, val, err := r.documents()
	if err != nil {
		return err
	}
	eot, ok := r.tok.SpecialID(EOTToken)
	if !ok {
		eot = -1
	}
	start := time.Now()
	enc := func(s string) ([]int32, error) {
		ids := r.tok.Encode(s)
		out := make([]int32, len(ids))
		for i, v := range ids {
			out[i] = int32(v)
		}
		return out, nil
	}
	ds, err := data.Build(filepath.Join(r.cfg.Out, DataDir), enc, train, val,
		data.BuildOptions{Vocab: r.tok.VocabSize(), Tokenizer: id, EOT: int32(eot)})
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	r.logf("tokenized %d training documents (%s tokens) and %d held out (%s tokens) in %s",
		len(train), HumanCount(float64(ds.Meta.TrainTokens)), len(val), HumanCount(float64(ds.Meta.ValTokens)),
		FormatDuration(time.Since(start)))
	r.ds = ds
	return nil
}

// modelConfig resolves cfg.Model (a preset or a config.json) and the
// attention override.
func (r *runner) modelConfig() (model.Config, error) {
	var mc model.Config
	var err error
	if st, statErr := os.Stat(r.cfg.Model); statErr == nil {
		path := r.cfg.Model
		if st.IsDir() {
			path = filepath.Join(path, model.ConfigFile)
		}
		mc, err = model.ReadConfig(path)
	} else {
		mc, err = model.PresetConfig(r.cfg.Model)
	}
	if err != nil {
		return mc, fmt.Errorf("train: --config: %w", err)
	}
	if r.cfg.Attention != "" {
		mc.Attention = r.cfg.Attention
		if mc.RInit == "" {
			mc.RInit = model.RInitLikeQ
		}
	}
	if r.cfg.ProbeGate {
		mc.ProbeGate = true
	}
	if r.cfg.ConvertParallax && !mc.Parallax() {
		mc.Attention, mc.RInit = model.AttentionParallax, model.RInitZero
	}
	return mc, nil
}

func (r *runner) computeDType() (engine.DType, error) {
	if r.cfg.DType != "auto" {
		return engine.ParseDType(r.cfg.DType)
	}
	return model.AutoDType(r.dev.Info()), nil
}

func (r *runner) setupModel() error {
	dt, err := r.computeDType()
	if err != nil {
		return fmt.Errorf("train: --dtype: %w", err)
	}
	var m *model.Model
	if r.cfg.Resume {
		m, err = model.Load(r.cfg.Out, r.dev, model.LoadOptions{DType: dt})
		if err != nil {
			return fmt.Errorf("train: --resume: %w", err)
		}
	} else {
		mc, err := r.modelConfig()
		if err != nil {
			return err
		}
		if !r.cfg.KeepVocab || mc.Vocab < r.tok.VocabSize() {
			mc.Vocab = r.tok.VocabSize()
		}
		mc.MaxSeq = max(mc.MaxSeq, r.cfg.Seq)
		if eot, ok := r.tok.SpecialID(EOTToken); ok {
			mc.EOS = []int{eot}
		}
		if err := r.checkMemory(mc, dt); err != nil {
			return err
		}
		if m, err = r.newModel(mc, dt); err != nil {
			return err
		}
	}
	r.m = m
	if m.Config.Vocab < r.tok.VocabSize() || m.Config.Vocab < r.ds.Meta.Vocab {
		return fmt.Errorf("train: the model's vocabulary (%d) is smaller than the tokenizer's (%d) or the data's (%d)",
			m.Config.Vocab, r.tok.VocabSize(), r.ds.Meta.Vocab)
	}
	if r.cfg.Seq > m.Config.MaxSeq {
		return fmt.Errorf("train: --seq %d exceeds the model's max_seq %d", r.cfg.Seq, m.Config.MaxSeq)
	}
	if err := m.AllocGrads(); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	if r.opt, err = r.newOptimizer(); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	r.opt.SetComputeDType(m.DType)
	if r.sampler, err = data.NewSampler(r.ds.Train, r.cfg.Seq, r.cfg.Seed); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	if r.cfg.Resume {
		path := filepath.Join(r.cfg.Out, OptimizerFile)
		st, mcrc, err := LoadState(path, r.opt)
		if err != nil {
			return fmt.Errorf("train: --resume: %w", err)
		}
		crc, err := FileCRC(filepath.Join(r.cfg.Out, model.WeightsFile))
		if err != nil {
			return fmt.Errorf("train: --resume: %w", err)
		}
		if crc != mcrc {
			return fmt.Errorf("train: --resume: %s does not belong to %s (damaged, or a save was interrupted between the two files): %w",
				model.WeightsFile, OptimizerFile, ErrCorrupt)
		}
		if err := r.sampler.Restore(st.Sampler); err != nil {
			return fmt.Errorf("train: --resume: %w", err)
		}
		r.st = st
		r.st.Run = r.runJSON
		r.logf("resumed %s at step %d of %d", r.cfg.Out, st.Step, r.cfg.Steps)
	} else {
		r.st = TrainState{Sampler: r.sampler.State(), Run: r.runJSON}
	}
	return nil
}

// save writes a checkpoint in one atomic step: the model, then the
// training state (carrying the model file's checksum) into a staging
// directory, then the manifest of every file's checksum (the commit
// point), then each file is moved into place, the manifest last. A save
// stopped before the commit point leaves the previous checkpoint whole; one
// stopped after it is finished by --resume (recoverCheckpoint).
func (r *runner) save() (err error) {
	gathered, follower, err := r.gatherCheckpoint()
	if err != nil || follower {
		return err
	}
	stage := filepath.Join(r.cfg.Out, stageDir)
	if err := os.RemoveAll(stage); err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	committed := false
	defer func() {
		// Once committed, the stage is the checkpoint until it is in place.
		if err != nil && !committed && !errors.Is(err, errKilled) {
			os.RemoveAll(stage)
		}
	}()
	if err := r.m.Save(stage); err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	if killedAt(1) {
		return errKilled
	}
	crc, err := FileCRC(filepath.Join(stage, model.WeightsFile))
	if err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	r.st.Sampler = r.sampler.State()
	if err := r.writeOptimizerState(filepath.Join(stage, OptimizerFile), gathered, crc); err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	if killedAt(2) {
		return errKilled
	}
	if err := stageManifest(r.cfg.Out, r.st.Step); err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	committed = true
	r.out.markSaved()
	if killedAt(3) {
		return errKilled
	}
	if err := commitCheckpoint(r.cfg.Out); err != nil {
		if errors.Is(err, errKilled) {
			return err
		}
		return fmt.Errorf("save checkpoint: %w (the complete checkpoint of step %d is in %s; --resume moves it into place)", err, r.st.Step, stage)
	}
	return nil
}

// NonFiniteError reports a NaN or infinite loss or gradient.
type NonFiniteError struct {
	Step  int    // the 1-based step
	What  string // "loss" or "gradient norm"
	Value float64
	Where string // the first parameter with non-finite values, if found
}

func (e *NonFiniteError) Error() string {
	s := fmt.Sprintf("step %d: the %s is %v", e.Step, e.What, e.Value)
	if e.Where != "" {
		s += "; first non-finite tensor: " + e.Where
	}
	return s + " (lower the learning rate, or pass --skip-nonfinite to skip such steps)"
}

// locate names the first parameter whose weights (or gradients) hold a
// non-finite value, with its layer.
func (r *runner) locate(grads bool) string {
	for _, p := range r.m.Params() {
		t, kind := p.W, "weights"
		if grads {
			t, kind = p.G, "gradient"
		}
		if err := r.dev.SumSquares(r.acc, t, false); err != nil {
			continue
		}
		v, err := engine.Float32s(r.acc)
		if err != nil || finite(float64(v[0])) {
			continue
		}
		where := p.Name
		if i := strings.Index(p.Name, "layers."); i >= 0 {
			if n, _, ok := strings.Cut(p.Name[i+7:], "."); ok {
				where = fmt.Sprintf("layer %s, %s", n, p.Name)
			}
		}
		return where + " " + kind
	}
	return ""
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// stepOut is what one training step measured.
type stepOut struct {
	loss, gradNorm float64
	cor            []float64
	gate           []float64 // per-layer mean probe gate (ProbeGate models)
	skipped        bool
}

// checkGradNorm records a step's gradient norm in out and reports whether
// the step ends there: a norm that is not finite skips the step
// (SkipNonFinite) or fails it with a NonFiniteError naming the culprit.
func (r *runner) checkGradNorm(stepNo int, gn float64, out *stepOut) (bool, error) {
	out.gradNorm = gn
	if finite(gn) {
		return false, nil
	}
	e := &NonFiniteError{Step: stepNo, What: "gradient norm", Value: gn, Where: r.locate(true)}
	if r.cfg.SkipNonFinite {
		out.skipped = true
		return true, nil
	}
	return true, e
}

// step runs one training step. Every process runs this one path: a single
// process is the world of one (r.par nil), where each collective below is
// a no-op, and a rank of a data-parallel job trains on its rows of the
// global batch (parallel.go), the collectives averaging the gradients and
// agreeing on the loss, the stop and a lost step.
//
// Each micro-batch is one ForwardBackward (the loss gradient written by the
// forward's cross entropy, one host synchronisation); on the last one the
// armed gradient hook starts the reduction during the backward pass. A
// non-finite loss is known only after its backward, whose gradients are
// then of no use: the rest of the step only keeps the sampler in step, and
// the step is skipped or fails on every rank alike. The clip factor of the
// global gradient norm goes into the update (Optimizer.StepScaled) rather
// than into a pass over the gradients.
func (r *runner) step(buf, in, tgt []int32, wantCOR bool) (stepOut, error) {
	var out stepOut
	c, p := r.cfg, r.par
	rank, world := p.rankOf(), p.size()
	T, b := c.Seq, c.Batch/world
	buf, in, tgt = buf[:b*(T+1)], in[:b*T], tgt[:b*T]
	stepNo := r.st.Step + 1
	p.progress(3*stepNo-2, stepNo, "forward and backward")
	if err := r.m.ZeroGrads(); err != nil {
		return out, err
	}
	var lossSum float64
	var count int
	bad := false // this rank's loss was not finite: the step is lost
	for micro := range c.Accum {
		// Every rank walks the whole global batch and reads its own rows, so
		// that the sampler's state is the job's.
		r.sampler.Skip(rank * b)
		if err := r.sampler.Next(buf, b); err != nil {
			return out, err
		}
		r.sampler.Skip((world - 1 - rank) * b)
		if bad {
			continue // the step is lost; keep the sampler in step
		}
		for i := range b {
			row := buf[i*(T+1) : (i+1)*(T+1)]
			data.SplitWindow(row, in[i*T:(i+1)*T], tgt[i*T:(i+1)*T], model.IgnoreIndex)
		}
		if micro == c.Accum-1 {
			r.opt.ArmReduce() // the gradients become final in this backward
		}
		st, err := r.m.ForwardBackward(in, tgt, b, T, float32(1/float64(c.Accum)))
		if !finite(st.Sum) {
			bad, lossSum = true, st.Sum // decided with the other ranks below
			continue
		}
		if err != nil {
			return out, fmt.Errorf("step %d: %w", stepNo, err)
		}
		lossSum += st.Sum
		count += st.Count
		if wantCOR && micro == 0 && r.m.Config.Parallax() {
			if out.cor, err = r.m.CORs(); err != nil {
				return out, fmt.Errorf("step %d: %w", stepNo, err)
			}
			if r.m.Config.ProbeGate {
				if out.gate, err = r.m.GateMeans(); err != nil {
					return out, fmt.Errorf("step %d: %w", stepNo, err)
				}
			}
		}
	}
	p.progress(3*stepNo-1, stepNo, "gradient reduction")
	// Finish the reduction the backward started before the vote below: the
	// ranks must issue their collectives in the same order, and a rank that
	// stopped at a non-finite loss before its last micro-batch never armed
	// the hook (it starts every bucket here; the step is then skipped or
	// fails, its gradients unused).
	if err := r.opt.ReduceGrads(); err != nil {
		return out, fmt.Errorf("step %d: %w", stepNo, err)
	}
	v := []float64{lossSum, float64(count), 0, 0} // loss, tokens, stop votes, lost steps
	if p.cancelled() {
		v[2] = 1
	}
	if bad {
		v[3] = 1
	}
	if err := p.sumHost(v); err != nil {
		return out, fmt.Errorf("step %d: %w", stepNo, err)
	}
	p.setStop(v[2] > 0)
	out.loss = v[0] / math.Max(v[1], 1)
	if v[3] > 0 || !finite(v[0]) {
		e := &NonFiniteError{Step: stepNo, What: "loss", Value: math.NaN(), Where: r.locate(false)}
		if bad {
			e.Value = lossSum
		}
		if c.SkipNonFinite && e.Where == "" {
			out.skipped, out.loss = true, math.NaN()
			return out, nil
		}
		return out, e
	}
	gn, err := r.opt.GlobalGradNorm(r.acc)
	if err != nil {
		return out, fmt.Errorf("step %d: %w", stepNo, err)
	}
	if stop, err := r.checkGradNorm(stepNo, gn, &out); stop {
		return out, err
	}
	p.progress(3*stepNo, stepNo, "optimizer update")
	if err := r.opt.StepScaled(r.sched.Factor(r.st.Step), ClipFactor(gn, c.ClipNorm)); err != nil {
		return out, fmt.Errorf("step %d: %w", stepNo, err)
	}
	r.m.MarkWeightsChanged()
	return out, nil
}

// evaluate returns the mean validation loss over up to EvalBatches batches
// of held-out windows (NaN without validation data).
func (r *runner) evaluate() (float64, error) {
	c := r.cfg
	limit := 0
	if c.EvalBatches > 0 {
		limit = c.EvalBatches * c.Batch
	}
	wins := data.EvalWindows(r.ds.Val, c.Seq, limit)
	if len(wins) == 0 {
		return math.NaN(), nil
	}
	// Whole batches only, so evaluation reuses one set of buffers.
	if n := len(wins) / c.Batch * c.Batch; n > 0 {
		wins = wins[:n]
	}
	return r.evalLoss(wins)
}

// evalRecord evaluates and measures the stable ranks.
func (r *runner) evalRecord() (Record, error) {
	vl, err := r.evaluate()
	if err != nil {
		return Record{}, err
	}
	rec := Record{Step: r.st.Step, Eval: true, ValLoss: f(vl), PPL: f(math.Exp(vl))}
	if !r.leader() {
		return rec, nil // rank 0 writes the record
	}
	ranks, err := StableRanks(r.m)
	if err != nil {
		return Record{}, err
	}
	for _, lr := range ranks {
		rec.SRankQ = append(rec.SRankQ, lr.Q)
		rec.SRankK = append(rec.SRankK, lr.K)
		if r.m.Config.Parallax() {
			rec.SRankR = append(rec.SRankR, lr.R)
			mean := 0.0
			for _, v := range lr.Circuit {
				mean += v
			}
			rec.SRankRK = append(rec.SRankRK, mean/float64(max(len(lr.Circuit), 1)))
			rec.SRankRKHead = append(rec.SRankRKHead, lr.Circuit)
		}
	}
	return rec, nil
}

func (r *runner) loop(ctx context.Context) (Result, error) {
	c := r.cfg
	res := Result{Out: c.Out, Step: r.st.Step, Loss: math.NaN(), ValLoss: math.NaN(), Params: r.m.Config.NumParams()}
	prof, err := r.stepProfiler()
	if err != nil {
		return res, err
	}
	if r.st.Step >= c.Steps {
		res.AlreadyDone = true
		r.logf("the run in %s is already finished (step %d of %d); ask for more --steps to continue it", c.Out, r.st.Step, c.Steps)
		return res, nil
	}
	if c.Stdout != nil {
		r.prog = NewProgress(c.Stdout, r.st.Step, c.Steps, c.LogEvery)
	}
	if !c.Resume {
		r.logf("model %s: %s, %s parameters; %s; %d x %d tokens x %d micro-batches per step on %s",
			c.Model, r.m.Config.Attention, HumanCount(float64(res.Params)), r.opt.Groups(),
			c.Batch, c.Seq, c.Accum, r.dev.Info().Name)
	}
	T := c.Seq
	buf := make([]int32, c.Batch*(T+1))
	in, tgt := make([]int32, c.Batch*T), make([]int32, c.Batch*T)
	tokensPerStep := int64(c.Batch * T * c.Accum)
	start := time.Now()
	startStep := r.st.Step
	var emaTPS float64
	mainLR := r.opt.Config().Muon.LR
	if c.Optim.Name == OptAdamW {
		mainLR = r.opt.Config().AdamW.LR
	}
	lastSaved := r.st.Step
	for r.st.Step < c.Steps {
		if r.stopping(ctx) {
			break
		}
		t0 := time.Now()
		stepNo := r.st.Step + 1
		logNow := stepNo%c.LogEvery == 0 || stepNo == 1 || stepNo == c.Steps
		factor := r.sched.Factor(r.st.Step)
		profNow := prof != nil && stepNo == c.ProfileStep
		if profNow {
			if err := prof.StartProfile(); err != nil {
				return res, fmt.Errorf("train: step %d: %w", stepNo, err)
			}
		}
		out, err := r.step(buf, in, tgt, logNow)
		if err != nil {
			return res, err
		}
		if profNow {
			if res.Profile, err = prof.StopProfile(); err != nil {
				return res, fmt.Errorf("train: step %d: %w", stepNo, err)
			}
		}
		r.st.Step = stepNo
		r.st.Tokens += tokensPerStep
		if out.skipped {
			r.st.Skipped++
			r.logf("step %d skipped: non-finite loss or gradient (%d skipped so far)", stepNo, r.st.Skipped)
		}
		dt := time.Since(t0).Seconds()
		tps := float64(tokensPerStep) / dt
		if emaTPS == 0 {
			emaTPS = tps
		} else {
			emaTPS = 0.9*emaTPS + 0.1*tps
		}
		res.Step, res.Loss = stepNo, out.loss
		rec := Record{Step: stepNo, Loss: f(out.loss), LR: f(mainLR * factor), GradNorm: f(out.gradNorm),
			TokensPerS: f(tps), Tokens: r.st.Tokens, ElapsedS: f(time.Since(start).Seconds()),
			COR: out.cor, Gate: out.gate, Skipped: out.skipped}
		if c.Optim.Name == OptMuon {
			rec.LRAdamW = f(r.opt.Config().AdamW.LR * factor)
		}
		if r.peak > 0 {
			rec.MFU = f(r.flops * tps / r.peak)
		}
		if logNow || out.skipped {
			if err := r.metrics.Write(rec); err != nil {
				return res, err
			}
		}
		if c.OnStep != nil {
			c.OnStep(rec)
		}
		r.prog.Update(stepNo, out.loss, mainLR*factor, emaTPS)
		last := stepNo == c.Steps
		if c.EvalEvery > 0 && (stepNo%c.EvalEvery == 0 || last) {
			er, err := r.evalRecord()
			if err != nil {
				return res, err
			}
			if er.ValLoss != nil {
				res.ValLoss = *er.ValLoss
				msg := fmt.Sprintf("step %d: val loss %.4f, ppl %.2f", stepNo, *er.ValLoss, *er.PPL)
				if len(er.SRankR) > 0 {
					msg += fmt.Sprintf(", stable rank W_R %.1f (layer 0)", er.SRankR[0])
				}
				r.logf("%s", msg)
			}
			if err := r.metrics.Write(er); err != nil {
				return res, err
			}
		}
		if !c.NoSave && ((c.SaveEvery > 0 && stepNo%c.SaveEvery == 0) || last) {
			if err := r.save(); err != nil {
				return res, err
			}
			lastSaved = stepNo
		}
	}
	if el := time.Since(start).Seconds(); el > 0 && r.st.Step > startStep {
		res.TokensPerS = float64(int64(r.st.Step-startStep)*tokensPerStep) / el
	}
	if r.st.Step < c.Steps { // interrupted
		res.Interrupted = true
		if c.NoSave {
			r.logf("interrupted after step %d (no checkpoint: saving is off)", r.st.Step)
		} else {
			if lastSaved != r.st.Step {
				if err := r.save(); err != nil {
					return res, err
				}
			}
			r.logf("interrupted after step %d; checkpoint saved in %s (continue with --resume)", r.st.Step, c.Out)
		}
	}
	if !r.leader() {
		return res, nil
	}
	if err := r.plot(); err != nil {
		r.logf("warning: %v", err)
	}
	return res, nil
}

// GPT2Vocab is the size of GPT-2's vocabulary; a model of this vocabulary
// trains with the embedded GPT-2 tokenizer unless told otherwise.
const GPT2Vocab = 50257
