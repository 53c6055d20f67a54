//go:build linux || darwin || freebsd

package data

import (
	"os"
	"runtime"
	"syscall"
)

// mapFile maps path read-only; unmap releases it. An empty file, or one
// the system will not map, is read instead.
func mapFile(path string) ([]byte, func(), error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	size := st.Size()
	if size <= 0 || int64(int(size)) != size {
		return readWhole(path)
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return readWhole(path)
	}
	return b, func() { syscall.Munmap(b) }, nil
}

// keep ties the mapping's lifetime to s: it is released once s is
// unreachable.
func (s *Shard) keep(b []byte, unmap func()) {
	runtime.AddCleanup(s, func(f func()) { f() }, unmap)
}
