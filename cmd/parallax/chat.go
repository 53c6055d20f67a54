package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/parallax-engine/parallax/model"
	"github.com/parallax-engine/parallax/model/chat"
	"github.com/parallax-engine/parallax/model/tokenizer"
)

const chatUsage = `
Usage:
  parallax chat --model DIR [flags]

An interactive conversation with a model in the terminal: type a message and
Enter; the answer streams as it is produced. /reset starts a new
conversation, Ctrl-C stops the current answer, Ctrl-D (or /quit) quits.

Each turn renders the whole conversation with the model's chat template
(tokenizer_config.json's chat_template, or chat_template.jinja; a model
without one gets "role: content" lines) with the generation prompt, encodes
it as the template wrote it (add_special_tokens=False) and samples until an
EOS id (the model config's, generation_config.json's or the template's
eos_token), a --stop string or --max-tokens. generation_config.json's
temperature, top_p and top_k are the defaults of the sampling flags. Ids the
tokenizer cannot decode are never sampled.
`

const chatExamples = `
  parallax chat --model Qwen3-0.6B --device cuda:0
  parallax chat --model run --system "You are a helpful assistant." --temperature 0
  parallax chat --model Qwen3-0.6B --var enable_thinking=false --stop "<|im_end|>"
`

// plainTemplate is the chat template of a model that has none.
const plainTemplate = `{% for m in messages %}{{ m.role }}: {{ m.content }}
{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}`

// samplingFlags fills the sampling flags the command line left unset from
// the model folder's generation_config.json, then checks every numeric one
// before the model loads (NaN passes any comparison, so each test is
// written to fail on it). It returns the generation config (nil if the
// folder has none).
func samplingFlags(dir string, maxTokens int, temp, topP *float64, topK *int, changed func(string) bool) (*chat.GenerationConfig, error) {
	gc, err := chat.LoadGenerationConfig(dir)
	if err != nil {
		return nil, err
	}
	applyGenerationConfig(gc, temp, topP, topK, changed)
	switch {
	case maxTokens < 1:
		return nil, usagef("--max-tokens %d must be >= 1", maxTokens)
	case !(*temp >= 0) || !finite(*temp):
		return nil, usagef("--temperature %g must be a finite number >= 0 (0: greedy)", *temp)
	case *topK < 0:
		return nil, usagef("--top-k %d must be >= 0 (0: all)", *topK)
	case !(*topP > 0 && *topP <= 1):
		return nil, usagef("--top-p %g must be in (0, 1] (1: all)", *topP)
	}
	return gc, nil
}

// applyGenerationConfig takes generation_config.json's sampling settings
// for the flags not given on the command line.
func applyGenerationConfig(gc *chat.GenerationConfig, temp, topP *float64, topK *int, changed func(string) bool) {
	if gc == nil {
		return
	}
	if !changed("temperature") {
		switch {
		case gc.DoSample != nil && !*gc.DoSample:
			*temp = 0
		case gc.Temperature != nil:
			*temp = *gc.Temperature
		}
	}
	if !changed("top-p") && gc.TopP != nil {
		*topP = *gc.TopP
	}
	if !changed("top-k") && gc.TopK != nil {
		*topK = *gc.TopK
	}
}

