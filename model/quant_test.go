package model

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/engine/cpu"
	"github.com/parallax-engine/parallax/model/safetensors"
)

// int8Folders saves a test model of cfg to a float folder, quantizes it
// (group g) and exports the quantized folder dequantized: the float model
// whose weights are exactly the int8 model's q s.
func int8Folders(t *testing.T, cfg Config, g int) (float, quant, deq string) {
	t.Helper()
	root := t.TempDir()
	float, quant, deq = filepath.Join(root, "f32"), filepath.Join(root, "int8"), filepath.Join(root, "deq")
	src := newTestModel(t, cfg, 21)
	defer src.Free()
	if err := src.Save(float); err != nil {
		t.Fatal(err)
	}
	rep, err := Quantize(float, quant, QuantizeOptions{Group: g})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Matrices == 0 || rep.MaxError <= 0 || rep.MaxError > 1.0/254*(1+1e-6) {
		t.Fatalf("quantize report %+v: want some matrices and a max error in (0, 1/254]", rep)
	}
	if err := Export(quant, deq, ExportOptions{DType: "F32"}); err != nil {
		t.Fatal(err)
	}
	return float, quant, deq
}

// relMaxErr is max|got - want| / max|want|.
func relMaxErr(got, want []float32) float64 {
	var num, den float64
	for i := range want {
		num = max(num, math.Abs(float64(got[i]-want[i])))
		den = max(den, math.Abs(float64(want[i])))
	}
	return num / den
}

