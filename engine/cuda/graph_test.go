//go:build cgo

package cuda_test

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/engine"
)

// TestGraphReplay records y = 2x + x (AddScaled) and a KVAppendAt at a
// device-held start, replays it over new inputs and starts, and checks
// that a host read while recording is refused without leaving the device
// unusable.
func TestGraphReplay(t *testing.T) {
	d := openGPU(t)
	x, _ := engine.FromFloat32(d, engine.F32, []float32{1, 2, 3, 4}, 1, 1, 1, 4)
	y, _ := d.Alloc(engine.F32, 1, 1, 1, 4)
	cache, _ := d.Alloc(engine.F32, 1, 1, 3, 4)
	starts, _ := d.Alloc(engine.I32, 1)
	defer func() {
		for _, t := range []*engine.Tensor{x, y, cache, starts} {
			d.Free(t)
		}
	}()
	if err := d.Fill(cache, 0); err != nil {
		t.Fatal(err)
	}
	if err := d.BeginGraph(); err != nil {
		t.Fatal(err)
	}
	if err := d.AddScaled(y, x, x, 2, 1); err != nil {
		t.Fatal(err)
	}
	if err := d.KVAppendAt(cache, y, starts); err != nil {
		t.Fatal(err)
	}
	g, err := d.EndGraph()
	if err != nil {
		t.Fatal(err)
	}
	defer g.Free()
	for i, start := range []int32{2, 0} {
		if err := engine.WriteFloat32(x, []float32{float32(i), 1, 2, 3}); err != nil {
			t.Fatal(err)
		}
		if err := d.Write(starts, binary.LittleEndian.AppendUint32(nil, uint32(start))); err != nil {
			t.Fatal(err)
		}
		if err := g.Replay(); err != nil {
			t.Fatal(err)
		}
	}
	got, err := engine.Float32s(cache)
	if err != nil {
		t.Fatal(err)
	}
	want := []float32{3, 3, 6, 9, 0, 0, 0, 0, 0, 3, 6, 9}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("cache after two replays = %v, want %v", got, want)
		}
	}

	if err := d.BeginGraph(); err != nil {
		t.Fatal(err)
	}
	if _, err := engine.Float32s(y); err == nil || !strings.Contains(err.Error(), "recorded") {
		t.Errorf("a read while recording: err %v, want a refusal", err)
	}
	if g2, err := d.EndGraph(); err == nil {
		g2.Free()
		t.Fatal("EndGraph after a refused read succeeded")
	}
	if v, err := engine.Float32s(y); err != nil || v[0] != 3*1 {
		t.Fatalf("after a failed recording: y = %v, %v", v, err)
	}
}
