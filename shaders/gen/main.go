// Command gen compiles the compute shaders of package shaders into SPIR-V:
// `go generate ./shaders` runs it in the shaders directory. With -check it
// compiles into a temporary directory instead and exits with status 1 if
// a committed .spv file is stale, missing or unexpected.
//
// The variants on GL_KHR_cooperative_matrix (build.Variant.KHR) are
// compiled with the pinned compiler that .ci/fetch-glslc13.sh fetches
// (build.KHRGlslc), the rest with the glslc on the PATH; both must be
// present, for -check too.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/parallax-engine/parallax/shaders/internal/build"
)

func main() {
	check := flag.Bool("check", false, "only report stale .spv files (exit status 1 if any)")
	dir := flag.String("dir", ".", "the shaders directory")
	flag.Parse()
	spvDir := filepath.Join(*dir, "spv")
	if *check {
		stale, extra, err := build.Stale(*dir, spvDir)
		if err != nil {
			fmt.Fprintln(os.Stderr, "shaders:", err)
			os.Exit(1)
		}
		if len(stale)+len(extra) > 0 {
			v, _ := build.GlslcVersion()
			fmt.Fprintf(os.Stderr, "shaders: committed SPIR-V is out of date (compiled with %s; the KHR variants with %s): stale %s; unexpected %s\nrun: go generate ./shaders\n",
				v, build.KHRGlslcVersion, strings.Join(stale, ", "), strings.Join(extra, ", "))
			os.Exit(1)
		}
		return
	}
	// Remove .spv files no variant produces any more.
	if ents, err := os.ReadDir(spvDir); err == nil {
		keep := map[string]bool{}
		for _, v := range build.Variants {
			keep[v.Name+".spv"] = true
		}
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".spv") && !keep[e.Name()] {
				os.Remove(filepath.Join(spvDir, e.Name()))
			}
		}
	}
	if err := build.Compile(*dir, spvDir); err != nil {
		fmt.Fprintln(os.Stderr, "shaders:", err)
		os.Exit(1)
	}
}
