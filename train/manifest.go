package train

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/parallax-engine/parallax/internal/atomicfile"
	"github.com/parallax-engine/parallax/model"
)

// ManifestFile lists the files of the checkpoint in a run's directory with
// their sizes and CRC-32C checksums. A save moves it into place after the
// files it lists, so it always describes one complete checkpoint, and
// --resume checks every file against it.
const ManifestFile = "checkpoint.json"

// manifestFormat identifies ManifestFile's layout.
const manifestFormat = "parallax-checkpoint/1"

// stageDir is where a save writes the new checkpoint before moving it
// into the run's directory. The staged state is committed once the stage
// holds its manifest: from then on it is the checkpoint, and an
// interrupted move is finished by --resume rather than thrown away.
const stageDir = ".checkpoint.tmp"

// checkpointFiles are the files a save writes, in the order they are moved
// into place; ManifestFile follows them. The tokenizer is written once by
// the run's setup and only listed (checked, not moved).
var checkpointFiles = []string{model.WeightsFile, model.ConfigFile, OptimizerFile}

type manifest struct {
	Format string          `json:"format"`
	Step   int             `json:"step"`
	Files  []manifestEntry `json:"files"`
}

type manifestEntry struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	CRC32C string `json:"crc32c"`
}

// errKilled stands for a process killed in the middle of a save (tests,
// through killSave): the save returns at once and leaves every file as a
// kill would.
var errKilled = errors.New("save stopped by the test hook")

// killSave, set by tests, is asked at each point of a save and stops it
// there when it returns true. The points: 1 model and config staged, 2
// training state staged, 3 manifest staged (the commit point), 3+k: k
// files moved into place (k = 1..4, the manifest last; the stage
// directory is removed after that).
var killSave func(point int) bool

func killedAt(point int) bool { return killSave != nil && killSave(point) }

// entryOf measures the file at path for the manifest under name.
func entryOf(path, name string) (manifestEntry, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return manifestEntry{}, err
	}
	crc, err := FileCRC(path)
	if err != nil {
		return manifestEntry{}, err
	}
	return manifestEntry{Name: name, Size: fi.Size(), CRC32C: fmt.Sprintf("%08x", crc)}, nil
}

// matches reports whether the file at path is the one e describes.
func (e manifestEntry) matches(path string) (bool, error) {
	got, err := entryOf(path, e.Name)
	if err != nil {
		return false, err
	}
	return got == e, nil
}

