package engine

import (
	"fmt"
	"math"
)

// Ops is the complete op set a backend implements. Every method validates its
// arguments with the matching Check function and returns that error without
// side effects; otherwise it enqueues the op and returns nil (errors raised
// while executing surface at Device.Sync).
//
// Tensors passed to one call must not alias each other unless the method says
// so. Notation: B batch, Hq query heads, Hkv key/value heads, G = Hq/Hkv,
// Lq query positions, Lk key positions, D head dimension.
type Ops interface {
	// MatMul computes out = op(a) op(b) (+ out if Accumulate), where op(x) is
	// x or its transpose over the last two dimensions. a is [..., M, K] (or
	// [..., K, M] with TransA), b is [..., K, N] (or [..., N, K] with TransB)
	// with the same leading (batch) dimensions as a, or rank 2 to be shared by
	// every batch entry. out is [..., M, N] with a's batch dimensions. Inputs
	// may be any floating dtype (mixed), products accumulate in f32 or better.
	MatMul(out, a, b *Tensor, o MatMulOpts) error
	// LinearInt8 computes out = x W^T (+ out if accumulate) for a
	// weight-only int8 weight w (Int8Weight: W[n, k] = Q[n, k] s[n, k/G],
	// docs/ENGINE.md, "Weight-only int8"): x [..., K] of any floating
	// dtype, out [..., N] of x's dtype or f32. W is dequantized on the fly
	// and the products accumulate in f32; a backend may round W to x's
	// dtype first (a tensor-core product over a dequantized copy).
	LinearInt8(out, x *Tensor, w Int8Weight, accumulate bool) error
	// EmbeddingInt8 gathers rows of the dequantized int8 weight w [N, K]:
	// out[i, :] = W[ids[i], :], ids I32 of any shape S, out [S..., K] of a
	// floating dtype (each element q s rounded once to it). With ids nil it
	// dequantizes the whole matrix into out [N, K]. An id outside [0, N)
	// is an error reported at Sync.
	EmbeddingInt8(out *Tensor, w Int8Weight, ids *Tensor) error

	// Embedding gathers rows: out[n, :] = table[ids[n], :]. ids is I32 of any
	// shape S, table [V, d], out [S..., d]. An id outside [0, V) is an error
	// reported at Sync.
	Embedding(out, table, ids *Tensor) error
	// EmbeddingBackward accumulates dTable[ids[n], :] += dOut[n, :].
	EmbeddingBackward(dTable, ids, dOut *Tensor) error

	// RMSNorm normalises each row of x (the last dimension, width N):
	// out = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps). w is [N]. rstd, if
	// not nil, receives the per-row rstd as F32 of shape x.shape[:-1]. Applied
	// to a [..., H, D] tensor with w [D] it is the per-head norm.
	RMSNorm(out, rstd, x, w *Tensor, eps float32) error
	// RMSNormBackward computes, with xhat = x * rstd and gy = dOut * w,
	// dX = rstd * (gy - xhat * mean(gy * xhat)) and accumulates
	// dW += sum over rows of dOut * xhat. rstd is the forward's saved value.
	RMSNormBackward(dX, dW, dOut, x, w, rstd *Tensor) error

	// RoPE rotates pairs (x[..., i], x[..., i + D/2]) ("rotate half") of
	// x [B, H, L, D] by the angle pos[l] * theta^(-2i/D), i < D/2:
	// out_i = x_i cos - x_{i+D/2} sin, out_{i+D/2} = x_{i+D/2} cos + x_i sin.
	// pos is I32 [L], the positions of every sequence, or I32 [B, L], one
	// position vector per sequence (angle pos[b, l] * theta^(-2i/D) for the
	// rows of sequence b), so sequences of different lengths rotate in one
	// call. out may alias x.
	RoPE(out, x, pos *Tensor, theta float32) error
	// RoPEBackward applies the inverse rotation: dX = R(-angle) dOut. dX may
	// alias dOut.
	RoPEBackward(dX, dOut, pos *Tensor, theta float32) error

	// SwiGLU computes out = silu(gate) * up, silu(z) = z * sigmoid(z),
	// elementwise over same-shaped tensors.
	SwiGLU(out, gate, up *Tensor) error
	// SwiGLUBackward computes dGate = dOut * up * sigmoid(g) * (1 + g (1 -
	// sigmoid(g))) and dUp = dOut * silu(g).
	SwiGLUBackward(dGate, dUp, dOut, gate, up *Tensor) error

	// AddScaled computes out = alpha*a + beta*b elementwise (same element
	// counts). out may alias a or b. Residual adds, scaling and axpy are all
	// this op.
	AddScaled(out, a, b *Tensor, alpha, beta float32) error
	// Fill sets every element of t to value.
	Fill(t *Tensor, value float32) error
	// Cast converts src to dst's dtype (same element count), rounding to
	// nearest even; a plain copy when the dtypes match. Float to I32
	// truncates toward zero; I32 to float converts exactly where it can.
	Cast(dst, src *Tensor) error
	// SwapAxes12 transposes the middle two dimensions of a rank-4 tensor:
	// dst[a, c, b, d] = src[a, b, c, d]. It converts between the model's
	// [B, L, H, D] and attention's [B, H, L, D] layouts.
	SwapAxes12(dst, src *Tensor) error
	// KVAppend writes x [B, H, n, D] into cache [B, H, Cap, D] at positions
	// start..start+n-1 of the third dimension. Floating x is converted to
	// the cache's dtype; an I32 cache takes I32 rows.
	KVAppend(cache, x *Tensor, start int) error
	// KVAppendAt is KVAppend with one start per sequence, read from device
	// memory: x [B, H, n, D] goes into cache [B, H, Cap, D] at positions
	// starts[b]..starts[b]+n-1 of sequence b (starts I32 [B]), so sequences
	// of different lengths append together, and a recorded graph (see
	// GraphRecorder) replays it at new positions. A start outside
	// [0, Cap-n] writes nothing for its sequence and is an error, reported
	// by the op or at the next Sync.
	KVAppendAt(cache, x, starts *Tensor) error

	// CrossEntropy is fused softmax cross-entropy over logits [N, W] with
	// targets I32 [N]. The classes are the first C = o.Classes columns of
	// each row (C = W when o.Classes is 0); columns [C, W) are padding (a
	// vocabulary rounded up for aligned matmul tiles) that is never read:
	//
	//	loss[n] = logsumexp(logits[n, :C]) - logits[n, t_n]
	//	        = log sum_{j<C} exp(logits[n, j]) - logits[n, t_n],
	//
	// F32 [N], 0 where t_n == IgnoreIndex; any other target outside [0, C)
	// is an error. If dLogits [N, W] is not nil it receives, for j < C,
	//
	//	dLogits[n, j] = GradScale * (softmax(logits[n, :C])_j - [j == t_n]),
	//
	// and exactly 0 in the pad columns j >= C and in ignored rows; dLogits
	// may alias logits.
	CrossEntropy(loss, dLogits, logits, targets *Tensor, o CrossEntropyOpts) error

	// Attention is softmax attention (A.R == nil) or Parallax attention
	// (docs/MATH.md section 2-3): s = scale q.k, t = r.k (unscaled), p = softmax(s)
	// over unmasked keys, vbar = sum p v, tbar = sum p t,
	// o = vbar (1 + tbar) - sum p t v = o_SA - Sigma_KV r. Implemented as the
	// streaming (FlashAttention-style) algorithm with O(Lk) memory per row
	// block. Fills the optional saved statistics used by the backward.
	Attention(a AttentionArgs) error
	// AttentionBackward computes dQ, dK, dV (and dR for Parallax) of
	// L = sum(o * dO), docs/MATH.md section 4, from the forward's inputs, output and
	// saved statistics (LSE; with R also Vbar and Tbar).
	AttentionBackward(a AttentionBackwardArgs) error
	// DecodeAttention is Attention over a KV cache whose valid prefix length
	// differs per sequence: for sequence b, query i (of Lq) attends to keys
	// j <= i + Lens[b] - Lq (always causal), j > i + Lens[b] - Lq - Window if
	// Window > 0. The keys are split into Splits chunks processed
	// independently, each producing partial statistics (m, d1, d2, O1, O2),
	// which a combine pass merges exactly; the result does not depend on
	// Splits beyond rounding.
	DecodeAttention(a DecodeArgs) error
	// LLA is exact local linear attention (docs/MATH.md section 5): with weights
	// w = exp(s - m), omega = sum w, mu = sum w (k - q),
	// Sig = sum w (k - q)(k - q)^T + lambda omega I and rho* = Sig^-1 mu,
	// o = sum w (1 - rho*.(k - q)) v / (omega - mu.rho*)
	//   = vbar + Sigma_KV (Sigma_KK + lambda I)^-1 (q - kbar).
	LLA(a LLAArgs) error
	// LinearAttention is the uniform-weight branch of the family (docs/MATH.md
	// section 6) with probe R. Plain: o_i = sum_j (r_i . k_j) v_j over the
	// unmasked j (unnormalised linear attention). Affine: with uniform weights
	// 1/n_i over the n_i unmasked keys, o_i = vbar_i - Sigma_KV(i) r_i.
	LinearAttention(a LinearAttentionArgs) error
	// LinearAttentionBackward computes dR, dK, dV of sum(o * dO).
	LinearAttentionBackward(a LinearAttentionBackwardArgs) error

	// HeadGate scales each head's vector by a sigmoid gate:
	// out[..., h, :] = sigmoid(z[..., h]) x[..., h, :], x [..., H, D],
	// z [..., H]. It is the probe gate of the ablation
	// r = sigmoid(w_g . x) W_R x (docs/MATH.md section 7).
	HeadGate(out, x, z *Tensor) error
	// HeadGateBackward computes dX = sigmoid(z) dOut and
	// dZ = sigmoid(z) (1 - sigmoid(z)) sum_d dOut x (both overwritten).
	HeadGateBackward(dX, dZ, dOut, x, z *Tensor) error

	// CorrectionRatio writes to out (F32 [1]) the mean over rows (every
	// b, h, i) of ||vbar - o|| / ||vbar||, the correction-to-output ratio COR
	// = ||Sigma_KV r|| / ||o_SA|| (docs/MATH.md section 7). o and vbar are [..., D];
	// rows with vbar = 0 count as 0.
	CorrectionRatio(out, o, vbar *Tensor) error
	// SumSquares computes out (F32 [1]) = sum x^2, or adds it to out if
	// accumulate. Gradient norms are built from it.
	SumSquares(out, x *Tensor, accumulate bool) error

	// AdamW updates p in place (decoupled decay first, PyTorch's order):
	// p -= lr*wd*p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
	// p -= lr * (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps). m and v are F32.
	AdamW(p, g, m, v *Tensor, o AdamWOpts) error
	// MuonMomentum updates the momentum with the scaled gradient
	// g' = fl(s g), s = o.Scale() (exact when 1), and writes the direction
	// to orthogonalise: m = beta m + (1-beta) g', then u = (1-beta) g' +
	// beta m (o.Nesterov) or u = m, with beta = o.Beta. m is F32; g is not
	// changed.
	MuonMomentum(u, m, g *Tensor, o MuonMomentumOpts) error
	// FrobeniusNormalize writes out = x / (||x||_F + eps), the norm taken per
	// matrix over the last two dimensions. out may alias x.
	FrobeniusNormalize(out, x *Tensor, eps float32) error
	// MuonApply updates p in place: p = p (1 - lr wd) - lr scale o.
	MuonApply(p, o *Tensor, lr, wd, scale float32) error
}

