package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// encode returns the safetensors bytes of tensors, failing the test on error.
func encode(t *testing.T, tensors []Tensor, meta map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Encode(&buf, tensors, meta); err != nil {
		t.Fatalf("Encode: %v", err)
	}
	return buf.Bytes()
}

// rawFile assembles a file from a literal header (no padding added) and data.
func rawFile(header string, data []byte) []byte {
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	out = append(out, header...)
	return append(out, data...)
}

func openBytes(b []byte) (*File, error) { return OpenReader(bytes.NewReader(b), int64(len(b))) }

func sampleTensors() []Tensor {
	return []Tensor{
		F32Tensor("weight", []int{2, 3}, []float32{1, -2, 3.5, 0, 1e-8, -7}),
		BF16Tensor("bf", []int{3}, []float32{1, -0.5, 256}),
		F16Tensor("half", []int{2}, []float32{0.25, -1024}),
		F64Tensor("double", []int{1, 2}, []float64{math.Pi, -1}),
		I32Tensor("ids", []int{4}, []int32{0, -1, 1 << 30, 7}),
		{Name: "scalar", DType: "F32", Shape: []int{}, Data: []byte{0, 0, 0x80, 0x3f}},
		{Name: "empty", DType: "F32", Shape: []int{0, 5}, Data: nil},
		{Name: "bytes", DType: "U8", Shape: []int{3}, Data: []byte{1, 2, 255}},
		{Name: "nibbles", DType: "F4", Shape: []int{2, 2}, Data: []byte{0x12, 0x34}},
		{Name: "ünï \"quoted\" <&>", DType: "I8", Shape: []int{1}, Data: []byte{0x80}},
	}
}

