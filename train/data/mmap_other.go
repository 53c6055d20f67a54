//go:build !(linux || darwin || freebsd)

package data

// mapFile reads path into memory (no mapping on this system).
func mapFile(path string) ([]byte, func(), error) { return readWhole(path) }

// keep does nothing: the bytes are ordinary memory.
func (s *Shard) keep(b []byte, unmap func()) {}
