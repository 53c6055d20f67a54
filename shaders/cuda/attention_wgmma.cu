// Parallax (and softmax) attention on Hopper's warpgroup tensor-core
// instructions (wgmma, sm_90a): bf16 operands, f32 accumulators (docs/MATH.md
// sections 3 and 8). Compiled only for sm_90a; elsewhere this module is
// empty and the host uses attention_mma.cu.
//
// Why wgmma: a warpgroup's 64x64 S tile is one instruction chain that reads
// its B operand (K, or V) straight from shared memory, so a K/V byte read
// from shared memory feeds 64 query rows instead of mma.sync's 16, and the
// Parallax forward's doubled accumulators (O1 and O2) are spread over 128
// threads. Shared tiles use the 128-byte swizzle: a tile of R rows and D
// columns is stored as D/64 panels of R rows x 128 bytes, the 16-byte chunk
// c of row r at chunk c ^ (r % 8), every panel 1024-byte aligned.
#include "common.cuh"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#include "wgmma.cuh"

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wg_wait() {
	asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// async_fence orders this thread's generic-proxy shared memory writes (and
// the cp.async writes it waited for) before later wgmma reads.
__device__ __forceinline__ void async_fence() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// SLACK is the lazy-rescaling threshold of the forward (log2 units): the
// running max is kept while a tile's max exceeds it by at most this much,
// so the f32 accumulators' rescaling is skipped on most tiles; P then stays
// below 2^SLACK, well within bf16 and f32.
#define SLACK 8.0f

// STAGES is the number of K/V (backward: Q/dO/R) tiles in flight. More
// than two let the cp.async kernels skip the barrier that guards a
// buffer's reuse; measured on the H200 that wins at D = 64 and loses at
// D = 128, where two are kept. At D = 64 Parallax keeps four (STAGES64,
// 2% over three with TMA) and softmax three: its kernels fit two blocks a
// multiprocessor, which four stages' shared memory would not.
#ifndef STAGES64
#define STAGES64 4
#endif
#define STAGES(D, PX) ((D) == 64 ? ((PX) ? STAGES64 : 3) : 2)

// The forward splits its groups (OV) for softmax only: measured on the
// H200, the split Parallax forward loses at D = 64 and ties at D = 128.
#ifndef FWD_OV
#define FWD_OV(PX) (!(PX))
#endif

// RSUM selects the TMA forwards whose P V products also give the row sums
// d1 and d2 (8 more columns, against ones), in place of two adds an
// element: all but Parallax at D = 128, which has no registers for them.
#ifndef RSUM
#define RSUM(D, PX) ((D) == 64 || !(PX))
#endif
// OVERLAP selects the backward kernels' split schedule (S, A and T as
// three wgmma groups, elementwise work started as each lands). It costs
// registers: the Parallax D = 128 kernels then spill, and measured slower
// on the H200, so they keep the one-group schedule.
#ifndef OVERLAP
#define OVERLAP(D, PX) (!((D) == 128 && (PX)))
#endif

// SMEMFRAG selects the dk/dv kernel's shared-memory operands: dS, dT and
// Pe go to shared memory as each is formed, and dV, dK are products of two
// shared operands. The Parallax D = 128 kernel needs it: with the three
// as register fragments (48 registers) next to its S, A, T and dK, dV
// accumulators (224) ptxas serializes every wgmma (C7512) and spills.
#ifndef SMEMFRAG
#define SMEMFRAG(D, PX) ((D) == 128 && (PX))
#endif

// The tuning switches above (STAGES64 up to 4, FWD_OV, RSUM, OVERLAP,
// SMEMFRAG) and PINGPONG and LPT below can be set from outside
// (PARALLAX_CUDA_NVRTC_OPTIONS, -D...) to measure a variant; the host
// reserves shared memory for any of them. (WSP also sets the block size,
// which the host chooses: not one of them.)

// sw_desc is the wgmma descriptor of a 128-byte-swizzled operand at shared
// address addr: lbo is the byte distance between 64-column panels (used by
// MN-major operands wider than 64), 8-row groups are 1024 bytes apart. Its
// low word holds addr / 16 in 14 bits, so an operand's k-steps are its
// descriptor plus (byte offset / 16): one uniform add each when addr is
// warp-uniform (every tile base here is).
#define DESC_HI ((1024 >> 4) | (1u << 30))
__device__ __forceinline__ u64 sw_desc(u32 addr, u32 lbo) {
	return ((u64)DESC_HI << 32) | (((addr & 0x3ffff) >> 4) | ((lbo >> 4) << 16));
}
__device__ __forceinline__ u64 desc_add(u64 d, u32 bytes) { return d + (bytes >> 4); }

// ex2 is 2^x by the hardware approximation (2 ulp; -inf gives 0).
__device__ __forceinline__ float ex2(float x) {
	float y;
	asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
	return y;
}

// warpgroup is the warpgroup index of the calling thread, computed so the
// compiler knows it is warp-uniform: tile addresses derived from it then
// live in uniform registers and wgmma descriptors cost no vector registers.
__device__ __forceinline__ int warpgroup() { return __shfl_sync(0xffffffffu, threadIdx.x >> 7, 0); }

__device__ __forceinline__ void cp_async16s(u32 dst, const void *src, int src_bytes) {
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes));
}

// TmaMap is a CUtensorMap (cuTensorMapEncodeTiled), passed to kernels by
// value as a __grid_constant__ parameter.
struct __align__(64) TmaMap {
	u64 v[16];
};

