package mad

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/train"
	"github.com/parallax-engine/parallax/train/plot"

	"github.com/parallax-engine/parallax/internal/atomicfile"
)

// Files a suite writes into its output directory.
const (
	RunsDir     = "runs"         // one JSON file per finished run (RunResult, with its epochs)
	ResultsJSON = "results.json" // the aggregated SuiteResult
	ResultsMD   = "results.md"   // the results table in Markdown
	ResultsPNG  = "results.png"  // the results as a grouped bar chart
)

// SuiteConfig describes a benchmark: tasks x mixers x optimizers under a
// protocol, on one device.
type SuiteConfig struct {
	Tasks      []string // MAD tasks (default all six)
	Mixers     []string // registered mixers (default softmax, parallax)
	Optimizers []string // train.OptAdamW and/or train.OptMuon (default adamw)
	Protocol   Protocol
	Device     string // engine.Open's id: "auto", "cpu", "cuda:0", ...
	Out        string // output directory; finished runs there are not run again
	// Parallel is the number of runs trained at once, each on its own
	// handle of Device (small MAD models leave a GPU mostly idle).
	Parallel int
	Model    ModelConfig // zero: the MAD model (DefaultModelConfig)
	Stdout   io.Writer   // progress; nil for none
	// OpenDevice replaces engine.Open (tests).
	OpenDevice func(id string) (engine.Device, error)
}

// Combo is a mixer trained with an optimizer: one column of the results.
type Combo struct {
	Mixer     string `json:"mixer"`
	Optimizer string `json:"optimizer"`
}

// Name is "mixer/optimizer".
func (c Combo) Name() string { return c.Mixer + "/" + c.Optimizer }

// SettingScore is a combo's result on one setting: the best run of the
// lr x weight-decay grid.
type SettingScore struct {
	Combo
	Task         string  `json:"task"`
	Setting      string  `json:"setting"` // Setting.ID
	Change       string  `json:"change"`
	TestAcc      Num     `json:"test_acc"`       // macro, at the run's best test perplexity
	TestAccMicro Num     `json:"test_acc_micro"` // of the same run and epoch
	LR           float64 `json:"lr"`
	WD           float64 `json:"weight_decay"`
	Runs         int     `json:"runs"`    // finished grid points
	Planned      int     `json:"planned"` // grid points
	Key          string  `json:"best_run"`
}

// TaskScore is a combo's MAD score on a task: the mean over its settings.
type TaskScore struct {
	Combo
	Task         string `json:"task"`
	TestAcc      Num    `json:"test_acc"`
	TestAccMicro Num    `json:"test_acc_micro"`
	Settings     int    `json:"settings"` // settings with a result
	Planned      int    `json:"planned"`  // settings in the protocol
	Complete     bool   `json:"complete"` // every run of every setting finished
}

// ComboScore is a combo's mean over the tasks.
type ComboScore struct {
	Combo
	TestAcc      Num  `json:"test_acc"`
	TestAccMicro Num  `json:"test_acc_micro"`
	Tasks        int  `json:"tasks"`
	Complete     bool `json:"complete"`
}

// SuiteResult is what a suite measured (so far).
type SuiteResult struct {
	Protocol    Protocol       `json:"protocol"`
	Tasks       []string       `json:"tasks"`
	Combos      []Combo        `json:"combos"`
	Device      string         `json:"device"`
	Planned     int            `json:"planned_runs"`
	Finished    int            `json:"finished_runs"`
	Resumed     int            `json:"resumed_runs"` // finished by an earlier invocation
	Interrupted bool           `json:"interrupted"`
	Seconds     float64        `json:"seconds"` // this invocation
	Settings    []SettingScore `json:"settings"`
	TaskScores  []TaskScore    `json:"task_scores"`
	Averages    []ComboScore   `json:"averages"`
	// Seeds lists, when the output directory holds runs of this plan under
	// more than one run seed (Protocol.Seed: --seed 1, then --seed 2 into
	// the same directory), those seeds in ascending order; OverSeeds then
	// gives each combo's per-seed scores with their mean and spread. The
	// fields above are the current seed's alone.
	Seeds     []uint64    `json:"seeds,omitempty"`
	OverSeeds []SeedScore `json:"over_seeds,omitempty"`
	Runs      []RunResult `json:"runs"` // the current seed's, without their epoch histories (see runs/)
}

// AverageTask is the Task of a SeedScore that averages over the tasks.
const AverageTask = "average"

