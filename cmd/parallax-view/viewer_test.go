package main

import (
	"bufio"
	"errors"
	"fmt"
	"image"
	"image/color"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-gl/glfw/v3.3/glfw"

	"github.com/parallax-engine/parallax/engine"
	_ "github.com/parallax-engine/parallax/engine/cpu"
	"github.com/parallax-engine/parallax/engine/vulkan"
	"github.com/parallax-engine/parallax/model"
	"github.com/parallax-engine/parallax/model/tokenizer"
)

// required is set where a missing display or Vulkan device must fail the
// test rather than skip it (CI).
var required = os.Getenv("PARALLAX_REQUIRE_VULKAN") == "1"

func skipOrFail(t *testing.T, format string, args ...any) {
	t.Helper()
	if required {
		t.Fatalf(format+" (PARALLAX_REQUIRE_VULKAN=1)", args...)
	}
	t.Skipf(format, args...)
}

// ensureDisplay makes sure an X server is there: DISPLAY as set, or an Xvfb
// the test starts (and stops) itself.
func ensureDisplay(t *testing.T) {
	t.Helper()
	if os.Getenv("DISPLAY") != "" {
		return
	}
	bin, err := exec.LookPath("Xvfb")
	if err != nil {
		skipOrFail(t, "no DISPLAY and no Xvfb to start (Debian: xvfb)")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	// -displayfd: Xvfb picks a free display and writes its number to fd 3.
	cmd := exec.Command(bin, "-displayfd", "3", "-screen", "0", "1280x1024x24", "-nolisten", "tcp")
	cmd.ExtraFiles = []*os.File{w}
	if err := cmd.Start(); err != nil {
		skipOrFail(t, "starting Xvfb: %v", err)
	}
	w.Close()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	got := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(r).ReadString('\n')
		got <- strings.TrimSpace(line)
	}()
	select {
	case n := <-got:
		if n == "" {
			skipOrFail(t, "Xvfb did not report a display")
		}
		t.Setenv("DISPLAY", ":"+n)
	case <-time.After(20 * time.Second):
		skipOrFail(t, "Xvfb did not start within 20s")
	}
}

