package cpu

import (
	"fmt"

	"github.com/parallax-engine/parallax/engine"
)

// MatMul is a packed, cache-blocked GEMM in float32 (the GotoBLAS scheme):
// op(b) is packed once into panels of gemmNR columns (k-major, so the
// micro-kernel reads gemmNR contiguous values per k); each task packs blocks
// of op(a) (mcBlock rows by kcBlock depth, sized for L2) into strips of
// gemmMR rows; a register-blocked gemmMR x gemmNR micro-kernel multiplies a
// strip by a panel (kcBlock x gemmNR, resident in L1). Transposes cost
// nothing beyond the packing. Tasks are (batch entry, row block, column
// block) triples spread over the workers. Products with one or two rows
// (decoding) skip the packing and stream op(b) once.
//
// The micro-kernel shape suits scalar Go code: eight accumulators plus six
// operands fit amd64's sixteen floating-point registers without spilling;
// larger tiles (4x3, 4x4) measured slower.

const (
	gemmMR  = 4   // micro-kernel rows
	gemmNR  = 2   // micro-kernel columns
	kcBlock = 256 // depth of a packed block
	mcBlock = 64  // rows of a packed block of a
	ncBlock = 256 // columns per task
)

// gemm describes one validated MatMul over float32 operands.
type gemm struct {
	a, b, c        []float32
	batch, m, n, k int
	transA, transB bool
	sharedB        bool
	acc            bool // add to c instead of overwriting it
}

// MatMul computes out = op(a) op(b) (+ out); see engine.Ops.
func (d *Device) MatMul(out, a, b *engine.Tensor, o engine.MatMulOpts) error {
	dims, err := engine.CheckMatMul(out, a, b, o)
	if err != nil {
		return err
	}
	if err := d.own("matmul", out, a, b); err != nil {
		return err
	}
	if sameStorage(out, a) || sameStorage(out, b) {
		return &engine.ArgError{Op: "matmul", Operand: "out", Msg: fmt.Sprintf("%v shares its storage with an input; write the product to another tensor", out)}
	}
	if dims.Batch == 0 || dims.M == 0 || dims.N == 0 {
		return nil
	}
	c, commit := output(out, o.Accumulate)
	g := gemm{
		a: floats(a), b: floats(b), c: c,
		batch: dims.Batch, m: dims.M, n: dims.N, k: dims.K,
		transA: o.TransA, transB: o.TransB, sharedB: dims.SharedB, acc: o.Accumulate,
	}
	switch {
	case g.k == 0:
		if !g.acc {
			clear(c)
		}
	case g.m <= 2:
		d.gemmRows(&g)
	default:
		d.gemmPacked(&g)
	}
	commit()
	return nil
}

// bOffset is where batch entry bi's b starts.
func (g *gemm) bOffset(bi int) int {
	if g.sharedB {
		return 0
	}
	return bi * g.k * g.n
}

// gemmPacked is the blocked path for m > 2.
func (d *Device) gemmPacked(g *gemm) {
	m, n, k := g.m, g.n, g.k
	nPan := (n + gemmNR - 1) / gemmNR
	nb := g.batch
	if g.sharedB {
		nb = 1
	}
	panLen := k * gemmNR
	flops := 2 * g.batch * m * n * k
	minPar, packMin := 1, max(1, 1<<16/max(panLen, 1))
	if flops < 1<<18 {
		minPar, packMin = 1<<30, 1<<30 // too small to be worth a goroutine
	}

	// Pack op(b): panel (bb, jp) holds gemmNR columns from jp*gemmNR of
	// batch entry bb, zero-padded past n.
	pb := make([]float32, nb*nPan*panLen)
	d.parallelMin(nb*nPan, packMin, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			bb, jp := t/nPan, t%nPan
			g.packB(pb[t*panLen:(t+1)*panLen], bb, jp)
		}
	})

	// Choose the task grid; shrink blocks until every worker has work.
	mc, pPerTask := mcBlock, ncBlock/gemmNR
	grid := func() (int, int, int) {
		rb := (m + mc - 1) / mc
		cb := (nPan + pPerTask - 1) / pPerTask
		return rb, cb, g.batch * rb * cb
	}
	rb, cb, tasks := grid()
	for tasks < 2*d.threads && (pPerTask > 8 || mc > 4*gemmMR) {
		if pPerTask > 8 {
			pPerTask /= 2
		} else {
			mc /= 2
		}
		rb, cb, tasks = grid()
	}
	kc := min(kcBlock, k)
	d.parallelMin(tasks, minPar, func(lo, hi int) {
		ap := make([]float32, mc*kc)
		for t := lo; t < hi; t++ {
			bi := t / (rb * cb)
			ib := t / cb % rb
			jb := t % cb
			i0 := ib * mc
			rows := min(mc, m-i0)
			jp0 := jb * pPerTask
			jp1 := min(jp0+pPerTask, nPan)
			bb := bi
			if g.sharedB {
				bb = 0
			}
			g.block(ap, pb[bb*nPan*panLen:(bb+1)*nPan*panLen], bi, i0, rows, jp0, jp1, kc)
		}
	})
}