// SeedScore is a combo's macro test accuracy on a task (or, with Task
// AverageTask, its mean over the tasks) under each run seed, with the mean
// and spread over the seeds.
type SeedScore struct {
	Combo
	Task     string   `json:"task"`      // a task or AverageTask
	Seeds    []uint64 `json:"seeds"`     // the seeds with a score, ascending
	TestAccs []Num    `json:"test_accs"` // one per seed, as Seeds
	Mean     Num      `json:"mean"`
	Std      Num      `json:"std"` // sample standard deviation (n-1); null for one seed
	Min      Num      `json:"min"`
	Max      Num      `json:"max"`
	Complete bool     `json:"complete"` // every seed's score is complete
}

func (c *SuiteConfig) fill() {
	if len(c.Tasks) == 0 {
		c.Tasks = Tasks()
	}
	if len(c.Mixers) == 0 {
		c.Mixers = []string{MixerSoftmax, MixerParallax}
	}
	if len(c.Optimizers) == 0 {
		c.Optimizers = []string{train.OptAdamW}
	}
	if c.Protocol.Name == "" {
		c.Protocol = QuickProtocol()
	}
	if c.Device == "" {
		c.Device = "auto"
	}
	if c.Parallel < 1 {
		c.Parallel = 1
	}
	if c.OpenDevice == nil {
		c.OpenDevice = engine.Open
	}
}

// Validate reports an unusable configuration.
func (c SuiteConfig) Validate() error {
	if c.Out == "" {
		return errors.New("mad: no output directory")
	}
	for _, t := range c.Tasks {
		if _, err := ParseTask(t); err != nil {
			return err
		}
	}
	for _, m := range c.Mixers {
		if _, err := mixerFactory(m); err != nil {
			return fmt.Errorf("mad: %w", err)
		}
	}
	for _, o := range c.Optimizers {
		if o != train.OptAdamW && o != train.OptMuon {
			return fmt.Errorf("mad: optimizer %q: want %s or %s", o, train.OptAdamW, train.OptMuon)
		}
	}
	return c.Protocol.Validate()
}

// Combos lists the configuration's mixer/optimizer pairs, optimizer-major
// (all mixers under the first optimizer, then the next).
func (c SuiteConfig) Combos() []Combo {
	var out []Combo
	for _, o := range c.Optimizers {
		for _, m := range c.Mixers {
			out = append(out, Combo{m, o})
		}
	}
	return out
}

// Plan lists every run of the suite: task by task, setting by setting, then
// combo and grid point (so one setting's data serve consecutive runs).
func (c SuiteConfig) Plan() ([]RunSpec, error) {
	var out []RunSpec
	for _, task := range c.Tasks {
		task, err := ParseTask(task)
		if err != nil {
			return nil, err
		}
		settings, err := c.Protocol.TaskSettings(task)
		if err != nil {
			return nil, err
		}
		for _, s := range settings {
			for _, cb := range c.Combos() {
				out = append(out, c.Protocol.Runs(s, cb.Mixer, cb.Optimizer, c.Model)...)
			}
		}
	}
	return out, nil
}

// RunFile is the file of a finished run inside the output directory.
func RunFile(out, key string) string { return filepath.Join(out, RunsDir, runName(key)+".json") }

// runName is key as a file name: '/' as "__", characters outside
// [A-Za-z0-9._+-] as '~'.
func runName(key string) string {
	var b strings.Builder
	for _, r := range key {
		switch {
		case r == '/':
			b.WriteString("__")
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_', r == '+':
			b.WriteRune(r)
		default:
			b.WriteByte('~')
		}
	}
	return b.String()
}

// LoadRuns reads the finished runs of an output directory, by key. Files
// that do not parse are reported through warn and skipped (their runs
// are redone).
func LoadRuns(out string, warn func(string)) (map[string]RunResult, error) {
	done := map[string]RunResult{}
	files, err := filepath.Glob(filepath.Join(out, RunsDir, "*.json"))
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("mad: %w", err)
		}
		var r RunResult
		if err := json.Unmarshal(b, &r); err != nil || r.Key == "" {
			if warn != nil {
				warn(fmt.Sprintf("ignoring %s: not a finished run (%v); it will be run again", f, err))
			}
			continue
		}
		done[r.Key] = r
	}
	return done, nil
}