// MatMulOpts modifies MatMul.
type MatMulOpts struct {
	TransA, TransB bool // use the transpose of a / b (last two dimensions)
	Accumulate     bool // out += product instead of out = product
}

// CrossEntropyOpts modifies CrossEntropy.
type CrossEntropyOpts struct {
	IgnoreIndex int32   // targets equal to this are skipped; conventionally -100
	GradScale   float32 // multiplies dLogits, typically 1/(number of counted targets)
	// Classes is the number C of leading columns of logits [N, W] that are
	// classes; 0 means all W. With 0 < C <= W the softmax runs over
	// columns [0, C) only: loss[n] = logsumexp(logits[n, :C]) -
	// logits[n, t_n], a target in [C, W) (and not IgnoreIndex) is an error
	// like any other out-of-range target, and dLogits[n, j] =
	// GradScale (softmax(logits[n, :C])_j - [j == t_n]) for j < C and
	// exactly 0 for the pad columns C <= j < W, whatever logits holds
	// there (pad logits are never read, so they need not be finite).
	// Negative values and values above W are argument errors.
	Classes int
}

// ClassCount returns the effective number of classes of a logits row of
// width w: o.Classes, or w when o.Classes is 0. It does not validate;
// CheckCrossEntropy does.
func (o CrossEntropyOpts) ClassCount(w int) int {
	if o.Classes == 0 {
		return w
	}
	return o.Classes
}