// stopIDs lists the ids that end generation: the model's EOS ids,
// generation_config.json's and the template's eos_token.
func stopIDs(m *model.Model, gc *chat.GenerationConfig, tok *tokenizer.Tokenizer, eosToken string) []int {
	ids := slices.Clone(m.Config.EOS)
	if gc != nil {
		ids = append(ids, gc.EOS...)
	}
	if eosToken != "" {
		if id, ok := tok.TokenID(eosToken); ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	return slices.DeleteFunc(ids, func(id int) bool { return id < 0 || id >= m.Config.Vocab })
}

func runChat(args []string, stdout, stderr io.Writer) error {
	interrupts := make(chan os.Signal, 1)
	signal.Notify(interrupts, os.Interrupt)
	defer signal.Stop(interrupts)
	return chatLoop(args, os.Stdin, stdout, stderr, interrupts)
}

// chatLoop is runChat reading stdin, with interrupts delivering Ctrl-C.
func chatLoop(args []string, stdin io.Reader, stdout, stderr io.Writer, interrupts <-chan os.Signal) error {
	fs := newFlagSet("chat", chatUsage, chatExamples, stdout)
	dir := fs.String("model", "run", "model directory")
	system := fs.String("system", "", "system message that starts the conversation")
	maxTokens := fs.Int("max-tokens", 512, "tokens to generate at most in one answer")
	temp := fs.Float64("temperature", 0.8, "sampling temperature (0: greedy; default: generation_config.json's, else 0.8)")
	topK := fs.Int("top-k", 0, "sample from the K most likely tokens (0: all; default: generation_config.json's)")
	topP := fs.Float64("top-p", 0.95, "nucleus sampling, in (0, 1] (default: generation_config.json's, else 0.95)")
	seed := fs.Uint64("seed", 1, "sampling seed")
	stops := fs.StringArray("stop", nil, "stop the answer at this text (repeatable)")
	vars := varsFlag{}
	fs.Var(vars, "var", "chat template variable NAME=VALUE (repeatable; e.g. enable_thinking=false)")
	device := fs.String("device", "auto", "device: auto, cpu, vulkan:N, cuda:N")
	dtypeName := fs.String("dtype", "auto", dtypeUsage)
	weightsFlag := fs.String("weights", "stored", weightsUsage)
	convert := fs.Bool("convert-parallax", false, "load a softmax (e.g. Hugging Face Qwen3) checkpoint as Parallax with W_R = 0")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	gc, err := samplingFlags(*dir, *maxTokens, temp, topP, topK, fs.Changed)
	if err != nil {
		return err
	}
	for _, s := range *stops {
		if s == "" {
			return usagef("--stop wants a non-empty text")
		}
	}
	dt, err := parseDTypeFlag(*dtypeName)
	if err != nil {
		return err
	}
	weights, err := parseWeightsFlag(*weightsFlag)
	if err != nil {
		return err
	}
	tok, err := loadTokenizer(*dir)
	if err != nil {
		return err
	}
	tmpl, err := chat.LoadTemplate(*dir)
	if err != nil {
		if _, statErr := os.Stat(*dir); statErr != nil {
			return err
		}
		if !strings.Contains(err.Error(), "no chat template") {
			return err
		}
		tmpl, err = chat.ParseTemplate(plainTemplate)
		if err != nil {
			return err
		}
		*stops = append(*stops, "\nuser:")
	}
	dev, m, err := openModel(*dir, *device, dt, *convert, weights)
	if err != nil {
		return err
	}
	defer dev.Close()
	defer m.Free()
	if tok.VocabSize() > m.Config.Vocab {
		return fmt.Errorf("tokenizer in %s has %d tokens but the model only %d: they do not belong together", *dir, tok.VocabSize(), m.Config.Vocab)
	}
	stop := stopIDs(m, gc, tok, tmpl.EOSToken)
	suppress := undecodable(tok, m.Config.Vocab, stop)
	if len(suppress) == m.Config.Vocab {
		return fmt.Errorf("the tokenizer in %s decodes none of the model's %d ids", *dir, m.Config.Vocab)
	}
	fmt.Fprintf(stderr, "parallax chat: %s on %s; /reset starts over, Ctrl-C stops an answer, Ctrl-D quits\n", *dir, dev.Info().ID())

	var cancel atomic.Bool
	generating := atomic.Bool{}
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-done:
				return
			case _, ok := <-interrupts:
				if !ok {
					return
				}
				if generating.Load() {
					cancel.Store(true)
				} else {
					fmt.Fprint(stdout, "\n(Ctrl-D quits)\n> ")
				}
			}
		}
	}()

	var history []chat.Message
	reset := func() {
		history = history[:0]
		if *system != "" {
			history = append(history, chat.Message{Role: "system", Content: *system})
		}
	}
	reset()
	in := bufio.NewReader(stdin)
	sample := model.SampleOptions{Temperature: *temp, TopK: *topK, TopP: *topP, Seed: *seed}
	for turn := 0; ; turn++ {
		fmt.Fprint(stdout, "> ")
		line, err := in.ReadString('\n')
		if errors.Is(err, io.EOF) && line == "" {
			fmt.Fprintln(stdout)
			return nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		line = strings.TrimRight(line, "\r\n")
		switch strings.TrimSpace(line) {
		case "":
			continue
		case "/reset":
			reset()
			fmt.Fprintln(stdout, "(new conversation)")
			continue
		case "/quit", "/exit":
			return nil
		}
		history = append(history, chat.Message{Role: "user", Content: line})
		prompt, err := tmpl.Render(history, chat.RenderOptions{AddGenerationPrompt: true, Vars: vars})
		if err != nil {
			history = history[:len(history)-1]
			fmt.Fprintf(stderr, "parallax chat: %v\n", err)
			continue
		}
		ids := tok.EncodeHF(prompt, false)
		n := min(*maxTokens, m.Config.MaxSeq-len(ids)+1)
		if n < 1 || len(ids) == 0 {
			history = history[:len(history)-1]
			fmt.Fprintf(stderr, "parallax chat: the conversation has %d tokens, the model's context %d: /reset to start over\n", len(ids), m.Config.MaxSeq)
			continue
		}
		sample.Seed = *seed + uint64(turn)
		cancel.Store(false)
		generating.Store(true)
		sd := newStreamDecoder(tok, *stops, stdout)
		_, err = m.Generate(ids, n, model.GenerateOptions{Sample: sample, Stop: stop, Suppress: suppress}, func(t int) bool {
			if cancel.Load() {
				return false
			}
			return sd.push(t)
		})
		generating.Store(false)
		answer := sd.finish()
		fmt.Fprintln(stdout)
		if err != nil {
			fmt.Fprintf(stderr, "parallax chat: %v\n", err)
		}
		if sd.err != nil {
			fmt.Fprintf(stderr, "parallax chat: %v\n", sd.err)
		}
		if cancel.Load() {
			fmt.Fprintln(stdout, "(stopped)")
		}
		history = append(history, chat.Message{Role: "assistant", Content: answer})
	}
}