func TestRoundTrip(t *testing.T) {
	tensors := sampleTensors()
	meta := map[string]string{"format": "pt", "note": "line\nbreak \"and\" ünïcode", "": "empty key"}
	path := filepath.Join(t.TempDir(), "x.safetensors")
	if err := Write(path, tensors, meta); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	var wantNames []string
	for _, x := range tensors {
		wantNames = append(wantNames, x.Name)
	}
	gotNames := f.Names()
	if len(gotNames) != len(wantNames) {
		t.Fatalf("Names() = %q, want %d names", gotNames, len(wantNames))
	}
	for _, x := range tensors {
		info, ok := f.Info(x.Name)
		if !ok {
			t.Fatalf("Info(%q) not found", x.Name)
		}
		if info.DType != x.DType || !reflect.DeepEqual(append([]int{}, info.Shape...), append([]int{}, x.Shape...)) {
			t.Errorf("Info(%q) = %s %v, want %s %v", x.Name, info.DType, info.Shape, x.DType, x.Shape)
		}
		raw, err := f.Raw(x.Name)
		if err != nil {
			t.Fatalf("Raw(%q): %v", x.Name, err)
		}
		if !bytes.Equal(raw, x.Data) {
			t.Errorf("Raw(%q) = %v, want %v", x.Name, raw, x.Data)
		}
	}
	if got := f.Metadata(); !reflect.DeepEqual(got, meta) {
		t.Errorf("Metadata() = %q, want %q", got, meta)
	}

	// Data order: widest dtype first, then by name; ranges tile the data.
	var pos int64
	lastBits := 64
	for _, info := range f.Tensors() {
		if info.Begin != pos {
			t.Errorf("tensor %q begins at %d, want %d", info.Name, info.Begin, pos)
		}
		b := DTypeBits(info.DType)
		if b > lastBits {
			t.Errorf("tensor %q (%d bits) after a %d-bit tensor", info.Name, b, lastBits)
		}
		if b >= 8 && info.Begin%int64(b/8) != 0 {
			t.Errorf("tensor %q at offset %d is not aligned to its %d-byte elements", info.Name, info.Begin, b/8)
		}
		lastBits, pos = b, info.End
	}

	// The header length is a multiple of 8, so the data is 8-byte aligned.
	b, _ := os.ReadFile(path)
	if n := binary.LittleEndian.Uint64(b); n%8 != 0 {
		t.Errorf("header length %d is not a multiple of 8", n)
	}

	// Writing again gives identical bytes.
	if again := encode(t, tensors, meta); !bytes.Equal(again, b) {
		t.Errorf("Encode is not deterministic")
	}
	if err := f.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

func TestGolden(t *testing.T) {
	got := encode(t, []Tensor{I32Tensor("test", []int{2, 2}, []int32{0, 0, 0, 0})}, nil)
	header := `{"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}}    `
	want := rawFile(header, make([]byte, 16))
	if !bytes.Equal(got, want) {
		t.Errorf("Encode =\n%q\nwant\n%q", got, want)
	}

	got = encode(t, []Tensor{F32Tensor("b", []int{1}, []float32{1}), F32Tensor("a", []int{1}, []float32{2})},
		map[string]string{"k": "v"})
	header = `{"__metadata__":{"k":"v"},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`
	header += strings.Repeat(" ", (8-len(header)%8)%8)
	want = rawFile(header, []byte{0, 0, 0, 0x40, 0, 0, 0x80, 0x3f})
	if !bytes.Equal(got, want) {
		t.Errorf("Encode =\n%q\nwant\n%q", got, want)
	}

	// An unpadded header (older writers) and whitespace are accepted.
	f, err := openBytes(rawFile(` { "test" : {"shape":[2,2], "dtype":"I32", "data_offsets":[0,16], "extra": 1}}`, make([]byte, 16)))
	if err != nil {
		t.Fatal(err)
	}
	if v, err := f.Int32("test"); err != nil || len(v) != 4 {
		t.Errorf("Int32 = %v, %v", v, err)
	}
}

func TestFloat32(t *testing.T) {
	cases := []struct {
		name  string
		dtype string
		data  []byte
		want  []float32
	}{
		{"f32", "F32", F32Tensor("", nil, []float32{1.5, -2}).Data, []float32{1.5, -2}},
		{"bf16", "BF16", []byte{0x80, 0x3f, 0x00, 0xc0}, []float32{1, -2}},
		{"f16", "F16", []byte{0x00, 0x3c, 0x00, 0xb8}, []float32{1, -0.5}},
		{"f64", "F64", F64Tensor("", nil, []float64{0.1, -3}).Data, []float32{float32(0.1), -3}},
		{"e5m2", "F8_E5M2", []byte{0x3c, 0xc0, 0x7c}, []float32{1, -2, float32(math.Inf(1))}},
		{"e4m3", "F8_E4M3", []byte{0x38, 0xc0, 0x7e, 0x01, 0x00, 0x80}, []float32{1, -2, 448, 1.0 / 512, 0, float32(math.Copysign(0, -1))}},
		{"e8m0", "F8_E8M0", []byte{127, 128, 0}, []float32{1, 2, float32(math.Ldexp(1, -127))}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			shape := []int{len(c.want)}
			f, err := openBytes(encode(t, []Tensor{{Name: "x", DType: c.dtype, Shape: shape, Data: c.data}}, nil))
			if err != nil {
				t.Fatal(err)
			}
			got, err := f.Float32("x")
			if err != nil {
				t.Fatal(err)
			}
			for i := range c.want {
				if math.Float32bits(got[i]) != math.Float32bits(c.want[i]) {
					t.Errorf("element %d = %v, want %v", i, got[i], c.want[i])
				}
			}
		})
	}
	f, _ := openBytes(encode(t, []Tensor{{Name: "nan", DType: "F8_E4M3", Shape: []int{2}, Data: []byte{0x7f, 0xff}}}, nil))
	if v, err := f.Float32("nan"); err != nil || !math.IsNaN(float64(v[0])) || !math.IsNaN(float64(v[1])) {
		t.Errorf("E4M3 NaN patterns gave %v, %v", v, err)
	}
	f, _ = openBytes(encode(t, sampleTensors(), nil))
	if _, err := f.Float32("ids"); err == nil || !strings.Contains(err.Error(), "I32 is not a floating type") {
		t.Errorf("Float32 of an I32 tensor: err = %v", err)
	}
	if _, err := f.Float32("nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Float32 of a missing tensor: err = %v, want ErrNotFound", err)
	}
}

