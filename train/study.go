package train

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/parallax-engine/parallax/internal/atomicfile"
	"github.com/parallax-engine/parallax/model"
	"github.com/parallax-engine/parallax/model/safetensors"
)

// The quality study (scripts/study.sh, docs/RESULTS.md "Study harness"):
// models trained from scratch for equal tokens with softmax and Parallax
// attention, under Muon and AdamW, several seeds each, optionally with the
// probe-gate ablation, a parameter-matched control and a short
// learning-rate sweep. The functions below read the run folders and
// summarise them; study_report.go renders the summary.

// Files of the study.
const (
	// StudyRunFile is the manifest scripts/study.sh writes into each run
	// folder: what the run was meant to be (StudyRunInfo).
	StudyRunFile = "study-run.json"
	// StudyPlanFile lists, one per line, the run folders scripts/study.sh
	// planned (relative to the study's run folder), so that the report can
	// name the runs that never started.
	StudyPlanFile = "plan.txt"
	// StudyRanksFile, in a run folder, keeps the stable ranks computed
	// from its final checkpoint, so that a run folder without its weights
	// (packed small to be carried elsewhere) still reports them.
	StudyRanksFile = "study-ranks.json"
)

// Run states in a study.
const (
	StudyFinished = "finished" // reached its target steps
	StudyPartial  = "partial"  // stopped before its target steps
	StudyMissing  = "missing"  // planned or started, but without metrics or a held-out evaluation
)

// StudyRunInfo is a run folder's StudyRunFile. Every field is optional:
// what is missing is read from the run's config.json and metrics.jsonl.
type StudyRunInfo struct {
	Preset    string  `json:"preset,omitempty"`
	Variant   string  `json:"variant,omitempty"`
	Optimizer string  `json:"optimizer,omitempty"`
	Seed      *int    `json:"seed,omitempty"`
	LR        float64 `json:"lr,omitempty"`
	Steps     int     `json:"steps,omitempty"` // the target
}

// StudyLayerRanks are one layer's stable ranks computed from a final
// checkpoint.
type StudyLayerRanks struct {
	// R is the stable rank of W_R ([Hq*D, d]).
	R float64 `json:"srank_r"`
	// RK is the stable rank of the layer's d x d form W_R^T W_K, W_K's
	// rows repeated for the query heads that share each key head, i.e.
	// the sum over heads h of W_R,h^T W_K,g(h).
	RK float64 `json:"srank_rk"`
	// RKHead is the mean over query heads of the stable rank of
	// W_R,h^T W_K,g(h) (the quantity train logs as srank_rk).
	RKHead float64 `json:"srank_rk_head_mean"`
}

// StudyRun is one run folder of a study.
type StudyRun struct {
	Name      string `json:"name"` // folder, relative to the study's run folder
	Status    string `json:"status"`
	Problem   string `json:"problem,omitempty"` // why it is partial or missing, or what could not be measured
	Preset    string `json:"preset,omitempty"`
	Config    string `json:"configuration,omitempty"` // StudyConfigLabel
	Attention string `json:"attention,omitempty"`
	ProbeGate bool   `json:"probe_gate,omitempty"`
	Heads     int    `json:"heads,omitempty"`
	KVHeads   int    `json:"kv_heads,omitempty"`
	HeadDim   int    `json:"head_dim,omitempty"`
	Layers    int    `json:"layers,omitempty"`
	Params    int64  `json:"params,omitempty"`
	Optimizer string `json:"optimizer,omitempty"`
	Seed      int    `json:"seed"` // -1 when unknown
	// LR is the main group's peak rate (StudyRunFile's, else the largest
	// logged one).
	LR          float64  `json:"lr,omitempty"`
	TargetSteps int      `json:"target_steps,omitempty"` // 0: unknown
	Steps       int      `json:"steps"`
	Tokens      int64    `json:"tokens"`
	FinalLoss   *float64 `json:"final_val_loss,omitempty"`
	FinalAt     int      `json:"final_val_step,omitempty"`
	// BestLoss is the lowest held-out loss of the run's evaluations and
	// BestAt its step: on a corpus that training repeats, the final
	// loss can measure overfitting more than the model.
	BestLoss *float64          `json:"best_val_loss,omitempty"`
	BestAt   int               `json:"best_val_step,omitempty"`
	COR      []float64         `json:"cor,omitempty"`  // per layer, the last logged
	Gate     []float64         `json:"gate,omitempty"` // per layer, the last logged
	Ranks    []StudyLayerRanks `json:"ranks,omitempty"`

	dir     string
	records []Record
}

