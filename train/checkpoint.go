package train

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"sort"
	"strconv"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/model/safetensors"
	"github.com/parallax-engine/parallax/train/data"
)

// OptimizerFile is the name of the training-state file in a checkpoint
// directory, next to the model's config.json and model.safetensors.
const OptimizerFile = "optimizer.safetensors"

// stateFormat identifies OptimizerFile's layout in its metadata.
const stateFormat = "parallax-train-state/1"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// TrainState is what a checkpoint stores besides the weights and the
// optimizer's tensors: enough to continue the run exactly.
type TrainState struct {
	Step    int               `json:"step"`    // optimizer steps completed
	Tokens  int64             `json:"tokens"`  // training tokens consumed
	Sampler data.SamplerState `json:"sampler"` // position of the data sampler
	Skipped int               `json:"skipped"` // steps skipped for non-finite values
	Run     json.RawMessage   `json:"run"`     // the run's Config (JSON), to resume with the same settings
}

// SaveState writes the optimizer's tensors and st to path atomically. The
// metadata carries a CRC-32C of the state tensors and of the model weights
// file the state belongs to (modelCRC), so a corrupt file or a model/state
// pair from two different saves is refused on load.
//
// A data-parallel optimizer's state is spread over the ranks: its
// checkpoint is written by Run, which gathers it on rank 0 first.
func SaveState(path string, o *Optimizer, st TrainState, modelCRC uint32) error {
	if o.par != nil && o.par.comm.Size() > 1 {
		return fmt.Errorf("save training state: the optimizer's state is spread over %d ranks; gather it first", o.par.comm.Size())
	}
	state := o.State()
	names := make([]string, 0, len(state))
	for n := range state {
		names = append(names, n)
	}
	sort.Strings(names)
	tensors := make([]safetensors.Tensor, 0, len(names))
	for _, n := range names {
		t := state[n]
		b := make([]byte, t.Bytes())
		if err := t.Device().Read(t, b); err != nil {
			return fmt.Errorf("save training state: read %s: %w", n, err)
		}
		tensors = append(tensors, safetensors.Tensor{Name: n, DType: "F32", Shape: t.Shape(), Data: b})
	}
	return writeState(path, tensors, o, st, modelCRC)
}

// writeState writes the state tensors (sorted by name, every one the
// optimizer has: a data-parallel run gathers them first) and the metadata.
func writeState(path string, tensors []safetensors.Tensor, o *Optimizer, st TrainState, modelCRC uint32) error {
	crc := crc32.New(castagnoli)
	for _, t := range tensors {
		crc.Write(t.Data)
	}
	sj, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("save training state: %w", err)
	}
	oj, err := json.Marshal(o.Config())
	if err != nil {
		return fmt.Errorf("save training state: %w", err)
	}
	meta := map[string]string{
		"format":       stateFormat,
		"step":         strconv.Itoa(st.Step),
		"optimizer":    string(oj),
		"optim_steps":  strconv.Itoa(o.Steps()),
		"train":        string(sj),
		"state_crc32c": strconv.FormatUint(uint64(crc.Sum32()), 16),
		"model_crc32c": strconv.FormatUint(uint64(modelCRC), 16),
	}
	if err := safetensors.Write(path, tensors, meta); err != nil {
		return fmt.Errorf("save training state: %w", err)
	}
	return nil
}

// ErrCorrupt is wrapped by the errors LoadState returns for a damaged or
// mismatched checkpoint.
var ErrCorrupt = errors.New("corrupt checkpoint")

// ReadState reads the TrainState and model CRC recorded in path without
// touching any optimizer.
func ReadState(path string) (TrainState, uint32, error) {
	f, err := safetensors.Open(path)
	if err != nil {
		return TrainState{}, 0, fmt.Errorf("read training state: %w", err)
	}
	defer f.Close()
	return stateMeta(path, f.Metadata())
}