// stageManifest writes the manifest of step's checkpoint into the stage:
// each checkpoint file as staged (or, when recovering a save that had
// already moved it, as it now is in out) and the run's tokenizer. Writing
// it commits the save.
func stageManifest(out string, step int) error {
	stage := filepath.Join(out, stageDir)
	m := manifest{Format: manifestFormat, Step: step}
	for _, name := range checkpointFiles {
		path := filepath.Join(stage, name)
		if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
			path = filepath.Join(out, name)
		}
		e, err := entryOf(path, name)
		if err != nil {
			return fmt.Errorf("checkpoint manifest: %w", err)
		}
		m.Files = append(m.Files, e)
	}
	if e, err := entryOf(filepath.Join(out, TokenizerFile), TokenizerFile); err == nil {
		m.Files = append(m.Files, e)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("checkpoint manifest: %w", err)
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("checkpoint manifest: %w", err)
	}
	path := filepath.Join(stage, ManifestFile)
	if err := atomicfile.WriteFile(path, append(b, '\n')); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func readManifest(path string) (manifest, error) {
	var m manifest
	b, err := os.ReadFile(path)
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("read %s: %v: %w", path, err, ErrCorrupt)
	}
	if m.Format != manifestFormat {
		return m, fmt.Errorf("read %s: format %q, want %q: %w", path, m.Format, manifestFormat, ErrCorrupt)
	}
	// The entries name files that are checked, and moved into place, in the
	// run's directory: a name must not lead out of it.
	for _, e := range m.Files {
		if e.Name == "" || e.Name == "." || e.Name == ".." || e.Name != filepath.Base(e.Name) || strings.ContainsAny(e.Name, `/\`) {
			return m, fmt.Errorf("read %s: file %q is not a file name in the run directory: %w", path, e.Name, ErrCorrupt)
		}
		if e.Size < 0 || !isCRC32C(e.CRC32C) {
			return m, fmt.Errorf("read %s: file %s: size %d, checksum %q: %w", path, e.Name, e.Size, e.CRC32C, ErrCorrupt)
		}
	}
	return m, nil
}

// isCRC32C reports whether s is a checksum as entryOf writes it: 8
// lowercase hexadecimal digits.
func isCRC32C(s string) bool {
	return len(s) == 8 && strings.Trim(s, "0123456789abcdef") == ""
}

// commitCheckpoint moves the committed checkpoint in out's stage into out:
// each staged file its manifest lists, then the manifest, then the stage
// is removed. A listed file no longer staged must already be in out, as
// the manifest describes it. Moving a file twice is harmless, so an
// interrupted commit is finished by running it again, also by several
// ranks of a job at once.
func commitCheckpoint(out string) error {
	stage := filepath.Join(out, stageDir)
	m, err := readManifest(filepath.Join(stage, ManifestFile))
	if err != nil {
		return err
	}
	moved := 0
	for _, e := range m.Files {
		src, dst := filepath.Join(stage, e.Name), filepath.Join(out, e.Name)
		err := atomicfile.Replace(src, dst)
		if err == nil {
			moved++
			if killedAt(3 + moved) {
				return errKilled
			}
			continue
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("move %s into place: %w", e.Name, err)
		}
		if ok, err := e.matches(dst); err != nil || !ok {
			return fmt.Errorf("%s is neither staged in %s nor in place as its manifest describes it (%v): %w", e.Name, stage, err, ErrCorrupt)
		}
	}
	err = atomicfile.Replace(filepath.Join(stage, ManifestFile), filepath.Join(out, ManifestFile))
	if err != nil && !errors.Is(err, fs.ErrNotExist) { // absent: another rank moved it
		return fmt.Errorf("move %s into place: %w", ManifestFile, err)
	}
	if killedAt(4 + moved) {
		return errKilled
	}
	if err := os.RemoveAll(stage); err != nil {
		return fmt.Errorf("remove %s: %w", stage, err)
	}
	return nil
}

// recoverCheckpoint brings out's checkpoint to a consistent state after a
// save that was stopped (killed, or a failed disk) and says what it did
// ("" when there was nothing to do). A stage holding a manifest is
// committed: its move into place is finished. A stage without one but
// with the training state is complete too (the state is staged after the
// model; a save by an earlier version, or one stopped just before the
// manifest): its manifest is written and it is committed. Any other stage
// is an unfinished save and is removed, leaving the last complete
// checkpoint.
func recoverCheckpoint(out string) (string, error) {
	stage := filepath.Join(out, stageDir)
	if _, err := os.Lstat(stage); errors.Is(err, fs.ErrNotExist) {
		return "", nil
	} else if err != nil {
		return "", err
	}
	if es, err := os.ReadDir(stage); err == nil && len(es) == 0 {
		return "", os.Remove(stage) // a save stopped after its last move
	}
	mpath := filepath.Join(stage, ManifestFile)
	_, err := os.Lstat(mpath)
	if errors.Is(err, fs.ErrNotExist) {
		statePath := filepath.Join(stage, OptimizerFile)
		st, mcrc, err := ReadState(statePath)
		if errors.Is(err, fs.ErrNotExist) {
			if err := os.RemoveAll(stage); err != nil {
				return "", fmt.Errorf("remove the unfinished checkpoint save %s: %w", stage, err)
			}
			return fmt.Sprintf("removed an unfinished checkpoint save (%s); resuming from the last complete checkpoint", stageDir), nil
		}
		if err != nil {
			return "", fmt.Errorf("the interrupted checkpoint save in %s cannot be finished: %w", stage, err)
		}
		weights := filepath.Join(stage, model.WeightsFile)
		if _, err := os.Lstat(weights); errors.Is(err, fs.ErrNotExist) {
			weights = filepath.Join(out, model.WeightsFile)
		}
		crc, err := FileCRC(weights)
		if err != nil || crc != mcrc {
			return "", fmt.Errorf("the interrupted checkpoint save in %s cannot be finished: %s does not belong to its %s (%v): %w",
				stage, weights, OptimizerFile, err, ErrCorrupt)
		}
		if err := stageManifest(out, st.Step); err != nil {
			return "", fmt.Errorf("finish the interrupted checkpoint save in %s: %w", stage, err)
		}
	} else if err != nil {
		return "", err
	}
	m, err := readManifest(mpath)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil // another rank finished it meanwhile
	}
	if err != nil {
		return "", fmt.Errorf("the interrupted checkpoint save in %s cannot be finished: %w", stage, err)
	}
	if err := commitCheckpoint(out); err != nil {
		return "", fmt.Errorf("finish the interrupted checkpoint save of step %d in %s: %w", m.Step, stage, err)
	}
	return fmt.Sprintf("finished the interrupted checkpoint save of step %d", m.Step), nil
}

// verifyCheckpoint checks every file out's manifest lists against it, and
// that the manifest is of the training state's step. A checkpoint without
// a manifest (saved by an earlier version) passes: its model and state are
// still matched by the state's model checksum.
func verifyCheckpoint(out string, step int) error {
	path := filepath.Join(out, ManifestFile)
	m, err := readManifest(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if m.Step != step {
		return fmt.Errorf("%s is of step %d but %s of step %d (files of two saves): %w", ManifestFile, m.Step, OptimizerFile, step, ErrCorrupt)
	}
	for _, e := range m.Files {
		ok, err := e.matches(filepath.Join(out, e.Name))
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s holds no complete checkpoint: %s is missing: %w", out, e.Name, ErrCorrupt)
		}
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%s does not belong to the checkpoint of step %d (checksum mismatch with %s: the file is damaged or was replaced): %w",
				e.Name, m.Step, ManifestFile, ErrCorrupt)
		}
	}
	return nil
}
