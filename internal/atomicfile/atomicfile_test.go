package atomicfile

import (
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestWriteReplaces(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.json")
	for _, want := range []string{"first", "second, longer"} {
		if err := WriteFile(path, []byte(want)); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != want {
			t.Fatalf("read %q, %v; want %q", got, err, want)
		}
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := st.Mode().Perm(); perm != 0o644 {
		t.Errorf("mode %v, want 0644", perm)
	}
	assertOnly(t, dir, "f.json")
}

func TestWriteFailureKeepsOld(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := WriteFile(path, []byte("old")); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := Write(path, func(w io.Writer) error {
		if _, err := w.Write([]byte("partial new content")); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("error %v, want boom", err)
	}
	if got, _ := os.ReadFile(path); string(got) != "old" {
		t.Errorf("path holds %q after a failed write, want the old content", got)
	}
	assertOnly(t, dir, "f")
}

func TestWriteMissingDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "missing")
	err := WriteFile(filepath.Join(dir, "f"), []byte("x"))
	if err == nil || !strings.Contains(err.Error(), "create a temporary file in "+dir) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("error %v, want one naming %s and wrapping ErrNotExist", err, dir)
	}
}

// assertOnly checks that dir holds exactly name (no temporary file left).
func assertOnly(t *testing.T, dir, name string) {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 1 || es[0].Name() != name {
		var names []string
		for _, e := range es {
			names = append(names, e.Name())
		}
		t.Errorf("directory holds %v, want only %s", names, name)
	}
}