// TestInt8Model: a folder quantized by Quantize and a float folder
// quantized on load hold the same int8 weights (bit-identical logits); the
// int8 model computes what the float model of its dequantized weights
// does, prefill and decode, to f32 rounding; in bf16 within the bf16 bound;
// its device memory is what WeightBytes and EstimateMemoryQuant say; and it
// refuses what needs float weights.
func TestInt8Model(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			cfg := testConfig(v.attention, v.tied)
			cfg.ProbeGate = v.gate
			float, quant, deq := int8Folders(t, cfg, 8)
			dev := newCountingDevice()
			q8, err := Load(quant, dev, LoadOptions{Inference: true})
			if err != nil {
				t.Fatal(err)
			}
			defer q8.Free()
			if got := q8.Quantization(); got != (Quantization{Method: QuantInt8, Group: 8}) || !q8.InferenceOnly() {
				t.Fatalf("loaded quantization %+v, inference only %v", got, q8.InferenceOnly())
			}
			want := EstimateMemoryQuant(cfg, engine.F32, q8.Quantization())
			if dev.live != q8.WeightBytes() || dev.live != want.Total() || want.Int8 == 0 {
				t.Errorf("device holds %d bytes, WeightBytes %d, EstimateMemoryQuant %v", dev.live, q8.WeightBytes(), want)
			}
			onLoad, err := Load(float, cpu.New(), LoadOptions{Inference: true, Quantize: Quantization{Method: QuantInt8, Group: 8}})
			if err != nil {
				t.Fatal(err)
			}
			defer onLoad.Free()
			ref, err := Load(deq, cpu.New(), LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer ref.Free()

			tokens, targets := testBatch(cfg, 2, 7, 3)
			logits := func(m *Model) ([]float32, LossStats) {
				t.Helper()
				s, err := m.Evaluate(tokens, targets, 2, 7)
				if err != nil {
					t.Fatal(err)
				}
				l, err := m.Logits()
				if err != nil {
					t.Fatal(err)
				}
				return l, s
			}
			lq, sq := logits(q8)
			lo, _ := logits(onLoad)
			lr, sr := logits(ref)
			if !slices.Equal(lq, lo) {
				t.Error("the quantized folder's logits differ from the float folder quantized on load")
			}
			// f32 products of the same f32 weights, summed in another order.
			if e := relMaxErr(lq, lr); e > 1e-5 || math.Abs(sq.Mean-sr.Mean) > 1e-5*sr.Mean {
				t.Errorf("int8 logits off the dequantized float model's by %.3g (loss %v vs %v)", e, sq.Mean, sr.Mean)
			}

			// Decode through the KV cache: prefill 4 tokens, then single steps.
			kq, err := q8.NewKVCache(2, 8)
			if err != nil {
				t.Fatal(err)
			}
			defer kq.Free()
			kr, err := ref.NewKVCache(2, 8)
			if err != nil {
				t.Fatal(err)
			}
			defer kr.Free()
			for s, span := range [][2]int{{0, 4}, {4, 5}, {5, 6}, {6, 7}} {
				var step []int32
				for b := range 2 {
					step = append(step, tokens[b*7+span[0]:b*7+span[1]]...)
				}
				a, err := q8.Step(kq, step, 2, span[1]-span[0], true)
				if err != nil {
					t.Fatal(err)
				}
				b, err := ref.Step(kr, step, 2, span[1]-span[0], true)
				if err != nil {
					t.Fatal(err)
				}
				if e := relMaxErr(a, b); e > 1e-5 {
					t.Errorf("decode step %d: int8 logits off the dequantized model's by %.3g", s, e)
				}
			}

			// bf16 compute: within the bf16 rounding bound of the f32 int8 model.
			b16, err := Load(quant, cpu.New(), LoadOptions{DType: engine.BF16, Inference: true})
			if err != nil {
				t.Fatal(err)
			}
			defer b16.Free()
			lb, _ := logits(b16)
			V := cfg.Vocab
			for r := 0; r < len(lq)/V; r++ {
				row := lq[r*V : (r+1)*V]
				bound := bf16LogitBound(row, cfg)
				for j := range row {
					if d := math.Abs(float64(lb[r*V+j] - row[j])); d > bound {
						t.Fatalf("bf16 int8 logit (%d, %d) %v, f32 %v: off by %.3g, beyond the bf16 bound %.3g", r, j, lb[r*V+j], row[j], d, bound)
					}
				}
			}

			// What needs float weights is refused.
			q8.MarkWeightsChanged()
			if l, _ := logits(q8); !slices.Equal(l, lq) {
				t.Error("MarkWeightsChanged changed an int8 model's logits")
			}
			if err := q8.Save(t.TempDir()); !errors.Is(err, ErrQuantized) {
				t.Errorf("Save: %v, want ErrQuantized", err)
			}
			if _, err := q8.Forward(tokens, targets, 2, 7); err != nil {
				t.Fatal(err)
			}
			if err := q8.Backward(1); !errors.Is(err, ErrQuantized) {
				t.Errorf("Backward: %v, want ErrQuantized", err)
			}
			if _, err := q8.ForwardBackward(tokens, targets, 2, 7, 1); !errors.Is(err, ErrQuantized) {
				t.Errorf("ForwardBackward: %v, want ErrQuantized", err)
			}
		})
	}
}