// StudyKey is a cell of the design: runs that differ only in their seed.
type StudyKey struct {
	Preset    string `json:"preset"`
	Config    string `json:"configuration"`
	Optimizer string `json:"optimizer"`
	LR        string `json:"lr"`
}

// Key is the run's cell.
func (r StudyRun) Key() StudyKey {
	return StudyKey{r.Preset, r.Config, r.Optimizer, formatLR(r.LR)}
}

func formatLR(lr float64) string {
	if lr <= 0 {
		return "default"
	}
	return strconv.FormatFloat(lr, 'g', 3, 64)
}

// StudyConfigLabel names a model's configuration: its attention
// ("softmax", "parallax", "parallax+gate"), followed by its head shape
// when that differs from the preset's (the parameter-matched controls),
// e.g. "softmax Hq12/Hkv4/D64".
func StudyConfigLabel(c model.Config, preset string) string {
	label := c.Attention
	if c.ProbeGate {
		label += "+gate"
	}
	if p, err := model.PresetConfig(preset); err == nil && (p.Heads != c.Heads || p.KVHeads != c.KVHeads || p.HeadDim != c.HeadDim) {
		label += fmt.Sprintf(" Hq%d/Hkv%d/D%d", c.Heads, c.KVHeads, c.HeadDim)
	}
	return label
}

// presetOf names the preset whose width, depth and FFN c has, or
// describes c's shape when none has.
func presetOf(c model.Config) string {
	for _, name := range model.Presets() {
		p, _ := model.PresetConfig(name)
		if p.Dim == c.Dim && p.Layers == c.Layers && p.FFN == c.FFN {
			return name
		}
	}
	return fmt.Sprintf("d%d-L%d", c.Dim, c.Layers)
}

// StudyRunDirs lists the study's run folders under dir: those in
// dir/runs when it exists, else those in dir; a run folder is a
// subfolder holding a StudyRunFile, metrics.jsonl or config.json. It
// also returns the names planned in StudyPlanFile (of dir, or of
// dir/runs) that have no folder. root is the folder the names are
// relative to.
func StudyRunDirs(dir string) (root string, runs, unstarted []string, err error) {
	st, err := os.Stat(dir)
	if err != nil {
		return "", nil, nil, fmt.Errorf("study: %w", err)
	}
	if !st.IsDir() {
		return "", nil, nil, fmt.Errorf("study: %s is not a folder", dir)
	}
	root = dir
	if st, err := os.Stat(filepath.Join(dir, "runs")); err == nil && st.IsDir() {
		root = filepath.Join(dir, "runs")
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		return "", nil, nil, fmt.Errorf("study: %w", err)
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		for _, f := range []string{StudyRunFile, MetricsFile, model.ConfigFile} {
			if _, err := os.Stat(filepath.Join(root, e.Name(), f)); err == nil {
				runs = append(runs, e.Name())
				break
			}
		}
	}
	var plan []string
	for _, p := range []string{filepath.Join(dir, StudyPlanFile), filepath.Join(root, StudyPlanFile)} {
		if plan, err = readPlan(p); err != nil {
			return "", nil, nil, err
		}
		if plan != nil {
			break
		}
	}
	for _, name := range plan {
		if !slices.Contains(runs, name) && !slices.Contains(unstarted, name) {
			unstarted = append(unstarted, name)
		}
	}
	if len(runs) == 0 && len(unstarted) == 0 {
		return "", nil, nil, fmt.Errorf("study: %s holds no run folders (subfolders with %s, %s or %s)", root, StudyRunFile, MetricsFile, model.ConfigFile)
	}
	slices.Sort(runs)
	return root, runs, unstarted, nil
}

