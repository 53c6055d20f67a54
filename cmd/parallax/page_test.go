package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestChatPageInChromium runs scripts/serve-screenshot.sh: a tiny model
// trained and served on the CPU, the chat page opened in headless
// Chromium with a first message, the streamed answer awaited over the
// DevTools protocol and a screenshot saved. It skips without chromium or
// Node (.ci/setup.sh installs both on CI).
func TestChatPageInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a model and starts a browser")
	}
	chrome := ""
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			chrome = p
			break
		}
	}
	if chrome == "" {
		t.Skip("chromium is not installed")
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// The script runs parallax as a program: this test binary, as main.
	bin := filepath.Join(dir, "parallax")
	wrapper := "#!/bin/sh\nPARALLAX_CLI_MAIN=1 exec " + shellQuote(self) + " \"$@\"\n"
	if err := os.WriteFile(bin, []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(dir, "shot.png")
	cmd := exec.Command("bash", "../../scripts/serve-screenshot.sh", shot)
	cmd.Env = append(os.Environ(), "PARALLAX_BIN="+bin, "CDP_PORT=9347")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("serve-screenshot: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "answer: ") {
		t.Errorf("no answer reported:\n%s", out)
	}
	png, err := os.ReadFile(shot)
	if err != nil || len(png) < 1000 || string(png[1:4]) != "PNG" {
		t.Fatalf("screenshot %s: %d bytes, %v", shot, len(png), err)
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