// TestInt8MemoryHalvesBF16: with widths the size of a real model's rows,
// the int8 model holds a little over half of the bf16 inference model's
// weight memory: 1 + 4/128 bytes a weight against 2.
func TestInt8MemoryHalvesBF16(t *testing.T) {
	cfg := Config{Vocab: 512, Dim: 256, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 64, FFN: 512,
		RopeTheta: 1e4, NormEps: 1e-6, TiedEmbeddings: true, Attention: AttentionParallax, RInit: RInitLikeQ, MaxSeq: 16}
	dir := t.TempDir()
	m, err := New(cpu.New(), cfg, Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Save(dir); err != nil {
		t.Fatal(err)
	}
	m.Free()
	bytes := func(o LoadOptions) int64 {
		dev := newCountingDevice()
		m, err := Load(dir, dev, o)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Free()
		if m.WeightBytes() != dev.live {
			t.Errorf("%+v: WeightBytes %d, device %d", o, m.WeightBytes(), dev.live)
		}
		return dev.live
	}
	b16 := bytes(LoadOptions{DType: engine.BF16, Inference: true})
	i8 := bytes(LoadOptions{DType: engine.BF16, Inference: true, Quantize: Quantization{Method: QuantInt8}})
	ratio := float64(i8) / float64(b16)
	t.Logf("weights: bf16 %d bytes, int8 %d bytes (%.3f)", b16, i8, ratio)
	// The gains stay f32: 2 d + 3 D a layer and the final norm, against
	// about 7 d^2 bf16 products a layer and the head.
	if ratio < 0.5 || ratio > 0.53 {
		t.Errorf("int8 weights take %.3f of bf16's, want 0.5 to 0.53 (1 + 4/128 bytes a weight against 2)", ratio)
	}
}

// TestInt8LoadErrors: training, a second quantization in another group
// size, a quantized config for New and broken quantized folders are
// refused with errors that say what is wrong.
func TestInt8LoadErrors(t *testing.T) {
	cfg := testConfig(AttentionParallax, true)
	float, quant, _ := int8Folders(t, cfg, 8)
	int8Opt := Quantization{Method: QuantInt8}
	for _, c := range []struct {
		dir  string
		o    LoadOptions
		want string
	}{
		{quant, LoadOptions{}, "training and saving need the float checkpoint"},
		{float, LoadOptions{Quantize: int8Opt}, "weight-only int8"},
		{quant, LoadOptions{Inference: true, Quantize: Quantization{Method: QuantInt8, Group: 4}}, "cannot be quantized again in another group size (4)"},
		{float, LoadOptions{Inference: true, Quantize: Quantization{Method: "int4"}}, `quantization method "int4" is not supported`},
		{float, LoadOptions{Inference: true, Quantize: Quantization{Method: QuantInt8, Group: -2}}, "group size -2"},
	} {
		m, err := Load(c.dir, cpu.New(), c.o)
		if err == nil {
			m.Free()
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Load(%s, %+v): %v, want %q", filepath.Base(c.dir), c.o, err, c.want)
		}
	}
	// An int8 folder with the same group size, or none asked, loads.
	for _, g := range []int{0, 8} {
		m, err := Load(quant, cpu.New(), LoadOptions{Inference: true, Quantize: Quantization{Method: QuantInt8, Group: g}})
		if err != nil {
			t.Fatalf("group %d: %v", g, err)
		}
		m.Free()
	}
	qc := cfg
	qc.Quant = Quantization{Method: QuantInt8, Group: 128}
	if _, err := New(cpu.New(), qc, Options{}); !errors.Is(err, ErrQuantized) {
		t.Errorf("New with a quantized config: %v, want ErrQuantized", err)
	}
	if _, err := Quantize(quant, filepath.Join(t.TempDir(), "again"), QuantizeOptions{}); err == nil || !strings.Contains(err.Error(), "quantized already") {
		t.Errorf("Quantize of a quantized folder: %v", err)
	}
	if _, err := Quantize(float, filepath.Join(t.TempDir(), "x"), QuantizeOptions{Group: -3}); err == nil || !strings.Contains(err.Error(), "group size -3") {
		t.Errorf("Quantize with group -3: %v", err)
	}

	// Broken folders: each rewrites one tensor or the config of a copy.
	const q0 = "model.layers.0.self_attn.q_proj.weight"
	broken := func(t *testing.T, edit func(map[string]safetensors.Tensor), cfgEdit func(map[string]any)) string {
		t.Helper()
		dir := t.TempDir()
		f, err := safetensors.Open(filepath.Join(quant, WeightsFile))
		if err != nil {
			t.Fatal(err)
		}
		ts := map[string]safetensors.Tensor{}
		for _, info := range f.Tensors() {
			raw, err := f.Raw(info.Name)
			if err != nil {
				t.Fatal(err)
			}
			ts[info.Name] = safetensors.Tensor{Name: info.Name, DType: info.DType, Shape: info.Shape, Data: raw}
		}
		f.Close()
		if edit != nil {
			edit(ts)
		}
		var list []safetensors.Tensor
		for _, x := range ts {
			list = append(list, x)
		}
		if err := safetensors.Write(filepath.Join(dir, WeightsFile), list, nil); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(quant, ConfigFile))
		if err != nil {
			t.Fatal(err)
		}
		if cfgEdit != nil {
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			cfgEdit(m)
			if b, err = json.Marshal(m); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, ConfigFile), b, 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	f32Scales := func(n int, v float32) []byte {
		vals := make([]float32, n)
		for i := range vals {
			vals[i] = v
		}
		return encodeF32(vals)
	}
	qs := q0 + ScaleSuffix
	for _, c := range []struct {
		name    string
		edit    func(map[string]safetensors.Tensor)
		cfgEdit func(map[string]any)
		want    string
	}{
		{"missing scales", func(ts map[string]safetensors.Tensor) { delete(ts, qs) }, nil, "tensor " + qs + " [32,2] (the scales of " + q0 + ") is missing"},
		{"scales of the wrong shape", func(ts map[string]safetensors.Tensor) {
			ts[qs] = safetensors.Tensor{Name: qs, DType: "F32", Shape: []int{32, 1}, Data: f32Scales(32, 1)}
		}, nil, "is F32[32,1], want F32[32,2]"},
		{"a negative scale", func(ts map[string]safetensors.Tensor) {
			ts[qs] = safetensors.Tensor{Name: qs, DType: "F32", Shape: []int{32, 2}, Data: f32Scales(64, -1)}
		}, nil, "scale 0 is -1 (want a finite number >= 0)"},
		{"a NaN scale", func(ts map[string]safetensors.Tensor) {
			ts[qs] = safetensors.Tensor{Name: qs, DType: "F32", Shape: []int{32, 2}, Data: f32Scales(64, float32(math.NaN()))}
		}, nil, "scale 0 is NaN"},
		{"float values", func(ts map[string]safetensors.Tensor) {
			ts[q0] = safetensors.Tensor{Name: q0, DType: "F32", Shape: []int{32, 16}, Data: f32Scales(512, 0.5)}
		}, nil, "tensor " + q0 + " is F32; the folder's config says its weights are int8 (I8)"},
		{"group size 0", nil, func(m map[string]any) { m["quantization"].(map[string]any)["group_size"] = 0 }, "quantization group size 0"},
		{"no group size", nil, func(m map[string]any) { delete(m["quantization"].(map[string]any), "group_size") }, `missing key "group_size"`},
		{"another method", nil, func(m map[string]any) { m["quantization"].(map[string]any)["method"] = "gptq" }, `quantization method "gptq" is not supported`},
		{"4 bits", nil, func(m map[string]any) { m["quantization"].(map[string]any)["bits"] = 4 }, "bits 4 is not supported"},
		{"asymmetric", nil, func(m map[string]any) { m["quantization"].(map[string]any)["symmetric"] = false }, "asymmetric"},
		{"another group size", nil, func(m map[string]any) { m["quantization"].(map[string]any)["group_size"] = 4 }, "model.embed_tokens.weight_scale is F32[11,2], want F32[11,4]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := broken(t, c.edit, c.cfgEdit)
			m, err := Load(dir, cpu.New(), LoadOptions{Inference: true})
			if err == nil {
				m.Free()
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("load: %v, want %q", err, c.want)
			}
		})
	}
}

// TestQuantizationConfigJSON: the "quantization" entry survives a write
// and a read, per-channel included, and a float config has none.
func TestQuantizationConfigJSON(t *testing.T) {
	for _, q := range []Quantization{{}, {Method: QuantInt8, Group: 128}, {Method: QuantInt8, Group: PerChannel}} {
		c := testConfig(AttentionParallax, true)
		c.Quant = q
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if has := strings.Contains(string(b), `"quantization"`); has != q.Enabled() {
			t.Errorf("%+v: %s", q, b)
		}
		var back Config
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if back.Quant != q {
			t.Errorf("%+v came back as %+v", q, back.Quant)
		}
	}
}
