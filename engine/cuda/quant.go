//go:build cgo

package cuda

import (
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"sync"

	"github.com/parallax-engine/parallax/engine"
)

// The weight-only int8 ops (kernels in shaders/cuda/qgemv.cu and
// qgemm.cu). A product of bf16 or f16 x with at least qgemmEnv.minRows
// and at most qgemmMaxRows rows whose shapes the tensor-core kernel takes
// (K a multiple of 16, the group size a multiple of 64 or >= K, 16-byte
// aligned x and q) runs qgemm_*; any other of up to qgemvMaxRows rows whose
// shapes the matrix-vector kernels take (K and the group size multiples of
// 16, or the group >= K; 16-byte aligned x and q) streams the int8 weight
// once (qgemv_m*); every other product (prefill, larger batches, f32 x)
// dequantizes the weight into scratch of x's dtype (dequant_i8) and runs
// the MatMul over it, on the tensor cores for bf16 and f16.

const qmod = "qgemv"

// qgemvMaxRows is the most rows of x the matrix-vector kernels take
// (qgemv_m1 .. qgemv_m8). More rows would take passes of 8, each reading
// the weight again and each as costly as 8 rows' arithmetic: measured on
// the H200 (a qwen3-0.6b-shaped model, bf16 activations), a decode step of
// 32 sequences took 12.1 ms in four passes against 2.4 ms for bf16 on
// cuBLASLt, which the dequantized copy also runs on.
const qgemvMaxRows = 8

// qgemvOff sends every int8 product to the dequantize-and-multiply path
// (PARALLAX_CUDA_GEMV=0, the switch of the 16-bit matrix-vector kernels).
var qgemvOff = os.Getenv("PARALLAX_CUDA_GEMV") == "0"

// qgemvTakes reports whether the matrix-vector kernels take the product
// out = x W^T with its x and weight (rows aside).
func qgemvTakes(d engine.Int8Dims, x *engine.Tensor, w engine.Int8Weight) bool {
	return !qgemvOff && d.N > 0 && d.K > 0 && d.K%16 == 0 && (w.Group%16 == 0 || w.Group >= d.K) &&
		ptr(x)%16 == 0 && ptr(w.Q)%16 == 0
}

// The tensor-core kernel's geometry, as qgemm.cu's QG_* and qg_layout.
const (
	qgemmMod       = "qgemm"
	qgemmMaxRows   = 64  // rows of x: 8 n8 tiles
	qgemmTileRows  = 64  // weight rows a block (4 warps of 16)
	qgemmBK        = 128 // columns a stage
	qgemmStages    = 4
	qgemmMaxSplits = 16 // K slices a tile at most (the last block adds them all)

	qgemmStaticSmem = 512 // the kernels' static shared memory (rows, last), rounded up
)

// qgemmSmem is the dynamic shared memory of a qgemm block of t n8 tiles:
// its stages of weights, x (rows padded by 8 elements), scales and, norm,
// the norm weight.
func qgemmSmem(t int, norm bool) int {
	stage := qgemmTileRows*qgemmBK + 8*t*(qgemmBK+8)*2 + qgemmTileRows*2*4
	if norm {
		stage += qgemmBK * 4
	}
	return qgemmStages * stage
}

// qgemmRec is the floats of one split partial of t n8 tiles: the result
// tile and the rows' sums of squares.
func qgemmRec(t int) int { return 8*t*qgemmTileRows + 8*t }

// Overrides of the tensor-core kernel (docs/CUDA.md, "Int8 decode
// batches"), read once.
const (
	// EnvQGEMMMinRows is the fewest rows of x the tensor-core kernel takes
	// (default 2: on the H200 a batch-8 decode step of a 0.6B-shaped model
	// took 1.27 ms through it against 2.49 ms on the matrix-vector kernels,
	// whose per-row arithmetic bounds them past one row; 1 also sends
	// single rows to it; 0 turns it off).
	EnvQGEMMMinRows = "PARALLAX_CUDA_QGEMM_MIN_ROWS"
	// EnvQGEMMSplits fixes the K slices of every tensor-core launch (1 to
	// qgemmMaxSplits, fewer where K has fewer stages; 0 or unset plans them).
	EnvQGEMMSplits = "PARALLAX_CUDA_QGEMM_SPLITS"
)

