package vulkan

import (
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/parallax-engine/parallax/engine"
)

// khrRunEnv names the program the KHR cooperative-matrix test reruns its
// test binary under: .ci/fetch-lavapipe-khr.sh's bin/vk-run, which runs it
// with Debian 13's loader and libraries and Mesa 26's lavapipe as the only
// driver. That lavapipe needs a newer libc than the machine's, so it cannot
// be loaded into this process; the test reruns itself instead.
const khrRunEnv = "PARALLAX_VULKAN_KHR_RUN"

// khrChildEnv marks the rerun process, which does the checks.
const khrChildEnv = "PARALLAX_VULKAN_KHR_CHILD"

// VkComponentTypeKHR and VkScopeKHR values (cgo is not available in tests).
const (
	khrFloat16       = 0
	khrFloat32       = 1
	khrScopeSubgroup = 3
)

// TestKHRCooperativeMatrixDevice checks, on a device from the driver that
// PARALLAX_VULKAN_KHR_RUN selects, that VK_KHR_cooperative_matrix is
// offered with at least one f16 x f16 -> f32 shape at subgroup scope (the
// shape the KHR matmul kernel needs), logs every shape, and runs one op on
// the device; the rerun also runs the other TestKHR tests
// (khr_matmul_test.go), which certify the KHR matmul kernel there.
// Skipped unless the variable is set, for example to
// $PWD/.ci/cache/lvp-khr/bin/vk-run.
func TestKHRCooperativeMatrixDevice(t *testing.T) {
	if os.Getenv(khrChildEnv) != "1" {
		run := os.Getenv(khrRunEnv)
		if run == "" {
			t.Skipf("set %s to .ci/fetch-lavapipe-khr.sh's bin/vk-run (an absolute path) to run this test", khrRunEnv)
		}
		cmd := exec.Command(run, os.Args[0], "-test.run=^TestKHR", "-test.v")
		cmd.Env = append(os.Environ(), khrChildEnv+"=1")
		out, err := cmd.CombinedOutput()
		t.Logf("%s %s:\n%s", run, os.Args[0], out)
		if err != nil {
			t.Fatalf("the rerun under %s failed: %v", run, err)
		}
		return
	}
	rt, err := loadRuntime()
	if err != nil {
		t.Fatalf("loading Vulkan: %v", err)
	}
	index := -1
	for _, p := range rt.phys {
		if !hasString(p.exts, "VK_KHR_cooperative_matrix") {
			t.Logf("vulkan:%d %s: no VK_KHR_cooperative_matrix", p.index, p.name)
			continue
		}
		t.Logf("vulkan:%d %s: coopmat feature %v, subgroup size %d", p.index, p.name, p.x.coopKHR != 0, p.x.subgroupSize)
		f32acc := false
		for _, s := range p.coopShapesKHR() {
			t.Logf("  %dx%dx%d %sx%s+%s->%s scope %d", s.M, s.N, s.K, componentName(s.A), componentName(s.B),
				componentName(s.C), componentName(s.Result), s.Scope)
			if s.A == khrFloat16 && s.B == khrFloat16 && s.C == khrFloat32 && s.Result == khrFloat32 && s.Scope == khrScopeSubgroup {
				f32acc = true
			}
		}
		if p.x.coopKHR != 0 && f32acc && index < 0 {
			index = p.index
		}
	}
	if index < 0 {
		t.Fatal("no device offers KHR cooperative matrices with an f16 x f16 -> f32 shape at subgroup scope")
	}
	d, err := Open(index)
	if err != nil {
		t.Fatalf("vulkan:%d: %v", index, err)
	}
	defer d.Close()
	x := upload(t, d, engine.F32, []float32{1, 2, 3}, 3)
	y := upload(t, d, engine.F32, []float32{10, 20, 30}, 3)
	if err := d.AddScaled(x, x, y, 1, 1); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(download(t, x)), "[11 22 33]"; got != want {
		t.Errorf("x + y = %s on vulkan:%d, want %s", got, index, want)
	}
}
