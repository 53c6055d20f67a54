// Package safetensors reads and writes the safetensors tensor file format:
// an 8-byte little-endian header length N, N bytes of JSON header describing
// each tensor (dtype, shape, byte range) plus optional string metadata under
// "__metadata__", then the tensors' raw little-endian data.
//
// Reading validates the whole header before any data is touched and returns
// an error wrapping ErrInvalid for anything malformed: a truncated file, an
// absurd header length, invalid JSON or UTF-8, duplicate names, unknown
// dtypes, byte ranges that leave gaps, overlap, run past the end of the file
// or disagree with dtype and shape. It never panics on bad input. Open reads
// only the header; each tensor's bytes are read when asked for, so a large
// checkpoint can be loaded one tensor at a time.
//
// Writing lays tensors out in a deterministic order (widest dtype first,
// then by name, so each tensor starts aligned to its element size), pads the
// header with spaces so the data starts 8-byte aligned, and replaces the
// destination atomically.
package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxHeaderSize is the largest JSON header accepted, in bytes (the limit of
// the reference implementation). A larger length prefix means the file is
// not safetensors or is corrupt.
const MaxHeaderSize = 100_000_000

// metadataKey is the header key holding the free-form string metadata.
const metadataKey = "__metadata__"

// ErrInvalid is wrapped by every error that reports a malformed file.
var ErrInvalid = errors.New("not a valid safetensors file")

// ErrNotFound is wrapped by the errors of File methods asked for a tensor
// the file does not hold.
var ErrNotFound = errors.New("no such tensor")

// TensorInfo describes one tensor of a file.
type TensorInfo struct {
	Name  string
	DType string // a safetensors dtype name: "F32", "BF16", "I64", ...
	Shape []int  // dimensions, outermost first; empty for a scalar
	// Begin and End delimit the tensor's bytes, relative to the start of the
	// data section (which follows the header).
	Begin, End int64
}

// Numel is the number of elements (the product of Shape, 1 for a scalar).
func (t TensorInfo) Numel() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Size is the number of data bytes.
func (t TensorInfo) Size() int64 { return t.End - t.Begin }

// File is an open safetensors file. Its read methods may be called
// concurrently; Close must not overlap them.
type File struct {
	name      string // path, for error messages; "" for OpenReader
	r         io.ReaderAt
	closer    io.Closer
	dataStart int64 // 8 + header length
	infos     map[string]TensorInfo
	order     []string // names in data order
	metadata  map[string]string
}

// Open reads and validates the header of the safetensors file at path. The
// tensors' data is read on demand by Raw, Float32 and Int32; Close releases
// the file.
func Open(path string) (*File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := fh.Stat()
	if err != nil {
		fh.Close()
		return nil, err
	}
	if st.IsDir() {
		fh.Close()
		return nil, fmt.Errorf("%s: is a directory, not a safetensors file", path)
	}
	f, err := parse(fh, st.Size())
	if err != nil {
		fh.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f.name = path
	f.closer = fh
	return f, nil
}

// OpenReader reads and validates a safetensors header from r, which holds
// size bytes. r must stay readable until the File is no longer used; Close
// does not close it.
func OpenReader(r io.ReaderAt, size int64) (*File, error) {
	return parse(r, size)
}

// Close releases the file opened by Open. It is a no-op for OpenReader.
func (f *File) Close() error {
	if f.closer == nil {
		return nil
	}
	err := f.closer.Close()
	f.closer = nil
	return err
}

// Names returns the tensor names, sorted.
func (f *File) Names() []string {
	out := append([]string(nil), f.order...)
	sort.Strings(out)
	return out
}

// Tensors describes every tensor in the order their data appears in the file.
func (f *File) Tensors() []TensorInfo {
	out := make([]TensorInfo, len(f.order))
	for i, n := range f.order {
		out[i], _ = f.Info(n)
	}
	return out
}

// Info describes the named tensor; ok is false if the file has none.
func (f *File) Info(name string) (info TensorInfo, ok bool) {
	info, ok = f.infos[name]
	info.Shape = append([]int(nil), info.Shape...)
	return info, ok
}

// Metadata returns a copy of the header's "__metadata__" map (empty, not
// nil, when the file has none).
func (f *File) Metadata() map[string]string {
	out := make(map[string]string, len(f.metadata))
	for k, v := range f.metadata {
		out[k] = v
	}
	return out
}

// errorf prefixes a tensor error with the file name, when there is one.
func (f *File) errorf(name string, err error) error {
	if f.name == "" {
		return fmt.Errorf("tensor %q: %w", name, err)
	}
	return fmt.Errorf("%s: tensor %q: %w", f.name, name, err)
}

// Raw reads the named tensor's little-endian bytes.
func (f *File) Raw(name string) ([]byte, error) {
	info, ok := f.infos[name]
	if !ok {
		return nil, f.errorf(name, ErrNotFound)
	}
	buf := make([]byte, info.Size())
	if err := readAt(f.r, buf, f.dataStart+info.Begin); err != nil {
		return nil, f.errorf(name, fmt.Errorf("read %d bytes at offset %d: %w (was the file changed after it was opened?)",
			len(buf), f.dataStart+info.Begin, err))
	}
	return buf, nil
}

// readAt fills buf from r at off; a short read is io.ErrUnexpectedEOF.
func readAt(r io.ReaderAt, buf []byte, off int64) error {
	n, err := r.ReadAt(buf, off)
	if n == len(buf) {
		return nil // io.ReaderAt may report io.EOF along with a full read
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// Float32 reads the named tensor converted to float32. It accepts F32, F64
// (rounded), BF16, F16 and the FP8 types; other dtypes are an error.
func (f *File) Float32(name string) ([]float32, error) {
	info, ok := f.infos[name]
	if !ok {
		return nil, f.errorf(name, ErrNotFound)
	}
	if _, err := decodeFloat32(info.DType, nil); err != nil { // reject before reading
		return nil, f.errorf(name, err)
	}
	raw, err := f.Raw(name)
	if err != nil {
		return nil, err
	}
	out, err := decodeFloat32(info.DType, raw)
	if err != nil {
		return nil, f.errorf(name, err)
	}
	return out, nil
}

// Int32 reads the named tensor converted to int32. It accepts I32, I16, I8,
// U16, U8 and BOOL, and U32, I64 and U64 when every value fits in an int32.
func (f *File) Int32(name string) ([]int32, error) {
	info, ok := f.infos[name]
	if !ok {
		return nil, f.errorf(name, ErrNotFound)
	}
	if _, err := decodeInt32(info.DType, nil); err != nil { // reject before reading
		return nil, f.errorf(name, err)
	}
	raw, err := f.Raw(name)
	if err != nil {
		return nil, err
	}
	out, err := decodeInt32(info.DType, raw)
	if err != nil {
		return nil, f.errorf(name, err)
	}
	return out, nil
}

// invalid returns an error wrapping ErrInvalid.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// parse reads the length prefix and the header from r and validates them
// against the size of the whole file.
func parse(r io.ReaderAt, size int64) (*File, error) {
	if size < 8 {
		return nil, invalid("the file is %d bytes, shorter than the 8-byte header length prefix", size)
	}
	var prefix [8]byte
	if err := readAt(r, prefix[:], 0); err != nil {
		return nil, fmt.Errorf("read header length: %w", err)
	}
	n := binary.LittleEndian.Uint64(prefix[:])
	if n > MaxHeaderSize {
		return nil, invalid("header length %d exceeds the %d-byte limit (not a safetensors file, or a corrupt one)", n, MaxHeaderSize)
	}
	if int64(n) > size-8 {
		return nil, invalid("header length %d exceeds the %d bytes that follow the length prefix (file truncated?)", n, size-8)
	}
	header := make([]byte, n)
	if err := readAt(r, header, 8); err != nil {
		return nil, fmt.Errorf("read %d-byte header: %w", n, err)
	}
	f, err := parseHeader(header, size-8-int64(n))
	if err != nil {
		return nil, err
	}
	f.r = r
	f.dataStart = 8 + int64(n)
	return f, nil
}

// field is one key and raw value of a JSON object, in document order.
type field struct {
	key string
	raw json.RawMessage
}

// objectFields splits a JSON object into its fields, rejecting anything that
// is not an object, duplicate keys and trailing data.
func objectFields(data []byte) ([]field, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return nil, jsonErr(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("want a JSON object, got %s", describeToken(tok))
	}
	var out []field
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, jsonErr(err)
		}
		key, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("want an object key, got %s", describeToken(tok))
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("value of %q: %w", key, jsonErr(err))
		}
		if seen[key] {
			return nil, fmt.Errorf("duplicate key %q", key)
		}
		seen[key] = true
		out = append(out, field{key, raw})
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, jsonErr(err)
	}
	if tok, err := dec.Token(); err != io.EOF {
		if err != nil {
			return nil, fmt.Errorf("after the object: %w", jsonErr(err))
		}
		return nil, fmt.Errorf("unexpected %s after the object", describeToken(tok))
	}
	return out, nil
}

func jsonErr(err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return errors.New("unexpected end of JSON")
	}
	return err
}

