package engine

import (
	"encoding/binary"
	"fmt"
)

// ArgMaxer is implemented by a Device that picks each row's largest value
// on the device, so that greedy decoding reads back one id per sequence
// instead of every logit (6 MB a step for 32 sequences of a 50k
// vocabulary).
type ArgMaxer interface {
	// ArgMaxRows writes to out (I32 [N]) the index of the largest of the
	// first classes columns of each row of x [N, W] (floating, classes in
	// [1, W]); ties go to the lowest index. A row holding a NaN among those
	// columns gets -1, so that a broken forward cannot pass for a choice.
	ArgMaxRows(out, x *Tensor, classes int) error
}

// CheckArgMaxRows validates ArgMaxRows and returns (N, W).
func CheckArgMaxRows(own Owner, out, x *Tensor, classes int) (n, w int, err error) {
	const op = "argmax rows"
	if err = need(op, "x", x, 2, "[N,W]"); err != nil {
		return
	}
	if err = needFloats(op, []string{"x"}, x); err != nil {
		return
	}
	n, w = x.Dim(0), x.Dim(1)
	if out == nil || out.dtype != I32 || !out.shape.Equal(Shape{n}) {
		err = argErr(op, "out", "want I32 [%d], got %v", n, out)
		return
	}
	if classes < 1 || classes > w {
		err = argErr(op, "", "classes %d is not in [1, %d]", classes, w)
	}
	return n, w, own.after(err, op, out, x)
}

// ArgMaxRows is ArgMaxer's op on any device: the device's kernel where it
// has one, else the rows read back and reduced on the host (the same
// result, at the cost of the read).
func ArgMaxRows(dev Device, out, x *Tensor, classes int) error {
	if a, ok := dev.(ArgMaxer); ok {
		return a.ArgMaxRows(out, x, classes)
	}
	n, w, err := CheckArgMaxRows(nil, out, x, classes)
	if err != nil {
		return err
	}
	v, err := Float32s(x)
	if err != nil {
		return fmt.Errorf("argmax rows: %w", err)
	}
	ids := make([]int32, n)
	for r := range ids {
		best, bv := int32(0), v[r*w]
		for c := 0; c < classes; c++ {
			x := v[r*w+c]
			if x != x {
				best = -1
				break
			}
			if x > bv {
				best, bv = int32(c), x
			}
		}
		ids[r] = best
	}
	return dev.Write(out, int32Bytes(ids))
}

func int32Bytes(v []int32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return b
}