// AttentionOpts are the masking and scaling options shared by the attention
// family.
type AttentionOpts struct {
	// Causal applies the KV-cache convention: query i attends to keys
	// j <= i + (Lk - Lq). It requires Lq <= Lk.
	Causal bool
	// Scale multiplies q.k; 0 means 1/sqrt(D). The probe score r.k is never
	// scaled.
	Scale float32
	// Window > 0 additionally requires j > i + (Lk - Lq) - Window (a sliding
	// window of Window keys ending at the diagonal); it requires Causal.
	Window int
}

// ScaleFor returns the effective q.k scale for head dimension d.
func (o AttentionOpts) ScaleFor(d int) float32 {
	if o.Scale != 0 {
		return o.Scale
	}
	return float32(1 / sqrt64(float64(d)))
}

// AttentionArgs are the operands of Attention. Q and R are [B, Hq, Lq, D];
// K and V are [B, Hkv, Lk, D] with Hq a multiple of Hkv (query head h reads
// KV head h / G).
type AttentionArgs struct {
	Q, K, V *Tensor
	R       *Tensor // the Parallax probe; nil for softmax attention
	O       *Tensor // output [B, Hq, Lq, D]
	// Saved statistics for the backward; each may be nil when not training.
	LSE  *Tensor // F32 [B, Hq, Lq]: m + log d1, the row's log-sum-exp
	Vbar *Tensor // [B, Hq, Lq, D]: o_SA (only with R)
	Tbar *Tensor // F32 [B, Hq, Lq]: sum_j p t (only with R)
	AttentionOpts
}