// TestWriteDestinations writes (Write and Replace) to each kind of thing a
// path can name: a symbolic link must be written through to its final
// target and kept; anything that is not a regular file must be refused
// and left as it was.
func TestWriteDestinations(t *testing.T) {
	type check func(t *testing.T, dir string)
	content := func(name, want string) check {
		return func(t *testing.T, dir string) {
			t.Helper()
			if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(got) != want {
				t.Errorf("%s holds %q (%v), want %q", name, got, err, want)
			}
		}
	}
	isLink := func(name, to string) check {
		return func(t *testing.T, dir string) {
			t.Helper()
			if got, err := os.Readlink(filepath.Join(dir, name)); err != nil || (to != "" && got != to) {
				t.Errorf("%s: link to %q (%v), want the link to %q kept", name, got, err, to)
			}
		}
	}
	mode := func(name string, want fs.FileMode) check {
		return func(t *testing.T, dir string) {
			t.Helper()
			fi, err := os.Lstat(filepath.Join(dir, name))
			if err != nil || fi.Mode().Type() != want {
				t.Errorf("%s: type %v (%v), want %v left in place", name, fi.Mode().Type(), err, want)
			}
		}
	}
	fifo := func(name string) func(t *testing.T, dir string) {
		return func(t *testing.T, dir string) {
			if err := syscall.Mkfifo(filepath.Join(dir, name), 0o644); err != nil {
				t.Skipf("mkfifo: %v", err)
			}
		}
	}
	for _, tc := range []struct {
		name   string
		setup  func(t *testing.T, dir string)
		path   string // written, relative to the directory
		errHas string // "" for success
		checks []check
	}{
		{"new file", func(*testing.T, string) {}, "out", "", []check{content("out", "new")}},
		{"symlink to a file", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, "real"), []byte("old"), 0o644)
			os.Symlink("real", filepath.Join(dir, "out"))
		}, "out", "", []check{isLink("out", "real"), content("real", "new")}},
		{"chain of links into a subdirectory", func(t *testing.T, dir string) {
			os.Mkdir(filepath.Join(dir, "sub"), 0o755)
			os.WriteFile(filepath.Join(dir, "sub", "real"), []byte("old"), 0o644)
			os.Symlink("real", filepath.Join(dir, "sub", "l2"))
			os.Symlink(filepath.Join(dir, "sub", "l2"), filepath.Join(dir, "out"))
		}, "out", "", []check{isLink("out", ""), isLink("sub/l2", "real"), content("sub/real", "new")}},
		{"dangling symlink", func(t *testing.T, dir string) {
			os.Symlink("later", filepath.Join(dir, "out"))
		}, "out", "", []check{isLink("out", "later"), content("later", "new")}},
		{"link through a linked directory and ..", func(t *testing.T, dir string) {
			os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755)
			os.Symlink(filepath.Join(dir, "a", "b"), filepath.Join(dir, "lb"))
			os.Symlink("lb/../real", filepath.Join(dir, "out")) // the kernel's ".." is a/, not dir/
		}, "out", "", []check{isLink("out", "lb/../real"), content("a/real", "new")}},
		{"named pipe", fifo("out"), "out", "is a named pipe", []check{mode("out", fs.ModeNamedPipe)}},
		{"symlink to a named pipe", func(t *testing.T, dir string) {
			fifo("p")(t, dir)
			os.Symlink("p", filepath.Join(dir, "out"))
		}, "out", "which is a named pipe", []check{isLink("out", "p"), mode("p", fs.ModeNamedPipe)}},
		{"symlink to /dev/null", func(t *testing.T, dir string) {
			os.Symlink("/dev/null", filepath.Join(dir, "out"))
		}, "out", "links to /dev/null, which is a character device", []check{isLink("out", "/dev/null")}},
		{"device node", func(t *testing.T, dir string) {
			// The same numbers as /dev/null; needs CAP_MKNOD.
			if err := syscall.Mknod(filepath.Join(dir, "out"), syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
				t.Skipf("mknod: %v", err)
			}
		}, "out", "is a character device", []check{mode("out", fs.ModeDevice|fs.ModeCharDevice)}},
		{"socket", func(t *testing.T, dir string) {
			l, err := net.Listen("unix", filepath.Join(dir, "out"))
			if err != nil {
				t.Skipf("listen: %v", err)
			}
			t.Cleanup(func() { l.Close() })
		}, "out", "is a socket", []check{mode("out", fs.ModeSocket)}},
		{"directory", func(t *testing.T, dir string) {
			os.Mkdir(filepath.Join(dir, "out"), 0o755)
		}, "out", "is a directory", []check{mode("out", fs.ModeDir)}},
		{"symlink loop", func(t *testing.T, dir string) {
			os.Symlink("b", filepath.Join(dir, "out"))
			os.Symlink("out", filepath.Join(dir, "b"))
		}, "out", "too many levels of symbolic links", []check{isLink("out", "b")}},
	} {
		for _, via := range []string{"Write", "Replace"} {
			t.Run(tc.name+"/"+via, func(t *testing.T) {
				dir := t.TempDir()
				tc.setup(t, dir)
				path := filepath.Join(dir, tc.path)
				var err error
				if via == "Write" {
					err = WriteFile(path, []byte("new"))
				} else {
					src := filepath.Join(t.TempDir(), "staged")
					os.WriteFile(src, []byte("new"), 0o644)
					err = Replace(src, path)
				}
				switch {
				case tc.errHas == "" && err != nil:
					t.Fatalf("error %v", err)
				case tc.errHas != "" && (err == nil || !strings.Contains(err.Error(), tc.errHas)):
					t.Fatalf("error %v, want one saying %q", err, tc.errHas)
				case tc.errHas != "" && tc.name != "symlink loop" && !errors.Is(err, ErrNotRegular):
					t.Errorf("error %v does not wrap ErrNotRegular", err)
				}
				for _, c := range tc.checks {
					c(t, dir)
				}
				top, _ := filepath.Glob(filepath.Join(dir, ".*.tmp-*"))
				sub, _ := filepath.Glob(filepath.Join(dir, "*", ".*.tmp-*"))
				if es := append(top, sub...); len(es) > 0 {
					t.Errorf("temporary files left: %v", es)
				}
			})
		}
	}
}
