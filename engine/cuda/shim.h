// The few CUDA driver, NVRTC and cuBLASLt declarations the backend needs,
// written out here so that building needs no CUDA toolkit: the libraries are
// opened with dlopen at run time and every entry point is looked up with
// dlsym. Types are the ABI types of the C headers (handles are pointers,
// enums are ints). Every wrapper that touches the driver first makes the
// device's context current on the calling OS thread (cuCtxSetCurrent), so Go
// may call from any goroutine on any thread.
#ifndef PARALLAX_CUDA_SHIM_H
#define PARALLAX_CUDA_SHIM_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUstream;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUevent;
typedef unsigned long long CUdeviceptr;

// Library loading: pxcu_dlopen returns a handle or NULL (then *err holds
// dlerror's text, owned by libc). global selects RTLD_GLOBAL.
void *pxcu_dlopen(const char *path, int global, const char **err);

// Binding: each returns NULL on success or the name of the first symbol
// that the library lacks.
const char *pxcu_bind_cuda(void *lib);
const char *pxcu_bind_nvrtc(void *lib);
const char *pxcu_bind_lt(void *lib);

// Driver.
CUresult pxcu_init(void);
CUresult pxcu_driver_version(int *v);
CUresult pxcu_device_count(int *n);
CUresult pxcu_device_get(CUdevice *d, int ordinal);
CUresult pxcu_device_name(char *name, int len, CUdevice d);
CUresult pxcu_device_mem(size_t *bytes, CUdevice d);
CUresult pxcu_device_attr(int *v, int attr, CUdevice d);
CUresult pxcu_ctx_retain(CUcontext *ctx, CUdevice d);
CUresult pxcu_ctx_release(CUdevice d);
CUresult pxcu_stream_create(CUcontext ctx, CUstream *s);
CUresult pxcu_stream_destroy(CUcontext ctx, CUstream s);
CUresult pxcu_stream_sync(CUcontext ctx, CUstream s);
CUresult pxcu_mem_alloc(CUcontext ctx, CUdeviceptr *p, size_t n);
CUresult pxcu_mem_free(CUcontext ctx, CUdeviceptr p);
CUresult pxcu_mem_info(CUcontext ctx, size_t *free_b, size_t *total_b);
CUresult pxcu_memset8(CUcontext ctx, CUdeviceptr p, unsigned char v, size_t n, CUstream s);
CUresult pxcu_memset32(CUcontext ctx, CUdeviceptr p, unsigned int v, size_t n, CUstream s);
CUresult pxcu_htod(CUcontext ctx, CUdeviceptr dst, const void *src, size_t n, CUstream s);
CUresult pxcu_dtoh(CUcontext ctx, void *dst, CUdeviceptr src, size_t n, CUstream s);
CUresult pxcu_dtod(CUcontext ctx, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s);
CUresult pxcu_module_load(CUcontext ctx, CUmodule *m, const void *image);
CUresult pxcu_module_unload(CUcontext ctx, CUmodule m);
CUresult pxcu_module_function(CUcontext ctx, CUfunction *f, CUmodule m, const char *name);
int pxcu_has_tensor_map(void);
// Graphs: record the stream's work once (pxcu_capture_begin/end), replay it
// with pxcu_graph_launch. exec is a CUgraphExec.
int pxcu_has_graphs(void);
CUresult pxcu_capture_begin(CUcontext ctx, CUstream s);
CUresult pxcu_capture_end(CUcontext ctx, CUstream s, void **exec);
CUresult pxcu_graph_launch(CUcontext ctx, void *exec, CUstream s);
CUresult pxcu_graph_free(CUcontext ctx, void *exec);
CUresult pxcu_tensor_map(CUcontext ctx, void *out, int dtype, unsigned rank, unsigned long long addr,
                         const unsigned long long *dims, const unsigned long long *strides, const unsigned *box,
                         int swizzle);
CUresult pxcu_func_set_smem(CUcontext ctx, CUfunction f, int bytes);
CUresult pxcu_launch(CUcontext ctx, CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                   unsigned bx, unsigned by, unsigned bz, unsigned smem, CUstream s,
                   void *args, const int *offsets, int nargs);
