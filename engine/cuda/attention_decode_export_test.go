//go:build cgo

package cuda

// SetDecodeOverrides forces the decode plan as PARALLAX_CUDA_DECODE_SPLITS
// (splits > 0, or old) and PARALLAX_CUDA_DECODE_STAGES (stages > 0) would,
// in place of the environment, until restore is called. Tests only; not
// safe while another goroutine decodes.
func SetDecodeOverrides(splits, stages int, old bool) (restore func()) {
	e := decodeEnv{old: old, splits: splits, stages: stages}
	prev := decodeEnvTest.Swap(&e)
	return func() { decodeEnvTest.Store(prev) }
}

// DecodePlan is the split count, ring depth and rule a decode of B
// sequences, Hkv KV heads, a cache of capacity keys and head dimension D
// takes on d (splits: DecodeArgs.Splits).
func DecodePlan(d *Device, B, Hkv, capacity, D, splits int) (int, int, string, error) {
	env, err := decodeEnvNow()
	if err != nil {
		return 0, 0, "", err
	}
	p, err := planDecode(decodeGPU{sms: d.g.sms, smemOptin: d.g.smemOptin, minKeys: d.opts.DecodeSplitKeys},
		B*Hkv, capacity, D, splits, env)
	return p.splits, p.stages, p.rule, err
}
