package engine_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	_ "github.com/parallax-engine/parallax/engine/cpu"
)

func TestOpen(t *testing.T) {
	for _, tc := range []struct {
		id      string
		backend string // want this backend; "" means want an error
		errHas  string
		noDev   bool // error wraps ErrNoDevice
	}{
		{id: "cpu", backend: "cpu"},
		{id: "cpu:0", backend: "cpu"},
		{id: " CPU ", backend: "cpu"},
		{id: "auto", backend: "cpu"},
		{id: "", backend: "cpu"},
		{id: "cpu:1", errHas: "cpu has 1 device", noDev: true},
		{id: "cpu:-1", errHas: "not a non-negative integer"},
		{id: "cpu:x", errHas: "not a non-negative integer"},
		{id: "vulkan:0", errHas: `backend "vulkan" is not built into this program`, noDev: true},
		{id: "cuda:3", errHas: `backend "cuda" is not built into this program`, noDev: true},
		{id: "tpu", errHas: "available: cpu"},
	} {
		t.Run(tc.id, func(t *testing.T) {
			d, err := engine.Open(tc.id)
			if tc.backend != "" {
				if err != nil {
					t.Fatalf("Open(%q): %v", tc.id, err)
				}
				if got := d.Info().Backend; got != tc.backend {
					t.Fatalf("Open(%q) backend %q, want %q", tc.id, got, tc.backend)
				}
				return
			}
			if err == nil {
				t.Fatalf("Open(%q) succeeded, want an error", tc.id)
			}
			if !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("Open(%q) error %q does not mention %q", tc.id, err, tc.errHas)
			}
			if tc.noDev && !errors.Is(err, engine.ErrNoDevice) {
				t.Errorf("Open(%q) error %q does not wrap ErrNoDevice", tc.id, err)
			}
		})
	}
}

func TestList(t *testing.T) {
	var found bool
	for _, b := range engine.List() {
		if b.Name == "cpu" && b.Err == nil && len(b.Devices) == 1 && b.Devices[0].ID() == "cpu:0" {
			found = true
		}
	}
	if !found {
		t.Fatalf("engine.List() lacks cpu:0: %+v", engine.List())
	}
}

func TestDTypeRounding(t *testing.T) {
	for _, tc := range []struct {
		dt   engine.DType
		in   float32
		want float32
	}{
		{engine.BF16, 1, 1},
		{engine.BF16, 1 + 1.0/256, 1},           // tie rounds to even (1.0)
		{engine.BF16, 1 + 3.0/256, 1 + 4.0/256}, // tie rounds to even (up)
		{engine.BF16, 1 + 1.0/256 + 1e-6, 1 + 2.0/256},
		{engine.BF16, -3.140625, -3.140625},
		{engine.F16, 1 + 1.0/2048, 1},
		{engine.F16, 65504, 65504},
		{engine.F16, 1e6, float32(math.Inf(1))},
		{engine.F32, 0.1, 0.1},
	} {
		if got := tc.dt.Round(tc.in); got != tc.want {
			t.Errorf("%v.Round(%v) = %v, want %v", tc.dt, tc.in, got, tc.want)
		}
	}
	for _, dt := range []engine.DType{engine.BF16, engine.F16} {
		nan := float32(math.NaN())
		if got := dt.Round(nan); !math.IsNaN(float64(got)) {
			t.Errorf("%v.Round(NaN) = %v, want NaN", dt, got)
		}
	}
}

func TestParseDType(t *testing.T) {
	for _, dt := range []engine.DType{engine.F32, engine.BF16, engine.F16, engine.I32} {
		got, err := engine.ParseDType(dt.String())
		if err != nil || got != dt {
			t.Errorf("ParseDType(%q) = %v, %v", dt.String(), got, err)
		}
	}
	if _, err := engine.ParseDType("f8"); err == nil {
		t.Error("ParseDType(f8) succeeded")
	}
}

func TestHostRoundTrip(t *testing.T) {
	dev, err := engine.Open("cpu")
	if err != nil {
		t.Fatal(err)
	}
	vals := []float32{0, 1, -2.5, 3.25, 1e-3, -7}
	for _, dt := range []engine.DType{engine.F32, engine.BF16, engine.F16} {
		x, err := engine.FromFloat32(dev, dt, vals, 2, 3)
		if err != nil {
			t.Fatal(err)
		}
		got, err := engine.Float32s(x)
		if err != nil {
			t.Fatal(err)
		}
		for i := range vals {
			if got[i] != dt.Round(vals[i]) {
				t.Errorf("%v: element %d = %v, want %v", dt, i, got[i], dt.Round(vals[i]))
			}
		}
	}
	ids, err := engine.FromInt32(dev, []int32{3, -1, 7}, 3)
	if err != nil {
		t.Fatal(err)
	}
	back, err := engine.Int32s(ids)
	if err != nil || back[0] != 3 || back[1] != -1 || back[2] != 7 {
		t.Fatalf("Int32s = %v, %v", back, err)
	}
	if _, err := engine.FromFloat32(dev, engine.F32, vals, 4, 4); err == nil {
		t.Error("FromFloat32 with a shape that does not match the values succeeded")
	}
	if _, err := dev.Alloc(engine.F32, 2, -3); err == nil {
		t.Error("Alloc with a negative dimension succeeded")
	}
}

func TestReshape(t *testing.T) {
	dev, _ := engine.Open("cpu")
	x, _ := dev.Alloc(engine.F32, 2, 3, 4)
	y, err := x.Reshape(6, 4)
	if err != nil || !y.Shape().Equal(engine.Shape{6, 4}) || y.Storage() == nil {
		t.Fatalf("Reshape(6,4) = %v, %v", y, err)
	}
	if _, err := x.Reshape(5, 5); err == nil {
		t.Error("Reshape to a different element count succeeded")
	}
}

func TestForeignTensorRejected(t *testing.T) {
	a, _ := engine.Open("cpu")
	b, _ := engine.Open("cpu") // a second, distinct device value
	x, _ := a.Alloc(engine.F32, 4)
	y, _ := b.Alloc(engine.F32, 4)
	if err := engine.CheckDevice("test", a, x, y); err == nil {
		t.Fatal("CheckDevice accepted a tensor of another device")
	}
}