func TestInt32(t *testing.T) {
	i64 := func(v ...int64) []byte {
		var b []byte
		for _, x := range v {
			b = binary.LittleEndian.AppendUint64(b, uint64(x))
		}
		return b
	}
	cases := []struct {
		dtype   string
		data    []byte
		want    []int32
		wantErr string
	}{
		{"I32", I32Tensor("", nil, []int32{-5, 9}).Data, []int32{-5, 9}, ""},
		{"I16", []byte{0xff, 0xff, 0x02, 0x00}, []int32{-1, 2}, ""},
		{"U16", []byte{0xff, 0xff}, []int32{65535}, ""},
		{"I8", []byte{0xfe}, []int32{-2}, ""},
		{"U8", []byte{0xfe}, []int32{254}, ""},
		{"BOOL", []byte{0, 1}, []int32{0, 1}, ""},
		{"BOOL", []byte{2}, nil, "neither 0 nor 1"},
		{"I64", i64(-3, 1<<31-1), []int32{-3, 1<<31 - 1}, ""},
		{"I64", i64(1 << 31), nil, "does not fit"},
		{"U64", i64(-1), nil, "does not fit"},
		{"U32", []byte{0xff, 0xff, 0xff, 0xff}, nil, "does not fit"},
		{"F32", []byte{0, 0, 0, 0}, nil, "not an integer type"},
	}
	for _, c := range cases {
		t.Run(c.dtype, func(t *testing.T) {
			n := len(c.data) * 8 / DTypeBits(c.dtype)
			f, err := openBytes(encode(t, []Tensor{{Name: "x", DType: c.dtype, Shape: []int{n}, Data: c.data}}, nil))
			if err != nil {
				t.Fatal(err)
			}
			got, err := f.Int32("x")
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, c.want) {
				t.Fatalf("Int32 = %v, %v; want %v", got, err, c.want)
			}
		})
	}
}

