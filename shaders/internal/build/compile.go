package build

import (
	"bytes"
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
	out, err := exec.Command(g, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("glslc --version: %v", err)
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(line), nil
}

// Compile compiles every variant of the sources in srcDir into outDir
// (NAME.spv). The output depends only on the sources and the compiler
// version: glslc runs in srcDir with relative paths and no debug info.
func Compile(srcDir, outDir string) error {
	g, err := Glslc()
	if err != nil {
		return err
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
	for _, v := range Variants {
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
			cmd := exec.Command(g, args...)
			cmd.Dir = srcDir
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Run(); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Sprintf("%s: %v\n%s", v.Name, err, stderr.String()))
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
	tmp, err := os.MkdirTemp("", "parallax-spv-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(tmp)
	if err := Compile(srcDir, tmp); err != nil {
		return nil, nil, err
	}
	want := map[string]bool{}
	for _, v := range Variants {
		want[v.Name+".spv"] = true
		fresh, err := os.ReadFile(filepath.Join(tmp, v.Name+".spv"))
		if err != nil {
			return nil, nil, err
		}
		committed, err := os.ReadFile(filepath.Join(spvDir, v.Name+".spv"))
		if err != nil || !bytes.Equal(fresh, committed) {
			stale = append(stale, v.Name)
		}
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
