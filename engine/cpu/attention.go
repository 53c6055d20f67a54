package cpu

import (
	"math"
	"sync/atomic"

	"github.com/parallax-engine/parallax/engine"
)

// Tile sizes of the streaming attention kernels. A work item is a block of
// query rows (attnRows rows over the G query heads of one KV head, so a K/V
// tile read from memory serves every head of the group) that walks the keys
// in tiles of attnBk rows: with D = 128 a tile of K and V is 64 KiB and the
// block's accumulators 32 KiB, which stay in the L2 cache while the block
// is processed.
const (
	attnRows = 32 // query rows per block (over the G heads of a group)
	attnBk   = 64 // keys per tile
)

// attnBlockRows is the number of query positions per block for group size g.
func attnBlockRows(g int) int { return max(1, attnRows/max(g, 1)) }

// partial is the streaming state of one query row over some of its keys
// (docs/MATH.md section 3): the running maximum m of the scaled scores s, and with
// p~ = exp(s - m), d1 = sum p~, d2 = sum p~ t, o1 = sum p~ v, o2 = sum p~ t v.
// o2 is nil for softmax attention (t = 0). A state that has seen no key has
// m = -Inf and d1 = 0.
type partial struct {
	m      float32
	d1, d2 float64
	o1, o2 []float32
}

// reset empties the state.
func (p *partial) reset() {
	p.m = float32(math.Inf(-1))
	p.d1, p.d2 = 0, 0
	clear(p.o1)
	clear(p.o2)
}

// absorb folds a run of keys into the state: s holds their scaled scores,
// t their probe scores (nil for softmax), v their value rows. s and t are
// overwritten with p~ and p~ t.
func (p *partial) absorb(s, t, v []float32) {
	mx := p.m
	for _, x := range s {
		mx = max(mx, x)
	}
	if mx > p.m {
		if p.d1 != 0 {
			alpha := math.Exp(float64(p.m - mx))
			p.d1 *= alpha
			p.d2 *= alpha
			attnScale(p.o1, float32(alpha))
			attnScale(p.o2, float32(alpha))
		}
		p.m = mx
	}
	var d1, d2 float64
	if t == nil {
		for n, x := range s {
			e := float32(math.Exp(float64(x - mx)))
			s[n] = e
			d1 += float64(e)
		}
		p.d1 += d1
		attnAccum(p.o1, s, v)
		return
	}
	t = t[:len(s)]
	for n, x := range s {
		e := float32(math.Exp(float64(x - mx)))
		s[n] = e
		d1 += float64(e)
		et := e * t[n]
		t[n] = et
		d2 += float64(et)
	}
	p.d1 += d1
	p.d2 += d2
	attnAccum2(p.o1, p.o2, s, t, v)
}

// merge folds another state over a disjoint set of keys into p: the exact
// log-sum-exp combination (both are rescaled to the larger maximum).
func (p *partial) merge(q *partial) {
	if q.d1 == 0 {
		return
	}
	if p.d1 == 0 {
		p.m, p.d1, p.d2 = q.m, q.d1, q.d2
		copy(p.o1, q.o1)
		copy(p.o2, q.o2)
		return
	}
	m := max(p.m, q.m)
	a, b := math.Exp(float64(p.m-m)), math.Exp(float64(q.m-m))
	p.m = m
	p.d1 = a*p.d1 + b*q.d1
	p.d2 = a*p.d2 + b*q.d2
	af, bf := float32(a), float32(b)
	qo := q.o1[:len(p.o1)]
	for x := range p.o1 {
		p.o1[x] = af*p.o1[x] + bf*qo[x]
	}
	if p.o2 != nil {
		qo = q.o2[:len(p.o2)]
		for x := range p.o2 {
			p.o2[x] = af*p.o2[x] + bf*qo[x]
		}
	}
}

// finish writes the row's output o (and vbar when not nil) and returns its
// log-sum-exp m + log d1 and tbar = d2/d1. With vbar = o1/d1:
// o = vbar (1 + tbar) - o2/d1, which is vbar itself when o2 is nil or
// (r = 0) all zero. A row that saw no key gets o = 0 and lse = -Inf.
func (p *partial) finish(o, vbar []float32) (lse, tbar float32) {
	if p.d1 == 0 {
		clear(o)
		clear(vbar)
		return float32(math.Inf(-1)), 0
	}
	inv := float32(1 / p.d1)
	lse = float32(float64(p.m) + math.Log(p.d1))
	o1 := p.o1[:len(o)]
	if p.o2 == nil {
		for x := range o {
			o[x] = o1[x] * inv
		}
		if vbar != nil {
			copy(vbar, o)
		}
		return lse, 0
	}
	tbar = float32(p.d2 / p.d1)
	o2 := p.o2[:len(o)]
	for x := range o {
		vb := o1[x] * inv
		o[x] = vb*(1+tbar) - o2[x]*inv
	}
	if vbar != nil {
		vbar = vbar[:len(o)]
		for x := range vbar {
			vbar[x] = o1[x] * inv
		}
	}
	return lse, tbar
}

func attnScale(x []float32, a float32) {
	for i := range x {
		x[i] *= a
	}
}

// attnRow is one query row of a block: its query and probe (nil for
// softmax), the key range [lo, hi) it may see and its streaming state.
type attnRow struct {
	q, r   []float32
	lo, hi int
	st     *partial
}

// attnScratch is one worker's scratch for the forward kernels.
type attnScratch struct {
	s, t   []float32 // one tile of scores
	rows   []attnRow
	states []partial
	o1, o2 []float32 // the states' accumulators
}

