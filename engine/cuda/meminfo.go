//go:build cgo

package cuda

import "github.com/parallax-engine/parallax/engine"

// The CUDA device reports its free memory (cuMemGetInfo) to
// engine.MemoryOf, which model loading and training check before they
// allocate.
var _ engine.MemoryReporter = (*Device)(nil)
