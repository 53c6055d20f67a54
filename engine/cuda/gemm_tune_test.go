//go:build cgo

package cuda_test

import (
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/engine"
)

// TestTuningKeepsKernelErrors: timing a new product's candidates reads the
// kernels' error word; an error an earlier op raised (an embedding id out
// of range) must still reach the caller, at the product or at Sync, not be
// consumed by the tuner.
func TestTuningKeepsKernelErrors(t *testing.T) {
	d := openGPU(t)
	table := upload(d, engine.BF16, make([]float32, 4*64), 4, 64)
	ids, err := engine.FromInt32(d, []int32{1, 9}, 2) // 9 is outside [0, 4)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := d.Alloc(engine.BF16, 2, 64)
	if err != nil {
		t.Fatal(err)
	}
	// A product shape no other test uses, so this call tunes.
	a := upload(d, engine.BF16, make([]float32, 96*64), 96, 64)
	b := upload(d, engine.BF16, make([]float32, 136*64), 136, 64)
	out, err := d.Alloc(engine.F32, 96, 136)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Embedding(rows, table, ids); err != nil {
		t.Fatal(err)
	}
	// No persisted choice for the shape (set after the embedding's module
	// has loaded from the usual cache).
	t.Setenv("PARALLAX_CUDA_CACHE", t.TempDir())
	err = d.MatMul(out, a, b, engine.MatMulOpts{TransB: true})
	if err == nil {
		err = d.Sync()
	}
	if err == nil || !strings.Contains(err.Error(), "embedding") {
		t.Fatalf("the embedding's out-of-range id was not reported: %v", err)
	}
	if err := d.Sync(); err != nil {
		t.Fatalf("the error was reported twice: %v", err)
	}
}
