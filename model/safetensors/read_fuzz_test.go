package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
)

// fuzzMaxInput bounds the inputs of FuzzOpenFile: larger files say nothing
// new about the parser and only slow the fuzzer down.
const fuzzMaxInput = 1 << 20

// FuzzOpenFile is FuzzOpen through a file on disk: Open must accept exactly
// what OpenReader accepts, describe the same tensors, and a file it accepts
// must satisfy the format's invariants: the byte ranges tile the data
// section, every tensor reads back whole, and a tensor that converts gives
// one value per element.
func FuzzOpenFile(f *testing.F) {
	seed := func(tensors []Tensor, meta map[string]string) []byte {
		var buf bytes.Buffer
		if err := Encode(&buf, tensors, meta); err != nil {
			f.Fatal(err)
		}
		return buf.Bytes()
	}
	raw := func(header string, data []byte) []byte {
		out := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
		return append(append(out, header...), data...)
	}
	f.Add(seed([]Tensor{
		F32Tensor("w", []int{2, 3}, []float32{1, -2, 3.5, 0, 1e-8, -7}),
		BF16Tensor("bf", []int{3}, []float32{1, -0.5, 256}),
		F16Tensor("half", []int{2}, []float32{0.25, -1024}),
		F64Tensor("double", []int{1, 2}, []float64{3.14, -1}),
		I32Tensor("ids", []int{4}, []int32{0, -1, 1 << 30, 7}),
		{Name: "scalar", DType: "F32", Shape: []int{}, Data: []byte{0, 0, 0x80, 0x3f}},
		{Name: "empty", DType: "F32", Shape: []int{0, 5}},
		{Name: "nibbles", DType: "F4", Shape: []int{2, 2}, Data: []byte{0x12, 0x34}},
		{Name: "fp8", DType: "F8_E4M3", Shape: []int{2}, Data: []byte{0x38, 0xb8}},
		{Name: "i64", DType: "I64", Shape: []int{1}, Data: []byte{1, 0, 0, 0, 0, 0, 0, 0}},
	}, map[string]string{"format": "pt"}))
	f.Add(raw(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"BOOL","shape":[1],"data_offsets":[2,3]}}`, []byte{1, 2, 1}))
	f.Add(raw(`{"__metadata__":{"x":"y"}}`, nil))
	f.Add(raw(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, []byte{0, 0}))            // truncated
	f.Add(raw(`{"a":{"dtype":"F32","shape":[0,4611686018427387904],"data_offsets":[0,0]}}`, nil)) // a huge empty shape
	f.Add([]byte{})
	f.Add([]byte("\xff\xff\xff\xff\xff\xff\xff\xff"))
	// One file, rewritten by each run: the runs of a worker are sequential.
	path := filepath.Join(f.TempDir(), "x.safetensors")
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > fuzzMaxInput {
			t.Skip()
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		file, err := Open(path)
		mem, memErr := OpenReader(bytes.NewReader(b), int64(len(b)))
		if (err == nil) != (memErr == nil) {
			t.Fatalf("Open: %v; OpenReader: %v", err, memErr)
		}
		if err != nil {
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), path) {
				t.Fatalf("Open error %q does not wrap ErrInvalid or name the file", err)
			}
			return
		}
		defer func() {
			if err := file.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			if err := file.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
		}()
		infos := file.Tensors()
		if !reflect.DeepEqual(infos, mem.Tensors()) || !reflect.DeepEqual(file.Metadata(), mem.Metadata()) {
			t.Fatalf("Open and OpenReader describe the file differently")
		}
		names := file.Names()
		if len(names) != len(infos) || !sort.StringsAreSorted(names) {
			t.Fatalf("Names %q for %d tensors", names, len(infos))
		}
		headerLen := int64(binary.LittleEndian.Uint64(b))
		pos := int64(0)
		for _, info := range infos {
			if info.Begin != pos || info.End < info.Begin {
				t.Fatalf("tensor %q: data_offsets [%d, %d], want to begin at %d", info.Name, info.Begin, info.End, pos)
			}
			pos = info.End
			if got, ok := file.Info(info.Name); !ok || !reflect.DeepEqual(got, info) {
				t.Fatalf("Info(%q) = %+v, %v; Tensors says %+v", info.Name, got, ok, info)
			}
			data, err := file.Raw(info.Name)
			if err != nil || int64(len(data)) != info.Size() {
				t.Fatalf("Raw(%q): %d bytes, %v; want %d", info.Name, len(data), err, info.Size())
			}
			if !bytes.Equal(data, b[8+headerLen+info.Begin:8+headerLen+info.End]) {
				t.Fatalf("Raw(%q) is not the file's bytes", info.Name)
			}
			if v, err := file.Float32(info.Name); err == nil && len(v) != info.Numel() {
				t.Fatalf("Float32(%q): %d values for %d elements", info.Name, len(v), info.Numel())
			}
			if v, err := file.Int32(info.Name); err == nil && len(v) != info.Numel() {
				t.Fatalf("Int32(%q): %d values for %d elements", info.Name, len(v), info.Numel())
			}
		}
		if pos != int64(len(b))-8-headerLen {
			t.Fatalf("the tensors cover %d bytes of a %d-byte data section", pos, int64(len(b))-8-headerLen)
		}
		if _, err := file.Raw("\x00no such tensor"); !errors.Is(err, ErrNotFound) && !slices.Contains(names, "\x00no such tensor") {
			t.Fatalf("Raw of a missing tensor: %v", err)
		}
	})
}