// writeJSON writes v to path atomically (a temporary file, then rename).
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(path, append(b, '\n')); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// dataCache generates each setting's data once and drops it when its last
// run has taken it.
type dataCache struct {
	mu      sync.Mutex
	entries map[string]*dataEntry
}

type dataEntry struct {
	once        sync.Once
	train, test *Dataset
	overlap     float64
	err         error
	users       int // runs still to take the data
}

func (c *dataCache) get(s Setting) (*dataEntry, error) {
	c.mu.Lock()
	e := c.entries[s.key()]
	c.mu.Unlock()
	e.once.Do(func() {
		e.train, e.test, e.err = Generate(s)
		if e.err == nil {
			e.overlap = Overlap(e.train, e.test)
		}
	})
	return e, e.err
}

func (c *dataCache) release(s Setting) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := s.key()
	if e := c.entries[k]; e != nil {
		e.users--
		if e.users <= 0 {
			delete(c.entries, k)
		}
	}
}

// Overlap is the share of test inputs that also occur as training inputs
// (the reference warns above 0.001; it does not de-duplicate).
func Overlap(trainSet, testSet *Dataset) float64 {
	seen := make(map[string]struct{}, trainSet.N)
	key := func(v []int32) string { return string(int32Bytes(v)) }
	for i := range trainSet.N {
		in, _ := trainSet.Example(i)
		seen[key(in)] = struct{}{}
	}
	n := 0
	for i := range testSet.N {
		in, _ := testSet.Example(i)
		if _, ok := seen[key(in)]; ok {
			n++
		}
	}
	return float64(n) / float64(max(1, testSet.N))
}

// suite is one RunSuite invocation's state.
type suite struct {
	cfg    SuiteConfig
	out    io.Writer
	mu     sync.Mutex
	start  time.Time
	total  int   // runs planned
	index  int   // runs started so far (this invocation numbers them)
	stepsD int64 // steps done this invocation
	stepsR int64 // estimated steps of runs not finished yet
	device string
}

func (s *suite) printf(format string, a ...any) {
	if s.out == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.out, format, a...)
}

// unique drops repeated entries, keeping the first of each.
func unique(list []string) []string {
	var out []string
	for _, x := range list {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

func estSteps(r RunSpec) int64 {
	return int64(r.Epochs) * int64((r.Setting.TrainExamples+r.Batch-1)/r.Batch)
}

// RunSuite trains every run of cfg's plan that its output directory does
// not already hold, cfg.Parallel at a time, then aggregates all the plan's
// runs into results.json, results.md and results.png. Cancelling ctx lets
// the runs in flight stop (they are redone next time), writes what is
// finished and returns with Interrupted set.
func RunSuite(ctx context.Context, cfg SuiteConfig) (*SuiteResult, error) {
	cfg.fill()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var tasks []string
	for _, t := range cfg.Tasks {
		t, _ = ParseTask(t)
		tasks = append(tasks, t)
	}
	cfg.Tasks, cfg.Mixers, cfg.Optimizers = unique(tasks), unique(cfg.Mixers), unique(cfg.Optimizers)
	s := &suite{cfg: cfg, out: cfg.Stdout, start: time.Now()}
	if cfg.Protocol.MaxSeqLen > 0 {
		kept, err := s.dropLong()
		if err != nil {
			return nil, err
		}
		if len(kept) == 0 {
			return nil, fmt.Errorf("mad: max seq len %d leaves no setting of %s to run", cfg.Protocol.MaxSeqLen, strings.Join(cfg.Tasks, ", "))
		}
		cfg.Tasks, s.cfg.Tasks = kept, kept
	}
	if err := os.MkdirAll(filepath.Join(cfg.Out, RunsDir), 0o755); err != nil {
		return nil, fmt.Errorf("mad: %w", err)
	}
	plan, err := cfg.Plan()
	if err != nil {
		return nil, err
	}
	done, err := LoadRuns(cfg.Out, func(msg string) { s.printf("mad: %s\n", msg) })
	if err != nil {
		return nil, err
	}
	var todo []RunSpec
	cache := &dataCache{entries: map[string]*dataEntry{}}
	resumed := 0
	for _, r := range plan {
		if _, ok := done[r.Key()]; ok {
			resumed++
			continue
		}
		todo = append(todo, r)
		k := r.Setting.key()
		if cache.entries[k] == nil {
			cache.entries[k] = &dataEntry{}
		}
		cache.entries[k].users++
		s.stepsR += estSteps(r)
	}
	s.total = len(plan)
	s.index = resumed
	s.printf("mad: %s protocol: %d task(s) x %d mixer(s) x %d optimizer(s), %d runs (%d already in %s), %d at a time on %s\n",
		cfg.Protocol.Name, len(cfg.Tasks), len(cfg.Mixers), len(cfg.Optimizers), len(plan), resumed, cfg.Out, cfg.Parallel, cfg.Device)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs := make(chan RunSpec)
	var (
		wg       sync.WaitGroup
		errMu    sync.Mutex
		firstErr error
		newRuns  []RunResult
	)
	fail := func(err error) {
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		errMu.Unlock()
		cancel()
	}
	for range min(cfg.Parallel, max(1, len(todo))) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var dev engine.Device
			defer func() {
				if dev != nil {
					dev.Close()
				}
			}()
			for spec := range jobs {
				if ctx.Err() != nil {
					continue
				}
				if dev == nil {
					d, err := cfg.OpenDevice(cfg.Device)
					if err != nil {
						fail(fmt.Errorf("mad: %w", err))
						continue
					}
					dev = d
					s.mu.Lock()
					s.device = d.Info().ID() + " (" + d.Info().Name + ")"
					s.mu.Unlock()
				}
				res, err := s.runOne(ctx, dev, cache, spec)
				if err != nil {
					if ctx.Err() == nil {
						fail(err)
					}
					continue
				}
				errMu.Lock()
				newRuns = append(newRuns, res)
				errMu.Unlock()
			}
		}()
	}
	for _, r := range todo {
		if ctx.Err() != nil {
			break
		}
		jobs <- r
	}
	close(jobs)
	wg.Wait()

	for _, r := range newRuns {
		done[r.Key] = r
	}
	res := aggregate(cfg, plan, done)
	res.Seeds, res.OverSeeds = overSeeds(cfg, res, done)
	res.Resumed = resumed
	res.Device = s.device
	res.Seconds = time.Since(s.start).Seconds()
	res.Interrupted = firstErr == nil && ctx.Err() != nil
	if err := writeResults(cfg.Out, res); err != nil {
		return res, fmt.Errorf("mad: %w", err)
	}
	if firstErr != nil {
		return res, firstErr
	}
	return res, nil
}

