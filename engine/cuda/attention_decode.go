//go:build cgo

package cuda

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
)

// The decode plan: how many L-splits a tensor-core decode launch takes and
// how deep its cp.async ring is (attention_mma.cu, dec_impl). The model and
// the numbers behind it are in docs/CUDA.md, "Decode: splits and pipeline".

// Environment variables for measuring the decode plan. They are read once,
// at the first decode; DeviceInfo and Options do not list them.
const (
	// EnvDecodeSplits forces the split count when the caller leaves it to
	// the device: a positive count, or "old" for the rule before the
	// few-sequence kernels (two blocks a multiprocessor, the 3-stage ring).
	EnvDecodeSplits = "PARALLAX_CUDA_DECODE_SPLITS"
	// EnvDecodeStages forces the ring depth: 3, 4 or 6 stages of 64 keys
	// (6 measured no faster than 4 for a single sequence).
	EnvDecodeStages = "PARALLAX_CUDA_DECODE_STAGES"
	// EnvDecodeReport = 1 prints each new plan (shape, splits, stages,
	// blocks) to standard error once: `parallax bench decode` shows the
	// splits it used this way.
	EnvDecodeReport = "PARALLAX_CUDA_DECODE_REPORT"
	// EnvDecodeTiles caps the 8-row tiles a group may take on the
	// tensor-core path (1 to maxDecodeTiles); groups of more rows run the
	// SIMT kernel. 1 is the rule before tiling (G*Lq <= 8 only), kept to
	// measure the tiles against it.
	EnvDecodeTiles = "PARALLAX_CUDA_DECODE_TILES"
)

// decodeStageChoices are the ring depths attention_mma.cu compiles.
var decodeStageChoices = []int{3, 4, 6}

// maxDecodeSplits bounds the automatic split count.
const maxDecodeSplits = 64

// maxDecodeTiles bounds the 8-row tiles of one (batch, KV head) group on
// the tensor-core decode path: every tile streams the group's keys again
// (from L2 after the first), so past a few hundred rows the prefill
// kernels' larger row blocks would be the better shape; 64 tiles (512
// rows: 128 tokens at G = 4) keep a chunk of prompt over a cache on the
// tensor cores rather than the SIMT kernel.
const maxDecodeTiles = 64

// decodeTiles is the number of 8-row tiles of a group of G query heads
// decoding Lq tokens each.
func decodeTiles(G, Lq int) int { return (G*Lq + 7) / 8 }

// decodeEnv is the parsed environment overrides.
type decodeEnv struct {
	old    bool // the old split rule
	splits int  // a forced split count (0: none)
	stages int  // a forced ring depth (0: none)
	report bool // print each new plan
	tiles  int  // the most row tiles a group takes (0: maxDecodeTiles)
}

// maxTiles is the tile cap in force.
func (e decodeEnv) maxTiles() int {
	if e.tiles > 0 {
		return e.tiles
	}
	return maxDecodeTiles
}

// parseDecodeEnv reads the overrides through getenv.
func parseDecodeEnv(getenv func(string) string) (decodeEnv, error) {
	var e decodeEnv
	switch s := getenv(EnvDecodeSplits); s {
	case "":
	case "old":
		e.old = true
	default:
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return e, fmt.Errorf("cuda: %s=%q: want a positive split count or old", EnvDecodeSplits, s)
		}
		e.splits = n
	}
	if s := getenv(EnvDecodeStages); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || !decodeStagesCompiled(n) {
			return e, fmt.Errorf("cuda: %s=%q: want 3, 4 or 6", EnvDecodeStages, s)
		}
		e.stages = n
	}
	switch s := getenv(EnvDecodeReport); s {
	case "", "0":
	case "1":
		e.report = true
	default:
		return e, fmt.Errorf("cuda: %s=%q: want 0 or 1", EnvDecodeReport, s)
	}
	if s := getenv(EnvDecodeTiles); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxDecodeTiles {
			return e, fmt.Errorf("cuda: %s=%q: want 1 to %d", EnvDecodeTiles, s, maxDecodeTiles)
		}
		e.tiles = n
	}
	return e, nil
}

func decodeStagesCompiled(n int) bool {
	for _, s := range decodeStageChoices {
		if s == n {
			return true
		}
	}
	return false
}

// decodeEnvNow is the overrides in force: the environment's, read once,
// or what a test set (setDecodeEnv).
var (
	decodeEnvFromOS = sync.OnceValues(func() (decodeEnv, error) { return parseDecodeEnv(os.Getenv) })
	decodeEnvTest   atomic.Pointer[decodeEnv]
)

func decodeEnvNow() (decodeEnv, error) {
	if e := decodeEnvTest.Load(); e != nil {
		return *e, nil
	}
	return decodeEnvFromOS()
}

// decodeSmem is the dynamic shared memory of a decode block: the A tile
// (16 rows) and the K and V rings, rows padded to D + 8 elements.
func decodeSmem(D, stages int) int {
	sd := D + 8
	return (16*sd + 2*stages*decKeys*sd) * 2
}

