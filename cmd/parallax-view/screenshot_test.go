package main

import (
	"image"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestWritePNGDestinations: a --screenshot path that is a symbolic link is
// written through (the link kept); a named pipe or a directory is refused
// and left as it was.
func TestWritePNGDestinations(t *testing.T) {
	img := image.NewRGBA(image.Rect(0, 0, 4, 4))
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T, path string)
		wantErr string
		want    fs.FileMode // the type left at path
	}{
		{"new file", func(*testing.T, string) {}, "", 0},
		{"symlink to a file", func(t *testing.T, path string) {
			os.WriteFile(path+".real", nil, 0o644)
			os.Symlink(filepath.Base(path)+".real", path)
		}, "", fs.ModeSymlink},
		{"named pipe", func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path, 0o644); err != nil {
				t.Skipf("mkfifo: %v", err)
			}
		}, "is a named pipe", fs.ModeNamedPipe},
		{"directory", func(t *testing.T, path string) { os.Mkdir(path, 0o755) }, "is a directory", fs.ModeDir},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "shot.png")
			tc.setup(t, path)
			err := writePNG(path, img)
			if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
			fi, err := os.Lstat(path)
			if err != nil || fi.Mode().Type() != tc.want {
				t.Fatalf("%s is left as %v (%v), want %v", path, fi.Mode().Type(), err, tc.want)
			}
			if tc.wantErr == "" {
				if st, err := os.Stat(path); err != nil || st.Size() == 0 {
					t.Errorf("no PNG written through %s: %v", path, err)
				}
			}
		})
	}
}