// dropLong prints a note for every setting that the protocol's MaxSeqLen
// drops and returns the tasks that keep at least one setting.
func (s *suite) dropLong() ([]string, error) {
	p := s.cfg.Protocol
	var kept []string
	for _, task := range s.cfg.Tasks {
		left, dropped, err := p.selectSettings(task)
		if err != nil {
			return nil, fmt.Errorf("mad: %w", err)
		}
		for _, d := range dropped {
			what := d.Change
			if !strings.HasPrefix(what, "seq_len=") {
				what += fmt.Sprintf(" (seq_len %d)", d.SeqLen)
			}
			s.printf("mad: note: max seq len %d drops %s %s\n", p.MaxSeqLen, task, what)
		}
		if len(left) == 0 {
			s.printf("mad: note: max seq len %d leaves no setting of %s; the task is not run\n", p.MaxSeqLen, task)
			continue
		}
		kept = append(kept, task)
	}
	return kept, nil
}

// overSeeds scores cfg's plan under every run seed of which done holds a
// finished run (cur is the current seed's result) and summarises each
// combo's task and average scores over those seeds. It returns nothing
// when fewer than two seeds have results.
func overSeeds(cfg SuiteConfig, cur *SuiteResult, done map[string]RunResult) ([]uint64, []SeedScore) {
	per := map[uint64]*SuiteResult{}
	if cur.Finished > 0 {
		per[cfg.Protocol.Seed] = cur
	}
	tried := map[uint64]bool{cfg.Protocol.Seed: true}
	for _, r := range done {
		sd := r.Spec.Seed
		if tried[sd] {
			continue
		}
		tried[sd] = true
		c := cfg
		c.Protocol.Seed = sd
		plan, err := c.Plan()
		if err != nil {
			continue
		}
		if other := aggregate(c, plan, done); other.Finished > 0 {
			per[sd] = other
		}
	}
	if len(per) < 2 {
		return nil, nil
	}
	seeds := make([]uint64, 0, len(per))
	for sd := range per {
		seeds = append(seeds, sd)
	}
	slices.Sort(seeds)
	var out []SeedScore
	for _, cb := range cur.Combos {
		for _, task := range append(slices.Clone(cfg.Tasks), AverageTask) {
			sc := SeedScore{Combo: cb, Task: task, Complete: true}
			for _, sd := range seeds {
				r := per[sd]
				var v Num
				var complete bool
				if task == AverageTask {
					a, _ := r.Average(cb)
					v, complete = a.TestAcc, a.Complete && a.Tasks == len(r.Tasks)
				} else {
					ts, _ := r.Task(cb, task)
					v, complete = ts.TestAcc, ts.Complete
				}
				if !complete {
					sc.Complete = false
				}
				if math.IsNaN(float64(v)) {
					continue
				}
				sc.Seeds = append(sc.Seeds, sd)
				sc.TestAccs = append(sc.TestAccs, v)
			}
			sc.Mean, sc.Std, sc.Min, sc.Max = spread(sc.TestAccs)
			out = append(out, sc)
		}
	}
	return seeds, out
}