// AttentionBackwardArgs are the operands of AttentionBackward: the forward's
// inputs and outputs, the upstream gradient DO and the gradients to write.
type AttentionBackwardArgs struct {
	Q, K, V, R     *Tensor // R nil for softmax attention
	O, DO          *Tensor
	LSE            *Tensor // required
	Vbar, Tbar     *Tensor // required with R
	DQ, DK, DV, DR *Tensor // DR required with R, nil without
	AttentionOpts
}

// DecodeArgs are the operands of DecodeAttention. Q (and R) are
// [B, Hq, Lq, D] (Lq = 1 for token-by-token decoding), KCache and VCache
// [B, Hkv, Cap, D], Lens I32 [B] with Lq <= Lens[b] <= Cap: the number of
// valid cache entries of sequence b, including the Lq new ones.
type DecodeArgs struct {
	Q, R           *Tensor // R nil for softmax attention
	KCache, VCache *Tensor
	Lens           *Tensor
	O              *Tensor
	Scale          float32 // 0 means 1/sqrt(D)
	Window         int     // 0: no sliding window
	Splits         int     // number of split-KV chunks; 0 lets the backend choose
}

// LLASolver selects how LLA solves its D x D systems.
type LLASolver int

// LLA solvers.
const (
	SolveCG     LLASolver = iota // conjugate gradients (the default)
	SolveDirect                  // Cholesky factorisation (a cross-check)
)

// String names the solver.
func (s LLASolver) String() string {
	if s == SolveDirect {
		return "direct"
	}
	return "cg"
}

// LLAArgs are the operands of LLA, shaped like AttentionArgs.
type LLAArgs struct {
	Q, K, V *Tensor
	O       *Tensor
	// Optional outputs for analysis: RhoStar [B, Hq, Lq, D] = Sig^-1 mu, and
	// Eta F32 [B, Hq, Lq], the boundary amplification
	// (kbar - q)^T (Sigma_KK + lambda I)^-1 (kbar - q). Then
	// o = o_SA - (1 + eta) Sigma_KV rho*: LLA is Parallax with
	// r = (1 + eta) rho*.
	RhoStar, Eta *Tensor
	Lambda       float32 // ridge, >= 0
	Solver       LLASolver
	// CG stops when ||residual|| <= Tol ||rhs|| (0 means 1e-6) or after
	// MaxIter iterations (0 means 4 D).
	Tol     float32
	MaxIter int
	AttentionOpts
}

// CGLimits returns the conjugate-gradient stopping rule for head dimension
// d: Tol and MaxIter, with their defaults (1e-6 and 4 d) in place of zeros.
func (a LLAArgs) CGLimits(d int) (tol float64, maxIter int) {
	tol, maxIter = float64(a.Tol), a.MaxIter
	if tol == 0 {
		tol = 1e-6
	}
	if maxIter == 0 {
		maxIter = 4 * d
	}
	return tol, maxIter
}