// readPlan reads a StudyPlanFile: nil without error when there is none.
func readPlan(path string) ([]string, error) {
	fh, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("study: %w", err)
	}
	defer fh.Close()
	plan := []string{}
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" && !strings.HasPrefix(line, "#") {
			plan = append(plan, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("study: %s: %w", path, err)
	}
	return plan, nil
}

// LoadStudyRun reads one run folder. A run that cannot be read is
// returned as missing with the reason, not as an error: the report lists
// it. The target steps are StudyRunFile's; CompleteStudy fills them in
// for runs without one.
func LoadStudyRun(root, name string) StudyRun {
	dir := filepath.Join(root, name)
	r := StudyRun{Name: name, Status: StudyMissing, Seed: -1, dir: dir}
	var info StudyRunInfo
	if b, err := os.ReadFile(filepath.Join(dir, StudyRunFile)); err == nil {
		if err := json.Unmarshal(b, &info); err != nil {
			r.Problem = fmt.Sprintf("%s: %v", StudyRunFile, err)
			return r
		}
	}
	r.Optimizer, r.Preset, r.LR, r.TargetSteps = info.Optimizer, info.Preset, info.LR, info.Steps
	if info.Seed != nil {
		r.Seed = *info.Seed
	} else if m := seedSuffix.FindStringSubmatch(name); m != nil {
		r.Seed, _ = strconv.Atoi(m[1])
	}
	mc, err := model.ReadConfig(filepath.Join(dir, model.ConfigFile))
	if err != nil {
		r.Problem = "no config.json: the run never saved (not started, or killed before its first checkpoint)"
		return r
	}
	if r.Preset == "" {
		r.Preset = presetOf(mc)
	}
	r.Attention, r.ProbeGate = mc.Attention, mc.ProbeGate
	r.Heads, r.KVHeads, r.HeadDim, r.Layers, r.Params = mc.Heads, mc.KVHeads, mc.HeadDim, mc.Layers, mc.NumParams()
	r.Config = StudyConfigLabel(mc, r.Preset)
	recs, err := ReadMetrics(filepath.Join(dir, MetricsFile))
	if err != nil {
		r.Problem = fmt.Sprintf("no readable %s: %v", MetricsFile, err)
		return r
	}
	r.records = recs
	muon, maxLR := false, 0.0
	for _, rec := range recs {
		r.Steps = max(r.Steps, rec.Step)
		if rec.Eval {
			if rec.ValLoss != nil {
				r.FinalLoss, r.FinalAt = f(*rec.ValLoss), rec.Step
				if r.BestLoss == nil || *rec.ValLoss < *r.BestLoss {
					r.BestLoss, r.BestAt = f(*rec.ValLoss), rec.Step
				}
			}
			continue
		}
		if rec.Tokens > r.Tokens {
			r.Tokens = rec.Tokens
		}
		if rec.LRAdamW != nil {
			muon = true
		}
		if rec.LR != nil {
			maxLR = math.Max(maxLR, *rec.LR)
		}
		if len(rec.COR) > 0 {
			r.COR = rec.COR
		}
		if len(rec.Gate) > 0 {
			r.Gate = rec.Gate
		}
	}
	if r.Optimizer == "" {
		r.Optimizer = OptAdamW
		if muon {
			r.Optimizer = OptMuon
		}
	}
	if r.LR == 0 {
		r.LR = maxLR
	}
	if r.FinalLoss == nil {
		r.Problem = "no held-out evaluation in its metrics (train with --eval-every)"
		return r
	}
	r.Status = StudyFinished
	if mc.Parallax() {
		ranks, err := RunRanks(dir, mc)
		if err != nil {
			r.Problem = fmt.Sprintf("no stable ranks: %v", err)
		}
		r.Ranks = ranks
	}
	return r
}

