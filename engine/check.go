package engine

import (
	"fmt"
	"math"
)

func sqrt64(x float64) float64 { return math.Sqrt(x) }

// ArgError is the error every Check function returns: which op, which operand
// and what was wrong with it.
type ArgError struct {
	Op      string // "attention", "matmul", ...
	Operand string // "q", "dK", ... or "" for the op as a whole
	Msg     string
}

func (e *ArgError) Error() string {
	if e.Operand == "" {
		return e.Op + ": " + e.Msg
	}
	return e.Op + ": " + e.Operand + ": " + e.Msg
}

func argErr(op, operand, format string, args ...any) error {
	return &ArgError{Op: op, Operand: operand, Msg: fmt.Sprintf(format, args...)}
}

// need checks presence, rank and float-ness of an operand.
func need(op, name string, t *Tensor, rank int, layout string) error {
	if t == nil {
		return argErr(op, name, "missing (want %s)", layout)
	}
	if rank >= 0 && t.Rank() != rank {
		return argErr(op, name, "want rank %d %s, got %v", rank, layout, t)
	}
	return nil
}

func needFloat(op, name string, t *Tensor) error {
	if !t.DType().IsFloat() {
		return argErr(op, name, "want a floating dtype (f32, bf16, f16), got %v", t)
	}
	return nil
}

func needDType(op, name string, t *Tensor, d DType) error {
	if t.DType() != d {
		return argErr(op, name, "want dtype %v, got %v", d, t)
	}
	return nil
}

func needShape(op, name string, t *Tensor, want Shape) error {
	if !t.shape.Equal(want) {
		return argErr(op, name, "want shape %v, got %v", want, t)
	}
	return nil
}

// needOf checks that operand name is present, of shape want and of dtype
// dt, or of any floating dtype when dt is 0.
func needOf(op, name string, t *Tensor, dt DType, want Shape) error {
	if t == nil {
		return argErr(op, name, "missing (want %v)", want)
	}
	var err error
	if dt == 0 {
		err = needFloat(op, name, t)
	} else {
		err = needDType(op, name, t, dt)
	}
	if err != nil {
		return err
	}
	return needShape(op, name, t, want)
}

// operand is one row of an op's operand table: the tensor, its name in
// errors, the shape it must have and its dtype (0: any floating dtype).
// An optional operand may be nil.
type operand struct {
	name     string
	t        *Tensor
	want     Shape
	dt       DType
	optional bool
}

// needOperands checks each operand of the table in order (needOf).
func needOperands(op string, xs ...operand) error {
	for _, x := range xs {
		if x.optional && x.t == nil {
			continue
		}
		if err := needOf(op, x.name, x.t, x.dt, x.want); err != nil {
			return err
		}
	}
	return nil
}

func needFloats(op string, names []string, ts ...*Tensor) error {
	for i, t := range ts {
		if t == nil {
			return argErr(op, names[i], "missing")
		}
		if err := needFloat(op, names[i], t); err != nil {
			return err
		}
	}
	return nil
}

// CheckDevice reports an error if any non-nil tensor does not live on dev.
func CheckDevice(op string, dev Device, ts ...*Tensor) error {
	for _, t := range ts {
		if t != nil && t.dev != dev {
			return argErr(op, "", "tensor %v lives on %s, not on %s", t, devName(t.dev), devName(dev))
		}
	}
	return nil
}

// An Owner checks that the operands of op live on the device that runs it,
// and whatever else that device requires before it runs an op (that it is
// still open, say). A backend passes its own (CheckDevice over the device,
// and its other conditions) to the Check functions that take one, which
// call it with the op's name and operands once they are valid. A nil Owner
// checks nothing.
type Owner func(op string, ts ...*Tensor) error

// check calls o, when it is not nil, with op and ts.
func (o Owner) check(op string, ts ...*Tensor) error {
	if o == nil {
		return nil
	}
	return o(op, ts...)
}

// after returns err, the operands' validation, or when that is nil o's
// check of op's operands ts.
func (o Owner) after(err error, op string, ts ...*Tensor) error {
	if err != nil {
		return err
	}
	return o.check(op, ts...)
}

func devName(d Device) string {
	if d == nil {
		return "no device"
	}
	return d.Info().ID()
}