// LinearAttentionArgs are the operands of LinearAttention. R is the probe
// [B, Hq, Lq, D]; K, V [B, Hkv, Lk, D]. Masking follows AttentionOpts
// (Causal, Window); Scale is not used.
type LinearAttentionArgs struct {
	R, K, V *Tensor
	O       *Tensor
	Affine  bool // affine linear attention (with the vbar intercept)
	AttentionOpts
}

// LinearAttentionBackwardArgs are the operands of LinearAttentionBackward.
type LinearAttentionBackwardArgs struct {
	R, K, V    *Tensor
	DO         *Tensor
	DR, DK, DV *Tensor
	Affine     bool
	AttentionOpts
}

// AdamWOpts are AdamW's hyperparameters for one step.
type AdamWOpts struct {
	LR, Beta1, Beta2, Eps, WeightDecay float32
	Step                               int // 1-based step count for bias correction
	// GradScale multiplies the gradient before the update, the product
	// rounded to f32 (g' = fl(s g), what a separate in-place scaling of an
	// f32 gradient would store): gradient clipping's factor, applied here
	// so that it costs no pass over the gradients of its own. The
	// gradient tensor is not changed. 0 means 1.
	GradScale float32
}

// Scale is the gradient scale the update applies: GradScale, or 1 when
// it is 0.
func (o AdamWOpts) Scale() float32 {
	if o.GradScale == 0 {
		return 1
	}
	return o.GradScale
}

// MuonMomentumOpts are MuonMomentum's hyperparameters for one step.
type MuonMomentumOpts struct {
	Beta     float32 // the momentum's EMA coefficient, in [0, 1)
	Nesterov bool    // the direction is (1-beta) g' + beta m rather than m
	// GradScale multiplies the gradient before the update, the product
	// rounded to f32 (g' = fl(s g), what a separate in-place scaling of an
	// f32 gradient would store): gradient clipping's factor, applied here
	// so that it costs no pass over the gradients of its own. The
	// gradient tensor is not changed. 0 means 1.
	GradScale float32
}

// Scale is the gradient scale the update applies: GradScale, or 1 when
// it is 0.
func (o MuonMomentumOpts) Scale() float32 {
	if o.GradScale == 0 {
		return 1
	}
	return o.GradScale
}

// Factors returns the per-step constants every backend's AdamW applies,
// computed in float64: decay = 1 - lr wd (applied to p first), step =
// lr / (1 - beta1^t) and bc2 = sqrt(1 - beta2^t), so that
// p = p decay - step m / (sqrt(v) / bc2 + eps).
func (o AdamWOpts) Factors() (decay, step, bc2 float64) {
	lr, t := float64(o.LR), float64(o.Step)
	return 1 - lr*float64(o.WeightDecay), lr / (1 - math.Pow(float64(o.Beta1), t)), math.Sqrt(1 - math.Pow(float64(o.Beta2), t))
}

// NormRoPE is implemented by a Device that fuses the per-head RMSNorm and
// RoPE applied to the attention inputs q, k (and Parallax's r) into one
// pass over each [D] row, reading the projection's layout [B, L, H, D] and
// writing attention's [B, H, L, D], so that the norm, the SwapAxes12 and
// the RoPE of each input are one launch and one read and write of the
// tensor. It is an optional capability, not part of Ops, so that a device
// without the kernels still runs every model: RMSNormRoPE and
// RMSNormRoPEBackward compose the same result from RMSNorm, SwapAxes12 and
// RoPE there.
type NormRoPE interface {
	// RMSNormRoPE computes, for every row (b, l, h) of x [B, L, H, D],
	// y = x * rstd * w with rstd = 1/sqrt(mean(x^2) + eps) over D and w
	// [D], then rotates the pairs (y_i, y_{i+D/2}) by the angle
	// a = pos * theta^(-2i/D), i < D/2 (pos[l] for pos I32 [L], pos[b, l]
	// for per-sequence positions I32 [B, L]):
	//
	//	out[b, h, l, i]       = y_i cos a - y_{i+D/2} sin a
	//	out[b, h, l, i + D/2] = y_{i+D/2} cos a + y_i sin a
	//
	// out is [B, H, L, D], so out = RoPE(SwapAxes12(RMSNorm(x, w)), pos).
	// rstd, if not nil, receives the per-row rstd as F32 [B, L, H]. out
	// must not alias x.
	RMSNormRoPE(out, rstd, x, w, pos *Tensor, eps, theta float32) error
	// RMSNormRoPEBackward is the backward of RMSNormRoPE: with
	// g = R(-a) dOut (dOut [B, H, L, D] rotated back, row (b, h, l) to
	// row (b, l, h)), xhat = x * rstd and gy = g * w, it computes
	// dX = rstd (gy - xhat mean(gy xhat)) in [B, L, H, D] and accumulates
	// dW += sum over rows of g * xhat (the sum formed in f32 or better, as
	// RMSNormBackward's). rstd is the forward's saved F32 [B, L, H]. dX
	// must not alias dOut.
	RMSNormRoPEBackward(dX, dW, dOut, x, w, rstd, pos *Tensor, theta float32) error
}

