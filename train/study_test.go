package train

import (
	"encoding/json"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/model"
	"github.com/parallax-engine/parallax/model/safetensors"
)

func TestLayerCircuitRanksKnown(t *testing.T) {
	// One head, D = 2, d = 3. W_R = [[3 0 0] [0 1 0]]: singular values 3, 1,
	// stable rank (9 + 1) / 9. W_K = [[1 0 0] [0 1 0]]: W_R^T W_K =
	// diag(3, 1, 0), the same stable rank.
	r := []float32{3, 0, 0, 0, 1, 0}
	k := []float32{1, 0, 0, 0, 1, 0}
	tests := []struct {
		name        string
		r, k        []float32
		hq, hkv, hd int
		d           int
		want        StudyLayerRanks
	}{
		{"one head", r, k, 1, 1, 2, 3, StudyLayerRanks{R: 10.0 / 9, RK: 10.0 / 9, RKHead: 10.0 / 9}},
		// Two query heads sharing one key head: W_R stacks [3 0 0; 0 1 0]
		// and [0 0 0; 0 0 2]; the per-head forms are diag(3, 1, 0) (10/9)
		// and the rank-one e2 (x) e2 scaled by 2 (1); the layer's form is
		// diag(3, 1, 0) + [[0 0 0] [0 0 0] [0 2 0]].
		{"grouped", append(append([]float32{}, r...), 0, 0, 0, 0, 0, 2), k, 2, 1, 2, 3,
			StudyLayerRanks{R: (9 + 1 + 4) / 9.0, RKHead: (10.0/9 + 1) / 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := LayerCircuitRanks(tt.r, tt.k, tt.hq, tt.hkv, tt.hd, tt.d)
			if math.Abs(got.R-tt.want.R) > 1e-9 || math.Abs(got.RKHead-tt.want.RKHead) > 1e-9 ||
				(tt.want.RK != 0 && math.Abs(got.RK-tt.want.RK) > 1e-9) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
	// The grouped layer's form M = [[3 0 0] [0 1 0] [0 2 0]]: ||M||_F^2 =
	// 14, M^T M = diag(9, 5, 0): ||M||_2^2 = 9.
	if got := LayerCircuitRanks(tests[1].r, k, 2, 1, 2, 3).RK; math.Abs(got-14.0/9) > 1e-9 {
		t.Errorf("grouped layer form: stable rank %v, want 14/9", got)
	}
	// Against a dense reference on an irregular matrix: the power
	// iteration converges to the top singular value.
	w := []float32{1, 2, 0.5, -1, 0.3, 2, 0.1, 0.7, -0.4, 1.5, 0.2, -0.8}
	// W^T W for the 4 x 3 matrix, its top eigenvalue by many squarings.
	var a [3][3]float64
	for i := range 4 {
		for p := range 3 {
			for q := range 3 {
				a[p][q] += float64(w[i*3+p]) * float64(w[i*3+q])
			}
		}
	}
	v := [3]float64{1, 1, 1}
	lam := 0.0
	for range 2000 {
		var n [3]float64
		for p := range 3 {
			for q := range 3 {
				n[p] += a[p][q] * v[q]
			}
		}
		lam = math.Sqrt(n[0]*n[0] + n[1]*n[1] + n[2]*n[2])
		for p := range 3 {
			v[p] = n[p] / lam
		}
	}
	fro := a[0][0] + a[1][1] + a[2][2]
	if got := StableRank(w, 4, 3); math.Abs(got-fro/lam) > 1e-6 {
		t.Errorf("stable rank %v, want %v", got, fro/lam)
	}
}

func TestCheckpointRanks(t *testing.T) {
	dir := t.TempDir()
	c, _ := model.PresetConfig("tiny")
	c.Dim, c.Layers, c.Heads, c.KVHeads, c.HeadDim = 3, 1, 1, 1, 2
	write := func(rName string, r []float32) {
		err := safetensors.Write(filepath.Join(dir, model.WeightsFile), []safetensors.Tensor{
			safetensors.F32Tensor(rName, []int{2, 3}, r),
			safetensors.F32Tensor("model.layers.0.self_attn.k_proj.weight", []int{2, 3}, []float32{1, 0, 0, 0, 1, 0}),
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
	}
	write("model.layers.0.self_attn.r_proj.weight", []float32{3, 0, 0, 0, 1, 0})
	got, err := CheckpointRanks(dir, c)
	if err != nil || len(got) != 1 || math.Abs(got[0].R-10.0/9) > 1e-9 || math.Abs(got[0].RK-10.0/9) > 1e-9 {
		t.Errorf("ranks %+v, %v", got, err)
	}
	write("model.layers.0.self_attn.q_proj.weight", []float32{3, 0, 0, 0, 1, 0})
	if _, err := CheckpointRanks(dir, c); err == nil || !strings.Contains(err.Error(), "no tensor model.layers.0.self_attn.r_proj.weight") {
		t.Errorf("without r_proj: %v", err)
	}
	if _, err := CheckpointRanks(t.TempDir(), c); err == nil || !strings.Contains(err.Error(), "final checkpoint") {
		t.Errorf("without a checkpoint: %v", err)
	}
	c.Attention = model.AttentionSoftmax
	if got, err := CheckpointRanks(dir, c); got != nil || err != nil {
		t.Errorf("softmax: %v, %v", got, err)
	}
}

func TestStudyControlConfig(t *testing.T) {
	tests := []struct {
		preset, kind       string
		heads, kv, headDim int
		attention          string
		tol                float64 // relative parameter mismatch allowed
	}{
		{"small", "heads", 12, 4, 64, model.AttentionSoftmax, 1e-4},
		{"small", "headdim", 8, 4, 48, model.AttentionParallax, 1e-4},
		{"gpt2-124m-like", "heads", 20, 10, 64, model.AttentionSoftmax, 1e-4},
		{"gpt2-124m-like", "headdim", 12, 12, 52, model.AttentionParallax, 0.005},
	}
	for _, tt := range tests {
		t.Run(tt.preset+" "+tt.kind, func(t *testing.T) {
			c, err := StudyControlConfig(tt.preset, tt.kind)
			if err != nil {
				t.Fatal(err)
			}
			if c.Heads != tt.heads || c.KVHeads != tt.kv || c.HeadDim != tt.headDim || c.Attention != tt.attention {
				t.Errorf("got Hq %d Hkv %d D %d %s", c.Heads, c.KVHeads, c.HeadDim, c.Attention)
			}
			// The control has about the parameters of the other attention
			// at the preset's shape.
			p, _ := model.PresetConfig(tt.preset)
			if tt.kind == "headdim" {
				p.Attention = model.AttentionSoftmax
			}
			if rel := math.Abs(float64(c.NumParams()-p.NumParams())) / float64(p.NumParams()); rel > tt.tol {
				t.Errorf("%d parameters against %d (%.4f%%)", c.NumParams(), p.NumParams(), 100*rel)
			}
		})
	}
	if _, err := StudyControlConfig("small", "wider"); err == nil {
		t.Error("an unknown control was accepted")
	}
	if _, err := StudyControlConfig("nope", "heads"); err == nil {
		t.Error("an unknown preset was accepted")
	}
}

func TestStudySweepAndStats(t *testing.T) {
	mk := func(config, opt, lr string, losses ...float64) StudyGroup {
		g := StudyGroup{Key: StudyKey{"small", config, opt, lr}}
		for _, l := range losses {
			l := l
			g.runs = append(g.runs, StudyRun{FinalLoss: &l})
		}
		var v []float64
		for _, r := range g.runs {
			v = append(v, *r.FinalLoss)
		}
		g.Mean, g.Std = MeanStd(v)
		return g
	}
	groups := []StudyGroup{
		mk("softmax", OptMuon, "0.01", 3.0), mk("parallax", OptMuon, "0.01", 3.2),
		mk("softmax", OptMuon, "0.02", 2.9), mk("parallax", OptMuon, "0.02", 2.95),
		mk("softmax", OptAdamW, "0.003", 3.0, 3.2, 3.1), mk("parallax", OptAdamW, "0.003", 2.5, 2.6, 2.55),
	}
	sw := SweepStudy(groups)
	if len(sw) != 1 || sw[0].Best != "0.02" || sw[0].Optimizer != OptMuon {
		t.Fatalf("sweeps %+v", sw)
	}
	if env := (StudyReport{Sweeps: sw}).BestLREnv(); env != "LR_MUON=0.02\n" {
		t.Errorf("best-lr.env %q", env)
	}
	c := compareGroups(groups[5], groups[4], StudyFinalLoss)
	// means 2.55 and 3.1, stds 0.05 and 0.1: SE = sqrt(0.0025/3 + 0.01/3).
	if se := math.Sqrt(0.0125 / 3); c.SE == nil || math.Abs(*c.SE-se) > 1e-12 || math.Abs(c.Diff+0.55) > 1e-12 || !c.Beyond ||
		!strings.Contains(c.Verdict, "parallax lower") {
		t.Errorf("comparison %+v", c)
	}
	// The best-loss comparison reads the best columns: equal means are
	// within noise whatever the final losses say.
	a, r := groups[5], groups[4]
	a.BestMean, a.BestStd, r.BestMean, r.BestStd = 2.5, 0.1, 2.5, 0.1
	if c := compareGroups(a, r, StudyBestLoss); c.Metric != StudyBestLoss || c.Diff != 0 || c.Beyond {
		t.Errorf("best comparison %+v", c)
	}
	b, err := json.Marshal(Floats{1, math.NaN(), math.Inf(1)})
	if err != nil || string(b) != "[1,null,null]" {
		t.Errorf("Floats JSON %s, %v", b, err)
	}
}