// MatMulDims are the validated sizes of a MatMul.
type MatMulDims struct {
	Batch, M, N, K int
	SharedB        bool // b is rank 2 and shared across the batch
}

// CheckMatMul validates MatMul's operands.
func CheckMatMul(out, a, b *Tensor, o MatMulOpts) (MatMulDims, error) {
	const op = "matmul"
	var d MatMulDims
	if err := needFloats(op, []string{"out", "a", "b"}, out, a, b); err != nil {
		return d, err
	}
	if a.Rank() < 2 || b.Rank() < 2 {
		return d, argErr(op, "", "a and b need rank >= 2, got a %v, b %v", a, b)
	}
	m, k := a.Dim(-2), a.Dim(-1)
	if o.TransA {
		m, k = k, m
	}
	kb, n := b.Dim(-2), b.Dim(-1)
	if o.TransB {
		kb, n = n, kb
	}
	if k != kb {
		return d, argErr(op, "", "inner dimensions differ: op(a) is %dx%d, op(b) is %dx%d (a %v, b %v, transA %v, transB %v)",
			m, k, kb, n, a, b, o.TransA, o.TransB)
	}
	batch := a.shape[:a.Rank()-2]
	d = MatMulDims{Batch: batch.Numel(), M: m, N: n, K: k, SharedB: b.Rank() == 2}
	if !d.SharedB && !b.shape[:b.Rank()-2].Equal(batch) {
		return d, argErr(op, "b", "batch dimensions %v differ from a's %v (b may also be rank 2)", b.shape[:b.Rank()-2], batch)
	}
	want := append(batch.Clone(), m, n)
	if err := needShape(op, "out", out, want); err != nil {
		return d, err
	}
	return d, nil
}

// CheckEmbedding validates Embedding and returns (rows gathered, width, vocab).
func CheckEmbedding(own Owner, out, table, ids *Tensor) (n, d, v int, err error) {
	n, d, v, err = checkEmb("embedding", "out", out, table, ids)
	return n, d, v, own.after(err, "embedding", out, table, ids)
}

// CheckEmbeddingBackward validates EmbeddingBackward.
func CheckEmbeddingBackward(own Owner, dTable, ids, dOut *Tensor) (n, d, v int, err error) {
	n, d, v, err = checkEmb("embedding backward", "dOut", dOut, dTable, ids)
	return n, d, v, own.after(err, "embedding backward", dTable, ids, dOut)
}

func checkEmb(op, outName string, out, table, ids *Tensor) (n, d, v int, err error) {
	if err = need(op, "table", table, 2, "[V,d]"); err != nil {
		return
	}
	if err = need(op, "ids", ids, -1, "I32 ids"); err != nil {
		return
	}
	if err = needDType(op, "ids", ids, I32); err != nil {
		return
	}
	if err = needFloats(op, []string{outName, "table"}, out, table); err != nil {
		return
	}
	v, d = table.Dim(0), table.Dim(1)
	n = ids.Numel()
	err = needShape(op, outName, out, append(ids.Shape(), d))
	return
}

// CheckRMSNorm validates RMSNorm and returns (rows, width).
func CheckRMSNorm(own Owner, out, rstd, x, w *Tensor) (rows, n int, err error) {
	const op = "rmsnorm"
	if err = needFloats(op, []string{"out", "x", "w"}, out, x, w); err != nil {
		return
	}
	if x.Rank() < 1 {
		return 0, 0, argErr(op, "x", "want rank >= 1, got %v", x)
	}
	n = x.Dim(-1)
	rows = x.Numel() / max(n, 1)
	if err = needShape(op, "w", w, Shape{n}); err != nil {
		return
	}
	if err = needShape(op, "out", out, x.shape); err != nil {
		return
	}
	if rstd != nil {
		if err = needDType(op, "rstd", rstd, F32); err != nil {
			return
		}
		err = needShape(op, "rstd", rstd, x.shape[:x.Rank()-1])
	}
	return rows, n, own.after(err, op, out, rstd, x, w)
}

