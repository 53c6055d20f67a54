package train

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/parallax-engine/parallax/model"
	"github.com/parallax-engine/parallax/train/plot"
)

// StudyTest describes the test behind StudyComparison.Verdict, as the
// report states it.
const StudyTest = "difference of the mean final (or best) held-out losses over seeds, against the pooled standard error " +
	"SE = sqrt(s_a^2/n_a + s_b^2/n_b) (s: sample standard deviation over seeds, n - 1); it is called beyond seed noise " +
	"when |difference| > 2 SE (a rough two-sided test: with 3 seeds a cell, about p < 0.12 under Welch's t; not a significance claim)"

// StudyReport is the whole summary of a study, the report's JSON.
type StudyReport struct {
	Dir         string            `json:"dir"`
	Test        string            `json:"test"`
	Counts      map[string]int    `json:"counts"` // runs per status
	Runs        []StudyRun        `json:"runs"`
	Unstarted   []string          `json:"unstarted,omitempty"` // planned runs without a folder
	Groups      []StudyGroup      `json:"groups"`
	Comparisons []StudyComparison `json:"comparisons"`
	Sweeps      []StudySweep      `json:"sweeps,omitempty"`
}

// LoadStudy reads the study in dir (see StudyRunDirs) and summarises it.
// It fails only when dir is not a study (no folder, no run folders).
func LoadStudy(dir string) (StudyReport, error) {
	root, names, unstarted, err := StudyRunDirs(dir)
	if err != nil {
		return StudyReport{}, err
	}
	rep := StudyReport{Dir: dir, Test: StudyTest, Counts: map[string]int{}, Unstarted: unstarted}
	for _, name := range names {
		rep.Runs = append(rep.Runs, LoadStudyRun(root, name))
	}
	CompleteStudy(rep.Runs)
	for _, r := range rep.Runs {
		rep.Counts[r.Status]++
	}
	if len(unstarted) > 0 {
		rep.Counts["unstarted"] = len(unstarted)
	}
	rep.Groups = StudyGroups(rep.Runs)
	rep.Comparisons = CompareStudy(rep.Groups)
	rep.Sweeps = SweepStudy(rep.Groups)
	return rep, nil
}

// BestLREnv is the rates the sweeps chose, as shell variables for
// scripts/study.sh (LR_MUON=..., LR_ADAMW=...; per preset when the
// sweeps cover several: LR_MUON_small=...); "" without a sweep.
func (rep StudyReport) BestLREnv() string {
	var b strings.Builder
	presets := map[string]bool{}
	for _, s := range rep.Sweeps {
		presets[s.Preset] = true
	}
	for _, s := range rep.Sweeps {
		if s.Best == "" || s.Best == "default" {
			continue
		}
		name := "LR_" + strings.ToUpper(s.Optimizer)
		if len(presets) > 1 {
			name += "_" + strings.NewReplacer("-", "_", ".", "_").Replace(s.Preset)
		}
		fmt.Fprintf(&b, "%s=%s\n", name, s.Best)
	}
	return b.String()
}

func optLabel(opt string) string {
	switch opt {
	case OptMuon:
		return "Muon"
	case OptAdamW:
		return "AdamW"
	}
	return opt
}

