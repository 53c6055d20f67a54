package engine

import "fmt"

// DecodePrepArgs are the operands of DecodePrep: the projections of L new
// positions of B sequences and where their attention inputs go.
type DecodePrepArgs struct {
	// Q and R are [B, L, Hq, D], K and V [B, L, Hkv, D]: the projections
	// in their own layout. R is nil for softmax attention (or for a
	// caller that prepares the probes itself).
	Q, K, V, R *Tensor
	// QNorm, KNorm and RNorm are the per-head RMSNorm weights [D] (RNorm
	// only with R).
	QNorm, KNorm, RNorm *Tensor
	// QOut and ROut receive the normed, rotated q and r as [B, Hq, L, D]
	// (ROut only with R).
	QOut, ROut *Tensor
	// KCache and VCache [B, Hkv, Cap, D] receive the normed, rotated k and
	// the v rows at positions Starts[b].. of sequence b.
	KCache, VCache *Tensor
	// Pos is I32 [L] (every sequence's RoPE positions) or [B, L] (one
	// vector per sequence); Starts is I32 [B], each sequence's first cache
	// position (as KVAppendAt's).
	Pos, Starts *Tensor
	// Eps is the head norms' epsilon, Theta RoPE's base.
	Eps, Theta float32
	// KH and VH are optional [B, Hkv, L, D] scratch of the caches' dtype
	// for the composition (the rotated k and the swapped v before they are
	// appended); nil allocates them for the call where needed. What they
	// hold afterwards is unspecified (a fused device does not write them)
	// unless KeepKV is set.
	KH, VH *Tensor
	// KeepKV asks for the rotated k and the v rows in attention's layout
	// as well: KH and VH (both then required) receive them, for a
	// prefill's attention over the new positions.
	KeepKV bool
}

// DecodePreparer is implemented by a Device that prepares a decode step's
// attention inputs in one launch: the per-head RMSNorm and RoPE of q, k
// (and Parallax's r), written to attention's layout, and the appends of k
// and v to the KV caches at each sequence's start, which are otherwise
// three RMSNormRoPE, a SwapAxes12 and two KVAppendAt launches.
type DecodePreparer interface {
	// DecodePrep computes, with nr(x, w) = RMSNormRoPE(x, w, Pos, Eps,
	// Theta) (see NormRoPE.RMSNormRoPE):
	//
	//	QOut = nr(Q, QNorm), ROut = nr(R, RNorm)
	//	KCache[b, h, Starts[b] + l] = nr(K, KNorm)[b, h, l]
	//	VCache[b, h, Starts[b] + l] = V[b, l, h]
	//	KH[b, h, l] = nr(K, KNorm)[b, h, l], VH[b, h, l] = V[b, l, h] (KeepKV)
	//
	// A start outside [0, Cap - L] writes nothing into the caches for its
	// sequence and is an error, reported by the op or at the next Sync (as
	// KVAppendAt's). It reports false, having done nothing, when the
	// device has no kernel for these operands.
	DecodePrep(a DecodePrepArgs) (bool, error)
}

// DecodePrepDims are the validated sizes of DecodePrep.
type DecodePrepDims struct {
	B, L, Hq, Hkv, D, Cap int
}

