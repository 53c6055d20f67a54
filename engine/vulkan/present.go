package vulkan

/*
#include <stdlib.h>
#include "pxvk.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"image"
	"math"
	"slices"
	"unsafe"

	vk "github.com/vulkan-go/vulkan"

	"github.com/parallax-engine/parallax/engine"
)

// Presenting: a window's swapchain on the device that runs the model, so a
// program (cmd/parallax-view) can draw device tensors into a window with a
// compute kernel and no copy through the host. The window system is the
// caller's (GLFW there): it names the instance extensions its surfaces need
// (RequestInstanceExtensions, before anything else uses the backend),
// creates the surface from Instance, and hands it to NewPresenter on a
// device opened with OpenPresenting.

// instanceExtsRequested are the extra instance extensions newRuntime
// enables (set by RequestInstanceExtensions before the runtime exists).
var instanceExtsRequested []string

// RequestInstanceExtensions creates the process-wide Vulkan instance with
// the given extra instance extensions enabled (for a window system:
// VK_KHR_surface and its platform's surface extension). It must come
// before any other use of the backend: once the instance exists it cannot
// gain extensions, so a later call succeeds only if the first one asked for
// them all.
func RequestInstanceExtensions(names ...string) error {
	created := true
	rtOnce.Do(func() {
		created = false
		instanceExtsRequested = append([]string(nil), names...)
		rtVal, rtErr = newRuntime()
	})
	if rtErr != nil {
		return rtErr
	}
	if created {
		for _, n := range names {
			if !slices.Contains(instanceExtsRequested, n) {
				return fmt.Errorf("vulkan: the instance was created without %s (call RequestInstanceExtensions before anything else uses the backend)", n)
			}
		}
	}
	return nil
}

// Instance returns the process-wide VkInstance (a dispatchable handle),
// for creating window surfaces.
func Instance() (unsafe.Pointer, error) {
	rt, err := loadRuntime()
	if err != nil {
		return nil, err
	}
	return unsafe.Pointer(rt.instance), nil
}

// OpenPresenting opens Vulkan device index like Open, with VK_KHR_swapchain
// (and, where the device has it, shaderStorageImageWriteWithoutFormat, so
// kernels can write swapchain images directly) enabled.
func OpenPresenting(index int) (*Device, error) {
	rt, p, err := usablePhys(index)
	if err != nil {
		return nil, err
	}
	if !hasString(p.exts, "VK_KHR_swapchain") {
		return nil, fmt.Errorf("vulkan:%d (%s) cannot present to windows (no VK_KHR_swapchain)", index, p.name)
	}
	return newDeviceFor(rt, p, true)
}

func b2u(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// ErrMinimized is returned by Presenter.Draw while the window has no area
// (minimised): nothing was drawn; wait for window events and draw again.
var ErrMinimized = errors.New("vulkan: the window is minimised")

// FrameParams are the view_draw kernel's parameters (shaders/view_draw.comp,
// whose push-constant block they mirror): where the panels and the text
// grid go in a frame of Width x Height pixels.
type FrameParams struct {
	Width, Height uint32 // set by Draw from the swapchain's extent
	// The softmax-weights panel: origin (AX, AY) and side Size; the
	// effective-weights panel has the same size at (BX, BY). Size 0 hides
	// both.
	AX, AY, Size int32
	BX, BY       int32
	// The correction-strength bars: one horizontal bar per layer.
	CX, CY, CW, CH int32
	L, Cap         uint32 // sequence length shown; the maps' row stride
	Layers, Layer  uint32 // number of layers; the selected one
	// The text grid: cells of CellW x CellH pixels (glyphs of 8x16 font
	// pixels, each Scale x Scale), Cols x Rows of them.
	CellW, CellH, Scale, Cols, Rows uint32
	CursorRow                       uint32 // the query row to highlight (the newest token)
}

func (f FrameParams) push() []uint32 {
	return push(f.Width, f.Height, int(f.AX), int(f.AY), int(f.Size), int(f.BX), int(f.BY),
		int(f.CX), int(f.CY), int(f.CW), int(f.CH), f.L, f.Cap, f.Layers, f.Layer,
		f.CellW, f.CellH, f.Scale, f.Cols, f.Rows, f.CursorRow)
}

// FrameInputs are the device tensors a frame reads; the kernel reads raw
// 32-bit words, so Maps and Bars must be F32 and Text and Font I32.
type FrameInputs struct {
	Maps *engine.Tensor // F32 [2*Cap*Cap + Cap]: ViewAttention's output
	Bars *engine.Tensor // F32 [Layers]: the correction strength per layer
	Text *engine.Tensor // I32 [Rows*Cols]: character | colour<<8 per cell
	Font *engine.Tensor // I32 [128*16]: 16 rows of 8 bits per character
}

// Presenter draws frames into a window's swapchain on a Device opened with
// OpenPresenting. Frames are synchronous: Draw returns after the frame has
// completed on the device. Methods must be called from the goroutine that
// uses the device.
type Presenter struct {
	d        *Device
	px       *C.pxPresent
	info     C.pxSwapInfo
	made     bool // a swapchain exists
	dirty    bool // recreate before the next frame
	w, h     int  // the framebuffer size it was made for
	offscr   bool // force the offscreen path
	pipes    map[string]handle
	readback *region
	host     *allocator
}

// NewPresenter takes ownership of surface (a VkSurfaceKHR of the process's
// instance, destroyed by Close, or at once when NewPresenter fails) and
// prepares presenting to it from the
// device's queue. forceOffscreen draws into an image of our own that is
// blitted into the swapchain even where the swapchain image itself could
// be written (to exercise that path).
func (d *Device) NewPresenter(surface uint64, forceOffscreen bool) (*Presenter, error) {
	if d.closed || !d.present {
		C.px_destroy_surface((C.pxGetInstanceProcAddr)(d.rt.gipa), unsafe.Pointer(d.rt.instance), C.pxHandle(surface))
		if d.closed {
			return nil, errClosed
		}
		return nil, errors.New("vulkan: NewPresenter needs a device opened with OpenPresenting")
	}
	var cerr [512]C.char
	px := C.px_present_new((C.pxGetInstanceProcAddr)(d.rt.gipa), unsafe.Pointer(d.rt.instance), unsafe.Pointer(d.pd.handle),
		unsafe.Pointer(d.dev), unsafe.Pointer(d.queue), C.uint32_t(d.pd.queueFamily), C.pxHandle(surface),
		C.pxBool32(b2u(d.wwf)), &cerr[0], C.int(len(cerr)))
	if px == nil {
		return nil, fmt.Errorf("vulkan %s: presenting: %s", d.info.ID(), C.GoString(&cerr[0]))
	}
	host := d.mem
	if d.stage != nil {
		host = d.stage
	}
	return &Presenter{d: d, px: px, pipes: map[string]handle{}, offscr: forceOffscreen, host: host}, nil
}

// Resize asks for the swapchain to be recreated before the next frame (the
// window's framebuffer changed size).
func (p *Presenter) Resize() { p.dirty = true }

// Direct reports whether frames are drawn straight into the swapchain
// images (false: into an image of our own, then blitted). Valid after the
// first Draw.
func (p *Presenter) Direct() bool { return p.info.direct != 0 }

// Size is the swapchain's extent (after the first Draw).
func (p *Presenter) Size() (w, h int) { return int(p.info.width), int(p.info.height) }

// recreate makes the swapchain for a w x h framebuffer.
func (p *Presenter) recreate(w, h int) error {
	var cerr [512]C.char
	res := C.px_present_swapchain(p.px, C.uint32_t(w), C.uint32_t(h), C.int(b2u(p.offscr)), &p.info, &cerr[0], C.int(len(cerr)))
	p.made = false
	if res == 1 {
		return ErrMinimized
	}
	if res != 0 {
		return fmt.Errorf("vulkan %s: swapchain: %s", p.d.info.ID(), C.GoString(&cerr[0]))
	}
	p.made, p.dirty, p.w, p.h = true, false, w, h
	return nil
}

// pipeline returns the draw kernel for the current path.
func (p *Presenter) pipeline() (handle, error) {
	name := "view_draw"
	if p.info.direct == 0 || !p.d.wwf {
		name = "view_draw.rgba8" // an RGBA8 image, or no unformatted writes
	}
	if h, ok := p.pipes[name]; ok {
		return h, nil
	}
	mod, err := p.d.pipes.module(name)
	if err != nil {
		return 0, err
	}
	var ph C.pxHandle
	if res := C.px_compute_pipeline(p.d.px, C.pxHandle(p.d.pipes.cache), C.px_present_layout(p.px), C.pxHandle(mod), 0, nil, nil, &ph); res != 0 {
		return 0, vkErr("vkCreateComputePipelines "+name, vk.Result(res))
	}
	h := handle(ph)
	if err := checkHandle("VkPipeline", h); err != nil {
		return 0, err
	}
	p.pipes[name] = h
	return h, nil
}

// Draw renders one frame for a framebuffer of width x height pixels (the
// window's current size; the swapchain follows it) and presents it. With
// readback it also returns the frame as the window shows it. It returns
// ErrMinimized, drawing nothing, while the window has no area. A swapchain
// that went out of date (a resize) is recreated and the frame drawn again.
func (p *Presenter) Draw(fp FrameParams, in FrameInputs, width, height int, readback bool) (*image.RGBA, error) {
	d := p.d
	if d.closed {
		return nil, errClosed
	}
	if width <= 0 || height <= 0 {
		return nil, ErrMinimized
	}
	if err := checkFrame(d, fp, in); err != nil {
		return nil, err
	}
	// Everything recorded so far (the maps, bars and text the frame reads)
	// goes to the queue first; the frame's first barrier orders after it.
	if err := d.b.submit(); err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		if !p.made || p.dirty || width != p.w || height != p.h {
			if err := p.recreate(width, height); err != nil {
				return nil, err
			}
		}
		pl, err := p.pipeline()
		if err != nil {
			return nil, err
		}
		fp.Width, fp.Height = uint32(p.info.width), uint32(p.info.height)
		var rb handle
		var rbOff uint64
		need := uint64(p.info.width) * uint64(p.info.height) * 4
		if readback {
			if p.info.readable == 0 {
				return nil, errors.New("vulkan: draw: this swapchain's images cannot be read back")
			}
			if p.readback == nil || p.readback.size < need {
				p.host.release(p.readback)
				p.readback = nil
				r, err := p.host.alloc(need)
				if err != nil {
					return nil, fmt.Errorf("vulkan: draw: readback buffer: %w", err)
				}
				p.readback = r
			}
			if err := d.b.waitFor(p.readback.lastUse); err != nil {
				return nil, err
			}
			rb, rbOff = p.readback.buffer(), p.readback.off
		}
		var bufs, offs, sizes [4]uint64
		for i, t := range []*engine.Tensor{in.Maps, in.Bars, in.Text, in.Font} {
			r := regionOf(t)
			bufs[i], offs[i], sizes[i] = uint64(r.buffer()), r.off, roundUp(uint64(t.Bytes()), 4)
		}
		pc := fp.push()
		full := make([]uint32, pushBytes/4)
		copy(full, pc)
		gx, gy := (p.info.width+15)/16, (p.info.height+15)/16
		res := C.px_present_frame(p.px, C.pxHandle(pl), 4, (*C.uint64_t)(&bufs[0]), (*C.uint64_t)(&offs[0]), (*C.uint64_t)(&sizes[0]),
			unsafe.Pointer(&full[0]), C.uint32_t(pushBytes), C.uint32_t(gx), C.uint32_t(gy), C.pxHandle(rb), C.uint64_t(rbOff))
		switch {
		case res == 0:
		case res == C.int32_t(vk.Suboptimal):
			p.dirty = true // shown, but recreate for the next frame
		case res == C.int32_t(vk.ErrorOutOfDate) && attempt == 0:
			p.dirty = true
			continue
		case res == C.int32_t(vk.ErrorOutOfDate):
			p.dirty = true
			return nil, nil // the window keeps changing; the next frame catches up
		default:
			return nil, d.b.setErr(vkErr("presenting a frame", vk.Result(res)))
		}
		if !readback {
			return nil, nil
		}
		return p.pixels(), nil
	}
}

// checkFrame makes sure the kernel reads only inside its inputs: the maps
// for Cap positions, a bar per layer, the text grid and the font.
func checkFrame(d *Device, fp FrameParams, in FrameInputs) error {
	c := uint64(fp.Cap)
	for _, x := range []struct {
		name string
		t    *engine.Tensor
		dt   engine.DType
		n    uint64
	}{
		{"maps", in.Maps, engine.F32, 2*c*c + c},
		{"bars", in.Bars, engine.F32, uint64(fp.Layers)},
		{"text", in.Text, engine.I32, uint64(fp.Cols) * uint64(fp.Rows)},
		{"font", in.Font, engine.I32, 128 * 16},
	} {
		if x.t == nil {
			return fmt.Errorf("vulkan: draw: no %s tensor", x.name)
		}
		if err := d.own("draw", x.t); err != nil {
			return err
		}
		if x.t.DType() != x.dt || uint64(x.t.Shape().Numel()) < x.n {
			return fmt.Errorf("vulkan: draw: %s must be %v with at least %d elements, got %v %v", x.name, x.dt, x.n, x.t.DType(), x.t.Shape())
		}
	}
	if fp.L > fp.Cap || (fp.Layers > 0 && fp.Layer >= fp.Layers) || fp.CellW == 0 || fp.CellH == 0 || fp.Scale == 0 {
		return fmt.Errorf("vulkan: draw: inconsistent frame parameters (L %d, Cap %d, layer %d of %d, cell %dx%d, scale %d)",
			fp.L, fp.Cap, fp.Layer, fp.Layers, fp.CellW, fp.CellH, fp.Scale)
	}
	return nil
}

// pixels converts the read-back frame to RGBA.
func (p *Presenter) pixels() *image.RGBA {
	w, h := int(p.info.width), int(p.info.height)
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	src := p.readback.bytes()[:w*h*4]
	copy(img.Pix, src)
	if C.px_present_readback_format(p.px) == C.int32_t(vk.FormatB8g8r8a8Unorm) {
		for i := 0; i < len(img.Pix); i += 4 {
			img.Pix[i], img.Pix[i+2] = img.Pix[i+2], img.Pix[i]
		}
	}
	return img
}

// Close waits for the device, then destroys the swapchain, the surface and
// the presenter's objects. The device stays open.
func (p *Presenter) Close() {
	if p.px == nil {
		return
	}
	if !p.d.closed {
		_ = p.d.b.waitAll() // a failure is the device's, reported by its own calls
	}
	C.px_present_free(p.px) // waits for the device to be idle first
	p.px = nil
	for _, h := range p.pipes {
		vk.DestroyPipeline(p.d.dev, vkOf[vk.Pipeline](h), nil)
	}
	p.pipes = nil
	p.host.release(p.readback)
	p.readback = nil
}

// ViewAttention writes the attention maps of one query head for the
// viewer (shaders/view_attn.comp) into maps (F32 [2*cap*cap + cap]): for
// query rows i < length and keys j <= i, the softmax weights p at
// [i*cap + j], the Parallax effective weights p(1 + tbar - t) at
// [cap*cap + i*cap + j] and each row's largest p at [2*cap*cap + i]. q and
// r are [1, Hq, cap, D] and k is [1, Hkv, cap, D] (positions 0..length-1
// filled); r nil means softmax attention (effective weights = p). scale 0
// means 1/sqrt(D).
func (d *Device) ViewAttention(maps, q, r, k *engine.Tensor, head, length int, scale float32) error {
	const op = "view attention"
	if err := d.own(op, maps, q, k); err != nil {
		return err
	}
	if r != nil {
		if err := d.own(op, r); err != nil {
			return err
		}
	}
	qs, ks := q.Shape(), k.Shape()
	if len(qs) != 4 || len(ks) != 4 || qs[0] != 1 || ks[0] != 1 || qs[2] != ks[2] || qs[3] != ks[3] || ks[1] == 0 || qs[1]%ks[1] != 0 {
		return fmt.Errorf("%s: q %v and k %v must be [1, Hq, cap, D] and [1, Hkv, cap, D] with Hkv dividing Hq", op, qs, ks)
	}
	if r != nil && !r.Shape().Equal(qs) {
		return fmt.Errorf("%s: r %v must have q's shape %v", op, r.Shape(), qs)
	}
	hq, capacity, dim := qs[1], qs[2], qs[3]
	if head < 0 || head >= hq {
		return fmt.Errorf("%s: head %d outside [0, %d)", op, head, hq)
	}
	if length < 0 || length > capacity {
		return fmt.Errorf("%s: length %d outside [0, %d]", op, length, capacity)
	}
	if maps.DType() != engine.F32 || maps.Shape().Numel() < 2*capacity*capacity+capacity {
		return fmt.Errorf("%s: maps must be F32 with at least %d elements, got %v %v", op, 2*capacity*capacity+capacity, maps.DType(), maps.Shape())
	}
	if length == 0 {
		return nil
	}
	if scale == 0 {
		scale = float32(1 / math.Sqrt(float64(dim)))
	}
	kvhead := head / (hq / ks[1])
	wg := min(64, d.flexWG())
	return d.launch("view_attn", wg, nil,
		push(uint32(length), uint32(head), uint32(kvhead), uint32(dim), uint32(capacity), r != nil, scale),
		d.groups1(length), in(q), d.opt(r, false), in(k), out(maps))
}