// block computes rows i0..i0+rows-1 and panels jp0..jp1-1 of batch entry bi
// from the packed b panels pb of that entry.
func (g *gemm) block(ap, pb []float32, bi, i0, rows, jp0, jp1, kc int) {
	m, n, k := g.m, g.n, g.k
	strips := (rows + gemmMR - 1) / gemmMR
	cOff := bi * m * n
	var tile [gemmMR * gemmNR]float32
	for p0 := 0; p0 < k; p0 += kc {
		kcur := min(kc, k-p0)
		g.packA(ap[:strips*gemmMR*kcur], bi, i0, rows, p0, kcur)
		set := p0 == 0 && !g.acc
		for jp := jp0; jp < jp1; jp++ {
			pan := pb[jp*k*gemmNR+p0*gemmNR : jp*k*gemmNR+(p0+kcur)*gemmNR]
			j := jp * gemmNR
			ncols := min(gemmNR, n-j)
			for s := range strips {
				kernel4x2(kcur, ap[s*gemmMR*kcur:(s+1)*gemmMR*kcur], pan, &tile)
				i := i0 + s*gemmMR
				nrows := min(gemmMR, i0+rows-i)
				base := cOff + i*n + j
				if nrows == gemmMR && ncols == gemmNR {
					c0 := g.c[base : base+2 : base+2]
					c1 := g.c[base+n : base+n+2 : base+n+2]
					c2 := g.c[base+2*n : base+2*n+2 : base+2*n+2]
					c3 := g.c[base+3*n : base+3*n+2 : base+3*n+2]
					if set {
						c0[0], c0[1] = tile[0], tile[1]
						c1[0], c1[1] = tile[2], tile[3]
						c2[0], c2[1] = tile[4], tile[5]
						c3[0], c3[1] = tile[6], tile[7]
					} else {
						c0[0] += tile[0]
						c0[1] += tile[1]
						c1[0] += tile[2]
						c1[1] += tile[3]
						c2[0] += tile[4]
						c2[1] += tile[5]
						c3[0] += tile[6]
						c3[1] += tile[7]
					}
					continue
				}
				for ii := range nrows {
					row := g.c[base+ii*n : base+ii*n+ncols]
					for jj := range row {
						if set {
							row[jj] = tile[ii*gemmNR+jj]
						} else {
							row[jj] += tile[ii*gemmNR+jj]
						}
					}
				}
			}
		}
	}
}

// packB writes panel jp of batch entry bb's op(b): dst[p*gemmNR + jj] =
// op(b)[p, jp*gemmNR + jj], zero past column n.
func (g *gemm) packB(dst []float32, bb, jp int) {
	n, k := g.n, g.k
	off := bb * k * n
	j0 := jp * gemmNR
	cols := min(gemmNR, n-j0)
	if cols < gemmNR {
		clear(dst)
	}
	if !g.transB {
		// b is [k, n]: row p holds the panel's columns contiguously.
		if cols == gemmNR {
			for p := range k {
				src := g.b[off+p*n+j0 : off+p*n+j0+gemmNR : off+p*n+j0+gemmNR]
				dst[p*gemmNR], dst[p*gemmNR+1] = src[0], src[1]
			}
			return
		}
		for p := range k {
			for jj := range cols {
				dst[p*gemmNR+jj] = g.b[off+p*n+j0+jj]
			}
		}
		return
	}
	// b is [n, k]: column j of op(b) is row j of b.
	for jj := range cols {
		src := g.b[off+(j0+jj)*k : off+(j0+jj+1)*k]
		for p, v := range src {
			dst[p*gemmNR+jj] = v
		}
	}
}

