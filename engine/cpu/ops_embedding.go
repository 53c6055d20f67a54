package cpu

import (
	"fmt"
	"slices"

	"github.com/parallax-engine/parallax/engine"
)

// checkIDs reports the first id outside [0, v) as an execution error (kept
// for Sync).
func (d *Device) checkIDs(op string, ids []int32, v int) error {
	for i, id := range ids {
		if id < 0 || int(id) >= v {
			return d.fail(fmt.Errorf("%s: ids[%d] = %d is outside the vocabulary [0, %d)", op, i, id, v))
		}
	}
	return nil
}

// Embedding gathers table rows; see engine.Ops. Rows move as raw storage
// when out and table share a dtype. Nothing is written if an id is out of
// range.
func (d *Device) Embedding(out, table, ids *engine.Tensor) error {
	n, dim, v, err := engine.CheckEmbedding(d.own, out, table, ids)
	if err != nil {
		return err
	}
	id := ints(ids)
	if err := d.checkIDs("embedding", id, v); err != nil {
		return err
	}
	ov, tv := viewOf(out), viewOf(table)
	d.parallelMin(n, rowChunk(dim), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			copyElems(ov, r*dim, tv, int(id[r])*dim, dim)
		}
	})
	return nil
}

// EmbeddingBackward accumulates dOut rows into dTable; see engine.Ops. Each
// touched table row is read once, the dOut rows of its id are added to it in
// float32 in ascending order, and it is stored once: the result is
// deterministic and a 16-bit dTable is rounded once per row. Nothing is
// written if an id is out of range.
func (d *Device) EmbeddingBackward(dTable, ids, dOut *engine.Tensor) error {
	n, dim, v, err := engine.CheckEmbeddingBackward(d.own, dTable, ids, dOut)
	if err != nil {
		return err
	}
	id := ints(ids)
	if err := d.checkIDs("embedding backward", id, v); err != nil {
		return err
	}
	if n == 0 || dim == 0 {
		return nil
	}
	// Group the rows by id: order lists row indices sorted by (id, row).
	order := make([]int32, n)
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortStableFunc(order, func(a, b int32) int { return int(id[a]) - int(id[b]) })
	var starts []int
	for i := range order {
		if i == 0 || id[order[i]] != id[order[i-1]] {
			starts = append(starts, i)
		}
	}
	starts = append(starts, n)
	tv, gv := viewOf(dTable), viewOf(dOut)
	groups := len(starts) - 1
	d.parallelMin(groups, rowChunk(dim), func(lo, hi int) {
		acc := make([]float32, dim)
		gbuf := make([]float32, dim)
		for gi := lo; gi < hi; gi++ {
			row := int(id[order[starts[gi]]])
			cur := tv.read(gbuf, row*dim, (row+1)*dim)
			copy(acc, cur)
			for _, r := range order[starts[gi]:starts[gi+1]] {
				g := gv.read(gbuf, int(r)*dim, int(r+1)*dim)
				for j, x := range g {
					acc[j] += x
				}
			}
			out := tv.span(gbuf, row*dim, (row+1)*dim)
			copy(out, acc)
			tv.commit(out, row*dim)
		}
	})
	return nil
}
