package cpu

import (
	"fmt"

	"github.com/parallax-engine/parallax/engine"
)

// DecodeAttention is attention over a KV cache with a valid length per
// sequence, computed split-KV (Flash-Decoding): the keys a sequence's
// queries can see are cut into Splits chunks, each work item (batch, KV
// head, query block, chunk) streams its chunk through the rows of all G
// query heads of the group (so a K/V tile is read once per group) and
// leaves one partial state per row, and a combine pass merges each row's
// partial states exactly (log-sum-exp rescaling) and finalises the output.
//
// Splits = 0 chooses enough chunks to give every worker about two items,
// with chunks of at least one tile (attnBk keys). With a sliding window the
// chunks cover only the keys some query of the sequence can see. Lens is
// validated first: Lq <= Lens[b] <= Cap for every b, else the op fails
// without writing O.
func (d *Device) DecodeAttention(a engine.DecodeArgs) error {
	dims, err := engine.CheckDecode(d.own, a)
	if err != nil {
		return err
	}
	lens := ints(a.Lens)
	for b, n := range lens {
		if int(n) < dims.Lq || int(n) > dims.Cap {
			return d.fail(&engine.ArgError{Op: "decode attention", Operand: "lens",
				Msg: fmt.Sprintf("lens[%d] = %d is outside [Lq %d, capacity %d] (sequence %d)", b, n, dims.Lq, dims.Cap, b)})
		}
	}
	q := floats(a.Q)
	kc, vc := d.decodeCache(a.KCache, dims, lens), d.decodeCache(a.VCache, dims, lens)
	var r []float32
	if a.R != nil {
		r = floats(a.R)
	}
	o, commit := output(a.O, false)
	d.decode(dims, lens, q, r, kc, vc, o, a.Splits)
	commit()
	return nil
}

// decodeCache returns a cache's values as float32: an F32 cache's own
// storage, else a widened copy of only the valid entries (j < Lens[b]) of
// each sequence, so a long, mostly empty bf16 cache costs what it holds.
func (d *Device) decodeCache(t *engine.Tensor, dims engine.DecodeDims, lens []int32) []float32 {
	if f, ok := t.Storage().([]float32); ok {
		return f
	}
	raw := t.Storage().([]uint16)
	conv := engine.BF16ToFloat32
	if t.DType() == engine.F16 {
		conv = engine.F16ToFloat32
	}
	out := make([]float32, len(raw))
	D, capacity := dims.D, dims.Cap
	d.parallel(dims.B*dims.Hkv, func(lo, hi int) {
		for bh := lo; bh < hi; bh++ {
			off := bh * capacity * D
			n := int(lens[bh/dims.Hkv]) * D
			for x, h := range raw[off : off+n] {
				out[off+x] = conv(h)
			}
		}
	})
	return out
}

// decodeVisible returns the keys [lo, hi) query i of a sequence with n valid
// cache entries sees: j <= i + n - Lq, and j > i + n - Lq - Window.
func decodeVisible(dims engine.DecodeDims, n, i int) (lo, hi int) {
	hi = i + n - dims.Lq + 1
	if dims.Window > 0 {
		lo = max(0, hi-dims.Window)
	}
	return lo, hi
}

// decodeSplits is the number of chunks when the caller leaves it to us.
func decodeSplits(threads, items, maxKeys int) int {
	want := (2*threads + items - 1) / max(items, 1)
	return max(1, min(want, (maxKeys+attnBk-1)/attnBk))
}

func (d *Device) decode(dims engine.DecodeDims, lens []int32, q, r, kc, vc, o []float32, splits int) {
	D, G := dims.D, dims.G
	bq := attnBlockRows(G)
	nqb := (dims.Lq + bq - 1) / bq
	heads := dims.B * dims.Hkv
	// chunkRange is the union of the keys the sequence's queries see.
	chunkRange := func(b int) (lo, hi int) {
		n := int(lens[b])
		lo, _ = decodeVisible(dims, n, 0)
		return lo, n
	}
	if splits == 0 {
		maxKeys := 0
		for b := range dims.B {
			lo, hi := chunkRange(b)
			maxKeys = max(maxKeys, hi-lo)
		}
		splits = decodeSplits(d.threads, heads*nqb, maxKeys)
	}
	// The partial states, [B, Hq, Lq, splits], each with D-element
	// accumulators.
	rows := dims.B * dims.Hq * dims.Lq
	parts := make([]partial, rows*splits)
	o1 := make([]float32, rows*splits*D)
	var o2 []float32
	if r != nil {
		o2 = make([]float32, rows*splits*D)
	}
	for n := range parts {
		parts[n].o1 = o1[n*D : (n+1)*D]
		if r != nil {
			parts[n].o2 = o2[n*D : (n+1)*D]
		}
	}
	attnDynamic(d, heads*nqb*splits, func(int) *attnScratch { return newAttnScratch(G*bq, D, r != nil) },
		func(w *attnScratch, item int) {
			c := item % splits
			rest := item / splits
			qb, bh := rest%nqb, rest/nqb
			b, hk := bh/dims.Hkv, bh%dims.Hkv
			n := int(lens[b])
			lo, hi := chunkRange(b)
			c0, c1 := lo+(hi-lo)*c/splits, lo+(hi-lo)*(c+1)/splits
			i0, i1 := attnRowBlock(qb, bq, dims.Lq)
			rowsBlk := w.rows[:0]
			for g := range G {
				h := hk*G + g
				for i := i0; i < i1; i++ {
					row := (b*dims.Hq+h)*dims.Lq + i
					st := &parts[row*splits+c]
					st.reset()
					ar := attnRow{q: q[row*D : (row+1)*D], st: st}
					if r != nil {
						ar.r = r[row*D : (row+1)*D]
					}
					ar.lo, ar.hi = decodeVisible(dims, n, i)
					rowsBlk = append(rowsBlk, ar)
				}
			}
			kvOff := (b*dims.Hkv + hk) * dims.Cap * D
			kh, vh := kc[kvOff:kvOff+dims.Cap*D], vc[kvOff:kvOff+dims.Cap*D]
			w.fold(rowsBlk, kh, vh, c0, c1, D, dims.Scale)
		})
	d.parallelMin(rows, 16, func(lo, hi int) {
		for row := lo; row < hi; row++ {
			st := &parts[row*splits]
			for c := 1; c < splits; c++ {
				st.merge(&parts[row*splits+c])
			}
			st.finish(o[row*D:(row+1)*D], nil)
		}
	})
}
