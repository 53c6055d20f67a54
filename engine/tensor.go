package engine

import (
	"fmt"
	"strings"
)

// Shape lists a tensor's dimensions, outermost first.
type Shape []int

// Numel is the number of elements (1 for a scalar, empty Shape).
func (s Shape) Numel() int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

// Equal reports whether s and o have the same rank and dimensions.
func (s Shape) Equal(o Shape) bool {
	if len(s) != len(o) {
		return false
	}
	for i := range s {
		if s[i] != o[i] {
			return false
		}
	}
	return true
}

// String formats the shape as [2,3,4].
func (s Shape) String() string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = fmt.Sprint(d)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// Clone returns a copy of s that shares no memory with it.
func (s Shape) Clone() Shape { return append(Shape(nil), s...) }

// Validate reports an error for a negative dimension or an element count that
// would overflow.
func (s Shape) Validate() error {
	n := int64(1)
	for i, d := range s {
		if d < 0 {
			return fmt.Errorf("shape %v: dimension %d is negative", s, i)
		}
		n *= int64(d)
		if n > 1<<46 {
			return fmt.Errorf("shape %v: too many elements", s)
		}
	}
	return nil
}

// CheckAlloc validates the dtype and shape of a backend's Alloc and returns
// the shape and the tensor's size in bytes. Errors begin with the backend's
// name: "cuda alloc: ...".
func CheckAlloc(backend string, dtype DType, shape []int) (Shape, int64, error) {
	s := Shape(shape)
	if err := s.Validate(); err != nil {
		return nil, 0, fmt.Errorf("%s alloc: %w", backend, err)
	}
	if dtype.Size() == 0 {
		return nil, 0, fmt.Errorf("%s alloc: unsupported dtype %v", backend, dtype)
	}
	return s, int64(s.Numel()) * int64(dtype.Size()), nil
}

// Tensor is a dense row-major array resident on one Device. Its storage is
// owned by the backend that allocated it; a Tensor is only ever passed to ops
// of that same device.
type Tensor struct {
	dev   Device
	dtype DType
	shape Shape
	buf   any
}

// NewTensor wraps backend storage as a Tensor. Only backends call it, from
// their Alloc.
func NewTensor(dev Device, dtype DType, shape Shape, storage any) *Tensor {
	return &Tensor{dev: dev, dtype: dtype, shape: shape.Clone(), buf: storage}
}

// Device is the device the tensor lives on.
func (t *Tensor) Device() Device { return t.dev }

// DType is the element type.
func (t *Tensor) DType() DType { return t.dtype }

// Shape returns a copy of the dimensions.
func (t *Tensor) Shape() Shape { return t.shape.Clone() }

// Dim returns dimension i; negative i counts from the end (-1 is the last).
func (t *Tensor) Dim(i int) int {
	if i < 0 {
		i += len(t.shape)
	}
	return t.shape[i]
}

// Rank is the number of dimensions.
func (t *Tensor) Rank() int { return len(t.shape) }

// Numel is the number of elements.
func (t *Tensor) Numel() int { return t.shape.Numel() }

// Bytes is the storage size in bytes.
func (t *Tensor) Bytes() int { return t.shape.Numel() * t.dtype.Size() }

// Storage is the backend's handle for the tensor's memory.
func (t *Tensor) Storage() any { return t.buf }

// Reshape returns a tensor sharing t's storage with a new shape of the same
// element count.
func (t *Tensor) Reshape(shape ...int) (*Tensor, error) {
	s := Shape(shape)
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if s.Numel() != t.Numel() {
		return nil, fmt.Errorf("reshape %v to %v: element counts differ (%d vs %d)", t.shape, s, t.Numel(), s.Numel())
	}
	return &Tensor{dev: t.dev, dtype: t.dtype, shape: s, buf: t.buf}, nil
}

// String describes the tensor as "bf16[2,3]".
func (t *Tensor) String() string {
	if t == nil {
		return "<nil tensor>"
	}
	return t.dtype.String() + t.shape.String()
}
