package data

// Packing: rows of T+1 tokens filled with whole documents (samples), so that
// no sample straddles two rows unless it is longer than a row. A sample
// longer than a row is cut into chunks of T+1 tokens with stride T (each
// token is predicted once). The rest of a row is padding.
//
// Attention is not masked at document boundaries: a token attends to the
// earlier samples of its row. Their losses are independent only in the
// sense that no target crosses a boundary: the first token of each sample
// is never a target (it cannot be predicted from the previous sample), nor
// is any padding.

// Ignored marks token id as present in a window but not a training target:
// it is the input it always was, and its target (the prediction of it from
// the tokens before) does not count in the loss. Ignored(id) is negative;
// SplitWindow undoes it.
func Ignored(id int32) int32 { return -1 - id }

// TokenOf returns the token id of a window entry, ignored or not.
func TokenOf(v int32) int32 {
	if v < 0 {
		return -1 - v
	}
	return v
}

// SplitWindow splits a window of T+1 entries into the inputs in (its first
// T tokens) and the targets tgt (its last T), writing ignore for every
// target marked Ignored. in and tgt must hold T values each.
func SplitWindow(w, in, tgt []int32, ignore int32) {
	T := len(w) - 1
	for j := range T {
		in[j] = TokenOf(w[j])
		if v := w[j+1]; v >= 0 {
			tgt[j] = v
		} else {
			tgt[j] = ignore
		}
	}
}

// packed reports whether shards are packed: every one has a document
// index.
func packed(shards []*Shard) bool {
	if len(shards) == 0 {
		return false
	}
	for _, s := range shards {
		if s.starts == nil {
			return false
		}
	}
	return true
}

// packRows lays the documents of every shard greedily into rows of t+1
// tokens, in order.
func packRows(shards []*Shard, t int) []window {
	w := int64(t + 1)
	var rows []window
	for i, sh := range shards {
		cur := window{shard: int32(i), start: -1}
		flush := func() {
			if cur.n > 0 {
				rows = append(rows, cur)
			}
			cur = window{shard: int32(i), start: -1}
		}
		for d, st := range sh.starts {
			end := int64(sh.Len())
			if d+1 < len(sh.starts) {
				end = sh.starts[d+1]
			}
			n := end - st
			if n > w {
				flush()
				for c := st; ; c += int64(t) {
					k := min(w, end-c)
					rows = append(rows, window{shard: int32(i), start: c, n: int32(k)})
					if c+k >= end {
						break
					}
				}
				continue
			}
			if int64(cur.n)+n > w {
				flush()
			}
			if cur.start < 0 {
				cur.start = st
			}
			cur.n += int32(n)
		}
		flush()
	}
	return rows
}

// fillRow writes row's tokens into dst (t+1 entries) and pads the rest; an
// entry whose target is not trained (the first token of a document, a
// token the loss mask excludes, padding) is written as Ignored.
func fillRow(dst []int32, sh *Shard, row window) {
	n := int(row.n)
	sh.Copy(dst[:n], int(row.start))
	// The document starts inside the row: binary search the first one at
	// or after row.start.
	starts := sh.starts
	lo, hi := 0, len(starts)
	for lo < hi {
		m := (lo + hi) / 2
		if starts[m] < row.start {
			lo = m + 1
		} else {
			hi = m
		}
	}
	next := int64(-1)
	if lo < len(starts) {
		next = starts[lo]
	}
	for j := range n {
		p := row.start + int64(j)
		if p == next {
			lo++
			next = -1
			if lo < len(starts) {
				next = starts[lo]
			}
			dst[j] = Ignored(dst[j])
			continue
		}
		if !sh.Target(int(p)) {
			dst[j] = Ignored(dst[j])
		}
	}
	for j := n; j < len(dst); j++ {
		dst[j] = Ignored(0)
	}
}
