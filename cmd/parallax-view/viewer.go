package main

/*
#include <stdint.h>
#include <stddef.h>

// GLFW's own, linked in through github.com/go-gl/glfw (VkInstance and
// GLFWwindow* are pointers, VkSurfaceKHR a 64-bit handle). Called from here
// because the binding's CreateWindowSurface returns the address of its
// local copy of the handle rather than the handle.
extern int32_t glfwCreateWindowSurface(void *instance, void *window, const void *allocator, uint64_t *surface);

static int32_t pxv_create_surface(void *instance, void *window, uint64_t *surface) {
	return glfwCreateWindowSurface(instance, window, NULL, surface);
}

// The binding's Init only logs a platform error (no display) and reports
// success; glfwInit's own result and glfwGetError say what happened.
extern int glfwInit(void);
extern int glfwGetError(const char **description);

static int pxv_init(const char **why) {
	*why = NULL;
	if (glfwInit()) {
		return 1;
	}
	glfwGetError(why);
	return 0;
}
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/go-gl/glfw/v3.3/glfw"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/vulkan"
	"github.com/parallax-engine/parallax/internal/atomicfile"
	"github.com/parallax-engine/parallax/model"
	"github.com/parallax-engine/parallax/model/tokenizer"
)

// maxContext bounds the positions the viewer keeps (the maps it draws are
// context x context floats).
const maxContext = 1024

// viewer is the window, the device and the generation it shows.
type viewer struct {
	o    options
	win  *glfw.Window
	dev  *vulkan.Device
	pres *vulkan.Presenter

	m    *model.Model
	tok  *tokenizer.Tokenizer
	name string
	kv   *model.KVCache
	insp *model.Inspector

	maps, font, text *engine.Tensor
	textCells        []int32 // what text holds

	// Generation.
	sampler    *model.Sampler
	stop       map[int]bool
	promptText string
	out        []int
	logits     []float32
	cor        []float32
	paused     bool
	done       bool
	why        string
	stepOnce   bool

	// Interaction.
	layer, head int
	editing     bool
	edit        []rune
	note        string
	mapsValid   bool // maps hold the current layer, head and length
	redraw      bool
	failed      error // an error raised in a callback
	glfwUp      bool  // GLFW is initialised (Terminate at close)
}

// view runs the viewer until its window closes (or, with --screenshot,
// until the frame is saved).
func view(o options, stdout io.Writer) error {
	v, err := openViewer(o)
	if err != nil {
		return err
	}
	defer v.close()
	img, _, err := v.loop(o.frames)
	if err != nil {
		return err
	}
	if o.screenshot != "" {
		if err := writePNG(o.screenshot, img); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "parallax-view: wrote %s (%dx%d, %d tokens)\n", o.screenshot, img.Bounds().Dx(), img.Bounds().Dy(), v.kv.Len)
	}
	return nil
}

// openViewer opens the window, the device and the model, and prefills the
// prompt.
func openViewer(o options) (v *viewer, err error) {
	v = &viewer{o: o, layer: o.layer, head: o.head, redraw: true}
	defer func() {
		if err != nil {
			v.close()
			v = nil
		}
	}()
	var why *C.char
	if C.pxv_init(&why) == 0 {
		msg := "unknown error"
		if why != nil {
			msg = C.GoString(why)
		}
		return v, fmt.Errorf("opening the window system: %s", msg)
	}
	v.glfwUp = true
	if err := glfw.Init(); err != nil { // already initialised: only sets up the binding's state
		return v, fmt.Errorf("opening the window system: %w", err)
	}
	if !glfw.VulkanSupported() {
		return v, errors.New("GLFW found no Vulkan loader (install libvulkan1 and a driver; mesa-vulkan-drivers has lavapipe)")
	}
	glfw.WindowHint(glfw.ClientAPI, glfw.NoAPI)
	glfw.WindowHint(glfw.Resizable, glfw.True)
	win, err := glfw.CreateWindow(o.width, o.height, "parallax-view", nil, nil)
	if err != nil {
		return v, fmt.Errorf("creating the window: %w", err)
	}
	v.win = win
	exts := win.GetRequiredInstanceExtensions()
	if len(exts) == 0 {
		return v, errors.New("the Vulkan loader offers no surface extensions for this window system")
	}
	if err := vulkan.RequestInstanceExtensions(exts...); err != nil {
		return v, err
	}
	idx, err := pickDevice(o.device)
	if err != nil {
		return v, err
	}
	if v.dev, err = vulkan.OpenPresenting(idx); err != nil {
		return v, err
	}
	inst, err := vulkan.Instance()
	if err != nil {
		return v, err
	}
	var surface C.uint64_t
	if res := C.pxv_create_surface(inst, win.Handle(), &surface); res != 0 {
		return v, fmt.Errorf("creating the window's Vulkan surface: VkResult %d", int32(res))
	}
	if v.pres, err = v.dev.NewPresenter(uint64(surface), o.offscreen); err != nil {
		return v, err
	}
	if err := v.loadModel(); err != nil {
		return v, err
	}
	win.SetTitle("parallax-view: " + v.name)
	win.SetKeyCallback(v.onKey)
	win.SetCharCallback(v.onChar)
	win.SetFramebufferSizeCallback(func(*glfw.Window, int, int) { v.pres.Resize(); v.redraw = true })
	win.SetRefreshCallback(func(*glfw.Window) { v.redraw = true })
	win.SetIconifyCallback(func(*glfw.Window, bool) { v.redraw = true })
	if err := v.restart(o.prompt); err != nil {
		return v, err
	}
	return v, nil
}

// pickDevice resolves --device: vulkan:N, or for auto the most capable
// usable Vulkan device (discrete, integrated, virtual GPU, then software).
func pickDevice(id string) (int, error) {
	if s, ok := strings.CutPrefix(id, "vulkan:"); ok {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("--device %q: want vulkan:N", id)
		}
		return n, nil
	}
	for _, b := range engine.List() {
		if b.Name != "vulkan" {
			continue
		}
		if b.Err != nil {
			return 0, b.Err
		}
		devs := slices.Clone(b.Devices)
		sort.SliceStable(devs, func(i, j int) bool { return devs[i].Kind < devs[j].Kind })
		for _, d := range devs {
			if _, bad := d.Features["unusable"]; !bad {
				return d.Index, nil
			}
		}
	}
	return 0, fmt.Errorf("no usable Vulkan device: %w", engine.ErrNoDevice)
}

// loadModel loads the checkpoint and tokenizer and allocates what frames
// read.
func (v *viewer) loadModel() error {
	dir := v.o.model
	if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
		dir = filepath.Dir(dir) // a file of the checkpoint, such as model.safetensors
	}
	v.name = filepath.Base(filepath.Clean(dir))
	m, err := model.Load(dir, v.dev, model.LoadOptions{})
	if err != nil {
		return err
	}
	v.m = m
	tokPath := v.o.tokenizer
	if tokPath == "" {
		tokPath = filepath.Join(dir, "tokenizer.json")
	}
	tok, err := tokenizer.LoadHF(tokPath)
	if err != nil {
		if v.o.tokenizer != "" {
			return fmt.Errorf("tokenizer: %w", err)
		}
		t2, err2 := tokenizer.LoadGPT2(filepath.Join(dir, "vocab.json"), filepath.Join(dir, "merges.txt"))
		if err2 != nil {
			return fmt.Errorf("no tokenizer in %s: %w", dir, err)
		}
		tok = t2
	}
	v.tok = tok
	c := m.Config
	if tok.VocabSize() > c.Vocab {
		return fmt.Errorf("the tokenizer has %d tokens but the model only %d: they do not belong together", tok.VocabSize(), c.Vocab)
	}
	if v.layer >= c.Layers || v.head >= c.Heads {
		return fmt.Errorf("--layer %d --head %d: the model has %d layers of %d heads", v.layer, v.head, c.Layers, c.Heads)
	}
	capacity := min(c.MaxSeq, maxContext)
	if v.kv, err = m.NewKVCache(1, capacity); err != nil {
		return err
	}
	if v.insp, err = m.NewInspector(v.kv); err != nil {
		return err
	}
	if v.maps, err = v.dev.Alloc(engine.F32, 2*capacity*capacity+capacity); err != nil {
		return fmt.Errorf("attention maps: %w", err)
	}
	if v.font, err = engine.FromInt32(v.dev, fontTable(), 128*glyphH); err != nil {
		return fmt.Errorf("font: %w", err)
	}
	v.stop = map[int]bool{}
	for _, t := range c.EOS {
		v.stop[t] = true
	}
	return nil
}

// restart prefills text as a new prompt and resumes generation.
func (v *viewer) restart(text string) error {
	ids := v.tok.EncodeWithSpecials(text)
	if len(ids) == 0 {
		v.note = "empty prompt"
		return nil
	}
	v.note = ""
	if room := v.kv.Cap - 1; len(ids) > room {
		ids = ids[len(ids)-room:]
		v.note = fmt.Sprintf("prompt cut to its last %d tokens", room)
	}
	s, err := model.NewSampler(model.SampleOptions{Temperature: v.o.temperature, TopK: v.o.topK, TopP: v.o.topP, Seed: v.o.seed})
	if err != nil {
		return err
	}
	v.sampler, v.promptText, v.out = s, text, nil
	v.done, v.why, v.paused = false, "", false
	v.kv.Reset()
	ids32 := make([]int32, len(ids))
	for i, t := range ids {
		ids32[i] = int32(t)
	}
	if v.logits, err = v.m.Step(v.kv, ids32, 1, len(ids32), true); err != nil {
		return fmt.Errorf("prompt: %w", err)
	}
	return v.afterStep()
}

// advance samples the next token and runs it through the model.
func (v *viewer) advance() error {
	if v.done || len(v.logits) == 0 {
		return nil
	}
	t := v.sampler.Sample(v.logits)
	if v.stop[t] {
		v.done, v.why = true, "end of text"
		return nil
	}
	v.out = append(v.out, t)
	if v.kv.Len < v.kv.Cap {
		var err error
		if v.logits, err = v.m.Step(v.kv, []int32{int32(t)}, 1, 1, true); err != nil {
			return fmt.Errorf("token %d: %w", len(v.out), err)
		}
	}
	switch {
	case len(v.out) >= v.o.maxTokens:
		v.done, v.why = true, fmt.Sprintf("%d tokens", len(v.out))
	case v.kv.Len >= v.kv.Cap:
		v.done, v.why = true, "context full"
	}
	return v.afterStep()
}

// afterStep reads the per-layer correction strength (a few floats per
// token, for the labels; the bars themselves read the device copy).
func (v *viewer) afterStep() error {
	v.mapsValid = false
	v.redraw = true
	if !v.m.Config.Parallax() {
		return nil
	}
	cor, err := engine.Float32s(v.insp.COR)
	if err != nil {
		return fmt.Errorf("correction strength: %w", err)
	}
	v.cor = cor
	return nil
}

// state is what the next frame shows.
func (v *viewer) state() viewState {
	c := v.m.Config
	gen, _ := v.tok.Decode(v.out)
	return viewState{
		model: v.name, layers: c.Layers, heads: c.Heads, layer: v.layer, head: v.head,
		length: v.kv.Len, cap: v.kv.Cap, status: statusText(v.paused, v.done, v.why),
		prompt: v.promptText, gen: gen, editing: v.editing, edit: string(v.edit),
		cor: v.cor, parallax: c.Parallax(), note: v.note,
	}
}

// frame draws one frame (reading it back when asked). It returns
// vulkan.ErrMinimized while the window has no area.
func (v *viewer) frame(readback bool) (*image.RGBA, frameLayout, error) {
	w, h := v.win.GetFramebufferSize()
	st := v.state()
	lay := layout(w, h, &st)
	if w <= 0 || h <= 0 {
		return nil, lay, vulkan.ErrMinimized
	}
	if !v.mapsValid {
		var r *engine.Tensor
		if v.insp.R != nil {
			r = v.insp.R[v.layer]
		}
		if err := v.dev.ViewAttention(v.maps, v.insp.Q[v.layer], r, v.kv.K[v.layer], v.head, v.kv.Len, 0); err != nil {
			return nil, lay, err
		}
		v.mapsValid = true
	}
	if err := v.uploadText(lay.cells); err != nil {
		return nil, lay, err
	}
	img, err := v.pres.Draw(lay.params, vulkan.FrameInputs{Maps: v.maps, Bars: v.insp.COR, Text: v.text, Font: v.font}, w, h, readback)
	return img, lay, err
}

// uploadText writes the text grid when it changed.
func (v *viewer) uploadText(cells []int32) error {
	if v.text != nil && slices.Equal(cells, v.textCells) {
		return nil
	}
	if v.text == nil || v.text.Shape().Numel() < len(cells) {
		if v.text != nil {
			v.dev.Free(v.text)
			v.text = nil
		}
		t, err := v.dev.Alloc(engine.I32, max(len(cells), 4096))
		if err != nil {
			return fmt.Errorf("text: %w", err)
		}
		v.text = t
	}
	buf := make([]byte, 4*v.text.Shape().Numel())
	for i, c := range cells {
		binary.LittleEndian.PutUint32(buf[4*i:], uint32(c))
	}
	if err := v.dev.Write(v.text, buf); err != nil {
		return fmt.Errorf("text: %w", err)
	}
	v.textCells = slices.Clone(cells)
	return nil
}

// loop runs the window. With frames > 0 and a screenshot wanted it stops
// after that many frames (one token each while generating) and returns the
// last one, read back from the swapchain image.
func (v *viewer) loop(frames int) (*image.RGBA, frameLayout, error) {
	shots := v.o.screenshot != ""
	n := 0
	for !v.win.ShouldClose() {
		if shots || (!v.paused && !v.done) || v.stepOnce || v.redraw {
			glfw.PollEvents()
		} else {
			glfw.WaitEventsTimeout(0.5)
		}
		if v.failed != nil {
			return nil, frameLayout{}, v.failed
		}
		if n > 0 || !shots { // a screenshot's first frame shows the prompt
			if err := v.update(); err != nil {
				return nil, frameLayout{}, err
			}
		}
		if !v.redraw && !shots {
			continue
		}
		if v.win.GetAttrib(glfw.Iconified) == glfw.True {
			// Minimised: drawing could block in the presentation engine
			// (FIFO) or be wasted; wait for the window to come back.
			glfw.WaitEvents()
			continue
		}
		last := shots && n == frames-1
		img, lay, err := v.frame(last)
		if errors.Is(err, vulkan.ErrMinimized) {
			glfw.WaitEvents() // nothing to draw into until the window is restored
			continue
		}
		if err != nil {
			return nil, lay, err
		}
		v.redraw = !v.paused && !v.done
		n++
		if last {
			return img, lay, nil
		}
	}
	return nil, frameLayout{}, nil
}

// update generates the next token unless paused (or one token when a step
// was asked for).
func (v *viewer) update() error {
	if (v.paused && !v.stepOnce) || v.done {
		return nil
	}
	v.stepOnce = false
	return v.advance()
}

// onKey handles the non-character keys.
func (v *viewer) onKey(_ *glfw.Window, key glfw.Key, _ int, action glfw.Action, _ glfw.ModifierKey) {
	if action != glfw.Press && action != glfw.Repeat {
		return
	}
	c := v.m.Config
	v.redraw = true
	switch key {
	case glfw.KeyEscape:
		if v.editing {
			v.editing, v.edit = false, nil
		} else {
			v.win.SetShouldClose(true)
		}
	case glfw.KeyLeft:
		v.head = (v.head + c.Heads - 1) % c.Heads
		v.mapsValid = false
	case glfw.KeyRight:
		v.head = (v.head + 1) % c.Heads
		v.mapsValid = false
	case glfw.KeyUp:
		v.layer = (v.layer + c.Layers - 1) % c.Layers
		v.mapsValid = false
	case glfw.KeyDown:
		v.layer = (v.layer + 1) % c.Layers
		v.mapsValid = false
	case glfw.KeyBackspace:
		if v.editing && len(v.edit) > 0 {
			v.edit = v.edit[:len(v.edit)-1]
		}
	case glfw.KeyEnter, glfw.KeyKPEnter:
		text := v.promptText
		if v.editing {
			text = trimPrompt(string(v.edit))
			v.editing, v.edit = false, nil
		}
		if text == "" {
			v.note = "empty prompt"
			return
		}
		if err := v.restart(text); err != nil {
			v.failed = err
		}
	}
}

// onChar handles typed characters: commands, or the prompt being edited.
func (v *viewer) onChar(_ *glfw.Window, r rune) {
	v.redraw = true
	if v.editing {
		if len(v.edit) < 2000 {
			v.edit = append(v.edit, r)
		}
		return
	}
	switch r {
	case ' ':
		v.paused = !v.paused
	case 'n', '.':
		v.paused, v.stepOnce = true, true
	case 'q':
		v.win.SetShouldClose(true)
	default:
		if v.paused && r >= 32 {
			v.editing, v.edit = true, []rune{r}
		}
	}
}

// close releases everything in reverse order of creation.
func (v *viewer) close() {
	if v.pres != nil {
		v.pres.Close()
		v.pres = nil
	}
	if v.dev != nil {
		for _, t := range []*engine.Tensor{v.maps, v.font, v.text} {
			if t != nil {
				v.dev.Free(t)
			}
		}
		if v.insp != nil {
			v.insp.Free()
		}
		if v.kv != nil {
			v.kv.Free()
		}
		if v.m != nil {
			v.m.Free()
		}
		v.dev.Close()
		v.dev = nil
	}
	if v.win != nil {
		v.win.Destroy()
		v.win = nil
	}
	if v.glfwUp {
		glfw.Terminate()
		v.glfwUp = false
	}
}

// writePNG saves img to path atomically, as every other output is written
// (through a symbolic link; a directory, pipe or device is refused).
func writePNG(path string, img image.Image) error {
	if img == nil {
		return errors.New("no frame was read back")
	}
	if err := atomicfile.Write(path, func(w io.Writer) error { return png.Encode(w, img) }); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