// mbarriers (shared::cta) for the TMA pipelines: full[s] completes when
// stage s's bytes have landed, empty[s] when every consumer thread is done
// with it.
__device__ __forceinline__ void mbar_init(u32 bar, int count) {
	asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(u32 bar, u32 bytes) {
	asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
	asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(u32 bar, int parity) {
	asm volatile("{\n.reg .pred p;\nWAIT_%=:\n"
	             "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
	             "@!p bra WAIT_%=;\n}\n" ::"r"(bar),
	             "r"(parity)
	             : "memory");
}
// tma_load3 loads the box at coordinates {c0, c1, c2} of a 3-D tensor map
// into shared memory at dst, completing on mbarrier bar.
__device__ __forceinline__ void tma_load3(u32 dst, const TmaMap *map, u32 bar, int c0, int c1, int c2) {
	asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
	             " [%0], [%1, {%2, %3, %4}], [%5];" ::"r"(dst),
	             "l"((u64)map), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
	             : "memory");
}
// Ping-pong of the TMA kernels' two warpgroups: each issues its S, A, T
// products in turn, so one's elementwise work runs while the other's
// products occupy the tensor cores. turn_take waits for the calling
// warpgroup's turn (named barrier 3 + wg, 256 threads); turn_pass hands it
// to the other, except warpgroup 1 after the last tile (warpgroup 0 takes
// no further turn). Warpgroup 1 passes once before the loop, so warpgroup
// 0 goes first. Off by default (PINGPONG 0): once the elementwise steps
// were lean, the free-running warpgroups measured 1-4% faster on the H200
// (Parallax at D = 64 and 128; softmax even).
#ifndef PINGPONG
#define PINGPONG 0
#endif
__device__ __forceinline__ void turn_take(int wg) {
	if (PINGPONG) asm volatile("bar.sync %0, 256;" ::"r"(3 + wg) : "memory");
}
__device__ __forceinline__ void turn_pass(int wg, bool last) {
	if (PINGPONG && !(wg == 1 && last)) asm volatile("bar.arrive %0, 256;" ::"r"(4 - wg) : "memory");
}

// The TMA pipelines' NS stages: mbarriers full[i] at bar + 8 i (one
// arrival: the loader's expect_tx) and empty[i] at bar + 8 (NS + i) (all
// 256 threads), initialised by thread 0 before the block's first barrier.
template <int NS> __device__ __forceinline__ void pipe_init(u32 bar) {
	if (threadIdx.x != 0) return;
	for (int i = 0; i < NS; i++) {
		mbar_init(bar + 8 * i, 1);
		mbar_init(bar + 8 * (NS + i), 256);
	}
	asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// WSP(D, PX): the Parallax TMA kernels at D = 64 have a producer
// warpgroup, a third (384 threads), which only loads: one thread waits for
// a stage to be released and refills it, so no consumer warp ever waits
// on the other warpgroup's release. It gives its registers to the
// consumers (setmaxnreg: 24 for it, 240 for them). Otherwise thread 128
// loads between its own tiles: at D = 128 (248-255 registers, more than
// 384 threads leave) and for softmax (whose kernels fit two 256-thread
// blocks a multiprocessor at D = 64).
#ifndef WSP
#define WSP(D, PX) ((D) == 64 && (PX))
#endif
#define TMA_THREADS(D, PX) (WSP(D, PX) ? 384 : 256)

// producer_split ends the prologue of a WS kernel: the producer warpgroup
// (2) hands back registers, runs produce() on one thread and returns
// false; the consumers take the registers and return true.
template <typename F> __device__ __forceinline__ bool producer_split(int wg, F produce) {
	if (wg == 2) {
		asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
		if (threadIdx.x == 256) produce();
		return false;
	}
	asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n" ::: "memory");
	return true;
}

// pipe_produce is the producer warp's loop (WS, one lane): every tile in
// order, each once its stage's previous tile is released.
template <int NS, typename F> __device__ __forceinline__ void pipe_produce(u32 bar, int ntiles, F load) {
	for (int t = 0; t < ntiles; t++) {
		if (t >= NS) mbar_wait(bar + 8 * (NS + t % NS), (t / NS - 1) & 1);
		load(t);
	}
}
// pipe_start, once every thread has issued its prologue cp.async copies,
// waits for them and makes them and the barriers' initialisation visible
// to the block. Then, with a producer warpgroup (WS), that warpgroup
// splits off to load every tile and its threads get false (they return);
// without, the loader (thread 128) issues the first NS tiles. Warpgroup 0
// gets the first turn.
template <int NS, bool WS, typename F> __device__ __forceinline__ bool pipe_start(u32 bar, int ntiles, int wg, F load) {
	cp_async_wait<0>();
	async_fence();
	__syncthreads();
	if (WS) {
		if (!producer_split(wg, [&]() { pipe_produce<NS>(bar, ntiles, load); })) return false;
	} else if (threadIdx.x == 128) {
		for (int i = 0; i < NS && i < ntiles; i++) load(i);
	}
	if (wg == 1) turn_pass(wg, false);
	return true;
}
// pipe_release marks tile t's stage free (every consumer thread, once
// done with it); without a producer warp the loader (thread 128, of the
// warpgroup that issues second) waits until all are and loads tile t + NS
// into it with load(t + NS).
template <int NS, bool WS, typename F>
__device__ __forceinline__ void pipe_release(u32 bar, int t, int ntiles, F load) {
	const u32 empty = bar + 8 * (NS + t % NS);
	mbar_arrive(empty);
	if (!WS && threadIdx.x == 128 && t + NS < ntiles) {
		mbar_wait(empty, (t / NS) & 1);
		load(t + NS);
	}
}


// tile_done ends tile t of a streaming loop: with TMA it releases the
// tile's stage (pipe_release); with cp.async and two stages the block
// meets, as the next load targets this tile's buffer (with three or more
// it targets tile t - 2's, which every thread is done with).
template <int NS, bool WS, bool TMA, typename F>
__device__ __forceinline__ void tile_done(u32 bar, int t, int ntiles, F load) {
	if (TMA) pipe_release<NS, WS>(bar, t, ntiles, load);
	else if (NS == 2) __syncthreads();
}

// tma_kv_tile has the calling thread issue K/V tile (BN keys from j0, of
// the tensor maps' head bhk) into stage buf: K at aK + buf BN D 2, V at
// aV + buf VB, each D/64 panels of BN rows loaded as BN/64 boxes of 64
// rows, completing on mbarrier bar.
template <int D, int BN>
__device__ __forceinline__ void tma_kv_tile(u32 aK, u32 aV, u32 VB, int buf, u32 bar, const TmaMap *mK,
                                            const TmaMap *mV, int j0, int bhk) {
	constexpr int KB = BN * D * 2;
	mbar_expect_tx(bar, 2 * KB);
#pragma unroll
	for (int p = 0; p < D / 64; p++)
#pragma unroll
		for (int rb = 0; rb < BN / 64; rb++) {
			const u32 o = p * BN * 128 + rb * 64 * 128;
			tma_load3(aK + buf * KB + o, mK, bar, p * 64, j0 + rb * 64, bhk);
			tma_load3(aV + buf * VB + o, mV, bar, p * 64, j0 + rb * 64, bhk);
		}
}

// load_sw copies rows [r0, r0 + R) of a [n, D] bf16 matrix into a swizzled
// tile at shared address tile (rows past n are zero-filled), 256 threads.
// A thread's chunks are STEP rows apart in one column, so its shared and
// global offsets are fixed strides from the first.
template <int D, int R>
__device__ __forceinline__ void load_sw(u32 tile, const u16 *src, int r0, int n, int tid) {
	constexpr int CPR = D / 8, STEP = 256 / CPR, NC = R * CPR / 256;
	static_assert(NC * 256 == R * CPR && STEP % 8 == 0, "tile shape");
	const int rr = tid / CPR, ch = tid % CPR;
	const u32 dst = tile + (ch >> 3) * R * 128 + rr * 128 + (((ch & 7) ^ (rr & 7)) << 4);
	const u16 *s0 = src + (i64)(r0 + rr) * D + ch * 8;
#pragma unroll
	for (int k = 0; k < NC; k++) {
		bool ok = r0 + rr + k * STEP < n;
		cp_async16s(dst + k * STEP * 128, ok ? s0 + (i64)k * STEP * D : src, ok ? 16 : 0);
	}
}

// load_kv copies K/V tile t (BN keys from t0 + t BN) into stage t % NS
// with cp.async, every thread its share.
template <int D, int BN, int NS>
__device__ __forceinline__ void load_kv(u32 aK, u32 aV, const u16 *K, const u16 *V, int t, int t0, int Lk, int tid) {
	const u32 nb = (t % NS) * BN * D * 2;
	load_sw<D, BN>(aK + nb, K, t0 + t * BN, Lk, tid);
	load_sw<D, BN>(aV + nb, V, t0 + t * BN, Lk, tid);
}

// BlockIdx is a block's (tile, head, batch) as block_order assigns them.
struct BlockIdx {
	int x, y, z;
};
// block_order maps the blocks, in the order the hardware starts them (x
// fastest), to (tile, head, batch) with the tile slowest: every head's
// tile 0 starts before any head's tile 1. The kernels number tiles
// longest first under a causal mask, so the longest start first and the
// last to start are short (longest-processing-time-first); taking each
// head's tiles in turn, the last heads' long tiles would run alone at the
// end. LPT 0 keeps the launch order.
#ifndef LPT
#define LPT 1
#endif
__device__ __forceinline__ BlockIdx block_order() {
	const unsigned hb = gridDim.y * gridDim.z;
	const unsigned lin = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
	BlockIdx r;
	if (!LPT) return BlockIdx{(int)blockIdx.x, (int)blockIdx.y, (int)blockIdx.z};
	r.x = (int)(lin / hb);
	r.y = (int)(lin % hb % gridDim.y);
	r.z = (int)(lin % hb / gridDim.y);
	return r;
}

// kv_wait returns once K/V tile t of a row-parallel kernel is in shared
// memory: with TMA by waiting on its full mbarrier; with cp.async after
// issuing tile t + 1's loads, waiting for tile t's and meeting the block.
template <int D, int BN, int NS, bool TMA>
__device__ __forceinline__ void kv_wait(u32 aBar, u32 aK, u32 aV, const u16 *K, const u16 *V, int t, int ntiles, int t0,
                                        int Lk, int tid) {
	if (TMA) {
		mbar_wait(aBar + 8 * (t % NS), (t / NS) & 1);
		return;
	}
	if (t + 1 < ntiles) load_kv<D, BN, NS>(aK, aV, K, V, t + 1, t0, Lk, tid);
	cp_async_commit();
	cp_async_wait<1>();
	async_fence();
	__syncthreads();
}

// RowSpan is what a block of 128 query rows [m0, m0 + 128), two
// warpgroups of 64, sees of the keys under the mask of docs/MATH.md section 1: the
// block's key tiles of BN, and for this warpgroup's rows [w0, w0 + 64) the
// keys [wLo, wHi) some row sees and [lastLo, firstHi) every row sees.
struct RowSpan {
	int off, t0, ntiles, wHi, wLo, firstHi, lastLo;
};
__device__ __forceinline__ RowSpan row_span(int m0, int w0, int BN, int Lq, int Lk, int causal, int window) {
	RowSpan s;
	s.off = Lk - Lq;
	const int rowEnd = min(m0 + 128, Lq), wEnd = min(w0 + 64, Lq);
	const int hiB = causal ? min(Lk, rowEnd + s.off) : Lk;
	const int loB = (causal && window > 0) ? max(0, m0 + s.off + 1 - window) : 0;
	s.t0 = loB / BN * BN;
	s.ntiles = hiB > loB ? (hiB - s.t0 + BN - 1) / BN : 0;
	s.wHi = causal ? min(Lk, wEnd + s.off) : Lk;
	s.wLo = (causal && window > 0) ? max(0, w0 + s.off + 1 - window) : 0;
	s.firstHi = causal ? min(Lk, w0 + s.off + 1) : Lk;
	s.lastLo = (causal && window > 0) ? max(0, wEnd + s.off - window) : 0;
	return s;
}

// S (64 x N) = A B^T over D = 16 k-steps, A and B K-major swizzled tiles.
template <int N, int D>
__device__ __forceinline__ void mma_qk(float *s, u32 a, int arows, u32 b) {
	const u64 da0 = sw_desc(a, 16), db0 = sw_desc(b, 16);
#pragma unroll
	for (int kk = 0; kk < D / 16; kk++) {
		u64 da = desc_add(da0, (kk >> 2) * arows * 128 + (kk & 3) * 32), db = desc_add(db0, (kk >> 2) * N * 128 + (kk & 3) * 32);
		if (N == 64) wgmma_ss_n64_t00(s, da, db, kk > 0);
		else if (N == 128) wgmma_ss_n128_t00(s, da, db, kk > 0);
		else wgmma_ss_n32_t00(s, da, db, kk > 0);
	}
}

// O (64 x N) += P V over the BN keys of a V tile (MN-major B, 64-column
// panels BN * 128 bytes apart), P in registers as the A fragments of BN/16
// k-steps. N is D, or D + 8 for the forward's row sums (a ninth panel of
// ones after V's).
template <int N, int BN>
__device__ __forceinline__ void mma_pv(float *o, const u32 (*p)[4], u32 v) {
	const u64 dv0 = sw_desc(v, BN * 128);
#pragma unroll
	for (int k2 = 0; k2 < BN / 16; k2++) {
		u64 dv = desc_add(dv0, k2 * 16 * 128);
		if (N == 136) wgmma_rs_n136_t1(o, p[k2], dv, 1);
		else if (N == 128) wgmma_rs_n128_t1(o, p[k2], dv, 1);
		else if (N == 72) wgmma_rs_n72_t1(o, p[k2], dv, 1);
		else wgmma_rs_n64_t1(o, p[k2], dv, 1);
	}
}

// O (64 x D) += A^T V over the BQ rows of a V-like tile (MN-major B), A^T
// a 64 x BQ K-major swizzled tile in shared memory.
template <int D, int BQ>
__device__ __forceinline__ void mma_pv_ss(float *o, u32 a, u32 v) {
	const u64 da0 = sw_desc(a, 16), dv0 = sw_desc(v, BQ * 128);
#pragma unroll
	for (int ks = 0; ks < BQ / 16; ks++) {
		u64 da = desc_add(da0, ks * 32), dv = desc_add(dv0, ks * 16 * 128);
		if (D == 128) wgmma_ss_n128_t01(o, da, dv, 1);
		else wgmma_ss_n64_t01(o, da, dv, 1);
	}
}

// issue_sat issues the backward's S = A_s B_s^T, A = A_a B_a^T and (PX)
// T = A_t B_t^T (64 x N, mma_qk operands, A tiles of arows rows), runs
// pass (the ping-pong turn) once they are issued and waits for S: with OV
// as three commit groups (the caller waits for A and T as it needs them),
// else as one.
template <int N, int D, bool PX, bool OV, typename F>
__device__ __forceinline__ void issue_sat(float *s, float *aa, float *tt, int arows, u32 as, u32 bs, u32 aA, u32 bA,
                                          u32 at, u32 bt, F pass) {
	wg_fence();
	mma_qk<N, D>(s, as, arows, bs);
	if (OV) wg_commit();
	mma_qk<N, D>(aa, aA, arows, bA);
	if (OV) wg_commit();
	if (PX) mma_qk<N, D>(tt, at, arows, bt);
	if (!OV || PX) wg_commit();
	pass();
	if (!OV) wg_wait<0>();
	else if (PX) wg_wait<2>();
	else wg_wait<1>();
}

// row_max is the max over this thread's elements of accumulator row half
// r (of an N-column tile in wgmma's C layout), as a tree: a chain of N/4
// dependent max instructions would set the latency.
template <int N> __device__ __forceinline__ float row_max(const float *s, int r) {
	float m[N / 8];
#pragma unroll
	for (int n = 0; n < N / 8; n++) m[n] = fmaxf(s[4 * n + 2 * r], s[4 * n + 2 * r + 1]);
#pragma unroll
	for (int w = N / 16; w >= 1; w >>= 1)
#pragma unroll
		for (int n = 0; n < w; n++) m[n] = fmaxf(m[n], m[n + w]);
	return m[0];
}

// ---------------------------------------------------------------------
// Forward: one block of two warpgroups per 128 query rows of one
// (batch, head), each warpgroup 64 rows; K/V tiles of BN keys, NS in
// flight. Per tile a warpgroup issues S = Q K^T and T = R K^T (D/16
// wgmma each), waits, does the online softmax in registers (same
// statistics as attention_mma.cu), and issues O1 += P1 V and O2 += P2 V
// with P1, P2 = P1 * T rounded to bf16 as register A operands.
//
// With TMA the K/V tiles come through tensor maps into mbarrier stages,
// one thread loading, and the warpgroups run free of each other (or, with
// PINGPONG, take turns issuing S and T); without it all 256 threads load
// with cp.async and meet at a block barrier each tile.
// ---------------------------------------------------------------------
template <int D, int BN, bool PX, int NS, bool OV, bool TMA>
__device__ __forceinline__ void wfwd_impl(const u16 *Q, const u16 *R, const u16 *K, const u16 *V, u16 *O, u16 *Vb,
                                          float *LSE, float *TB, int Hq, int Hkv, int Lq, int Lk, float scale,
                                          int causal, int window, const TmaMap *mK, const TmaMap *mV) {
	// RS (TMA kernels, RSUM): the row sums d1, d2 come out of the P V
	// products, as NO = D + 8 columns against V and a panel of ones.
	constexpr bool RS = TMA && RSUM(D, PX), WS = TMA && WSP(D, PX);
	constexpr int BM = 128, QB = BM * D * 2, KB = BN * D * 2, VB = KB + (RS ? BN * 128 : 0), NO = RS ? D + 8 : D;
	extern __shared__ __align__(1024) unsigned char smem[];
	const u32 base = (smem_addr(smem) + 1023) & ~1023u;
	const u32 aQ = base, aR = aQ + QB, aK = aR + (PX ? QB : 0), aV = aK + NS * KB;
	// (the cp.async kernels keep the plain warpgroup index: the uniform
	// one measured more spills there)
	const int tid = threadIdx.x, wg = TMA ? warpgroup() : tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2,
	          tq = lane & 3;
	const BlockIdx bi = block_order();
	const int m0 = (gridDim.x - 1 - bi.x) * BM; // long causal blocks first
	const int h = bi.y, b = bi.z, hk = h / (Hq / Hkv);
	const i64 qo = ((i64)b * Hq + h) * Lq * D, ko = ((i64)b * Hkv + hk) * Lk * D;
	const int w0 = m0 + wg * 64;
	const RowSpan sp = row_span(m0, w0, BN, Lq, Lk, causal, window);
	const int off = sp.off, t0 = sp.t0, ntiles = sp.ntiles, wHi = sp.wHi, wLo = sp.wLo, firstHi = sp.firstHi,
	          lastLo = sp.lastLo;

	// TMA: full[NS], empty[NS] mbarriers after the K/V stages
	const u32 aBar = aV + NS * VB;
	const int bhk = b * Hkv + hk;
	auto tma_kv = [&](int t) {
		tma_kv_tile<D, BN>(aK, aV, VB, t % NS, aBar + 8 * (t % NS), mK, mV, t0 + t * BN, bhk);
	};
	if (TMA) pipe_init<NS>(aBar);
	if (tid < 256) { // (WS: not the producer warpgroup)
		load_sw<D, BM>(aQ, Q + qo, m0, Lq, tid);
		if (PX) load_sw<D, BM>(aR, R + qo, m0, Lq, tid);
		if (!TMA && ntiles > 0) load_kv<D, BN, NS>(aK, aV, K + ko, V + ko, 0, t0, Lk, tid);
	}
	cp_async_commit();
	if (RS) { // the ones panels (bf16 1.0) after each stage's V, written once
		unsigned char *gV = smem + (aV - smem_addr(smem));
		for (int k = tid; k < NS * BN * 32 && tid < 256; k += 256)
			*(u32 *)(gV + (k / (BN * 32)) * VB + KB + (k % (BN * 32)) * 4) = 0x3f803f80u;
	}
	if (TMA && !pipe_start<NS, WS>(aBar, ntiles, wg, tma_kv)) return; // (the producer warpgroup)

	float o1[NO / 2], o2[PX ? NO / 2 : 1];
#pragma unroll
	for (int i = 0; i < NO / 2; i++) {
		o1[i] = 0;
		if (PX) o2[i] = 0;
	}
	// mr: the running max of the raw scores s = q.k (the scale is folded
	// into the exponent, one FFMA an element); d1, d2 as in docs/MATH.md section 3.
	float mr[2] = {NEG_INF, NEG_INF}, d1[2] = {0, 0}, d2[2] = {0, 0};
	const float sl2 = scale * LOG2E, slk = SLACK / sl2;
	const int i0 = w0 + warp * 16 + g;
	int hiR[2], loR[2];
	row_keys(i0, off, Lk, causal, window, hiR, loR);
	const u32 wQ = aQ + wg * 64 * 128, wR = aR + wg * 64 * 128;

	for (int t = 0; t < ntiles; t++) {
		kv_wait<D, BN, NS, TMA>(aBar, aK, aV, K + ko, V + ko, t, ntiles, t0, Lk, tid);
		if (TMA) turn_take(wg);
		auto pass_turn = [&]() {
			if (TMA) turn_pass(wg, t == ntiles - 1);
		};
		const int j0 = t0 + t * BN;
		const bool live = j0 < wHi && j0 + BN > wLo; // uniform per warpgroup
		if (!live) pass_turn();
		if (live) {
			const u32 ks = aK + (t % NS) * KB, vs = aV + (t % NS) * VB;
			float s[BN / 2], tt[PX ? BN / 2 : 1];
			// OV: S and T as two groups, so the softmax of S overlaps T's
			// products, and P2 = P1 T (and then O2) O1's.
			wg_fence();
			mma_qk<BN, D>(s, wQ, BM, ks);
			if (PX && !OV) mma_qk<BN, D>(tt, wR, BM, ks);
			wg_commit();
			if (PX && OV) {
				mma_qk<BN, D>(tt, wR, BM, ks);
				wg_commit();
			}
			pass_turn();
			if (PX && OV) wg_wait<1>();
			else wg_wait<0>();
			// The mask as a branch of its own, taken by edge tiles only.
			if (j0 + BN > firstHi || j0 < lastLo) {
#pragma unroll
				for (int i = 0; i < BN / 2; i++) {
					int r = (i >> 1) & 1, j = j0 + (i >> 2) * 8 + tq * 2 + (i & 1);
					if (j >= hiR[r] || j < loR[r]) s[i] = NEG_INF;
				}
			}
			{
				float mx[2] = {row_max<BN>(s, 0), row_max<BN>(s, 1)};
				quad_max2(mx);
				float alpha[2], mu[2];
#pragma unroll
				for (int r = 0; r < 2; r++) {
					float mn = fmaxf(mr[r], mx[r]);
					if (mr[r] != NEG_INF && mx[r] <= mr[r] + slk) mn = mr[r]; // lazy rescaling
					// unfused products: a kept max gives alpha exactly 1
					mu[r] = mn == NEG_INF ? 0.0f : __fmul_rn(mn, sl2);
					alpha[r] = ex2(__fmul_rn(mr[r], sl2) - mu[r]);
					mr[r] = mn;
				}
				// row sums in two partial chains a row (n-tile parity)
				float e1[2][2] = {{0, 0}, {0, 0}}, e2[2][2] = {{0, 0}, {0, 0}};
				u32 ap[BN / 16][4], at[PX ? BN / 16 : 1][4];
#pragma unroll
				for (int i = 0; i < BN / 2; i += 2) {
					const int r = (i >> 1) & 1, h2 = (i >> 2) & 1;
					float p0 = ex2(fmaf(s[i], sl2, -mu[r])), p1 = ex2(fmaf(s[i + 1], sl2, -mu[r]));
					if (!RS) e1[r][h2] += p0 + p1;
					s[i] = p0;
					s[i + 1] = p1;
					// A fragment of k-step i/8: regs {row g, row g+8} x {cols 0-7, 8-15}
					int k2 = i >> 3, q = ((i >> 1) & 1) | (((i >> 2) & 1) << 1);
					ap[k2][q] = pack2(p0, p1);
					if (PX && !OV) {
						float q0 = p0 * tt[i], q1 = p1 * tt[i + 1];
						if (!RS) e2[r][h2] += q0 + q1;
						at[k2][q] = pack2(q0, q1);
					}
				}
#pragma unroll
				for (int r = 0; r < 2 && !RS; r++) {
					d1[r] = fmaf(d1[r], alpha[r], e1[r][0] + e1[r][1]);
					if (PX && !OV) d2[r] = fmaf(d2[r], alpha[r], e2[r][0] + e2[r][1]);
				}
				if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
					for (int i = 0; i < NO / 2; i++) {
						float a = alpha[(i >> 1) & 1];
						o1[i] *= a;
						if (PX) o2[i] *= a;
					}
				}
				wg_fence();
				mma_pv<NO, BN>(o1, ap, vs);
				if (PX && !OV) mma_pv<NO, BN>(o2, at, vs);
				wg_commit();
				if (PX && OV) {
					wg_wait<1>(); // T
#pragma unroll
					for (int i = 0; i < BN / 2; i += 2) {
						const int r = (i >> 1) & 1, h2 = (i >> 2) & 1;
						float q0 = s[i] * tt[i], q1 = s[i + 1] * tt[i + 1];
						if (!RS) e2[r][h2] += q0 + q1;
						int k2 = i >> 3, q = ((i >> 1) & 1) | (((i >> 2) & 1) << 1);
						at[k2][q] = pack2(q0, q1);
					}
#pragma unroll
					for (int r = 0; r < 2 && !RS; r++) d2[r] = fmaf(d2[r], alpha[r], e2[r][0] + e2[r][1]);
					wg_fence();
					mma_pv<NO, BN>(o2, at, vs);
					wg_commit();
				}
			}
			wg_wait<0>();
		}
		tile_done<NS, WS, TMA>(aBar, t, ntiles, tma_kv);
	}
	cp_async_wait<0>();
	// fwd_store's log-sum-exp takes the max in log2 units
	const float ms[2] = {__fmul_rn(mr[0], sl2), __fmul_rn(mr[1], sl2)};
	if (RS) // the ones columns D + 2 tq of rows g, g + 8: the whole row sums
#pragma unroll
		for (int r = 0; r < 2; r++) {
			d1[r] = o1[D / 2 + 2 * r];
			if (PX) d2[r] = o2[D / 2 + 2 * r];
		}
	fwd_store<D, PX, !RS>(o1, o2, d1, d2, ms, i0, tq, Lq, O, Vb, LSE, TB, qo, ((i64)b * Hq + h) * Lq);
}

#define WFWD(D, BN, PXN, PX, SUF, NS)                                                                                       \
	extern "C" __global__ void __launch_bounds__(256, 1) attn_fwd_wgmma_d##D##SUF##_##PXN(                              \
	    const u16 *Q, const u16 *R, const u16 *K, const u16 *V, u16 *O, u16 *Vb, float *LSE, float *TB, int Hq, int Hkv, \
	    int Lq, int Lk, float scale, int causal, int window) {                                                          \
		wfwd_impl<D, BN, PX, NS, FWD_OV(PX), false>(Q, R, K, V, O, Vb, LSE, TB, Hq, Hkv, Lq, Lk, scale, causal, window, 0, 0); \
	}                                                                                                                   \
	extern "C" __global__ void __launch_bounds__(TMA_THREADS(D, PX), 1) attn_fwd_tma_d##D##SUF##_##PXN(                     \
	    const u16 *Q, const u16 *R, u16 *O, u16 *Vb, float *LSE, float *TB, int Hq, int Hkv, int Lq, int Lk,            \
	    float scale, int causal, int window, const __grid_constant__ TmaMap mK, const __grid_constant__ TmaMap mV) {    \
		wfwd_impl<D, BN, PX, NS, FWD_OV(PX), true>(Q, R, 0, 0, O, Vb, LSE, TB, Hq, Hkv, Lq, Lk, scale, causal, window, &mK, &mV); \
	}