// CheckRMSNormBackward validates RMSNormBackward and returns (rows, width).
func CheckRMSNormBackward(own Owner, dX, dW, dOut, x, w, rstd *Tensor) (rows, n int, err error) {
	const op = "rmsnorm backward"
	if rstd == nil {
		return 0, 0, argErr(op, "rstd", "missing (the forward's saved F32 rstd)")
	}
	if rows, n, err = CheckRMSNorm(nil, dOut, rstd, x, w); err != nil {
		return
	}
	if err = needFloats(op, []string{"dX", "dW"}, dX, dW); err != nil {
		return
	}
	if err = needShape(op, "dX", dX, x.shape); err != nil {
		return
	}
	err = needShape(op, "dW", dW, w.shape)
	return rows, n, own.after(err, op, dX, dW, dOut, x, w, rstd)
}

// RoPEFrequencies returns the D/2 rotation frequencies theta^(-2i/D) of
// RoPE, computed in float64, that every backend uses.
func RoPEFrequencies(theta float32, d int) []float64 {
	f := make([]float64, d/2)
	for i := range f {
		f[i] = math.Pow(float64(theta), -2*float64(i)/float64(d))
	}
	return f
}

// CheckRoPE validates RoPE, or with inverse RoPEBackward (dX in out's
// place, dOut in x's), and returns (B, H, L, D). pos is I32 [L] (shared by
// every sequence) or [B, L] (per sequence). The operands' errors name the
// op "rope" either way; own checks them as "rope" or "rope backward".
func CheckRoPE(own Owner, out, x, pos *Tensor, inverse bool) (b, h, l, d int, err error) {
	const op = "rope"
	if err = need(op, "x", x, 4, "[B,H,L,D]"); err != nil {
		return
	}
	if err = needFloats(op, []string{"out", "x"}, out, x); err != nil {
		return
	}
	b, h, l, d = x.Dim(0), x.Dim(1), x.Dim(2), x.Dim(3)
	if d%2 != 0 {
		return 0, 0, 0, 0, argErr(op, "x", "head dimension %d is odd", d)
	}
	if err = needShape(op, "out", out, x.shape); err != nil {
		return
	}
	want := Shape{l}
	if pos != nil && pos.Rank() == 2 {
		want = Shape{b, l} // one position vector per sequence
	}
	err = needOf(op, "pos", pos, I32, want)
	owner := op
	if inverse {
		owner = "rope backward"
	}
	return b, h, l, d, own.after(err, owner, out, x, pos)
}

// CheckElementwise validates ops over same-sized floating tensors and returns
// the element count. names label the tensors in errors.
func CheckElementwise(own Owner, op string, names []string, ts ...*Tensor) (int, error) {
	if err := needFloats(op, names, ts...); err != nil {
		return 0, err
	}
	n := ts[0].Numel()
	for i, t := range ts[1:] {
		if t.Numel() != n {
			return 0, argErr(op, names[i+1], "has %d elements (%v), want %d like %s %v", t.Numel(), t, n, names[0], ts[0])
		}
	}
	return n, own.check(op, ts...)
}

// CheckCast validates Cast.
func CheckCast(own Owner, dst, src *Tensor) (int, error) {
	const op = "cast"
	if dst == nil || src == nil {
		return 0, argErr(op, "", "dst and src are required")
	}
	if err := noInt8(op, []string{"dst", "src"}, dst, src); err != nil {
		return 0, err
	}
	if dst.Numel() != src.Numel() {
		return 0, argErr(op, "dst", "has %d elements (%v), src %v has %d", dst.Numel(), dst, src, src.Numel())
	}
	return src.Numel(), own.check(op, dst, src)
}

// noInt8 rejects I8 operands of the ops that copy raw elements: int8
// tensors are quantized weights, which only LinearInt8 and EmbeddingInt8
// read.
func noInt8(op string, names []string, ts ...*Tensor) error {
	for i, t := range ts {
		if t != nil && t.dtype == I8 {
			return argErr(op, names[i], "%v is an int8 (quantized weight) tensor; only linear int8 and embedding int8 read those", t)
		}
	}
	return nil
}

// CheckFill validates Fill: t present, not int8, on the device.
func CheckFill(own Owner, t *Tensor) error {
	const op = "fill"
	if t == nil {
		return argErr(op, "t", "missing")
	}
	if err := noInt8(op, []string{"t"}, t); err != nil {
		return err
	}
	return own.check(op, t)
}

