// Package shaders holds the GLSL compute shaders of the Vulkan backend and
// their SPIR-V, compiled ahead of time and embedded, so building the engine
// needs no shader compiler.
//
// `go generate ./shaders` recompiles every variant in Variants with glslc
// into spv/NAME.spv. The committed .spv files must match the sources: the
// package's tests (and `make test`) regenerate them into a temporary
// directory and fail on any difference.
package shaders

//go:generate go run ./gen

import (
	"embed"
	"io/fs"
	"sort"
	"strings"
)

//go:embed spv/*.spv
var spv embed.FS

// SPIRV returns the SPIR-V of the named variant ("matmul", "matmul.no16").
func SPIRV(name string) ([]byte, bool) {
	b, err := spv.ReadFile("spv/" + name + ".spv")
	return b, err == nil
}

// Names lists the embedded variants.
func Names() []string {
	ents, _ := fs.ReadDir(spv, "spv")
	var out []string
	for _, e := range ents {
		out = append(out, strings.TrimSuffix(e.Name(), ".spv"))
	}
	sort.Strings(out)
	return out
}