func TestOpenErrors(t *testing.T) {
	entry := func(name, dtype, shape, offsets string) string {
		return `"` + name + `":{"dtype":"` + dtype + `","shape":` + shape + `,"data_offsets":` + offsets + `}`
	}
	huge := binary.LittleEndian.AppendUint64(nil, MaxHeaderSize+1)
	huge = append(huge, "{}"...)
	cases := []struct {
		name string
		file []byte
		want string
	}{
		{"empty file", nil, "shorter than the 8-byte"},
		{"short prefix", []byte{1, 2, 3}, "shorter than the 8-byte"},
		{"absurd header length", huge, "exceeds the 100000000-byte limit"},
		{"header past end", append(binary.LittleEndian.AppendUint64(nil, 100), "{}"...), "exceeds the 2 bytes that follow"},
		{"empty header", rawFile("", nil), "unexpected end of JSON"},
		{"not json", rawFile("hello!!!", nil), "header JSON"},
		{"array header", rawFile("[1,2]", nil), "want a JSON object"},
		{"truncated json", rawFile(`{"a":{"dtype":"F32"`, nil), "header JSON"},
		{"trailing data", rawFile(`{} {}`, nil), "after the object"},
		{"trailing garbage", rawFile(`{}x`, nil), "after the object"},
		{"invalid utf8", rawFile("{\"\xff\":1}", nil), "not valid UTF-8"},
		{"duplicate name", rawFile("{"+entry("a", "U8", "[1]", "[0,1]")+","+entry("a", "U8", "[1]", "[1,2]")+"}", []byte{1, 2}), `duplicate key "a"`},
		{"duplicate field", rawFile(`{"a":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, []byte{1}), `duplicate key "dtype"`},
		{"unknown dtype", rawFile("{"+entry("a", "Q7", "[1]", "[0,1]")+"}", []byte{1}), `unknown dtype "Q7"`},
		{"lowercase dtype", rawFile("{"+entry("a", "f32", "[1]", "[0,4]")+"}", make([]byte, 4)), `unknown dtype "f32"`},
		{"entry not object", rawFile(`{"a":[1]}`, nil), `tensor "a": want an object`},
		{"missing dtype", rawFile(`{"a":{"shape":[1],"data_offsets":[0,1]}}`, []byte{1}), "missing dtype"},
		{"missing shape", rawFile(`{"a":{"dtype":"U8","data_offsets":[0,1]}}`, []byte{1}), "missing shape"},
		{"missing offsets", rawFile(`{"a":{"dtype":"U8","shape":[1]}}`, []byte{1}), "missing data_offsets"},
		{"dtype not string", rawFile(`{"a":{"dtype":7,"shape":[1],"data_offsets":[0,1]}}`, []byte{1}), "dtype: want a string"},
		{"shape null", rawFile("{"+entry("a", "U8", "null", "[0,1]")+"}", []byte{1}), "shape: want an array"},
		{"negative dim", rawFile("{"+entry("a", "U8", "[-1]", "[0,1]")+"}", []byte{1}), "want a non-negative integer, got -1"},
		{"fractional dim", rawFile("{"+entry("a", "U8", "[1.5]", "[0,1]")+"}", []byte{1}), "got 1.5"},
		{"string dim", rawFile("{"+entry("a", "U8", `["1"]`, "[0,1]")+"}", []byte{1}), "shape"},
		{"huge dim", rawFile("{"+entry("a", "U8", "[99999999999999999999]", "[0,1]")+"}", []byte{1}), "99999999999999999999"},
		{"shape overflow", rawFile("{"+entry("a", "F32", "[4294967296,4294967296]", "[0,1]")+"}", []byte{1}), "too many elements"},
		{"three offsets", rawFile("{"+entry("a", "U8", "[1]", "[0,1,2]")+"}", []byte{1}), "want [begin, end], got 3"},
		{"end before begin", rawFile("{"+entry("a", "U8", "[0]", "[1,0]")+"}", []byte{1}), "end is before begin"},
		{"size mismatch", rawFile("{"+entry("a", "F32", "[2,3]", "[0,20]")+"}", make([]byte, 20)), "hold 20 bytes, but F32 [2,3] needs 24"},
		{"past end", rawFile("{"+entry("a", "F32", "[2]", "[0,8]")+"}", make([]byte, 4)), "run past the end of the 4-byte data section"},
		{"overlap", rawFile("{"+entry("a", "U8", "[2]", "[0,2]")+","+entry("b", "U8", "[2]", "[1,3]")+"}", make([]byte, 3)), "overlap"},
		{"gap", rawFile("{"+entry("a", "U8", "[1]", "[0,1]")+","+entry("b", "U8", "[1]", "[2,3]")+"}", make([]byte, 3)), "leave bytes 1..2"},
		{"trailing bytes", rawFile("{"+entry("a", "U8", "[1]", "[0,1]")+"}", make([]byte, 3)), "cover 1 bytes but the data section has 3"},
		{"sub-byte misaligned", rawFile("{"+entry("a", "F4", "[3]", "[0,1]")+"}", make([]byte, 1)), "do not fill whole bytes"},
		{"metadata not object", rawFile(`{"__metadata__":[1]}`, nil), "__metadata__: want an object"},
		{"metadata non-string", rawFile(`{"__metadata__":{"a":1}}`, nil), `key "a": want a string value, got a number`},
		{"metadata duplicate", rawFile(`{"__metadata__":{"a":"1","a":"2"}}`, nil), `duplicate key "a"`},
		{"metadata twice", rawFile(`{"__metadata__":{},"__metadata__":{}}`, nil), `duplicate key "__metadata__"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := openBytes(c.file)
			if err == nil {
				t.Fatalf("opened %q with tensors %q, want an error containing %q", c.file, f.Names(), c.want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %q does not wrap ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not contain %q", err, c.want)
			}
		})
	}

	// Valid edge cases.
	for name, file := range map[string][]byte{
		"no tensors":    rawFile(`{}`, nil),
		"null metadata": rawFile(`{"__metadata__":null}`, nil),
		"zero-size":     rawFile("{"+entry("a", "F32", "[0,3]", "[0,0]")+","+entry("b", "U8", "[1]", "[0,1]")+"}", []byte{9}),
	} {
		if _, err := openBytes(file); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestTruncated(t *testing.T) {
	file := encode(t, sampleTensors(), map[string]string{"a": "b"})
	for n := 0; n < len(file); n++ {
		f, err := openBytes(file[:n])
		if err == nil {
			t.Fatalf("file truncated to %d of %d bytes opened with tensors %q", n, len(file), f.Names())
		}
		if !errors.Is(err, ErrInvalid) {
			t.Fatalf("truncated to %d bytes: error %q does not wrap ErrInvalid", n, err)
		}
	}
	// Truncation after Open surfaces when the data is read.
	path := filepath.Join(t.TempDir(), "t.safetensors")
	if err := os.WriteFile(path, file, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.Truncate(path, int64(len(file)-3)); err != nil {
		t.Fatal(err)
	}
	last := f.Tensors()[len(f.Tensors())-1].Name
	if _, err := f.Raw(last); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), last) {
		t.Errorf("Raw after truncation: err = %v, want one naming %s and %q", err, path, last)
	}
}

// TestCorruptHeader overwrites each header byte with a few values: every
// result must either fail cleanly or describe readable tensors.
func TestCorruptHeader(t *testing.T) {
	file := encode(t, sampleTensors(), map[string]string{"k": "v"})
	n := int(binary.LittleEndian.Uint64(file))
	for pos := 0; pos < 8+n; pos++ {
		for _, v := range []byte{0, ' ', '"', '{', '}', '[', ',', '9', '-', 0xff, file[pos] ^ 0x01} {
			b := append([]byte(nil), file...)
			b[pos] = v
			checkNoPanic(t, b)
		}
	}
}

// checkNoPanic opens b and, if that succeeds, reads every tensor every way.
func checkNoPanic(t *testing.T, b []byte) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("panic on %q: %v", b, r)
		}
	}()
	f, err := openBytes(b)
	if err != nil {
		if !errors.Is(err, ErrInvalid) {
			t.Fatalf("error %q does not wrap ErrInvalid", err)
		}
		return
	}
	for _, name := range f.Names() {
		info, _ := f.Info(name)
		raw, err := f.Raw(name)
		if err != nil || int64(len(raw)) != info.Size() {
			t.Fatalf("Raw(%q) = %d bytes, %v; want %d", name, len(raw), err, info.Size())
		}
		_, _ = f.Float32(name)
		_, _ = f.Int32(name)
	}
}

