package engine

import "fmt"

// NormLinearPreparer is implemented by a Device that runs a decode step's
// projections of the normed rows and the preparation of their attention
// inputs (DecodePrep) in one launch: the blocks of the product write the
// raw q, k, v (and r) rows as NormLinearMulti does, and the last block to
// finish a head norms, rotates and appends that head's rows, so the
// DecodePrep launch and its wait on the product go away.
type NormLinearPreparer interface {
	// NormLinearDecodePrep computes outs[i] = RMSNorm(x, normW, eps)
	// ws[i]^T (NormLinear.NormLinearMulti), outs being [M, N_i] views of
	// a.Q, a.K, a.V (and a.R) in that order, then DecodePrep(a). It
	// reports false, having done nothing, when the device has no kernel
	// for these operands.
	NormLinearDecodePrep(outs, ws []*Tensor, x, normW *Tensor, eps float32, a DecodePrepArgs) (bool, error)
}

// CheckNormLinearDecodePrep validates the pairing of NormLinearDecodePrep's
// products with its DecodePrep operands: one output per weight, the
// outputs a.Q, a.K, a.V and a.R (where given) in that order, each of the
// same element count as its projection. The products and DecodePrep are
// checked by their own Check functions.
func CheckNormLinearDecodePrep(outs, ws []*Tensor, a DecodePrepArgs) error {
	const op = "norm linear decode prep"
	proj, names := []*Tensor{a.Q, a.K, a.V}, "q, k, v"
	if a.R != nil {
		proj, names = append(proj, a.R), names+", r"
	}
	if len(outs) != len(ws) || len(outs) != len(proj) {
		return argErr(op, "outs", "want %d outputs and weights (%s), got %d and %d", len(proj), names, len(outs), len(ws))
	}
	for i, o := range outs {
		if o == nil || proj[i] == nil || o.Numel() != proj[i].Numel() || o.DType() != proj[i].DType() {
			return argErr(op, "outs", "output %d %v is not a view of its projection %v", i, o, proj[i])
		}
	}
	return nil
}

// NormLinearDecodePrep runs NormLinearMulti(outs, ws, x, normW, eps) and
// then DecodePrep(a), outs being [M, N_i] views of a.Q, a.K, a.V (and a.R):
// in one launch on a NormLinearPreparer device that takes the operands,
// else as the two ops (scratch as for NormLinearMulti). The results are
// those of the two ops: the fused kernel rounds the raw projections to
// their dtype before norming them, as the composition does.
func NormLinearDecodePrep(dev Device, outs, ws []*Tensor, x, normW *Tensor, eps float32, scratch *Tensor, a DecodePrepArgs) error {
	return normLinearPrep("norm linear decode prep", dev, outs, ws, a,
		func() (bool, error) {
			p, ok := dev.(NormLinearPreparer)
			if !ok {
				return false, nil
			}
			return p.NormLinearDecodePrep(outs, ws, x, normW, eps, a)
		},
		func() error { return NormLinearMulti(dev, outs, ws, x, normW, eps, scratch) })
}

// normLinearPrep validates a NormLinearDecodePrep (qs: the weights' value
// tensors), then runs fused (the device's one launch, which reports
// whether it ran) or else products and DecodePrep.
func normLinearPrep(op string, dev Device, outs, qs []*Tensor, a DecodePrepArgs, fused func() (bool, error), products func() error) error {
	if err := CheckNormLinearDecodePrep(outs, qs, a); err != nil {
		return err
	}
	if _, err := CheckDecodePrep(nil, a); err != nil {
		return err
	}
	if !a.KeepKV {
		if done, err := fused(); done || err != nil {
			return err
		}
	}
	if err := products(); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return DecodePrep(dev, a)
}

// Int8NormLinearPreparer is NormLinearPreparer for int8 weights: the
// products of Int8NormLinear.NormLinearMultiInt8, then DecodePrep, in one
// launch.
type Int8NormLinearPreparer interface {
	// NormLinearDecodePrepInt8 is NormLinearDecodePrep with int8 weights
	// (see Int8NormLinear.NormLinearMultiInt8). It reports false, having
	// done nothing, when the device has no kernel for these operands.
	NormLinearDecodePrepInt8(outs []*Tensor, ws []Int8Weight, x, normW *Tensor, eps float32, a DecodePrepArgs) (bool, error)
}

// NormLinearDecodePrepInt8 runs NormLinearMultiInt8(outs, ws, x, normW,
// eps) and then DecodePrep(a), as NormLinearDecodePrep does for
// floating weights: in one launch on an Int8NormLinearPreparer device that
// takes the operands, else as the two ops.
func NormLinearDecodePrepInt8(dev Device, outs []*Tensor, ws []Int8Weight, x, normW *Tensor, eps float32, scratch *Tensor, a DecodePrepArgs) error {
	qs := make([]*Tensor, len(ws))
	for i, w := range ws {
		qs[i] = w.Q
	}
	return normLinearPrep("norm linear decode prep int8", dev, outs, qs, a,
		func() (bool, error) {
			p, ok := dev.(Int8NormLinearPreparer)
			if !ok {
				return false, nil
			}
			return p.NormLinearDecodePrepInt8(outs, ws, x, normW, eps, a)
		},
		func() error { return NormLinearMultiInt8(dev, outs, ws, x, normW, eps, scratch) })
}
