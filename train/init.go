package train

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/model"
	"github.com/parallax-engine/parallax/model/tokenizer"
	"github.com/parallax-engine/parallax/train/data"
)

// Starting a run from pretrained weights (Config.Init): the model is
// loaded from the directory (ours or a Hugging Face Qwen3 one, sharded or
// not, any stored float dtype), optionally converted to Parallax with
// W_R = 0 so that step 0 computes exactly the softmax model, and trained
// with a fresh optimizer and schedule. The tokenizer comes from the
// directory unless Config.Tokenizer names one.

// TokenizerSideFiles are the tokenizer files besides tokenizer.json that a
// run started from a model directory copies into its output (the chat
// template and special-token settings), so that the result loads in
// generate, chat and export as the original did.
var TokenizerSideFiles = []string{"tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
	"generation_config.json", "vocab.json", "merges.txt"}

// validateAdapt checks the adaptation settings.
func (c Config) validateAdapt() error {
	switch {
	case c.Init != "" && c.Resume:
		return errors.New("train: init starts a fresh run from a model directory; it cannot be combined with resume")
	case c.ConvertParallax && c.Init == "":
		return errors.New("train: convert-parallax converts the weights of init; give a model directory to start from")
	case c.Init != "" && c.Attention != "":
		return errors.New("train: the attention of a run started from a model directory is the model's (use convert-parallax to add W_R to a softmax one)")
	case !(c.ProbeInitScale >= 0) || c.ProbeInitScale > 1e6:
		return fmt.Errorf("train: probe init scale %v must be a number in [0, 1e6]", c.ProbeInitScale)
	case c.ProbeInitScale > 0 && !c.ConvertParallax:
		return errors.New("train: probe init scale sets the initial W_R of a converted model; it needs convert-parallax")
	case IsJSONL(c.Data) && c.Init == "" && c.Tokenizer == "":
		return fmt.Errorf("train: %s is JSONL: it needs an existing tokenizer (init or tokenizer), not one trained on it", c.Data)
	}
	if st, err := os.Stat(c.Init); c.Init != "" && (err != nil || !st.IsDir()) {
		return fmt.Errorf("train: init %s is not a model directory", c.Init)
	}
	return checkPatterns(c.Freeze)
}

// IsJSONL reports whether path names a JSONL file (by its extension).
func IsJSONL(path string) bool { return strings.EqualFold(filepath.Ext(path), ".jsonl") }

// LoadTokenizer reads a tokenizer from path: a tokenizer.json file, or a
// directory holding tokenizer.json or GPT-2's vocab.json and merges.txt.
func LoadTokenizer(path string) (*tokenizer.Tokenizer, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if !st.IsDir() {
		return tokenizer.LoadHF(path)
	}
	t, err := tokenizer.LoadHF(filepath.Join(path, TokenizerFile))
	if err == nil {
		return t, nil
	}
	if t2, err2 := tokenizer.LoadGPT2(filepath.Join(path, "vocab.json"), filepath.Join(path, "merges.txt")); err2 == nil {
		return t2, nil
	}
	return nil, fmt.Errorf("no usable tokenizer in %s: %w", path, err)
}

// TokenizerID fingerprints a tokenizer as a run records it in its
// datasets: the checksum of its tokenizer.json as SaveHF writes it.
func TokenizerID(t *tokenizer.Tokenizer) (string, error) {
	dir, err := os.MkdirTemp("", "parallax-tok-")
	if err != nil {
		return "", fmt.Errorf("tokenizer fingerprint: %w", err)
	}
	defer os.RemoveAll(dir)
	p := filepath.Join(dir, TokenizerFile)
	if err := t.SaveHF(p); err != nil {
		return "", fmt.Errorf("tokenizer fingerprint: %w", err)
	}
	c, err := FileCRC(p)
	if err != nil {
		return "", fmt.Errorf("tokenizer fingerprint: %w", err)
	}
	return fmt.Sprintf("crc32c:%08x", c), nil
}

// loadGivenTokenizer loads Config.Tokenizer, or else the tokenizer of
// Config.Init, copying the init directory's side files into Out.
func (r *runner) loadGivenTokenizer() (*tokenizer.Tokenizer, error) {
	if r.cfg.Tokenizer != "" {
		t, err := LoadTokenizer(r.cfg.Tokenizer)
		if err != nil {
			return nil, fmt.Errorf("train: --tokenizer: %w", err)
		}
		return t, nil
	}
	t, err := LoadTokenizer(r.cfg.Init)
	if err != nil {
		return nil, fmt.Errorf("train: --init: %w", err)
	}
	if r.leader() {
		if err := r.copySideFiles(r.cfg.Init); err != nil {
			return nil, fmt.Errorf("train: --init: %w", err)
		}
	}
	r.logf("using the tokenizer of %s (%d tokens)", r.cfg.Init, t.VocabSize())
	return t, nil
}

// copySideFiles copies the TokenizerSideFiles present in dir into Out;
// a run that fails before its first checkpoint removes them again.
func (r *runner) copySideFiles(dir string) error {
	for _, name := range TokenizerSideFiles {
		src := filepath.Join(dir, name)
		if _, err := os.Stat(src); err != nil {
			continue
		}
		dst := filepath.Join(r.cfg.Out, name)
		if same(src, dst) {
			continue
		}
		_, existed := os.Lstat(dst)
		if err := CopyFile(dst, src); err != nil {
			return err
		}
		if existed != nil && r.out != nil {
			r.out.files = append(r.out.files, name)
		}
	}
	return nil
}

func same(a, b string) bool {
	fa, err1 := os.Stat(a)
	fb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(fa, fb)
}

