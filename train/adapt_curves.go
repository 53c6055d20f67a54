package train

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/parallax-engine/parallax/model"
	"github.com/parallax-engine/parallax/train/plot"
)

// The adaptation study (docs/RESULTS.md, scripts/device-adapt.sh): one
// pretrained softmax model continued for equal tokens as (a) softmax and
// (b) converted to Parallax, each under Muon and under AdamW, several seeds
// per arm. The functions below read the runs' folders and draw and tabulate
// them: held-out loss against tokens per arm (mean over seeds with the
// range), the paired difference (b) - (a), the COR per layer and the
// stable rank of W_R over training.

// AdaptRun is one run of the study as its folder records it.
type AdaptRun struct {
	Name      string // the folder's base name
	Attention string // model.AttentionSoftmax or model.AttentionParallax, from config.json
	// Optimizer is OptMuon when the step records carry the AdamW group's
	// rate beside the main one (lr_adamw, written only under Muon), else
	// OptAdamW.
	Optimizer string
	Seed      int // from a "-sN" suffix of the folder's name; -1 without one
	Records   []Record
}

// Arm names the run's arm: its attention and optimizer.
func (r AdaptRun) Arm() AdaptArm { return AdaptArm{r.Attention, r.Optimizer} }

// AdaptArm is one cell of the study's design.
type AdaptArm struct{ Attention, Optimizer string }

// String is the arm as the charts and tables name it: "(a) softmax, Muon".
func (a AdaptArm) String() string {
	letter, att := "(a)", "softmax"
	if a.Attention == model.AttentionParallax {
		letter, att = "(b)", "Parallax"
	}
	return fmt.Sprintf("%s %s, %s", letter, att, optimizerLabel(a.Optimizer))
}

func optimizerLabel(name string) string {
	if name == OptMuon {
		return "Muon"
	}
	return "AdamW"
}

// adaptArms is the design in the order the charts and tables show it.
var adaptArms = []AdaptArm{
	{model.AttentionSoftmax, OptMuon}, {model.AttentionParallax, OptMuon},
	{model.AttentionSoftmax, OptAdamW}, {model.AttentionParallax, OptAdamW},
}

var seedSuffix = regexp.MustCompile(`-s([0-9]+)$`)

// LoadAdaptRun reads a run folder: its metrics.jsonl and config.json.
func LoadAdaptRun(dir string) (AdaptRun, error) {
	recs, err := ReadMetrics(filepath.Join(dir, MetricsFile))
	if err != nil {
		return AdaptRun{}, fmt.Errorf("run %s: %w", dir, err)
	}
	mc, err := model.ReadConfig(filepath.Join(dir, model.ConfigFile))
	if err != nil {
		return AdaptRun{}, fmt.Errorf("run %s: %w", dir, err)
	}
	r := AdaptRun{Name: filepath.Base(filepath.Clean(dir)), Attention: model.AttentionSoftmax,
		Optimizer: OptAdamW, Seed: -1, Records: recs}
	if mc.Parallax() {
		r.Attention = model.AttentionParallax
	}
	for _, rec := range recs {
		if !rec.Eval && rec.LRAdamW != nil {
			r.Optimizer = OptMuon
			break
		}
	}
	if m := seedSuffix.FindStringSubmatch(r.Name); m != nil {
		r.Seed, _ = strconv.Atoi(m[1])
	}
	return r, nil
}

// FindAdaptRuns lists the run folders under each path: the path itself when
// it holds metrics.jsonl, else its subfolders that do, sorted by name.
func FindAdaptRuns(paths []string) ([]string, error) {
	var dirs []string
	for _, p := range paths {
		if _, err := os.Stat(filepath.Join(p, MetricsFile)); err == nil {
			dirs = append(dirs, p)
			continue
		}
		ents, err := os.ReadDir(p)
		if err != nil {
			return nil, fmt.Errorf("runs: %w", err)
		}
		var found []string
		for _, e := range ents {
			if _, err := os.Stat(filepath.Join(p, e.Name(), MetricsFile)); e.IsDir() && err == nil {
				found = append(found, filepath.Join(p, e.Name()))
			}
		}
		if len(found) == 0 {
			return nil, fmt.Errorf("runs: %s holds no %s, and no folder in it does", p, MetricsFile)
		}
		slices.Sort(found)
		dirs = append(dirs, found...)
	}
	return dirs, nil
}

