package train

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/parallax-engine/parallax/internal/atomicfile"
	"github.com/parallax-engine/parallax/model"
	"github.com/parallax-engine/parallax/train/data"
)

// runFileNames are the names a run writes into its output directory, the
// checkpoint's first: --force removes them in this order, so that a
// removal cut short never leaves a manifest naming files that are gone.
var runFileNames = []string{ManifestFile, stageDir, OptimizerFile, model.WeightsFile, model.ConfigFile,
	MetricsFile, PlotFile, TokenizerFile, DataDir}

// outputs is what a run created in its output directory, so that a run
// that fails before its first checkpoint leaves nothing behind: a folder
// that holds no checkpoint cannot be resumed, and would only make the next
// fresh run refuse it.
type outputs struct {
	out   string
	dirs  []string // directories this run created, deepest first
	files []string // run files absent when this (fresh) run started
	saved bool     // a checkpoint was committed: the folder is a resumable run
}

// prepareOut creates cfg.Out and, on rank 0 (the rank that writes the
// run's files), checks what it holds. Each file the run will write must be
// a regular file or a link to one, not a directory, pipe or device:
// refused now rather than at the first save. A fresh run refuses another
// run's files, unless cfg.Force, which removes them. Other ranks get nil.
func prepareOut(cfg Config) (*outputs, error) {
	o := &outputs{out: cfg.Out}
	for d := filepath.Clean(cfg.Out); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); !errors.Is(err, fs.ErrNotExist) {
			break
		}
		o.dirs = append(o.dirs, d)
		if d == filepath.Dir(d) {
			break
		}
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	if cfg.Group != nil && cfg.Group.Rank() != 0 {
		return nil, nil
	}
	written := []string{MetricsFile, PlotFile}
	if !cfg.Resume {
		written = append(written, TokenizerFile)
	}
	if !cfg.NoSave {
		written = append(written, ManifestFile, OptimizerFile, model.WeightsFile, model.ConfigFile)
	}
	for _, name := range written {
		path := filepath.Join(cfg.Out, name)
		if _, err := atomicfile.Target(path); err != nil {
			return nil, fmt.Errorf("train: %s: %w", path, err)
		}
	}
	if cfg.Resume {
		return o, nil
	}
	found := earlierRunFiles(cfg)
	if len(found) > 0 && !cfg.Force {
		if hasCheckpoint(cfg.Out) {
			return nil, fmt.Errorf("train: %s already holds a checkpoint; continue it with --resume, replace it with --force, or choose another --out", cfg.Out)
		}
		return nil, fmt.Errorf("train: %s holds files of an earlier run (%s) but no checkpoint to resume; remove them with --force or choose another --out",
			cfg.Out, strings.Join(found, ", "))
	}
	for _, name := range found {
		if err := removeRunFile(filepath.Join(cfg.Out, name), name); err != nil {
			return nil, fmt.Errorf("train: --force: %w", err)
		}
	}
	for _, name := range runFileNames {
		if _, err := os.Lstat(filepath.Join(cfg.Out, name)); errors.Is(err, fs.ErrNotExist) {
			o.files = append(o.files, name)
		}
	}
	return o, nil
}

// earlierRunFiles lists the run files in cfg.Out, leaving out any that is
// one of the run's own inputs (--config, --data or --tokenizer inside the
// folder).
func earlierRunFiles(cfg Config) []string {
	var inputs []os.FileInfo
	for _, p := range []string{cfg.Model, filepath.Join(cfg.Model, model.ConfigFile), cfg.Data, cfg.Tokenizer} {
		if p == "" {
			continue
		}
		if fi, err := os.Stat(p); err == nil {
			inputs = append(inputs, fi)
		}
	}
	var found []string
next:
	for _, name := range runFileNames {
		path := filepath.Join(cfg.Out, name)
		if _, err := os.Lstat(path); err != nil {
			continue
		}
		if fi, err := os.Stat(path); err == nil {
			for _, in := range inputs {
				if os.SameFile(fi, in) {
					continue next
				}
			}
		}
		found = append(found, name)
	}
	return found
}

// hasCheckpoint reports whether out holds a checkpoint, or a save that
// --resume can finish.
func hasCheckpoint(out string) bool {
	for _, p := range []string{OptimizerFile, ManifestFile, filepath.Join(stageDir, ManifestFile), filepath.Join(stageDir, OptimizerFile)} {
		if _, err := os.Lstat(filepath.Join(out, p)); err == nil {
			return true
		}
	}
	return false
}

// removeRunFile removes an earlier run's file. Of the data directory only
// what data.Build writes is removed (and the directory, if that empties
// it); a link is removed, never what it points to.
func removeRunFile(path, name string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0 || !fi.IsDir():
		err = os.Remove(path)
	case name == stageDir:
		err = os.RemoveAll(path)
	case name == DataDir:
		var built []string
		for _, pat := range []string{data.MetaFile, "*_[0-9][0-9][0-9][0-9][0-9].bin", ".*.tmp-*"} {
			m, _ := filepath.Glob(filepath.Join(path, pat))
			built = append(built, m...)
		}
		for _, p := range built {
			if err := os.Remove(p); err != nil {
				return err
			}
		}
		if es, rerr := os.ReadDir(path); rerr == nil && len(es) == 0 {
			err = os.Remove(path)
		}
	default:
		err = os.Remove(path) // an empty directory; a full one is refused
	}
	if err != nil {
		return fmt.Errorf("remove the earlier run's %s: %w", path, err)
	}
	return nil
}

// markSaved records that a checkpoint was committed.
func (o *outputs) markSaved() {
	if o != nil {
		o.saved = true
	}
}

// discard removes what the run created, unless it committed a checkpoint.
func (o *outputs) discard() {
	if o == nil || o.saved {
		return
	}
	for _, name := range o.files {
		path := filepath.Join(o.out, name)
		if name == DataDir || name == stageDir {
			os.RemoveAll(path)
		} else {
			os.Remove(path)
		}
	}
	for _, d := range o.dirs {
		os.Remove(d) // only if empty: what others put there stays
	}
}

// keepOr is a resumed run's interval: the one asked for, or (0) the
// checkpoint's.
func keepOr(asked, saved int) int {
	if asked != 0 {
		return asked
	}
	return saved
}
