package vulkan

import (
	"encoding/binary"
	"math"

	"github.com/parallax-engine/parallax/engine"
)

// ropeKey identifies a table of RoPE frequencies theta^(-2i/D).
type ropeKey struct {
	theta float32
	d     int
}

// ropeFreqs returns the device table of frequencies for (theta, D),
// computed in float64 on the host once and kept for the device's lifetime.
func (d *Device) ropeFreqs(theta float32, dim int) (*region, error) {
	k := ropeKey{theta, dim}
	if r, ok := d.ropeTables[k]; ok {
		return r, nil
	}
	freqs := engine.RoPEFrequencies(theta, dim)
	buf := make([]byte, 4*max(len(freqs), 1))
	for i, f := range freqs {
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(float32(f)))
	}
	r, err := d.mem.alloc(uint64(len(buf)))
	if err != nil {
		return nil, err
	}
	if err := d.writeRegion(r, buf); err != nil {
		d.mem.release(r)
		return nil, err
	}
	d.ropeTables[k] = r
	return r, nil
}

// RoPE rotates pairs of x by pos[l] * theta^(-2i/D) (pos[b, l] with
// per-sequence positions); see engine.Ops.
func (d *Device) RoPE(o, x, pos *engine.Tensor, theta float32) error {
	return d.rope(o, x, pos, theta, 1)
}

// RoPEBackward applies the inverse rotation; see engine.Ops.
func (d *Device) RoPEBackward(dX, dOut, pos *engine.Tensor, theta float32) error {
	return d.rope(dX, dOut, pos, theta, -1)
}

func (d *Device) rope(o, x, pos *engine.Tensor, theta, sign float32) error {
	b, h, l, dim, err := engine.CheckRoPE(d.own, o, x, pos, sign < 0)
	if err != nil {
		return err
	}
	rows := b * h * l
	if rows == 0 {
		return nil
	}
	if dim == 0 {
		return nil
	}
	fr, err := d.ropeFreqs(theta, dim)
	if err != nil {
		return err
	}
	freqs := arg{r: fr, size: fr.size, dt: engine.F32}
	n := rows * dim / 2
	seqPos := 0
	if pos.Rank() == 2 {
		seqPos = l // per-sequence positions [B, L]
	}
	pc := push(uint32(rows), uint32(l), uint32(dim/2), sign, uint32(h*l), uint32(seqPos))
	wg := d.flexWG()
	return d.launch("rope", wg, nil, pc, d.strideGroups(n, wg), in(x), out(o), in(pos), freqs)
}