// qgemmEnv is the tensor-core kernel's overrides.
type qgemmEnv struct {
	minRows int // the fewest rows it takes (0: off)
	splits  int // the K slices of a launch (0: qgemmSplits plans them)
}

func parseQGEMMEnv(getenv func(string) string) (qgemmEnv, error) {
	e := qgemmEnv{minRows: 2}
	if s := getenv(EnvQGEMMMinRows); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return e, fmt.Errorf("cuda: %s=%q: want a row count (0 turns the kernel off)", EnvQGEMMMinRows, s)
		}
		e.minRows = n
	}
	if s := getenv(EnvQGEMMSplits); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > qgemmMaxSplits {
			return e, fmt.Errorf("cuda: %s=%q: want 1..%d (0 plans the splits)", EnvQGEMMSplits, s, qgemmMaxSplits)
		}
		e.splits = n
	}
	return e, nil
}

var qgemmEnvNow = sync.OnceValues(func() (qgemmEnv, error) { return parseQGEMMEnv(os.Getenv) })

// qgemmTakes reports whether the tensor-core kernel takes the product
// out = x W^T with its x and weight; norm: with the RMSNorm before it
// folded in, which it does for bf16 x only (it stages x g in x's dtype,
// which f16's range may not hold).
func (d *Device) qgemmTakes(env qgemmEnv, dm engine.Int8Dims, x *engine.Tensor, w engine.Int8Weight, norm bool) bool {
	xd := x.DType()
	return !qgemvOff && env.minRows > 0 && dm.M >= env.minRows && dm.M <= qgemmMaxRows &&
		(xd == engine.BF16 || (xd == engine.F16 && !norm)) && dm.N > 0 && dm.K > 0 && dm.K%16 == 0 &&
		(w.Group%64 == 0 || w.Group >= dm.K) && ptr(x)%16 == 0 && ptr(w.Q)%16 == 0 &&
		qgemmSmem((dm.M+7)/8, norm)+qgemmStaticSmem <= d.g.smemOptin
}

// qgemmSplits is the K slices of a launch of tiles output tiles over m
// rows of x and depth k on sms multiprocessors (fixed > 0: that many, at
// most one a stage). A block's time is taken as the bytes it moves: its
// slice of the weight tile and of x (64 + 2m bytes a column) times the
// waves of blocks an SM runs, plus, split, writing its f32 partial and,
// for the last block of a tile, reading all of them (64 m 4 bytes each).
// Few tiles (the 1024-row projections of a small model) split until the
// SMs are busy; many tiles, or many rows, whose partials cost more than
// the slices save, do not.
func qgemmSplits(tiles, m, k, sms, fixed int) int {
	nch := (k + qgemmBK - 1) / qgemmBK
	if fixed > 0 {
		return max(1, min(fixed, nch))
	}
	best, bestCost := 1, 0.0
	for s := 1; s <= min(nch, qgemmMaxSplits); s++ {
		waves := (tiles*s + sms - 1) / sms
		cost := float64(waves) * float64((nch+s-1)/s*qgemmBK) * float64(qgemmTileRows+2*m)
		if s > 1 {
			cost += float64((s + 1) * qgemmTileRows * m * 4)
		}
		if s == 1 || cost < bestCost {
			best, bestCost = s, cost
		}
	}
	return best
}