// spread is the mean, sample standard deviation (NaN below two values),
// minimum and maximum of vals (all NaN when empty).
func spread(vals []Num) (mean, std, lo, hi Num) {
	nan := Num(math.NaN())
	if len(vals) == 0 {
		return nan, nan, nan, nan
	}
	f := make([]float64, len(vals))
	for i, v := range vals {
		f[i] = float64(v)
	}
	m, sd := train.MeanStd(f)
	if len(vals) < 2 {
		sd = math.NaN()
	}
	return Num(m), Num(sd), slices.Min(vals), slices.Max(vals)
}

// SeedScore returns a combo's summary over seeds on a task or AverageTask
// (ok false if absent, as when only one seed has results).
func (r *SuiteResult) SeedScore(cb Combo, task string) (SeedScore, bool) {
	for _, sc := range r.OverSeeds {
		if sc.Combo == cb && sc.Task == task {
			return sc, true
		}
	}
	return SeedScore{}, false
}

// runOne trains one run and records it.
func (s *suite) runOne(ctx context.Context, dev engine.Device, cache *dataCache, spec RunSpec) (RunResult, error) {
	s.mu.Lock()
	s.index++
	idx := s.index
	s.mu.Unlock()
	tag := fmt.Sprintf("[%*d/%d]", len(fmt.Sprint(s.total)), idx, s.total)
	label := fmt.Sprintf("%s %s %s lr %s wd %s", spec.Setting.Task, spec.Setting.Change, Combo{spec.Mixer, spec.Optimizer}.Name(),
		fmtFloat(spec.LR), fmtFloat(spec.WD))
	data, err := cache.get(spec.Setting)
	defer cache.release(spec.Setting)
	if err != nil {
		return RunResult{}, err
	}
	if data.overlap > 0.001 {
		s.printf("%s note: %.1f%% of the test inputs of %s %s also occur in its training set\n", tag, 100*data.overlap, spec.Setting.Task, spec.Setting.ID())
	}
	s.printf("%s %s: up to %d epochs of %d examples x %d tokens\n", tag, label, spec.Epochs, data.train.N, data.train.T)
	dir := PartialRunDir(s.cfg.Out, spec.Key())
	if n := partialEpochs(dir); n > 0 {
		s.printf("%s resuming after epoch %d (saved in %s)\n", tag, n, dir)
	}
	last := time.Now()
	res, err := TrainResumable(ctx, dev, spec, data.train, data.test, dir, func(e EpochStats) {
		if time.Since(last) < 15*time.Second && e.Epoch != 1 && e.Epoch != spec.Epochs {
			return
		}
		last = time.Now()
		s.printf("%s   epoch %*d/%d  train loss %.4f  test acc %.3f (micro %.3f)  ppl %.3f  %s/epoch\n", tag,
			len(fmt.Sprint(spec.Epochs)), e.Epoch, spec.Epochs, e.TrainLoss, e.TestAcc, e.TestAccMicro, e.TestPPL,
			train.FormatDuration(time.Duration(e.Seconds*float64(time.Second))))
	})
	if err != nil {
		return res, fmt.Errorf("mad run %s: %w", spec.Key(), err)
	}
	if err := writeJSON(RunFile(s.cfg.Out, res.Key), res); err != nil {
		return res, fmt.Errorf("mad: record run: %w", err)
	}
	if err := DropPartial(dir); err != nil {
		s.printf("%s note: could not remove the finished run's saved progress: %v\n", tag, err)
	}
	s.mu.Lock()
	s.stepsD += int64(res.Steps)
	s.stepsR -= estSteps(spec)
	eta := ""
	if el := time.Since(s.start); s.stepsD > 0 && s.stepsR > 0 {
		eta = ", ETA at most " + train.FormatDuration(time.Duration(float64(el)/float64(s.stepsD)*float64(s.stepsR)))
	}
	s.mu.Unlock()
	s.printf("%s done %s: acc %.3f (micro %.3f) at epoch %d of %d, stop: %s, %d steps in %s%s\n", tag, label,
		res.TestAcc, res.TestAccMicro, res.BestEpoch, res.Epochs, res.Stop, res.Steps,
		train.FormatDuration(time.Duration(res.Seconds*float64(time.Second))), eta)
	return res, nil
}

