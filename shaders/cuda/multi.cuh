// Multi-tensor tables, shared by elementwise.cu's multi-tensor ops and
// muon.cu's Muon kernels: one launch over a list of tensors.
#pragma once
#include "common.cuh"

// The table holds T entries and, after them, T+1 block offsets: tensor t
// owns blocks [start[t], start[t+1]), MT_CHUNK elements a block, so a block
// finds its tensor by binary search and works on one contiguous chunk.
#define MT_CHUNK 16384
struct mt_entry {
	u64 p[4]; // up to four operands, by op
	i64 n;    // elements
	int dt[2];
};

__device__ __forceinline__ int mt_find(const int *start, int T, int blk) {
	int lo = 0, hi = T - 1;
	while (lo < hi) {
		int mid = (lo + hi + 1) >> 1;
		if (start[mid] <= blk) lo = mid;
		else hi = mid - 1;
	}
	return lo;
}

#define MT_LOOP(tab, T, ...)                                                     \
	const int *start = (const int *)(tab + T);                                   \
	int t = mt_find(start, T, blockIdx.x);                                       \
	const mt_entry e = tab[t];                                                   \
	i64 c0 = (i64)(blockIdx.x - start[t]) * MT_CHUNK;                            \
	i64 c1 = min(c0 + MT_CHUNK, e.n);                                            \
	for (i64 i = c0 + threadIdx.x; i < c1; i += blockDim.x) __VA_ARGS__


// MT_LOOP8 is MT_LOOP eight consecutive elements a thread, for tables whose
// every tensor has a multiple of 8 elements and 16-byte aligned operands
// (the host checks; MT_CHUNK is a multiple of 8, so a chunk never splits a
// group): the body loads and stores them as 16-byte accesses (ld8f,
// st8f), which a streaming optimizer kernel needs to come near the memory
// bandwidth. The arithmetic per element is the scalar kernel's.
#define MT_LOOP8(tab, T, ...)                                                    \
	const int *start = (const int *)(tab + T);                                   \
	int t = mt_find(start, T, blockIdx.x);                                       \
	const mt_entry e = tab[t];                                                   \
	i64 c0 = (i64)(blockIdx.x - start[t]) * MT_CHUNK;                            \
	i64 c1 = min(c0 + MT_CHUNK, e.n);                                            \
	for (i64 i = c0 + 8 * (i64)threadIdx.x; i < c1; i += 8 * (i64)blockDim.x) __VA_ARGS__