WFWD(64, 64, px, true, , STAGES(64, true))
WFWD(64, 64, sm, false, , STAGES(64, false))
WFWD(128, 64, px, true, , STAGES(128, true))
WFWD(128, 64, sm, false, , STAGES(128, false))
WFWD(64, 128, px, true, _bn128, STAGES(64, true))
WFWD(64, 128, sm, false, _bn128, STAGES(64, false))
WFWD(128, 128, sm, false, _bn128, STAGES(128, false))

// red_add2 adds (a, b) to p[0], p[1] (8-byte aligned) without returning.
__device__ __forceinline__ void red_add2(float *p, float a, float b) {
	asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(p), "f"(a), "f"(b) : "memory");
}

// ---------------------------------------------------------------------
// Backward, column-parallel: one block of two warpgroups per 128 keys of
// one (batch, KV head), each warpgroup 64 keys; it loops over the query
// tiles (64 rows) of every query head of the GQA group that see its keys,
// so dK and dV accumulate in registers without atomics. Per tile a
// warpgroup computes the transposed tiles S^T = K Q^T, T^T = K R^T and
// A^T = V dO^T (keys as rows), then, with the saved statistics of the
// tile's rows (docs/MATH.md section 4),
//   dS = p (a - T + (tbar - t)(a - Bv)),  dT = -p (a - Bv),
//   Pe = p (1 + tbar - t),
// and dV += Pe^T dO, dK += scale dS^T Q + dT^T R from register operands
// (as -dS with its scale, -dT and, Parallax, -scale Pe: see the
// elementwise step). With DQ it also stores those -dS and -dT (bf16) in
// shared memory and adds dQ = scale dS K and dR = dT K of its 64 keys to
// f32 buffers with vector reductions: 8 products per tile instead of the
// 11 of a separate dq kernel that recomputes S, T and A.
// ---------------------------------------------------------------------
template <int D, bool PX, bool DQ, int NS, bool OV, bool SF, bool TMA>
__device__ __forceinline__ void wdkv_impl(const u16 *Q, const u16 *R, const u16 *K, const u16 *V, const u16 *G_,
                                          const float *LSE, const float *T, const float *BV, const float *TB, u16 *DK,
                                          u16 *DV, float *DQf, float *DRf, int Hq, int Hkv, int Lq, int Lk, float scale,
                                          int causal, int window, const TmaMap *mQ, const TmaMap *mG, const TmaMap *mR,
                                          const TmaMap *mS) {
	constexpr int BK = 128, BQ = 64, KB = BK * D * 2, QB = BQ * D * 2, NQ = PX ? 3 : 2;
	static_assert(!(SF && OV), "shared-memory operands only in the one-group schedule");
	extern __shared__ __align__(1024) unsigned char smem[];
	const u32 base = (smem_addr(smem) + 1023) & ~1023u;
	unsigned char *gbase = smem + (base - smem_addr(smem));
	// [K][V][NS x (Q, dO, R)][NS x 4 x BQ stats][2 warpgroups x (dS, dT[, Pe])]
	const u32 aK = base, aV = aK + KB, aQ0 = aV + KB;
	float *st = (float *)(gbase + 2 * KB + NS * NQ * QB); // per row: lse log2e, Bv, -scale (Bv - T), -scale (1 + tbar)
	const u32 aDS = base + 2 * KB + NS * NQ * QB + NS * 4 * BQ * 4;
	const int tid = threadIdx.x, wg = warpgroup(), warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, tq = lane & 3;
	const BlockIdx bi = block_order(); // long causal blocks (the first keys) first
	const int j0 = bi.x * BK, hk = bi.y, b = bi.z, G = Hq / Hkv;
	const i64 ko = ((i64)b * Hkv + hk) * Lk * D;
	const ColSpan cs = col_span(j0, BK, BQ, Lq, Lk, causal, window);
	const int off = cs.off, q0 = cs.q0, nq = cs.nq;
	const int ntiles = nq * G;
	const int wj0 = j0 + wg * 64; // this warpgroup's keys [wj0, wj0 + 64)

	// TMA: full[NS], empty[NS] after the dS/dT/Pe tiles
	const u32 aBar = aDS + 2 * (SF ? 3 : DQ ? 2 : 0) * 64 * 128;
	if (TMA) pipe_init<NS>(aBar);
	constexpr bool WS = TMA && WSP(D, PX);
	if (tid < 256) { // (WS: not the producer warpgroup)
		load_sw<D, BK>(aK, K + ko, j0, Lk, tid);
		load_sw<D, BK>(aV, V + ko, j0, Lk, tid);
	}
	// With TMA one thread loads a tile: Q, dO (and R) as D/64 swizzled
	// panels of 64 rows, and the packed row statistics.
	// (tiles are loaded in order: the loader steps its own head and query
	// tile instead of dividing t by nq, a chain of dependent instructions)
	int lg = 0, lq = 0;
	auto tma_tile = [&](int t) {
		const int buf = t % NS, bh = b * Hq + hk * G + lg, r0 = q0 + lq * BQ;
		if (++lq == nq) lq = 0, lg++;
		u32 at = aQ0 + buf * NQ * QB, bar = aBar + 8 * buf;
		mbar_expect_tx(bar, NQ * QB + BQ * 16);
#pragma unroll
		for (int p = 0; p < D / 64; p++) { // 64-column panels
			tma_load3(at + p * BQ * 128, mQ, bar, p * 64, r0, bh);
			tma_load3(at + QB + p * BQ * 128, mG, bar, p * 64, r0, bh);
			if (PX) tma_load3(at + 2 * QB + p * BQ * 128, mR, bar, p * 64, r0, bh);
		}
		tma_load3(smem_addr(st) + buf * BQ * 16, mS, bar, 0, r0, bh);
	};
	auto load_tile = [&](int t, int buf) {
		int gg = t / nq, qt = t % nq;
		int h = hk * G + gg, r0 = q0 + qt * BQ;
		i64 qo = ((i64)b * Hq + h) * Lq * D, so = ((i64)b * Hq + h) * Lq;
		u32 at = aQ0 + buf * NQ * QB;
		load_sw<D, BQ>(at, Q + qo, r0, Lq, tid);
		load_sw<D, BQ>(at + QB, G_ + qo, r0, Lq, tid);
		if (PX) load_sw<D, BQ>(at + 2 * QB, R + qo, r0, Lq, tid);
		float4 *sb = (float4 *)st + buf * BQ; // as bwd_pre_bf16 packs them
		for (int c = tid; c < BQ; c += 256) {
			int i = r0 + c;
			bool ok = i < Lq;
			float l = ok ? LSE[so + i] : NEG_INF, bv = ok && PX ? BV[so + i] : 0.0f;
			sb[c] = make_float4(l == NEG_INF ? __int_as_float(0x7f800000) : l * LOG2E, // no key: p = 0
			                    bv, -scale * (bv - (ok ? T[so + i] : 0.0f)), -scale * (1.0f + (ok && PX ? TB[so + i] : 0.0f)));
		}
	};
	if (TMA) {
		cp_async_commit();
		if (!pipe_start<NS, WS>(aBar, ntiles, wg, tma_tile)) return; // (the producer warpgroup)
	} else {
		if (ntiles > 0) load_tile(0, 0);
		cp_async_commit();
	}

	const float sl2 = scale * LOG2E;
	float ak[D / 2], av[D / 2];
#pragma unroll
	for (int i = 0; i < D / 2; i++) ak[i] = av[i] = 0;
	const int jr0 = wj0 + warp * 16 + g; // keys of this thread's rows: jr0, jr0 + 8
	const u32 wK = aK + wg * 64 * 128, wV = aV + wg * 64 * 128;
	const u32 wDS = aDS + wg * (SF ? 3 : 2) * 64 * 128, wDT = wDS + 64 * 128, wPE = wDT + 64 * 128;
	unsigned char *gDS = gbase + (wDS - base), *gDT = gbase + (wDT - base), *gPE = gbase + (wPE - base);

	// tile t is query tile qt of head gg of the group, stepped as t is
	for (int t = 0, gg = 0, qt = 0; t < ntiles; t++, qt = qt + 1 == nq ? 0 : qt + 1, gg += qt == 0) {
		if (TMA) {
			mbar_wait(aBar + 8 * (t % NS), (t / NS) & 1);
		} else {
			if (t + 1 < ntiles) load_tile(t + 1, (t + 1) % NS);
			cp_async_commit();
			cp_async_wait<1>();
			async_fence();
			__syncthreads();
		}
		const int buf = t % NS, r0 = q0 + qt * BQ;
		const u32 qs = aQ0 + buf * NQ * QB, gs = qs + QB, rs = qs + 2 * QB;
		const float4 *sb = (const float4 *)st + buf * BQ;
		bool live = wj0 < Lk;
		if (causal) {
			live = live && wj0 <= r0 + BQ - 1 + off;
			if (window > 0) live = live && wj0 + 63 > r0 + off - window;
		}
		// ping-pong (TMA only: the block barriers of the cp.async
		// pipeline keep the warpgroups in step anyway)
		if (TMA) turn_take(wg);
		auto pass_turn = [&]() {
			if (TMA) turn_pass(wg, t == ntiles - 1);
		};
		if (!live) pass_turn();
		if (live) { // uniform per warpgroup
			float s[BQ / 2], aa[BQ / 2], tt[PX ? BQ / 2 : 1];
			u32 as[BQ / 16][4], ap[BQ / 16][4], at[PX ? BQ / 16 : 1][4]; // dS, Pe, dT as A fragments
			// Element i of the accumulators: key row jr0 + 8 ((i >> 1) & 1),
			// query column c = 8 (i >> 2) + 2 tq + (i & 1). With the row
			// statistics as packed (bwd_pre_bf16) and u = -scale (1 + tbar - t),
			// the operands are -dS (with its scale), -dT and -scale Pe
			// (Parallax; softmax: Pe = p), three instructions for the three:
			//   dS' = p (u (a - Bv) - scale (Bv - T)), dT' = p (a - Bv), Pe' = p u.
			// SF: an A fragment goes to its [key][query] tile as it is formed,
			// swizzled: row warp 16 + g + 8 r, 16-byte chunk n ^ g of 8-column
			// tile n = 2 k2 + (q >> 1), r = q & 1. (sro, sxo opaque: else the
			// offsets of every (k2, q) are hoisted into registers.)
			int sro = (warp * 16 + g) * 128 + tq * 4, sxo = g << 4;
			if (SF) asm volatile("" : "+r"(sro), "+r"(sxo));
			auto put = [&](unsigned char *tile, int k2, int q, u32 v) {
				*(u32 *)(tile + sro + (q & 1) * 8 * 128 + (((2 * k2 + (q >> 1)) << 4) ^ sxo)) = v;
			};
			issue_sat<BQ, D, PX, OV>(s, aa, tt, BK, wK, qs, wV, gs, wK, rs, pass_turn);
			// the mask as a branch of its own, taken by edge tiles only
			bool edge = r0 + BQ > Lq || wj0 + 64 > Lk;
			if (causal) edge = edge || wj0 + 63 > r0 + off || (window > 0 && wj0 <= r0 + BQ - 1 + off - window);
			if (OV && edge) {
#pragma unroll
				for (int i = 0; i < BQ / 2; i++) {
					const int c = (i >> 2) * 8 + tq * 2 + (i & 1), qi = r0 + c, j = jr0 + 8 * ((i >> 1) & 1);
					bool ok = qi < Lq && j < Lk;
					if (causal) ok = ok && j <= qi + off && (window <= 0 || j > qi + off - window);
					if (!ok) s[i] = NEG_INF;
				}
			}
			// the three operands of element i (column c) from p, a, t
			auto ops = [&](int i, int c, float p, float &ds, float &pe) {
				const float2 zw = *(const float2 *)&sb[c].z; // -scale (Bv - T), -scale (1 + tbar)
				if (PX) {
					const float u = fmaf(tt[i], scale, zw.y);
					ds = p * fmaf(u, aa[i], zw.x); // aa: a - Bv by now
					pe = p * u;
				} else {
					ds = p * fmaf(aa[i], -scale, zw.x);
					pe = p;
				}
			};
			if (OV) {
				// p as S lands, dT' and its product as A does, dS' and Pe' as T does
#pragma unroll
				for (int i = 0; i < BQ / 2; i++) s[i] = ex2(fmaf(s[i], sl2, -sb[(i >> 2) * 8 + tq * 2 + (i & 1)].x));
				if (PX) {
					wg_wait<1>(); // A
#pragma unroll
					for (int i = 0; i < BQ / 2; i += 2) {
						const int c = (i >> 2) * 8 + tq * 2, k2 = i >> 3, q = ((i >> 1) & 1) | (((i >> 2) & 1) << 1);
						aa[i] -= sb[c].y;
						aa[i + 1] -= sb[c + 1].y;
						at[k2][q] = pack2(s[i] * aa[i], s[i + 1] * aa[i + 1]);
					}
					wg_fence();
					mma_pv<D, BQ>(ak, at, rs);
					wg_commit();
					wg_wait<1>(); // T
				} else {
					wg_wait<0>();
				}
#pragma unroll
				for (int i = 0; i < BQ / 2; i += 2) {
					const int c = (i >> 2) * 8 + tq * 2, k2 = i >> 3, q = ((i >> 1) & 1) | (((i >> 2) & 1) << 1);
					float ds[2], pe[2];
					ops(i, c, s[i], ds[0], pe[0]);
					ops(i + 1, c + 1, s[i + 1], ds[1], pe[1]);
					as[k2][q] = pack2(ds[0], ds[1]);
					ap[k2][q] = pack2(pe[0], pe[1]);
				}
			} else {
				// all three landed: one pass over 8-column tiles n, whose two
				// columns' statistics serve the thread's two rows; SF stores
				// each operand as it is formed
#pragma unroll
				for (int n = 0; n < BQ / 8; n++) {
					float ds[2][2], dt[2][2], pe[2][2]; // [row half][column]
#pragma unroll
					for (int e = 0; e < 2; e++) {
						const int c = n * 8 + tq * 2 + e;
						const float2 xy = *(const float2 *)&sb[c].x; // lse log2e, Bv
#pragma unroll
						for (int r = 0; r < 2; r++) {
							const int i = n * 4 + 2 * r + e, j = jr0 + 8 * r, qi = r0 + c;
							float p = ex2(fmaf(s[i], sl2, -xy.x));
							if (edge) { // (inline here: a branch of its own costs this kernel registers)
								bool ok = qi < Lq && j < Lk;
								if (causal) ok = ok && j <= qi + off && (window <= 0 || j > qi + off - window);
								if (!ok) p = 0.0f;
							}
							if (PX) {
								aa[i] -= xy.y;
								dt[r][e] = p * aa[i];
							}
							ops(i, c, p, ds[r][e], pe[r][e]);
						}
					}
#pragma unroll
					for (int r = 0; r < 2; r++) {
						const int k2 = n >> 1, q = r | ((n & 1) << 1);
						as[k2][q] = pack2(ds[r][0], ds[r][1]);
						ap[k2][q] = pack2(pe[r][0], pe[r][1]);
						if (PX) at[k2][q] = pack2(dt[r][0], dt[r][1]);
						if (SF) {
							put(gDS, k2, q, as[k2][q]);
							put(gPE, k2, q, ap[k2][q]);
							if (PX) put(gDT, k2, q, at[k2][q]);
						}
					}
				}
			}
			if (SF) {
				async_fence(); // the whole warpgroup's tiles, before its wgmma reads them
				asm volatile("bar.sync %0, 128;" ::"r"(1 + wg) : "memory");
				wg_fence();
				mma_pv_ss<D, BQ>(av, wPE, gs);
				mma_pv_ss<D, BQ>(ak, wDS, qs);
				if (PX) mma_pv_ss<D, BQ>(ak, wDT, rs);
			} else {
				wg_fence();
				mma_pv<D, BQ>(av, ap, gs);
				mma_pv<D, BQ>(ak, as, qs);
				if (PX && !OV) mma_pv<D, BQ>(ak, at, rs);
			}
			wg_commit();
			if (DQ && !SF) {
				// -dS and -dT as [key][query] tiles: the MN-major A operand of
				// dQ = dS K.
#pragma unroll
				for (int k2 = 0; k2 < BQ / 16; k2++)
#pragma unroll
					for (int q = 0; q < 4; q++) {
						put(gDS, k2, q, as[k2][q]);
						if (PX) put(gDT, k2, q, at[k2][q]);
					}
			}
			wg_wait<0>();
			if (DQ) {
				if (!SF) { // (SF: stored and fenced before dK, dV)
					async_fence();
					asm volatile("bar.sync %0, 128;" ::"r"(1 + wg) : "memory");
				}
				const int h = hk * G + gg;
				float *dqrow = DQf + ((i64)b * Hq + h) * Lq * D, *drrow = DRf + ((i64)b * Hq + h) * Lq * D;
#pragma unroll
				for (int pass = 0; pass < (PX ? 2 : 1); pass++) {
					float dq[D / 2];
					wg_fence();
#pragma unroll
					for (int ks = 0; ks < 4; ks++) {
						u64 da = sw_desc((pass ? wDT : wDS) + ks * 16 * 128, 64 * 128);
						u64 db = sw_desc(wK + ks * 16 * 128, BK * 128);
						if (D == 128) wgmma_ss_n128_t11(dq, da, db, ks > 0);
						else wgmma_ss_n64_t11(dq, da, db, ks > 0);
					}
					wg_commit();
					wg_wait<0>();
					float *dst = pass ? drrow : dqrow;
#pragma unroll
					for (int i = 0; i < D / 2; i += 2) {
						int qi = r0 + warp * 16 + g + 8 * ((i >> 1) & 1), c = (i >> 2) * 8 + tq * 2;
						if (qi < Lq) red_add2(dst + (i64)qi * D + c, -dq[i], -dq[i + 1]); // of -dS, -dT
					}
				}
			}
		}
		tile_done<NS, WS, TMA>(aBar, t, ntiles, tma_tile);
	}
	cp_async_wait<0>();
	// ak is -dK; av is -scale dV (Parallax) or dV
	store_rows<D>(DK + ko, ak, -1.0f, jr0, Lk, tq);
	store_rows<D>(DV + ko, av, PX ? -1.0f / scale : 1.0f, jr0, Lk, tq);
}