// aggregate scores the plan's finished runs: best of the grid per setting,
// mean over settings per task, mean over tasks per combo.
func aggregate(cfg SuiteConfig, plan []RunSpec, done map[string]RunResult) *SuiteResult {
	res := &SuiteResult{Protocol: cfg.Protocol, Tasks: cfg.Tasks, Combos: cfg.Combos(), Planned: len(plan)}
	type sk struct {
		combo   Combo
		task    string
		setting string
	}
	best := map[sk]*SettingScore{}
	var order []sk
	for _, r := range plan {
		k := sk{Combo{r.Mixer, r.Optimizer}, r.Setting.Task, r.Setting.ID()}
		ss := best[k]
		if ss == nil {
			ss = &SettingScore{Combo: k.combo, Task: k.task, Setting: k.setting, Change: r.Setting.Change, TestAcc: Num(math.NaN()), TestAccMicro: Num(math.NaN())}
			best[k] = ss
			order = append(order, k)
		}
		ss.Planned++
		run, ok := done[r.Key()]
		if !ok {
			continue
		}
		res.Finished++
		summary := run
		summary.History = nil
		res.Runs = append(res.Runs, summary)
		ss.Runs++
		if ss.Runs == 1 || run.TestAcc > float64(ss.TestAcc) {
			ss.TestAcc, ss.TestAccMicro, ss.LR, ss.WD, ss.Key = Num(run.TestAcc), Num(run.TestAccMicro), r.LR, r.WD, run.Key
		}
	}
	for _, k := range order {
		res.Settings = append(res.Settings, *best[k])
	}
	for _, cb := range res.Combos {
		avg := ComboScore{Combo: cb, Complete: true}
		var sum, sumMicro float64
		for _, task := range cfg.Tasks {
			ts := TaskScore{Combo: cb, Task: task, Complete: true}
			var a, am float64
			for _, ss := range res.Settings {
				if ss.Combo != cb || ss.Task != task {
					continue
				}
				ts.Planned++
				if ss.Runs < ss.Planned {
					ts.Complete = false
				}
				if ss.Runs > 0 {
					ts.Settings++
					a += float64(ss.TestAcc)
					am += float64(ss.TestAccMicro)
				}
			}
			if ts.Settings > 0 {
				ts.TestAcc, ts.TestAccMicro = Num(a/float64(ts.Settings)), Num(am/float64(ts.Settings))
				avg.Tasks++
				sum += float64(ts.TestAcc)
				sumMicro += float64(ts.TestAccMicro)
			} else {
				ts.TestAcc, ts.TestAccMicro = Num(math.NaN()), Num(math.NaN())
			}
			if !ts.Complete {
				avg.Complete = false
			}
			res.TaskScores = append(res.TaskScores, ts)
		}
		if avg.Tasks > 0 {
			avg.TestAcc, avg.TestAccMicro = Num(sum/float64(avg.Tasks)), Num(sumMicro/float64(avg.Tasks))
		} else {
			avg.TestAcc, avg.TestAccMicro = Num(math.NaN()), Num(math.NaN())
		}
		res.Averages = append(res.Averages, avg)
	}
	return res
}

// Task returns a combo's score on a task (ok false if absent).
func (r *SuiteResult) Task(cb Combo, task string) (TaskScore, bool) {
	for _, ts := range r.TaskScores {
		if ts.Combo == cb && ts.Task == task {
			return ts, true
		}
	}
	return TaskScore{}, false
}

// Average returns a combo's mean over tasks.
func (r *SuiteResult) Average(cb Combo) (ComboScore, bool) {
	for _, a := range r.Averages {
		if a.Combo == cb {
			return a, true
		}
	}
	return ComboScore{}, false
}