func TestWriteErrors(t *testing.T) {
	cases := []struct {
		name    string
		tensors []Tensor
		meta    map[string]string
		want    string
	}{
		{"empty name", []Tensor{F32Tensor("", []int{1}, []float32{1})}, nil, "empty name"},
		{"reserved name", []Tensor{F32Tensor("__metadata__", []int{1}, []float32{1})}, nil, "reserved"},
		{"duplicate", []Tensor{F32Tensor("a", []int{1}, []float32{1}), F32Tensor("a", []int{1}, []float32{2})}, nil, `duplicate tensor name "a"`},
		{"bad dtype", []Tensor{{Name: "a", DType: "float32", Shape: []int{1}, Data: make([]byte, 4)}}, nil, `unknown dtype "float32"`},
		{"negative dim", []Tensor{{Name: "a", DType: "U8", Shape: []int{-1}}}, nil, "negative"},
		{"short data", []Tensor{F32Tensor("a", []int{2, 2}, []float32{1, 2, 3})}, nil, "needs 16 bytes, got 12"},
		{"invalid utf8 name", []Tensor{F32Tensor("\xff", []int{1}, []float32{1})}, nil, "UTF-8"},
		{"invalid utf8 metadata", nil, map[string]string{"a": "\xff"}, "UTF-8"},
		{"sub-byte", []Tensor{{Name: "a", DType: "F4", Shape: []int{1}, Data: []byte{0}}}, nil, "whole bytes"},
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "keep.safetensors")
	if err := Write(path, []Tensor{F32Tensor("old", []int{1}, []float32{1})}, nil); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := Write(path, c.tensors, c.meta)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("err = %v, want one naming %s and containing %q", err, path, c.want)
			}
		})
	}
	after, _ := os.ReadFile(path)
	if !bytes.Equal(before, after) {
		t.Errorf("a failed Write changed the existing file")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("directory holds %q, want only keep.safetensors (temp files left behind?)", names)
	}
}

