package cpu

// TEMPORARY: removed as the attention family lands.

import (
	"errors"

	"github.com/parallax-engine/parallax/engine"
)

var errTODOAttn = errors.New("not yet implemented")

func (d *Device) Attention(a engine.AttentionArgs) error                 { return errTODOAttn }
func (d *Device) AttentionBackward(a engine.AttentionBackwardArgs) error { return errTODOAttn }
func (d *Device) DecodeAttention(a engine.DecodeArgs) error              { return errTODOAttn }
func (d *Device) LLA(a engine.LLAArgs) error                             { return errTODOAttn }
func (d *Device) LinearAttention(a engine.LinearAttentionArgs) error     { return errTODOAttn }
func (d *Device) LinearAttentionBackward(a engine.LinearAttentionBackwardArgs) error {
	return errTODOAttn
}
func (d *Device) CorrectionRatio(out, o, vbar *engine.Tensor) error { return errTODOAttn }