// decodeBlocksPerSM is how many decode blocks of this shared memory one
// multiprocessor holds, given smemOptin bytes a block may have (the
// multiprocessor has about 1 KiB more, and reserves 1 KiB a block). The
// 128-thread blocks are register-bound at two (up to 255 registers a
// thread).
func decodeBlocksPerSM(smem, smemOptin int) int {
	return max(1, min(2, (smemOptin+1024)/(smem+1024)))
}

// decodePlan is a decode launch's split count and ring depth, and which
// rule chose them.
type decodePlan struct {
	splits, stages int
	rule           string // "auto", "old", "env" (EnvDecodeSplits) or "caller" (DecodeArgs.Splits)
}

// decodeGPU is what planDecode needs of the device.
type decodeGPU struct {
	sms, smemOptin int
	minKeys        int // Options.DecodeSplitKeys, 0 for 128
}

// shortCacheKeys is the largest cache capacity whose decode splits take
// 64 keys rather than 128 (H200, the 0.6B shape at batch 1: a 272-key
// cache's step 1.003 against 1.015 ms, a 1280-key one's 1.055 against
// 1.040 ms).
const shortCacheKeys = 512

// maxWideSplits is the most splits the two-blocks-a-multiprocessor rule
// takes; past it, the fused combine (every split's partial read by one
// block, eight splits a round trip) costs more than the second block a
// multiprocessor gains (H200, B = 1, Hkv = 8: 33 splits 40.3 us, 16 splits
// 35.2 us at L = 16384, G = 4).
const maxWideSplits = 16

// planDecode chooses splits and stages for heads = B x Hkv (batch, KV head)
// pairs over a cache of capacity keys of head dimension D. callerSplits is
// DecodeArgs.Splits (0: ours to choose).
//
// Automatic rule: as many splits as keep heads x splits within one wave of
// the 3-stage kernel (two blocks a multiprocessor at D = 128), the rule of
// before, while that is at most maxWideSplits; for fewer pairs (B = 1 at
// Hkv = 8: 33 splits) one block a multiprocessor instead, floor(SMs /
// heads) splits, with the 4-stage ring (3 x 32 KiB in flight a block at
// D = 128). Either way a split has at least minKeys keys and there are at
// most 64. minKeys is 128, or 64 over caches of at most shortCacheKeys
// (a short conversation's decode step is latency-bound: more, shorter
// splits end sooner), unless Options.DecodeSplitKeys sets it.
func planDecode(g decodeGPU, heads, capacity, D, callerSplits int, env decodeEnv) (decodePlan, error) {
	minKeys := 128
	if capacity <= shortCacheKeys {
		minKeys = decKeys
	}
	if g.minKeys >= decKeys {
		minKeys = g.minKeys
	}
	heads = max(heads, 1)
	fits := func(s int) bool { return decodeSmem(D, s) <= g.smemOptin }
	byKeys := max(1, (capacity+minKeys-1)/minKeys)
	clamp := func(s int) int { return max(1, min(s, byKeys, maxDecodeSplits)) }
	wide := decodeBlocksPerSM(decodeSmem(D, 3), g.smemOptin) * g.sms / heads
	p := decodePlan{stages: 3, splits: clamp(wide), rule: "auto"}
	few := wide > maxWideSplits
	if few {
		p.splits = clamp(g.sms / heads)
		if fits(4) {
			p.stages = 4
		}
	}
	switch {
	case callerSplits > 0:
		p.splits, p.rule = callerSplits, "caller"
	case env.old: // as before the few-sequence plan: two blocks a multiprocessor assumed
		p.stages, p.rule = 3, "old"
		p.splits = clamp(2 * g.sms / heads)
	case env.splits > 0:
		p.splits, p.rule = env.splits, "env"
	}
	if env.stages > 0 {
		if !fits(env.stages) {
			return p, fmt.Errorf("cuda: decode with %d stages (%s) needs %d bytes of shared memory a block; the GPU gives %d",
				env.stages, EnvDecodeStages, decodeSmem(D, env.stages), g.smemOptin)
		}
		p.stages = env.stages
	}
	return p, nil
}

// decodeKernel is the kernel of a plan (attention_mma.cu's DEC).
func decodeKernel(D, stages int, px bool) string {
	if stages == 3 {
		return fmt.Sprintf("attn_dec_mma_d%d_%s", D, kind(px))
	}
	return fmt.Sprintf("attn_dec_mma_s%d_d%d_%s", stages, D, kind(px))
}

// decodeReported holds the plans already printed (EnvDecodeReport).
var decodeReported sync.Map

// reportDecode prints a plan to standard error the first time it is used
// for a shape.
func reportDecode(p decodePlan, B, Hkv, G, Lq, capacity, D int, px bool) {
	tiles := decodeTiles(G, Lq)
	line := fmt.Sprintf("cuda decode: B %d Hq %d Hkv %d Lq %d L %d D %d %s: splits %d (%s), stages %d, tiles %d, blocks %d\n",
		B, G*Hkv, Hkv, Lq, capacity, D, kind(px), p.splits, p.rule, p.stages, tiles, p.splits*tiles*B*Hkv)
	if _, seen := decodeReported.LoadOrStore(line, true); !seen {
		fmt.Fprint(os.Stderr, line)
	}
}
