package mad

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/train"
)

// TestMADHardSettings pins each task's hard set: the baseline, then the
// sweep's last value of each knob, all valid and all part of the sweep.
func TestMADHardSettings(t *testing.T) {
	for _, c := range []struct {
		task    string
		changes []string
	}{
		{InContextRecall, []string{"baseline", "vocab_size=128", "seq_len=1024", "num_train_examples=800"}},
		{FuzzyInContextRecall, []string{"baseline", "vocab_size=128", "seq_len=1024", "num_train_examples=800"}},
		{NoisyInContextRecall, []string{"baseline", "vocab_size=144", "seq_len=1024", "num_train_examples=800", "frac_noise=0.8"}},
		{SelectiveCopying, []string{"baseline", "vocab_size=128", "seq_len=1024", "num_train_examples=800", "num_tokens_to_copy=96"}},
		{Compression, []string{"baseline", "vocab_size=128", "seq_len=256", "num_train_examples=800"}},
		{Memorization, []string{"baseline", "vocab_size=8192"}},
	} {
		t.Run(ShortName(c.task), func(t *testing.T) {
			hard, err := Hard(c.task)
			if err != nil {
				t.Fatal(err)
			}
			sweep, _ := Sweep(c.task)
			var changes []string
			ids := map[string]bool{}
			for _, s := range hard {
				changes = append(changes, s.Change)
				if err := s.Validate(); err != nil {
					t.Error(err)
				}
				if !slices.Contains(sweep, s) {
					t.Errorf("%s %s is not a setting of the sweep", s.Change, s.ID())
				}
				if ids[s.ID()] {
					t.Errorf("duplicate setting %s", s.ID())
				}
				ids[s.ID()] = true
			}
			if !slices.Equal(changes, c.changes) {
				t.Errorf("hard set %v, want %v", changes, c.changes)
			}
			p := FullProtocol()
			p.Settings = SettingsHard
			got, err := p.TaskSettings(c.task)
			if err != nil || !slices.Equal(got, hard) {
				t.Errorf("TaskSettings(hard) = %d settings (%v), want the %d of Hard", len(got), err, len(hard))
			}
		})
	}
	total := 0
	for _, task := range Tasks() {
		h, _ := Hard(task)
		total += len(h)
	}
	if total != 24 {
		t.Errorf("%d hard settings in all, want 24", total)
	}
	if _, err := Hard("nope"); err == nil {
		t.Error("Hard of an unknown task: no error")
	}
	// The noisy hard set changes one knob at a time.
	h, _ := Hard(NoisyInContextRecall)
	if last := h[len(h)-1]; last.FracNoise != 0.8 || last.SeqLen != 128 || last.Vocab != 32 || last.TrainExamples != 12800 {
		t.Errorf("noisy frac_noise=0.8 setting %+v", last)
	}
}

// TestMADMaxSeqLen: the cap drops the settings whose seq_len exceeds it,
// for any settings choice, and reports them.
func TestMADMaxSeqLen(t *testing.T) {
	for _, c := range []struct {
		settings string
		max      int
		want     map[string]int // settings per task
		dropped  int
	}{
		{SettingsHard, 0, map[string]int{InContextRecall: 4, FuzzyInContextRecall: 4, NoisyInContextRecall: 5, SelectiveCopying: 5, Compression: 4, Memorization: 2}, 0},
		{SettingsHard, 1024, map[string]int{InContextRecall: 4, FuzzyInContextRecall: 4, NoisyInContextRecall: 5, SelectiveCopying: 5, Compression: 4, Memorization: 2}, 0},
		{SettingsHard, 512, map[string]int{InContextRecall: 3, FuzzyInContextRecall: 3, NoisyInContextRecall: 4, SelectiveCopying: 4, Compression: 4, Memorization: 2}, 4},
		{SettingsHard, 128, map[string]int{InContextRecall: 3, FuzzyInContextRecall: 3, NoisyInContextRecall: 4, SelectiveCopying: 0, Compression: 3, Memorization: 2}, 9},
		{SettingsAll, 512, map[string]int{InContextRecall: 10, FuzzyInContextRecall: 10, NoisyInContextRecall: 13, SelectiveCopying: 12, Compression: 11, Memorization: 6}, 4},
		{SettingsAll, 256, map[string]int{InContextRecall: 9, FuzzyInContextRecall: 9, NoisyInContextRecall: 12, SelectiveCopying: 11, Compression: 11, Memorization: 6}, 8},
		{SettingsBaseline, 128, map[string]int{InContextRecall: 1, FuzzyInContextRecall: 1, NoisyInContextRecall: 1, SelectiveCopying: 0, Compression: 1, Memorization: 1}, 1},
		{SettingsBaseline, 16, map[string]int{}, 6},
	} {
		p := FullProtocol()
		p.Settings, p.MaxSeqLen = c.settings, c.max
		if err := p.Validate(); err != nil {
			t.Fatal(err)
		}
		dropped := 0
		for _, task := range Tasks() {
			kept, err := p.TaskSettings(task)
			if err != nil {
				t.Fatal(err)
			}
			if len(kept) != c.want[task] {
				t.Errorf("%s, max %d: %s has %d settings, want %d", c.settings, c.max, task, len(kept), c.want[task])
			}
			for _, s := range kept {
				if c.max > 0 && s.SeqLen > c.max {
					t.Errorf("%s, max %d: kept %s %s (seq_len %d)", c.settings, c.max, task, s.Change, s.SeqLen)
				}
			}
			d, _ := p.DroppedSettings(task)
			for _, s := range d {
				if s.SeqLen <= c.max {
					t.Errorf("%s, max %d: dropped %s %s (seq_len %d)", c.settings, c.max, task, s.Change, s.SeqLen)
				}
			}
			dropped += len(d)
		}
		if dropped != c.dropped {
			t.Errorf("%s, max %d: %d dropped, want %d", c.settings, c.max, dropped, c.dropped)
		}
	}
	for _, bad := range []Protocol{
		func() Protocol { p := FullProtocol(); p.MaxSeqLen = -1; return p }(),
		func() Protocol { p := FullProtocol(); p.Settings = "hardest"; return p }(),
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("protocol settings %q, max seq len %d: no error", bad.Settings, bad.MaxSeqLen)
		}
		if _, err := bad.TaskSettings(Compression); bad.Settings != SettingsAll && err == nil {
			t.Errorf("TaskSettings of settings %q: no error", bad.Settings)
		}
	}
}

