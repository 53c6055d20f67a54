package engine

import (
	"fmt"
	"math"

	"github.com/x448/float16"
)

// DType is the element type of a Tensor.
type DType uint8

// The element types a Tensor can hold.
const (
	F32  DType = iota + 1 // IEEE-754 binary32
	BF16                  // bfloat16: the top 16 bits of a binary32
	F16                   // IEEE-754 binary16
	I32                   // two's-complement int32 (token ids, positions, lengths)
	// I8 is two's-complement int8: the storage of weight-only int8
	// quantized weights (engine.Int8Weight), read only by LinearInt8 and
	// EmbeddingInt8; every other op rejects it.
	I8
)

// Size is the number of bytes one element occupies.
func (d DType) Size() int {
	switch d {
	case F32, I32:
		return 4
	case BF16, F16:
		return 2
	case I8:
		return 1
	}
	return 0
}

// IsFloat reports whether d is one of the floating-point types.
func (d DType) IsFloat() bool { return d == F32 || d == BF16 || d == F16 }

// String returns the lower-case name used in flags and errors ("f32", ...).
func (d DType) String() string {
	switch d {
	case F32:
		return "f32"
	case BF16:
		return "bf16"
	case F16:
		return "f16"
	case I32:
		return "i32"
	case I8:
		return "i8"
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// ParseDType parses a dtype name as printed by String (also "float32",
// "bfloat16", "float16", "int32", "int8").
func ParseDType(s string) (DType, error) {
	switch s {
	case "f32", "float32", "F32":
		return F32, nil
	case "bf16", "bfloat16", "BF16":
		return BF16, nil
	case "f16", "float16", "half", "F16":
		return F16, nil
	case "i32", "int32", "I32":
		return I32, nil
	case "i8", "int8", "I8":
		return I8, nil
	}
	return 0, fmt.Errorf("unknown dtype %q (want f32, bf16, f16, i32 or i8)", s)
}

// BF16FromFloat32 rounds f to the nearest bfloat16 (ties to even), keeping
// NaN a NaN.
func BF16FromFloat32(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep it quiet and non-zero
		return uint16(b>>16) | 0x0040
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// BF16ToFloat32 widens a bfloat16 to float32 exactly.
func BF16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F16FromFloat32 rounds f to the nearest IEEE binary16 (ties to even).
func F16FromFloat32(f float32) uint16 { return uint16(float16.Fromfloat32(f)) }

// F16ToFloat32 widens an IEEE binary16 to float32 exactly.
func F16ToFloat32(h uint16) float32 { return float16.Frombits(h).Float32() }

// Round returns f rounded to the precision of dtype d (f itself for F32),
// which is what storing f in a tensor of that dtype does.
func (d DType) Round(f float32) float32 {
	switch d {
	case BF16:
		return BF16ToFloat32(BF16FromFloat32(f))
	case F16:
		return F16ToFloat32(F16FromFloat32(f))
	}
	return f
}

// Epsilon is the unit roundoff of a floating dtype (half the distance from 1
// to the next representable number); 0 for I32.
func (d DType) Epsilon() float64 {
	switch d {
	case F32:
		return 0x1p-24
	case BF16:
		return 0x1p-8
	case F16:
		return 0x1p-11
	}
	return 0
}
