package main

import (
	"fmt"
	"io"
	"strings"
)

// opCommand is one op runnable with "parallax op NAME".
type opCommand struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) error
}

func opCommands() []opCommand {
	return []opCommand{
		{"attention", "the attention family: Parallax, softmax, LLA, linear (forward and backward)", runOpAttention},
	}
}

const opUsage = `
Usage:
  parallax op OP --in IN.safetensors --out OUT.safetensors [--device ID]

Runs one engine op on tensors read from a safetensors file and writes its
results to another, so an op can be checked against another implementation
(PyTorch, say) on the user's own data. Ops:
%s
Run 'parallax op OP --help' for the tensors and options an op takes.
`

func opList() string {
	var b strings.Builder
	for _, c := range opCommands() {
		fmt.Fprintf(&b, "  %-10s %s\n", c.name, c.summary)
	}
	return b.String()
}

func opNames() string {
	var names []string
	for _, c := range opCommands() {
		names = append(names, c.name)
	}
	return strings.Join(names, ", ")
}

func runOp(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("missing the op to run (ops: %s)", opNames())
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprintf(stdout, strings.TrimLeft(opUsage, "\n"), opList())
		return errHelp
	}
	for _, c := range opCommands() {
		if c.name == args[0] {
			if err := c.run(args[1:], stdout, stderr); err != nil {
				return &subcommandError{path: "op " + c.name, err: err}
			}
			return nil
		}
	}
	if strings.HasPrefix(args[0], "-") {
		return usagef("flag %s before the op name; the ops are: %s", args[0], opNames())
	}
	return usagef("unknown op %q; the ops are: %s", args[0], opNames())
}