func fmtF(v float64, prec int) string {
	if !finite(v) {
		return "n/a"
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

// Markdown is the report's tables: held-out loss per cell, the
// comparisons, COR, probe gate and stable ranks per layer, the sweeps,
// and one row per run with its status.
func (rep StudyReport) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Study report: %s\n\n", rep.Dir)
	var counts []string
	for _, s := range []string{StudyFinished, StudyPartial, StudyMissing, "unstarted"} {
		if n := rep.Counts[s]; n > 0 {
			counts = append(counts, fmt.Sprintf("%d %s", n, s))
		}
	}
	fmt.Fprintf(&b, "Runs: %s. Only finished runs enter the tables; the others are listed under \"Runs\".\n\n", strings.Join(counts, ", "))
	if len(rep.Groups) == 0 {
		b.WriteString("No finished run: nothing to summarise.\n\n")
	}
	most := map[string]int{}
	tokLo, tokHi := map[string]int64{}, map[string]int64{}
	var presets []string
	for _, g := range rep.Groups {
		most[g.Key.Preset] = max(most[g.Key.Preset], len(g.runs))
		for _, r := range g.runs {
			if _, ok := tokLo[g.Key.Preset]; !ok {
				tokLo[g.Key.Preset], tokHi[g.Key.Preset] = r.Tokens, r.Tokens
				presets = append(presets, g.Key.Preset)
			}
			tokLo[g.Key.Preset], tokHi[g.Key.Preset] = min(tokLo[g.Key.Preset], r.Tokens), max(tokHi[g.Key.Preset], r.Tokens)
		}
	}
	for _, p := range presets {
		if tokLo[p] != tokHi[p] {
			fmt.Fprintf(&b, "Note: the finished runs of %s trained unequal tokens (%s to %s): their comparisons are not at equal tokens.\n\n",
				p, HumanCount(float64(tokLo[p])), HumanCount(float64(tokHi[p])))
		}
	}
	if len(rep.Groups) > 0 {
		b.WriteString("## Final held-out loss\n\nThe best held-out loss is each run's lowest evaluation along the way.\n\n")
		b.WriteString("| preset | configuration | optimizer | lr | params | tokens | seeds | final held-out loss (mean ± std) | min | max | best held-out loss (mean ± std) |\n")
		b.WriteString("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, g := range rep.Groups {
			seeds := strconv.Itoa(len(g.runs))
			if len(g.runs) < most[g.Key.Preset] {
				seeds = fmt.Sprintf("%d (of %d)", len(g.runs), most[g.Key.Preset])
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %.4f ± %.4f | %.4f | %.4f | %.4f ± %.4f |\n", g.Key.Preset, g.Key.Config,
				optLabel(g.Key.Optimizer), g.Key.LR, HumanCount(float64(g.Params)), HumanCount(float64(g.Tokens)), seeds,
				g.Mean, g.Std, g.Min, g.Max, g.BestMean, g.BestStd)
		}
		b.WriteString("\n")
	}
	if len(rep.Comparisons) > 0 {
		b.WriteString("## Differences (below 0: the first configuration has the lower loss)\n\n")
		fmt.Fprintf(&b, "Test: %s.\n\n", rep.Test)
		b.WriteString("| held-out loss | preset | optimizer | lr | comparison | seeds | difference | pooled SE | t | verdict |\n")
		b.WriteString("|---|---|---|---:|---|---:|---:|---:|---:|---|\n")
		for _, c := range rep.Comparisons {
			se, t := "n/a", "n/a"
			if c.SE != nil {
				se = fmtF(*c.SE, 4)
			}
			if c.T != nil {
				t = fmtF(*c.T, 2)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s − %s | %d, %d | %+.4f | %s | %s | %s |\n", c.Metric, c.Preset, optLabel(c.Optimizer), c.LR,
				c.A, c.B, c.NA, c.NB, c.Diff, se, t, c.Verdict)
		}
		b.WriteString("\n")
	}
	layerTable := func(title, note string, pick func(StudyGroup) []float64, prec int) {
		var rows []StudyGroup
		layers := 0
		for _, g := range rep.Groups {
			if v := pick(g); len(v) > 0 {
				rows, layers = append(rows, g), max(layers, len(v))
			}
		}
		if len(rows) == 0 {
			return
		}
		fmt.Fprintf(&b, "## %s\n\n%s\n\n| preset | configuration | optimizer | lr | seeds |", title, note)
		for l := range layers {
			fmt.Fprintf(&b, " layer %d |", l)
		}
		b.WriteString("\n|---|---|---|---:|---:|" + strings.Repeat("---:|", layers) + "\n")
		for _, g := range rows {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %d |", g.Key.Preset, g.Key.Config, optLabel(g.Key.Optimizer), g.Key.LR, len(g.runs))
			v := pick(g)
			for l := range layers {
				s := ""
				if l < len(v) {
					s = fmtF(v[l], prec)
				}
				fmt.Fprintf(&b, " %s |", s)
			}
			b.WriteString("\n")
		}
		b.WriteString("\n")
	}
	layerTable("COR per layer", "The correction-to-output ratio |o_SA - o| / |o_SA| of each layer at the last logged step (train's `cor` in metrics.jsonl), mean over seeds.",
		func(g StudyGroup) []float64 { return g.COR }, 4)
	layerTable("Probe gate per layer", "The mean probe gate sigmoid(w_g . h) of each layer at the last logged step (train's `gate`, --probe-gate runs), mean over seeds.",
		func(g StudyGroup) []float64 { return g.Gate }, 4)
	layerTable("Stable rank of W_R per layer", "||W_R||_F^2 / ||W_R||_2^2 from the final checkpoint (model.safetensors; power iteration in float64), mean over seeds.",
		func(g StudyGroup) []float64 { return g.SRankR }, 2)
	layerTable("Stable rank of W_R^T W_K per layer", "The layer's d x d form sum_h W_R,h^T W_K,g(h) (W_K's heads repeated for the query heads that share them), from the final checkpoint, mean over seeds.",
		func(g StudyGroup) []float64 { return g.SRankRK }, 2)
	layerTable("Stable rank of W_R,h^T W_K,g per head, mean over heads", "As train logs it (srank_rk), from the final checkpoint, mean over seeds.",
		func(g StudyGroup) []float64 { return g.SRankRKHead }, 2)
	for _, s := range rep.Sweeps {
		fmt.Fprintf(&b, "## Learning-rate sweep: %s, %s\n\nFinal held-out loss per rate; the chosen rate has the lowest mean over the configurations run at every rate.\n\n| configuration |", s.Preset, optLabel(s.Optimizer))
		for _, lr := range s.Rates {
			fmt.Fprintf(&b, " lr %s |", lr)
		}
		b.WriteString("\n|---|" + strings.Repeat("---:|", len(s.Rates)) + "\n")
		var configs []string
		for c := range s.Loss {
			configs = append(configs, c)
		}
		slices.Sort(configs)
		for _, c := range configs {
			fmt.Fprintf(&b, "| %s |", c)
			for _, lr := range s.Rates {
				v, ok := s.Loss[c][lr]
				cell := ""
				if ok {
					cell = fmtF(v, 4)
				}
				fmt.Fprintf(&b, " %s |", cell)
			}
			b.WriteString("\n")
		}
		best := s.Best
		if best == "" {
			best = "none (no rate was run by every configuration)"
		}
		fmt.Fprintf(&b, "\nChosen rate: %s\n\n", best)
	}
	b.WriteString("## Runs\n\n| run | status | preset | configuration | optimizer | seed | steps | final held-out loss | best (at step) | note |\n")
	b.WriteString("|---|---|---|---|---|---:|---:|---:|---:|---|\n")
	for _, r := range rep.Runs {
		loss, best, seed := "", "", ""
		if r.FinalLoss != nil {
			loss = fmtF(*r.FinalLoss, 4)
		}
		if r.BestLoss != nil {
			best = fmt.Sprintf("%s (%d)", fmtF(*r.BestLoss, 4), r.BestAt)
		}
		if r.Seed >= 0 {
			seed = strconv.Itoa(r.Seed)
		}
		steps := strconv.Itoa(r.Steps)
		if r.TargetSteps > 0 {
			steps += " / " + strconv.Itoa(r.TargetSteps)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Name, strings.ToUpper(r.Status), r.Preset, r.Config,
			optLabel(r.Optimizer), seed, steps, loss, best, strings.ReplaceAll(r.Problem, "|", "/"))
	}
	for _, name := range rep.Unstarted {
		fmt.Fprintf(&b, "| %s | UNSTARTED |  |  |  |  |  |  |  | planned (%s) but no folder |\n", name, StudyPlanFile)
	}
	return b.String()
}

// StudyLossCharts draws the held-out loss against training tokens, one
// chart per preset and optimizer, one series per configuration (and
// rate): the mean over seeds with bars from the minimum to the maximum.
func StudyLossCharts(rep StudyReport) []plot.Chart {
	var charts []plot.Chart
	for i := 0; i < len(rep.Groups); {
		p, o := rep.Groups[i].Key.Preset, rep.Groups[i].Key.Optimizer
		ch := plot.Chart{Title: fmt.Sprintf("%s, %s: held-out loss (mean over seeds; bars: min to max)", p, optLabel(o)),
			XLabel: "training tokens", YLabel: "held-out loss (nats/token)"}
		rates := map[string]bool{}
		for j := i; j < len(rep.Groups) && rep.Groups[j].Key.Preset == p && rep.Groups[j].Key.Optimizer == o; j++ {
			rates[rep.Groups[j].Key.LR] = true
		}
		for ; i < len(rep.Groups) && rep.Groups[i].Key.Preset == p && rep.Groups[i].Key.Optimizer == o; i++ {
			g := rep.Groups[i]
			var cs []curve
			for _, r := range g.runs {
				cs = append(cs, AdaptRun{Records: r.records}.valCurve())
			}
			name := fmt.Sprintf("%s (%d)", g.Key.Config, len(g.runs))
			if len(rates) > 1 {
				name = fmt.Sprintf("%s lr %s (%d)", g.Key.Config, g.Key.LR, len(g.runs))
			}
			ch.Series = append(ch.Series, bandSeries(name, aggregate(cs), plot.Palette[len(ch.Series)%len(plot.Palette)]))
		}
		charts = append(charts, ch)
	}
	return charts
}

// StudyCORCharts draws the final COR against layer depth, one chart per
// preset, one series per Parallax configuration and optimizer: the mean
// over seeds with bars from the minimum to the maximum. Nil without a
// Parallax run.
func StudyCORCharts(rep StudyReport) []plot.Chart {
	var charts []plot.Chart
	byPreset := map[string]int{}
	for _, g := range rep.Groups {
		if len(g.COR) == 0 {
			continue
		}
		i, ok := byPreset[g.Key.Preset]
		if !ok {
			i = len(charts)
			byPreset[g.Key.Preset] = i
			charts = append(charts, plot.Chart{Title: fmt.Sprintf("%s: COR per layer at the end of training (mean over seeds; bars: min to max)", g.Key.Preset),
				XLabel: "layer", YLabel: "COR = |o_SA - o| / |o_SA|"})
		}
		var cs []curve
		for _, r := range g.runs {
			var c curve
			for l, v := range r.COR {
				c.x, c.y = append(c.x, float64(l)), append(c.y, v)
			}
			cs = append(cs, c)
		}
		name := fmt.Sprintf("%s, %s", g.Key.Config, optLabel(g.Key.Optimizer))
		if g.Key.LR != "default" {
			name += " lr " + g.Key.LR
		}
		s := bandSeries(name, aggregate(cs), plot.Palette[len(charts[i].Series)%len(plot.Palette)])
		s.Dots = true
		charts[i].Series = append(charts[i].Series, s)
	}
	return charts
}

// studyControlShape is the parameter-matched control of a preset's shape
// c that scripts/study.sh trains (written by parallax report
// study-control).
// Parallax adds W_R ([Hq*D, d]) to each layer, so per layer its
// attention has (3 Hq + 2 Hkv) D d weights against softmax's
// (2 Hq + 2 Hkv) D d: softmax matches it with query and key heads whose
// sum is larger by Hq/2 at the same D ("heads"), Parallax matches
// softmax with a smaller D ("headdim").
func studyControlShape(c model.Config, kind string) (model.Config, error) {
	base := c.Heads*3 + c.KVHeads*2 // Parallax's attention weights per layer, in D x d blocks
	switch kind {
	case "heads":
		c.Attention, c.RInit = model.AttentionSoftmax, model.RInitLikeQ
		// 2 (Hq' + Hkv') = 3 Hq + 2 Hkv, Hq' a multiple of Hkv', Hq' >= Hq:
		// the closest such shape, ties to the key-head count nearest c's.
		bestH, bestKV := 0, 0
		for kv := 1; kv <= base; kv++ {
			for h := kv; h <= base; h += kv {
				if h < c.Heads || 2*(h+kv) > base+1 {
					continue
				}
				if bestH == 0 || absInt(2*(h+kv)-base) < absInt(2*(bestH+bestKV)-base) ||
					(absInt(2*(h+kv)-base) == absInt(2*(bestH+bestKV)-base) && absInt(kv-c.KVHeads) < absInt(bestKV-c.KVHeads)) {
					bestH, bestKV = h, kv
				}
			}
		}
		if bestH == 0 {
			return model.Config{}, fmt.Errorf("no softmax head shape matches %d query and %d key heads of Parallax", c.Heads, c.KVHeads)
		}
		c.Heads, c.KVHeads = bestH, bestKV
	case "headdim":
		// (3 Hq + 2 Hkv) D' = (2 Hq + 2 Hkv) D, D' even.
		want := float64((2*c.Heads+2*c.KVHeads)*c.HeadDim) / float64(base)
		c.HeadDim = max(2, 2*int(math.Round(want/2)))
	default:
		return model.Config{}, fmt.Errorf("control %q: want heads or headdim", kind)
	}
	return c, c.Validate()
}

// StudyControlConfig is the parameter-matched control of a preset for
// scripts/study.sh: "heads" is a softmax model with more query (and key)
// heads, "headdim" a Parallax model with a smaller head dimension, each
// with about the attention weights of the other attention at the preset's
// shape.
func StudyControlConfig(preset, kind string) (model.Config, error) {
	c, err := model.PresetConfig(preset)
	if err != nil {
		return model.Config{}, err
	}
	return studyControlShape(c, kind)
}

func absInt(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
