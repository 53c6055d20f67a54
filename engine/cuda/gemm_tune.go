//go:build cgo

package cuda

// #include "shim.h"
import "C"

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"time"
	"unsafe"

	"github.com/parallax-engine/parallax/internal/atomicfile"
)

// GEMM algorithm tuning. cuBLASLt's first heuristic is a guess from the
// shape alone, and for the products of a small model's training step it
// guesses badly: the weight gradient of a 768 x 768 projection over 8192
// tokens has 36 output tiles of 128 x 128 for 132 multiprocessors and ran
// at 395 TFLOP/s where products of the same step reach 860. So the first
// time a shape is met outside a graph recording, the heuristic's best
// gemmTuneCandidates algorithms are each timed on the real operands (into
// a scratch output, so an accumulating product is not disturbed) and the
// fastest kept: the first heuristic's unless another is faster by more
// than gemmTuneMargin.
//
// The choice is written to a file in the module cache folder, keyed by the
// GPU, its driver and the cuBLASLt version, and read back by later runs: a
// given shape then always takes the same algorithm on the same machine, so
// two runs (a resumed training run and the run it resumes) compute the
// same bits. PARALLAX_CUDA_GEMM_TUNE=0 turns tuning off (the first
// heuristic, as before).

const (
	gemmTuneCandidates = C.PXCU_LT_MAX_ALGOS
	gemmTuneMargin     = 0.03
	gemmTuneReps       = 4 // launches per timing
)

var gemmTuneOff = os.Getenv("PARALLAX_CUDA_GEMM_TUNE") == "0"

// tuneFile holds the persisted choices of one GPU, driver and cuBLASLt.
type tuneFile struct {
	path string
	mu   sync.Mutex // the file is shared by the devices of a process
	algo map[string]string
}

var tuneFiles sync.Map // path -> *tuneFile

// gemmKey is the text key of a product's shape in the tuning file.
func gemmKey(g *C.pxcu_gemm) string {
	return fmt.Sprintf("m%d n%d k%d t%d%d ty%d.%d.%d.%d ld%d.%d.%d s%d.%d.%d b%d beta%g al%d.%d.%d",
		g.m, g.n, g.k, g.transa, g.transb, g.atype, g.btype, g.ctype, g.compute, g.lda, g.ldb, g.ldc,
		g.stridea, g.strideb, g.stridec, g.batch, float32(g.beta), g.align_a, g.align_b, g.align_c)
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// tuning returns the device's tuning file, loaded on first use (a missing
// or unreadable file is an empty one: it only caches measurements).
func (d *Device) tuning() *tuneFile {
	name := fmt.Sprintf("gemm-%s-sm%d%d-drv%d-lt%d.json", unsafeName.ReplaceAllString(d.g.name, "_"),
		d.g.ccMajor, d.g.ccMinor, d.g.driver, int(C.pxcu_lt_version()))
	path := filepath.Join(cacheDir(), name)
	if f, ok := tuneFiles.Load(path); ok {
		return f.(*tuneFile)
	}
	f := &tuneFile{path: path, algo: map[string]string{}}
	if b, err := os.ReadFile(path); err == nil {
		var m map[string]string
		if json.Unmarshal(b, &m) == nil {
			f.algo = m
		}
	}
	got, _ := tuneFiles.LoadOrStore(path, f)
	return got.(*tuneFile)
}

func (f *tuneFile) get(key string) (ltAlgo, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var a ltAlgo
	s, ok := f.algo[key]
	if !ok {
		return a, false
	}
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(a) {
		return a, false
	}
	copy(a[:], b)
	return a, true
}

// put records a choice and rewrites the file; a failed write only loses
// the cache.
func (f *tuneFile) put(key string, a ltAlgo) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.algo[key] = hex.EncodeToString(a[:])
	b, err := json.MarshalIndent(f.algo, "", "\t")
	if err != nil {
		return
	}
	if os.MkdirAll(filepath.Dir(f.path), 0o755) == nil {
		_ = atomicfile.WriteFile(f.path, append(b, '\n'))
	}
}

