// Run-time binding of the CUDA driver, NVRTC and cuBLASLt; see shim.h.
#include "shim.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

void *pxcu_dlopen(const char *path, int global, const char **err) {
	void *h = dlopen(path, RTLD_NOW | (global ? RTLD_GLOBAL : RTLD_LOCAL));
	if (!h && err) *err = dlerror();
	return h;
}

void pxcu_free(void *p) { free(p); }

// ---- driver ----

static CUresult (*p_cuInit)(unsigned);
static CUresult (*p_cuDriverGetVersion)(int *);
static CUresult (*p_cuDeviceGetCount)(int *);
static CUresult (*p_cuDeviceGet)(CUdevice *, int);
static CUresult (*p_cuDeviceGetName)(char *, int, CUdevice);
static CUresult (*p_cuDeviceTotalMem)(size_t *, CUdevice);
static CUresult (*p_cuDeviceGetAttribute)(int *, int, CUdevice);
static CUresult (*p_cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
static CUresult (*p_cuDevicePrimaryCtxRelease)(CUdevice);
static CUresult (*p_cuCtxSetCurrent)(CUcontext);
static CUresult (*p_cuStreamCreate)(CUstream *, unsigned);
static CUresult (*p_cuStreamDestroy)(CUstream);
static CUresult (*p_cuStreamSynchronize)(CUstream);
static CUresult (*p_cuMemAlloc)(CUdeviceptr *, size_t);
static CUresult (*p_cuMemFree)(CUdeviceptr);
static CUresult (*p_cuMemGetInfo)(size_t *, size_t *);
static CUresult (*p_cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
static CUresult (*p_cuMemsetD32Async)(CUdeviceptr, unsigned int, size_t, CUstream);
static CUresult (*p_cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
static CUresult (*p_cuMemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
static CUresult (*p_cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
static CUresult (*p_cuModuleLoadData)(CUmodule *, const void *);
static CUresult (*p_cuModuleUnload)(CUmodule);
static CUresult (*p_cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
static CUresult (*p_cuFuncSetAttribute)(CUfunction, int, int);
static CUresult (*p_cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                    unsigned, unsigned, CUstream, void **, void **);
// cuLaunchKernelEx (CUDA 12; optional: launches with attributes, used for
// programmatic dependent launch) takes a CUlaunchConfig, declared here
// with cuda.h's layout: CUlaunchAttribute is an int id, 4 bytes of padding
// and a 64-byte value union; CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
// is 6, its value the int programmaticStreamSerializationAllowed.
typedef struct {
	int id;
	char pad[4];
	union {
		char bytes[64];
		int i;
	} value;
} pxcu_launch_attr;
typedef struct {
	unsigned gx, gy, gz, bx, by, bz, smem;
	CUstream stream;
	pxcu_launch_attr *attrs;
	unsigned nattrs;
} pxcu_launch_config;
static CUresult (*p_cuLaunchKernelEx)(const pxcu_launch_config *, CUfunction, void **, void **);
static CUresult (*p_cuEventCreate)(CUevent *, unsigned);
static CUresult (*p_cuEventDestroy)(CUevent);
static CUresult (*p_cuEventRecord)(CUevent, CUstream);
static CUresult (*p_cuEventSynchronize)(CUevent);
static CUresult (*p_cuEventElapsedTime)(float *, CUevent, CUevent);
static CUresult (*p_cuGetErrorString)(CUresult, const char **);
// CUDA graphs (optional: recording is refused without them).
static CUresult (*p_cuStreamBeginCapture)(CUstream, int);
static CUresult (*p_cuStreamEndCapture)(CUstream, void **);
static CUresult (*p_cuGraphInstantiate)(void **, void *, unsigned long long);
static CUresult (*p_cuGraphLaunch)(void *, CUstream);
static CUresult (*p_cuGraphExecDestroy)(void *);
static CUresult (*p_cuGraphDestroy)(void *);
static CUresult (*p_cuTensorMapEncodeTiled)(void *, int, unsigned, void *, const unsigned long long *,
                                            const unsigned long long *, const unsigned *, const unsigned *, int, int,
                                            int, int);

// sym looks up the first of up to three names that the library exports:
// the versioned ABI that cuda.h maps a name to first, then older ones.
static void *sym(void *lib, const char *a, const char *b, const char *c) {
	void *p = dlsym(lib, a);
	if (!p && b) p = dlsym(lib, b);
	if (!p && c) p = dlsym(lib, c);
	return p;
}

#define BIND(var, a, b, c)                      \
	do {                                        \
		*(void **)(&var) = sym(lib, a, b, c);   \
		if (!var) return a;                     \
	} while (0)

const char *pxcu_bind_cuda(void *lib) {
	BIND(p_cuInit, "cuInit", 0, 0);
	BIND(p_cuDriverGetVersion, "cuDriverGetVersion", 0, 0);
	BIND(p_cuDeviceGetCount, "cuDeviceGetCount", 0, 0);
	BIND(p_cuDeviceGet, "cuDeviceGet", 0, 0);
	BIND(p_cuDeviceGetName, "cuDeviceGetName", 0, 0);
	BIND(p_cuDeviceTotalMem, "cuDeviceTotalMem_v2", "cuDeviceTotalMem", 0);
	BIND(p_cuDeviceGetAttribute, "cuDeviceGetAttribute", 0, 0);
	BIND(p_cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 0, 0);
	BIND(p_cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease", 0);
	BIND(p_cuCtxSetCurrent, "cuCtxSetCurrent", 0, 0);
	BIND(p_cuStreamCreate, "cuStreamCreate", 0, 0);
	BIND(p_cuStreamDestroy, "cuStreamDestroy_v2", "cuStreamDestroy", 0);
	BIND(p_cuStreamSynchronize, "cuStreamSynchronize", 0, 0);
	BIND(p_cuMemAlloc, "cuMemAlloc_v2", 0, 0);
	BIND(p_cuMemFree, "cuMemFree_v2", 0, 0);
	BIND(p_cuMemGetInfo, "cuMemGetInfo_v2", 0, 0);
	BIND(p_cuMemsetD8Async, "cuMemsetD8Async", 0, 0);
	BIND(p_cuMemsetD32Async, "cuMemsetD32Async", 0, 0);
	BIND(p_cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", 0, 0);
	BIND(p_cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", 0, 0);
	BIND(p_cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", 0, 0);
	BIND(p_cuModuleLoadData, "cuModuleLoadData", 0, 0);
	BIND(p_cuModuleUnload, "cuModuleUnload", 0, 0);
	BIND(p_cuModuleGetFunction, "cuModuleGetFunction", 0, 0);
	BIND(p_cuFuncSetAttribute, "cuFuncSetAttribute", 0, 0);
	BIND(p_cuLaunchKernel, "cuLaunchKernel", 0, 0);
	BIND(p_cuEventCreate, "cuEventCreate", 0, 0);
	BIND(p_cuEventDestroy, "cuEventDestroy_v2", "cuEventDestroy", 0);
	BIND(p_cuEventRecord, "cuEventRecord", 0, 0);
	BIND(p_cuEventSynchronize, "cuEventSynchronize", 0, 0);
	BIND(p_cuEventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime", 0);
	BIND(p_cuGetErrorString, "cuGetErrorString", 0, 0);
	// optional (CUDA 12 drivers): launches are plain (no PDL) without it
	*(void **)(&p_cuLaunchKernelEx) = sym(lib, "cuLaunchKernelEx", 0, 0);
	// optional (CUDA 12 drivers): the TMA kernels are skipped without it
	*(void **)(&p_cuTensorMapEncodeTiled) = sym(lib, "cuTensorMapEncodeTiled", 0, 0);
	// optional (CUDA 11.4+ drivers): graphs are refused without them
	*(void **)(&p_cuStreamBeginCapture) = sym(lib, "cuStreamBeginCapture_v2", "cuStreamBeginCapture", 0);
	*(void **)(&p_cuStreamEndCapture) = sym(lib, "cuStreamEndCapture", 0, 0);
	*(void **)(&p_cuGraphInstantiate) = sym(lib, "cuGraphInstantiateWithFlags", 0, 0);
	*(void **)(&p_cuGraphLaunch) = sym(lib, "cuGraphLaunch", 0, 0);
	*(void **)(&p_cuGraphExecDestroy) = sym(lib, "cuGraphExecDestroy", 0, 0);
	*(void **)(&p_cuGraphDestroy) = sym(lib, "cuGraphDestroy", 0, 0);
	return 0;
}

CUresult pxcu_init(void) { return p_cuInit(0); }
CUresult pxcu_driver_version(int *v) { return p_cuDriverGetVersion(v); }
CUresult pxcu_device_count(int *n) { return p_cuDeviceGetCount(n); }
CUresult pxcu_device_get(CUdevice *d, int ordinal) { return p_cuDeviceGet(d, ordinal); }
CUresult pxcu_device_name(char *name, int len, CUdevice d) { return p_cuDeviceGetName(name, len, d); }
CUresult pxcu_device_mem(size_t *bytes, CUdevice d) { return p_cuDeviceTotalMem(bytes, d); }
CUresult pxcu_device_attr(int *v, int attr, CUdevice d) { return p_cuDeviceGetAttribute(v, attr, d); }
CUresult pxcu_ctx_retain(CUcontext *ctx, CUdevice d) { return p_cuDevicePrimaryCtxRetain(ctx, d); }
CUresult pxcu_ctx_release(CUdevice d) { return p_cuDevicePrimaryCtxRelease(d); }

#define CUR(ctx)                                   \
	do {                                           \
		CUresult r_ = p_cuCtxSetCurrent(ctx);      \
		if (r_) return r_;                         \
	} while (0)

CUresult pxcu_stream_create(CUcontext ctx, CUstream *s) {
	CUR(ctx);
	return p_cuStreamCreate(s, 1 /* CU_STREAM_NON_BLOCKING */);
}
CUresult pxcu_stream_destroy(CUcontext ctx, CUstream s) {
	CUR(ctx);
	return p_cuStreamDestroy(s);
}
CUresult pxcu_stream_sync(CUcontext ctx, CUstream s) {
	CUR(ctx);
	return p_cuStreamSynchronize(s);
}
CUresult pxcu_mem_alloc(CUcontext ctx, CUdeviceptr *p, size_t n) {
	CUR(ctx);
	return p_cuMemAlloc(p, n);
}
CUresult pxcu_mem_free(CUcontext ctx, CUdeviceptr p) {
	CUR(ctx);
	return p_cuMemFree(p);
}
CUresult pxcu_mem_info(CUcontext ctx, size_t *free_b, size_t *total_b) {
	CUR(ctx);
	return p_cuMemGetInfo(free_b, total_b);
}
CUresult pxcu_memset8(CUcontext ctx, CUdeviceptr p, unsigned char v, size_t n, CUstream s) {
	CUR(ctx);
	return p_cuMemsetD8Async(p, v, n, s);
}
CUresult pxcu_memset32(CUcontext ctx, CUdeviceptr p, unsigned int v, size_t n, CUstream s) {
	CUR(ctx);
	return p_cuMemsetD32Async(p, v, n, s);
}
CUresult pxcu_htod(CUcontext ctx, CUdeviceptr dst, const void *src, size_t n, CUstream s) {
	CUR(ctx);
	// From pageable memory the driver stages the bytes before returning, so
	// the Go buffer may be reused at once; the copy is ordered on s.
	return p_cuMemcpyHtoDAsync(dst, src, n, s);
}
CUresult pxcu_dtoh(CUcontext ctx, void *dst, CUdeviceptr src, size_t n, CUstream s) {
	CUR(ctx);
	CUresult r = p_cuMemcpyDtoHAsync(dst, src, n, s);
	if (r) return r;
	return p_cuStreamSynchronize(s);
}
CUresult pxcu_dtod(CUcontext ctx, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
	CUR(ctx);
	return p_cuMemcpyDtoDAsync(dst, src, n, s);
}
CUresult pxcu_module_load(CUcontext ctx, CUmodule *m, const void *image) {
	CUR(ctx);
	return p_cuModuleLoadData(m, image);
}
CUresult pxcu_module_unload(CUcontext ctx, CUmodule m) {
	CUR(ctx);
	return p_cuModuleUnload(m);
}
CUresult pxcu_module_function(CUcontext ctx, CUfunction *f, CUmodule m, const char *name) {
	CUR(ctx);
	return p_cuModuleGetFunction(f, m, name);
}
int pxcu_has_tensor_map(void) { return p_cuTensorMapEncodeTiled != 0; }
CUresult pxcu_tensor_map(CUcontext ctx, void *out, int dtype, unsigned rank, unsigned long long addr,
                         const unsigned long long *dims, const unsigned long long *strides, const unsigned *box,
                         int swizzle) {
	static const unsigned es[5] = {1, 1, 1, 1, 1};
	if (!p_cuTensorMapEncodeTiled) return 500; // CUDA_ERROR_NOT_FOUND
	CUR(ctx); // the encoder checks the calling thread's context
	// no interleave, L2 promotion of 128 bytes, out-of-bounds elements read as zero
	return p_cuTensorMapEncodeTiled(out, dtype, rank, (void *)addr, dims, strides, box, es, 0, swizzle, 2, 0);
}
CUresult pxcu_func_set_smem(CUcontext ctx, CUfunction f, int bytes) {
	CUR(ctx);
	return p_cuFuncSetAttribute(f, 8 /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */, bytes);
}
CUresult pxcu_launch(CUcontext ctx, CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                   unsigned bx, unsigned by, unsigned bz, unsigned smem, CUstream s,
                   void *args, const int *offsets, int nargs) {
	CUR(ctx);
	void *params[64];
	if (nargs > 64) return 1; // CUDA_ERROR_INVALID_VALUE
	for (int i = 0; i < nargs; i++) params[i] = (char *)args + offsets[i];
	return p_cuLaunchKernel(f, gx, gy, gz, bx, by, bz, smem, s, params, 0);
}
int pxcu_has_launch_ex(void) { return p_cuLaunchKernelEx != 0; }
CUresult pxcu_launch_pdl(CUcontext ctx, CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                         unsigned bx, unsigned by, unsigned bz, unsigned smem, CUstream s,
                         void *args, const int *offsets, int nargs) {
	if (!p_cuLaunchKernelEx) return 500; // CUDA_ERROR_NOT_FOUND
	CUR(ctx);
	void *params[64];
	if (nargs > 64) return 1; // CUDA_ERROR_INVALID_VALUE
	for (int i = 0; i < nargs; i++) params[i] = (char *)args + offsets[i];
	pxcu_launch_attr attr;
	memset(&attr, 0, sizeof attr);
	attr.id = 6; // CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
	attr.value.i = 1;
	pxcu_launch_config cfg = {gx, gy, gz, bx, by, bz, smem, s, &attr, 1};
	return p_cuLaunchKernelEx(&cfg, f, params, 0);
}
CUresult pxcu_event_create(CUcontext ctx, CUevent *e) {
	CUR(ctx);
	return p_cuEventCreate(e, 0);
}
CUresult pxcu_event_destroy(CUcontext ctx, CUevent e) {
	CUR(ctx);
	return p_cuEventDestroy(e);
}
CUresult pxcu_event_record(CUcontext ctx, CUevent e, CUstream s) {
	CUR(ctx);
	return p_cuEventRecord(e, s);
}
CUresult pxcu_event_sync(CUcontext ctx, CUevent e) {
	CUR(ctx);
	return p_cuEventSynchronize(e);
}
CUresult pxcu_event_elapsed(CUcontext ctx, float *ms, CUevent a, CUevent b) {
	CUR(ctx);
	return p_cuEventElapsedTime(ms, a, b);
}
const char *pxcu_error_string(CUresult r) {
	const char *s = 0;
	if (p_cuGetErrorString && p_cuGetErrorString(r, &s) == 0 && s) return s;
	return "unknown CUDA error";
}

// ---- NVRTC ----

typedef void *nvrtcProgram;
static int (*p_nvrtcVersion)(int *, int *);
static int (*p_nvrtcGetNumSupportedArchs)(int *);
static int (*p_nvrtcGetSupportedArchs)(int *);
static int (*p_nvrtcCreateProgram)(nvrtcProgram *, const char *, const char *, int, const char *const *,
                                   const char *const *);
static int (*p_nvrtcDestroyProgram)(nvrtcProgram *);
static int (*p_nvrtcCompileProgram)(nvrtcProgram, int, const char *const *);
static int (*p_nvrtcGetProgramLogSize)(nvrtcProgram, size_t *);
static int (*p_nvrtcGetProgramLog)(nvrtcProgram, char *);
static int (*p_nvrtcGetPTXSize)(nvrtcProgram, size_t *);
static int (*p_nvrtcGetPTX)(nvrtcProgram, char *);
static int (*p_nvrtcGetCUBINSize)(nvrtcProgram, size_t *);
static int (*p_nvrtcGetCUBIN)(nvrtcProgram, char *);
static const char *(*p_nvrtcGetErrorString)(int);

const char *pxcu_bind_nvrtc(void *lib) {
	BIND(p_nvrtcVersion, "nvrtcVersion", 0, 0);
	BIND(p_nvrtcGetNumSupportedArchs, "nvrtcGetNumSupportedArchs", 0, 0);
	BIND(p_nvrtcGetSupportedArchs, "nvrtcGetSupportedArchs", 0, 0);
	BIND(p_nvrtcCreateProgram, "nvrtcCreateProgram", 0, 0);
	BIND(p_nvrtcDestroyProgram, "nvrtcDestroyProgram", 0, 0);
	BIND(p_nvrtcCompileProgram, "nvrtcCompileProgram", 0, 0);
	BIND(p_nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize", 0, 0);
	BIND(p_nvrtcGetProgramLog, "nvrtcGetProgramLog", 0, 0);
	BIND(p_nvrtcGetPTXSize, "nvrtcGetPTXSize", 0, 0);
	BIND(p_nvrtcGetPTX, "nvrtcGetPTX", 0, 0);
	BIND(p_nvrtcGetCUBINSize, "nvrtcGetCUBINSize", 0, 0);
	BIND(p_nvrtcGetCUBIN, "nvrtcGetCUBIN", 0, 0);
	BIND(p_nvrtcGetErrorString, "nvrtcGetErrorString", 0, 0);
	return 0;
}

int pxcu_nvrtc_version(int *major, int *minor) { return p_nvrtcVersion(major, minor); }

int pxcu_nvrtc_archs(int *archs, int cap) {
	int n = 0;
	if (p_nvrtcGetNumSupportedArchs(&n) != 0 || n <= 0) return 0;
	if (n > cap) {
		int *all = (int *)malloc(sizeof(int) * (size_t)n);
		if (!all) return 0;
		p_nvrtcGetSupportedArchs(all);
		memcpy(archs, all + (n - cap), sizeof(int) * (size_t)cap);
		free(all);
		return cap;
	}
	p_nvrtcGetSupportedArchs(archs);
	return n;
}

const char *pxcu_nvrtc_error(int r) { return p_nvrtcGetErrorString ? p_nvrtcGetErrorString(r) : "NVRTC error"; }

int pxcu_nvrtc_compile(const char *src, const char *name, int nheaders, const char **headers,
                     const char **include_names, int nopts, const char **opts, int cubin,
                     char **out, size_t *outsize, char **log) {
	nvrtcProgram prog = 0;
	*out = 0;
	*outsize = 0;
	*log = 0;
	int r = p_nvrtcCreateProgram(&prog, src, name, nheaders, headers, include_names);
	if (r) return r;
	int cr = p_nvrtcCompileProgram(prog, nopts, opts);
	size_t ls = 0;
	if (p_nvrtcGetProgramLogSize(prog, &ls) == 0 && ls > 1) {
		*log = (char *)malloc(ls);
		if (*log && p_nvrtcGetProgramLog(prog, *log) != 0) (*log)[0] = 0;
	}
	if (cr == 0) {
		size_t n = 0;
		r = cubin ? p_nvrtcGetCUBINSize(prog, &n) : p_nvrtcGetPTXSize(prog, &n);
		if (r == 0) {
			*out = (char *)malloc(n);
			if (!*out) {
				r = 5; // NVRTC_ERROR_OUT_OF_MEMORY? report as a generic failure
			} else {
				r = cubin ? p_nvrtcGetCUBIN(prog, *out) : p_nvrtcGetPTX(prog, *out);
				*outsize = n;
			}
		}
	} else {
		r = cr;
	}
	p_nvrtcDestroyProgram(&prog);
	return r;
}

// ---- cuBLASLt ----

typedef struct {
	uint64_t data[8];
} ltAlgo;
typedef struct {
	ltAlgo algo;
	size_t workspaceSize;
	int state;
	float wavesCount;
	int reserved[4];
} ltHeuristic;

static int (*p_ltCreate)(void **);
static int (*p_ltDestroy)(void *);
static size_t (*p_ltGetVersion)(void);
static int (*p_ltMatmulDescCreate)(void **, int, int);
static int (*p_ltMatmulDescDestroy)(void *);
static int (*p_ltMatmulDescSetAttribute)(void *, int, const void *, size_t);
static int (*p_ltMatrixLayoutCreate)(void **, int, uint64_t, uint64_t, int64_t);
static int (*p_ltMatrixLayoutDestroy)(void *);
static int (*p_ltMatrixLayoutSetAttribute)(void *, int, const void *, size_t);
static int (*p_ltMatmulPreferenceCreate)(void **);
static int (*p_ltMatmulPreferenceDestroy)(void *);
static int (*p_ltMatmulPreferenceSetAttribute)(void *, int, const void *, size_t);
static int (*p_ltMatmulAlgoGetHeuristic)(void *, void *, void *, void *, void *, void *, void *, int,
                                         ltHeuristic *, int *);
static int (*p_ltMatmul)(void *, void *, const void *, const void *, void *, const void *, void *,
                         const void *, const void *, void *, void *, void *, const void *, void *, size_t,
                         CUstream);

const char *pxcu_bind_lt(void *lib) {
	BIND(p_ltCreate, "cublasLtCreate", 0, 0);
	BIND(p_ltDestroy, "cublasLtDestroy", 0, 0);
	BIND(p_ltGetVersion, "cublasLtGetVersion", 0, 0);
	BIND(p_ltMatmulDescCreate, "cublasLtMatmulDescCreate", 0, 0);
	BIND(p_ltMatmulDescDestroy, "cublasLtMatmulDescDestroy", 0, 0);
	BIND(p_ltMatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute", 0, 0);
	BIND(p_ltMatrixLayoutCreate, "cublasLtMatrixLayoutCreate", 0, 0);
	BIND(p_ltMatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy", 0, 0);
	BIND(p_ltMatrixLayoutSetAttribute, "cublasLtMatrixLayoutSetAttribute", 0, 0);
	BIND(p_ltMatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate", 0, 0);
	BIND(p_ltMatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy", 0, 0);
	BIND(p_ltMatmulPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute", 0, 0);
	BIND(p_ltMatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic", 0, 0);
	BIND(p_ltMatmul, "cublasLtMatmul", 0, 0);
	return 0;
}

int pxcu_lt_create(CUcontext ctx, void **handle) {
	CUresult r = p_cuCtxSetCurrent(ctx);
	if (r) return 1000 + r;
	return p_ltCreate(handle);
}
int pxcu_lt_destroy(void *handle) { return p_ltDestroy(handle); }
int pxcu_lt_version(void) { return (int)p_ltGetVersion(); }

// Attribute numbers of cublasLt.h.
enum {
	DESC_TRANSA = 3,
	DESC_TRANSB = 4,
	LAYOUT_BATCH_COUNT = 5,
	LAYOUT_STRIDED_BATCH_OFFSET = 6,
	PREF_MAX_WORKSPACE_BYTES = 1,
	PREF_MIN_ALIGNMENT_A_BYTES = 5,
	PREF_MIN_ALIGNMENT_B_BYTES = 6,
	PREF_MIN_ALIGNMENT_C_BYTES = 7,
	PREF_MIN_ALIGNMENT_D_BYTES = 8,
};

typedef struct {
	void *desc, *la, *lb, *lc;
} ltOp;

static void lt_free(ltOp *o) {
	if (o->desc) p_ltMatmulDescDestroy(o->desc);
	if (o->la) p_ltMatrixLayoutDestroy(o->la);
	if (o->lb) p_ltMatrixLayoutDestroy(o->lb);
	if (o->lc) p_ltMatrixLayoutDestroy(o->lc);
}

static int lt_layout(void **l, int type, uint64_t rows, uint64_t cols, int64_t ld, int batch, int64_t stride) {
	int r = p_ltMatrixLayoutCreate(l, type, rows, cols, ld);
	if (r) return r;
	if (batch > 1) {
		int32_t b = batch;
		if ((r = p_ltMatrixLayoutSetAttribute(*l, LAYOUT_BATCH_COUNT, &b, sizeof b))) return r;
		if ((r = p_ltMatrixLayoutSetAttribute(*l, LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride))) return r;
	}
	return 0;
}

static int lt_make(const pxcu_gemm *g, ltOp *o) {
	memset(o, 0, sizeof *o);
	int r = p_ltMatmulDescCreate(&o->desc, g->compute, 0 /* CUDA_R_32F scale */);
	if (r) return r;
	int32_t ta = g->transa, tb = g->transb;
	if ((r = p_ltMatmulDescSetAttribute(o->desc, DESC_TRANSA, &ta, sizeof ta))) return r;
	if ((r = p_ltMatmulDescSetAttribute(o->desc, DESC_TRANSB, &tb, sizeof tb))) return r;
	uint64_t ar = g->transa ? g->k : g->m, ac = g->transa ? g->m : g->k;
	uint64_t br = g->transb ? g->n : g->k, bc = g->transb ? g->k : g->n;
	if ((r = lt_layout(&o->la, g->atype, ar, ac, g->lda, g->batch, g->stridea))) return r;
	if ((r = lt_layout(&o->lb, g->btype, br, bc, g->ldb, g->batch, g->strideb))) return r;
	if ((r = lt_layout(&o->lc, g->ctype, g->m, g->n, g->ldc, g->batch, g->stridec))) return r;
	return 0;
}

int pxcu_lt_algo(CUcontext ctx, void *handle, const pxcu_gemm *g, size_t max_ws, void *algo, size_t *ws) {
	int got = 0;
	return pxcu_lt_algos(ctx, handle, g, max_ws, 1, algo, ws, &got);
}

int pxcu_lt_algos(CUcontext ctx, void *handle, const pxcu_gemm *g, size_t max_ws, int want, void *algos, size_t *ws,
                  int *got) {
	CUresult cr = p_cuCtxSetCurrent(ctx);
	if (cr) return 1000 + cr;
	ltOp o;
	int r = lt_make(g, &o);
	void *pref = 0;
	if (!r) r = p_ltMatmulPreferenceCreate(&pref);
	uint64_t mw = max_ws;
	if (!r) r = p_ltMatmulPreferenceSetAttribute(pref, PREF_MAX_WORKSPACE_BYTES, &mw, sizeof mw);
	uint32_t al[3] = {(uint32_t)g->align_a, (uint32_t)g->align_b, (uint32_t)g->align_c};
	if (!r) r = p_ltMatmulPreferenceSetAttribute(pref, PREF_MIN_ALIGNMENT_A_BYTES, &al[0], sizeof al[0]);
	if (!r) r = p_ltMatmulPreferenceSetAttribute(pref, PREF_MIN_ALIGNMENT_B_BYTES, &al[1], sizeof al[1]);
	if (!r) r = p_ltMatmulPreferenceSetAttribute(pref, PREF_MIN_ALIGNMENT_C_BYTES, &al[2], sizeof al[2]);
	if (!r) r = p_ltMatmulPreferenceSetAttribute(pref, PREF_MIN_ALIGNMENT_D_BYTES, &al[2], sizeof al[2]);
	ltHeuristic h[PXCU_LT_MAX_ALGOS];
	int n = 0;
	if (want < 1) want = 1;
	if (want > PXCU_LT_MAX_ALGOS) want = PXCU_LT_MAX_ALGOS;
	if (!r) r = p_ltMatmulAlgoGetHeuristic(handle, o.desc, o.la, o.lb, o.lc, o.lc, pref, want, h, &n);
	if (!r && n < 1) r = 15; // CUBLAS_STATUS_NOT_SUPPORTED
	*got = 0;
	for (int i = 0; !r && i < n; i++) {
		if (h[i].state != 0) continue;
		memcpy((char *)algos + (size_t)*got * sizeof(ltAlgo), &h[i].algo, sizeof(ltAlgo));
		ws[*got] = h[i].workspaceSize;
		(*got)++;
	}
	if (!r && *got < 1) r = 15;
	if (pref) p_ltMatmulPreferenceDestroy(pref);
	lt_free(&o);
	return r;
}

int pxcu_lt_matmul(CUcontext ctx, void *handle, const pxcu_gemm *g, const void *algo,
                 CUdeviceptr a, CUdeviceptr b, CUdeviceptr c, CUdeviceptr ws, size_t wssize, CUstream s) {
	return pxcu_lt_matmul_cd(ctx, handle, g, algo, a, b, c, c, ws, wssize, s);
}

int pxcu_lt_matmul_cd(CUcontext ctx, void *handle, const pxcu_gemm *g, const void *algo, CUdeviceptr a,
                      CUdeviceptr b, CUdeviceptr c, CUdeviceptr dst, CUdeviceptr ws, size_t wssize, CUstream s) {
	CUresult cr = p_cuCtxSetCurrent(ctx);
	if (cr) return 1000 + cr;
	ltOp o;
	int r = lt_make(g, &o);
	if (!r)
		r = p_ltMatmul(handle, o.desc, &g->alpha, (const void *)a, o.la, (const void *)b, o.lb, &g->beta,
		               (const void *)c, o.lc, (void *)dst, o.lc, algo, (void *)ws, wssize, s);
	lt_free(&o);
	return r;
}

// ---- graphs ----

int pxcu_has_graphs(void) {
	return p_cuStreamBeginCapture && p_cuStreamEndCapture && p_cuGraphInstantiate && p_cuGraphLaunch &&
	       p_cuGraphExecDestroy && p_cuGraphDestroy;
}

// Relaxed mode (2): the recording thread may still make calls that are
// unsafe during a capture, such as cuMemAlloc for a first-time scratch.
CUresult pxcu_capture_begin(CUcontext ctx, CUstream s) {
	CUR(ctx);
	return p_cuStreamBeginCapture(s, 2);
}

// pxcu_capture_end ends the capture and instantiates it; on success *exec
// holds the executable graph (the template graph is destroyed).
CUresult pxcu_capture_end(CUcontext ctx, CUstream s, void **exec) {
	CUR(ctx);
	void *g = 0;
	CUresult r = p_cuStreamEndCapture(s, &g);
	if (r) return r;
	r = p_cuGraphInstantiate(exec, g, 0);
	p_cuGraphDestroy(g);
	return r;
}

CUresult pxcu_graph_launch(CUcontext ctx, void *exec, CUstream s) {
	CUR(ctx);
	return p_cuGraphLaunch(exec, s);
}

CUresult pxcu_graph_free(CUcontext ctx, void *exec) {
	CUR(ctx);
	return p_cuGraphExecDestroy(exec);
}

// ---- for the other shims of this package (nccl_shim.c) ----

CUresult pxcu_ctx_set_current(CUcontext ctx) { return p_cuCtxSetCurrent(ctx); }