#define WDKV(D, PXN, PX, DQ, SUF)                                                                                       \
	extern "C" __global__ void __launch_bounds__(256, 1) attn_dkv_wgmma_d##D##_##PXN##SUF(                             \
	    const u16 *Q, const u16 *R, const u16 *K, const u16 *V, const u16 *G_, const float *LSE, const float *T,       \
	    const float *BV, const float *TB, u16 *DK, u16 *DV, float *DQf, float *DRf, int Hq, int Hkv, int Lq, int Lk,   \
	    float scale, int causal, int window) {                                                                          \
		wdkv_impl<D, PX, DQ, DQ ? 2 : STAGES(D, PX), OVERLAP(D, PX), SMEMFRAG(D, PX), false>(                             \
		    Q, R, K, V, G_, LSE, T, BV, TB, DK, DV, DQf, DRf, Hq, Hkv, Lq, Lk, scale, causal, window, 0, 0, 0, 0);     \
	}
// The TMA variant: Q, dO, R and the packed row statistics (lse log2e, T,
// Bv, tbar as one float4 a row, from bwd_pre_bf16) come through tensor
// maps, loaded by one thread into mbarrier-guarded stages, so the two
// warpgroups never wait on each other at a block barrier.
#define WDKVT(D, PXN, PX)                                                                                               \
	extern "C" __global__ void __launch_bounds__(TMA_THREADS(D, PX), 1) attn_dkv_tma_d##D##_##PXN(                          \
	    const u16 *K, const u16 *V, u16 *DK, u16 *DV, int Hq, int Hkv, int Lq, int Lk, float scale, int causal,        \
	    int window, const __grid_constant__ TmaMap mQ, const __grid_constant__ TmaMap mG,                               \
	    const __grid_constant__ TmaMap mR, const __grid_constant__ TmaMap mS) {                                          \
		wdkv_impl<D, PX, false, STAGES(D, PX), OVERLAP(D, PX), SMEMFRAG(D, PX), true>(                                    \
		    0, 0, K, V, 0, 0, 0, 0, 0, DK, DV, 0, 0, Hq, Hkv, Lq, Lk, scale, causal, window, &mQ, &mG, &mR, &mS);      \
	}