// CheckSwapAxes12 validates SwapAxes12 and returns src's four dimensions.
func CheckSwapAxes12(own Owner, dst, src *Tensor) ([4]int, error) {
	const op = "swapaxes12"
	var d [4]int
	if err := need(op, "src", src, 4, "rank 4"); err != nil {
		return d, err
	}
	if err := need(op, "dst", dst, 4, "rank 4"); err != nil {
		return d, err
	}
	copy(d[:], src.shape)
	if err := noInt8(op, []string{"dst", "src"}, dst, src); err != nil {
		return d, err
	}
	if dst.dtype != src.dtype {
		return d, argErr(op, "dst", "dtype %v differs from src %v", dst, src)
	}
	return d, own.after(needShape(op, "dst", dst, Shape{d[0], d[2], d[1], d[3]}), op, dst, src)
}

// CheckKVAppendAt validates KVAppendAt's shapes and returns (B, H, n, Cap,
// D); the starts' values are checked by the op.
func CheckKVAppendAt(own Owner, cache, x, starts *Tensor) (b, h, n, capacity, d int, err error) {
	if b, h, n, capacity, d, err = CheckKVAppend(nil, cache, x, 0); err != nil {
		return
	}
	const op = "kv append at"
	if starts == nil || starts.dtype != I32 || !starts.shape.Equal(Shape{b}) {
		err = argErr(op, "starts", "want I32 [%d] (one start per sequence), got %v", b, starts)
	}
	return b, h, n, capacity, d, own.after(err, op, cache, x, starts)
}

// CheckKVAppend validates KVAppend and returns (B, H, n, Cap, D).
func CheckKVAppend(own Owner, cache, x *Tensor, start int) (b, h, n, capacity, d int, err error) {
	const op = "kv append"
	if err = need(op, "cache", cache, 4, "[B,H,Cap,D]"); err != nil {
		return
	}
	if err = need(op, "x", x, 4, "[B,H,n,D]"); err != nil {
		return
	}
	if cache.dtype == I32 || x.dtype == I32 {
		// Integer caches (token ids, say) take rows of their own dtype.
		if cache.dtype != x.dtype {
			err = argErr(op, "x", "dtype %v differs from the cache's %v (an i32 cache takes i32 rows)", x, cache)
			return
		}
	} else if err = needFloats(op, []string{"cache", "x"}, cache, x); err != nil {
		return
	}
	b, h, n, d = x.Dim(0), x.Dim(1), x.Dim(2), x.Dim(3)
	capacity = cache.Dim(2)
	if cache.Dim(0) != b || cache.Dim(1) != h || cache.Dim(3) != d {
		err = argErr(op, "cache", "shape %v does not match x %v (want [%d,%d,Cap,%d])", cache.shape, x.shape, b, h, d)
		return
	}
	if start < 0 || start+n > capacity {
		err = argErr(op, "", "positions %d..%d do not fit a cache of capacity %d", start, start+n-1, capacity)
	}
	return b, h, n, capacity, d, own.after(err, op, cache, x)
}

// CheckCrossEntropy validates CrossEntropy and returns N, the row width W
// of logits [N, W] and the number of classes C (o.Classes, or W when it is
// 0), with 0 <= C <= W. The targets' values are the backends' to check
// (they live on the device): each must lie in [0, C) or be o.IgnoreIndex.
func CheckCrossEntropy(own Owner, loss, dLogits, logits, targets *Tensor, o CrossEntropyOpts) (n, w, classes int, err error) {
	const op = "cross entropy"
	if err = need(op, "logits", logits, 2, "[N,W]"); err != nil {
		return
	}
	if err = needFloat(op, "logits", logits); err != nil {
		return
	}
	n, w = logits.Dim(0), logits.Dim(1)
	if o.Classes < 0 || o.Classes > w {
		err = argErr(op, "", "classes %d must be 0 (every column) or lie in [1, %d], the row width of logits %v",
			o.Classes, w, logits)
		return
	}
	classes = o.ClassCount(w)
	err = needOperands(op, operand{name: "targets", t: targets, want: Shape{n}, dt: I32},
		operand{name: "loss", t: loss, want: Shape{n}, dt: F32},
		operand{name: "dLogits", t: dLogits, want: logits.shape, optional: true})
	return n, w, classes, own.after(err, op, loss, dLogits, logits, targets)
}

