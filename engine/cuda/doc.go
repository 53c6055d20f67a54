// Package cuda is the CUDA backend of the engine, for NVIDIA GPUs (Hopper
// first). Importing it registers the "cuda" backend.
//
// It needs no CUDA toolkit to build: the driver (libcuda.so.1), NVRTC and
// cuBLASLt are opened with dlopen at run time, searched on the default
// library path, LD_LIBRARY_PATH, /usr/local/cuda/lib64 and the nvidia/*/lib
// folders of Python site-packages (PARALLAX_CUDA_LIB_DIRS adds folders); a
// missing one is reported by name. The kernels are the CUDA C++ sources of
// shaders/cuda, compiled by NVRTC for the GPU in hand (sm_90a on Hopper) at
// Open and cached under the user cache folder (PARALLAX_CUDA_CACHE
// overrides it).
//
// The runtime is small: a Device holds the primary context, one stream, a
// caching allocator, the kernel modules and a cuBLASLt handle. Matrix
// products go through cuBLASLt; every other op is a kernel of its own.
// Without cgo the backend still registers and reports that it is
// unavailable. See docs/CUDA.md.
package cuda
