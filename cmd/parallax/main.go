// Command parallax is the command-line interface of the Parallax engine: it
// lists compute devices, runs single ops on tensors read from safetensors
// files, and reports its version. Run "parallax help" for the commands.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"github.com/spf13/pflag"

	_ "github.com/parallax-engine/parallax/engine/cpu"    // registers the "cpu" backend
	_ "github.com/parallax-engine/parallax/engine/cuda"   // registers the "cuda" backend
	_ "github.com/parallax-engine/parallax/engine/vulkan" // registers the "vulkan" backend
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1 // the command ran and failed
	exitUsage   = 2 // the command line was wrong
)

// command is one subcommand: its name, a one-line summary for the command
// list, and the function that runs it on the arguments after its name.
type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) error
}

// commands lists the subcommands in the order "parallax help" shows them.
func commands() []command {
	return []command{
		{"devices", "list compute backends and devices", runDevices},
		{"op", "run one op on tensors from a safetensors file", runOp},
		{"conformance", "certify a device: every op against a float64 reference", runConformance},
		{"bench", "time attention, decode, matmul, generation or training steps on a device", runBench},
		{"train", "train a model (Parallax or softmax attention)", runTrain},
		{"generate", "continue a prompt with a trained model", runGenerate},
		{"chat", "talk with a model in the terminal, with its chat template", runChat},
		{"serve", "serve a model over an OpenAI-compatible HTTP API", runServe},
		{"serve-bench", "load-test a running server: throughput and time to first token", runServeBench},
		{"eval", "loss and perplexity of a model on a text", runEval},
		{"mad", "the MAD synthetic benchmark: six tasks, pluggable mixers", runMAD},
		{"data", "tokenize a large text or JSONL file into training shards", runData},
		{"export", "write a model as a Hugging Face folder", runExport},
		{"quantize", "write a model's weights as weight-only int8", runQuantize},
		{"report", "summarise training runs: the adaptation and quality studies' tables and curves", runReport},
		{"tokenizer", "train a BPE tokenizer, encode, decode or render a chat template", runTokenizer},
		{"version", "print the version", runVersion},
		{"help", "show help for a command", runHelp},
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const mainUsage = `parallax: a Go engine for language models with Parallax attention.

Usage:
  parallax COMMAND [flags]

Commands:
%s
Run 'parallax COMMAND --help' for a command's flags and examples.
`

func printMainUsage(w io.Writer) {
	var b strings.Builder
	for _, c := range commands() {
		fmt.Fprintf(&b, "  %-12s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, mainUsage, b.String())
}

func commandNames() string {
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	return strings.Join(names, ", ")
}

// run executes the command line args (without the program name) and returns
// the process exit code. It never panics: an unexpected panic is reported
// as an internal error with exit code 1.
func run(args []string, stdout, stderr io.Writer) (code int) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "parallax: internal error: %v\nThis is a bug; please report it with the command line and this trace:\n%s", r, debug.Stack())
			code = exitFailure
		}
	}()
	if len(args) == 0 {
		printMainUsage(stderr)
		return exitUsage
	}
	name := args[0]
	switch name {
	case "-h", "--help":
		printMainUsage(stdout)
		return exitOK
	case "--version", "-version":
		name = "version"
	}
	for _, c := range commands() {
		if c.name == name {
			return report(stderr, "parallax "+name, c.run(args[1:], stdout, stderr))
		}
	}
	if strings.HasPrefix(name, "-") {
		fmt.Fprintf(stderr, "parallax: flag %s before a command; the commands are: %s\nRun 'parallax help' for usage.\n", name, commandNames())
	} else {
		fmt.Fprintf(stderr, "parallax: unknown command %q; the commands are: %s\nRun 'parallax help' for usage.\n", name, commandNames())
	}
	return exitUsage
}

// usageError is a mistake in the command line: a bad flag, a missing or
// extra argument. It exits with code 2 and points at the command's help.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...)}
}

// subcommandError attributes err to a nested command ("op attention"), so
// its message and usage hint name that command rather than the top-level
// one.
type subcommandError struct {
	path string
	err  error
}

func (e *subcommandError) Error() string { return e.err.Error() }
func (e *subcommandError) Unwrap() error { return e.err }

// errHelp reports that help was requested and printed.
var errHelp = errors.New("help requested")

// report prints err (if any) prefixed by the command and maps it to an exit
// code.
func report(stderr io.Writer, cmd string, err error) int {
	var se *subcommandError
	if errors.As(err, &se) {
		cmd = "parallax " + se.path
	}
	var ue *usageError
	switch {
	case err == nil, errors.Is(err, errHelp):
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "%s: %s\nRun '%s --help' for usage.\n", cmd, ue.msg, cmd)
		return exitUsage
	}
	fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
	return exitFailure
}

// newFlagSet returns a flag set that reports errors instead of exiting and
// prints help (usage text, flags, examples) to stdout on -h/--help.
func newFlagSet(name, usage, examples string, stdout io.Writer) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.SortFlags = false
	fs.Usage = func() {
		fmt.Fprint(stdout, strings.TrimLeft(usage, "\n"))
		if flags := fs.FlagUsages(); flags != "" {
			fmt.Fprintf(stdout, "\nFlags:\n%s", flags)
		}
		if examples != "" {
			fmt.Fprintf(stdout, "\nExamples:\n%s", strings.TrimLeft(examples, "\n"))
		}
	}
	return fs
}

// parseFlags parses args into fs, turning pflag's errors into usage errors
// and -h/--help into errHelp (the help text has been printed).
func parseFlags(fs *pflag.FlagSet, args []string) error {
	err := fs.Parse(args)
	if errors.Is(err, pflag.ErrHelp) {
		return errHelp
	}
	if err != nil {
		return &usageError{err.Error()}
	}
	return nil
}

// noArgs rejects positional arguments left after the flags.
func noArgs(fs *pflag.FlagSet) error {
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q (this command takes only flags)", fs.Arg(0))
	}
	return nil
}

const helpUsage = `
Usage:
  parallax help [COMMAND...]

Shows the list of commands, or the help of one command (the same as
'parallax COMMAND --help').
`

func runHelp(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		printMainUsage(stdout)
		return nil
	}
	if args[0] == "help" {
		fmt.Fprint(stdout, strings.TrimLeft(helpUsage, "\n"))
		return nil
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(append(append([]string(nil), args[1:]...), "--help"), stdout, stderr)
		}
	}
	return usagef("unknown command %q; the commands are: %s", args[0], commandNames())
}
