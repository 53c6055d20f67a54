package vulkan

import (
	"github.com/parallax-engine/parallax/engine"
)

// A decode step's attention inputs in one dispatch (shaders/decode_prep.comp):
// the per-head RMSNorm and RoPE of q, k and r, written to attention's
// layout, the v rows copied, and k and v appended to the caches at each
// sequence's start, which are otherwise three RMSNormRoPE, a SwapAxes12
// and two KVAppendAt dispatches. The rows of the four projections are one
// index space, T invocations a row as normrope.comp's forward.

var _ engine.DecodePreparer = (*Device)(nil)

// DecodePrep norms and rotates q, k and r, writes q and r in attention's
// layout and appends k and v to the caches in one dispatch; see
// engine.DecodePreparer. A bad start is raised on the device and reported
// at the next Sync (as KVAppendAt's). It takes any head dimension (RoPE's
// frequencies come from the device's f32 table, as RMSNormRoPE's) and
// declines operands whose element indices pass 32 bits, and KeepKV (a
// prefill's k and v in attention's layout: two more outputs would pass
// the device's 16 bindings a dispatch), which the composition serves.
func (d *Device) DecodePrep(a engine.DecodePrepArgs) (bool, error) {
	dd, err := engine.CheckDecodePrep(d.own, a)
	if err != nil {
		return true, err
	}
	if a.KeepKV {
		return false, nil
	}
	bl := dd.B * dd.L
	heads := 2*dd.Hkv + dd.Hq
	if a.R != nil {
		heads += dd.Hq
	}
	rows := int64(bl) * int64(heads)
	if int64(dd.B)*int64(dd.Hkv)*int64(dd.Cap)*int64(dd.D) >= 1<<32 ||
		int64(bl)*int64(max(dd.Hq, dd.Hkv))*int64(dd.D) >= 1<<32 || rows >= 1<<31 {
		return false, nil
	}
	if rows == 0 || dd.D == 0 {
		return true, nil
	}
	fr, err := d.ropeFreqs(a.Theta, dd.D)
	if err != nil {
		return true, err
	}
	first1 := bl * dd.Hq
	first2 := first1 + bl*dd.Hkv
	first3 := first2 + bl*dd.Hkv
	wg := d.flexWG()
	t := normRoPELanes(dd.D/2, wg)
	pc := push(uint32(rows), uint32(dd.L), uint32(dd.Hq), uint32(dd.Hkv), uint32(dd.D/2), uint32(t), uint32(dd.Cap),
		a.Pos.Rank() == 2, uint32(first1), uint32(first2), uint32(first3), a.Eps)
	if d.prof.on {
		bytes := 0
		for _, x := range []*engine.Tensor{a.Q, a.K, a.V, a.R, a.QOut, a.ROut} {
			if x != nil {
				bytes += x.Bytes()
			}
		}
		// The appended rows, as large as k and v in the caches' dtypes.
		bytes += a.K.Numel()*a.KCache.DType().Size() + a.V.Numel()*a.VCache.DType().Size()
		d.profileAs("decode prep", 0, float64(bytes))
	}
	return true, d.launch("decode_prep", wg, nil, pc, d.strideGroups(int(rows), wg/t),
		in(a.Q), in(a.K), in(a.V), d.opt(a.R, false),
		in(a.QNorm), in(a.KNorm), d.opt(a.RNorm, false),
		out(a.QOut), out(a.KCache), out(a.VCache), d.opt(a.ROut, true),
		in(a.Pos), in(a.Starts), arg{r: fr, size: fr.size, dt: engine.F32}, d.statusArg())
}