// tokensPerStep is the run's training tokens per optimizer step, from its
// step records (0 if it has none with a token count).
func (r AdaptRun) tokensPerStep() float64 {
	for _, rec := range r.Records {
		if !rec.Eval && rec.Step > 0 && rec.Tokens > 0 {
			return float64(rec.Tokens) / float64(rec.Step)
		}
	}
	return 0
}

// curve is one run's measurement against training tokens.
type curve struct{ x, y []float64 }

// valCurve is the held-out loss at each evaluation.
func (r AdaptRun) valCurve() curve {
	tps := r.tokensPerStep()
	var c curve
	for _, rec := range r.Records {
		if rec.Eval && rec.ValLoss != nil {
			c.x, c.y = append(c.x, float64(rec.Step)*tps), append(c.y, *rec.ValLoss)
		}
	}
	return c
}

// layerCurves is one curve per layer of a per-layer measurement: pick
// returns the record's values (nil to skip the record).
func (r AdaptRun) layerCurves(pick func(Record) []float64) []curve {
	tps := r.tokensPerStep()
	var out []curve
	for _, rec := range r.Records {
		vals := pick(rec)
		for l, v := range vals {
			for len(out) <= l {
				out = append(out, curve{})
			}
			out[l].x, out[l].y = append(out[l].x, float64(rec.Step)*tps), append(out[l].y, v)
		}
	}
	return out
}

func pickCOR(rec Record) []float64 {
	if rec.Eval {
		return nil
	}
	return rec.COR
}

func pickSRankR(rec Record) []float64 {
	if !rec.Eval {
		return nil
	}
	return rec.SRankR
}

// band is a measurement over seeds at each x: the mean, minimum and
// maximum of the runs that have a point there, and how many do.
type band struct {
	x, mean, lo, hi []float64
	n               []int
}

// aggregate combines curves point by point over equal x (the seeds of an
// arm evaluate at the same steps).
func aggregate(cs []curve) band {
	vals := map[float64][]float64{}
	for _, c := range cs {
		for i, x := range c.x {
			if !math.IsNaN(c.y[i]) && !math.IsInf(c.y[i], 0) {
				vals[x] = append(vals[x], c.y[i])
			}
		}
	}
	xs := make([]float64, 0, len(vals))
	for x := range vals {
		xs = append(xs, x)
	}
	slices.Sort(xs)
	var b band
	for _, x := range xs {
		v := vals[x]
		m, _ := MeanStd(v)
		b.x, b.mean, b.n = append(b.x, x), append(b.mean, m), append(b.n, len(v))
		b.lo, b.hi = append(b.lo, slices.Min(v)), append(b.hi, slices.Max(v))
	}
	return b
}