// CheckDecodePrep validates DecodePrep's operands (see DecodePrepArgs) and
// returns their sizes; the starts' values are checked by the op. Valid
// operands are then passed to own (nil: no device).
func CheckDecodePrep(own Owner, a DecodePrepArgs) (DecodePrepDims, error) {
	const op = "decode prep"
	var dd DecodePrepDims
	if err := need(op, "q", a.Q, 4, "[B,L,Hq,D]"); err != nil {
		return dd, err
	}
	if err := need(op, "k", a.K, 4, "[B,L,Hkv,D]"); err != nil {
		return dd, err
	}
	if err := need(op, "kCache", a.KCache, 4, "[B,Hkv,Cap,D]"); err != nil {
		return dd, err
	}
	if err := needFloats(op, []string{"q", "k", "kCache"}, a.Q, a.K, a.KCache); err != nil {
		return dd, err
	}
	b, l, hq, d := a.Q.Dim(0), a.Q.Dim(1), a.Q.Dim(2), a.Q.Dim(3)
	hkv, capacity := a.K.Dim(2), a.KCache.Dim(2)
	dd = DecodePrepDims{B: b, L: l, Hq: hq, Hkv: hkv, D: d, Cap: capacity}
	if d%2 != 0 {
		return dd, argErr(op, "q", "head dimension %d is odd", d)
	}
	if l > capacity {
		return dd, argErr(op, "", "%d positions exceed the cache capacity %d", l, capacity)
	}
	kv, cache, out, row := Shape{b, l, hkv, d}, Shape{b, hkv, capacity, d}, Shape{b, hq, l, d}, Shape{d}
	withR := a.R != nil
	pos := Shape{l}
	if a.Pos != nil && a.Pos.Rank() == 2 {
		pos = Shape{b, l} // one position vector per sequence
	}
	err := needOperands(op,
		operand{name: "k", t: a.K, want: kv},
		operand{name: "v", t: a.V, want: kv},
		operand{name: "qNorm", t: a.QNorm, want: row},
		operand{name: "kNorm", t: a.KNorm, want: row},
		operand{name: "qOut", t: a.QOut, want: out},
		operand{name: "kCache", t: a.KCache, want: cache},
		operand{name: "vCache", t: a.VCache, want: cache},
		operand{name: "pos", t: a.Pos, want: pos, dt: I32},
		operand{name: "starts", t: a.Starts, want: Shape{b}, dt: I32},
		operand{name: "r", t: a.R, want: a.Q.shape, optional: true},
		operand{name: "rNorm", t: a.RNorm, want: row, optional: !withR},
		operand{name: "rOut", t: a.ROut, want: out, optional: !withR},
		operand{name: "kh", t: a.KH, want: Shape{b, hkv, l, d}, optional: true},
		operand{name: "vh", t: a.VH, want: Shape{b, hkv, l, d}, optional: true})
	if err != nil {
		return dd, err
	}
	if !withR && (a.RNorm != nil || a.ROut != nil) {
		return dd, argErr(op, "r", "missing (rNorm or rOut given without r)")
	}
	if a.KeepKV && (a.KH == nil || a.VH == nil) {
		return dd, argErr(op, "kh", "missing (KeepKV needs kh and vh)")
	}
	return dd, own.check(op, a.Q, a.K, a.V, a.R, a.QNorm, a.KNorm, a.RNorm, a.QOut, a.ROut, a.KCache, a.VCache,
		a.Pos, a.Starts, a.KH, a.VH)
}

// DecodePrep prepares a decode step's attention inputs (see
// DecodePreparer.DecodePrep): in one launch on a DecodePreparer device
// that takes the operands, else as the ops it fuses: RMSNormRoPE of q, k
// (into KH) and r, KVAppendAt of KH and of v (through VH, or a view of v
// where L or Hkv is 1, the swap is the identity and KeepKV is not set).
// The two agree up to the composition's rounding of KH to its dtype (none
// where KH has the cache's dtype, as when DecodePrep allocates it).
func DecodePrep(dev Device, a DecodePrepArgs) error {
	const op = "decode prep"
	dd, err := CheckDecodePrep(nil, a)
	if err != nil {
		return err
	}
	if p, ok := dev.(DecodePreparer); ok {
		if done, err := p.DecodePrep(a); done || err != nil {
			return err
		}
	}
	kvShape := Shape{dd.B, dd.Hkv, dd.L, dd.D}
	kh, freeK, err := scratchLike(dev, a.KH, a.KCache.dtype, kvShape)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	defer freeK()
	if err := RMSNormRoPE(dev, a.QOut, nil, a.Q, a.QNorm, a.Pos, a.Eps, a.Theta); err != nil {
		return err
	}
	if err := RMSNormRoPE(dev, kh, nil, a.K, a.KNorm, a.Pos, a.Eps, a.Theta); err != nil {
		return err
	}
	var vh *Tensor
	if (dd.L == 1 || dd.Hkv == 1) && !a.KeepKV {
		// [B, L, Hkv, D] and [B, Hkv, L, D] are the same memory.
		if vh, err = a.V.Reshape(kvShape...); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
	} else {
		var freeV func()
		if vh, freeV, err = scratchLike(dev, a.VH, a.VCache.dtype, kvShape); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		defer freeV()
		if err := dev.SwapAxes12(vh, a.V); err != nil {
			return err
		}
	}
	if a.R != nil {
		if err := RMSNormRoPE(dev, a.ROut, nil, a.R, a.RNorm, a.Pos, a.Eps, a.Theta); err != nil {
			return err
		}
	}
	if err := dev.KVAppendAt(a.KCache, kh, a.Starts); err != nil {
		return err
	}
	return dev.KVAppendAt(a.VCache, vh, a.Starts)
}