// TestMADProtocolJSON: the settings choice survives a round trip, and
// results.json written before it existed ("baseline_only") still loads.
func TestMADProtocolJSON(t *testing.T) {
	for _, c := range []struct {
		name, json string
		want       string
	}{
		{"old baseline", `{"name":"quick","baseline_only":true,"lrs":[0.001],"weight_decays":[0]}`, SettingsBaseline},
		{"old sweep", `{"name":"full","baseline_only":false,"lrs":[0.001],"weight_decays":[0]}`, SettingsAll},
		{"older, no field", `{"name":"full","lrs":[0.001],"weight_decays":[0]}`, SettingsAll},
		{"new hard", `{"name":"quick+custom","settings":"hard","baseline_only":false,"max_seq_len":512}`, SettingsHard},
		{"new beats old", `{"settings":"all","baseline_only":true}`, SettingsAll},
	} {
		var p Protocol
		if err := json.Unmarshal([]byte(c.json), &p); err != nil || p.Settings != c.want {
			t.Errorf("%s: settings %q (%v), want %q", c.name, p.Settings, err, c.want)
		}
	}
	for _, choice := range append(SettingsChoices(), "") {
		p := QuickProtocol()
		p.Settings, p.MaxSeqLen = choice, 256
		b, err := json.Marshal(SuiteResult{Protocol: p})
		if err != nil {
			t.Fatal(err)
		}
		var back SuiteResult
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		want := p
		want.Settings = p.SettingsChoice()
		if !strings.Contains(string(b), `"baseline_only":`+map[bool]string{true: "true", false: "false"}[choice == SettingsBaseline]) ||
			back.Protocol.Settings != want.Settings || back.Protocol.MaxSeqLen != 256 || back.Protocol.Name != "quick" ||
			!slices.Equal(back.Protocol.LRs, p.LRs) || back.Protocol.MaxSteps != p.MaxSteps {
			t.Errorf("settings %q: round trip %s -> %+v", choice, b, back.Protocol)
		}
	}
	if err := json.Unmarshal([]byte(`{"lrs":"x"}`), new(Protocol)); err == nil {
		t.Error("bad protocol JSON: no error")
	}
}

