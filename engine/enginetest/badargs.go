package enginetest

import (
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/parallax-engine/parallax/engine"
)

func init() { register(badArgCases) }

// badArg is one row of the bad-argument table: an op called with operands
// the shared checks (engine.Check*) reject. op is the ArgError's Op.
type badArg struct {
	op, why string
	call    func(dev engine.Device, ts *Tensors, dt engine.DType) error
}

// badArgs is the table. Every call must return an *engine.ArgError for op
// from the op itself, write nothing and leave the device usable: every
// backend rejects the same mistakes with the same words.
var badArgs = []badArg{
	{"matmul", "inner dimensions differ", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
		return dev.MatMul(ts.New(dt, 2, 5), ts.New(dt, 2, 3), ts.New(dt, 4, 5), engine.MatMulOpts{})
	}},
	{"matmul", "an integer operand", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
		return dev.MatMul(ts.New(dt, 2, 5), ts.New(engine.I32, 2, 3), ts.New(dt, 3, 5), engine.MatMulOpts{})
	}},
	{"matmul", "a missing output", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
		return dev.MatMul(nil, ts.New(dt, 2, 3), ts.New(dt, 3, 5), engine.MatMulOpts{})
	}},
	{"linear int8", "a group size of 0", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
		w := engine.Int8Weight{Q: ts.New(engine.I8, 4, 32), Scales: ts.New(engine.F32, 4, 1), Group: 0}
		return dev.LinearInt8(ts.New(dt, 2, 4), ts.New(dt, 2, 32), w, false)
	}},
	{"linear int8", "scales of the wrong shape", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
		w := engine.Int8Weight{Q: ts.New(engine.I8, 4, 32), Scales: ts.New(engine.F32, 4, 1), Group: 16}
		return dev.LinearInt8(ts.New(dt, 2, 4), ts.New(dt, 2, 32), w, false)
	}},
	{"linear int8", "a floating weight for the int8 values", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
		w := engine.Int8Weight{Q: ts.New(dt, 4, 32), Scales: ts.New(engine.F32, 4, 2), Group: 16}
		return dev.LinearInt8(ts.New(dt, 2, 4), ts.New(dt, 2, 32), w, false)
	}},
	{"linear int8", "an x of the wrong width", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
		w := engine.Int8Weight{Q: ts.New(engine.I8, 4, 32), Scales: ts.New(engine.F32, 4, 2), Group: 16}
		return dev.LinearInt8(ts.New(dt, 2, 4), ts.New(dt, 2, 16), w, false)
	}},
	{"embedding int8", "floating ids", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
		w := engine.Int8Weight{Q: ts.New(engine.I8, 4, 32), Scales: ts.New(engine.F32, 4, 2), Group: 16}
		return dev.EmbeddingInt8(ts.New(dt, 3, 32), w, ts.New(dt, 3))
	}},
	{"cast", "an int8 tensor", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
		return dev.Cast(ts.New(dt, 8), ts.New(engine.I8, 8))
	}},
	{"fill", "an int8 tensor", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
		return dev.Fill(ts.New(engine.I8, 8), 1)
	}},
	{"embedding", "floating ids", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
		return dev.Embedding(ts.New(dt, 3, 4), ts.New(dt, 10, 4), ts.New(dt, 3))
	}},
	{"rmsnorm", "a gain of the wrong width", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
		return dev.RMSNorm(ts.New(dt, 2, 8), nil, ts.New(dt, 2, 8), ts.New(dt, 7), 1e-6)
	}},
	{"rope", "an odd head dimension", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
		return dev.RoPE(ts.New(dt, 1, 1, 2, 3), ts.New(dt, 1, 1, 2, 3), ts.New(engine.I32, 2), 1e4)
	}},
	{"rope", "positions of the wrong length", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
		return dev.RoPE(ts.New(dt, 1, 1, 2, 4), ts.New(dt, 1, 1, 2, 4), ts.New(engine.I32, 3), 1e4)
	}},
	{"swiglu", "operands of different sizes", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
		return dev.SwiGLU(ts.New(dt, 4), ts.New(dt, 4), ts.New(dt, 5))
	}},
	{"add scaled", "operands of different sizes", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
		return dev.AddScaled(ts.New(dt, 4), ts.New(dt, 3), ts.New(dt, 4), 1, 1)
	}},
	{"cast", "element counts differ", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
		return dev.Cast(ts.New(engine.F32, 3), ts.New(dt, 4))
	}},
	{"swapaxes12", "a destination of the unswapped shape", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
		return dev.SwapAxes12(ts.New(dt, 1, 2, 3, 4), ts.New(dt, 1, 2, 3, 4))
	}},
	{"kv append", "rows past the capacity", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
		return dev.KVAppend(ts.New(dt, 1, 1, 4, 8), ts.New(dt, 1, 1, 2, 8), 3)
	}},
	{"cross entropy", "floating targets", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
		return dev.CrossEntropy(ts.New(engine.F32, 3), nil, ts.New(dt, 3, 5), ts.New(dt, 3), engine.CrossEntropyOpts{GradScale: 1})
	}},
	{"cross entropy", "more classes than columns", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
		return dev.CrossEntropy(ts.New(engine.F32, 3), nil, ts.New(dt, 3, 5), ts.New(engine.I32, 3),
			engine.CrossEntropyOpts{GradScale: 1, Classes: 6})
	}},
	{"attention", "query heads not a multiple of the KV heads", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
		return dev.Attention(engine.AttentionArgs{Q: ts.New(dt, 1, 3, 4, 8), K: ts.New(dt, 1, 2, 4, 8), V: ts.New(dt, 1, 2, 4, 8),
			O: ts.New(dt, 1, 3, 4, 8)})
	}},
	{"attention", "causal with more queries than keys", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
		return dev.Attention(engine.AttentionArgs{Q: ts.New(dt, 1, 2, 6, 8), K: ts.New(dt, 1, 2, 4, 8), V: ts.New(dt, 1, 2, 4, 8),
			O: ts.New(dt, 1, 2, 6, 8), AttentionOpts: engine.AttentionOpts{Causal: true}})
	}},
	{"attention", "a window without causal masking", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
		return dev.Attention(engine.AttentionArgs{Q: ts.New(dt, 1, 2, 4, 8), K: ts.New(dt, 1, 2, 4, 8), V: ts.New(dt, 1, 2, 4, 8),
			O: ts.New(dt, 1, 2, 4, 8), AttentionOpts: engine.AttentionOpts{Window: 2}})
	}},
	{"attention", "an lse that is not f32", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
		return dev.Attention(engine.AttentionArgs{Q: ts.New(dt, 1, 2, 4, 8), K: ts.New(dt, 1, 2, 4, 8), V: ts.New(dt, 1, 2, 4, 8),
			O: ts.New(dt, 1, 2, 4, 8), LSE: ts.New(engine.I32, 1, 2, 4)})
	}},
	{"attention backward", "no saved lse", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
		s := []int{1, 2, 4, 8}
		return dev.AttentionBackward(engine.AttentionBackwardArgs{Q: ts.New(dt, s...), K: ts.New(dt, s...), V: ts.New(dt, s...),
			O: ts.New(dt, s...), DO: ts.New(dt, s...), DQ: ts.New(dt, s...), DK: ts.New(dt, s...), DV: ts.New(dt, s...)})
	}},
	{"decode attention", "lengths of the wrong count", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
		return dev.DecodeAttention(engine.DecodeArgs{Q: ts.New(dt, 2, 2, 1, 8), KCache: ts.New(dt, 2, 2, 16, 8),
			VCache: ts.New(dt, 2, 2, 16, 8), Lens: ts.New(engine.I32, 3), O: ts.New(dt, 2, 2, 1, 8)})
	}},
	{"lla", "a negative ridge", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
		return dev.LLA(engine.LLAArgs{Q: ts.New(dt, 1, 1, 4, 2), K: ts.New(dt, 1, 1, 4, 2), V: ts.New(dt, 1, 1, 4, 2),
			O: ts.New(dt, 1, 1, 4, 2), Lambda: -1})
	}},
	{"linear attention", "an output of the wrong shape", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
		return dev.LinearAttention(engine.LinearAttentionArgs{R: ts.New(dt, 1, 2, 4, 8), K: ts.New(dt, 1, 2, 4, 8),
			V: ts.New(dt, 1, 2, 4, 8), O: ts.New(dt, 1, 2, 4, 4)})
	}},
	{"head gate", "gates of the wrong shape", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
		return dev.HeadGate(ts.New(dt, 3, 2, 4), ts.New(dt, 3, 2, 4), ts.New(dt, 3, 3))
	}},
	{"correction ratio", "an output that is not f32 [1]", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
		return dev.CorrectionRatio(ts.New(engine.F32, 2), ts.New(dt, 3, 4), ts.New(dt, 3, 4))
	}},
	{"sum squares", "an integer input", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
		return dev.SumSquares(ts.New(engine.F32, 1), ts.New(engine.I32, 3), false)
	}},
	{"adamw", "step 0", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
		return dev.AdamW(ts.New(dt, 4), ts.New(dt, 4), ts.New(engine.F32, 4), ts.New(engine.F32, 4),
			engine.AdamWOpts{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8})
	}},
	{"adamw", "moments that are not f32", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
		return dev.AdamW(ts.New(dt, 4), ts.New(dt, 4), ts.New(engine.BF16, 4), ts.New(engine.F32, 4),
			engine.AdamWOpts{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: 1})
	}},
	{"adamw", "lists of different lengths (AdamWAll)", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
		p := []*engine.Tensor{ts.New(dt, 4), ts.New(dt, 4)}
		m := []*engine.Tensor{ts.New(engine.F32, 4)}
		return engine.AdamWAll(dev, p, p, m, m, engine.AdamWOpts{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: 1})
	}},
	{"muon momentum", "a momentum that is not f32", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
		return dev.MuonMomentum(ts.New(dt, 4), ts.New(engine.F16, 4), ts.New(dt, 4), engine.MuonMomentumOpts{Beta: 0.95, Nesterov: true})
	}},
	{"muon momentum", "a negative gradient scale", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
		return dev.MuonMomentum(ts.New(dt, 4), ts.New(engine.F32, 4), ts.New(dt, 4), engine.MuonMomentumOpts{Beta: 0.95, GradScale: -0.5})
	}},
	{"muon momentum", "a beta of 1", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
		return dev.MuonMomentum(ts.New(dt, 4), ts.New(engine.F32, 4), ts.New(dt, 4), engine.MuonMomentumOpts{Beta: 1})
	}},
	{"frobenius normalize", "a vector", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
		return dev.FrobeniusNormalize(ts.New(dt, 6), ts.New(dt, 6), 1e-7)
	}},
	{"muon apply", "operands of different sizes", func(dev engine.Device, ts *Tensors, dt engine.DType) error {
		return dev.MuonApply(ts.New(dt, 6), ts.New(dt, 5), 1e-3, 0, 1)
	}},
}

// badArgCases turns the table into cases: each passes when its call
// returns an ArgError for its op and the device syncs cleanly afterwards.
func badArgCases(_ Options, dt engine.DType) []Case {
	var cs []Case
	for _, b := range badArgs {
		cs = append(cs, Case{Op: "bad arguments", Name: b.op + ": " + b.why, DType: dt,
			Run: func(dev engine.Device, _ *rand.Rand) ([]Metric, error) {
				ts := NewTensors(dev)
				defer ts.Free()
				err := b.call(dev, ts, dt)
				if terr := ts.Err(); terr != nil {
					return nil, terr
				}
				var ae *engine.ArgError
				if !errors.As(err, &ae) {
					return nil, fmt.Errorf("%s with %s: got %v, want an *engine.ArgError", b.op, b.why, err)
				}
				if ae.Op != b.op {
					return nil, fmt.Errorf("%s with %s: the error names op %q: %v", b.op, b.why, ae.Op, err)
				}
				if err := dev.Sync(); err != nil {
					return nil, fmt.Errorf("%s with %s: Sync after the rejected call: %w", b.op, b.why, err)
				}
				return []Metric{{Name: "argument error", Err: 0, Tol: 0}}, nil
			}})
	}
	return cs
}
