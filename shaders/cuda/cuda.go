// Package cuda holds the CUDA C++ kernels of the CUDA backend (engine/cuda)
// as embedded text. They need no CUDA toolkit to build: the backend compiles
// them with NVRTC for the GPU in hand at first use and caches the result.
//
// Each .cu file is one module; .cuh files are headers any module may
// include by name.
package cuda

import "embed"

// FS holds the kernel sources (*.cu) and their headers (*.cuh).
//
//go:embed *.cu *.cuh
var FS embed.FS

//go:generate sh -c "go run ./internal/wgmmagen > wgmma.cuh"