// MeanStd is the mean and the sample standard deviation (n - 1; 0 for a
// single value) of v, NaN for both when v is empty.
func MeanStd(v []float64) (mean, std float64) {
	if len(v) == 0 {
		return math.NaN(), math.NaN()
	}
	for _, x := range v {
		mean += x
	}
	mean /= float64(len(v))
	if len(v) == 1 {
		return mean, 0
	}
	for _, x := range v {
		std += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(std / float64(len(v)-1))
}

// bandSeries draws a band as one series: the mean as a line, with a
// vertical bar from the minimum to the maximum at every point. The bar is
// traced at the point's x (mean, down to the minimum, up to the maximum,
// back to the mean) before the line goes on to the next point, so one
// series, and one legend entry, carries both.
func bandSeries(name string, b band, col color.RGBA) plot.Series {
	s := plot.Series{Name: name, Color: col}
	for i, x := range b.x {
		s.X = append(s.X, x, x, x, x)
		s.Y = append(s.Y, b.mean[i], b.lo[i], b.hi[i], b.mean[i])
	}
	return s
}

// byArm groups runs by arm.
func byArm(runs []AdaptRun) map[AdaptArm][]AdaptRun {
	m := map[AdaptArm][]AdaptRun{}
	for _, r := range runs {
		m[r.Arm()] = append(m[r.Arm()], r)
	}
	return m
}

// withBase starts a continued run's held-out curve at the pretrained
// base's final held-out loss (step 0 of every arm computes the base model:
// exactly so for (b), whose W_R is 0).
func withBase(c curve, base *AdaptRun) curve {
	if base == nil {
		return c
	}
	bc := base.valCurve()
	if len(bc.y) == 0 || (len(c.x) > 0 && c.x[0] == 0) {
		return c
	}
	return curve{append([]float64{0}, c.x...), append([]float64{bc.y[len(bc.y)-1]}, c.y...)}
}

// pairedDiff is (b) - (a) of one optimizer at each evaluation: per seed when
// every seed of one arm is in the other (the two runs of a seed see the same
// batches), else the (b) mean against the (a) mean at each x.
func pairedDiff(a, b []AdaptRun, base *AdaptRun) (band, bool) {
	seeds := func(rs []AdaptRun) []int {
		var s []int
		for _, r := range rs {
			s = append(s, r.Seed)
		}
		slices.Sort(s)
		return s
	}
	sa, sb := seeds(a), seeds(b)
	if len(a) > 0 && slices.Equal(sa, sb) && !slices.Contains(sa, -1) && len(slices.Compact(slices.Clone(sa))) == len(sa) {
		var diffs []curve
		for _, rb := range b {
			ra := a[slices.IndexFunc(a, func(r AdaptRun) bool { return r.Seed == rb.Seed })]
			ca, cb := withBase(ra.valCurve(), base), withBase(rb.valCurve(), base)
			ya := map[float64]float64{}
			for i, x := range ca.x {
				ya[x] = ca.y[i]
			}
			var d curve
			for i, x := range cb.x {
				if v, ok := ya[x]; ok {
					d.x, d.y = append(d.x, x), append(d.y, cb.y[i]-v)
				}
			}
			diffs = append(diffs, d)
		}
		return aggregate(diffs), true
	}
	curves := func(rs []AdaptRun) []curve {
		var cs []curve
		for _, r := range rs {
			cs = append(cs, withBase(r.valCurve(), base))
		}
		return cs
	}
	ba, bb := aggregate(curves(a)), aggregate(curves(b))
	ma := map[float64]float64{}
	for i, x := range ba.x {
		ma[x] = ba.mean[i]
	}
	var d band
	for i, x := range bb.x {
		if v, ok := ma[x]; ok {
			dv := bb.mean[i] - v
			d.x, d.mean, d.lo, d.hi, d.n = append(d.x, x), append(d.mean, dv), append(d.lo, dv), append(d.hi, dv), append(d.n, 1)
		}
	}
	return d, false
}

// AdaptLossCharts draws the held-out loss of every arm against the tokens
// of continued training (mean over seeds, bars from the minimum to the
// maximum), and the difference (b) - (a) under each optimizer. base, if
// not nil, is the pretrained run: its final held-out loss is every arm's
// point at 0 tokens.
func AdaptLossCharts(runs []AdaptRun, base *AdaptRun) []plot.Chart {
	arms := byArm(runs)
	loss := plot.Chart{Title: "Held-out loss (mean over seeds; bars: min to max)",
		XLabel: "tokens of continued training", YLabel: "held-out loss (nats/token)"}
	for i, a := range adaptArms {
		var cs []curve
		for _, r := range arms[a] {
			cs = append(cs, withBase(r.valCurve(), base))
		}
		if len(cs) > 0 {
			loss.Series = append(loss.Series, bandSeries(fmt.Sprintf("%s (%d)", a, len(cs)), aggregate(cs), plot.Palette[i]))
		}
	}
	diff := plot.Chart{Title: "(b) Parallax - (a) softmax, held-out loss (below 0: Parallax better)",
		XLabel: "tokens of continued training", YLabel: "difference (nats/token)"}
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, opt := range []string{OptMuon, OptAdamW} {
		a, b := arms[AdaptArm{model.AttentionSoftmax, opt}], arms[AdaptArm{model.AttentionParallax, opt}]
		if len(a) == 0 || len(b) == 0 {
			continue
		}
		d, paired := pairedDiff(a, b, base)
		name := optimizerLabel(opt) + ", paired by seed"
		if !paired {
			name = optimizerLabel(opt) + ", difference of the means"
		}
		diff.Series = append(diff.Series, bandSeries(name, d, plot.Palette[2*i+1]))
		if len(d.x) > 0 {
			lo, hi = math.Min(lo, d.x[0]), math.Max(hi, d.x[len(d.x)-1])
		}
	}
	charts := []plot.Chart{loss}
	if len(diff.Series) > 0 {
		diff.Series = append(diff.Series, plot.Series{Name: "0", X: []float64{lo, hi}, Y: []float64{0, 0},
			Color: plot.Palette[7]})
		charts = append(charts, diff)
	}
	return charts
}

// adaptLayerCharts draws a per-layer measurement of the Parallax arms, one
// chart per optimizer, each layer's mean over seeds.
func adaptLayerCharts(runs []AdaptRun, title, ylabel string, pick func(Record) []float64) []plot.Chart {
	arms := byArm(runs)
	var charts []plot.Chart
	for _, opt := range []string{OptMuon, OptAdamW} {
		rs := arms[AdaptArm{model.AttentionParallax, opt}]
		var perLayer [][]curve
		for _, r := range rs {
			for l, c := range r.layerCurves(pick) {
				for len(perLayer) <= l {
					perLayer = append(perLayer, nil)
				}
				perLayer[l] = append(perLayer[l], c)
			}
		}
		if len(perLayer) == 0 {
			continue
		}
		ch := plot.Chart{Title: fmt.Sprintf("%s, %s (mean over %d seeds)", title, AdaptArm{model.AttentionParallax, opt}, len(rs)),
			XLabel: "tokens of continued training", YLabel: ylabel}
		for l, cs := range perLayer {
			b := aggregate(cs)
			ch.Series = append(ch.Series, plot.Series{Name: fmt.Sprintf("layer %d", l), X: b.x, Y: b.mean})
		}
		charts = append(charts, ch)
	}
	return charts
}

// AdaptCORCharts draws the correction-to-output ratio of each layer over
// training for the Parallax arms, one chart per optimizer.
func AdaptCORCharts(runs []AdaptRun) []plot.Chart {
	return adaptLayerCharts(runs, "COR per layer", "COR = |o_SA - o| / |o_SA|", pickCOR)
}

// AdaptSRankCharts draws the stable rank of each layer's W_R over training
// for the Parallax arms, one chart per optimizer.
func AdaptSRankCharts(runs []AdaptRun) []plot.Chart {
	return adaptLayerCharts(runs, "Stable rank of W_R", "stable rank |W|_F^2 / |W|_2^2", pickSRankR)
}

// runFinal is a run's last and best held-out loss and its last COR and
// W_R stable rank, each averaged over layers (NaN where not measured).
type runFinal struct {
	steps, tokens       float64
	final, best, bestAt float64
	cor, srank          float64
}

func (r AdaptRun) final() runFinal {
	f := runFinal{final: math.NaN(), best: math.NaN(), bestAt: math.NaN(), cor: math.NaN(), srank: math.NaN()}
	tps := r.tokensPerStep()
	for _, rec := range r.Records {
		f.steps = math.Max(f.steps, float64(rec.Step))
		switch {
		case rec.Eval && rec.ValLoss != nil:
			f.final = *rec.ValLoss
			if math.IsNaN(f.best) || *rec.ValLoss < f.best {
				f.best, f.bestAt = *rec.ValLoss, float64(rec.Step)*tps
			}
			if len(rec.SRankR) > 0 {
				f.srank, _ = MeanStd(rec.SRankR)
			}
		case !rec.Eval && len(rec.COR) > 0:
			f.cor, _ = MeanStd(rec.COR)
		}
	}
	f.tokens = f.steps * tps
	return f
}

// AdaptTable is the study's summary in Markdown, of runs that pass
// CheckAdaptRun: per arm the final and the best held-out loss (mean ±
// sample standard deviation over seeds), the final COR and W_R stable rank
// (means over layers and seeds); the difference (b) - (a) under each
// optimizer (paired by seed when the seeds match: mean ± standard
// deviation of the per-seed differences; otherwise the difference of the
// means ± the square root of the sum of the two variances); and one row
// per run. A note heads it when the runs' last evaluations differ (a run
// cut short).
func AdaptTable(runs []AdaptRun, base *AdaptRun) string {
	var b strings.Builder
	fmtPM := func(v []float64) string {
		m, s := MeanStd(v)
		if math.IsNaN(m) {
			return "n/a"
		}
		return fmt.Sprintf("%.4f ± %.4f", m, s)
	}
	fmtMean := func(v []float64, prec int) string {
		var ok []float64
		for _, x := range v {
			if !math.IsNaN(x) {
				ok = append(ok, x)
			}
		}
		if len(ok) == 0 {
			return ""
		}
		m, _ := MeanStd(ok)
		return strconv.FormatFloat(m, 'f', prec, 64)
	}
	if base != nil {
		f := base.final()
		fmt.Fprintf(&b, "Pretrained base (%s): held-out loss %.4f after %s tokens (%d steps).\n\n", base.Name, f.final, HumanCount(f.tokens), int(f.steps))
	}
	lastEval := func(r AdaptRun) int {
		c := r.valCurve()
		return int(math.Round(c.x[len(c.x)-1] / r.tokensPerStep()))
	}
	lo, hi := lastEval(runs[0]), lastEval(runs[0])
	for _, r := range runs {
		lo, hi = min(lo, lastEval(r)), max(hi, lastEval(r))
	}
	if lo != hi {
		fmt.Fprintf(&b, "Note: the runs' last evaluations are at different steps (%d to %d; runs cut short?), so the final columns compare unequal tokens.\n\n", lo, hi)
	}
	arms := byArm(runs)
	b.WriteString("| arm | runs | tokens | held-out loss, final | held-out loss, best | COR, final | W_R stable rank, final |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|\n")
	finals := map[AdaptArm][]runFinal{}
	for _, a := range adaptArms {
		rs := arms[a]
		if len(rs) == 0 {
			continue
		}
		var fin, best, cor, sr, tok []float64
		for _, r := range rs {
			f := r.final()
			finals[a] = append(finals[a], f)
			fin, best, cor, sr, tok = append(fin, f.final), append(best, f.best), append(cor, f.cor), append(sr, f.srank), append(tok, f.tokens)
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s |\n", a, len(rs), HumanCount(slices.Min(tok)), fmtPM(fin), fmtPM(best),
			fmtMean(cor, 4), fmtMean(sr, 1))
	}
	b.WriteString("\n| optimizer | (b) - (a), final | (b) - (a), best | how |\n|---|---:|---:|---|\n")
	for _, opt := range []string{OptMuon, OptAdamW} {
		ra, rb := arms[AdaptArm{model.AttentionSoftmax, opt}], arms[AdaptArm{model.AttentionParallax, opt}]
		if len(ra) == 0 || len(rb) == 0 {
			continue
		}
		fa, fb := finals[AdaptArm{model.AttentionSoftmax, opt}], finals[AdaptArm{model.AttentionParallax, opt}]
		_, paired := pairedDiff(ra, rb, nil)
		how := fmt.Sprintf("paired by seed (%d %s)", len(rb), plural(len(rb), "pair", "pairs"))
		if !paired {
			how = fmt.Sprintf("difference of the means (%d and %d runs)", len(ra), len(rb))
		}
		col := func(pick func(runFinal) float64) string {
			if paired {
				var d []float64
				for i, r := range rb {
					j := slices.IndexFunc(ra, func(x AdaptRun) bool { return x.Seed == r.Seed })
					d = append(d, pick(fb[i])-pick(fa[j]))
				}
				return fmtPM(d)
			}
			var va, vb []float64
			for _, f := range fa {
				va = append(va, pick(f))
			}
			for _, f := range fb {
				vb = append(vb, pick(f))
			}
			ma, sa := MeanStd(va)
			mb, sb := MeanStd(vb)
			return fmt.Sprintf("%.4f ± %.4f", mb-ma, math.Sqrt(sa*sa+sb*sb))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", optimizerLabel(opt),
			col(func(f runFinal) float64 { return f.final }), col(func(f runFinal) float64 { return f.best }), how)
	}
	b.WriteString("\n| run | arm | steps | held-out loss, final | best (at tokens) | COR, final | W_R stable rank, final |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|\n")
	for _, r := range runs {
		f := r.final()
		fmt.Fprintf(&b, "| %s | %s | %d | %.4f | %.4f (%s) | %s | %s |\n", r.Name, r.Arm(), int(f.steps), f.final, f.best,
			HumanCount(f.bestAt), fmtMean([]float64{f.cor}, 4), fmtMean([]float64{f.srank}, 1))
	}
	return b.String()
}

// ErrNoEval marks a run without any held-out evaluation.
var ErrNoEval = errors.New("no held-out evaluation in its metrics (train with --eval-every)")

// CheckAdaptRun reports a run that cannot enter the study: one without a
// held-out evaluation or without a token count.
func CheckAdaptRun(r AdaptRun) error {
	if len(r.valCurve().y) == 0 {
		return fmt.Errorf("run %s: %w", r.Name, ErrNoEval)
	}
	if r.tokensPerStep() == 0 {
		return fmt.Errorf("run %s: no step record with a token count in its metrics", r.Name)
	}
	return nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