func stateMeta(path string, meta map[string]string) (TrainState, uint32, error) {
	var st TrainState
	if meta["format"] != stateFormat {
		return st, 0, fmt.Errorf("read training state %s: format %q, want %q: %w", path, meta["format"], stateFormat, ErrCorrupt)
	}
	if err := json.Unmarshal([]byte(meta["train"]), &st); err != nil {
		return st, 0, fmt.Errorf("read training state %s: bad \"train\" metadata: %v: %w", path, err, ErrCorrupt)
	}
	mc, err := strconv.ParseUint(meta["model_crc32c"], 16, 32)
	if err != nil {
		return st, 0, fmt.Errorf("read training state %s: bad model checksum: %w", path, ErrCorrupt)
	}
	return st, uint32(mc), nil
}

// LoadState restores the optimizer's tensors and step count from path and
// returns the TrainState. Every state tensor the optimizer has must be
// present with its shape, and the checksum must match. A data-parallel
// optimizer loads the tensors its rank holds from the same consolidated
// file, whatever the number of ranks that wrote it.
func LoadState(path string, o *Optimizer) (TrainState, uint32, error) {
	f, err := safetensors.Open(path)
	if err != nil {
		return TrainState{}, 0, fmt.Errorf("load training state: %w", err)
	}
	defer f.Close()
	st, mcrc, err := stateMeta(path, f.Metadata())
	if err != nil {
		return st, 0, err
	}
	meta := f.Metadata()
	want, err := strconv.ParseUint(meta["state_crc32c"], 16, 32)
	if err != nil {
		return st, 0, fmt.Errorf("load training state %s: bad state checksum: %w", path, ErrCorrupt)
	}
	var saved OptimConfig
	if err := json.Unmarshal([]byte(meta["optimizer"]), &saved); err != nil || saved.Name != o.Config().Name {
		return st, 0, fmt.Errorf("load training state %s: saved by optimizer %q, this run uses %q", path, saved.Name, o.Config().Name)
	}
	state := o.State()
	shapes := o.stateShapes()
	names := make([]string, 0, len(shapes))
	for n := range shapes {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(f.Names()) != len(names) {
		return st, 0, fmt.Errorf("load training state %s: holds %d tensors, the optimizer has %d (a different model or optimizer?)", path, len(f.Names()), len(names))
	}
	crc := crc32.New(castagnoli)
	for _, n := range names {
		info, ok := f.Info(n)
		if !ok {
			return st, 0, fmt.Errorf("load training state %s: no tensor %q (a different model or optimizer?)", path, n)
		}
		if info.DType != "F32" || !engine.Shape(info.Shape).Equal(shapes[n]) {
			return st, 0, fmt.Errorf("load training state %s: %s is %s%v, want F32%v", path, n, info.DType, engine.Shape(info.Shape), shapes[n])
		}
		b, err := f.Raw(n)
		if err != nil {
			return st, 0, fmt.Errorf("load training state %s: %w", path, err)
		}
		crc.Write(b)
		if t, ok := state[n]; ok {
			if err := t.Device().Write(t, b); err != nil {
				return st, 0, fmt.Errorf("load training state %s: %s: %w", path, n, err)
			}
		}
	}
	if uint64(crc.Sum32()) != want {
		return st, 0, fmt.Errorf("load training state %s: checksum mismatch, the file is damaged: %w", path, ErrCorrupt)
	}
	steps, err := strconv.Atoi(meta["optim_steps"])
	if err != nil || steps < 0 {
		return st, 0, fmt.Errorf("load training state %s: bad optimizer step count: %w", path, ErrCorrupt)
	}
	o.SetSteps(steps)
	return st, mcrc, nil
}

// FileCRC returns the CRC-32C of a file's bytes.
func FileCRC(path string) (uint32, error) {
	fh, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer fh.Close()
	h := crc32.New(castagnoli)
	if _, err := io.Copy(h, fh); err != nil {
		return 0, fmt.Errorf("checksum %s: %w", path, err)
	}
	return h.Sum32(), nil
}