// Programmatic dependent launch (engine/cuda/pdl.go): pxcu_launch_pdl is
// pxcu_launch through cuLaunchKernelEx with programmatic stream
// serialization allowed; pxcu_has_launch_ex reports whether the driver has
// cuLaunchKernelEx.
int pxcu_has_launch_ex(void);
CUresult pxcu_launch_pdl(CUcontext ctx, CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                         unsigned bx, unsigned by, unsigned bz, unsigned smem, CUstream s,
                         void *args, const int *offsets, int nargs);
CUresult pxcu_event_create(CUcontext ctx, CUevent *e);
CUresult pxcu_event_destroy(CUcontext ctx, CUevent e);
CUresult pxcu_event_record(CUcontext ctx, CUevent e, CUstream s);
CUresult pxcu_event_sync(CUcontext ctx, CUevent e);
CUresult pxcu_event_elapsed(CUcontext ctx, float *ms, CUevent a, CUevent b);
const char *pxcu_error_string(CUresult r);

// NVRTC. pxcu_nvrtc_compile compiles one source with the given headers and
// options; on success *out (malloc'd, caller frees with pxcu_free) holds a
// CUBIN when cubin is set, else PTX. *log (malloc'd) holds the compiler log.
int pxcu_nvrtc_version(int *major, int *minor);
int pxcu_nvrtc_archs(int *archs, int cap);
int pxcu_nvrtc_compile(const char *src, const char *name, int nheaders, const char **headers,
                     const char **include_names, int nopts, const char **opts, int cubin,
                     char **out, size_t *outsize, char **log);
const char *pxcu_nvrtc_error(int r);
void pxcu_free(void *p);

// cuBLASLt. A matmul in the library's column-major terms:
// D = alpha op(A) op(B) + beta C with C = D, all strided-batched.
int pxcu_lt_create(CUcontext ctx, void **handle);
int pxcu_lt_destroy(void *handle);
int pxcu_lt_version(void);
typedef struct {
	int m, n, k;             // D is m x n, op(A) m x k, op(B) k x n
	int transa, transb;      // 0 = N, 1 = T
	int atype, btype, ctype; // cudaDataType: 0 f32, 2 f16, 14 bf16
	int compute;             // cublasComputeType_t
	long long lda, ldb, ldc;
	long long stridea, strideb, stridec;
	int batch;
	float alpha, beta;
	int align_a, align_b, align_c; // guaranteed byte alignment of the pointers
} pxcu_gemm;
// pxcu_lt_algo picks an algorithm for g (64 opaque bytes into algo) and
// returns the workspace it needs in *ws.
int pxcu_lt_algo(CUcontext ctx, void *handle, const pxcu_gemm *g, size_t max_ws, void *algo, size_t *ws);
// pxcu_lt_algos returns up to want (<= PXCU_LT_MAX_ALGOS) of the
// heuristic's algorithms for g, best first: *got of them, 64 bytes each
// into algos, their workspace sizes into ws.
#define PXCU_LT_MAX_ALGOS 8
int pxcu_lt_algos(CUcontext ctx, void *handle, const pxcu_gemm *g, size_t max_ws, int want, void *algos, size_t *ws,
                  int *got);
int pxcu_lt_matmul(CUcontext ctx, void *handle, const pxcu_gemm *g, const void *algo,
                 CUdeviceptr a, CUdeviceptr b, CUdeviceptr c, CUdeviceptr ws, size_t wssize, CUstream s);
// pxcu_lt_matmul_cd is pxcu_lt_matmul with D = dst apart from C (same
// layout): D = alpha op(A) op(B) + beta C.
int pxcu_lt_matmul_cd(CUcontext ctx, void *handle, const pxcu_gemm *g, const void *algo, CUdeviceptr a,
                      CUdeviceptr b, CUdeviceptr c, CUdeviceptr dst, CUdeviceptr ws, size_t wssize, CUstream s);

// For the package's other shims (nccl_shim.c): make ctx current on the
// calling thread.
CUresult pxcu_ctx_set_current(CUcontext ctx);

#endif