// AttnDims are the validated sizes of an attention-family op.
type AttnDims struct {
	B, Hq, Hkv, G, Lq, Lk, D int
	// Offset = Lk - Lq: causal query i sees keys j <= i + Offset.
	Offset int
	Scale  float32 // effective q.k scale
	Causal bool
	Window int
}

// Visible returns the half-open key range [lo, hi) query row i may attend to.
func (d AttnDims) Visible(i int) (lo, hi int) {
	hi = d.Lk
	if d.Causal {
		hi = min(d.Lk, i+d.Offset+1)
		if d.Window > 0 {
			lo = max(0, i+d.Offset+1-d.Window)
		}
	}
	return lo, hi
}

func checkQKV(op string, q, k, v *Tensor, o AttentionOpts) (AttnDims, error) {
	var d AttnDims
	if err := need(op, "q", q, 4, "[B,Hq,Lq,D]"); err != nil {
		return d, err
	}
	if err := need(op, "k", k, 4, "[B,Hkv,Lk,D]"); err != nil {
		return d, err
	}
	if err := need(op, "v", v, 4, "[B,Hkv,Lk,D]"); err != nil {
		return d, err
	}
	if err := needFloats(op, []string{"q", "k", "v"}, q, k, v); err != nil {
		return d, err
	}
	d.B, d.Hq, d.Lq, d.D = q.Dim(0), q.Dim(1), q.Dim(2), q.Dim(3)
	d.Hkv, d.Lk = k.Dim(1), k.Dim(2)
	if k.Dim(0) != d.B || k.Dim(3) != d.D {
		return d, argErr(op, "k", "shape %v does not match q %v (want [%d,Hkv,Lk,%d])", k.shape, q.shape, d.B, d.D)
	}
	if err := needShape(op, "v", v, k.shape); err != nil {
		return d, err
	}
	if d.Hkv == 0 || d.Hq%d.Hkv != 0 {
		return d, argErr(op, "", "query heads %d are not a multiple of key/value heads %d (GQA needs Hq = G*Hkv)", d.Hq, d.Hkv)
	}
	if d.D == 0 {
		return d, argErr(op, "q", "head dimension is 0")
	}
	d.G = d.Hq / d.Hkv
	d.Offset = d.Lk - d.Lq
	d.Causal, d.Window = o.Causal, o.Window
	d.Scale = o.ScaleFor(d.D)
	if o.Causal && d.Lq > d.Lk {
		return d, argErr(op, "", "causal attention needs Lq <= Lk, got Lq %d > Lk %d (query i sees keys j <= i + Lk - Lq)", d.Lq, d.Lk)
	}
	if o.Window < 0 {
		return d, argErr(op, "", "window %d is negative", o.Window)
	}
	if o.Window > 0 && !o.Causal {
		return d, argErr(op, "", "a sliding window (%d) needs causal attention", o.Window)
	}
	if math.IsNaN(float64(o.Scale)) || math.IsInf(float64(o.Scale), 0) {
		return d, argErr(op, "", "scale %v is not finite", o.Scale)
	}
	if !o.Causal && d.Lk == 0 && d.Lq > 0 {
		return d, argErr(op, "k", "no keys (Lk = 0)")
	}
	return d, nil
}

// rowStat is a per-row statistic's operand (lse, tbar, eta): F32
// [B, Hq, Lq].
func rowStat(name string, t *Tensor, d AttnDims) operand {
	return operand{name: name, t: t, want: Shape{d.B, d.Hq, d.Lq}, dt: F32, optional: true}
}

// CheckAttention validates Attention.
func CheckAttention(own Owner, a AttentionArgs) (AttnDims, error) {
	const op = "attention"
	d, err := checkQKV(op, a.Q, a.K, a.V, a.AttentionOpts)
	if err != nil {
		return d, err
	}
	qs := a.Q.shape
	if err := needOperands(op, operand{name: "r", t: a.R, want: qs, optional: true}, operand{name: "o", t: a.O, want: qs},
		rowStat("lse", a.LSE, d)); err != nil {
		return d, err
	}
	if a.R == nil && (a.Vbar != nil || a.Tbar != nil) {
		return d, argErr(op, "", "vbar/tbar are Parallax statistics; softmax attention (no r) has none")
	}
	err = needOperands(op, operand{name: "vbar", t: a.Vbar, want: qs, optional: true}, rowStat("tbar", a.Tbar, d))
	return d, own.after(err, op, a.Q, a.K, a.V, a.R, a.O, a.LSE, a.Vbar, a.Tbar)
}

