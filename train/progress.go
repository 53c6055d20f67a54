package train

import (
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"golang.org/x/term"
)

// Progress reports training progress on a writer: on a terminal one line
// redrawn in place ("\r") at most ten times a second; otherwise plain lines,
// one every Every steps and at the last step.
type Progress struct {
	w        io.Writer
	total    int
	tty      bool
	every    int
	start    time.Time
	startAt  int // the step the run (or resumed run) started from
	lastDraw time.Time
	width    int // length of the last drawn terminal line
	now      func() time.Time
}

// NewProgress returns a progress reporter for steps startAt+1..total on w.
// every <= 0 chooses about 50 plain lines per run.
func NewProgress(w io.Writer, startAt, total, every int) *Progress {
	if every <= 0 {
		every = max(1, (total-startAt)/50)
	}
	p := &Progress{w: w, total: total, every: every, startAt: startAt, now: time.Now}
	p.tty = IsTerminal(w)
	p.start = p.now()
	return p
}

// IsTerminal reports whether w is a terminal. Being a character device is
// not enough: /dev/null is one too, and a redrawn bar would fill a log.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// Update reports that step (1-based) finished with the given loss and rate.
func (p *Progress) Update(step int, loss, lr, tokPerSec float64) {
	if p == nil || p.w == nil {
		return
	}
	now := p.now()
	last := step >= p.total
	if p.tty {
		if !last && now.Sub(p.lastDraw) < 100*time.Millisecond {
			return
		}
		p.lastDraw = now
		line := p.line(step, loss, lr, tokPerSec, now, true)
		pad := ""
		if n := p.width - len(line); n > 0 {
			pad = strings.Repeat(" ", n)
		}
		p.width = len(line)
		fmt.Fprintf(p.w, "\r%s%s", line, pad)
		if last {
			fmt.Fprintln(p.w)
			p.width = 0
		}
		return
	}
	if step%p.every == 0 || last {
		fmt.Fprintln(p.w, p.line(step, loss, lr, tokPerSec, now, false))
	}
}

// Println prints a message on its own line (clearing a terminal's bar).
func (p *Progress) Println(msg string) {
	if p == nil || p.w == nil {
		return
	}
	if p.tty && p.width > 0 {
		fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", p.width))
		p.width = 0
		p.lastDraw = time.Time{}
	}
	fmt.Fprintln(p.w, msg)
}

func (p *Progress) line(step int, loss, lr, tps float64, now time.Time, bar bool) string {
	var b strings.Builder
	digits := len(fmt.Sprint(p.total))
	fmt.Fprintf(&b, "step %*d/%d", digits, step, p.total)
	if bar {
		const n = 24
		frac := float64(step) / float64(max(p.total, 1))
		fill := int(math.Round(frac * n))
		b.WriteString(" [" + strings.Repeat("=", fill) + strings.Repeat(" ", n-fill) + "]")
		fmt.Fprintf(&b, " %3.0f%%", 100*frac)
	}
	fmt.Fprintf(&b, "  loss %.4f  lr %.2e  %s tok/s", loss, lr, HumanCount(tps))
	done := step - p.startAt
	if elapsed := now.Sub(p.start); done > 0 && step < p.total {
		eta := time.Duration(float64(elapsed) / float64(done) * float64(p.total-step))
		fmt.Fprintf(&b, "  ETA %s", FormatDuration(eta))
	} else if step >= p.total {
		fmt.Fprintf(&b, "  took %s", FormatDuration(now.Sub(p.start)))
	}
	return b.String()
}

// FormatDuration prints a duration compactly: 45s, 3m12s, 2h05m.
func FormatDuration(d time.Duration) string {
	s := int(d.Round(time.Second) / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	}
	return fmt.Sprintf("%dh%02dm", s/3600, s/60%60)
}
