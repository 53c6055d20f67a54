// Command parallax-view opens a window that shows a Parallax model thinking
// while it generates: the token stream, the attention of one layer and head
// as two heatmaps (the softmax weights p and Parallax's effective weights
// p(1 + tbar - t), which can be negative) and the correction strength
// ||Sigma_KV r|| / ||o_SA|| of every layer. It runs the model with the
// Vulkan backend and draws every frame with compute kernels straight into
// the window's swapchain images on the same device, so any Vulkan GPU (or
// lavapipe) can run it. See docs/VIEWER.md.
//
// It is its own command so that cmd/parallax builds without X11 headers.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"

	"github.com/spf13/pflag"
)

// GLFW wants its window calls on the process's main thread.
func init() { runtime.LockOSThread() }

const usage = `Usage:
  parallax-view --model DIR [flags]

Opens a window and generates from a trained model (a directory written by
'parallax train', or a file in it) while showing, for one layer and head,
the softmax attention weights p and Parallax's effective weights
p(1 + tbar - t) as heatmaps, the correction strength of every layer as bars,
and the text.

Keys: left/right head, up/down layer, space pause/resume, n or . one token
(pauses), Esc or q quit. While paused, typing edits a new prompt (Backspace
deletes, Esc cancels) and Enter restarts generation with it; Enter without
typing restarts with the current prompt.

Flags:
`

const examples = `
Examples:
  parallax-view --model bin/demo --prompt "It is a truth universally acknowledged"
  parallax-view --model bin/demo --layer 2 --head 1 --temperature 0
  parallax-view --model bin/demo --screenshot view.png --frames 40
`

// options are the command line.
type options struct {
	model, tokenizer, prompt string
	temperature, topP        float64
	topK, maxTokens          int
	seed                     uint64
	device                   string
	layer, head              int
	width, height            int
	screenshot               string
	frames                   int
	offscreen                bool
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// errUsage marks a mistake on the command line (exit status 2).
type errUsage struct{ msg string }

func (e errUsage) Error() string { return e.msg }

// run is the command: 0 on success, 1 when it fails, 2 for a usage mistake.
func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseArgs(args, stdout)
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	var ue errUsage
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "parallax-view: %v (see --help)\n", err)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "parallax-view: %v\n", err)
		return 2
	}
	if err := view(o, stdout); err != nil {
		fmt.Fprintf(stderr, "parallax-view: %v\n", err)
		return 1
	}
	return 0
}

// parseArgs reads and checks the flags.
func parseArgs(args []string, stdout io.Writer) (options, error) {
	var o options
	fs := pflag.NewFlagSet("parallax-view", pflag.ContinueOnError)
	fs.SetOutput(stdout)
	fs.Usage = func() {
		fmt.Fprint(stdout, usage)
		fs.PrintDefaults()
		fmt.Fprint(stdout, examples)
	}
	fs.StringVar(&o.model, "model", "run", "model directory (or a file in it, such as model.safetensors)")
	fs.StringVar(&o.tokenizer, "tokenizer", "", "tokenizer.json (default: the model directory's)")
	fs.StringVar(&o.prompt, "prompt", "It is a truth universally acknowledged", "text to continue")
	fs.Float64Var(&o.temperature, "temperature", 0.8, "sampling temperature (0: greedy)")
	fs.IntVar(&o.topK, "top-k", 40, "sample from the K most likely tokens (0: all)")
	fs.Float64Var(&o.topP, "top-p", 0.95, "nucleus sampling: the smallest set reaching this probability (1: all)")
	fs.Uint64Var(&o.seed, "seed", 1, "sampling seed")
	fs.IntVar(&o.maxTokens, "max-tokens", 200, "tokens to generate at most (also bounded by the model's context)")
	fs.StringVar(&o.device, "device", "auto", "Vulkan device: auto or vulkan:N")
	fs.IntVar(&o.layer, "layer", 0, "layer to show first")
	fs.IntVar(&o.head, "head", 0, "query head to show first")
	fs.IntVar(&o.width, "width", 1280, "window width in pixels")
	fs.IntVar(&o.height, "height", 800, "window height in pixels")
	fs.StringVar(&o.screenshot, "screenshot", "", "render --frames frames (one token each), save the last one as this PNG and exit")
	fs.IntVar(&o.frames, "frames", 60, "frames to render before --screenshot")
	fs.BoolVar(&o.offscreen, "offscreen-frame", false, "draw into an image of our own and blit it into the window (the fallback for surfaces that cannot be storage images)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return o, err
		}
		return o, errUsage{err.Error()}
	}
	if fs.NArg() > 0 {
		return o, errUsage{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	switch {
	case o.maxTokens < 1:
		return o, errUsage{"--max-tokens must be >= 1"}
	case o.temperature < 0 || o.topK < 0 || o.topP < 0 || o.topP > 1:
		return o, errUsage{"--temperature and --top-k must be >= 0, --top-p in [0, 1]"}
	case o.layer < 0 || o.head < 0:
		return o, errUsage{"--layer and --head must be >= 0"}
	case o.width < 64 || o.height < 64 || o.width > 16384 || o.height > 16384:
		return o, errUsage{"--width and --height must be in [64, 16384]"}
	case strings.TrimSpace(o.prompt) == "":
		return o, errUsage{"--prompt must not be empty"}
	case o.frames < 1:
		return o, errUsage{"--frames must be >= 1"}
	case o.device != "auto" && !strings.HasPrefix(o.device, "vulkan:"):
		return o, errUsage{fmt.Sprintf("--device %q: the viewer runs on Vulkan devices (auto or vulkan:N)", o.device)}
	}
	return o, nil
}
