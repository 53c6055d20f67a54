//go:build cgo

package cuda

// #cgo LDFLAGS: -ldl
// #include <stdlib.h>
// #include "shim.h"
import "C"

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unsafe"
)

// The three libraries the backend needs, found once per process. libcuda
// comes with the driver; NVRTC and cuBLASLt come with the CUDA toolkit or
// with NVIDIA's Python wheels (nvidia/*/lib under a site-packages folder).
var (
	loadOnce sync.Once
	loadErr  error
	libs     struct{ cuda, nvrtc, lt string } // the paths (or sonames) loaded
)

// load opens and binds every library, or reports which one is missing and
// where it was looked for.
func load() error {
	loadOnce.Do(func() { loadErr = loadLibs() })
	return loadErr
}

func loadLibs() error {
	dirs := libDirs()
	h, path, err := openLib("libcuda.so", []string{"1"}, nil, false)
	if err != nil {
		return fmt.Errorf("CUDA driver library libcuda.so.1 not found (is the NVIDIA driver installed?): %v", err)
	}
	if name := C.pxcu_bind_cuda(h); name != nil {
		return fmt.Errorf("CUDA driver library %s lacks %s (driver too old)", path, C.GoString(name))
	}
	libs.cuda = path
	if err := loadNVRTC(dirs); err != nil {
		return err
	}
	h, path, err = openLib("libcublasLt.so", []string{"13", "12", "11"}, dirs, true)
	if err != nil {
		return fmt.Errorf("cuBLASLt (libcublasLt.so.*) not found in the default library path, LD_LIBRARY_PATH, "+
			"/usr/local/cuda/lib64 or Python nvidia/*/lib folders (%s): install the CUDA toolkit or "+
			"`pip install nvidia-cublas`, or set PARALLAX_CUDA_LIB_DIRS: %v", summarize(dirs), err)
	}
	if name := C.pxcu_bind_lt(h); name != nil {
		return fmt.Errorf("cuBLASLt library %s lacks %s", path, C.GoString(name))
	}
	libs.lt = path
	if r := C.pxcu_init(); r != 0 {
		return fmt.Errorf("cuInit: %s (code %d)", C.GoString(C.pxcu_error_string(r)), int(r))
	}
	return nil
}

func summarize(dirs []string) string {
	if len(dirs) == 0 {
		return "no extra folders exist"
	}
	if len(dirs) > 6 {
		return strings.Join(dirs[:6], ", ") + fmt.Sprintf(" and %d more", len(dirs)-6)
	}
	return strings.Join(dirs, ", ")
}

func dlopen(path string, global bool) (unsafe.Pointer, error) {
	cs := C.CString(path)
	defer C.free(unsafe.Pointer(cs))
	var msg *C.char
	g := C.int(0)
	if global {
		g = 1
	}
	h := C.pxcu_dlopen(cs, g, &msg)
	if h == nil {
		if msg != nil {
			return nil, fmt.Errorf("%s", C.GoString(msg))
		}
		return nil, fmt.Errorf("dlopen %s failed", path)
	}
	return h, nil
}

// openLib tries PARALLAX_CUDA_LIB_DIRS first, then the sonames base.major
// through the dynamic loader's own search (LD_LIBRARY_PATH, ldconfig), then
// the highest versioned base.* in each of dirs. Libraries loaded from a
// folder get that folder's companions preloaded (NVRTC dlopens its builtins
// library by soname).
func openLib(base string, majors []string, dirs []string, global bool) (unsafe.Pointer, string, error) {
	var errs []string
	try := func(path string) unsafe.Pointer {
		if strings.Contains(path, "/") {
			dir := filepath.Dir(path)
			if strings.HasPrefix(base, "libnvrtc") {
				for _, b := range globVersions(dir, "libnvrtc-builtins.so") {
					_, _ = dlopen(b, true)
				}
			}
		}
		h, err := dlopen(path, global || strings.Contains(path, "/"))
		if err != nil {
			errs = append(errs, err.Error())
			return nil
		}
		return h
	}
	var order []string
	if env := os.Getenv("PARALLAX_CUDA_LIB_DIRS"); env != "" {
		for _, d := range filepath.SplitList(env) {
			order = append(order, globVersions(d, base)...)
		}
	}
	for _, m := range majors {
		order = append(order, base+"."+m)
	}
	if dirs != nil {
		for _, d := range dirs {
			order = append(order, globVersions(d, base)...)
		}
	} else {
		order = append(order, base)
	}
	for _, p := range order {
		if h := try(p); h != nil {
			return h, p, nil
		}
	}
	if len(errs) > 3 {
		errs = errs[:3]
	}
	return nil, "", fmt.Errorf("%s", strings.Join(errs, "; "))
}

