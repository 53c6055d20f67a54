package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"unicode/utf8"

	"github.com/parallax-engine/parallax/engine"

	"github.com/parallax-engine/parallax/internal/atomicfile"
)

// Tensor is one tensor to write: a name, a safetensors dtype name, a shape
// and exactly the little-endian bytes dtype and shape call for.
type Tensor struct {
	Name  string
	DType string // "F32", "BF16", "I32", ...
	Shape []int
	Data  []byte
}

// F32Tensor returns an F32 tensor holding vals, which must number the
// product of shape (Write reports a mismatch).
func F32Tensor(name string, shape []int, vals []float32) Tensor {
	return Tensor{Name: name, DType: "F32", Shape: shape, Data: engine.EncodeFloat32(engine.F32, vals)}
}

// BF16Tensor returns a BF16 tensor holding vals rounded to bfloat16.
func BF16Tensor(name string, shape []int, vals []float32) Tensor {
	return Tensor{Name: name, DType: "BF16", Shape: shape, Data: engine.EncodeFloat32(engine.BF16, vals)}
}

// F16Tensor returns an F16 tensor holding vals rounded to IEEE binary16.
func F16Tensor(name string, shape []int, vals []float32) Tensor {
	return Tensor{Name: name, DType: "F16", Shape: shape, Data: engine.EncodeFloat32(engine.F16, vals)}
}

// F64Tensor returns an F64 tensor holding vals.
func F64Tensor(name string, shape []int, vals []float64) Tensor {
	b := make([]byte, 8*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(v))
	}
	return Tensor{Name: name, DType: "F64", Shape: shape, Data: b}
}

// I32Tensor returns an I32 tensor holding vals.
func I32Tensor(name string, shape []int, vals []int32) Tensor {
	b := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	}
	return Tensor{Name: name, DType: "I32", Shape: shape, Data: b}
}

// Write stores tensors and metadata as a safetensors file at path. The file
// is first written to a temporary file in the same directory, synced to
// disk and then renamed over path, so a reader never sees a partial file and
// a failed write leaves any previous file intact.
//
// Tensors are laid out widest dtype first, then by name; the header is
// padded with spaces to a multiple of 8 bytes so the data section starts
// 8-byte aligned. The same tensors and metadata always give the same bytes.
func Write(path string, tensors []Tensor, metadata map[string]string) (err error) {
	header, order, err := prepare(tensors, metadata)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	err = atomicfile.Write(path, func(w io.Writer) error {
		return emit(w, header, tensors, order)
	})
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// Encode writes tensors and metadata in the safetensors format to w, laid
// out exactly as Write does (but without the atomic replace).
func Encode(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	header, order, err := prepare(tensors, metadata)
	if err != nil {
		return err
	}
	return emit(w, header, tensors, order)
}

func emit(w io.Writer, header []byte, tensors []Tensor, order []int) error {
	var prefix [8]byte
	binary.LittleEndian.PutUint64(prefix[:], uint64(len(header)))
	if _, err := w.Write(prefix[:]); err != nil {
		return err
	}
	if _, err := w.Write(header); err != nil {
		return err
	}
	for _, i := range order {
		if _, err := w.Write(tensors[i].Data); err != nil {
			return err
		}
	}
	return nil
}

// prepare validates the tensors and builds the padded header and the order
// in which the tensors' data is written.
func prepare(tensors []Tensor, metadata map[string]string) (header []byte, order []int, err error) {
	seen := make(map[string]bool, len(tensors))
	for i, t := range tensors {
		if t.Name == "" {
			return nil, nil, fmt.Errorf("tensor %d has an empty name", i)
		}
		if t.Name == metadataKey {
			return nil, nil, fmt.Errorf("tensor name %q is reserved for metadata", t.Name)
		}
		if !utf8.ValidString(t.Name) {
			return nil, nil, fmt.Errorf("tensor name %q is not valid UTF-8", t.Name)
		}
		if seen[t.Name] {
			return nil, nil, fmt.Errorf("duplicate tensor name %q", t.Name)
		}
		seen[t.Name] = true
		if DTypeBits(t.DType) == 0 {
			return nil, nil, fmt.Errorf("tensor %q: unknown dtype %q", t.Name, t.DType)
		}
		for j, d := range t.Shape {
			if d < 0 {
				return nil, nil, fmt.Errorf("tensor %q: shape %v: dimension %d is negative", t.Name, shapeString(t.Shape), j)
			}
		}
		want, err := dataSize(t.DType, t.Shape)
		if err != nil {
			return nil, nil, fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		if uint64(len(t.Data)) != want {
			return nil, nil, fmt.Errorf("tensor %q: %s %v needs %d bytes, got %d",
				t.Name, t.DType, shapeString(t.Shape), want, len(t.Data))
		}
	}

	for k, v := range metadata {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return nil, nil, fmt.Errorf("metadata %q: key and value must be valid UTF-8", k)
		}
	}

	order = make([]int, len(tensors))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool {
		ta, tb := tensors[order[a]], tensors[order[b]]
		if ba, bb := DTypeBits(ta.DType), DTypeBits(tb.DType); ba != bb {
			return ba > bb
		}
		return ta.Name < tb.Name
	})

	var buf bytes.Buffer
	buf.WriteByte('{')
	if len(metadata) > 0 {
		keys := make([]string, 0, len(metadata))
		for k := range metadata {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		writeString(&buf, metadataKey)
		buf.WriteString(":{")
		for i, k := range keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeString(&buf, k)
			buf.WriteByte(':')
			writeString(&buf, metadata[k])
		}
		buf.WriteByte('}')
	}
	var offset int64
	for n, i := range order {
		t := tensors[i]
		if n > 0 || len(metadata) > 0 {
			buf.WriteByte(',')
		}
		writeString(&buf, t.Name)
		buf.WriteString(`:{"dtype":`)
		writeString(&buf, t.DType)
		buf.WriteString(`,"shape":[`)
		for j, d := range t.Shape {
			if j > 0 {
				buf.WriteByte(',')
			}
			buf.WriteString(strconv.Itoa(d))
		}
		end := offset + int64(len(t.Data))
		fmt.Fprintf(&buf, `],"data_offsets":[%d,%d]}`, offset, end)
		offset = end
	}
	buf.WriteByte('}')
	for buf.Len()%8 != 0 {
		buf.WriteByte(' ')
	}
	if buf.Len() > MaxHeaderSize {
		return nil, nil, errors.New("header exceeds the format's 100 MB limit (too many tensors or too much metadata)")
	}
	return buf.Bytes(), order, nil
}

// writeString appends s, valid UTF-8, as a JSON string.
func writeString(buf *bytes.Buffer, s string) {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)           // cannot fail for a string
	buf.Truncate(buf.Len() - 1) // Encode appends a newline
}
