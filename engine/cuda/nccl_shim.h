// The NCCL declarations the backend needs, written out so that building
// needs no NCCL headers: libnccl.so.2 is opened with dlopen at run time and
// every entry point is looked up with dlsym. Types are the ABI types of
// nccl.h (a communicator is a pointer, enums are ints, the unique id is 128
// opaque bytes passed by value). Every wrapper that enqueues work first makes
// the device's context current on the calling thread, as shim.h's do.
#ifndef PARALLAX_CUDA_NCCL_SHIM_H
#define PARALLAX_CUDA_NCCL_SHIM_H

#include "shim.h"

#define PXNCCL_ID_BYTES 128

typedef void *ncclComm_t;

// pxnccl_bind binds every entry point of an opened libnccl; it returns NULL
// or the name of the first symbol the library lacks.
const char *pxnccl_bind(void *lib);

int pxnccl_version(int *version);
int pxnccl_unique_id(char *id); // id: PXNCCL_ID_BYTES bytes
int pxnccl_init_rank(CUcontext ctx, ncclComm_t *comm, int nranks, const char *id, int rank);
int pxnccl_destroy(CUcontext ctx, ncclComm_t comm); // finalize (if the library has it) + destroy
int pxnccl_abort(ncclComm_t comm);
int pxnccl_async_error(ncclComm_t comm, int *async_err);
const char *pxnccl_error_string(int r);
const char *pxnccl_last_error(ncclComm_t comm); // "" when the library cannot say

// One collective of a group. kind: 0 all-reduce, 1 reduce, 2 broadcast,
// 3 reduce-scatter, 4 all-gather. count is in elements: the element count of
// the tensor for 0-2, the per-rank (received) count for 3, the per-rank (sent)
// count for 4. dtype is an ncclDataType_t, op an ncclRedOp_t, root a rank.
typedef struct {
	int kind;
	CUdeviceptr send, recv;
	size_t count;
	int dtype, op, root;
} pxnccl_op;

// pxnccl_run enqueues ops on stream s as one NCCL group (one launch for the
// whole bucket). On failure *failed is the index of the op that failed (or
// n when ncclGroupEnd did).
int pxnccl_run(CUcontext ctx, ncclComm_t comm, CUstream s, const pxnccl_op *ops, int n, int *failed);

#endif
