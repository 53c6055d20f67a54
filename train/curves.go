package train

import (
	"fmt"
	"math"
	"path/filepath"

	"github.com/parallax-engine/parallax/train/plot"
)

// PlotMetrics draws the curves of a metrics file into a PNG: training and
// validation loss against step, the learning rate, and (for Parallax) the
// per-layer COR.
func PlotMetrics(metricsPath, pngPath, title string) error {
	recs, err := ReadMetrics(metricsPath)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	charts := Charts(recs, title)
	return plot.WritePNG(pngPath, 1000, 420*len(charts), charts...)
}

// Charts builds the chart panels for records.
func Charts(recs []Record, title string) []plot.Chart {
	var tx, ty, vx, vy, lx, ly, ax, ay []float64
	var corX []float64
	var cor [][]float64
	for _, r := range recs {
		x := float64(r.Step)
		if r.Eval {
			if r.ValLoss != nil {
				vx, vy = append(vx, x), append(vy, *r.ValLoss)
			}
			continue
		}
		if r.Loss != nil {
			tx, ty = append(tx, x), append(ty, *r.Loss)
		}
		if r.LR != nil {
			lx, ly = append(lx, x), append(ly, *r.LR)
		}
		if r.LRAdamW != nil {
			ax, ay = append(ax, x), append(ay, *r.LRAdamW)
		}
		if len(r.COR) > 0 {
			corX = append(corX, x)
			for len(cor) < len(r.COR) {
				cor = append(cor, nil)
			}
			for l, v := range r.COR {
				for len(cor[l]) < len(corX)-1 { // a layer missing earlier
					cor[l] = append(cor[l], math.NaN())
				}
				cor[l] = append(cor[l], v)
			}
		}
	}
	loss := plot.Chart{Title: title, XLabel: "step", YLabel: "loss (nats/token)",
		Series: []plot.Series{{Name: "train", X: tx, Y: ty}}}
	if len(vx) > 0 {
		loss.Series = append(loss.Series, plot.Series{Name: "validation", X: vx, Y: vy, Dots: true})
	}
	lrName := "lr"
	if len(ax) > 0 {
		lrName = "lr (Muon)"
	}
	lr := plot.Chart{Title: "Learning rate", XLabel: "step", YLabel: "learning rate",
		Series: []plot.Series{{Name: lrName, X: lx, Y: ly}}}
	if len(ax) > 0 {
		lr.Series = append(lr.Series, plot.Series{Name: "lr (AdamW)", X: ax, Y: ay})
		lr.LogY = true
	}
	charts := []plot.Chart{loss, lr}
	if len(cor) > 0 {
		c := plot.Chart{Title: "Correction-to-output ratio per layer", XLabel: "step", YLabel: "COR"}
		for l, ys := range cor {
			c.Series = append(c.Series, plot.Series{Name: fmt.Sprintf("layer %d", l), X: corX[:len(ys)], Y: ys})
		}
		charts = append(charts, c)
	}
	return charts
}

func (r *runner) plot() error {
	title := fmt.Sprintf("%s, %s, %s", filepath.Base(r.cfg.Model), r.m.Config.Attention, r.cfg.Optim.Name)
	return PlotMetrics(filepath.Join(r.cfg.Out, MetricsFile), filepath.Join(r.cfg.Out, PlotFile), title)
}