// qgemm launches kernel qgemm_<kind><x's dtype>_t<n8 tiles> over the
// weights of set (i8_set in int8.cuh; tiles output tiles), outputs of dtype dto.
// Split launches take the decode split scratch (decodeScratch; stream
// order keeps the attention's use and this one apart): tiles counters,
// zero between launches, and the partials. normW is the norm weight of
// the norm_ kinds (else nil).
func (d *Device) qgemm(env qgemmEnv, kind string, set *[136]byte, tiles, dto int, x *engine.Tensor, dm engine.Int8Dims,
	group int, accumulate bool, normW *engine.Tensor, eps float32) error {
	t := (dm.M + 7) / 8
	s := qgemmSplits(tiles, dm.M, dm.K, d.g.sms, env.splits)
	var part, cnt uint64
	if s > 1 {
		var err error
		if part, cnt, err = d.decodeScratch(tiles*s*qgemmRec(t), tiles); err != nil {
			return fmt.Errorf("linear int8: split partials: %w", err)
		}
	}
	var nw uint64
	dtg := 0
	if normW != nil {
		nw, dtg = ptr(normW), dt(normW)
	}
	xt := "bf16"
	if x.DType() == engine.F16 {
		xt = "f16"
	}
	return d.launch(qgemmMod, fmt.Sprintf("qgemm_%s%s_t%d", kind, xt, t), [3]int{tiles * s, 1, 1}, threads128,
		qgemmSmem(t, normW != nil),
		newArgs().blob(set[:], 8).i(dto).p(ptr(x)).i(dm.M).i(dm.K).i(group).i(dm.Groups).i(s).i(b2i(accumulate)).
			p(part).p(cnt).p(nw).i(dtg).f(eps))
}

// int8Kernel is the kernel family a set of int8 products of one x takes.
type int8Kernel int

const (
	int8Dequant int8Kernel = iota // neither: LinearInt8 dequantizes, the fused ops decline
	int8QGEMV                     // the matrix-vector kernels
	int8QGEMM                     // the tensor-core kernel
)

// int8Pick picks the kernel family for the products of x with ws (dims
// one each, of one M); norm: with the RMSNorm before them folded in.
func (d *Device) int8Pick(env qgemmEnv, dims []engine.Int8Dims, x *engine.Tensor, ws []engine.Int8Weight, norm bool) int8Kernel {
	qgemm, qgemv := true, dims[0].M <= qgemvMaxRows
	for i, w := range ws {
		qgemm = qgemm && d.qgemmTakes(env, dims[i], x, w, norm)
		qgemv = qgemv && qgemvTakes(dims[i], x, w)
	}
	switch {
	case qgemm:
		return int8QGEMM
	case qgemv:
		return int8QGEMV
	}
	return int8Dequant
}

// int8Set packs the weights ws (at most four; dims one each) and their
// outputs as an i8_set (int8.cuh), rows output rows a
// block of the kernel: it returns the set and the blocks of the launch.
func int8Set(outs []*engine.Tensor, ws []engine.Int8Weight, dims []engine.Int8Dims, rows int) (set [136]byte, blocks int) {
	for i, w := range ws {
		binary.LittleEndian.PutUint64(set[8*i:], ptr(outs[i]))
		binary.LittleEndian.PutUint64(set[32+8*i:], ptr(w.Q))
		binary.LittleEndian.PutUint64(set[64+8*i:], ptr(w.Scales))
		binary.LittleEndian.PutUint32(set[96+4*i:], uint32(dims[i].N))
		binary.LittleEndian.PutUint32(set[112+4*i:], uint32(blocks))
		blocks += (dims[i].N + rows - 1) / rows
	}
	for i := len(ws); i <= 4; i++ {
		binary.LittleEndian.PutUint32(set[112+4*i:], uint32(blocks))
	}
	return set, blocks
}

