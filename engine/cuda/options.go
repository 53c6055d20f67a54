//go:build cgo

package cuda

import (
	"fmt"
	"os"

	"github.com/parallax-engine/parallax/engine"
)

// Options are a CUDA device's kernel choices. The zero value is the
// default: the fastest kernels measured for each shape. Open takes them
// from the environment (ParseOptions(os.Getenv), the overrides listed in
// docs/ENGINE.md, "Options and overrides"); tests and benchmarks set them
// with OpenWith or Device.SetOptions instead.
type Options struct {
	// NoWGMMA keeps the Hopper wgmma kernels of attention_wgmma.cu off, so
	// that bf16 attention runs the mma.sync kernels of attention_mma.cu
	// (PARALLAX_CUDA_WGMMA=0).
	NoWGMMA bool
	// NoTMA keeps tensor-map (TMA) loads off: the wgmma kernels load with
	// cp.async instead (PARALLAX_CUDA_TMA=0).
	NoTMA bool
	// ForwardLoads is how the wgmma forward loads K and V: "" (TMA where
	// the driver encodes tensor maps) or "cp.async" (PARALLAX_CUDA_FWD).
	ForwardLoads string
	// ForwardKeyTile is the forward's key tile: 0 for the default (64 for
	// wgmma and for mma.sync at D = 128), 128 for the wgmma kernels'
	// 128-key tiles (softmax, or Parallax at D = 64) or 32 for mma.sync's at
	// D = 128 (PARALLAX_CUDA_FWD_BN).
	ForwardKeyTile int
	// Backward picks the Hopper backward kernels: "" (TMA-fed wgmma dq/dr
	// and dk/dv kernels, Parallax at D = 128 with the cp.async dq kernel),
	// "tma" (TMA kernels for both), "wgmma" (both wgmma kernels with
	// cp.async loads), "split" (the mma.sync dq kernel with the wgmma dk/dv
	// kernel) or "fused" (one kernel with f32 dq/dr reductions)
	// (PARALLAX_CUDA_BWD).
	Backward string
	// DQKeyTile is 32 for the wgmma dq kernel's 32-key tiles at D = 128, or
	// 0 for the default 64 (PARALLAX_CUDA_DQ_BN).
	DQKeyTile int
	// DecodeSplitKeys is the fewest keys a decode split takes when the
	// caller leaves the split count to the device: 0 for 128, else at
	// least 64 (PARALLAX_CUDA_DECODE_SPLIT_KEYS).
	DecodeSplitKeys int
	// NoPDL launches every kernel plainly: without it the decode-step
	// kernels (gemv.cu, decode_prep.cu, the tensor-core decode) are
	// launched with programmatic dependent launch on Hopper and newer, so
	// each may start while the one before it finishes (pdl.go;
	// PARALLAX_CUDA_PDL=0).
	NoPDL bool
	// NormRoPEHeads is the heads per unit of the 16-byte norm+RoPE kernels
	// (normrope.cu): 0 for the device's choice (normRoPEUnits), else that
	// many, capped at the tensor's heads (PARALLAX_CUDA_NORMROPE_HEADS).
	NormRoPEHeads int
	// SmallHeads runs the lane-per-key SIMT attention kernels
	// (attention_simt.cu's ..._small) for heads of D <= 16; off (the
	// broadcast kernels) until certified on a GPU by the conformance
	// suite (PARALLAX_CUDA_SIMT_SMALL=1).
	SmallHeads bool
	// NoSmallV4 keeps the lane-per-key kernels' element-at-a-time loads
	// where their _small_v4 forms (16-byte row loads of f32 rows, the same
	// arithmetic) would run (PARALLAX_CUDA_SIMT_V4=0).
	NoSmallV4 bool
	// FusedPrep runs a decode step's q/k/v(/r) products and DecodePrep as
	// one launch (gemv_norm_prep_m*: the last block of each head prepares
	// it); off (the two launches) until certified on a GPU by the
	// conformance suite (PARALLAX_CUDA_FUSED_PREP=1).
	FusedPrep bool
}

// Environment variables ParseOptions reads, in Options' field order.
const (
	EnvWGMMA           = "PARALLAX_CUDA_WGMMA"
	EnvTMA             = "PARALLAX_CUDA_TMA"
	EnvForward         = "PARALLAX_CUDA_FWD"
	EnvForwardKeyTile  = "PARALLAX_CUDA_FWD_BN"
	EnvBackward        = "PARALLAX_CUDA_BWD"
	EnvDQKeyTile       = "PARALLAX_CUDA_DQ_BN"
	EnvDecodeSplitKeys = "PARALLAX_CUDA_DECODE_SPLIT_KEYS"
	EnvPDL             = "PARALLAX_CUDA_PDL"
	EnvNormRoPEHeads   = "PARALLAX_CUDA_NORMROPE_HEADS"
	EnvSmallHeads      = "PARALLAX_CUDA_SIMT_SMALL"
	EnvSmallV4         = "PARALLAX_CUDA_SIMT_V4"
	EnvFusedPrep       = "PARALLAX_CUDA_FUSED_PREP"
)

