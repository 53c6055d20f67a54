// Run-time binding of NCCL; see nccl_shim.h.
#include "nccl_shim.h"

#include <dlfcn.h>
#include <string.h>

typedef struct {
	char internal[PXNCCL_ID_BYTES];
} pxncclUniqueId;

static int (*p_ncclGetVersion)(int *);
static int (*p_ncclGetUniqueId)(pxncclUniqueId *);
static int (*p_ncclCommInitRank)(ncclComm_t *, int, pxncclUniqueId, int);
static int (*p_ncclCommFinalize)(ncclComm_t); // NCCL >= 2.14; optional
static int (*p_ncclCommDestroy)(ncclComm_t);
static int (*p_ncclCommAbort)(ncclComm_t);
static int (*p_ncclCommGetAsyncError)(ncclComm_t, int *);
static const char *(*p_ncclGetErrorString)(int);
static const char *(*p_ncclGetLastError)(ncclComm_t); // NCCL >= 2.13; optional
static int (*p_ncclGroupStart)(void);
static int (*p_ncclGroupEnd)(void);
static int (*p_ncclAllReduce)(const void *, void *, size_t, int, int, ncclComm_t, CUstream);
static int (*p_ncclReduce)(const void *, void *, size_t, int, int, int, ncclComm_t, CUstream);
static int (*p_ncclBroadcast)(const void *, void *, size_t, int, int, ncclComm_t, CUstream);
static int (*p_ncclReduceScatter)(const void *, void *, size_t, int, int, ncclComm_t, CUstream);
static int (*p_ncclAllGather)(const void *, void *, size_t, int, ncclComm_t, CUstream);

#define NBIND(var, name)                          \
	do {                                          \
		*(void **)(&var) = dlsym(lib, name);      \
		if (!var) return name;                    \
	} while (0)

const char *pxnccl_bind(void *lib) {
	NBIND(p_ncclGetVersion, "ncclGetVersion");
	NBIND(p_ncclGetUniqueId, "ncclGetUniqueId");
	NBIND(p_ncclCommInitRank, "ncclCommInitRank");
	NBIND(p_ncclCommDestroy, "ncclCommDestroy");
	NBIND(p_ncclCommAbort, "ncclCommAbort");
	NBIND(p_ncclCommGetAsyncError, "ncclCommGetAsyncError");
	NBIND(p_ncclGetErrorString, "ncclGetErrorString");
	NBIND(p_ncclGroupStart, "ncclGroupStart");
	NBIND(p_ncclGroupEnd, "ncclGroupEnd");
	NBIND(p_ncclAllReduce, "ncclAllReduce");
	NBIND(p_ncclReduce, "ncclReduce");
	NBIND(p_ncclBroadcast, "ncclBroadcast");
	NBIND(p_ncclReduceScatter, "ncclReduceScatter");
	NBIND(p_ncclAllGather, "ncclAllGather");
	*(void **)(&p_ncclCommFinalize) = dlsym(lib, "ncclCommFinalize");
	*(void **)(&p_ncclGetLastError) = dlsym(lib, "ncclGetLastError");
	return 0;
}

// A CUDA failure while making the context current is reported as NCCL's
// "unhandled CUDA error" (1), which is what NCCL itself would say.
#define NCUR(ctx)                                         \
	do {                                                  \
		if (ctx && pxcu_ctx_set_current(ctx)) return 1;   \
	} while (0)

int pxnccl_version(int *version) { return p_ncclGetVersion(version); }

int pxnccl_unique_id(char *id) {
	pxncclUniqueId u;
	memset(&u, 0, sizeof u);
	int r = p_ncclGetUniqueId(&u);
	if (!r) memcpy(id, u.internal, PXNCCL_ID_BYTES);
	return r;
}

int pxnccl_init_rank(CUcontext ctx, ncclComm_t *comm, int nranks, const char *id, int rank) {
	NCUR(ctx);
	pxncclUniqueId u;
	memcpy(u.internal, id, PXNCCL_ID_BYTES);
	return p_ncclCommInitRank(comm, nranks, u, rank);
}

int pxnccl_destroy(CUcontext ctx, ncclComm_t comm) {
	NCUR(ctx);
	int r = 0;
	if (p_ncclCommFinalize) r = p_ncclCommFinalize(comm);
	int r2 = p_ncclCommDestroy(comm);
	return r ? r : r2;
}

int pxnccl_abort(ncclComm_t comm) { return p_ncclCommAbort(comm); }

int pxnccl_async_error(ncclComm_t comm, int *async_err) { return p_ncclCommGetAsyncError(comm, async_err); }

const char *pxnccl_error_string(int r) {
	const char *s = p_ncclGetErrorString ? p_ncclGetErrorString(r) : 0;
	return s ? s : "unknown NCCL error";
}

const char *pxnccl_last_error(ncclComm_t comm) {
	const char *s = p_ncclGetLastError ? p_ncclGetLastError(comm) : 0;
	return s ? s : "";
}

int pxnccl_run(CUcontext ctx, ncclComm_t comm, CUstream s, const pxnccl_op *ops, int n, int *failed) {
	NCUR(ctx);
	*failed = -1;
	int r = p_ncclGroupStart();
	if (r) {
		*failed = 0;
		return r;
	}
	for (int i = 0; i < n && !r; i++) {
		const pxnccl_op *o = &ops[i];
		const void *src = (const void *)o->send;
		void *dst = (void *)o->recv;
		switch (o->kind) {
		case 0: r = p_ncclAllReduce(src, dst, o->count, o->dtype, o->op, comm, s); break;
		case 1: r = p_ncclReduce(src, dst, o->count, o->dtype, o->op, o->root, comm, s); break;
		case 2: r = p_ncclBroadcast(src, dst, o->count, o->dtype, o->root, comm, s); break;
		case 3: r = p_ncclReduceScatter(src, dst, o->count, o->dtype, o->op, comm, s); break;
		case 4: r = p_ncclAllGather(src, dst, o->count, o->dtype, comm, s); break;
		default: r = 4; // ncclInvalidArgument
		}
		if (r) *failed = i;
	}
	// The group must be closed even after a failed call.
	int r2 = p_ncclGroupEnd();
	if (!r && r2) {
		*failed = n;
		r = r2;
	}
	return r;
}