WDKVT(64, px, true)
WDKVT(64, sm, false)
WDKVT(128, px, true)
WDKVT(128, sm, false)
WDKV(64, px, true, true, _dq)
WDKV(64, sm, false, true, _dq)
WDKV(128, px, true, true, _dq)
WDKV(128, sm, false, true, _dq)
WDKV(64, px, true, false, )
WDKV(64, sm, false, false, )
WDKV(128, px, true, false, )
WDKV(128, sm, false, false, )

// ---------------------------------------------------------------------
// Backward, row-parallel: dq = scale sum dS k, dr = sum dT k. One block of
// two warpgroups per 128 query rows (64 each), K/V tiles of BN keys
// double-buffered. Per tile a warpgroup recomputes S = Q K^T, T = R K^T
// and A = dO V^T, forms dS and dT with its rows' statistics held in
// registers, and issues dQ += dS K and dR += dT K with dS, dT as register
// operands (K read MN-major from the same tile).
// ---------------------------------------------------------------------
template <int D, int BN, bool PX, int NS, bool OV, bool TMA>
__device__ __forceinline__ void wdq_impl(const u16 *Q, const u16 *R, const u16 *K, const u16 *V, const u16 *G_,
                                         const float *LSE, const float *T, const float *BV, const float *TB, u16 *DQ,
                                         u16 *DR, int Hq, int Hkv, int Lq, int Lk, float scale, int causal, int window,
                                         const TmaMap *mK, const TmaMap *mV) {
	constexpr int BM = 128, QB = BM * D * 2, KB = BN * D * 2, NQ = PX ? 3 : 2;
	extern __shared__ __align__(1024) unsigned char smem[];
	const u32 base = (smem_addr(smem) + 1023) & ~1023u;
	const u32 aQ = base, aG = aQ + QB, aR = aG + QB, aK = aQ + NQ * QB, aV = aK + NS * KB;
	const int tid = threadIdx.x, wg = warpgroup(), warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, tq = lane & 3;
	const BlockIdx bi = block_order();
	const int m0 = (gridDim.x - 1 - bi.x) * BM; // long causal blocks first
	const int h = bi.y, b = bi.z, hk = h / (Hq / Hkv);
	const i64 qo = ((i64)b * Hq + h) * Lq * D, ko = ((i64)b * Hkv + hk) * Lk * D, so = ((i64)b * Hq + h) * Lq;
	const int w0 = m0 + wg * 64;
	const RowSpan sp = row_span(m0, w0, BN, Lq, Lk, causal, window);
	const int off = sp.off, t0 = sp.t0, ntiles = sp.ntiles, wHi = sp.wHi, wLo = sp.wLo, firstHi = sp.firstHi,
	          lastLo = sp.lastLo;

	constexpr bool WS = TMA && WSP(D, PX);
	if (tid < 256) { // (WS: not the producer warpgroup)
		load_sw<D, BM>(aQ, Q + qo, m0, Lq, tid);
		load_sw<D, BM>(aG, G_ + qo, m0, Lq, tid);
		if (PX) load_sw<D, BM>(aR, R + qo, m0, Lq, tid);
	}
	// TMA: K/V tiles of BN keys through tensor maps, full[NS] and empty[NS]
	// mbarriers after the K/V stages; one thread (of warpgroup 1, which
	// issues second) loads.
	const u32 aBar = aV + NS * KB;
	const int bhk = b * Hkv + hk;
	auto tma_kv = [&](int t) {
		tma_kv_tile<D, BN>(aK, aV, KB, t % NS, aBar + 8 * (t % NS), mK, mV, t0 + t * BN, bhk);
	};
	if (TMA) pipe_init<NS>(aBar);
	else if (ntiles > 0) load_kv<D, BN, NS>(aK, aV, K + ko, V + ko, 0, t0, Lk, tid);
	cp_async_commit();
	if (TMA && !pipe_start<NS, WS>(aBar, ntiles, wg, tma_kv)) return; // (the producer warpgroup)

	const float sl2 = scale * LOG2E;
	const int i0 = w0 + warp * 16 + g;
	int hiR[2], loR[2];
	row_keys(i0, off, Lk, causal, window, hiR, loR);
	float lse[2], tr[2], bv[2], tbr[2];
#pragma unroll
	for (int r = 0; r < 2; r++) {
		int i = i0 + 8 * r;
		bool ok = i < Lq;
		float l = ok ? LSE[so + i] : NEG_INF;
		lse[r] = l == NEG_INF ? __int_as_float(0x7f800000) : l * LOG2E; // no key: p = 0
		bv[r] = ok && PX ? BV[so + i] : 0.0f;
		tr[r] = bv[r] - (ok ? T[so + i] : 0.0f); // Bv - T
		tbr[r] = 1.0f + (ok && PX ? TB[so + i] : 0.0f); // 1 + tbar
	}
	float dq[D / 2], dr[PX ? D / 2 : 1];
#pragma unroll
	for (int i = 0; i < D / 2; i++) {
		dq[i] = 0;
		if (PX) dr[i] = 0;
	}
	const u32 wQ = aQ + wg * 64 * 128, wG = aG + wg * 64 * 128, wR = aR + wg * 64 * 128;

	for (int t = 0; t < ntiles; t++) {
		kv_wait<D, BN, NS, TMA>(aBar, aK, aV, K + ko, V + ko, t, ntiles, t0, Lk, tid);
		const int j0 = t0 + t * BN;
		const bool live = j0 < wHi && j0 + BN > wLo;
		if (TMA) turn_take(wg);
		auto pass_turn = [&]() {
			if (TMA) turn_pass(wg, t == ntiles - 1);
		};
		if (!live) pass_turn();
		if (live) { // uniform per warpgroup
			const u32 ks = aK + (t % NS) * KB, vs = aV + (t % NS) * KB;
			float s[BN / 2], aa[BN / 2], tt[PX ? BN / 2 : 1];
			// dQ and dR accumulate sum p f k and sum p (a - Bv) k, with
			// f = (Bv - T) + (1 + tbar - t)(a - Bv): dS / scale and -dT, so
			// the scale and the sign are applied once, at the store.
			// S, A and T as three groups (OV): p = exp(S - lse) overlaps A
			// and T, dT (which needs no T) and its product overlap T.
			issue_sat<BN, D, PX, OV>(s, aa, tt, BM, wQ, ks, wG, vs, wR, ks, pass_turn);
			// the mask as a branch of its own, taken by edge tiles only
			if (j0 + BN > firstHi || j0 < lastLo) {
#pragma unroll
				for (int i = 0; i < BN / 2; i++) {
					const int r = (i >> 1) & 1, j = j0 + (i >> 2) * 8 + tq * 2 + (i & 1);
					if (j >= hiR[r] || j < loR[r]) s[i] = NEG_INF;
				}
			}
#pragma unroll
			for (int i = 0; i < BN / 2; i++) s[i] = ex2(fmaf(s[i], sl2, -lse[(i >> 1) & 1]));
			// A fragments: k-step i/8, regs {row g, row g+8} x {cols 0-7, 8-15}
			u32 as[BN / 16][4], at[PX ? BN / 16 : 1][4];
			if (PX) {
				if (OV) wg_wait<1>(); // A
#pragma unroll
				for (int i = 0; i < BN / 2; i += 2) {
					const int r = (i >> 1) & 1, k2 = i >> 3, q = r | (((i >> 2) & 1) << 1);
					aa[i] -= bv[r];
					aa[i + 1] -= bv[r];
					at[k2][q] = pack2(s[i] * aa[i], s[i + 1] * aa[i + 1]);
				}
				if (OV) {
					wg_fence();
					mma_pv<D, BN>(dr, at, ks);
					wg_commit();
					wg_wait<1>(); // T
				}
			} else if (OV) {
				wg_wait<0>();
			}
#pragma unroll
			for (int i = 0; i < BN / 2; i += 2) {
				const int r = (i >> 1) & 1, k2 = i >> 3, q = r | (((i >> 2) & 1) << 1);
				float ds[2];
#pragma unroll
				for (int e = 0; e < 2; e++)
					ds[e] = PX ? s[i + e] * fmaf(tbr[r] - tt[i + e], aa[i + e], tr[r]) : s[i + e] * (aa[i + e] + tr[r]);
				as[k2][q] = pack2(ds[0], ds[1]);
			}
			wg_fence();
			mma_pv<D, BN>(dq, as, ks);
			if (PX && !OV) mma_pv<D, BN>(dr, at, ks);
			wg_commit();
			wg_wait<0>();
		}
		tile_done<NS, WS, TMA>(aBar, t, ntiles, tma_kv);
	}
	cp_async_wait<0>();
	store_rows<D>(DQ + qo, dq, scale, i0, Lq, tq); // dq: sum p f k, dS / scale
	if (PX) store_rows<D>(DR + qo, dr, -1.0f, i0, Lq, tq); // dr: -dR
}