// CheckAttentionBackward validates AttentionBackward.
func CheckAttentionBackward(own Owner, a AttentionBackwardArgs) (AttnDims, error) {
	const op = "attention backward"
	d, err := CheckAttention(nil, AttentionArgs{Q: a.Q, K: a.K, V: a.V, R: a.R, O: a.O,
		LSE: a.LSE, Vbar: a.Vbar, Tbar: a.Tbar, AttentionOpts: a.AttentionOpts})
	if err != nil {
		return d, err
	}
	if a.LSE == nil {
		return d, argErr(op, "lse", "missing (the forward's saved log-sum-exp)")
	}
	if a.R != nil && (a.Vbar == nil || a.Tbar == nil) {
		return d, argErr(op, "", "Parallax backward needs the forward's saved vbar and tbar")
	}
	if err := needOperands(op, operand{name: "dO", t: a.DO, want: a.Q.shape}, operand{name: "dQ", t: a.DQ, want: a.Q.shape},
		operand{name: "dK", t: a.DK, want: a.K.shape}, operand{name: "dV", t: a.DV, want: a.V.shape}); err != nil {
		return d, err
	}
	if (a.R == nil) != (a.DR == nil) {
		return d, argErr(op, "dR", "must be given exactly when r is (Parallax), nil for softmax attention")
	}
	err = needOperands(op, operand{name: "dR", t: a.DR, want: a.Q.shape, optional: true})
	return d, own.after(err, op, a.Q, a.K, a.V, a.R, a.O, a.DO, a.LSE, a.Vbar, a.Tbar, a.DQ, a.DK, a.DV, a.DR)
}

// DecodeDims are the validated sizes of DecodeAttention.
type DecodeDims struct {
	B, Hq, Hkv, G, Lq, Cap, D int
	Scale                     float32
	Window                    int
}

// CheckDecode validates DecodeAttention. The per-sequence lengths live on the
// device; backends check Lq <= Lens[b] <= Cap when they read them.
func CheckDecode(own Owner, a DecodeArgs) (DecodeDims, error) {
	const op = "decode attention"
	var dd DecodeDims
	d, err := checkQKV(op, a.Q, a.KCache, a.VCache, AttentionOpts{Scale: a.Scale})
	if err != nil {
		return dd, err
	}
	dd = DecodeDims{B: d.B, Hq: d.Hq, Hkv: d.Hkv, G: d.G, Lq: d.Lq, Cap: d.Lk, D: d.D, Scale: d.Scale, Window: a.Window}
	if d.Lq > d.Lk {
		return dd, argErr(op, "", "Lq %d exceeds the cache capacity %d", d.Lq, d.Lk)
	}
	if err := needOperands(op, operand{name: "r", t: a.R, want: a.Q.shape, optional: true},
		operand{name: "o", t: a.O, want: a.Q.shape}, operand{name: "lens", t: a.Lens, want: Shape{d.B}, dt: I32}); err != nil {
		return dd, err
	}
	if a.Window < 0 || a.Splits < 0 {
		return dd, argErr(op, "", "window (%d) and splits (%d) must be >= 0", a.Window, a.Splits)
	}
	return dd, own.check(op, a.Q, a.R, a.KCache, a.VCache, a.Lens, a.O)
}

// CheckLLASolvable reports, for lambda = 0, the first query position that
// sees at most D keys: its D x D system is singular and its output
// undefined (the local linear fit through its keys has no unique
// intercept). Backends call it after CheckLLA and their device checks.
func CheckLLASolvable(d AttnDims, lambda float32) error {
	if lambda != 0 || d.B*d.Hq == 0 {
		return nil
	}
	for i := 0; i < d.Lq; i++ {
		if lo, hi := d.Visible(i); hi-lo <= d.D {
			return &ArgError{Op: "lla", Msg: fmt.Sprintf(
				"query position %d sees %d keys; with lambda = 0 its %d x %d system is singular and the output undefined (the local linear fit needs more than D keys): use lambda > 0",
				i, hi-lo, d.D, d.D)}
		}
	}
	return nil
}

