// Shared by the weight-only int8 kernels (qgemv.cu, qgemm.cu).
#pragma once
#include "common.cuh"

typedef signed char i8;

// i8_set: up to four int8 weights [N_i, K] (one group size) against the
// same x in one launch; block (or tile) b works on weight i for b in
// [first_i, first_{i+1}), a kernel's rows of each weight a block (8 for
// qgemv's warp-per-column kernels, 64 for qgemm's tiles). engine/cuda's
// int8Set lays it out. The MLP's qgemm kernels take the gate as weight 0
// and up as weight 1, out[0] the activation.
struct i8_set {
	void *out[4];
	const i8 *q[4];
	const float *s[4];
	int n[4];
	int first[5]; // first block of each weight; first[count] = the grid
};