// streamDecoder prints generated text as it is decoded, holding back an
// incomplete UTF-8 character and any tail that may begin a stop string, and
// ends the answer at a stop string.
type streamDecoder struct {
	tok     *tokenizer.Tokenizer
	stops   []string
	w       io.Writer
	ids     []int
	text    string // decoded so far, cut at a stop string
	printed int
	stopped bool
	err     error
}

func newStreamDecoder(tok *tokenizer.Tokenizer, stops []string, w io.Writer) *streamDecoder {
	return &streamDecoder{tok: tok, stops: stops, w: w}
}

// push adds a token; false means stop generating.
func (d *streamDecoder) push(id int) bool {
	d.ids = append(d.ids, id)
	s, err := d.tok.Decode(d.ids)
	if err != nil {
		d.err = fmt.Errorf("generated token %d (id %d): %w", len(d.ids), id, err)
		return false
	}
	d.text = s
	for _, st := range d.stops {
		if i := strings.Index(d.text, st); i >= 0 {
			d.text = d.text[:i]
			d.stopped = true
		}
	}
	cut := tokenizer.CompleteRunes(d.text)
	if !d.stopped {
		for _, st := range d.stops {
			for k := min(len(st)-1, cut); k > 0; k-- {
				if strings.HasSuffix(d.text[:cut], st[:k]) {
					cut = min(cut, len(d.text[:cut])-k)
					break
				}
			}
		}
	}
	if cut > d.printed {
		fmt.Fprint(d.w, d.text[d.printed:cut])
		d.printed = cut
	}
	return !d.stopped
}

// finish prints what was held back and returns the answer.
func (d *streamDecoder) finish() string {
	if len(d.text) > d.printed {
		fmt.Fprint(d.w, d.text[d.printed:])
		d.printed = len(d.text)
	}
	return d.text
}
