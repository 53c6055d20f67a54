package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version is the release version, set at build time with
// -ldflags "-X main.version=v1.2.3"; "dev" for a plain build.
var version = "dev"

const versionUsage = `
Usage:
  parallax version

Prints the version, the VCS revision the binary was built from (when the
build recorded one) and the Go toolchain and platform.
`

func runVersion(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", versionUsage, "", stdout)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "parallax %s (%s%s, %s/%s)\n", version, runtime.Version(), vcsSuffix(), runtime.GOOS, runtime.GOARCH)
	return nil
}

// vcsSuffix describes the VCS revision recorded in the binary, if any.
func vcsSuffix() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "+modified"
			}
		}
	}
	if rev == "" {
		return ""
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	return ", revision " + rev + modified
}