// CheckLLA validates LLA.
func CheckLLA(own Owner, a LLAArgs) (AttnDims, error) {
	const op = "lla"
	d, err := CheckAttention(nil, AttentionArgs{Q: a.Q, K: a.K, V: a.V, O: a.O, AttentionOpts: a.AttentionOpts})
	if err != nil {
		return d, err
	}
	if !(a.Lambda >= 0) || math.IsInf(float64(a.Lambda), 0) {
		return d, argErr(op, "", "lambda %v must be finite and >= 0", a.Lambda)
	}
	if a.Tol < 0 || a.MaxIter < 0 {
		return d, argErr(op, "", "tol (%v) and max iterations (%d) must be >= 0", a.Tol, a.MaxIter)
	}
	if a.Solver != SolveCG && a.Solver != SolveDirect {
		return d, argErr(op, "", "unknown solver %d", a.Solver)
	}
	err = needOperands(op, operand{name: "rhoStar", t: a.RhoStar, want: a.Q.shape, optional: true}, rowStat("eta", a.Eta, d))
	return d, own.after(err, op, a.Q, a.K, a.V, a.O, a.RhoStar, a.Eta)
}

// CheckLinearAttention validates LinearAttention.
func CheckLinearAttention(own Owner, a LinearAttentionArgs) (AttnDims, error) {
	op := "linear attention"
	d, err := checkQKV(op, a.R, a.K, a.V, a.AttentionOpts)
	if err != nil {
		return d, err
	}
	return d, own.after(needOf(op, "o", a.O, 0, a.R.shape), op, a.R, a.K, a.V, a.O)
}

// CheckLinearAttentionBackward validates LinearAttentionBackward.
func CheckLinearAttentionBackward(own Owner, a LinearAttentionBackwardArgs) (AttnDims, error) {
	op := "linear attention backward"
	d, err := checkQKV(op, a.R, a.K, a.V, a.AttentionOpts)
	if err != nil {
		return d, err
	}
	err = needOperands(op, operand{name: "dO", t: a.DO, want: a.R.shape}, operand{name: "dR", t: a.DR, want: a.R.shape},
		operand{name: "dK", t: a.DK, want: a.K.shape}, operand{name: "dV", t: a.DV, want: a.V.shape})
	return d, own.after(err, op, a.R, a.K, a.V, a.DO, a.DR, a.DK, a.DV)
}

// CheckCorrectionRatio validates CorrectionRatio and returns (rows, D).
func CheckCorrectionRatio(own Owner, out, o, vbar *Tensor) (rows, d int, err error) {
	const op = "correction ratio"
	if err = needFloats(op, []string{"o", "vbar"}, o, vbar); err != nil {
		return
	}
	if o.Rank() < 1 {
		return 0, 0, argErr(op, "o", "want rank >= 1, got %v", o)
	}
	if err = needShape(op, "vbar", vbar, o.shape); err != nil {
		return
	}
	if err = checkScalarOut(op, out); err != nil {
		return
	}
	d = o.Dim(-1)
	return o.Numel() / max(d, 1), d, own.check(op, out, o, vbar)
}

func checkScalarOut(op string, out *Tensor) error {
	return needOf(op, "out", out, F32, Shape{1})
}

// CheckSumSquares validates SumSquares and returns the element count.
func CheckSumSquares(own Owner, out, x *Tensor) (int, error) {
	const op = "sum squares"
	if err := checkScalarOut(op, out); err != nil {
		return 0, err
	}
	if err := needFloats(op, []string{"x"}, x); err != nil {
		return 0, err
	}
	return x.Numel(), own.check(op, out, x)
}

