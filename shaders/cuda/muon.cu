// Muon's optimizer kernels over stacks of same-shape matrices: the momentum
// of every matrix of a Newton-Schulz batch written straight into its slot
// of the stack, the orthogonalised update of every slot applied to its
// parameter (one launch each for the whole batch), and the Gram-matrix
// pass of a Newton-Schulz step. The formulas and their double arithmetic
// are those of muon_momentum and muon_apply (elementwise.cu), so a matrix
// updates bit for bit alike through either.
#include "common.cuh"

// The table of a launch holds T entries and, after them, T+1 block
// offsets: matrix t owns blocks [start[t], start[t+1]), MUON_CHUNK elements
// a block (the layout of elementwise.cu's multi-tensor tables).
#define MUON_CHUNK 16384
struct muon_entry {
	u64 p[4]; // operands, by kernel
	i64 n;    // elements
	int dt[2];
};

__device__ __forceinline__ int muon_find(const int *start, int T, int blk) {
	int lo = 0, hi = T - 1;
	while (lo < hi) {
		int mid = (lo + hi + 1) >> 1;
		if (start[mid] <= blk) lo = mid;
		else hi = mid - 1;
	}
	return lo;
}

#define MUON_LOOP(tab, T, ...)                                                   \
	const int *start = (const int *)(tab + T);                                   \
	int t = muon_find(start, T, blockIdx.x);                                     \
	const muon_entry e = tab[t];                                                 \
	i64 c0 = (i64)(blockIdx.x - start[t]) * MUON_CHUNK;                          \
	i64 c1 = min(c0 + MUON_CHUNK, e.n);                                          \
	for (i64 i = c0 + threadIdx.x; i < c1; i += blockDim.x) __VA_ARGS__

// muon_mt_momentum: for u = p[0] (the matrix's slot of the stack, dtype
// dt[0]), g = p[1] (dt[1]) and m = p[2] (f32):
// m = beta m + (1-beta) g; u = (1-beta) g + beta m (nesterov) or m.
extern "C" __global__ void muon_mt_momentum(const muon_entry *tab, int T, float beta, int nesterov) {
	MUON_LOOP(tab, T, {
		float *m = (float *)e.p[2];
		double x = ldf((const void *)e.p[1], e.dt[1], i);
		double mi = (double)beta * m[i] + (1.0 - (double)beta) * x;
		m[i] = (float)mi;
		stf((void *)e.p[0], e.dt[0], i, (float)(nesterov ? (1.0 - (double)beta) * x + (double)beta * mi : mi));
	});
}

// muon_mt_apply: for the parameter p = p[0] (dt[0]), its update o = p[1]
// (the slot of the stack, dt[1]), its scale and learning-rate multiplier
// (the f32 bits in p[2] and p[3]): with lr_t = lr * multiplier in f32,
// p = p (1 - lr_t wd) - lr_t scale o.
extern "C" __global__ void muon_mt_apply(const muon_entry *tab, int T, float lr0, float wd) {
	MUON_LOOP(tab, T, {
		float scale = __uint_as_float((u32)e.p[2]), lr = __fmul_rn(lr0, __uint_as_float((u32)e.p[3]));
		double pi = ldf((const void *)e.p[0], e.dt[0], i), oi = ldf((const void *)e.p[1], e.dt[1], i);
		stf((void *)e.p[0], e.dt[0], i, (float)(pi * (1.0 - (double)lr * wd) - (double)lr * scale * oi));
	});
}

// ns_gram writes b = beta a + alpha I for every [k, k] matrix of a (n
// elements in all, dtype dt), the Gram-matrix pass of a Newton-Schulz step
// before the cA^2 product accumulates into b.
extern "C" __global__ void ns_gram(void *b, const void *a, int dt, i64 k, i64 n, float alpha, float beta) {
	for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
		i64 rc = i % (k * k);
		float v = beta * ldf(a, dt, i);
		if (rc / k == rc % k) v += alpha;
		stf(b, dt, i, v);
	}
}