#define WDQ(D, BN, SUF)                                                                                                 \
	extern "C" __global__ void __launch_bounds__(256, 1) attn_dq_wgmma_d##D##SUF##_px(                                 \
	    const u16 *Q, const u16 *R, const u16 *K, const u16 *V, const u16 *G_, const float *LSE, const float *T,       \
	    const float *BV, const float *TB, u16 *DQ, u16 *DR, int Hq, int Hkv, int Lq, int Lk, float scale, int causal,  \
	    int window) {                                                                                                   \
		wdq_impl<D, BN, true, STAGES(D, true), OVERLAP(D, true), false>(Q, R, K, V, G_, LSE, T, BV, TB, DQ, DR, Hq, Hkv, Lq, Lk, scale, causal, window, 0, 0); \
	}                                                                                                                   \
	extern "C" __global__ void __launch_bounds__(256, 1) attn_dq_wgmma_d##D##SUF##_sm(                                 \
	    const u16 *Q, const u16 *R, const u16 *K, const u16 *V, const u16 *G_, const float *LSE, const float *T,       \
	    const float *BV, const float *TB, u16 *DQ, u16 *DR, int Hq, int Hkv, int Lq, int Lk, float scale, int causal,  \
	    int window) {                                                                                                   \
		wdq_impl<D, BN, false, STAGES(D, false), OVERLAP(D, false), false>(Q, R, K, V, G_, LSE, T, BV, TB, DQ, DR, Hq, Hkv, Lq, Lk, scale, causal, window, 0, 0); \
	}
