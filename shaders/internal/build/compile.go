package build

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// Glslc returns the path of the glslc compiler, or an error saying how to
// install it.
func Glslc() (string, error) {
	p, err := exec.LookPath("glslc")
	if err != nil {
		return "", fmt.Errorf("glslc not found on PATH (Debian/Ubuntu: apt-get install glslc)")
	}
	return p, nil
}

// GlslcVersion is the first line of `glslc --version` ("shaderc v2023.2 ...").
func GlslcVersion() (string, error) {
	g, err := Glslc()
	if err != nil {
		return "", err
	}
	return toolVersion(g)
}

// toolVersion is the first line of `tool --version`.
func toolVersion(tool string) (string, error) {
	out, err := exec.Command(tool, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", tool, err)
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(line), nil
}

// EnvKHRGlslc names a glslc to compile the KHR variants with instead of
// the one .ci/fetch-glslc13.sh puts in .ci/cache/glslc13.
const EnvKHRGlslc = "PARALLAX_GLSLC_KHR"

// KHRGlslcVersion is the version (the start of `glslc --version`'s first
// line) every KHR variant's committed SPIR-V was compiled with: glslang's
// output changes between releases, and the staleness check compares bytes.
const KHRGlslcVersion = "shaderc 2025.2"

// ErrNoKHRGlslc is returned (wrapped) when the pinned compiler of the KHR
// variants is absent.
var ErrNoKHRGlslc = errors.New("no glslc for the KHR cooperative-matrix shaders")

// KHRGlslc returns the glslc that compiles the KHR variants (Variant.KHR):
// $PARALLAX_GLSLC_KHR, else .ci/cache/glslc13/bin/glslc of the module that
// holds srcDir. It must be KHRGlslcVersion: the machine's glslc (shaderc
// 2023.2 on Debian 12) cannot compile GL_KHR_cooperative_matrix, and
// another release would not reproduce the committed bytes.
func KHRGlslc(srcDir string) (string, error) {
	g := os.Getenv(EnvKHRGlslc)
	if g == "" {
		root, err := moduleRoot(srcDir)
		if err != nil {
			return "", err
		}
		g = filepath.Join(root, ".ci", "cache", "glslc13", "bin", "glslc")
		if _, err := os.Stat(g); err != nil {
			return "", fmt.Errorf("%w: %s is missing (run bash .ci/fetch-glslc13.sh, or set %s)", ErrNoKHRGlslc, g, EnvKHRGlslc)
		}
	}
	v, err := toolVersion(g)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrNoKHRGlslc, err)
	}
	if !strings.HasPrefix(v, KHRGlslcVersion) {
		return "", fmt.Errorf("%w: %s is %q, want %s (what .ci/fetch-glslc13.sh fetches)", ErrNoKHRGlslc, g, v, KHRGlslcVersion)
	}
	return g, nil
}

// KHRSpirvVal returns the spirv-val installed beside the KHR glslc (the
// machine's SPIRV-Tools may not know the KHR cooperative-matrix
// capability), or an error wrapping ErrNoKHRGlslc.
func KHRSpirvVal(srcDir string) (string, error) {
	g, err := KHRGlslc(srcDir)
	if err != nil {
		return "", err
	}
	v := filepath.Join(filepath.Dir(g), "spirv-val")
	if _, err := os.Stat(v); err != nil {
		return "", fmt.Errorf("%w: no spirv-val beside %s", ErrNoKHRGlslc, g)
	}
	return v, nil
}

// moduleRoot is the nearest directory at or above dir holding go.mod.
func moduleRoot(dir string) (string, error) {
	d, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("shaders directory %s: %w", dir, err)
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		up := filepath.Dir(d)
		if up == d {
			return "", fmt.Errorf("%w: no go.mod at or above %s to find .ci/cache from (set %s)", ErrNoKHRGlslc, dir, EnvKHRGlslc)
		}
		d = up
	}
}

// Portable returns the variants the machine's glslc compiles (all but the
// KHR ones).
func Portable() []Variant {
	var out []Variant
	for _, v := range Variants {
		if !v.KHR {
			out = append(out, v)
		}
	}
	return out
}

// Compile compiles every variant of the sources in srcDir into outDir
// (NAME.spv). The output depends only on the sources and the compiler
// versions: glslc runs in srcDir with relative paths and no debug info.
func Compile(srcDir, outDir string) error { return CompileVariants(srcDir, outDir, Variants) }

// CompileVariants compiles the variants vs of the sources in srcDir into
// outDir: the KHR ones with KHRGlslc, the others with Glslc.
func CompileVariants(srcDir, outDir string, vs []Variant) error {
	var g, gk string
	for _, v := range vs {
		var err error
		switch {
		case v.KHR && gk == "":
			gk, err = KHRGlslc(srcDir)
		case !v.KHR && g == "":
			g, err = Glslc()
		}
		if err != nil {
			return err
		}
	}
	absOut, err := filepath.Abs(outDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(absOut, 0o755); err != nil {
		return err
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []string
		sem  = make(chan struct{}, 8)
	)
	for _, v := range vs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			args := []string{"--target-env=" + v.Target, "-O", "-Werror", "-I", "."}
			for _, d := range v.Defines {
				args = append(args, "-D"+d)
			}
			args = append(args, "-o", filepath.Join(absOut, v.Name+".spv"), v.Source+".comp")
			tool := g
			if v.KHR {
				tool = gk
			}
			cmd := exec.Command(tool, args...)
			cmd.Dir = srcDir
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Run(); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Sprintf("%s (%s): %v\n%s", v.Name, tool, err, stderr.String()))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		sort.Strings(errs)
		return fmt.Errorf("glslc failed:\n%s", strings.Join(errs, "\n"))
	}
	return nil
}

// Stale compiles the sources of srcDir into a temporary directory and
// returns the variants whose committed spvDir/NAME.spv is missing or
// differs, and the .spv files in spvDir that no variant produces.
func Stale(srcDir, spvDir string) (stale, extra []string, err error) {
	return StaleVariants(srcDir, spvDir, Variants)
}

// StaleVariants is Stale checking only the variants vs (the unexpected
// files are still those no variant at all produces).
func StaleVariants(srcDir, spvDir string, vs []Variant) (stale, extra []string, err error) {
	tmp, err := os.MkdirTemp("", "parallax-spv-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(tmp)
	if err := CompileVariants(srcDir, tmp, vs); err != nil {
		return nil, nil, err
	}
	for _, v := range vs {
		fresh, err := os.ReadFile(filepath.Join(tmp, v.Name+".spv"))
		if err != nil {
			return nil, nil, err
		}
		committed, err := os.ReadFile(filepath.Join(spvDir, v.Name+".spv"))
		if err != nil || !bytes.Equal(fresh, committed) {
			stale = append(stale, v.Name)
		}
	}
	want := map[string]bool{}
	for _, v := range Variants {
		want[v.Name+".spv"] = true
	}
	ents, err := os.ReadDir(spvDir)
	if err != nil {
		return nil, nil, err
	}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".spv") && !want[e.Name()] {
			extra = append(extra, e.Name())
		}
	}
	return stale, extra, nil
}
