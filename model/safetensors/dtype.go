package safetensors

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"

	"github.com/parallax-engine/parallax/engine"
)

// dtypeBits maps every element type of the safetensors format to its width in
// bits. Sub-byte types (F4, F6_*) pack elements densely; a tensor of them
// must fill a whole number of bytes.
var dtypeBits = map[string]int{
	"BOOL":    8,
	"U8":      8,
	"I8":      8,
	"F8_E5M2": 8,
	"F8_E4M3": 8,
	"F8_E8M0": 8,
	"I16":     16,
	"U16":     16,
	"F16":     16,
	"BF16":    16,
	"I32":     32,
	"U32":     32,
	"F32":     32,
	"F64":     64,
	"I64":     64,
	"U64":     64,
	"C64":     64,
	"F4":      4,
	"F6_E2M3": 6,
	"F6_E3M2": 6,
}

// DTypeBits returns the width in bits of one element of the named safetensors
// dtype ("F32" is 32, "F4" is 4), or 0 if the name is not a safetensors dtype.
func DTypeBits(dtype string) int { return dtypeBits[dtype] }

// DTypes lists the dtype names the format defines, sorted.
func DTypes() []string {
	out := make([]string, 0, len(dtypeBits))
	for k := range dtypeBits {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// The dtypes File.Float32 and File.Int32 convert, for error messages.
const (
	floatDTypes = "F32, F64, BF16, F16, F8_E4M3, F8_E5M2, F8_E8M0"
	intDTypes   = "I32, I16, I8, U8, U16, BOOL, and U32, I64, U64 when every value fits"
)

// decodeFloat32 converts raw little-endian data of a floating dtype to float32.
func decodeFloat32(dtype string, b []byte) ([]float32, error) {
	switch dtype {
	case "F32":
		return engine.DecodeFloat32(engine.F32, b), nil
	case "BF16":
		return engine.DecodeFloat32(engine.BF16, b), nil
	case "F16":
		return engine.DecodeFloat32(engine.F16, b), nil
	case "F64":
		out := make([]float32, len(b)/8)
		for i := range out {
			out[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:])))
		}
		return out, nil
	case "F8_E5M2":
		// E5M2 is the upper byte of an IEEE binary16.
		out := make([]float32, len(b))
		for i, x := range b {
			out[i] = engine.F16ToFloat32(uint16(x) << 8)
		}
		return out, nil
	case "F8_E4M3":
		out := make([]float32, len(b))
		for i, x := range b {
			out[i] = e4m3ToFloat32(x)
		}
		return out, nil
	case "F8_E8M0":
		out := make([]float32, len(b))
		for i, x := range b {
			out[i] = e8m0ToFloat32(x)
		}
		return out, nil
	}
	return nil, fmt.Errorf("dtype %s is not a floating type this reader converts (want %s)", dtype, floatDTypes)
}

// e4m3ToFloat32 widens an OCP FP8 E4M3 ("FN": no infinities, one NaN
// pattern per sign) value: bias 7, subnormals at exponent 0.
func e4m3ToFloat32(x byte) float32 {
	exp := int(x>>3) & 0xf
	man := int(x & 7)
	var v float64
	switch {
	case exp == 15 && man == 7:
		v = math.NaN()
	case exp == 0:
		v = math.Ldexp(float64(man), -9) // man/8 * 2^(1-7)
	default:
		v = math.Ldexp(1+float64(man)/8, exp-7)
	}
	if x&0x80 != 0 {
		v = -v
	}
	return float32(v)
}

// e8m0ToFloat32 widens an E8M0 scale: 2^(x-127), with 0xff a NaN.
func e8m0ToFloat32(x byte) float32 {
	if x == 0xff {
		return float32(math.NaN())
	}
	return float32(math.Ldexp(1, int(x)-127))
}

// decodeInt32 converts raw little-endian data of an integer (or BOOL) dtype
// to int32, failing on a value outside the int32 range.
func decodeInt32(dtype string, b []byte) ([]int32, error) {
	switch dtype {
	case "I32":
		out := make([]int32, len(b)/4)
		for i := range out {
			out[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return out, nil
	case "I16":
		out := make([]int32, len(b)/2)
		for i := range out {
			out[i] = int32(int16(binary.LittleEndian.Uint16(b[2*i:])))
		}
		return out, nil
	case "U16":
		out := make([]int32, len(b)/2)
		for i := range out {
			out[i] = int32(binary.LittleEndian.Uint16(b[2*i:]))
		}
		return out, nil
	case "I8":
		out := make([]int32, len(b))
		for i, x := range b {
			out[i] = int32(int8(x))
		}
		return out, nil
	case "U8":
		out := make([]int32, len(b))
		for i, x := range b {
			out[i] = int32(x)
		}
		return out, nil
	case "BOOL":
		out := make([]int32, len(b))
		for i, x := range b {
			if x > 1 {
				return nil, fmt.Errorf("element %d: BOOL byte %d is neither 0 nor 1", i, x)
			}
			out[i] = int32(x)
		}
		return out, nil
	case "U32":
		out := make([]int32, len(b)/4)
		for i := range out {
			u := binary.LittleEndian.Uint32(b[4*i:])
			if u > math.MaxInt32 {
				return nil, fmt.Errorf("element %d: U32 value %d does not fit in int32", i, u)
			}
			out[i] = int32(u)
		}
		return out, nil
	case "I64":
		out := make([]int32, len(b)/8)
		for i := range out {
			v := int64(binary.LittleEndian.Uint64(b[8*i:]))
			if v < math.MinInt32 || v > math.MaxInt32 {
				return nil, fmt.Errorf("element %d: I64 value %d does not fit in int32", i, v)
			}
			out[i] = int32(v)
		}
		return out, nil
	case "U64":
		out := make([]int32, len(b)/8)
		for i := range out {
			u := binary.LittleEndian.Uint64(b[8*i:])
			if u > math.MaxInt32 {
				return nil, fmt.Errorf("element %d: U64 value %d does not fit in int32", i, u)
			}
			out[i] = int32(u)
		}
		return out, nil
	}
	return nil, fmt.Errorf("dtype %s is not an integer type this reader converts (want %s)", dtype, intDTypes)
}
