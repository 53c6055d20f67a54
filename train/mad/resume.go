package mad

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/parallax-engine/parallax/model/safetensors"
	"github.com/parallax-engine/parallax/train"
)

// Unfinished runs. A run saves its weights, its optimizer state and its
// progress (epochs done, the shuffle's generator and order, the history
// so far) after an epoch, at most every SaveEvery, into PartialDir of the
// output directory; a run started again with the same key continues from
// there and computes what the uninterrupted run would have (the same
// bits on the same device: the data order, the learning-rate schedule and
// the optimizer's step count are restored with the tensors). So a run
// longer than one sitting (a time-limited job, Ctrl-C, a crash) loses at
// most the epochs since its last save. The folder is removed when the run
// finishes and its record is written.

// PartialDir is the folder of an output directory holding the last saved
// epoch of each unfinished run, one subfolder a run.
const PartialDir = "partial"

// SaveEvery is the least wall time between two saves of a run's progress
// (the first finished epoch is always saved after it).
var SaveEvery = 30 * time.Second

const (
	partialWeights  = "weights.safetensors"
	partialState    = "optimizer.safetensors"
	partialProgress = "progress.json" // written last: a folder without it is not a save
	progressFormat  = "parallax-mad-progress/1"
)

// PartialRunDir is the folder of run key's saved progress under out.
func PartialRunDir(out, key string) string {
	return filepath.Join(out, PartialDir, runName(key))
}

// progress is what a save holds besides the tensors.
type progress struct {
	Format  string    `json:"format"`
	Key     string    `json:"key"`
	Epoch   int       `json:"epoch"`    // epochs completed
	BestPPL string    `json:"best_ppl"` // the lowest test perplexity so far (strconv; may be +Inf)
	RNG     []byte    `json:"rng"`      // the shuffle generator's state
	Order   []int     `json:"order"`    // the example order after the last shuffle
	Result  RunResult `json:"result"`   // the run so far; Seconds is the wall time spent
}

// runState is the part of a run that a save restores.
type runState struct {
	epoch   int
	bestPPL float64
	pcg     *rand.PCG
	order   []int
	res     RunResult
}

// savePartial writes st and the run's tensors into dir: into a fresh
// sibling folder first, which then replaces dir, so that dir is always
// either the previous save or this one.
func savePartial(dir string, m *Model, opt *train.Optimizer, st *runState) error {
	tmp := dir + ".new"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	weights := filepath.Join(tmp, partialWeights)
	ts := make([]safetensors.Tensor, 0, len(m.Params()))
	for _, p := range m.Params() {
		b := make([]byte, p.W.Bytes())
		if err := p.W.Device().Read(p.W, b); err != nil {
			return fmt.Errorf("read %s: %w", p.Name, err)
		}
		ts = append(ts, safetensors.Tensor{Name: p.Name, DType: "F32", Shape: p.W.Shape(), Data: b})
	}
	if err := safetensors.Write(weights, ts, nil); err != nil {
		return err
	}
	crc, err := train.FileCRC(weights)
	if err != nil {
		return err
	}
	if err := train.SaveState(filepath.Join(tmp, partialState), opt, train.TrainState{Step: st.res.Steps}, crc); err != nil {
		return err
	}
	rng, err := st.pcg.MarshalBinary()
	if err != nil {
		return err
	}
	pr := progress{Format: progressFormat, Key: st.res.Key, Epoch: st.epoch, BestPPL: strconv.FormatFloat(st.bestPPL, 'g', -1, 64),
		RNG: rng, Order: st.order, Result: st.res}
	if err := writeJSON(filepath.Join(tmp, partialProgress), pr); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

// PartialRuns counts the saves of unfinished runs under out.
func PartialRuns(out string) int {
	saves, _ := filepath.Glob(filepath.Join(out, PartialDir, "*", partialProgress))
	return len(saves)
}

// partialEpochs is the epochs a save in dir has completed; 0 when there
// is none (or it does not read).
func partialEpochs(dir string) int {
	pr, err := readProgress(dir)
	if err != nil {
		return 0
	}
	return pr.Epoch
}

// readProgress reads dir's progress file; errNoPartial when there is none.
func readProgress(dir string) (progress, error) {
	var pr progress
	b, err := os.ReadFile(filepath.Join(dir, partialProgress))
	if errors.Is(err, os.ErrNotExist) {
		return pr, errNoPartial
	}
	if err != nil {
		return pr, err
	}
	if err := json.Unmarshal(b, &pr); err != nil {
		return pr, fmt.Errorf("%s: %w", partialProgress, err)
	}
	return pr, nil
}

// errNoPartial is loadPartial's answer when dir holds no save.
var errNoPartial = errors.New("no saved progress")

// loadPartial restores a save of run key from dir into m, opt and st
// (whose order must have the training set's length); errNoPartial when
// there is none. A save that does not belong to this run or does not read
// back whole is an error, not a fresh start: the caller says what to do.
func loadPartial(dir, key string, m *Model, opt *train.Optimizer, st *runState) error {
	pr, err := readProgress(dir)
	if err != nil {
		return err
	}
	if pr.Format != progressFormat || pr.Key != key {
		return fmt.Errorf("%s: format %q of run %q, want %q of %q", partialProgress, pr.Format, pr.Key, progressFormat, key)
	}
	if len(pr.Order) != len(st.order) || pr.Epoch < 1 {
		return fmt.Errorf("%s: %d examples after %d epochs, want %d after at least 1", partialProgress, len(pr.Order), pr.Epoch, len(st.order))
	}
	best, err := strconv.ParseFloat(pr.BestPPL, 64)
	if err != nil {
		return fmt.Errorf("%s: best perplexity: %w", partialProgress, err)
	}
	weights := filepath.Join(dir, partialWeights)
	f, err := safetensors.Open(weights)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range m.Params() {
		raw, err := f.Raw(p.Name)
		if err != nil {
			return err
		}
		if len(raw) != p.W.Bytes() {
			return fmt.Errorf("%s: %s holds %d bytes, want %d", partialWeights, p.Name, len(raw), p.W.Bytes())
		}
		if err := p.W.Device().Write(p.W, raw); err != nil {
			return fmt.Errorf("restore %s: %w", p.Name, err)
		}
	}
	crc, err := train.FileCRC(weights)
	if err != nil {
		return err
	}
	_, want, err := train.LoadState(filepath.Join(dir, partialState), opt)
	if err != nil {
		return err
	}
	if crc != want {
		return fmt.Errorf("%s does not belong to %s: %w", partialState, partialWeights, train.ErrCorrupt)
	}
	if err := st.pcg.UnmarshalBinary(pr.RNG); err != nil {
		return fmt.Errorf("%s: generator state: %w", partialProgress, err)
	}
	st.epoch, st.bestPPL, st.res = pr.Epoch, best, pr.Result
	st.res.TestPPL = Num(math.Inf(1))
	if pr.Result.BestEpoch > 0 {
		st.res.TestPPL = Num(best)
	}
	copy(st.order, pr.Order)
	return nil
}