// cell formats a score: "0.951", "0.951*" when some runs are missing, "-"
// when none finished.
func cell(v Num, complete bool) string {
	if math.IsNaN(float64(v)) {
		return "-"
	}
	s := fmt.Sprintf("%.3f", v)
	if !complete {
		s += "*"
	}
	return s
}

// grid returns the table's rows: a header, one row per task, the average.
func (r *SuiteResult) grid(micro bool) [][]string {
	head := []string{"task"}
	for _, cb := range r.Combos {
		head = append(head, cb.Name())
	}
	rows := [][]string{head}
	for _, task := range r.Tasks {
		row := []string{task}
		for _, cb := range r.Combos {
			ts, _ := r.Task(cb, task)
			v := ts.TestAcc
			if micro {
				v = ts.TestAccMicro
			}
			row = append(row, cell(v, ts.Complete))
		}
		rows = append(rows, row)
	}
	row := []string{"average"}
	for _, cb := range r.Combos {
		a, _ := r.Average(cb)
		v := a.TestAcc
		if micro {
			v = a.TestAccMicro
		}
		row = append(row, cell(v, a.Complete && a.Tasks == len(r.Tasks)))
	}
	return append(rows, row)
}

func (r *SuiteResult) caption() string {
	p := r.Protocol
	var settings string
	switch p.SettingsChoice() {
	case SettingsBaseline:
		settings = "the baseline setting of each task"
	case SettingsHard:
		settings = "the baseline and the hardest value of each swept knob of each task"
	default:
		settings = "all settings of the sweep"
	}
	if p.MaxSeqLen > 0 {
		settings += fmt.Sprintf(" up to seq_len %d", p.MaxSeqLen)
	}
	return fmt.Sprintf("MAD, %s protocol (%s; lr %v x weight decay %v; <= %d epochs%s; batch %d; seed %d): test accuracy at the best test perplexity, best of the grid per setting, mean over settings",
		p.Name, settings, p.LRs, p.WDs, p.Epochs, stepsNote(p), p.Batch, p.Seed)
}

// seedsTitle names the over-seeds table, pm standing for "plus-minus".
func (r *SuiteResult) seedsTitle(pm string) string {
	var names []string
	for _, sd := range r.Seeds {
		names = append(names, fmt.Sprint(sd))
	}
	return fmt.Sprintf("macro accuracy over seeds %s (mean%ssample std; n: the seeds with a score, when fewer)", strings.Join(names, ", "), pm)
}

// seedGrid returns the over-seeds table's rows (nil without OverSeeds):
// cells "mean+-std", "*" when some run is missing.
func (r *SuiteResult) seedGrid(pm string) [][]string {
	if len(r.OverSeeds) == 0 {
		return nil
	}
	head := []string{"task"}
	for _, cb := range r.Combos {
		head = append(head, cb.Name())
	}
	rows := [][]string{head}
	for _, task := range append(slices.Clone(r.Tasks), AverageTask) {
		row := []string{task}
		for _, cb := range r.Combos {
			sc, _ := r.SeedScore(cb, task)
			c := "-"
			switch {
			case len(sc.TestAccs) == 1:
				c = fmt.Sprintf("%.3f (n=1)", sc.Mean)
			case len(sc.TestAccs) > 1:
				c = fmt.Sprintf("%.3f%s%.3f", sc.Mean, pm, sc.Std)
				if len(sc.TestAccs) < len(r.Seeds) {
					c += fmt.Sprintf(" (n=%d)", len(sc.TestAccs))
				}
			}
			if c != "-" && !sc.Complete {
				c += "*"
			}
			row = append(row, c)
		}
		rows = append(rows, row)
	}
	return rows
}

// writeAligned writes rows as a left-aligned first column and
// right-aligned others.
func writeAligned(b *strings.Builder, rows [][]string) {
	widths := make([]int, len(rows[0]))
	for _, row := range rows {
		for i, c := range row {
			widths[i] = max(widths[i], len(c))
		}
	}
	for _, row := range rows {
		for i, c := range row {
			if i == 0 {
				fmt.Fprintf(b, "%-*s", widths[i], c)
			} else {
				fmt.Fprintf(b, "  %*s", widths[i], c)
			}
		}
		b.WriteString("\n")
	}
}