// ParseOptions reads Options from the environment through getenv
// (os.Getenv in a program). An unset or empty variable keeps the default;
// a value outside a variable's choices is an error that names it.
func ParseOptions(getenv func(string) string) (Options, error) {
	e := engine.Env{Get: getenv}
	o := Options{
		NoWGMMA:         e.Switch(EnvWGMMA, "0", "1"),
		NoTMA:           e.Switch(EnvTMA, "0", "1"),
		ForwardLoads:    e.String(EnvForward),
		ForwardKeyTile:  e.Int(EnvForwardKeyTile),
		Backward:        e.String(EnvBackward),
		DQKeyTile:       e.Int(EnvDQKeyTile),
		DecodeSplitKeys: e.Int(EnvDecodeSplitKeys),
		NoPDL:           e.Switch(EnvPDL, "0", "1"),
		NormRoPEHeads:   e.Int(EnvNormRoPEHeads),
		SmallHeads:      e.Switch(EnvSmallHeads, "1", "0"),
		NoSmallV4:       e.Switch(EnvSmallV4, "0", "1"),
		FusedPrep:       e.Switch(EnvFusedPrep, "1", "0"),
	}
	if e.Err != nil {
		return o, fmt.Errorf("cuda: %w", e.Err)
	}
	return o, o.Validate()
}

// Validate reports a choice outside its field's values.
func (o Options) Validate() error {
	switch o.ForwardLoads {
	case "", "tma", "cp.async":
	default:
		return fmt.Errorf("cuda: forward loads %q (%s): want tma or cp.async", o.ForwardLoads, EnvForward)
	}
	switch o.ForwardKeyTile {
	case 0, 32, 64, 128:
	default:
		return fmt.Errorf("cuda: forward key tile %d (%s): want 32, 64 or 128", o.ForwardKeyTile, EnvForwardKeyTile)
	}
	switch o.Backward {
	case "", "tma", "wgmma", "split", "fused":
	default:
		return fmt.Errorf("cuda: backward kernels %q (%s): want tma, wgmma, split or fused", o.Backward, EnvBackward)
	}
	switch o.DQKeyTile {
	case 0, 32, 64:
	default:
		return fmt.Errorf("cuda: dq key tile %d (%s): want 32 or 64", o.DQKeyTile, EnvDQKeyTile)
	}
	if o.NormRoPEHeads < 0 {
		return fmt.Errorf("cuda: norm+RoPE heads per unit %d (%s): want at least 1", o.NormRoPEHeads, EnvNormRoPEHeads)
	}
	if o.DecodeSplitKeys != 0 && o.DecodeSplitKeys < decKeys {
		return fmt.Errorf("cuda: decode split keys %d (%s): want at least %d", o.DecodeSplitKeys, EnvDecodeSplitKeys, decKeys)
	}
	return nil
}

// optionsFromEnv is what Devices and Open use.
func optionsFromEnv() (Options, error) { return ParseOptions(os.Getenv) }

// kernels describes the attention kernels a GPU with (wgmma) or without
// the Hopper kernels, and with (tma) or without tensor maps, runs under o:
// DeviceInfo.Kernels.
func (o Options) kernels(wgmma, tma bool) map[string]string {
	hopper := wgmma && !o.NoWGMMA
	tma = tma && !o.NoTMA
	fwd, bwd := "mma.sync (bf16, D 32/64/128)", "mma.sync dq/dr + dk/dv (bf16, D 32/64/128)"
	if o.ForwardKeyTile == 32 {
		fwd += ", 32-key tiles at D 128"
	}
	if hopper {
		load := "cp.async"
		if tma && o.ForwardLoads != "cp.async" {
			load = "TMA"
		}
		tile := "64-key"
		if o.ForwardKeyTile == 128 {
			tile = "128-key"
		}
		fwd = fmt.Sprintf("wgmma, %s loads, %s tiles (bf16, D 64/128); mma.sync other D", load, tile)
		switch {
		case o.Backward == "fused":
			bwd = "wgmma fused (one kernel, f32 dq/dr reductions)"
		case o.Backward == "split":
			bwd = "mma.sync dq/dr + wgmma dk/dv"
		case o.Backward == "wgmma" || !tma:
			bwd = "wgmma dq/dr + dk/dv, cp.async loads"
		case o.Backward == "tma":
			bwd = "wgmma dq/dr + dk/dv, TMA loads"
		default:
			bwd = "wgmma dq/dr + dk/dv, TMA loads (Parallax D 128: cp.async dq/dr)"
		}
		if o.DQKeyTile == 32 {
			bwd += ", dq 32-key tiles at D 128"
		}
		bwd += "; mma.sync other D"
	}
	keys := o.DecodeSplitKeys
	if keys == 0 {
		keys = 128
	}
	simt := "; SIMT otherwise"
	if o.SmallHeads {
		simt += " (lane-per-key at D <= 16"
		if !o.NoSmallV4 {
			simt += ", 16-byte row loads for f32 at D % 4 == 0"
		}
		simt += ")"
	}
	prep := "norm-folded q/k/v/r products (rows <= 8), then decode_prep"
	if o.FusedPrep {
		prep = "norm-folded q/k/v/r products with decode_prep in the same launch (rows <= 8)"
	}
	return map[string]string{
		"attention forward":  fwd + simt,
		"attention backward": bwd + simt,
		"decode inputs":      prep,
		"decode":             fmt.Sprintf("mma.sync split-KV with fused combine (bf16, G*Lq rows in tiles of 8, up to %d tiles), splits of >= %d keys; SIMT otherwise", maxDecodeTiles, keys),
	}
}
