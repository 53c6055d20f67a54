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
// needs glslc: without it the test skips, unless PARALLAX_REQUIRE_VULKAN=1
// (CI), where it fails.
func TestSPIRVUpToDate(t *testing.T) {
	if _, err := build.Glslc(); err != nil {
		if os.Getenv("PARALLAX_REQUIRE_VULKAN") == "1" {
			t.Fatalf("PARALLAX_REQUIRE_VULKAN=1: %v", err)
		}
		t.Skip(err)
	}
	stale, extra, err := build.Stale(".", "spv")
	if err != nil {
		t.Fatal(err)
	}
	v, _ := build.GlslcVersion()
	for _, name := range stale {
		t.Errorf("spv/%s.spv is stale or missing (compiled with %s): run go generate ./shaders", name, v)
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
// it is installed: this is the only check the cooperative-matrix kernel
// gets on machines without such hardware.
func TestSPIRVValid(t *testing.T) {
	val, err := exec.LookPath("spirv-val")
	if err != nil {
		t.Skip("spirv-val not installed (Debian: spirv-tools)")
	}
	for _, name := range shaders.Names() {
		out, err := exec.Command(val, "--target-env", "vulkan1.1", filepath.Join("spv", name+".spv")).CombinedOutput()
		if err != nil {
			t.Errorf("spirv-val spv/%s.spv: %v\n%s", name, err, out)
		}
	}
}
