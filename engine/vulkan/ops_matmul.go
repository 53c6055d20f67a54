package vulkan

import (
	"fmt"

	"github.com/parallax-engine/parallax/engine"
)

// MatMul: a tiled shared-memory kernel (shaders/matmul.comp) on every
// device, with tiles of 64 x 64 (smaller for small matrices); on devices
// with VK_NV_cooperative_matrix, products whose inputs are both f16 use
// the tensor-core kernel (shaders/matmul_coop.comp) instead, and on
// devices with VK_KHR_cooperative_matrix only (AMD, Intel, lavapipe) its
// twin shaders/matmul_coop_khr.comp with the fragment shape the device
// reports (features.go, matmulPath). Decode
// products (1 to 8 rows against a transposed weight) take the GEMV kernel
// (ops_gemv.go).

const mmWG = 256

// MatMul computes out = op(a) op(b) (+ out); see engine.Ops.
func (d *Device) MatMul(o, a, b *engine.Tensor, opts engine.MatMulOpts) error {
	dims, err := engine.CheckMatMul(o, a, b, opts)
	if err != nil {
		return err
	}
	if err := d.own("matmul", o, a, b); err != nil {
		return err
	}
	if dims.Batch == 0 || dims.M == 0 || dims.N == 0 {
		return nil
	}
	if dims.K == 0 {
		if opts.Accumulate {
			return nil
		}
		return d.Fill(o, 0)
	}
	if rows := d.gemvRows(dims, opts, o, a); rows > 0 {
		return d.matmulGEMV(o, a, b, opts, dims, rows)
	}
	if d.useCoop(a, b, dims) {
		return d.matmulCoop(o, a, b, opts, dims)
	}
	return d.matmulScalar(o, a, b, opts, dims)
}

// mmTile picks the tile edge for a dimension: 64, or 32/16 for small ones.
func mmTile(n int) uint32 {
	switch {
	case n <= 16:
		return 16
	case n <= 32:
		return 32
	}
	return 64
}

func (d *Device) matmulScalar(o, a, b *engine.Tensor, opts engine.MatMulOpts, dims engine.MatMulDims) error {
	tm, tn := mmTile(dims.M), mmTile(dims.N)
	sb := dims.K * dims.N
	if dims.SharedB {
		sb = 0
	}
	gx := (dims.N + int(tn) - 1) / int(tn)
	gy := (dims.M + int(tm) - 1) / int(tm)
	maxZ := int(d.pd.lim.maxGroupCount[2])
	for z0 := 0; z0 < dims.Batch; z0 += maxZ {
		nz := min(maxZ, dims.Batch-z0)
		pc := push(uint32(dims.M), uint32(dims.N), uint32(dims.K), opts.TransA, opts.TransB, opts.Accumulate,
			uint32(dims.M*dims.K), uint32(sb), uint32(dims.M*dims.N), uint32(z0))
		d.profileGemm(o, a, b, opts, dims, nz)
		if err := d.launch("matmul", mmWG, spec{1: tm, 2: tn, 3: 16}, pc, grid{uint32(gx), uint32(gy), uint32(nz)}, in(a), in(b), out(o)); err != nil {
			return err
		}
	}
	return nil
}

// useCoop reports whether a cooperative-matrix kernel handles a product.
func (d *Device) useCoop(a, b *engine.Tensor, dims engine.MatMulDims) bool {
	if a.DType() != engine.F16 || b.DType() != engine.F16 {
		return false
	}
	switch d.mm.kind {
	case coopNV:
		return d.subgroup == 32
	case coopKHR:
		return true
	}
	return false
}

// matmulCoop runs the device's cooperative-matrix kernel: matmul_coop, 64
// x 64 tiles of four 32-wide subgroups, or matmul_coop_khr, 4 x 4
// fragments of the chosen shape of four subgroups of the device's size.
func (d *Device) matmulCoop(o, a, b *engine.Tensor, opts engine.MatMulOpts, dims engine.MatMulDims) error {
	kernel, wg, tm, tn := "matmul_coop", 128, 64, 64
	var sp spec
	if d.mm.kind == coopKHR {
		s := d.mm.shape
		kernel, wg, tm, tn = "matmul_coop_khr", 4*d.subgroup, 4*s.M, 4*s.N
		sp = spec{1: uint32(s.M), 2: uint32(s.N), 3: uint32(s.K)}
	}
	sb := dims.K * dims.N
	if dims.SharedB {
		sb = 0
	}
	gx := (dims.N + tn - 1) / tn
	gy := (dims.M + tm - 1) / tm
	maxZ := int(d.pd.lim.maxGroupCount[2])
	for z0 := 0; z0 < dims.Batch; z0 += maxZ {
		nz := min(maxZ, dims.Batch-z0)
		pc := push(uint32(dims.M), uint32(dims.N), uint32(dims.K), opts.TransA, opts.TransB, opts.Accumulate,
			uint32(dims.M*dims.K), uint32(sb), uint32(dims.M*dims.N), uint32(z0))
		d.profileGemm(o, a, b, opts, dims, nz)
		if err := d.launch(kernel, wg, sp, pc, grid{uint32(gx), uint32(gy), uint32(nz)}, in(a), in(b), out(o)); err != nil {
			return err
		}
	}
	return nil
}

// checkCoop runs a small f16 product (odd sizes, a transposed operand,
// accumulation) through the cooperative-matrix kernel and the scalar one
// and keeps the former only if they agree; it returns why not otherwise.
func (d *Device) checkCoop() string {
	const m, k, n = 70, 45, 83
	a, err := engine.FromFloat32(d, engine.F16, selfTestValues(m*k, 1), k, m)
	if err != nil {
		return err.Error()
	}
	defer d.Free(a)
	b, err := engine.FromFloat32(d, engine.F16, selfTestValues(k*n, 2), k, n)
	if err != nil {
		return err.Error()
	}
	defer d.Free(b)
	c0 := selfTestValues(m*n, 3)
	var got [2][]float32
	for i := range got {
		c, err := engine.FromFloat32(d, engine.F32, c0, m, n)
		if err != nil {
			return err.Error()
		}
		opts := engine.MatMulOpts{TransA: true, Accumulate: true}
		dims := engine.MatMulDims{Batch: 1, M: m, N: n, K: k, SharedB: true}
		if i == 0 {
			err = d.matmulCoop(c, a, b, opts, dims)
		} else {
			err = d.matmulScalar(c, a, b, opts, dims)
		}
		if err == nil {
			got[i], err = engine.Float32s(c)
		}
		if err == nil {
			err = d.Sync()
		}
		d.Free(c)
		if err != nil {
			return err.Error()
		}
	}
	var worst, scale float64
	for i := range got[0] {
		worst = max(worst, abs64(float64(got[0][i]-got[1][i])))
		scale = max(scale, abs64(float64(got[1][i])))
	}
	if !(worst <= 1e-3*max(scale, 1)) {
		return fmt.Sprintf("self-test mismatch %.3g against the scalar kernel", worst)
	}
	return ""
}

// selfTestValues returns count values in [-1, 1] in steps of 1/1000 from a
// linear congruential sequence of seed: the self-tests' inputs, the same
// on every device and run.
func selfTestValues(count int, seed uint32) []float32 {
	out := make([]float32, count)
	for i := range out {
		seed = seed*1664525 + 1013904223
		out[i] = float32(int32(seed>>8)%2001-1000) / 1000
	}
	return out
}

func abs64(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