// packA writes the strips of rows i0..i0+rows-1, depths p0..p0+kc-1 of batch
// entry bi's op(a): strip s holds dst[(s*kc + p)*gemmMR + ii] =
// op(a)[i0 + s*gemmMR + ii, p0 + p], zero past the block's last row.
func (g *gemm) packA(dst []float32, bi, i0, rows, p0, kc int) {
	m, k := g.m, g.k
	off := bi * m * k
	strips := (rows + gemmMR - 1) / gemmMR
	for s := range strips {
		st := dst[s*gemmMR*kc : (s+1)*gemmMR*kc]
		r := min(gemmMR, rows-s*gemmMR)
		if r < gemmMR {
			clear(st)
		}
		i := i0 + s*gemmMR
		if !g.transA {
			// a is [m, k]: row i is contiguous over p.
			for ii := range r {
				src := g.a[off+(i+ii)*k+p0 : off+(i+ii)*k+p0+kc]
				for p, v := range src {
					st[p*gemmMR+ii] = v
				}
			}
			continue
		}
		// a is [k, m]: row p holds the strip's rows contiguously.
		if r == gemmMR {
			for p := range kc {
				src := g.a[off+(p0+p)*m+i : off+(p0+p)*m+i+gemmMR : off+(p0+p)*m+i+gemmMR]
				d := st[p*gemmMR : p*gemmMR+gemmMR : p*gemmMR+gemmMR]
				d[0], d[1], d[2], d[3] = src[0], src[1], src[2], src[3]
			}
			continue
		}
		for p := range kc {
			for ii := range r {
				st[p*gemmMR+ii] = g.a[off+(p0+p)*m+i+ii]
			}
		}
	}
}

// kernel4x2 computes the 4x2 product of a packed strip a (kc x 4, k-major)
// and a packed panel b (kc x 2) into t (row-major). Eight independent
// accumulators keep the floating-point units busy without spilling.
func kernel4x2(kc int, a, b []float32, t *[gemmMR * gemmNR]float32) {
	var c00, c01, c10, c11, c20, c21, c30, c31 float32
	a = a[:kc*4]
	b = b[:kc*2]
	p := 0
	for ; p+1 < kc; p += 2 {
		aa := a[p*4 : p*4+8 : p*4+8]
		bb := b[p*2 : p*2+4 : p*2+4]
		a0, a1, a2, a3 := aa[0], aa[1], aa[2], aa[3]
		b0, b1 := bb[0], bb[1]
		c00 += a0 * b0
		c01 += a0 * b1
		c10 += a1 * b0
		c11 += a1 * b1
		c20 += a2 * b0
		c21 += a2 * b1
		c30 += a3 * b0
		c31 += a3 * b1
		a0, a1, a2, a3 = aa[4], aa[5], aa[6], aa[7]
		b0, b1 = bb[2], bb[3]
		c00 += a0 * b0
		c01 += a0 * b1
		c10 += a1 * b0
		c11 += a1 * b1
		c20 += a2 * b0
		c21 += a2 * b1
		c30 += a3 * b0
		c31 += a3 * b1
	}
	if p < kc {
		aa := a[p*4 : p*4+4 : p*4+4]
		bb := b[p*2 : p*2+2 : p*2+2]
		a0, a1, a2, a3 := aa[0], aa[1], aa[2], aa[3]
		b0, b1 := bb[0], bb[1]
		c00 += a0 * b0
		c01 += a0 * b1
		c10 += a1 * b0
		c11 += a1 * b1
		c20 += a2 * b0
		c21 += a2 * b1
		c30 += a3 * b0
		c31 += a3 * b1
	}
	t[0], t[1], t[2], t[3] = c00, c01, c10, c11
	t[4], t[5], t[6], t[7] = c20, c21, c30, c31
}