// pickAlgo returns the algorithm for g on operands A = pa, B = pb: the
// persisted choice, else (when the device may time now) the fastest
// candidate, else cuBLASLt's first heuristic. cache says whether the
// answer may be kept for the shape (not while recording a graph, where
// nothing can be timed and a later eager call should still tune).
func (d *Device) pickAlgo(g *C.pxcu_gemm, pa, pb uint64) (algo ltAlgo, cache bool, err error) {
	canTune := !gemmTuneOff && d.rec == nil && !d.prof.on
	var tf *tuneFile
	key := gemmKey(g)
	if !gemmTuneOff {
		tf = d.tuning()
		if a, ok := tf.get(key); ok {
			return a, true, nil
		}
	}
	var algos [gemmTuneCandidates]ltAlgo
	var ws [gemmTuneCandidates]C.size_t
	var got C.int
	want := C.int(1)
	if canTune {
		want = gemmTuneCandidates
	}
	if r := C.pxcu_lt_algos(d.ctx, d.lt, g, C.size_t(ltWorkspace), want, unsafe.Pointer(&algos[0][0]), &ws[0], &got); r != 0 {
		return algo, false, fmt.Errorf("cuda matmul: cuBLASLt has no algorithm for m %d n %d k %d batch %d (status %d)", g.m, g.n, g.k, g.batch, int(r))
	}
	if !canTune || got < 2 {
		return algos[0], d.rec == nil, nil
	}
	best, ok, err := d.timeAlgos(g, pa, pb, algos[:got])
	if err != nil {
		return algo, false, err
	}
	if ok {
		tf.put(key, algos[best])
	}
	return algos[best], true, nil
}

// timeAlgos times each algorithm on g (output into scratch) and returns the
// index of the one to use; ok is false when the first could not be timed
// (then 0, not to be persisted).
func (d *Device) timeAlgos(g *C.pxcu_gemm, pa, pb uint64, algos []ltAlgo) (best int, ok bool, err error) {
	es := int64(4)
	if g.ctype != 0 {
		es = 2
	}
	n := int64(g.ldc) * int64(g.n)
	if g.batch > 1 {
		n = int64(g.stridec)*int64(g.batch-1) + int64(g.ldc)*int64(g.n)
	}
	// Timing syncs and reads (and clears) the kernels' error word: an
	// error an earlier op raised is reported here rather than lost.
	if err := d.kernelError(); err != nil {
		return 0, false, err
	}
	out, err := d.scratch(max(n*es, 256))
	if err != nil {
		return 0, false, err
	}
	defer d.alloc.put(out)
	tg := *g
	tg.align_c = alignOf(out.ptr)
	times := make([]time.Duration, len(algos))
	for i := range algos {
		run := func() error {
			for range gemmTuneReps {
				if r := C.pxcu_lt_matmul(d.ctx, d.lt, &tg, unsafe.Pointer(&algos[i][0]), C.CUdeviceptr(pa), C.CUdeviceptr(pb),
					C.CUdeviceptr(out.ptr), C.CUdeviceptr(d.ltWS.ptr), C.size_t(ltWorkspace), d.stream); r != 0 {
					return fmt.Errorf("status %d", int(r))
				}
			}
			return nil
		}
		// One untimed round (first-use costs), then the faster of two.
		if _, err := d.Timed(run); err != nil {
			times[i] = -1
			continue
		}
		t1, err1 := d.Timed(run)
		t2, err2 := d.Timed(run)
		if err1 != nil || err2 != nil {
			times[i] = -1
			continue
		}
		times[i] = min(t1, t2)
	}
	if times[0] <= 0 {
		return 0, false, nil
	}
	for i, t := range times {
		if t > 0 && float64(t) < float64(times[best])*(1-gemmTuneMargin) {
			best = i
		}
	}
	return best, true, nil
}