// RunRanks is CheckpointRanks of the run in dir. With a model.safetensors
// it computes them and rewrites StudyRanksFile (a failure to write is
// not an error: the ranks are still returned); without one it reads
// StudyRanksFile.
func RunRanks(dir string, c model.Config) ([]StudyLayerRanks, error) {
	if _, err := os.Stat(filepath.Join(dir, model.WeightsFile)); err != nil {
		b, rerr := os.ReadFile(filepath.Join(dir, StudyRanksFile))
		if rerr != nil {
			return nil, fmt.Errorf("final checkpoint: %w (and no %s)", err, StudyRanksFile)
		}
		var ranks []StudyLayerRanks
		if err := json.Unmarshal(b, &ranks); err != nil {
			return nil, fmt.Errorf("%s: %w", StudyRanksFile, err)
		}
		if len(ranks) != c.Layers {
			return nil, fmt.Errorf("%s: %d layers, the config has %d", StudyRanksFile, len(ranks), c.Layers)
		}
		return ranks, nil
	}
	ranks, err := CheckpointRanks(dir, c)
	if err != nil {
		return nil, err
	}
	if b, err := json.Marshal(ranks); err == nil {
		_ = atomicfile.WriteFile(filepath.Join(dir, StudyRanksFile), append(b, '\n'))
	}
	return ranks, nil
}

// CompleteStudy marks each run that stopped short of its target as
// partial. A run without a StudyRunFile target takes the largest step
// count of the runs of its preset as its target (the study trains equal
// tokens).
func CompleteStudy(runs []StudyRun) {
	most := map[string]int{}
	for _, r := range runs {
		if r.Status != StudyMissing {
			most[r.Preset] = max(most[r.Preset], r.Steps)
		}
	}
	for i := range runs {
		r := &runs[i]
		if r.Status == StudyMissing {
			continue
		}
		target := r.TargetSteps
		if target == 0 {
			target = most[r.Preset]
		}
		if r.Steps < target {
			r.Status = StudyPartial
			r.Problem = strings.TrimPrefix(fmt.Sprintf("%s; stopped at step %d of %d", r.Problem, r.Steps, target), "; ")
		} else if r.FinalAt < r.Steps {
			r.Status = StudyPartial
			r.Problem = strings.TrimPrefix(fmt.Sprintf("%s; its last held-out evaluation is at step %d of %d", r.Problem, r.FinalAt, r.Steps), "; ")
		}
	}
}

