package engine

import (
	"encoding/binary"
	"fmt"
	"math"
)

// EncodeFloat32 converts values to dtype's little-endian bytes, rounding to
// nearest even; I32 truncates toward zero; I8 rounds to the nearest integer
// (ties away from zero) and saturates at [-128, 127] (NaN: 0).
func EncodeFloat32(dtype DType, vals []float32) []byte {
	out := make([]byte, len(vals)*dtype.Size())
	for i, f := range vals {
		switch dtype {
		case F32:
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(f))
		case BF16:
			binary.LittleEndian.PutUint16(out[2*i:], BF16FromFloat32(f))
		case F16:
			binary.LittleEndian.PutUint16(out[2*i:], F16FromFloat32(f))
		case I32:
			binary.LittleEndian.PutUint32(out[4*i:], uint32(int32(f)))
		case I8:
			out[i] = byte(saturateInt8(f))
		}
	}
	return out
}

// DecodeFloat32 converts dtype's little-endian bytes to float32 values.
func DecodeFloat32(dtype DType, b []byte) []float32 {
	n := len(b) / max(dtype.Size(), 1)
	out := make([]float32, n)
	for i := range out {
		switch dtype {
		case F32:
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		case BF16:
			out[i] = BF16ToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
		case F16:
			out[i] = F16ToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
		case I32:
			out[i] = float32(int32(binary.LittleEndian.Uint32(b[4*i:])))
		case I8:
			out[i] = float32(int8(b[i]))
		}
	}
	return out
}

// saturateInt8 rounds f to the nearest integer (ties away from zero),
// clamped to the int8 range; NaN gives 0.
func saturateInt8(f float32) int8 {
	switch {
	case f != f:
		return 0
	case f >= 127:
		return 127
	case f <= -128:
		return -128
	}
	return int8(math.Round(float64(f)))
}

// FromFloat32 allocates a tensor of the given dtype and shape on dev and
// uploads vals (converted to dtype) into it.
func FromFloat32(dev Device, dtype DType, vals []float32, shape ...int) (*Tensor, error) {
	if Shape(shape).Numel() != len(vals) {
		return nil, fmt.Errorf("upload: %d values do not fill shape %v", len(vals), Shape(shape))
	}
	t, err := dev.Alloc(dtype, shape...)
	if err != nil {
		return nil, err
	}
	if err := dev.Write(t, EncodeFloat32(dtype, vals)); err != nil {
		dev.Free(t)
		return nil, err
	}
	return t, nil
}

// FromInt32 allocates an I32 tensor on dev holding vals.
func FromInt32(dev Device, vals []int32, shape ...int) (*Tensor, error) {
	if Shape(shape).Numel() != len(vals) {
		return nil, fmt.Errorf("upload: %d values do not fill shape %v", len(vals), Shape(shape))
	}
	t, err := dev.Alloc(I32, shape...)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	}
	if err := dev.Write(t, b); err != nil {
		dev.Free(t)
		return nil, err
	}
	return t, nil
}

// WriteFloat32 uploads vals (converted to t's dtype) into t.
func WriteFloat32(t *Tensor, vals []float32) error {
	if len(vals) != t.Numel() {
		return fmt.Errorf("write %v: got %d values, want %d", t, len(vals), t.Numel())
	}
	return t.dev.Write(t, EncodeFloat32(t.dtype, vals))
}

// Float32s downloads t (waiting for enqueued ops) and converts it to float32.
func Float32s(t *Tensor) ([]float32, error) {
	b := make([]byte, t.Bytes())
	if err := t.dev.Read(t, b); err != nil {
		return nil, fmt.Errorf("read %v: %w", t, err)
	}
	return DecodeFloat32(t.dtype, b), nil
}

// Int32s downloads an I32 tensor.
func Int32s(t *Tensor) ([]int32, error) {
	if t.dtype != I32 {
		return nil, fmt.Errorf("read %v as int32: dtype is %v", t, t.dtype)
	}
	b := make([]byte, t.Bytes())
	if err := t.dev.Read(t, b); err != nil {
		return nil, fmt.Errorf("read %v: %w", t, err)
	}
	out := make([]int32, t.Numel())
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out, nil
}
