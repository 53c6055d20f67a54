package model

// SetGradHook makes Backward call f with a group of parameters as soon as
// their gradients are final, that is, once no later op of that Backward
// adds to them: a data-parallel trainer then starts reducing those
// gradients while the backward pass computes the earlier layers'. The
// groups, in the order f receives them, are those of GradOrder. f runs on
// Backward's goroutine between its device ops (on an asynchronous device
// the gradients' ops are enqueued, not necessarily finished); an error
// from f stops Backward, which returns it. nil removes the hook.
func (m *Model) SetGradHook(f func(ps []*Param) error) {
	m.gradHook = f
	if f != nil && m.gradGroups == nil {
		m.gradGroups = m.GradOrder()
	}
}

// GradOrder lists every parameter once, grouped and ordered as Backward
// finalises their gradients: the final norm (and lm_head when untied),
// then each layer's parameters from the last layer to the first (each
// group in Params order), then the embedding, which is last because it
// also receives the tied head's gradient and the embedding backward runs
// at the very end.
func (m *Model) GradOrder() [][]*Param {
	top := []*Param{m.Norm}
	if m.Head != nil {
		top = append(top, m.Head)
	}
	gs := [][]*Param{top}
	for l := len(m.Blocks) - 1; l >= 0; l-- {
		gs = append(gs, m.Blocks[l].params())
	}
	return append(gs, []*Param{m.Embed})
}

// params lists the block's parameters in Params order, without the ones
// the configuration lacks.
func (b *Block) params() []*Param {
	var out []*Param
	for _, p := range []*Param{b.InputNorm, b.Q, b.K, b.V, b.R, b.O, b.QNorm, b.KNorm, b.RNorm,
		b.RGate, b.PostNorm, b.Gate, b.Up, b.Down} {
		if p != nil {
			out = append(out, p)
		}
	}
	return out
}

// gradsReady calls the hook, if any, with group i of gradGroups. It does
// nothing after an op failed, since the gradients are then not valid.
func (m *Model) gradsReady(r *rec, i int) {
	if m.gradHook == nil || r.err != nil {
		return
	}
	if err := m.gradHook(m.gradGroups[i]); err != nil {
		r.fail("gradient hook", err)
	}
}