// CheckpointRanks computes the stable ranks of every layer's W_R and of
// W_R^T W_K from the model.safetensors in dir (a Parallax model of shape
// c), in float64 on the CPU (power iteration, StableRank and
// CircuitStableRank).
func CheckpointRanks(dir string, c model.Config) ([]StudyLayerRanks, error) {
	if !c.Parallax() {
		return nil, nil
	}
	path := filepath.Join(dir, model.WeightsFile)
	sf, err := safetensors.Open(path)
	if err != nil {
		return nil, fmt.Errorf("final checkpoint: %w", err)
	}
	defer sf.Close()
	read := func(name string, rows int) ([]float32, error) {
		info, ok := sf.Info(name)
		if !ok {
			return nil, fmt.Errorf("%s: no tensor %s", path, name)
		}
		if len(info.Shape) != 2 || info.Shape[0] != rows || info.Shape[1] != c.Dim {
			return nil, fmt.Errorf("%s: %s has shape %v, want [%d %d]", path, name, info.Shape, rows, c.Dim)
		}
		w, err := sf.Float32(name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return w, nil
	}
	rs, ks := make([][]float32, c.Layers), make([][]float32, c.Layers)
	for l := range rs {
		pre := fmt.Sprintf("model.layers.%d.self_attn.", l)
		if rs[l], err = read(pre+"r_proj.weight", c.QDim()); err != nil {
			return nil, err
		}
		if ks[l], err = read(pre+"k_proj.weight", c.KVDim()); err != nil {
			return nil, err
		}
	}
	out := make([]StudyLayerRanks, c.Layers)
	parallelLayers(c.Layers, func(l int) {
		out[l] = LayerCircuitRanks(rs[l], ks[l], c.Heads, c.KVHeads, c.HeadDim, c.Dim)
	})
	for l := range out {
		if !finite(out[l].R) || !finite(out[l].RK) || !finite(out[l].RKHead) {
			return nil, fmt.Errorf("%s: layer %d: W_R or W_K is not finite", path, l)
		}
	}
	return out, nil
}

// LayerCircuitRanks is StudyLayerRanks of one layer's W_R ([hq*hd, d],
// row-major) and W_K ([hkv*hd, d]).
func LayerCircuitRanks(r, k []float32, hq, hkv, hd, d int) StudyLayerRanks {
	g := hq / hkv
	blk := hd * d
	kx := make([]float32, 0, hq*blk) // W_K's head blocks repeated for the query heads
	var head float64
	for h := range hq {
		kh := k[(h/g)*blk : (h/g+1)*blk]
		kx = append(kx, kh...)
		head += CircuitStableRank(r[h*blk:(h+1)*blk], kh, hd, d)
	}
	return StudyLayerRanks{
		R:      StableRank(r, hq*hd, d),
		RK:     CircuitStableRank(r, kx, hq*hd, d),
		RKHead: head / float64(hq),
	}
}

// StudyGroup is the runs of one cell that count (finished ones) and
// their summary.
type StudyGroup struct {
	Key    StudyKey `json:"key"`
	Runs   []string `json:"runs"`
	Seeds  []int    `json:"seeds"`
	Params int64    `json:"params"`
	Tokens int64    `json:"tokens"`
	// Mean and Std are the final held-out loss over the runs (sample
	// standard deviation, n - 1; 0 for one run).
	Mean float64 `json:"final_val_loss_mean"`
	Std  float64 `json:"final_val_loss_std"`
	Min  float64 `json:"final_val_loss_min"`
	Max  float64 `json:"final_val_loss_max"`
	// BestMean and BestStd are the same of each run's lowest held-out
	// loss (StudyRun.BestLoss).
	BestMean float64 `json:"best_val_loss_mean"`
	BestStd  float64 `json:"best_val_loss_std"`
	// Per layer, means over the runs (absent when not measured).
	COR    Floats `json:"cor,omitempty"`
	Gate   Floats `json:"gate,omitempty"`
	SRankR Floats `json:"srank_r,omitempty"`
	// SRankRK is the layer's W_R^T W_K; SRankRKHead the per-head mean.
	SRankRK     Floats `json:"srank_rk,omitempty"`
	SRankRKHead Floats `json:"srank_rk_head_mean,omitempty"`

	runs []StudyRun
}

// StudyGroups gathers the finished runs by cell, in the order presets,
// optimizers (Muon first), configurations (softmax first), rates.
func StudyGroups(runs []StudyRun) []StudyGroup {
	idx := map[StudyKey]int{}
	var groups []StudyGroup
	for _, r := range runs {
		if r.Status != StudyFinished {
			continue
		}
		i, ok := idx[r.Key()]
		if !ok {
			i = len(groups)
			idx[r.Key()] = i
			groups = append(groups, StudyGroup{Key: r.Key(), Params: r.Params, Tokens: r.Tokens})
		}
		g := &groups[i]
		g.runs = append(g.runs, r)
		g.Runs, g.Seeds = append(g.Runs, r.Name), append(g.Seeds, r.Seed)
		g.Tokens = min(g.Tokens, r.Tokens)
	}
	for i := range groups {
		g := &groups[i]
		var loss, best []float64
		var cor, gate, sr, rk, rkh [][]float64
		for _, r := range g.runs {
			loss, best = append(loss, *r.FinalLoss), append(best, *r.BestLoss)
			cor, gate = append(cor, r.COR), append(gate, r.Gate)
			var a, b, c []float64
			for _, lr := range r.Ranks {
				a, b, c = append(a, lr.R), append(b, lr.RK), append(c, lr.RKHead)
			}
			sr, rk, rkh = append(sr, a), append(rk, b), append(rkh, c)
		}
		g.Mean, g.Std = MeanStd(loss)
		g.BestMean, g.BestStd = MeanStd(best)
		g.Min, g.Max = slices.Min(loss), slices.Max(loss)
		g.COR, g.Gate, g.SRankR, g.SRankRK, g.SRankRKHead = layerMeans(cor), layerMeans(gate), layerMeans(sr), layerMeans(rk), layerMeans(rkh)
	}
	slices.SortStableFunc(groups, func(a, b StudyGroup) int { return compareKeys(a.Key, b.Key) })
	return groups
}

func compareKeys(a, b StudyKey) int {
	rank := func(s string, order ...string) int {
		if i := slices.Index(order, s); i >= 0 {
			return i
		}
		return len(order)
	}
	if c := strings.Compare(a.Preset, b.Preset); c != 0 {
		return c
	}
	if c := rank(a.Optimizer, OptMuon, OptAdamW) - rank(b.Optimizer, OptMuon, OptAdamW); c != 0 {
		return c
	}
	order := []string{model.AttentionSoftmax, model.AttentionParallax, model.AttentionParallax + "+gate"}
	if c := rank(a.Config, order...) - rank(b.Config, order...); c != 0 {
		return c
	}
	if c := strings.Compare(a.Config, b.Config); c != 0 {
		return c
	}
	la, _ := strconv.ParseFloat(a.LR, 64)
	lb, _ := strconv.ParseFloat(b.LR, 64)
	switch {
	case la < lb:
		return -1
	case la > lb:
		return 1
	}
	return 0
}

// layerMeans is the mean at each layer over the runs that have the
// layer (nil when none has any).
func layerMeans(vals [][]float64) Floats {
	var out Floats
	for l := 0; ; l++ {
		var v []float64
		for _, x := range vals {
			if l < len(x) && finite(x[l]) {
				v = append(v, x[l])
			}
		}
		if len(v) == 0 {
			if slices.ContainsFunc(vals, func(x []float64) bool { return l < len(x) }) {
				out = append(out, math.NaN())
				continue
			}
			return out
		}
		m, _ := MeanStd(v)
		out = append(out, m)
	}
}

// StudyComparison is the difference of the final (or the best) held-out
// loss of two cells that differ only in their configuration.
type StudyComparison struct {
	// Metric is StudyFinalLoss or StudyBestLoss.
	Metric    string `json:"metric"`
	Preset    string `json:"preset"`
	Optimizer string `json:"optimizer"`
	LR        string `json:"lr"`
	A         string `json:"a"` // the configuration compared
	B         string `json:"b"` // the reference it is compared with
	NA        int    `json:"n_a"`
	NB        int    `json:"n_b"`
	// Diff is mean(A) - mean(B) (below 0: A better); SE the pooled
	// standard error sqrt(s_A^2/n_A + s_B^2/n_B) (absent with fewer
	// than two seeds in a cell); T is Diff / SE.
	Diff float64  `json:"diff"`
	SE   *float64 `json:"se,omitempty"`
	T    *float64 `json:"t,omitempty"`
	// Beyond is whether |Diff| > 2 SE: the difference exceeds seed noise.
	Beyond  bool   `json:"exceeds_seed_noise"`
	Verdict string `json:"verdict"`
}

// The held-out losses a StudyComparison compares.
const (
	StudyFinalLoss = "final" // at the last step
	StudyBestLoss  = "best"  // the lowest along the run
)

// StudyNoiseFactor is the threshold of StudyComparison.Beyond, in
// pooled standard errors.
const StudyNoiseFactor = 2

// CompareStudy compares, for each preset, optimizer and rate, every
// configuration with softmax, and Parallax with every control (a
// configuration with another head shape): first on the final held-out
// loss, then on the best.
func CompareStudy(groups []StudyGroup) []StudyComparison {
	var out []StudyComparison
	for _, metric := range []string{StudyFinalLoss, StudyBestLoss} {
		out = append(out, compareStudy(groups, metric)...)
	}
	return out
}

func compareStudy(groups []StudyGroup, metric string) []StudyComparison {
	var out []StudyComparison
	find := func(k StudyKey) *StudyGroup {
		for i := range groups {
			if groups[i].Key == k {
				return &groups[i]
			}
		}
		return nil
	}
	for _, a := range groups {
		k := a.Key
		if k.Config == model.AttentionSoftmax {
			continue
		}
		k.Config = model.AttentionSoftmax
		if b := find(k); b != nil {
			out = append(out, compareGroups(a, *b, metric))
		}
		if strings.Contains(a.Key.Config, " ") { // a control: Parallax against it
			k.Config = model.AttentionParallax
			if p := find(k); p != nil {
				out = append(out, compareGroups(*p, a, metric))
			}
		}
	}
	return out
}

func compareGroups(a, b StudyGroup, metric string) StudyComparison {
	ma, sa, mb, sb := a.Mean, a.Std, b.Mean, b.Std
	if metric == StudyBestLoss {
		ma, sa, mb, sb = a.BestMean, a.BestStd, b.BestMean, b.BestStd
	}
	c := StudyComparison{Metric: metric, Preset: a.Key.Preset, Optimizer: a.Key.Optimizer, LR: a.Key.LR, A: a.Key.Config, B: b.Key.Config,
		NA: len(a.runs), NB: len(b.runs), Diff: ma - mb}
	if c.NA < 2 || c.NB < 2 {
		c.Verdict = "cannot tell: needs at least 2 seeds in each"
		return c
	}
	se := math.Sqrt(sa*sa/float64(c.NA) + sb*sb/float64(c.NB))
	c.SE = &se
	c.Beyond = math.Abs(c.Diff) > StudyNoiseFactor*se
	if se > 0 {
		t := c.Diff / se
		c.T = &t
	}
	better := a.Key.Config
	if c.Diff > 0 {
		better = b.Key.Config
	}
	if c.Beyond {
		c.Verdict = fmt.Sprintf("exceeds seed noise (more than %d SE): %s lower", StudyNoiseFactor, better)
	} else {
		c.Verdict = fmt.Sprintf("within seed noise (at most %d SE)", StudyNoiseFactor)
	}
	return c
}

// StudySweep is the learning-rate sweep of one preset and optimizer: the
// final held-out loss of each configuration at each rate, and the rate
// with the lowest mean over the configurations that ran at every rate.
type StudySweep struct {
	Preset    string                        `json:"preset"`
	Optimizer string                        `json:"optimizer"`
	Loss      map[string]map[string]float64 `json:"loss"` // configuration -> rate -> final held-out loss (mean over seeds)
	Rates     []string                      `json:"rates"`
	Best      string                        `json:"best_lr"`
}

// SweepStudy finds the learning-rate sweeps among the cells: a preset and
// optimizer whose configurations ran at more than one rate.
func SweepStudy(groups []StudyGroup) []StudySweep {
	type po struct{ p, o string }
	var order []po
	sweeps := map[po]*StudySweep{}
	for _, g := range groups {
		k := po{g.Key.Preset, g.Key.Optimizer}
		s := sweeps[k]
		if s == nil {
			s = &StudySweep{Preset: k.p, Optimizer: k.o, Loss: map[string]map[string]float64{}}
			sweeps[k] = s
			order = append(order, k)
		}
		if s.Loss[g.Key.Config] == nil {
			s.Loss[g.Key.Config] = map[string]float64{}
		}
		s.Loss[g.Key.Config][g.Key.LR] = g.Mean
		if !slices.Contains(s.Rates, g.Key.LR) {
			s.Rates = append(s.Rates, g.Key.LR)
		}
	}
	var out []StudySweep
	for _, k := range order {
		s := sweeps[k]
		if len(s.Rates) < 2 {
			continue
		}
		best := math.Inf(1)
		for _, lr := range s.Rates {
			sum, n := 0.0, 0
			for _, byLR := range s.Loss {
				v, ok := byLR[lr]
				if !ok {
					n = -1
					break
				}
				sum, n = sum+v, n+1
			}
			if n > 0 && sum/float64(n) < best {
				best, s.Best = sum/float64(n), lr
			}
		}
		out = append(out, *s)
	}
	return out
}

// Floats is a list of values whose JSON form writes null for a NaN or
// infinite one (a value not measured).
type Floats []float64

// MarshalJSON writes the list, null for each non-finite value.
func (v Floats) MarshalJSON() ([]byte, error) {
	b := []byte{'['}
	for i, x := range v {
		if i > 0 {
			b = append(b, ',')
		}
		if finite(x) {
			b = strconv.AppendFloat(b, x, 'g', -1, 64)
		} else {
			b = append(b, "null"...)
		}
	}
	return append(b, ']'), nil
}
