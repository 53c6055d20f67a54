// Package atomicfile replaces files so that readers see either the old
// file or the complete new one, never a partial write: checkpoints,
// configs, tokenizers, token shards, plots and reports all go through it.
//
// A destination that is a symbolic link is written through: the file the
// link finally points to is replaced and the link is kept. A destination
// that exists and is not a regular file (a directory, named pipe, device
// or socket) is refused with an error wrapping ErrNotRegular, since
// renaming a regular file over it would destroy it (as root, a write to
// /dev/null would otherwise replace the device node).
package atomicfile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"
)

// ErrNotRegular is wrapped by the errors of Write, Replace and Target for a
// destination that exists and is not a regular file.
var ErrNotRegular = errors.New("not a regular file")

// maxLinks bounds the symbolic links followed, as the kernel's ELOOP does.
const maxLinks = 40

// Target returns the file a write to path replaces: path itself, or, when
// path is a symbolic link (or a chain of them), the file the last link
// names, which need not exist yet. It fails with an error wrapping
// ErrNotRegular when that file exists and is not a regular file. Errors
// carry no path but the link target's, as Write's.
func Target(path string) (string, error) {
	p := path
	for range maxLinks {
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return p, nil
		}
		if err != nil {
			return "", unwrapPath(err)
		}
		m := fi.Mode()
		switch {
		case m.IsRegular():
			return p, nil
		case m&fs.ModeSymlink != 0:
			dest, err := os.Readlink(p)
			if err != nil {
				return "", unwrapPath(err)
			}
			if !strings.HasPrefix(dest, "/") {
				// Relative to the link's directory as the kernel sees it:
				// joined without cleaning, so ".." after a linked
				// directory keeps its meaning.
				dest = dirOf(p) + "/" + dest
			}
			p = dest
		default:
			if p != path {
				return "", fmt.Errorf("links to %s, which is a %s, %w; refusing to replace it", p, kind(m), ErrNotRegular)
			}
			return "", fmt.Errorf("is a %s, %w; refusing to replace it", kind(m), ErrNotRegular)
		}
	}
	return "", fmt.Errorf("too many levels of symbolic links: %w", syscall.ELOOP)
}

// kind names a non-regular file type for an error message.
func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	}
	return "special file"
}

// dirOf is the directory part of p, not cleaned (filepath.Dir would
// resolve ".." lexically, which a linked directory makes wrong).
func dirOf(p string) string {
	i := strings.LastIndexByte(p, '/')
	switch {
	case i < 0:
		return "."
	case i == 0:
		return "/"
	}
	return p[:i]
}

// baseOf is the last element of p.
func baseOf(p string) string { return p[strings.LastIndexByte(p, '/')+1:] }

// unwrapPath drops a PathError's or LinkError's paths (callers name
// their own file).
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}

// Write creates path with what fill writes. The bytes go through a 1 MiB
// buffer into a temporary file in the destination's directory, which is
// made readable by everyone (0644), synced, closed and renamed over the
// destination (path, or the file a symbolic link at path points to; see
// Target); the directory is then synced where the platform allows it. On
// any error the temporary file is removed and the destination is left as
// it was. Errors carry no path (callers add their own context), but a
// failure to create the temporary file names the directory.
func Write(path string, fill func(w io.Writer) error) (err error) {
	dst, err := Target(path)
	if err != nil {
		return err
	}
	return write(dst, fill)
}

// write is Write to a resolved destination.
func write(dst string, fill func(w io.Writer) error) (err error) {
	dir := dirOf(dst)
	f, err := os.CreateTemp(dir, "."+baseOf(dst)+".tmp-*")
	if err != nil {
		return fmt.Errorf("create a temporary file in %s: %w", dir, unwrapPath(err))
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<20)
	if err = fill(bw); err != nil {
		return err
	}
	if err = bw.Flush(); err != nil {
		return err
	}
	if err = f.Chmod(0o644); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(f.Name(), dst); err != nil {
		return unwrapPath(err)
	}
	syncDir(dir)
	return nil
}

// WriteFile is Write of data.
func WriteFile(path string, data []byte) error {
	return Write(path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// Replace moves the complete file src over dst as Write would write it:
// through a symbolic link at dst to its target, refusing a target that is
// not a regular file. A target on another file system (where rename
// cannot reach) gets an atomic copy, after which src is removed. Either
// way dst holds the old file or all of src, never a part.
func Replace(src, dst string) error {
	target, err := Target(dst)
	if err != nil {
		return err
	}
	err = os.Rename(src, target)
	if err == nil {
		syncDir(dirOf(target))
		return nil
	}
	if !errors.Is(err, syscall.EXDEV) {
		return unwrapPath(err)
	}
	in, err := os.Open(src)
	if err != nil {
		return unwrapPath(err)
	}
	defer in.Close()
	if err := write(target, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	}); err != nil {
		return err
	}
	return unwrapPath(os.Remove(src))
}

// syncDir makes a rename in dir durable where the platform supports it; a
// failure only weakens durability, so it is ignored.
func syncDir(dir string) {
	d, err := os.Open(dir)
	if err != nil {
		return
	}
	_ = d.Sync()
	_ = d.Close()
}