func TestWriteReplaces(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "w.safetensors")
	for i, v := range []float32{1, 2} {
		if err := Write(path, []Tensor{F32Tensor("x", []int{1}, []float32{v})}, nil); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if v, err := f.Float32("x"); err != nil || v[0] != 2 {
		t.Errorf("after overwrite x = %v, %v; want [2]", v, err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("mode = %v, %v; want 0644", st.Mode(), err)
	}
	if err := Write(filepath.Join(dir, "missing", "x.safetensors"), nil, nil); err == nil {
		t.Errorf("Write into a missing directory succeeded")
	}
}

func TestOpenPathErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(filepath.Join(dir, "nope.safetensors")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open(missing) = %v, want ErrNotExist", err)
	}
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "directory") {
		t.Errorf("Open(dir) = %v, want a directory error", err)
	}
	bad := filepath.Join(dir, "bad.safetensors")
	if err := os.WriteFile(bad, []byte("PK\x03\x04 this is a zip file, not safetensors"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(bad); err == nil || !strings.Contains(err.Error(), bad) || !errors.Is(err, ErrInvalid) {
		t.Errorf("Open(zip) = %v, want ErrInvalid naming the file", err)
	}
}

func FuzzOpen(f *testing.F) {
	f.Add(encodeSeed(sampleTensors(), map[string]string{"a": "b"}))
	f.Add(encodeSeed([]Tensor{F32Tensor("q", []int{1, 2, 2, 1}, []float32{1, 2, 3, 4})}, nil))
	f.Add(rawFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, []byte{1}))
	f.Add(rawFile(`{"__metadata__":{"x":"y"}}`, nil))
	f.Add([]byte{})
	f.Add([]byte("\xff\xff\xff\xff\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := openBytes(b)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %q does not wrap ErrInvalid", err)
			}
			return
		}
		// A file that opens reads back completely and re-encodes to a file
		// with the same content.
		var tensors []Tensor
		for _, name := range file.Names() {
			info, _ := file.Info(name)
			raw, err := file.Raw(name)
			if err != nil {
				t.Fatalf("Raw(%q): %v", name, err)
			}
			_, _ = file.Float32(name)
			_, _ = file.Int32(name)
			tensors = append(tensors, Tensor{Name: name, DType: info.DType, Shape: info.Shape, Data: raw})
		}
		var buf bytes.Buffer
		if err := Encode(&buf, tensors, file.Metadata()); err != nil {
			if strings.Contains(err.Error(), "empty name") {
				return // an empty tensor name is readable but not writable
			}
			t.Fatalf("re-encode: %v", err)
		}
		again, err := openBytes(buf.Bytes())
		if err != nil {
			t.Fatalf("re-open: %v", err)
		}
		if !reflect.DeepEqual(again.Names(), file.Names()) || !reflect.DeepEqual(again.Metadata(), file.Metadata()) {
			t.Fatalf("round trip changed names or metadata")
		}
	})
}

func encodeSeed(tensors []Tensor, meta map[string]string) []byte {
	var buf bytes.Buffer
	if err := Encode(&buf, tensors, meta); err != nil {
		panic(err)
	}
	return buf.Bytes()
}