func describeToken(tok any) string {
	switch t := tok.(type) {
	case json.Delim:
		return fmt.Sprintf("%q", string(t))
	case string:
		return fmt.Sprintf("string %q", t)
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T %v", tok, tok)
}

// kindOf names the JSON type of a raw value, for error messages.
func kindOf(raw json.RawMessage) string {
	s := bytes.TrimSpace(raw)
	if len(s) == 0 {
		return "nothing"
	}
	switch s[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 'n':
		return "null"
	case 't', 'f':
		return "a boolean"
	}
	return "a number"
}

// parseHeader validates the JSON header against a data section of dataLen
// bytes.
func parseHeader(header []byte, dataLen int64) (*File, error) {
	if !utf8.Valid(header) {
		return nil, invalid("header is not valid UTF-8")
	}
	fields, err := objectFields(header)
	if err != nil {
		return nil, invalid("header JSON: %v", err)
	}
	f := &File{infos: make(map[string]TensorInfo, len(fields)), metadata: map[string]string{}}
	var infos []TensorInfo
	for _, fl := range fields {
		if fl.key == metadataKey {
			if f.metadata, err = parseMetadata(fl.raw); err != nil {
				return nil, invalid("header: %s: %v", metadataKey, err)
			}
			continue
		}
		info, err := parseEntry(fl.key, fl.raw)
		if err != nil {
			return nil, invalid("header: tensor %q: %v", fl.key, err)
		}
		infos = append(infos, info)
	}
	if err := checkLayout(infos, dataLen); err != nil {
		return nil, err
	}
	for _, info := range infos {
		f.infos[info.Name] = info
		f.order = append(f.order, info.Name)
	}
	return f, nil
}

func parseMetadata(raw json.RawMessage) (map[string]string, error) {
	out := map[string]string{}
	if kindOf(raw) == "null" {
		return out, nil
	}
	if kindOf(raw) != "an object" {
		return nil, fmt.Errorf("want an object of strings, got %s", kindOf(raw))
	}
	fields, err := objectFields(raw)
	if err != nil {
		return nil, err
	}
	for _, fl := range fields {
		if kindOf(fl.raw) != "a string" {
			return nil, fmt.Errorf("key %q: want a string value, got %s", fl.key, kindOf(fl.raw))
		}
		var s string
		if err := json.Unmarshal(fl.raw, &s); err != nil {
			return nil, fmt.Errorf("key %q: %v", fl.key, err)
		}
		out[fl.key] = s
	}
	return out, nil
}

// parseEntry validates one tensor's header entry (but not its byte range
// against the others).
func parseEntry(name string, raw json.RawMessage) (TensorInfo, error) {
	info := TensorInfo{Name: name}
	if kindOf(raw) != "an object" {
		return info, fmt.Errorf("want an object with dtype, shape and data_offsets, got %s", kindOf(raw))
	}
	fields, err := objectFields(raw)
	if err != nil {
		return info, err
	}
	var haveDType, haveShape, haveOffsets bool
	var offsets []int64
	for _, fl := range fields {
		switch fl.key {
		case "dtype":
			if kindOf(fl.raw) != "a string" {
				return info, fmt.Errorf("dtype: want a string, got %s", kindOf(fl.raw))
			}
			if err := json.Unmarshal(fl.raw, &info.DType); err != nil {
				return info, fmt.Errorf("dtype: %v", err)
			}
			haveDType = true
		case "shape":
			dims, err := intArray(fl.raw)
			if err != nil {
				return info, fmt.Errorf("shape: %v", err)
			}
			info.Shape = make([]int, len(dims))
			for i, d := range dims {
				if d > math.MaxInt {
					return info, fmt.Errorf("shape: dimension %d is too large", i)
				}
				info.Shape[i] = int(d)
			}
			haveShape = true
		case "data_offsets":
			offs, err := intArray(fl.raw)
			if err != nil {
				return info, fmt.Errorf("data_offsets: %v", err)
			}
			if len(offs) != 2 {
				return info, fmt.Errorf("data_offsets: want [begin, end], got %d numbers", len(offs))
			}
			for _, o := range offs {
				if o > math.MaxInt64 {
					return info, fmt.Errorf("data_offsets: %d is too large", o)
				}
				offsets = append(offsets, int64(o))
			}
			haveOffsets = true
		}
		// Other keys are ignored, as the reference implementation does.
	}
	switch {
	case !haveDType:
		return info, errors.New("missing dtype")
	case !haveShape:
		return info, errors.New("missing shape")
	case !haveOffsets:
		return info, errors.New("missing data_offsets")
	}
	bitsPer := DTypeBits(info.DType)
	if bitsPer == 0 {
		return info, fmt.Errorf("unknown dtype %q (want one of %s)", info.DType, strings.Join(DTypes(), ", "))
	}
	info.Begin, info.End = offsets[0], offsets[1]
	if info.End < info.Begin {
		return info, fmt.Errorf("data_offsets [%d, %d]: end is before begin", info.Begin, info.End)
	}
	want, err := dataSize(info.DType, info.Shape)
	if err != nil {
		return info, err
	}
	if got := uint64(info.End - info.Begin); got != want {
		return info, fmt.Errorf("data_offsets [%d, %d] hold %d bytes, but %s %v needs %d",
			info.Begin, info.End, got, info.DType, shapeString(info.Shape), want)
	}
	return info, nil
}

// intArray decodes a JSON array of non-negative integers.
func intArray(raw json.RawMessage) ([]uint64, error) {
	if kindOf(raw) != "an array" {
		return nil, fmt.Errorf("want an array of non-negative integers, got %s", kindOf(raw))
	}
	var nums []json.RawMessage
	if err := json.Unmarshal(raw, &nums); err != nil {
		return nil, fmt.Errorf("want an array of non-negative integers: %v", err)
	}
	out := make([]uint64, len(nums))
	for i, n := range nums {
		v, err := strconv.ParseUint(string(bytes.TrimSpace(n)), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("element %d: want a non-negative integer, got %s", i, n)
		}
		out[i] = v
	}
	return out, nil
}

// dataSize is the byte count of a dtype tensor of the given shape, failing
// on overflow or a sub-byte tensor that does not fill whole bytes.
func dataSize(dtype string, shape []int) (uint64, error) {
	numel := uint64(1)
	for _, d := range shape {
		hi, lo := bits.Mul64(numel, uint64(d))
		if hi != 0 || lo > math.MaxInt64/64 {
			return 0, fmt.Errorf("shape %v: too many elements", shapeString(shape))
		}
		numel = lo
	}
	nbits := numel * uint64(DTypeBits(dtype))
	if nbits%8 != 0 {
		return 0, fmt.Errorf("%s %v: %d elements of %d bits do not fill whole bytes",
			dtype, shapeString(shape), numel, DTypeBits(dtype))
	}
	return nbits / 8, nil
}

func shapeString(s []int) string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = fmt.Sprint(d)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// checkLayout requires the tensors' byte ranges to tile the data section
// exactly: no range past its end, no overlap, no gap, no trailing bytes.
func checkLayout(infos []TensorInfo, dataLen int64) error {
	for _, t := range infos {
		if t.End > dataLen {
			return invalid("tensor %q: data_offsets [%d, %d] run past the end of the %d-byte data section (file truncated?)",
				t.Name, t.Begin, t.End, dataLen)
		}
	}
	sorted := append([]TensorInfo(nil), infos...)
	sort.SliceStable(sorted, func(i, j int) bool {
		if sorted[i].Begin != sorted[j].Begin {
			return sorted[i].Begin < sorted[j].Begin
		}
		return sorted[i].End < sorted[j].End
	})
	var pos int64
	prev := ""
	for _, t := range sorted {
		switch {
		case t.Begin < pos:
			return invalid("tensor %q: data_offsets [%d, %d] overlap tensor %q, which ends at %d",
				t.Name, t.Begin, t.End, prev, pos)
		case t.Begin > pos:
			return invalid("tensor %q: data_offsets [%d, %d] leave bytes %d..%d of the data section unused",
				t.Name, t.Begin, t.End, pos, t.Begin)
		}
		pos, prev = t.End, t.Name
	}
	if pos != dataLen {
		return invalid("the tensors cover %d bytes but the data section has %d (trailing bytes, or a wrong header length)",
			pos, dataLen)
	}
	return nil
}