// writeTinyModel writes a randomly initialised two-layer Parallax model and
// a small tokenizer into a directory, as 'parallax train' would.
func writeTinyModel(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	text := strings.Repeat("It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife. ", 20)
	tok, err := tokenizer.Train([]string{text}, 300, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := tok.SaveHF(filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Fatal(err)
	}
	cfg, err := model.PresetConfig("tiny")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Vocab = tok.VocabSize()
	cfg.Dim, cfg.Layers, cfg.Heads, cfg.KVHeads, cfg.HeadDim, cfg.FFN, cfg.MaxSeq = 64, 3, 4, 2, 16, 128, 96
	cpu, err := engine.Open("cpu")
	if err != nil {
		t.Fatal(err)
	}
	defer cpu.Close()
	m, err := model.New(cpu, cfg, model.Options{Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	if err := m.Save(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// pixel kinds of a frame.
func rgb(img *image.RGBA, x, y int) (r, g, b int) {
	c := img.RGBAAt(x, y)
	return int(c.R), int(c.G), int(c.B)
}

func near(img *image.RGBA, x, y int, want color.RGBA, tol int) bool {
	r, g, b := rgb(img, x, y)
	return abs(r-int(want.R)) <= tol && abs(g-int(want.G)) <= tol && abs(b-int(want.B)) <= tol
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// The frame kernel's fixed colours (shaders/view_draw.comp), as bytes.
var (
	colBG     = color.RGBA{19, 21, 26, 255}
	colPanel  = color.RGBA{32, 34, 41, 255}
	colMasked = color.RGBA{26, 28, 34, 255}
)

// regionStats counts, over a rectangle, the pixels that are not one of the
// background colours and the variance of their luminance.
func regionStats(img *image.RGBA, r image.Rectangle) (frac, variance float64) {
	var n, lit int
	var s, s2 float64
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			n++
			if near(img, x, y, colBG, 2) || near(img, x, y, colPanel, 2) || near(img, x, y, colMasked, 2) {
				continue
			}
			lit++
			cr, cg, cb := rgb(img, x, y)
			l := 0.3*float64(cr) + 0.59*float64(cg) + 0.11*float64(cb)
			s += l
			s2 += l * l
		}
	}
	if lit == 0 {
		return 0, 0
	}
	m := s / float64(lit)
	return float64(lit) / float64(n), s2/float64(lit) - m*m
}

// checkFrame asserts that a read-back frame is the expected picture.
func checkFrame(t *testing.T, img *image.RGBA, lay frameLayout, wantW, wantH int) {
	t.Helper()
	if img == nil {
		t.Fatal("no frame was read back")
	}
	// PARALLAX_VIEW_TEST_PNG=DIR keeps the frames checked, to look at.
	if d := os.Getenv("PARALLAX_VIEW_TEST_PNG"); d != "" {
		name := strings.NewReplacer("/", "-").Replace(t.Name())
		if err := writePNG(filepath.Join(d, fmt.Sprintf("%s-%dx%d.png", name, wantW, wantH)), img); err != nil {
			t.Error(err)
		}
	}
	if img.Bounds().Dx() != wantW || img.Bounds().Dy() != wantH {
		t.Fatalf("frame is %v, want %dx%d", img.Bounds(), wantW, wantH)
	}
	p := lay.params
	if p.Size < 32 || p.L < 8 {
		t.Fatalf("layout: panel size %d, %d rows shown", p.Size, p.L)
	}
	// The corner pixel is background.
	if !near(img, wantW-1, wantH/2, colBG, 2) {
		t.Errorf("background pixel is %v, want %v", img.RGBAAt(wantW-1, wantH/2), colBG)
	}
	a := image.Rect(int(p.AX), int(p.AY), int(p.AX+p.Size), int(p.AY+p.Size))
	b := image.Rect(int(p.BX), int(p.BY), int(p.BX+p.Size), int(p.BY+p.Size))
	// Causal maps fill the lower triangle (a bit more than half with the
	// diagonal), drawn in a colour scale.
	for name, r := range map[string]image.Rectangle{"softmax": a, "parallax": b} {
		frac, v := regionStats(img, r)
		t.Logf("%s panel: %.0f%% coloured, luminance variance %.0f", name, 100*frac, v)
		if frac < 0.4 || v < 50 {
			t.Errorf("%s panel %v: %.0f%% coloured pixels, variance %.1f: want a filled heatmap", name, r, 100*frac, v)
		}
		// Above the diagonal: masked.
		x, y := r.Min.X+r.Dx()*7/8, r.Min.Y+r.Dy()/8
		if !near(img, x, y, colMasked, 2) {
			t.Errorf("%s panel: (%d, %d) above the diagonal is %v, want the masked colour", name, x, y, img.RGBAAt(x, y))
		}
	}
	// The signed panel shows both signs: blue (negative) and orange
	// (positive) pixels.
	var neg, pos int
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, _, bl := rgb(img, x, y)
			switch {
			case bl > r+40:
				neg++
			case r > bl+40:
				pos++
			}
		}
	}
	t.Logf("parallax panel: %d negative, %d positive pixels", neg, pos)
	if neg < 20 || pos < 20 {
		t.Errorf("parallax panel: %d negative and %d positive pixels; want both signs", neg, pos)
	}
	// The bars: one bar per layer, the longest reaching across.
	bars := image.Rect(int(p.CX), int(p.CY), int(p.CX+p.CW), int(p.CY+p.CH))
	frac, _ := regionStats(img, bars)
	t.Logf("bars: %.0f%% coloured", 100*frac)
	if frac < 0.05 {
		t.Errorf("bars region %v is blank (%.1f%% coloured)", bars, 100*frac)
	}
	// Text: the title row and the token stream have glyph pixels.
	ink := func(r image.Rectangle) int {
		n := 0
		for y := r.Min.Y; y < r.Max.Y; y++ {
			for x := r.Min.X; x < r.Max.X; x++ {
				if cr, cg, cb := rgb(img, x, y); cr+cg+cb > 360 {
					n++
				}
			}
		}
		return n
	}
	title := image.Rect(0, 0, wantW, int(p.CellH))
	stream := image.Rect(0, lay.streamRow*int(p.CellH), wantW, wantH)
	if n := ink(title); n < 200 {
		t.Errorf("title row has %d text pixels", n)
	}
	if n := ink(stream); n < 200 {
		t.Errorf("token stream has %d text pixels", n)
	}
	// Glyph pixels sit in their cells: column 0 of the grid is empty.
	if n := ink(image.Rect(0, 0, int(p.CellW), wantH)); n != 0 {
		t.Errorf("%d text pixels in the empty first column", n)
	}
}

// TestViewerWindow opens the real window (under Xvfb when no display is
// set), generates from a tiny model on a Vulkan device for several frames,
// reads the swapchain image back and checks the picture, then resizes the
// window and checks again; then the same through the offscreen-image path.
func TestViewerWindow(t *testing.T) {
	// Nothing may touch the Vulkan backend before openViewer: the instance
	// must be created with the window system's extensions.
	ensureDisplay(t)
	dir := writeTinyModel(t)
	for _, offscreen := range []bool{false, true} {
		name := "direct"
		if offscreen {
			name = "offscreen"
		}
		t.Run(name, func(t *testing.T) {
			o, err := parseArgs([]string{"--model", dir, "--prompt", "It is a truth universally", "--max-tokens", "30",
				"--frames", "12", "--width", "900", "--height", "560", "--screenshot", filepath.Join(t.TempDir(), "shot.png")}, os.Stdout)
			if err != nil {
				t.Fatal(err)
			}
			o.offscreen = offscreen
			v, err := openViewer(o)
			if err != nil {
				if errors.Is(err, vulkan.ErrNoVulkan) || strings.Contains(err.Error(), "window system") {
					skipOrFail(t, "%v", err)
				}
				t.Fatal(err)
			}
			defer v.close()
			img, lay, err := v.loop(o.frames)
			if err != nil {
				t.Fatal(err)
			}
			if v.pres.Direct() == offscreen {
				t.Errorf("presenter path direct=%v, want %v", v.pres.Direct(), !offscreen)
			}
			w, h := v.win.GetFramebufferSize()
			checkFrame(t, img, lay, w, h)
			if v.kv.Len < 12 {
				t.Errorf("%d positions after 12 frames", v.kv.Len)
			}

			// Another layer and head, a resized window: the swapchain is
			// recreated and the picture follows.
			v.layer, v.head, v.mapsValid = 1, 3, false
			v.win.SetSize(760, 620)
			deadline := time.Now().Add(5 * time.Second)
			for {
				glfwWait()
				if w2, h2 := v.win.GetFramebufferSize(); (w2 == 760 && h2 == 620) || time.Now().After(deadline) {
					break
				}
			}
			w, h = v.win.GetFramebufferSize()
			if w != 760 || h != 620 {
				t.Fatalf("the window did not resize (%dx%d)", w, h)
			}
			img, lay, err = v.frame(true)
			if err != nil {
				t.Fatal(err)
			}
			checkFrame(t, img, lay, 760, 620)
			if pw, ph := v.pres.Size(); pw != 760 || ph != 620 {
				t.Errorf("swapchain is %dx%d after the resize", pw, ph)
			}

			// Keys: head and layer wrap around, space pauses, n steps one
			// token, typing while paused edits a prompt that Enter starts.
			v.onKey(nil, glfw.KeyRight, 0, glfw.Press, 0)
			v.onKey(nil, glfw.KeyUp, 0, glfw.Press, 0)
			v.onKey(nil, glfw.KeyUp, 0, glfw.Press, 0)
			if v.head != 0 || v.layer != 2 || v.mapsValid {
				t.Errorf("after right, up, up: layer %d head %d (maps valid %v), want layer 2 head 0", v.layer, v.head, v.mapsValid)
			}
			v.onChar(nil, ' ')
			n0 := v.kv.Len
			if err := v.update(); err != nil || v.kv.Len != n0 || !v.paused {
				t.Errorf("paused: update advanced from %d to %d (%v)", n0, v.kv.Len, err)
			}
			v.onChar(nil, 'n')
			if err := v.update(); err != nil || v.kv.Len != n0+1 || !v.paused {
				t.Errorf("n: %d positions, want %d (paused %v, %v)", v.kv.Len, n0+1, v.paused, err)
			}
			for _, r := range "Emmx" {
				v.onChar(nil, r)
			}
			v.onKey(nil, glfw.KeyBackspace, 0, glfw.Press, 0)
			v.onChar(nil, 'a')
			if !v.editing || string(v.edit) != "Emma" {
				t.Errorf("editing %v %q, want the prompt Emma", v.editing, string(v.edit))
			}
			v.onKey(nil, glfw.KeyEnter, 0, glfw.Press, 0)
			if want := len(v.tok.EncodeWithSpecials("Emma")); v.failed != nil || v.promptText != "Emma" || v.kv.Len != want || v.paused || v.editing {
				t.Errorf("after Enter: prompt %q, %d positions (want %d), paused %v, editing %v, %v", v.promptText, v.kv.Len, want, v.paused, v.editing, v.failed)
			}
			img, lay, err = v.frame(true)
			if err != nil {
				t.Fatal(err)
			}
			if img == nil || lay.params.L != uint32(v.kv.Len) {
				t.Errorf("frame after the restart: %d rows shown, want %d", lay.params.L, v.kv.Len)
			}
			v.onKey(nil, glfw.KeyEscape, 0, glfw.Press, 0)
			if !v.win.ShouldClose() {
				t.Error("Esc did not close the window")
			}
			if os.Getenv("PARALLAX_VULKAN_VALIDATION") == "1" && !vulkan.ValidationEnabled() {
				t.Error("PARALLAX_VULKAN_VALIDATION=1 but the validation layer is not enabled")
			}
			if vulkan.ValidationEnabled() && vulkan.ValidationErrors() > 0 {
				t.Errorf("%d Vulkan validation errors (see stderr)", vulkan.ValidationErrors())
			}
		})
	}
}

// TestLayout checks the frame layout without a window.
func TestLayout(t *testing.T) {
	s := &viewState{model: "m", layers: 4, heads: 2, length: 10, cap: 64, status: "running",
		prompt: "It is a truth", gen: " universally\nacknowledged", cor: []float32{0.1, 0.2, 0.3, 0.4}, parallax: true}
	for _, sz := range [][2]int{{1280, 800}, {640, 400}, {300, 200}, {2000, 1200}, {64, 64}} {
		l := layout(sz[0], sz[1], s)
		p := l.params
		if len(l.cells) != l.cols*l.rows {
			t.Fatalf("%v: %d cells for %dx%d", sz, len(l.cells), l.cols, l.rows)
		}
		if p.Size > 0 {
			if int(p.BX) < int(p.AX+p.Size) || int(p.CX) < int(p.BX+p.Size) || int(p.CX+p.CW) > sz[0] || int(p.AY+p.Size) > sz[1] {
				t.Errorf("%v: panels overlap or leave the frame: %+v", sz, p)
			}
		}
	}
	if got := wrap([]span{{1, "ab\ncdef"}}, 3); len(got) != 3 || len(got[2]) != 1 {
		t.Errorf("wrap: %v", got)
	}
	if math.Abs(float64(printable('é'))-'?') > 0 {
		t.Errorf("non-ASCII should print as ?")
	}
}

// TestArgs checks the command line's errors.
func TestArgs(t *testing.T) {
	for _, args := range [][]string{
		{"--max-tokens", "0"}, {"--top-p", "2"}, {"--device", "cpu"}, {"--width", "10"}, {"extra"}, {"--frob"},
	} {
		if code := run(args, os.Stdout, os.Stderr); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	if code := run([]string{"--help"}, os.Stdout, os.Stderr); code != 0 {
		t.Errorf("--help: exit %d", code)
	}
}

func glfwWait() { glfw.WaitEventsTimeout(0.05) }

// TestViewerValidation reruns TestViewerWindow in a child process with
// VK_LAYER_KHRONOS_validation enabled and fails on any validation error
// (image layouts, barriers and synchronisation of the presenting code).
// Skipped when the layer is not installed (Debian: vulkan-validationlayers).
func TestViewerValidation(t *testing.T) {
	if os.Getenv("PARALLAX_VULKAN_VALIDATION") != "" {
		t.Skip("already running under validation")
	}
	found := false
	for _, dir := range []string{"/usr/share/vulkan/explicit_layer.d", "/usr/local/share/vulkan/explicit_layer.d", "/etc/vulkan/explicit_layer.d"} {
		if m, _ := filepath.Glob(filepath.Join(dir, "VkLayer_khronos_validation.json")); len(m) > 0 {
			found = true
		}
	}
	if !found {
		t.Skip("VK_LAYER_KHRONOS_validation is not installed")
	}
	ensureDisplay(t)
	cmd := exec.Command(os.Args[0], "-test.run", "^TestViewerWindow$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "PARALLAX_VULKAN_VALIDATION=1")
	out, err := cmd.CombinedOutput()
	if err != nil || strings.Contains(string(out), "vulkan validation error") {
		t.Fatalf("under VK_LAYER_KHRONOS_validation: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "--- SKIP: TestViewerWindow") && required {
		t.Fatalf("the validated run skipped:\n%s", out)
	}
	if !strings.Contains(string(out), "--- PASS: TestViewerWindow") && !strings.Contains(string(out), "--- SKIP: TestViewerWindow") {
		t.Fatalf("the validated run did not pass:\n%s", out)
	}
}