// gemmRows is the path for one or two rows per batch entry (decoding): no
// packing; each task computes a column range of one output row, streaming
// op(b) once.
func (d *Device) gemmRows(g *gemm) {
	m, n, k := g.m, g.n, g.k
	rows := g.batch * m
	// Split the columns only as far as needed for two tasks per worker,
	// keeping at least 64 columns per task.
	cb := min((2*d.threads+rows-1)/rows, (n+63)/64)
	cb = max(cb, 1)
	cw := (n + cb - 1) / cb
	cb = (n + cw - 1) / cw
	minPar := 1
	if 2*rows*n*k < 1<<18 {
		minPar = 1 << 30
	}
	d.parallelMin(rows*cb, minPar, func(lo, hi int) {
		arow := make([]float32, k)
		acc := make([]float32, cw)
		for t := lo; t < hi; t++ {
			r, jb := t/cb, t%cb
			bi, i := r/m, r%m
			j0, j1 := jb*cw, min((jb+1)*cw, n)
			aoff := bi * m * k
			var av []float32
			if g.transA {
				for p := range k {
					arow[p] = g.a[aoff+p*m+i]
				}
				av = arow
			} else {
				av = g.a[aoff+i*k : aoff+(i+1)*k]
			}
			out := acc[:j1-j0]
			if g.transB {
				dotRows(out, av, g.b[g.bOffset(bi):], k, j0)
			} else {
				axpyRows(out, av, g.b[g.bOffset(bi):], n, j0)
			}
			c := g.c[bi*m*n+i*n+j0 : bi*m*n+i*n+j1]
			if g.acc {
				for j, v := range out {
					c[j] += v
				}
			} else {
				copy(c, out)
			}
		}
	})
}

// dotRows sets out[j] = a . b[(j0+j)*k : (j0+j+1)*k] (b holds rows of
// length k), four rows at a time with two partial sums each.
func dotRows(out, a, b []float32, k, j0 int) {
	j := 0
	for ; j+3 < len(out); j += 4 {
		r0 := b[(j0+j)*k : (j0+j+1)*k]
		r1 := b[(j0+j+1)*k : (j0+j+2)*k]
		r2 := b[(j0+j+2)*k : (j0+j+3)*k]
		r3 := b[(j0+j+3)*k : (j0+j+4)*k]
		var s0, s1, s2, s3, t0, t1, t2, t3 float32
		p := 0
		for ; p+1 < len(a) && p+1 < len(r0) && p+1 < len(r1) && p+1 < len(r2) && p+1 < len(r3); p += 2 {
			a0, a1 := a[p], a[p+1]
			s0 += a0 * r0[p]
			s1 += a0 * r1[p]
			s2 += a0 * r2[p]
			s3 += a0 * r3[p]
			t0 += a1 * r0[p+1]
			t1 += a1 * r1[p+1]
			t2 += a1 * r2[p+1]
			t3 += a1 * r3[p+1]
		}
		if p < k {
			a0 := a[p]
			s0 += a0 * r0[p]
			s1 += a0 * r1[p]
			s2 += a0 * r2[p]
			s3 += a0 * r3[p]
		}
		out[j], out[j+1], out[j+2], out[j+3] = s0+t0, s1+t1, s2+t2, s3+t3
	}
	for ; j < len(out); j++ {
		r := b[(j0+j)*k : (j0+j+1)*k]
		var s, t float32
		p := 0
		for ; p+1 < len(a) && p+1 < len(r); p += 2 {
			s += a[p] * r[p]
			t += a[p+1] * r[p+1]
		}
		if p < k {
			s += a[p] * r[p]
		}
		out[j] = s + t
	}
}

// axpyRows sets out = sum_p a[p] b[p*n + j0 : p*n + j0 + len(out)] (b holds
// rows of length n), four rows of b per pass over out.
func axpyRows(out, a, b []float32, n, j0 int) {
	clear(out)
	w := len(out)
	k := len(a)
	p := 0
	for ; p+3 < k; p += 4 {
		a0, a1, a2, a3 := a[p], a[p+1], a[p+2], a[p+3]
		r0 := b[p*n+j0 : p*n+j0+w]
		r1 := b[(p+1)*n+j0 : (p+1)*n+j0+w]
		r2 := b[(p+2)*n+j0 : (p+2)*n+j0+w]
		r3 := b[(p+3)*n+j0 : (p+3)*n+j0+w]
		for j, v := range out {
			out[j] = v + a0*r0[j] + a1*r1[j] + a2*r2[j] + a3*r3[j]
		}
	}
	for ; p < k; p++ {
		a0 := a[p]
		r := b[p*n+j0 : p*n+j0+w]
		for j := range out {
			out[j] += a0 * r[j]
		}
	}
}