// The TMA variant: K and V tiles of 64 keys through tensor maps into
// mbarrier stages, the warpgroups ordered by named barriers (as the TMA
// dk/dv kernel).
#define WDQT(D, PXN, PX)                                                                                                \
	extern "C" __global__ void __launch_bounds__(TMA_THREADS(D, PX), 1) attn_dq_tma_d##D##_##PXN(                           \
	    const u16 *Q, const u16 *R, const u16 *G_, const float *LSE, const float *T, const float *BV, const float *TB,  \
	    u16 *DQ, u16 *DR, int Hq, int Hkv, int Lq, int Lk, float scale, int causal, int window,                        \
	    const __grid_constant__ TmaMap mK, const __grid_constant__ TmaMap mV) {                                          \
		wdq_impl<D, 64, PX, STAGES(D, PX), OVERLAP(D, PX), true>(Q, R, 0, 0, G_, LSE, T, BV, TB, DQ, DR, Hq, Hkv, Lq, Lk,   \
		                                                     scale, causal, window, &mK, &mV);                         \
	}
WDQT(64, px, true)
WDQT(64, sm, false)
WDQT(128, px, true)
WDQT(128, sm, false)
WDQ(64, 64, )
WDQ(128, 64, )
WDQ(128, 32, _bn32)

#endif // __CUDA_ARCH_FEAT_SM90_ALL