func stepsNote(p Protocol) string {
	s := ""
	if p.MaxSteps > 0 {
		s += fmt.Sprintf(", <= %d steps", p.MaxSteps)
	}
	if p.MaxTrain > 0 || p.MaxTest > 0 {
		s += fmt.Sprintf(", at most %d train / %d test examples (reduced scale)", p.MaxTrain, p.MaxTest)
	}
	return s
}

// Table formats the results as aligned text: macro accuracy (MAD's) and
// micro accuracy. "*" marks a score with runs still missing.
func (r *SuiteResult) Table() string {
	var b strings.Builder
	b.WriteString(r.caption() + ".\n")
	for _, micro := range []bool{false, true} {
		name := "macro accuracy (MAD's metric)"
		if micro {
			name = "micro accuracy"
		}
		fmt.Fprintf(&b, "\n%s\n", name)
		writeAligned(&b, r.grid(micro))
	}
	if rows := r.seedGrid("+-"); rows != nil {
		fmt.Fprintf(&b, "\n%s\n", r.seedsTitle(" +- "))
		writeAligned(&b, rows)
	}
	if r.Finished < r.Planned {
		fmt.Fprintf(&b, "\n* %d of %d runs finished; rerun the same command to complete the rest.\n", r.Finished, r.Planned)
	}
	return b.String()
}

// Markdown formats the results as Markdown tables.
func (r *SuiteResult) Markdown() string {
	var b strings.Builder
	b.WriteString(r.caption() + ".\n")
	if r.Device != "" {
		fmt.Fprintf(&b, "Device: %s.\n", r.Device)
	}
	for _, micro := range []bool{false, true} {
		name := "Macro accuracy (MAD's metric)"
		if micro {
			name = "Micro accuracy"
		}
		fmt.Fprintf(&b, "\n%s:\n\n", name)
		for i, row := range r.grid(micro) {
			b.WriteString("| " + strings.Join(row, " | ") + " |\n")
			if i == 0 {
				b.WriteString("|---" + strings.Repeat("|---:", len(row)-1) + "|\n")
			}
		}
	}
	if rows := r.seedGrid(" ± "); rows != nil {
		fmt.Fprintf(&b, "\nM%s:\n\n", strings.TrimPrefix(r.seedsTitle(" ± "), "m"))
		for i, row := range rows {
			b.WriteString("| " + strings.Join(row, " | ") + " |\n")
			if i == 0 {
				b.WriteString("|---" + strings.Repeat("|---:", len(row)-1) + "|\n")
			}
		}
	}
	b.WriteString("\nPer setting (best grid point):\n\n| task | setting | combo | acc | micro | lr | wd | runs |\n|---|---|---|---:|---:|---:|---:|---:|\n")
	for _, ss := range r.Settings {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %d/%d |\n", ss.Task, ss.Change, ss.Name(),
			cell(ss.TestAcc, true), cell(ss.TestAccMicro, true), fmtFloat(ss.LR), fmtFloat(ss.WD), ss.Runs, ss.Planned)
	}
	return b.String()
}

// Chart is the results as a grouped bar chart: one group per task and the
// average, one bar per combo.
func (r *SuiteResult) Chart() plot.BarChart {
	c := plot.BarChart{Title: "MAD (" + r.Protocol.Name + "): test accuracy", YLabel: "accuracy", YMin: 0, YMax: 1, ValueLabels: true}
	for _, cb := range r.Combos {
		c.Series = append(c.Series, cb.Name())
	}
	for _, task := range append(slices.Clone(r.Tasks), "average") {
		var vals []float64
		for _, cb := range r.Combos {
			if task == "average" {
				a, _ := r.Average(cb)
				vals = append(vals, float64(a.TestAcc))
			} else {
				ts, _ := r.Task(cb, task)
				vals = append(vals, float64(ts.TestAcc))
			}
		}
		name := ShortName(task)
		if task == "average" {
			name = "avg"
		}
		c.Groups = append(c.Groups, name)
		c.Values = append(c.Values, vals)
	}
	return c
}

func writeResults(out string, r *SuiteResult) error {
	if err := writeJSON(filepath.Join(out, ResultsJSON), r); err != nil {
		return err
	}
	md := filepath.Join(out, ResultsMD)
	if err := atomicfile.WriteFile(md, []byte(r.Markdown())); err != nil {
		return fmt.Errorf("write %s: %w", md, err)
	}
	return plot.WriteBarsPNG(filepath.Join(out, ResultsPNG), 1100, 520, r.Chart())
}