// LinearInt8 computes out = x W^T (+ out) for an int8 weight; see
// engine.Ops.
func (d *Device) LinearInt8(out, x *engine.Tensor, w engine.Int8Weight, accumulate bool) error {
	dims, err := engine.CheckLinearInt8(d.own, out, x, w)
	if err != nil {
		return err
	}
	if dims.M == 0 || dims.N == 0 {
		return nil
	}
	if dims.K == 0 {
		if accumulate {
			return nil
		}
		return d.Fill(out, 0)
	}
	env, err := qgemmEnvNow()
	if err != nil {
		return err
	}
	ws, dm := []engine.Int8Weight{w}, []engine.Int8Dims{dims}
	switch d.int8Pick(env, dm, x, ws, false) {
	case int8QGEMM:
		set, tiles := int8Set([]*engine.Tensor{out}, ws, dm, qgemmTileRows)
		return d.qgemm(env, "", &set, tiles, dt(out), x, dims, w.Group, accumulate, nil, 0)
	case int8QGEMV:
		name, blocks := fmt.Sprintf("qgemv_m%d", dims.M), (dims.N+7)/8
		if dims.M == 1 && gemvSplit(blocks, dims.K, d.g.sms) == 2 && dims.K >= 1024 {
			// As for the 16-bit products: 2 warps a column (qgemv_k2_m1).
			name, blocks = "qgemv_k2_m1", (dims.N+3)/4
		}
		return d.launch(qmod, name, [3]int{blocks, 1, 1}, threads256, 0,
			newArgs().p(ptr(out)).i(dt(out)).p(ptr(x)).i(dt(x)).p(ptr(w.Q)).p(ptr(w.Scales)).
				i(dims.N).i(dims.K).i(w.Group).i(dims.Groups).i(b2i(accumulate)))
	}
	return d.linearInt8Dequant(out, x, w, dims, accumulate)
}

// linearInt8Dequant dequantizes w into scratch of x's dtype and multiplies
// over it with MatMul (cuBLASLt's tensor cores for bf16 and f16, or the
// 16-bit matrix-vector kernel).
func (d *Device) linearInt8Dequant(out, x *engine.Tensor, w engine.Int8Weight, dims engine.Int8Dims, accumulate bool) error {
	buf, err := d.scratch(int64(dims.N) * int64(dims.K) * int64(x.DType().Size()))
	if err != nil {
		return fmt.Errorf("linear int8: dequantized weight: %w", err)
	}
	defer d.alloc.put(buf)
	wt := engine.NewTensor(d, x.DType(), engine.Shape{dims.N, dims.K}, buf)
	if err := d.dequant(wt, w, nil, dims.N, dims.N, dims.K); err != nil {
		return err
	}
	return engine.LinearDequantized(d, out, x, wt, dims, accumulate)
}

// dequant writes rows of W into out (rows of K): W[ids[r]] for ids I32,
// else W[r].
func (d *Device) dequant(out *engine.Tensor, w engine.Int8Weight, ids *engine.Tensor, rows, n, k int) error {
	if rows == 0 || k == 0 {
		return nil
	}
	gx := min(rows, 1<<16)
	gy := (rows + gx - 1) / gx
	return d.launch(qmod, "dequant_i8", [3]int{gx, gy, 1}, threads256, 0,
		newArgs().p(ptr(out)).i(dt(out)).p(ptr(w.Q)).p(ptr(w.Scales)).p(ptr(ids)).l(int64(rows)).
			i(n).i(k).i(w.Group).i(engine.Int8Groups(k, w.Group)).p(d.errBuf.ptr))
}

// EmbeddingInt8 gathers dequantized rows of an int8 weight (every row when
// ids is nil); an id out of range is reported at Sync. See engine.Ops.
func (d *Device) EmbeddingInt8(out *engine.Tensor, w engine.Int8Weight, ids *engine.Tensor) error {
	rows, k, n, err := engine.CheckEmbeddingInt8(d.own, out, w, ids)
	if err != nil {
		return err
	}
	return d.dequant(out, w, ids, rows, n, k)
}

var _ engine.Int8MultiLinear = (*Device)(nil)

// LinearMultiInt8 runs up to four int8 products of one x in one launch
// (qgemm_* or qgemv_multi_m*) when the weights share a group size, the
// outputs a dtype and each product would take that kernel; see
// engine.Int8MultiLinear.
func (d *Device) LinearMultiInt8(outs []*engine.Tensor, ws []engine.Int8Weight, x *engine.Tensor) (bool, error) {
	dims, ok, err := d.int8Multi(outs, ws, x)
	if !ok || err != nil {
		return err != nil, err
	}
	env, err := qgemmEnvNow()
	if err != nil {
		return true, err
	}
	dm := dims[:len(ws)]
	switch d.int8Pick(env, dm, x, ws, false) {
	case int8QGEMM:
		set, tiles := int8Set(outs, ws, dm, qgemmTileRows)
		return true, d.qgemm(env, "", &set, tiles, dt(outs[0]), x, dm[0], ws[0].Group, false, nil, 0)
	case int8QGEMV:
		set, blocks := int8Set(outs, ws, dm, 8)
		return true, d.launch(qmod, fmt.Sprintf("qgemv_multi_m%d", dm[0].M), [3]int{blocks, 1, 1}, threads256, 0,
			newArgs().blob(set[:], 8).i(dt(outs[0])).p(ptr(x)).i(dt(x)).i(dm[0].K).i(ws[0].Group).i(dm[0].Groups))
	}
	return false, nil
}

