package shaders

import (
	"encoding/binary"
	"fmt"
	"sort"
	"strings"
	"testing"
)

// SPIR-V opcodes and the storage class this test reads.
const (
	opTypeArray            = 28
	opTypePointer          = 32
	opConstant             = 43
	opVariable             = 59
	opAccessChain          = 65
	opInBoundsAccessChain  = 66
	storageClassFunction   = 7
	spirvMagic             = 0x07230203
	spirvHeaderWords       = 5
	spirvWordCountShift    = 16
	spirvOpcodeMask        = 0xffff
	accessChainBaseOperand = 3 // result type, result id, base, indexes...
)

// dynamicArrayAccesses counts the accesses to private (Function storage)
// arrays whose index is not a literal constant. NVIDIA's compiler keeps
// such arrays in local memory unless its own unrolling makes every index
// constant, which it does not do for loops bounded by specialization
// constants: a tenfold slowdown for the kernels that hit it.
func dynamicArrayAccesses(code []byte) (int, error) {
	if len(code)%4 != 0 || len(code) < 4*spirvHeaderWords {
		return 0, fmt.Errorf("not SPIR-V: %d bytes", len(code))
	}
	w := make([]uint32, len(code)/4)
	for i := range w {
		w[i] = binary.LittleEndian.Uint32(code[4*i:])
	}
	if w[0] != spirvMagic {
		return 0, fmt.Errorf("not SPIR-V: magic %#x", w[0])
	}
	arrays := map[uint32]bool{}    // array type ids
	arrayPtrs := map[uint32]bool{} // Function pointer-to-array type ids
	arrayVars := map[uint32]bool{} // Function variables of those types
	constants := map[uint32]bool{} // OpConstant ids
	var n int
	for i := spirvHeaderWords; i < len(w); {
		count, op := int(w[i]>>spirvWordCountShift), w[i]&spirvOpcodeMask
		if count == 0 || i+count > len(w) {
			return 0, fmt.Errorf("instruction at word %d runs past the end", i)
		}
		ins := w[i : i+count]
		switch op {
		case opTypeArray:
			arrays[ins[1]] = true
		case opTypePointer:
			if ins[2] == storageClassFunction && arrays[ins[3]] {
				arrayPtrs[ins[1]] = true
			}
		case opConstant:
			constants[ins[2]] = true
		case opVariable:
			if arrayPtrs[ins[1]] {
				arrayVars[ins[2]] = true
			}
		case opAccessChain, opInBoundsAccessChain:
			if count > accessChainBaseOperand+1 && arrayVars[ins[accessChainBaseOperand]] &&
				!constants[ins[accessChainBaseOperand+1]] {
				n++
			}
		}
		i += count
	}
	return n, nil
}

// TestNoDynamicPrivateArrays keeps the kernels' register arrays in
// registers: attn_decode (whose bandwidth depends on it) and the view
// kernels may index none by a variable; the others may not index more
// than they do now (the driver resolves these after specialization; the
// H200 reports 0 bytes of local memory for every kernel at these counts).
func TestNoDynamicPrivateArrays(t *testing.T) {
	ceiling := map[string]int{
		"attn_dkv": 2, "attn_dq": 2, "attn_fwd": 2,
		"lla": 1, "matmul": 8, "view_draw": 1, "view_draw.rgba8": 1,
	}
	names := Names()
	sort.Strings(names)
	if len(names) == 0 {
		t.Fatal("no embedded SPIR-V")
	}
	for _, name := range names {
		code, ok := SPIRV(name)
		if !ok {
			t.Fatalf("%s listed but not embedded", name)
		}
		n, err := dynamicArrayAccesses(code)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		base := strings.TrimSuffix(name, ".no16")
		if limit := ceiling[base]; n > limit {
			t.Errorf("%s indexes private arrays by a variable %d times (at most %d): on NVIDIA they would live in local memory; use vectors or loops with literal trip counts (docs/VULKAN.md)", name, n, limit)
		}
	}
}

// TestDynamicArrayCounter checks the counter on the kernel built to have
// none and on one known to have some.
func TestDynamicArrayCounter(t *testing.T) {
	for _, tc := range []struct {
		name string
		some bool
	}{{"attn_decode", false}, {"matmul", true}} {
		code, ok := SPIRV(tc.name)
		if !ok {
			t.Fatalf("no %s", tc.name)
		}
		n, err := dynamicArrayAccesses(code)
		if err != nil {
			t.Fatal(err)
		}
		if (n > 0) != tc.some {
			t.Errorf("%s: %d variable-indexed accesses", tc.name, n)
		}
	}
	if _, err := dynamicArrayAccesses([]byte{1, 2, 3, 4, 5, 6, 7, 8}); err == nil {
		t.Error("8 bytes of garbage accepted as SPIR-V")
	}
}
