// Muon's optimizer kernels over stacks of same-shape matrices: the momentum
// of every matrix of a Newton-Schulz batch written straight into its slot
// of the stack, the orthogonalised update of every slot applied to its
// parameter (one launch each for the whole batch). The update's formula
// and its double arithmetic are those of muon_apply (elementwise.cu), so a
// matrix updates bit for bit alike through either; the single-matrix
// MuonMomentum runs muon_mt_momentum over a table of one matrix.
#include "common.cuh"

// The tables are the multi-tensor ones of multi.cuh (MT_LOOP, mt_entry).
#include "multi.cuh"

// muon_mt_momentum: for u = p[0] (the matrix's slot of the stack, dtype
// dt[0]), g = p[1] (dt[1]) and m = p[2] (f32), with the gradient scaled by
// gs in f32 (clipping's factor, rounded as a separate scaling pass would
// store it; 1 is exact): x = fl(gs g); m = beta m + (1-beta) x;
// u = (1-beta) x + beta m (nesterov) or m.
extern "C" __global__ void muon_mt_momentum(const mt_entry *tab, int T, float beta, int nesterov, float gs) {
	MT_LOOP(tab, T, {
		float *m = (float *)e.p[2];
		double x = __fmul_rn(gs, ldf((const void *)e.p[1], e.dt[1], i));
		double mi = (double)beta * m[i] + (1.0 - (double)beta) * x;
		m[i] = (float)mi;
		stf((void *)e.p[0], e.dt[0], i, (float)(nesterov ? (1.0 - (double)beta) * x + (double)beta * mi : mi));
	});
}

// muon_mt_apply: for the parameter p = p[0] (dt[0]), its update o = p[1]
// (the slot of the stack, dt[1]), its scale and learning-rate multiplier
// (the f32 bits in p[2] and p[3]): with lr_t = lr * multiplier in f32,
// p = p (1 - lr_t wd) - lr_t scale o.
extern "C" __global__ void muon_mt_apply(const mt_entry *tab, int T, float lr0, float wd) {
	MT_LOOP(tab, T, {
		float scale = __uint_as_float((u32)e.p[2]), lr = __fmul_rn(lr0, __uint_as_float((u32)e.p[3]));
		double pi = ldf((const void *)e.p[0], e.dt[0], i), oi = ldf((const void *)e.p[1], e.dt[1], i);
		stf((void *)e.p[0], e.dt[0], i, (float)(pi * (1.0 - (double)lr * wd) - (double)lr * scale * oi));
	});
}

// muon_mt_momentum8 and muon_mt_apply8 are the two kernels above eight
// elements a thread (MT_LOOP8), bit for bit the same per element.
extern "C" __global__ void muon_mt_momentum8(const mt_entry *tab, int T, float beta, int nesterov, float gs) {
	MT_LOOP8(tab, T, {
		float *m = (float *)e.p[2];
		float g[8], mv[8], u[8];
		ld8f((const void *)e.p[1], e.dt[1], i, g);
		ld8f(m, DT_F32, i, mv);
#pragma unroll
		for (int k = 0; k < 8; k++) {
			double x = __fmul_rn(gs, g[k]);
			double mi = (double)beta * mv[k] + (1.0 - (double)beta) * x;
			mv[k] = (float)mi;
			u[k] = (float)(nesterov ? (1.0 - (double)beta) * x + (double)beta * mi : mi);
		}
		st8f(m, DT_F32, i, mv);
		st8f((void *)e.p[0], e.dt[0], i, u);
	});
}

extern "C" __global__ void muon_mt_apply8(const mt_entry *tab, int T, float lr0, float wd) {
	MT_LOOP8(tab, T, {
		float scale = __uint_as_float((u32)e.p[2]), lr = __fmul_rn(lr0, __uint_as_float((u32)e.p[3]));
		float pv[8], ov[8];
		ld8f((const void *)e.p[0], e.dt[0], i, pv);
		ld8f((const void *)e.p[1], e.dt[1], i, ov);
#pragma unroll
		for (int k = 0; k < 8; k++)
			pv[k] = (float)((double)pv[k] * (1.0 - (double)lr * wd) - (double)lr * scale * (double)ov[k]);
		st8f((void *)e.p[0], e.dt[0], i, pv);
	});
}