// CopyFile copies src to dst atomically.
func CopyFile(dst, src string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	return data.WriteAtomic(dst, func(w io.Writer) error {
		_, err := io.Copy(w, f)
		return err
	})
}

// newModel makes the run's model: loaded from Config.Init (converted to
// Parallax with Config.ConvertParallax), or new with random weights in the
// shape mc.
func (r *runner) newModel(mc model.Config, dt engine.DType) (*model.Model, error) {
	if r.cfg.Init == "" {
		m, err := model.New(r.dev, mc, model.Options{Seed: r.cfg.Seed, DType: dt})
		if err != nil {
			return nil, fmt.Errorf("train: %w", err)
		}
		return m, nil
	}
	m, err := model.Load(r.cfg.Init, r.dev, model.LoadOptions{DType: dt, ConvertParallax: r.cfg.ConvertParallax})
	if err != nil {
		return nil, fmt.Errorf("train: --init: %w", err)
	}
	if r.cfg.ProbeInitScale > 0 {
		if err := initProbe(m, r.cfg.ProbeInitScale, r.cfg.Seed); err != nil {
			m.Free()
			return nil, fmt.Errorf("train: --probe-init-scale: %w", err)
		}
	}
	what := "as it is"
	if r.cfg.ConvertParallax {
		what = "converted to Parallax with W_R = 0: step 0 computes the softmax model"
		if r.cfg.ProbeInitScale > 0 {
			what = fmt.Sprintf("converted to Parallax with W_R ~ N(0, (%g x 0.02)^2)", r.cfg.ProbeInitScale)
		}
	}
	r.logf("initial weights from %s (%s), %s", r.cfg.Init, m.Config.Attention, what)
	return m, nil
}

// ProbeInitStd is the standard deviation that ProbeInitScale 1 gives W_R:
// the model's initialisation of every matrix.
const ProbeInitStd = 0.02

// initProbe draws every W_R from N(0, (scale*ProbeInitStd)^2), each from a
// stream seeded by seed and the tensor's name.
func initProbe(m *model.Model, scale float64, seed uint64) error {
	n := 0
	for _, p := range m.Params() {
		if !strings.HasSuffix(p.Name, ".self_attn.r_proj.weight") {
			continue
		}
		h := fnv.New64a()
		h.Write([]byte(p.Name))
		rng := rand.New(rand.NewPCG(seed, h.Sum64()))
		vals := make([]float32, p.W.Numel())
		for i := range vals {
			vals[i] = float32(rng.NormFloat64() * scale * ProbeInitStd)
		}
		if err := engine.WriteFloat32(p.W, vals); err != nil {
			return fmt.Errorf("init %s: %w", p.Name, err)
		}
		n++
	}
	if n == 0 {
		return errors.New("the model has no W_R")
	}
	m.MarkWeightsChanged()
	return nil
}

// prepareJSONL tokenizes a JSONL --data file into Out/data (streaming;
// chat samples through the chat template of the tokenizer's directory)
// and opens it.
func (r *runner) prepareJSONL(id string) error {
	o, err := PrepareOptionsFor(r.tok, r.chatDir())
	if err != nil {
		return fmt.Errorf("train: --data %s: %w", r.cfg.Data, err)
	}
	o.Tokenizer = id
	ds, err := data.Prepare(r.cfg.Data, filepath.Join(r.cfg.Out, DataDir), o)
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	r.logf("tokenized %s: %d %s samples (%s tokens), %d held out (%s tokens)", r.cfg.Data,
		ds.Meta.TrainSamples, ds.Meta.Format, HumanCount(float64(ds.Meta.TrainTokens)),
		ds.Meta.ValSamples, HumanCount(float64(ds.Meta.ValTokens)))
	r.ds = ds
	return nil
}

// chatDir is the directory whose chat template renders chat samples: the
// tokenizer's (a directory, or a tokenizer.json's folder), else Init.
func (r *runner) chatDir() string {
	if t := r.cfg.Tokenizer; t != "" {
		if st, err := os.Stat(t); err == nil && !st.IsDir() {
			return filepath.Dir(t)
		}
		return t
	}
	return r.cfg.Init
}

// ChatTemplateLoader loads the chat template of a model directory as a
// data.Renderer; nil (the default until a template engine is linked in)
// means chat samples cannot be rendered. The command sets it.
var ChatTemplateLoader func(dir string) (data.Renderer, error)

// PrepareOptionsFor returns the options data.Prepare tokenizes with under
// tok: text with Encode, chat through the template in chatDir (if
// ChatTemplateLoader finds one) with special tokens, <|endoftext|> (if the
// tokenizer has it) between samples.
func PrepareOptionsFor(tok *tokenizer.Tokenizer, chatDir string) (data.PrepareOptions, error) {
	conv := func(ids []int) []int32 {
		out := make([]int32, len(ids))
		for i, v := range ids {
			out[i] = int32(v)
		}
		return out
	}
	eot := int32(-1)
	if id, ok := tok.SpecialID(EOTToken); ok {
		eot = int32(id)
	}
	o := data.PrepareOptions{
		Encode:        func(s string) ([]int32, error) { return conv(tok.Encode(s)), nil },
		EncodeSpecial: func(s string) ([]int32, error) { return conv(tok.EncodeWithSpecials(s)), nil },
		Vocab:         tok.VocabSize(), EOT: eot, ValFrac: -1,
	}
	if ChatTemplateLoader != nil && chatDir != "" {
		rd, err := ChatTemplateLoader(chatDir)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return o, fmt.Errorf("chat template of %s: %w", chatDir, err)
		}
		o.Renderer = rd
	}
	return o, nil
}
