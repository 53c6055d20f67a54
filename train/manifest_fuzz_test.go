package train

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/parallax-engine/parallax/model"
)

// fuzzRunFiles are the files of the fuzzed run directory, with their
// contents.
var fuzzRunFiles = map[string]string{
	model.WeightsFile: "weights", model.ConfigFile: `{"hidden_size": 8}`, OptimizerFile: "state", TokenizerFile: "{}",
}

// fuzzManifest is the manifest that describes fuzzRunFiles at step.
func fuzzManifest(step int, edit func(*manifest)) []byte {
	m := manifest{Format: manifestFormat, Step: step}
	for _, name := range append(slices.Clone(checkpointFiles), TokenizerFile) {
		data := fuzzRunFiles[name]
		m.Files = append(m.Files, manifestEntry{Name: name, Size: int64(len(data)),
			CRC32C: fmt.Sprintf("%08x", crc32.Checksum([]byte(data), crc32.MakeTable(crc32.Castagnoli)))})
	}
	if edit != nil {
		edit(&m)
	}
	b, _ := json.MarshalIndent(m, "", "  ")
	return b
}

// writeFuzzRun makes dir/out a run directory holding fuzzRunFiles, with
// manifest as the manifest of its checkpoint (staged, in dir/out/stage, or
// in place), and dir/keep a file outside it.
func writeFuzzRun(t *testing.T, dir string, manifest []byte, staged bool) string {
	t.Helper()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	where := out
	if staged {
		where = filepath.Join(out, stageDir)
	}
	if err := os.MkdirAll(where, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{filepath.Join(dir, "keep"): "keep", filepath.Join(where, ManifestFile): string(manifest)}
	for name, data := range fuzzRunFiles {
		files[filepath.Join(out, name)] = data // the last checkpoint
		files[filepath.Join(where, name)] = data
	}
	for path, data := range files {
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// listTree lists the files under dir (relative paths).
func listTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(dir, path)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// FuzzReadManifest reads fuzzed checkpoint manifests. A manifest that does
// not read is ErrCorrupt; one that reads lists plain file names of the run
// directory with sizes and CRC-32C checksums as a save writes them, and
// comes back the same written out again. Checking a run directory against
// it (verifyCheckpoint) must pass exactly when every file it lists is
// there as it describes, and finishing a staged save with it
// (commitCheckpoint) must touch nothing outside the run directory.
func FuzzReadManifest(f *testing.F) {
	f.Add(fuzzManifest(7, nil))
	f.Add(fuzzManifest(7, func(m *manifest) { m.Files = m.Files[:1] }))
	f.Add(fuzzManifest(7, func(m *manifest) { m.Files[0].CRC32C = "0000000g" }))
	f.Add(fuzzManifest(7, func(m *manifest) { m.Files[1].Size = -1 }))
	f.Add(fuzzManifest(0, func(m *manifest) { m.Files[2].Name = "../keep" }))
	f.Add(fuzzManifest(0, func(m *manifest) { m.Files[0].Name = "../" + model.WeightsFile }))
	f.Add(fuzzManifest(0, func(m *manifest) { m.Files[2].Name = "../../keep" }))
	f.Add(fuzzManifest(0, func(m *manifest) { m.Files[2].Name = "." }))
	f.Add(fuzzManifest(0, func(m *manifest) { m.Files[2].Name = "" }))
	f.Add(fuzzManifest(0, func(m *manifest) { m.Files[2].Name = "/etc/hostname" }))
	f.Add(fuzzManifest(0, func(m *manifest) { m.Format = "parallax-checkpoint/2" }))
	f.Add([]byte(`{"format": "parallax-checkpoint/1", "step": 1, "files": null}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(``))
	root := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<16 {
			t.Skip()
		}
		path := filepath.Join(writeFuzzRun(t, root, data, false), ManifestFile)
		m, err := readManifest(path)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("a manifest that does not read is not ErrCorrupt: %v", err)
			}
			return
		}
		if m.Format != manifestFormat {
			t.Fatalf("format %q accepted", m.Format)
		}
		for _, e := range m.Files {
			if e.Name == "" || e.Name == "." || e.Name == ".." || e.Name != filepath.Base(e.Name) || strings.ContainsRune(e.Name, filepath.Separator) {
				t.Fatalf("entry %q is not a file name in the run directory", e.Name)
			}
			if e.Size < 0 || len(e.CRC32C) != 8 || strings.Trim(e.CRC32C, "0123456789abcdef") != "" {
				t.Fatalf("entry %+v: size or checksum unlike a save's", e)
			}
		}
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if again, err := readManifest(path); err != nil || !reflect.DeepEqual(again, m) {
			t.Fatalf("written out and read again, %+v became %+v (%v)", m, again, err)
		}

		out := filepath.Dir(path)
		want := true
		for _, e := range m.Files {
			data, ok := fuzzRunFiles[e.Name]
			if e.Name == ManifestFile {
				data, ok = string(b), true
			}
			crc := fmt.Sprintf("%08x", crc32.Checksum([]byte(data), crc32.MakeTable(crc32.Castagnoli)))
			want = want && ok && e.Size == int64(len(data)) && e.CRC32C == crc
		}
		if err := verifyCheckpoint(out, m.Step); (err == nil) != want || err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("verifyCheckpoint: %v; the files match the manifest: %v", err, want)
		}

		// The same manifest staged, and the save finished.
		out = writeFuzzRun(t, root, data, true)
		err = commitCheckpoint(out)
		after := listTree(t, root)
		for _, p := range after {
			if !strings.HasPrefix(p, "out"+string(filepath.Separator)) && p != "keep" {
				t.Fatalf("finishing the save made %s, outside the run directory", p)
			}
		}
		if !slices.Contains(after, "keep") {
			t.Fatalf("finishing the save moved a file from outside the run directory")
		}
		if err != nil {
			return
		}
		for _, p := range after {
			if strings.HasPrefix(p, filepath.Join("out", stageDir)) {
				t.Fatalf("the save finished, but %s is still staged", p)
			}
		}
		for _, e := range m.Files {
			if !slices.Contains(after, filepath.Join("out", e.Name)) {
				t.Fatalf("the save finished, but %s is not in place", e.Name)
			}
		}
	})
}
