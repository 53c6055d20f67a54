//go:build cgo

package cuda

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCompileKernels compiles every kernel module with NVRTC for the
// architectures the library supports among sm_80 and sm_90(a). It needs
// NVRTC but no GPU, and skips where NVRTC is missing.
// PARALLAX_CUDA_PTXAS passes options to ptxas (-v: register counts);
// PARALLAX_CUDA_DUMP names a folder to write the images to;
// PARALLAX_CUDA_COMPILE_ONLY=a,b compiles only modules a.cu and b.cu.
// PARALLAX_REQUIRE_NVRTC=1 (make test, where .ci/setup.sh fetched NVRTC 12)
// turns a missing NVRTC, or one without sm_90a, into a failure.
func TestCompileKernels(t *testing.T) {
	require := os.Getenv("PARALLAX_REQUIRE_NVRTC") == "1"
	if err := loadNVRTC(libDirs()); err != nil {
		if require {
			t.Fatalf("PARALLAX_REQUIRE_NVRTC=1 but no NVRTC: %v", err)
		}
		t.Skipf("no NVRTC: %v", err)
	}
	src, err := readSources()
	if err != nil {
		t.Fatal(err)
	}
	maj, _ := nvrtcVersionOf()
	archs := nvrtcArchs()
	var targets []string
	for _, a := range archs {
		if a == 80 || a == 90 {
			targets = append(targets, archFor(a/10, a%10, maj, archs))
		}
	}
	if require && !slices.Contains(targets, "sm_90a") {
		t.Fatalf("PARALLAX_REQUIRE_NVRTC=1 but NVRTC %d cannot compile the Hopper kernels (sm_90a; targets %v)", maj, targets)
	}
	if len(targets) == 0 {
		t.Skipf("NVRTC supports none of sm_80, sm_90 (has %v)", archs)
	}
	only := strings.FieldsFunc(os.Getenv("PARALLAX_CUDA_COMPILE_ONLY"), func(r rune) bool { return r == ',' })
	for _, arch := range targets {
		for name := range src.modules {
			if len(only) > 0 && !slices.Contains(only, name) {
				continue
			}
			opts := compileOptions(arch)
			if v := os.Getenv("PARALLAX_CUDA_PTXAS"); v != "" {
				opts = append(opts, "--ptxas-options="+v)
			}
			img, log, err := compile(name, src.modules[name], src.headers, opts)
			if err != nil {
				t.Errorf("%s for %s: %v", name, arch, err)
				continue
			}
			if l := strings.TrimSpace(log); l != "" {
				t.Logf("%s for %s:\n%s", name, arch, l)
			}
			t.Logf("%s for %s: %d bytes", name, arch, len(img))
			if dir := os.Getenv("PARALLAX_CUDA_DUMP"); dir != "" { // for cuobjdump/nvdisasm
				if err := os.WriteFile(filepath.Join(dir, name+"-"+arch+".bin"), img, 0o644); err != nil {
					t.Error(err)
				}
			}
		}
	}
}

// TestPDLKernelsWait compiles the modules written for programmatic
// dependent launch to PTX for compute_90 and checks that every kernel
// pdlKernel launches with PDL runs griddepcontrol.wait: one that did not
// could read another kernel's output before it is written. Needs NVRTC,
// as TestCompileKernels.
func TestPDLKernelsWait(t *testing.T) {
	if err := loadNVRTC(libDirs()); err != nil {
		if os.Getenv("PARALLAX_REQUIRE_NVRTC") == "1" {
			t.Fatalf("PARALLAX_REQUIRE_NVRTC=1 but no NVRTC: %v", err)
		}
		t.Skipf("no NVRTC: %v", err)
	}
	if !slices.Contains(nvrtcArchs(), 90) {
		t.Skip("NVRTC cannot target compute_90")
	}
	src, err := readSources()
	if err != nil {
		t.Fatal(err)
	}
	for _, mod := range pdlModules {
		ptx, _, err := compile(mod, src.modules[mod], src.headers, compileOptions("compute_90"))
		if err != nil {
			t.Fatalf("%s: %v", mod, err)
		}
		entries := ptxEntries(string(ptx))
		n := 0
		for name, body := range entries {
			if !pdlKernel(mod, name) {
				continue
			}
			n++
			if !strings.Contains(body, "griddepcontrol.wait") {
				t.Errorf("%s: kernel %s is launched with PDL but never waits (no griddepcontrol.wait)", mod, name)
			}
		}
		if n == 0 {
			t.Errorf("%s: no kernel of %d is launched with PDL", mod, len(entries))
		}
	}
}

// ptxEntries splits PTX text into its kernels: name -> the text from its
// .entry directive to the next one.
func ptxEntries(ptx string) map[string]string {
	out := map[string]string{}
	parts := strings.Split(ptx, ".entry ")
	for _, p := range parts[1:] {
		name, _, ok := strings.Cut(p, "(")
		if ok {
			out[strings.TrimSpace(name)] = p
		}
	}
	return out
}