// CheckAdamW validates AdamW and returns the element count.
func CheckAdamW(own Owner, p, g, m, v *Tensor, o AdamWOpts) (int, error) {
	const op = "adamw"
	n, err := CheckElementwise(nil, op, []string{"p", "g", "m", "v"}, p, g, m, v)
	if err != nil {
		return 0, err
	}
	if err := needDType(op, "m", m, F32); err != nil {
		return 0, err
	}
	if err := needDType(op, "v", v, F32); err != nil {
		return 0, err
	}
	if o.Step < 1 {
		return 0, argErr(op, "", "step %d must be >= 1 (bias correction counts from 1)", o.Step)
	}
	if !(o.Beta1 >= 0 && o.Beta1 < 1 && o.Beta2 >= 0 && o.Beta2 < 1) {
		return 0, argErr(op, "", "betas (%v, %v) must lie in [0, 1)", o.Beta1, o.Beta2)
	}
	if s := o.GradScale; s != s || s < 0 || math.IsInf(float64(s), 0) {
		return 0, argErr(op, "", "gradient scale %v must be finite and >= 0", s)
	}
	return n, own.check(op, p, g, m, v)
}

// CheckMuonMomentum validates MuonMomentum and returns the element count.
func CheckMuonMomentum(own Owner, u, m, g *Tensor, o MuonMomentumOpts) (int, error) {
	const op = "muon momentum"
	n, err := CheckElementwise(nil, op, []string{"u", "m", "g"}, u, m, g)
	if err != nil {
		return 0, err
	}
	if err := checkMuonMomentumOpts(op, o); err != nil {
		return 0, err
	}
	return n, own.after(needDType(op, "m", m, F32), op, u, m, g)
}

// checkMuonMomentumOpts validates MuonMomentum's hyperparameters.
func checkMuonMomentumOpts(op string, o MuonMomentumOpts) error {
	if !(o.Beta >= 0 && o.Beta < 1) {
		return argErr(op, "", "beta %v must lie in [0, 1)", o.Beta)
	}
	if s := o.GradScale; s != s || s < 0 || math.IsInf(float64(s), 0) {
		return argErr(op, "", "gradient scale %v must be finite and >= 0", s)
	}
	return nil
}

// CheckFrobeniusNormalize validates FrobeniusNormalize and returns the
// number of matrices and the elements per matrix.
func CheckFrobeniusNormalize(own Owner, out, x *Tensor) (batch, per int, err error) {
	const op = "frobenius normalize"
	if err = needFloats(op, []string{"out", "x"}, out, x); err != nil {
		return
	}
	if x.Rank() < 2 {
		return 0, 0, argErr(op, "x", "want rank >= 2 (a matrix or a batch of them), got %v", x)
	}
	if err = needShape(op, "out", out, x.shape); err != nil {
		return
	}
	per = x.Dim(-1) * x.Dim(-2)
	batch = x.shape[:x.Rank()-2].Numel()
	return batch, per, own.check(op, out, x)
}

// CheckMuonApply validates MuonApply and returns the element count.
func CheckMuonApply(own Owner, p, o *Tensor) (int, error) {
	return CheckElementwise(own, "muon apply", []string{"p", "o"}, p, o)
}

// CheckHeadGate validates HeadGate and returns (rows, heads, D): x is
// [..., H, D] and z is x's shape without the last dimension.
func CheckHeadGate(own Owner, out, x, z *Tensor) (rows, h, d int, err error) {
	const op = "head gate"
	if err = needFloats(op, []string{"out", "x", "z"}, out, x, z); err != nil {
		return
	}
	if x.Rank() < 2 {
		return 0, 0, 0, argErr(op, "x", "want rank >= 2 [..., H, D], got %v", x)
	}
	if err = needShape(op, "out", out, x.shape); err != nil {
		return
	}
	if err = needShape(op, "z", z, x.shape[:x.Rank()-1]); err != nil {
		return
	}
	h, d = x.Dim(-2), x.Dim(-1)
	rows = x.Numel() / max(h*d, 1)
	return rows, h, d, own.check(op, out, x, z)
}

// CheckHeadGateBackward validates HeadGateBackward as HeadGate's operands
// twice over, (dOut, x, z) and (dX, x, dZ), and returns (rows, heads, D).
func CheckHeadGateBackward(own Owner, dX, dZ, dOut, x, z *Tensor) (rows, h, d int, err error) {
	if _, _, _, err = CheckHeadGate(nil, dOut, x, z); err != nil {
		return
	}
	rows, h, d, err = CheckHeadGate(nil, dX, x, dZ)
	return rows, h, d, own.after(err, "head gate backward", dX, dZ, dOut, x, z)
}
