package engine

import (
	"fmt"
	"math"
)

// MuonMultiOps is implemented by devices that run Muon's elementwise work
// on a stack of same-shape matrices in one launch each: the momentum of
// every matrix written straight into its slot of the Newton-Schulz input,
// and the orthogonalised update of every slot applied to its parameter.
// Each method computes exactly what the single-matrix op computes on every
// matrix. Callers use MuonMomentumAll and MuonApplyAll, which fall back to
// MuonMomentum, KVAppend, Embedding and MuonApply elsewhere (the Vulkan
// backend takes that path).
type MuonMultiOps interface {
	// MuonMomentumMany applies MuonMomentum with o to every (ms[i], gs[i])
	// and writes the direction to slot i of stack [n, rows, cols]: with
	// g'_i = fl(s g_i), s = o.Scale(), m_i = beta m_i + (1-beta) g'_i and
	// stack[i] = (1-beta) g'_i + beta m_i (Nesterov) or m_i. len(ms) <= n;
	// slots past len(ms) are untouched; the gradients are not changed.
	MuonMomentumMany(stack *Tensor, ms, gs []*Tensor, o MuonMomentumOpts) error
	// MuonApplyMany applies MuonApply(ps[i], stack[i], lr_i, wd,
	// scales[i]) to every i, lr_i = lr * lrScales[i] rounded to f32 (lr
	// where lrScales is nil): p_i = p_i (1 - lr_i wd) - lr_i scale_i
	// stack[i]. The lists stay the same from step to step while lr
	// follows the schedule.
	MuonApplyMany(ps []*Tensor, stack *Tensor, lr, wd float32, lrScales, scales []float32) error
}

// slotOf is a tensor of one slot's shape and stack's dtype and device, for
// validation only (it has no storage).
func slotOf(stack *Tensor) *Tensor {
	return &Tensor{dev: stack.dev, dtype: stack.dtype, shape: stack.shape[1:].Clone()}
}

func checkStack(op string, stack *Tensor, n int) error {
	if stack == nil || stack.Rank() != 3 {
		return argErr(op, "stack", "want a stack [n, rows, cols], got %v", stack)
	}
	if n > stack.Dim(0) {
		return argErr(op, "stack", "%v has %d slots, want at least %d", stack, stack.Dim(0), n)
	}
	if stack.Dim(0)*stack.Dim(1) > math.MaxInt32 || stack.Numel() > math.MaxInt32 {
		return argErr(op, "stack", "%v is too large (rows and elements must fit int32)", stack)
	}
	return nil
}

// CheckMuonMomentumMany validates MuonMomentumMany: stack is [n, rows,
// cols] with n >= len(ms), and every (slot, ms[i], gs[i]) passes
// CheckMuonMomentum with o. It returns the elements per matrix.
func CheckMuonMomentumMany(stack *Tensor, ms, gs []*Tensor, o MuonMomentumOpts) (int, error) {
	const op = "muon momentum"
	if len(gs) != len(ms) {
		return 0, argErr(op, "tensors", "lists of %d momenta and %d gradients (want equal lengths)", len(ms), len(gs))
	}
	if err := checkStack(op, stack, len(ms)); err != nil {
		return 0, err
	}
	if err := checkMuonMomentumOpts(op, o); err != nil {
		return 0, err
	}
	u := slotOf(stack)
	for i := range ms {
		if ms[i] == nil || gs[i] == nil {
			return 0, argErr(op, fmt.Sprintf("matrix %d", i), "missing momentum or gradient")
		}
		if _, err := CheckMuonMomentum(nil, u, ms[i], gs[i], o); err != nil {
			return 0, fmt.Errorf("matrix %d of %d: %w", i, len(ms), err)
		}
	}
	return u.Numel(), nil
}

// CheckMuonApplyMany validates MuonApplyMany: stack is [n, rows, cols] with
// n >= len(ps), one scale and (unless lrScales is nil) one learning-rate
// multiplier per parameter, and every (ps[i], slot) passes CheckMuonApply.
// It returns the elements per matrix.
func CheckMuonApplyMany(ps []*Tensor, stack *Tensor, lrScales, scales []float32) (int, error) {
	const op = "muon apply"
	if len(scales) != len(ps) || lrScales != nil && len(lrScales) != len(ps) {
		return 0, argErr(op, "scales", "%d learning-rate multipliers and %d scales for %d parameters", len(lrScales), len(scales), len(ps))
	}
	if err := checkStack(op, stack, len(ps)); err != nil {
		return 0, err
	}
	o := slotOf(stack)
	for i, p := range ps {
		if p == nil {
			return 0, argErr(op, fmt.Sprintf("parameter %d", i), "missing")
		}
		if _, err := CheckMuonApply(nil, p, o); err != nil {
			return 0, fmt.Errorf("matrix %d of %d: %w", i, len(ps), err)
		}
	}
	return o.Numel(), nil
}

