package shaders_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/parallax-engine/parallax/shaders"
	"github.com/parallax-engine/parallax/shaders/internal/build"
)

// TestSPIRVUpToDate recompiles every shader into a temporary directory and
// fails if a committed spv/*.spv differs (run `go generate ./shaders`). It
// needs glslc, and for the KHR cooperative-matrix variants the pinned
// compiler of .ci/fetch-glslc13.sh: without either the test skips what it
// cannot compile, unless PARALLAX_REQUIRE_VULKAN=1 (CI), where it fails.
func TestSPIRVUpToDate(t *testing.T) {
	if _, err := build.Glslc(); err != nil {
		if os.Getenv("PARALLAX_REQUIRE_VULKAN") == "1" {
			t.Fatalf("PARALLAX_REQUIRE_VULKAN=1: %v", err)
		}
		t.Skip(err)
	}
	vs := build.Variants
	if _, err := build.KHRGlslc("."); err != nil {
		if os.Getenv("PARALLAX_REQUIRE_VULKAN") == "1" {
			t.Fatalf("PARALLAX_REQUIRE_VULKAN=1: %v", err)
		}
		t.Logf("checking only the portable variants: %v", err)
		vs = build.Portable()
	}
	stale, extra, err := build.StaleVariants(".", "spv", vs)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := build.GlslcVersion()
	for _, name := range stale {
		t.Errorf("spv/%s.spv is stale or missing (compiled with %s, the KHR variants with %s): run go generate ./shaders",
			name, v, build.KHRGlslcVersion)
	}
	for _, name := range extra {
		t.Errorf("spv/%s is not produced by any variant: run go generate ./shaders", name)
	}
}

// Every variant is embedded.
func TestEmbedded(t *testing.T) {
	names := map[string]bool{}
	for _, n := range shaders.Names() {
		names[n] = true
	}
	for _, v := range build.Variants {
		if !names[v.Name] {
			t.Errorf("variant %s is not embedded", v.Name)
		}
		if b, ok := shaders.SPIRV(v.Name); !ok || len(b) < 20 || b[0] != 0x03 || b[1] != 0x02 || b[2] != 0x23 || b[3] != 0x07 {
			t.Errorf("variant %s: not SPIR-V (missing or bad magic)", v.Name)
		}
	}
}

// TestSPIRVValid runs spirv-val (SPIRV-Tools) on every embedded module when
// it is installed: this is the only check the cooperative-matrix kernels
// get on machines without such hardware. The KHR variants are validated
// with the spirv-val beside the pinned KHR compiler (older SPIRV-Tools
// reject the KHR cooperative-matrix capability) and skipped without it.
func TestSPIRVValid(t *testing.T) {
	val, err := exec.LookPath("spirv-val")
	if err != nil {
		t.Skip("spirv-val not installed (Debian: spirv-tools)")
	}
	khr := map[string]bool{}
	for _, v := range build.Variants {
		khr[v.Name] = v.KHR
	}
	khrVal, khrErr := build.KHRSpirvVal(".")
	for _, name := range shaders.Names() {
		tool := val
		if khr[name] {
			if khrErr != nil {
				t.Logf("spv/%s.spv not validated: %v", name, khrErr)
				continue
			}
			tool = khrVal
		}
		out, err := exec.Command(tool, "--target-env", "vulkan1.1", filepath.Join("spv", name+".spv")).CombinedOutput()
		if err != nil {
			t.Errorf("%s spv/%s.spv: %v\n%s", tool, name, err, out)
		}
	}
}
