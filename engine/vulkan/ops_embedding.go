package vulkan

import (
	"github.com/parallax-engine/parallax/engine"
)

// Embedding gathers table rows; see engine.Ops. An id outside [0, V) is
// reported by Sync (its row is not written).
func (d *Device) Embedding(o, table, ids *engine.Tensor) error {
	n, dim, v, err := engine.CheckEmbedding(d.own, o, table, ids)
	if err != nil {
		return err
	}
	if n == 0 || dim == 0 {
		return nil
	}
	pc := push(uint32(n), uint32(dim), uint32(v))
	wg := d.flexWG()
	return d.launch("embedding", wg, nil, pc, d.strideGroups(n*dim, wg), in(table), in(ids), out(o), d.statusArg())
}

// EmbeddingBackward accumulates dOut rows into dTable, deterministically
// (each table row is owned by the workgroup of the first token with its
// id, which adds every occurrence in token order); see engine.Ops.
func (d *Device) EmbeddingBackward(dTable, ids, dOut *engine.Tensor) error {
	n, dim, v, err := engine.CheckEmbeddingBackward(d.own, dTable, ids, dOut)
	if err != nil {
		return err
	}
	if n == 0 || dim == 0 {
		return nil
	}
	pc := push(uint32(n), uint32(dim), uint32(v))
	return d.launch("embedding_bwd", 64, nil, pc, d.groups1(n), out(dTable), in(ids), in(dOut), d.statusArg())
}