// MuonStack is the Newton-Schulz input of a batch of same-shape matrices:
// a stack [slots, rows, cols] of the Newton-Schulz dtype, its NSWorkspace,
// and the scratch the generic path of MuonMomentumAll and MuonApplyAll
// needs on devices without MuonMultiOps (built by their first call there).
// A Muon step on a batch is MuonMomentumAll, NewtonSchulz, MuonApplyAll.
// It is not safe for concurrent use.
type MuonStack struct {
	dev               Device
	slots, rows, cols int
	x                 *Tensor // [slots, rows, cols]
	ws                *NSWorkspace

	// The generic path's scratch (slots > 1): x viewed as KVAppend's cache
	// [1, 1, slots*rows, cols] and Embedding's table [slots*rows, cols],
	// one direction u [1, 1, rows, cols] and update o [rows, cols], and the
	// I32 rows of every slot in the table.
	x4, table, u, o *Tensor
	ids             []*Tensor
}

// NewMuonStack allocates a stack of slots [rows, cols] matrices of dtype dt
// and its Newton-Schulz workspace.
func NewMuonStack(dev Device, dt DType, slots, rows, cols int) (*MuonStack, error) {
	s := &MuonStack{dev: dev, slots: slots, rows: rows, cols: cols}
	if slots < 1 || rows < 1 || cols < 1 {
		return nil, fmt.Errorf("muon stack: want positive sizes, got %d x [%d,%d]", slots, rows, cols)
	}
	var err error
	if s.x, err = dev.Alloc(dt, slots, rows, cols); err != nil {
		return nil, fmt.Errorf("muon stack %d x [%d,%d] %v: %w", slots, rows, cols, dt, err)
	}
	if err := checkStack("muon stack", s.x, slots); err != nil {
		s.Free()
		return nil, err
	}
	if s.ws, err = NewNSWorkspace(dev, dt, slots, rows, cols); err != nil {
		s.Free()
		return nil, fmt.Errorf("muon stack %d x [%d,%d] %v: %w", slots, rows, cols, dt, err)
	}
	return s, nil
}

// X is the stack [slots, rows, cols].
func (s *MuonStack) X() *Tensor { return s.x }

// Slots is the number of matrices the stack holds.
func (s *MuonStack) Slots() int { return s.slots }

// NewtonSchulz orthogonalises every slot of the stack in place
// (engine.NewtonSchulz with the stack's workspace).
func (s *MuonStack) NewtonSchulz(steps int) error {
	return s.ws.NewtonSchulz(s.x, s.x, steps)
}

// Free releases the stack and its scratch; s must not be used afterwards.
func (s *MuonStack) Free() {
	for _, t := range append([]*Tensor{s.x, s.u, s.o}, s.ids...) {
		if t != nil {
			s.dev.Free(t)
		}
	}
	if s.ws != nil {
		s.ws.Free()
	}
	*s = MuonStack{dev: s.dev}
}

// generic builds the generic path's scratch once.
func (s *MuonStack) generic() error {
	if s.slots == 1 || s.u != nil {
		return nil
	}
	dev, dt := s.dev, s.x.DType()
	fail := func(err error) error {
		for _, t := range append([]*Tensor{s.u, s.o}, s.ids...) {
			if t != nil {
				dev.Free(t)
			}
		}
		s.u, s.o, s.ids = nil, nil, nil
		return fmt.Errorf("muon stack scratch: %w", err)
	}
	var err error
	if s.x4, err = s.x.Reshape(1, 1, s.slots*s.rows, s.cols); err != nil {
		return fail(err)
	}
	if s.table, err = s.x.Reshape(s.slots*s.rows, s.cols); err != nil {
		return fail(err)
	}
	if s.u, err = dev.Alloc(dt, 1, 1, s.rows, s.cols); err != nil {
		return fail(err)
	}
	if s.o, err = dev.Alloc(dt, s.rows, s.cols); err != nil {
		return fail(err)
	}
	ids := make([]int32, s.rows)
	for i := range s.slots {
		for j := range ids {
			ids[j] = int32(i*s.rows + j)
		}
		t, err := FromInt32(dev, ids, s.rows)
		if err != nil {
			return fail(err)
		}
		s.ids = append(s.ids, t)
	}
	return nil
}