// globVersions lists dir/base* (base.13, base.12.8.93, ...) newest first.
func globVersions(dir, base string) []string {
	m, _ := filepath.Glob(filepath.Join(dir, base+"*"))
	var out []string
	for _, p := range m {
		rest := strings.TrimPrefix(filepath.Base(p), base)
		if rest == "" || rest[0] == '.' {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return versionLess(out[j], out[i]) })
	return out
}

// versionLess compares the numeric suffixes of two library paths.
func versionLess(a, b string) bool {
	va, vb := versionOf(a), versionOf(b)
	for i := 0; i < len(va) && i < len(vb); i++ {
		if va[i] != vb[i] {
			return va[i] < vb[i]
		}
	}
	return len(va) < len(vb)
}

func versionOf(p string) []int {
	_, rest, _ := strings.Cut(filepath.Base(p), ".so")
	var v []int
	for _, f := range strings.Split(strings.TrimPrefix(rest, "."), ".") {
		if n, err := strconv.Atoi(f); err == nil {
			v = append(v, n)
		}
	}
	return v
}

// libDirs lists the existing folders searched for NVRTC and cuBLASLt beyond
// the dynamic loader's own path.
func libDirs() []string {
	var cands []string
	for _, d := range filepath.SplitList(os.Getenv("LD_LIBRARY_PATH")) {
		if d != "" {
			cands = append(cands, d)
		}
	}
	for _, env := range []string{"CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"} {
		if v := os.Getenv(env); v != "" {
			cands = append(cands, filepath.Join(v, "lib64"), filepath.Join(v, "lib"))
		}
	}
	cands = append(cands, "/usr/local/cuda/lib64", "/usr/local/cuda/lib")
	more, _ := filepath.Glob("/usr/local/cuda-*/lib64")
	sort.Sort(sort.Reverse(sort.StringSlice(more)))
	cands = append(cands, more...)
	// Python site-packages: NVIDIA's wheels put libraries in nvidia/*/lib
	// (nvidia/cu13/lib, nvidia/cuda_nvrtc/lib, nvidia/cublas/lib, ...).
	var sites []string
	patterns := []string{
		"/usr/lib/python3*/site-packages", "/usr/lib/python3*/dist-packages",
		"/usr/local/lib/python3*/site-packages", "/usr/local/lib/python3*/dist-packages",
		"/opt/*/lib/python3*/site-packages", "/opt/*/.venv/lib/python3*/site-packages",
		"/opt/*/*/lib/python3*/site-packages", "/opt/conda/lib/python3*/site-packages",
	}
	if home, err := os.UserHomeDir(); err == nil {
		patterns = append(patterns, filepath.Join(home, ".local/lib/python3*/site-packages"),
			filepath.Join(home, ".venv/lib/python3*/site-packages"))
	}
	for _, env := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if v := os.Getenv(env); v != "" {
			patterns = append(patterns, filepath.Join(v, "lib/python3*/site-packages"))
			cands = append(cands, filepath.Join(v, "lib"))
		}
	}
	for _, p := range patterns {
		m, _ := filepath.Glob(p)
		sites = append(sites, m...)
	}
	for _, s := range sites {
		m, _ := filepath.Glob(filepath.Join(s, "nvidia/*/lib"))
		cands = append(cands, m...)
	}
	var out []string
	seen := map[string]bool{}
	for _, d := range cands {
		if seen[d] {
			continue
		}
		seen[d] = true
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			out = append(out, d)
		}
	}
	return out
}

var (
	nvrtcOnce sync.Once
	nvrtcErr  error
)

// loadNVRTC opens and binds NVRTC alone (it needs no GPU).
func loadNVRTC(dirs []string) error {
	nvrtcOnce.Do(func() {
		h, path, err := openLib("libnvrtc.so", []string{"13", "12", "11.2"}, dirs, false)
		if err != nil {
			nvrtcErr = fmt.Errorf("NVRTC (libnvrtc.so.*) not found in the default library path, LD_LIBRARY_PATH, "+
				"/usr/local/cuda/lib64 or Python nvidia/*/lib folders (%s): install the CUDA toolkit or "+
				"`pip install nvidia-cuda-nvrtc`, or set PARALLAX_CUDA_LIB_DIRS: %v", summarize(dirs), err)
			return
		}
		if name := C.pxcu_bind_nvrtc(h); name != nil {
			nvrtcErr = fmt.Errorf("NVRTC library %s lacks %s (NVRTC 11.2 or newer is needed)", path, C.GoString(name))
			return
		}
		libs.nvrtc = path
	})
	return nvrtcErr
}

// cuErr turns a driver result into an error naming the call.
func cuErr(what string, r C.CUresult) error {
	if r == 0 {
		return nil
	}
	return fmt.Errorf("cuda %s: %s (code %d)", what, C.GoString(C.pxcu_error_string(r)), int(r))
}