// TestMADSeeds: runs of different seeds have different keys and files, and
// a directory holding two seeds' runs reports their mean and spread.
func TestMADSeeds(t *testing.T) {
	p := FullProtocol()
	p.Settings = SettingsHard
	cfg := SuiteConfig{Tasks: Tasks(), Mixers: []string{MixerSoftmax, MixerParallax},
		Optimizers: []string{train.OptAdamW, train.OptMuon}, Protocol: p}
	files := map[string]uint64{}
	for _, seed := range []uint64{1, 2, 3} {
		cfg.Protocol.Seed = seed
		plan, err := cfg.Plan()
		if err != nil {
			t.Fatal(err)
		}
		if len(plan) != 24*4*6 {
			t.Errorf("seed %d: %d runs, want %d", seed, len(plan), 24*4*6)
		}
		for _, r := range plan {
			f := RunFile("out", r.Key())
			if prev, ok := files[f]; ok {
				t.Fatalf("seed %d run %s shares its file with seed %d", seed, r.Key(), prev)
			}
			files[f] = seed
		}
	}

	// Aggregation over seeds, without training: made-up scores.
	cfg = SuiteConfig{Tasks: []string{Compression, Memorization}, Mixers: []string{MixerSoftmax},
		Optimizers: []string{train.OptAdamW}, Protocol: QuickProtocol()}
	done := map[string]RunResult{}
	acc := map[uint64]float64{1: 0.5, 2: 0.7, 5: 0.9}
	for seed, a := range acc {
		cfg.Protocol.Seed = seed
		plan, _ := cfg.Plan()
		for i, r := range plan {
			if seed == 5 && r.Setting.Task == Memorization {
				continue // seed 5 has only compression
			}
			done[r.Key()] = RunResult{Key: r.Key(), Spec: r, TestAcc: a - 0.1*float64(i%2), TestAccMicro: a}
		}
	}
	done["unrelated"] = RunResult{Key: "unrelated", Spec: RunSpec{Seed: 9}}
	cfg.Protocol.Seed = 2
	plan, _ := cfg.Plan()
	res := aggregate(cfg, plan, done)
	res.Seeds, res.OverSeeds = overSeeds(cfg, res, done)
	if !slices.Equal(res.Seeds, []uint64{1, 2, 5}) {
		t.Fatalf("seeds %v, want [1 2 5]", res.Seeds)
	}
	cb := Combo{MixerSoftmax, train.OptAdamW}
	near := func(a Num, b float64) bool { return math.Abs(float64(a)-b) < 1e-12 }
	comp, _ := res.SeedScore(cb, Compression)
	if len(comp.TestAccs) != 3 || !near(comp.Mean, 0.7) || !near(comp.Std, 0.2) || !near(comp.Min, 0.5) || !near(comp.Max, 0.9) || !comp.Complete {
		t.Errorf("compression over seeds %+v", comp)
	}
	mem, _ := res.SeedScore(cb, Memorization)
	if !slices.Equal(mem.Seeds, []uint64{1, 2}) || !near(mem.Mean, 0.6) || mem.Complete {
		t.Errorf("memorization over seeds %+v", mem)
	}
	avg, _ := res.SeedScore(cb, AverageTask)
	if avg.Complete || len(avg.TestAccs) != 3 {
		t.Errorf("average over seeds %+v", avg)
	}
	if ts, _ := res.Task(cb, Compression); !near(ts.TestAcc, 0.7) {
		t.Errorf("the current seed's compression score %v, want 0.7 (seed 2 alone)", ts.TestAcc)
	}
	table, md := res.Table(), res.Markdown()
	for _, want := range []string{"over seeds 1, 2, 5", "0.700+-0.200", "seed 2)"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	if !strings.Contains(md, "0.700 ± 0.200") || !strings.Contains(md, "(n=2)*") {
		t.Errorf("markdown lacks the seed table:\n%s", md)
	}
	// One seed: no over-seeds section.
	one := aggregate(cfg, plan, map[string]RunResult{})
	if s, o := overSeeds(cfg, one, map[string]RunResult{}); s != nil || o != nil {
		t.Errorf("no runs: seeds %v", s)
	}
}

// TestMADSeedsSuite runs one tiny setting under seeds 1 and 2 into one
// directory: each seed keeps its own run file and the second invocation
// reports both.
func TestMADSeedsSuite(t *testing.T) {
	out := t.TempDir()
	p := smokeProtocol()
	p.Settings, p.MaxSeqLen, p.Epochs = SettingsHard, 32, 1
	var log syncBuffer
	cfg := SuiteConfig{Tasks: []string{Compression}, Mixers: []string{MixerSoftmax}, Protocol: p, Out: out,
		Model: smokeModel, Stdout: &log}
	var res *SuiteResult
	for _, seed := range []uint64{1, 2} {
		cfg.Protocol.Seed = seed
		var err error
		res, err = RunSuite(context.Background(), cfg)
		if err != nil {
			t.Fatalf("seed %d: %v\n%s", seed, err, log.String())
		}
		// compression's hard set: baseline, vocab 128 and n 800 (merged
		// with the baseline by max train 8); seq_len 256 is dropped.
		if res.Planned != 2 || res.Finished != 2 || res.Resumed != 0 {
			t.Fatalf("seed %d: planned %d finished %d resumed %d", seed, res.Planned, res.Finished, res.Resumed)
		}
	}
	if !strings.Contains(log.String(), "max seq len 32 drops compression seq_len=256") {
		t.Errorf("no note on the dropped setting:\n%s", log.String())
	}
	files, _ := filepath.Glob(filepath.Join(out, RunsDir, "*.json"))
	if len(files) != 4 {
		t.Errorf("%d run files for 2 seeds x 2 settings, want 4", len(files))
	}
	if !slices.Equal(res.Seeds, []uint64{1, 2}) || len(res.OverSeeds) != 2 {
		t.Errorf("seeds %v, %d over-seed scores", res.Seeds, len(res.OverSeeds))
	}
	b, err := os.ReadFile(filepath.Join(out, ResultsJSON))
	if err != nil {
		t.Fatal(err)
	}
	var back SuiteResult
	if err := json.Unmarshal(b, &back); err != nil || back.Protocol.Settings != SettingsHard || len(back.OverSeeds) != 2 {
		t.Errorf("results.json: %v, settings %q, %d over-seed scores", err, back.Protocol.Settings, len(back.OverSeeds))
	}

	cfg.Protocol.MaxSeqLen = 8
	if _, err := RunSuite(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "leaves no setting") {
		t.Errorf("max seq len 8: %v", err)
	}
}