func newAttnScratch(rows, D int, parallax bool) *attnScratch {
	w := &attnScratch{
		s: make([]float32, attnBk), t: make([]float32, attnBk),
		rows: make([]attnRow, 0, rows), states: make([]partial, rows),
		o1: make([]float32, rows*D),
	}
	if parallax {
		w.o2 = make([]float32, rows*D)
	}
	for n := range w.states {
		w.states[n].o1 = w.o1[n*D : (n+1)*D]
		if parallax {
			w.states[n].o2 = w.o2[n*D : (n+1)*D]
		}
	}
	return w
}

// fold streams keys [k0, k1) of one KV head (k and v hold that head's rows)
// through the states of rows, one tile of attnBk keys at a time; each row
// only sees its own range, so fully masked (row, tile) pairs cost nothing.
func (w *attnScratch) fold(rows []attnRow, k, v []float32, k0, k1, D int, scale float32) {
	for t0 := k0; t0 < k1; t0 += attnBk {
		t1 := min(t0+attnBk, k1)
		for i := range rows {
			row := &rows[i]
			j0, j1 := max(row.lo, t0), min(row.hi, t1)
			if j0 >= j1 {
				continue
			}
			s := w.s[:j1-j0]
			kt, vt := k[j0*D:j1*D], v[j0*D:j1*D]
			if row.r == nil {
				scoresQK(s, row.q, kt, scale)
				row.st.absorb(s, nil, vt)
			} else {
				t := w.t[:j1-j0]
				scoresQRK(s, t, row.q, row.r, kt, scale)
				row.st.absorb(s, t, vt)
			}
		}
	}
}

// attnDynamic runs fn(w, item) for every item in [0, n) on up to d.threads
// workers, each taking the next item from a shared counter (so uneven items,
// like causal row blocks, balance), with newW creating each worker's scratch
// once; worker ids are 0, 1, ... below d.threads.
func attnDynamic[W any](d *Device, n int, newW func(id int) W, fn func(w W, item int)) {
	if n <= 0 {
		return
	}
	var next atomic.Int64
	d.parallel(max(1, min(d.threads, n)), func(lo, hi int) {
		w := newW(lo)
		for {
			it := int(next.Add(1)) - 1
			if it >= n {
				return
			}
			fn(w, it)
		}
	})
}

// attnRowBlock returns the positions [i0, i1) of query block qb.
func attnRowBlock(qb, bq, lq int) (i0, i1 int) { return qb * bq, min((qb+1)*bq, lq) }

// Attention is the streaming (FlashAttention-style) forward of softmax or
// Parallax attention, docs/MATH.md sections 2-3. Work items are (batch, KV head,
// block of query positions) over all G heads of the group, the longest
// (latest causal) blocks first.
func (d *Device) Attention(a engine.AttentionArgs) error {
	dims, err := engine.CheckAttention(d.own, a)
	if err != nil {
		return err
	}
	q, k, v := floats(a.Q), floats(a.K), floats(a.V)
	var r []float32
	if a.R != nil {
		r = floats(a.R)
	}
	o, commitO := output(a.O, false)
	var lse, tbar, vbar []float32
	commits := []func(){commitO}
	if a.LSE != nil {
		var c func()
		lse, c = output(a.LSE, false)
		commits = append(commits, c)
	}
	if a.Tbar != nil {
		var c func()
		tbar, c = output(a.Tbar, false)
		commits = append(commits, c)
	}
	if a.Vbar != nil {
		var c func()
		vbar, c = output(a.Vbar, false)
		commits = append(commits, c)
	}
	d.attentionForward(dims, q, k, v, r, o, vbar, lse, tbar)
	for _, c := range commits {
		c()
	}
	return nil
}

func (d *Device) attentionForward(dims engine.AttnDims, q, k, v, r, o, vbar, lse, tbar []float32) {
	D, G := dims.D, dims.G
	bq := attnBlockRows(G)
	nqb := (dims.Lq + bq - 1) / bq
	heads := dims.B * dims.Hkv
	attnDynamic(d, heads*nqb, func(int) *attnScratch { return newAttnScratch(G*bq, D, r != nil) },
		func(w *attnScratch, item int) {
			qb := nqb - 1 - item/heads
			bh := item % heads
			b, hk := bh/dims.Hkv, bh%dims.Hkv
			i0, i1 := attnRowBlock(qb, bq, dims.Lq)
			rows := w.rows[:0]
			k0, k1 := dims.Lk, 0
			for g := range G {
				h := hk*G + g
				for i := i0; i < i1; i++ {
					st := &w.states[len(rows)]
					st.reset()
					off := ((b*dims.Hq+h)*dims.Lq + i) * D
					row := attnRow{q: q[off : off+D], st: st}
					if r != nil {
						row.r = r[off : off+D]
					}
					row.lo, row.hi = dims.Visible(i)
					k0, k1 = min(k0, row.lo), max(k1, row.hi)
					rows = append(rows, row)
				}
			}
			kvOff := (b*dims.Hkv + hk) * dims.Lk * D
			kh, vh := k[kvOff:kvOff+dims.Lk*D], v[kvOff:kvOff+dims.Lk*D]
			w.fold(rows, kh, vh, k0, k1, D, dims.Scale)
			n := 0
			for g := range G {
				h := hk*G + g
				for i := i0; i < i1; i++ {
					st := rows[n].st
					n++
					stat := (b*dims.Hq+h)*dims.Lq + i
					off := stat * D
					var vb []float32
					if vbar != nil {
						vb = vbar[off : off+D]
					}
					l, t := st.finish(o[off:off+D], vb)
					if lse != nil {
						lse[stat] = l
					}
					if tbar != nil {
						tbar[stat] = t
					}
				}
			}
		})
}
