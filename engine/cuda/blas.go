//go:build cgo

package cuda

// #include "shim.h"
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/parallax-engine/parallax/engine"
)

// ltWorkspace is the cuBLASLt workspace size.
const ltWorkspace = 32 << 20

// ltAlgo is an opaque cublasLtMatmulAlgo_t.
type ltAlgo [64]byte

// cudaDataType codes.
func ltType(dt engine.DType) C.int {
	switch dt {
	case engine.BF16:
		return 14
	case engine.F16:
		return 2
	}
	return 0
}

const computeF32 = 68 // CUBLAS_COMPUTE_32F: f32 accumulation, no TF32

// MatMul computes out = op(a) op(b) (+ out) through cuBLASLt with f32
// accumulation. bf16 or f16 inputs of one dtype go to the tensor cores
// directly (out of the same dtype or f32); f32 inputs use plain f32
// arithmetic (CUBLAS_COMPUTE_32F, no TF32), so f32 results keep f32
// accuracy. Other mixes are widened to f32 first.
//
// Row-major to cuBLAS's column-major: out^T = op(b)^T op(a)^T, so the
// library's A is b and its B is a, with m = N, n = M. A rank-2 b shared by
// the batch is a single product over the stacked rows of a when a is not
// transposed, else a loop over the batch.
func (d *Device) MatMul(out, a, b *engine.Tensor, o engine.MatMulOpts) error {
	dims, err := engine.CheckMatMul(out, a, b, o)
	if err != nil {
		return err
	}
	if err := d.own("matmul", out, a, b); err != nil {
		return err
	}
	if dims.Batch == 0 || dims.M == 0 || dims.N == 0 {
		return nil
	}
	if dims.K == 0 {
		if o.Accumulate {
			return nil
		}
		return d.Fill(out, 0)
	}
	at, bt, ot := a.DType(), b.DType(), out.DType()
	direct := at == bt && (at == engine.F32 && ot == engine.F32 || at != engine.F32 && (ot == at || ot == engine.F32))
	if direct {
		if ok, err := d.gemv(dims, o, out, a, b); ok {
			return err
		}
		return d.gemm(dims, o, ptr(a), ptr(b), ptr(out), at, ot)
	}
	// Widen whatever is not f32, multiply in f32, narrow the result.
	var tmp []*buffer
	defer func() {
		for _, t := range tmp {
			d.alloc.put(t)
		}
	}()
	widen := func(t *engine.Tensor, copyIn bool) (uint64, error) {
		if t.DType() == engine.F32 {
			return ptr(t), nil
		}
		s, err := d.scratch(int64(t.Numel()) * 4)
		if err != nil {
			return 0, err
		}
		tmp = append(tmp, s)
		if copyIn {
			if err := d.castRaw(s.ptr, engine.F32, ptr(t), t.DType(), int64(t.Numel())); err != nil {
				return 0, err
			}
		}
		return s.ptr, nil
	}
	pa, err := widen(a, true)
	if err != nil {
		return err
	}
	pb, err := widen(b, true)
	if err != nil {
		return err
	}
	po, err := widen(out, o.Accumulate)
	if err != nil {
		return err
	}
	if err := d.gemm(dims, o, pa, pb, po, engine.F32, engine.F32); err != nil {
		return err
	}
	if ot != engine.F32 {
		return d.castRaw(ptr(out), ot, po, engine.F32, int64(out.Numel()))
	}
	return nil
}

func alignOf(p uint64) C.int {
	a := C.int(256)
	for a > 1 && p%uint64(a) != 0 {
		a /= 2
	}
	return a
}

// gemm runs the product on device pointers: inputs of dtype in, output of
// dtype outT.
func (d *Device) gemm(dims engine.MatMulDims, o engine.MatMulOpts, pa, pb, po uint64, in, outT engine.DType) error {
	return d.gemmCD(dims, o, pa, pb, po, po, in, outT)
}

// gemmCD is gemm with the result pd apart from the addend pc (read when
// o.Accumulate; ltRunCD), both of dtype outT and out's shape.
func (d *Device) gemmCD(dims engine.MatMulDims, o engine.MatMulOpts, pa, pb, pc, pd uint64, in, outT engine.DType) error {
	M, N, K := dims.M, dims.N, dims.K
	es := int64(in.Size())
	g := C.pxcu_gemm{
		m: C.int(N), n: C.int(M), k: C.int(K),
		atype: ltType(in), btype: ltType(in), ctype: ltType(outT), compute: computeF32,
		ldc: C.longlong(N), batch: C.int(dims.Batch), alpha: 1,
	}
	if o.Accumulate {
		g.beta = 1
	}
	if o.TransB {
		g.transa, g.lda = 1, C.longlong(K)
	} else {
		g.lda = C.longlong(N)
	}
	if o.TransA {
		g.transb, g.ldb = 1, C.longlong(M)
	} else {
		g.ldb = C.longlong(K)
	}
	g.stridea, g.strideb, g.stridec = C.longlong(K*N), C.longlong(M*K), C.longlong(M*N)
	if !dims.SharedB {
		return d.ltRunCD(&g, pb, pa, pc, pd)
	}
	g.stridea = 0
	if !o.TransA {
		g.n, g.batch, g.strideb, g.stridec = C.int(dims.Batch*M), 1, 0, 0
		return d.ltRunCD(&g, pb, pa, pc, pd)
	}
	g.batch, g.strideb, g.stridec = 1, 0, 0
	os := int64(outT.Size())
	for i := 0; i < dims.Batch; i++ {
		off := uint64(int64(i) * int64(M*N) * os)
		if err := d.ltRunCD(&g, pb, pa+uint64(int64(i)*int64(M*K)*es), pc+off, pd+off); err != nil {
			return err
		}
	}
	return nil
}

// ltRun runs one cuBLASLt matmul with library operands A = pa, B = pb,
// C = D = pc, picking (and caching) an algorithm for the shape (pickAlgo).
func (d *Device) ltRun(g *C.pxcu_gemm, pa, pb, pc uint64) error { return d.ltRunCD(g, pa, pb, pc, pc) }

// ltRunCD is ltRun with the result D = pd apart from the addend C = pc.
func (d *Device) ltRunCD(g *C.pxcu_gemm, pa, pb, pc, pd uint64) error {
	g.align_a, g.align_b, g.align_c = alignOf(pa), alignOf(pb), min(alignOf(pc), alignOf(pd))
	algo, ok := d.algos[*g]
	if !ok {
		a, keep, err := d.pickAlgo(g, pa, pb)
		if err != nil {
			return err
		}
		if keep {
			d.algos[*g] = a
		}
		algo = a
	}
	prof := d.prof.on
	if prof {
		if err := d.profBegin(); err != nil {
			return fmt.Errorf("cuda matmul: %w", err)
		}
	}
	r := C.pxcu_lt_matmul_cd(d.ctx, d.lt, g, unsafe.Pointer(&algo[0]), C.CUdeviceptr(pa), C.CUdeviceptr(pb), C.CUdeviceptr(pc),
		C.CUdeviceptr(pd), C.CUdeviceptr(d.ltWS.ptr), C.size_t(ltWorkspace), d.stream)
	if r != 0 {
		return fmt.Errorf("cuda matmul: cublasLtMatmul failed (status %d) for m %d n %d k %d batch %d", int(r), g.m, g.n, g.k, g.batch)
	}
	if prof {
		return d.profEnd(gemmProfile(g))
	}
	return nil
}