// int8Multi validates a LinearMultiInt8's operands and returns the dims of
// each product, or ok false (and no error) when no fused kernel could take
// them: no rows, more than four weights, or weights of different group
// sizes or outputs of different dtypes.
func (d *Device) int8Multi(outs []*engine.Tensor, ws []engine.Int8Weight, x *engine.Tensor) (dims [4]engine.Int8Dims, ok bool, err error) {
	if len(ws) == 0 || len(ws) > 4 || len(outs) != len(ws) {
		return dims, false, nil
	}
	for i, w := range ws {
		if dims[i], err = engine.CheckLinearInt8(d.own, outs[i], x, w); err != nil {
			return dims, false, err
		}
		if dims[i].M == 0 || w.Group != ws[0].Group || outs[i].DType() != outs[0].DType() {
			return dims, false, nil
		}
	}
	return dims, true, nil
}

var _ engine.Int8MLPFuser = (*Device)(nil)

// LinearSwiGLUInt8 runs a decode step's int8 gate and up products and the
// SwiGLU in one launch (qgemm_swiglu_* or qgemv_swiglu_m*) when both
// products would take that kernel; see engine.Int8MLPFuser.
func (d *Device) LinearSwiGLUInt8(act, x *engine.Tensor, wGate, wUp engine.Int8Weight) (bool, error) {
	dims, ok, err := d.int8SwiGLU(act, x, wGate, wUp)
	if !ok || err != nil {
		return err != nil, err
	}
	env, err := qgemmEnvNow()
	if err != nil {
		return true, err
	}
	ws, dm := []engine.Int8Weight{wGate, wUp}, []engine.Int8Dims{dims, dims}
	switch d.int8Pick(env, dm, x, ws, false) {
	case int8QGEMM:
		set, _ := int8Set([]*engine.Tensor{act, act}, ws, dm, qgemmTileRows)
		return true, d.qgemm(env, "swiglu_", &set, qgemmSwiGLUTiles(dims.N), dt(act), x, dims, wGate.Group, false, nil, 0)
	case int8QGEMV:
		return true, d.launch(qmod, fmt.Sprintf("qgemv_swiglu_m%d", dims.M), [3]int{(dims.N + 7) / 8, 1, 1}, threads256, 0,
			newArgs().p(ptr(act)).i(dt(act)).p(ptr(x)).i(dt(x)).p(ptr(wGate.Q)).p(ptr(wGate.Scales)).
				p(ptr(wUp.Q)).p(ptr(wUp.Scales)).i(dims.N).i(dims.K).i(wGate.Group).i(dims.Groups))
	}
	return false, nil
}

// qgemmSwiGLUTiles is the output tiles of a qgemm_swiglu_* launch: 32
// columns of act (the gate and up rows of a block) each.
func qgemmSwiGLUTiles(n int) int { return (n + qgemmTileRows/2 - 1) / (qgemmTileRows / 2) }

// int8SwiGLU validates a LinearSwiGLUInt8's operands and returns its dims,
// or ok false (and no error) when no fused kernel could take them: no
// rows, or gate and up of different group sizes.
func (d *Device) int8SwiGLU(act, x *engine.Tensor, wGate, wUp engine.Int8Weight) (dims engine.Int8Dims, ok bool, err error) {
	if dims, err = engine.CheckLinearInt8(d.own, act, x, wGate); err != nil {
		return dims, false, err
	}
	if _, err := engine.CheckLinearInt8(d.own, act, x, wUp); err != nil {
		return dims, false, err
	}
	return dims, dims.M > 0 && wGate.Group == wUp.Group, nil
}