// RMSNormRoPE computes out = RoPE(SwapAxes12(RMSNorm(x, w)), pos) (see
// NormRoPE.RMSNormRoPE): in one fused op on a NormRoPE device, else as
// RMSNorm into a scratch [B, L, H, D] tensor, SwapAxes12 into out and RoPE
// in place. The two agree up to the rounding of the composition's
// intermediate (none in f32).
func RMSNormRoPE(dev Device, out, rstd, x, w, pos *Tensor, eps, theta float32) error {
	if nr, ok := dev.(NormRoPE); ok {
		return nr.RMSNormRoPE(out, rstd, x, w, pos, eps, theta)
	}
	b, l, h, d, err := CheckRMSNormRoPE(nil, out, rstd, x, w, pos)
	if err != nil {
		return err
	}
	normed, same, free, err := swapScratch(dev, out, b, l, h, d)
	if err != nil {
		return fmt.Errorf("rmsnorm rope: %w", err)
	}
	defer free()
	if err := dev.RMSNorm(normed, rstd, x, w, eps); err != nil {
		return err
	}
	if !same {
		if err := dev.SwapAxes12(out, normed); err != nil {
			return err
		}
	}
	return dev.RoPE(out, out, pos, theta)
}

// RMSNormRoPEBackward computes the gradients of RMSNormRoPE (see
// NormRoPE.RMSNormRoPEBackward): in one fused op on a NormRoPE device,
// else as RoPEBackward into a scratch [B, H, L, D] tensor, SwapAxes12 to
// [B, L, H, D] and RMSNormBackward.
func RMSNormRoPEBackward(dev Device, dX, dW, dOut, x, w, rstd, pos *Tensor, theta float32) error {
	if nr, ok := dev.(NormRoPE); ok {
		return nr.RMSNormRoPEBackward(dX, dW, dOut, x, w, rstd, pos, theta)
	}
	b, l, h, d, err := CheckRMSNormRoPEBackward(nil, dX, dW, dOut, x, w, rstd, pos)
	if err != nil {
		return err
	}
	rot, err := dev.Alloc(dOut.DType(), b, h, l, d)
	if err != nil {
		return fmt.Errorf("rmsnorm rope backward: %w", err)
	}
	defer dev.Free(rot)
	if err := dev.RoPEBackward(rot, dOut, pos, theta); err != nil {
		return err
	}
	g, same, free, err := swapScratch(dev, rot, b, l, h, d)
	if err != nil {
		return fmt.Errorf("rmsnorm rope backward: %w", err)
	}
	defer free()
	if !same {
		if err := dev.SwapAxes12(g, rot); err != nil {
			return err
		}
	}
	return dev.RMSNormBackward(dX, dW, g, x, w, rstd)
}

// swapScratch returns a [B, L, H, D] tensor to swap with t [B, H, L, D]:
// a view of t itself (same) when L or H is 1, where the two layouts are
// the same memory and the swap is the identity, else a new tensor of t's
// dtype that free releases.
func swapScratch(dev Device, t *Tensor, b, l, h, d int) (s *Tensor, same bool, free func(), err error) {
	if l == 1 || h == 1 {
		v, err := t.Reshape(b, l, h, d)
		return v, true, func() {}, err
	}
	s, err = dev.Alloc(t.DType(), b, l, h, d)
	if err != nil {
		return nil, false, nil, err
	}
	return s, false, func() { dev.Free(s) }, nil
}