// MuonMomentumAll updates the momentum of every matrix and writes its
// direction into slot i of s: with the scaled gradient g'_i = fl(c g_i),
// c = o.Scale() (gradient clipping's factor; exact when 1), m_i = beta m_i
// + (1-beta) g'_i, then s[i] = (1-beta) g'_i + beta m_i (o.Nesterov) or
// m_i, rounded to the stack's dtype; the gradients are not changed. ms[i]
// (F32) and gs[i] have the elements of one slot; len(ms) <= s.Slots().
// One launch on a device with MuonMultiOps; elsewhere MuonMomentum into a
// scratch direction and a KVAppend into the stack per matrix (MuonMomentum
// straight into a stack of one slot).
func MuonMomentumAll(s *MuonStack, ms, gs []*Tensor, o MuonMomentumOpts) error {
	if _, err := CheckMuonMomentumMany(s.x, ms, gs, o); err != nil {
		return err
	}
	if len(ms) == 0 {
		return nil
	}
	dev := s.dev
	if mt, ok := dev.(MuonMultiOps); ok {
		return mt.MuonMomentumMany(s.x, ms, gs, o)
	}
	if s.slots == 1 {
		if err := dev.MuonMomentum(s.x, ms[0], gs[0], o); err != nil {
			return fmt.Errorf("muon momentum: %w", err)
		}
		return nil
	}
	if err := s.generic(); err != nil {
		return err
	}
	for i := range ms {
		if err := dev.MuonMomentum(s.u, ms[i], gs[i], o); err != nil {
			return fmt.Errorf("muon momentum of matrix %d of %d: %w", i, len(ms), err)
		}
		if err := dev.KVAppend(s.x4, s.u, i*s.rows); err != nil {
			return fmt.Errorf("muon momentum of matrix %d of %d: stacking the direction: %w", i, len(ms), err)
		}
	}
	return nil
}

// MuonApplyAll applies the update in slot i of s to ps[i] for every i:
// p_i = p_i (1 - lr_i wd) - lr_i scale_i s[i], with lr_i = lr * lrScales[i]
// rounded to f32 (lr where lrScales is nil) and scale_i = scales[i]. ps[i] has the elements of one
// slot; len(ps) <= s.Slots(). One launch on a device with MuonMultiOps;
// elsewhere an Embedding gather of the slot and a MuonApply per matrix
// (MuonApply straight from a stack of one slot).
func MuonApplyAll(s *MuonStack, ps []*Tensor, lr, wd float32, lrScales, scales []float32) error {
	if _, err := CheckMuonApplyMany(ps, s.x, lrScales, scales); err != nil {
		return err
	}
	if len(ps) == 0 {
		return nil
	}
	dev := s.dev
	if mt, ok := dev.(MuonMultiOps); ok {
		return mt.MuonApplyMany(ps, s.x, lr, wd, lrScales, scales)
	}
	if s.slots == 1 {
		if err := dev.MuonApply(ps[0], s.x, ScaledLR(lr, lrScales, 0), wd, scales[0]); err != nil {
			return fmt.Errorf("muon apply: %w", err)
		}
		return nil
	}
	if err := s.generic(); err != nil {
		return err
	}
	for i, p := range ps {
		if err := dev.Embedding(s.o, s.table, s.ids[i]); err != nil {
			return fmt.Errorf("muon apply of matrix %d of %d: unstacking the update: %w", i, len(ps), err)
		}
		if err := dev.MuonApply(p, s.o, ScaledLR(lr, lrScales, i), wd, scales[i]); err != nil {
			return fmt.Errorf("muon apply of matrix %d of %d: %w", i, len(ps), err)
		}
	}
	return nil
}

// ScaledLR is matrix i's learning rate of MuonApplyMany: lr * lrScales[i]
// rounded to f32, or lr where lrScales is nil.
func ScaledLR(lr float32, lrScales []float32, i int) float32 {
	if lrScales == nil {
		return lr
	}
	return lr * lrScales[i]
}
