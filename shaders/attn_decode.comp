#version 450
// Decode attention over a KV cache, built for bandwidth: one workgroup
// streams one split of one (sequence, KV head)'s keys once, for every
// query row of its GQA group (G heads x Lq positions, at most 8 rows) and
// their probes together.
//
// Per tile of BC keys (K and V staged in shared memory as raw words,
// loaded 16 bytes per invocation):
//   scores:  invocation (key j, half h): h = 0 computes the scaled query
//            scores of key j for every row, h = 1 its probe scores t = r.k;
//   softmax: the tile's row maxima by subgroupMax and a shared-memory
//            pass; every invocation keeps the running max m of every row
//            (the same values everywhere) and alpha = exp(m_old - m);
//            P1 = exp(s - m) and P2 = P1 t go to shared memory;
//   P V:     invocation (column word c, key group kh) accumulates
//            O1 += P1 V and O2 += P2 V for its columns over its keys,
//            after scaling by alpha.
// The running sums d1 = sum P1, d2 = sum P2 are kept per key slot and
// summed once at the end, as are the key groups' accumulators. Output: the
// finished o (one split) or the partial state (m, d1, d2, O1, O2) that
// attn_combine merges, laid out as attn_fwd's.
//
// Per-row state lives in vec4 pairs (rows 0-3 and 4-7), never in arrays:
// NVIDIA's compiler keeps private arrays in local memory unless every
// access is constant after its own unrolling, which was a tenfold
// slowdown; vectors stay in registers whatever the indexing.
//
// Requires subgroup arithmetic, WG = 2 BC, D a power of two of whole
// 16-byte pieces, at most two accumulator columns per invocation, K and V
// of one dtype; the host falls back to attn_fwd otherwise.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"
#include "attn.glsl"

layout(constant_id = 1) const uint D = 128;
layout(constant_id = 2) const uint RP = 4; // rows per workgroup, padded: 4 or 8
layout(constant_id = 3) const uint BC = 64; // keys per tile; WG = 2 BC
layout(constant_id = 5) const uint HAS_R = 1;
layout(constant_id = 7) const uint PARTIAL = 0;

IN(0, Q)
IN(1, K)
IN(2, V)
IN(3, R)
OUT(4, O)
INDEX(5, lens)
F32BUF(6, part)
STATUS(7)

// 16-byte views of the caches (aliases of bindings 1 and 2).
layout(std430, binding = 1) readonly buffer K4_ { uvec4 K4[]; };
layout(std430, binding = 2) readonly buffer V4_ { uvec4 V4[]; };

const bool H16 = K_dt == DT_BF16 || K_dt == DT_F16;
const uint NW = H16 ? D / 2u : D;          // 32-bit words per key row
const uint NW4 = NW / 4u;                  // 16-byte pieces per key row
const uint KS = NW + 1u;                   // sK row stride: odd, no bank conflicts
const uint NV = 2u * RP;                   // vectors: RP query rows, RP probe rows
const uint NWE = NW < WG ? NW : WG;        // column words handled at once
const uint NKH = WG / NWE;                 // key groups in the P V phase
const uint WPT = (NW + WG - 1u) / WG;      // words per invocation in P V
const uint EPW = H16 ? 2u : 1u;            // elements per word
const uint NA = WPT * EPW;                 // accumulator columns per invocation (<= 2)
const uint LDN = (BC * NW4 + WG - 1u) / WG; // 16-byte pieces per invocation per tile (<= 16)
const uint MAXSG = 16u;                    // subgroups per workgroup, at most (host-checked)

shared vec4 sQR[D * NV / 4u];       // [x][vector], 4 vectors per element
shared uint sK[BC * KS];            // [key][word], padded
shared uint sV[BC * NW];            // [key][word]
shared vec4 sP[BC * NV / 4u];       // [key][P1 rows, P2 rows], 4 per element
shared float sT[BC * RP];           // [key][probe score]
shared float sMax[MAXSG * RP];      // per-subgroup tile maxima

// A row value of a (rows 0-3, rows 4-7) pair.
float rowGet(vec4 a, vec4 b, uint i) { return i < 4u ? a[i] : b[i - 4u]; }

void rowSet(inout vec4 a, inout vec4 b, uint i, float v) {
	if (i < 4u) {
		a[i] = v;
	} else {
		b[i - 4u] = v;
	}
}

float kf(uint w, uint e) {
	if (K_dt == DT_BF16) {
		return e == 0u ? uintBitsToFloat(w << 16) : uintBitsToFloat(w & 0xffff0000u);
	}
	if (K_dt == DT_F16) {
		return unpackHalf2x16(w)[e];
	}
	return uintBitsToFloat(w);
}

// The accumulators: column a (0, 1) of O1 and O2, rows in vec4 pairs.
vec4 o1a0, o1b0, o1a1, o1b1, o2a0, o2b0, o2a1, o2b1;

float accGet(uint which, uint a, uint i) {
	if (which == 0u) {
		return a == 0u ? rowGet(o1a0, o1b0, i) : rowGet(o1a1, o1b1, i);
	}
	return a == 0u ? rowGet(o2a0, o2b0, i) : rowGet(o2a1, o2b1, i);
}

void accSet(uint which, uint a, uint i, float v) {
	if (which == 0u) {
		if (a == 0u) {
			rowSet(o1a0, o1b0, i, v);
		} else {
			rowSet(o1a1, o1b1, i, v);
		}
	} else {
		if (a == 0u) {
			rowSet(o2a0, o2b0, i, v);
		} else {
			rowSet(o2a1, o2b1, i, v);
		}
	}
}

// Staging: every invocation issues its (up to 16) 16-byte loads of K and
// V first, into named registers, then stores them, so the loads are in
// flight together. Zeros past the split (their V must be finite: P is 0
// there, and 0 * NaN is not 0). With PX_PREFETCH the loads of the next
// tile are issued before this tile's arithmetic (more registers, fewer
// workgroups per multiprocessor; which wins depends on the device).
#define PX_DECL(l) uvec4 k##l = uvec4(0u), v##l = uvec4(0u);
#define PX_LOAD(l, T0)                                          \
	if (l < LDN) {                                              \
		uint e = t + WG * l, key = (T0) + e / NW4;              \
		k##l = uvec4(0u);                                       \
		v##l = uvec4(0u);                                       \
		if (e < BC * NW4 && key < c1) {                         \
			uint p = (kvbase + key) * NW4 + e % NW4;            \
			k##l = K4[p];                                       \
			v##l = V4[p];                                       \
		}                                                       \
	}
#define PX_STORE(l)                                             \
	if (l < LDN) {                                              \
		uint e = t + WG * l;                                    \
		if (e < BC * NW4) {                                     \
			uint kj = e / NW4, w = 4u * (e % NW4);              \
			sK[kj * KS + w] = k##l.x;                           \
			sK[kj * KS + w + 1u] = k##l.y;                      \
			sK[kj * KS + w + 2u] = k##l.z;                      \
			sK[kj * KS + w + 3u] = k##l.w;                      \
			sV[kj * NW + w] = v##l.x;                           \
			sV[kj * NW + w + 1u] = v##l.y;                      \
			sV[kj * NW + w + 2u] = v##l.z;                      \
			sV[kj * NW + w + 3u] = v##l.w;                      \
		}                                                       \
	}
#define PX_ALL(M) M(0u) M(1u) M(2u) M(3u) M(4u) M(5u) M(6u) M(7u) M(8u) M(9u) M(10u) M(11u) M(12u) M(13u) M(14u) M(15u)
#define PX_LOAD_AT(l) PX_LOAD(l, tileStart)

void main() {
	uint t = gl_LocalInvocationID.x;
	uint g = px_group();
	uint S = pc.splits;
	uint split = g % S, bh = g / S;
	if (bh >= pc.B * pc.Hkv) {
		return;
	}
	uint b = bh / pc.Hkv, hk = bh % pc.Hkv;
	int nb = lens[b];
	if (nb < int(pc.Lq) || nb > int(pc.Lk)) {
		if (t == 0u && hk == 0u && split == 0u) {
			px_raise(PX_ERR_LENS_RANGE, b, uint(nb), pc.Lk, pc.Lq);
		}
		return;
	}
	uint n = uint(nb);
	uint rows = pc.G * pc.Lq;
	uint lo0, hi0;
	visible(0u, n, true, lo0, hi0);
	uint c0 = lo0 + (n - lo0) * split / S;
	uint c1 = lo0 + (n - lo0) * (split + 1u) / S;

	// Each row's visible keys within this split.
	uvec4 rloA = uvec4(0u), rloB = uvec4(0u), rhiA = uvec4(0u), rhiB = uvec4(0u);
	PX_UNROLL for (uint i = 0u; i < 8u; i++) {
		uint lo = 0u, hi = 0u;
		if (i < RP && i < rows) {
			visible(i % pc.Lq, n, true, lo, hi);
			lo = max(lo, c0);
			hi = max(min(hi, c1), lo);
		}
		if (i < 4u) {
			rloA[i] = lo;
			rhiA[i] = hi;
		} else {
			rloB[i - 4u] = lo;
			rhiB[i - 4u] = hi;
		}
	}
	for (uint e = t; e < D * NV; e += WG) {
		uint x = e / NV, v = e % NV, i = v % RP;
		float val = 0.0;
		if (i < rows) {
			uint off = qrow(b, hk, i) * D + x;
			if (v < RP) {
				val = Q_ld(off) * pc.scale;
			} else if (HAS_R != 0u) {
				val = R_ld(off);
			}
		}
		sQR[e / 4u][e % 4u] = val;
	}

	uint kvbase = (b * pc.Hkv + hk) * pc.Lk; // first key row of this (b, hk)
	uint j = t % BC, half_ = t / BC;
	uint wc = t % NWE, kh = t / NWE;
	vec4 mA = vec4(PX_NEG_INF), mB = vec4(PX_NEG_INF);
	vec4 d1A = vec4(0.0), d1B = vec4(0.0), d2A = vec4(0.0), d2B = vec4(0.0);
	o1a0 = vec4(0.0);
	o1b0 = vec4(0.0);
	o1a1 = vec4(0.0);
	o1b1 = vec4(0.0);
	o2a0 = vec4(0.0);
	o2b0 = vec4(0.0);
	o2a1 = vec4(0.0);
	o2b1 = vec4(0.0);

	uint tileStart = c0;
#ifdef PX_PREFETCH
	PX_ALL(PX_DECL)
	PX_ALL(PX_LOAD_AT)
#endif
	for (uint t0 = c0; t0 < c1; t0 += BC) {
#ifdef PX_PREFETCH
		PX_ALL(PX_STORE)
		barrier();
		tileStart = t0 + BC;
		PX_ALL(PX_LOAD_AT)
#else
		PX_ALL(PX_DECL)
		tileStart = t0;
		PX_ALL(PX_LOAD_AT)
		PX_ALL(PX_STORE)
		barrier();
#endif

		// Scores of key j: half 0 the query rows, half 1 the probe rows.
		vec4 sA = vec4(0.0), sB = vec4(0.0);
		if (half_ == 0u || HAS_R != 0u) {
			uint vb = half_ * RP / 4u;
			PX_LOOP for (uint c = 0u; c < NW; c++) {
				uint w = sK[j * KS + c];
				float k0 = kf(w, 0u);
				uint base = c * EPW * NV / 4u + vb;
				sA += sQR[base] * k0;
				if (RP > 4u) {
					sB += sQR[base + 1u] * k0;
				}
				if (EPW == 2u) {
					float k1 = kf(w, 1u);
					base += NV / 4u;
					sA += sQR[base] * k1;
					if (RP > 4u) {
						sB += sQR[base + 1u] * k1;
					}
				}
			}
		}
		uint key = t0 + j;
		uint h0 = half_ == 0u ? 1u : 0u;
		bvec4 okA = bvec4(uvec4(greaterThanEqual(uvec4(key), rloA)) * uvec4(lessThan(uvec4(key), rhiA)) * h0);
		bvec4 okB = bvec4(uvec4(greaterThanEqual(uvec4(key), rloB)) * uvec4(lessThan(uvec4(key), rhiB)) * h0);
		vec4 neg = vec4(PX_NEG_INF);
		vec4 mxA = subgroupMax(mix(neg, sA, okA));
		vec4 mxB = RP > 4u ? subgroupMax(mix(neg, sB, okB)) : neg;
		if (subgroupElect()) {
			PX_UNROLL for (uint i = 0u; i < 8u; i++) {
				if (i < RP) {
					sMax[gl_SubgroupID * RP + i] = rowGet(mxA, mxB, i);
				}
			}
		}
		if (half_ == 0u) {
			sA = mix(neg, sA, okA);
			sB = mix(neg, sB, okB);
		} else {
			PX_UNROLL for (uint i = 0u; i < 8u; i++) {
				if (i < RP) {
					sT[j * RP + i] = rowGet(sA, sB, i);
				}
			}
		}
		barrier();
		vec4 nA = mA, nB = mB;
		for (uint sg = 0u; sg < gl_NumSubgroups; sg++) {
			nA = max(nA, vec4(sMax[sg * RP], sMax[sg * RP + 1u], sMax[sg * RP + 2u], sMax[sg * RP + 3u]));
			if (RP > 4u) {
				nB = max(nB, vec4(sMax[sg * RP + 4u], sMax[sg * RP + 5u], sMax[sg * RP + 6u], sMax[sg * RP + 7u]));
			}
		}
		// alpha = exp(m_old - m_new); 0 when there was no key yet, 1 when
		// there still is none.
		vec4 alA = mix(mix(exp(mA - nA), vec4(0.0), equal(mA, neg)), vec4(1.0), equal(nA, neg));
		vec4 alB = mix(mix(exp(mB - nB), vec4(0.0), equal(mB, neg)), vec4(1.0), equal(nB, neg));
		mA = nA;
		mB = nB;
		if (half_ == 0u) {
			vec4 pA = mix(exp(sA - mA), vec4(0.0), equal(sA, neg));
			vec4 pB = mix(exp(sB - mB), vec4(0.0), equal(sB, neg));
			vec4 tA = vec4(0.0), tB = vec4(0.0);
			if (HAS_R != 0u) {
				tA = vec4(sT[j * RP], sT[j * RP + 1u], sT[j * RP + 2u], sT[j * RP + 3u]);
				if (RP > 4u) {
					tB = vec4(sT[j * RP + 4u], sT[j * RP + 5u], sT[j * RP + 6u], sT[j * RP + 7u]);
				}
			}
			// P2 = P1 t of a masked pair is 0, not 0 * t (NaN for an
			// infinite probe score of a key the row does not see).
			vec4 ptA = mix(vec4(0.0), pA * tA, okA), ptB = mix(vec4(0.0), pB * tB, okB);
			sP[j * NV / 4u] = pA;
			sP[j * NV / 4u + RP / 4u] = ptA;
			if (RP > 4u) {
				sP[j * NV / 4u + 1u] = pB;
				sP[j * NV / 4u + RP / 4u + 1u] = ptB;
			}
			d1A = d1A * alA + pA;
			d1B = d1B * alB + pB;
			d2A = d2A * alA + ptA;
			d2B = d2B * alB + ptB;
		}
		barrier();
		// P V for this invocation's columns over its key group.
		o1a0 *= alA;
		o1b0 *= alB;
		o1a1 *= alA;
		o1b1 *= alB;
		o2a0 *= alA;
		o2b0 *= alB;
		o2a1 *= alA;
		o2b1 *= alB;
		PX_LOOP for (uint jj = kh; jj < BC; jj += NKH) {
			vec4 p1A = sP[jj * NV / 4u], p2A = sP[jj * NV / 4u + RP / 4u];
			vec4 p1B = vec4(0.0), p2B = vec4(0.0);
			if (RP > 4u) {
				p1B = sP[jj * NV / 4u + 1u];
				p2B = sP[jj * NV / 4u + RP / 4u + 1u];
			}
			// The rows that see key jj (all of them with Lq = 1): a
			// masked pair adds nothing, not 0 * v (NaN for a non-finite v).
			uint vkey = t0 + jj;
			bvec4 seeA = bvec4(uvec4(greaterThanEqual(uvec4(vkey), rloA)) * uvec4(lessThan(uvec4(vkey), rhiA)));
			bvec4 seeB = bvec4(uvec4(greaterThanEqual(uvec4(vkey), rloB)) * uvec4(lessThan(uvec4(vkey), rhiB)));
			uint c = wc;
			if (c < NW) {
				float v0 = kf(sV[jj * NW + c], 0u);
				o1a0 += mix(vec4(0.0), p1A * v0, seeA);
				o2a0 += mix(vec4(0.0), p2A * v0, seeA);
				if (RP > 4u) {
					o1b0 += mix(vec4(0.0), p1B * v0, seeB);
					o2b0 += mix(vec4(0.0), p2B * v0, seeB);
				}
				// Second column: the word's high half (16-bit), or the
				// next word group (f32 with D = 2 WG).
				float v1 = 0.0;
				if (EPW == 2u) {
					v1 = kf(sV[jj * NW + c], 1u);
				} else if (WPT == 2u) {
					v1 = kf(sV[jj * NW + c + WG], 0u);
				}
				if (NA == 2u) {
					o1a1 += mix(vec4(0.0), p1A * v1, seeA);
					o2a1 += mix(vec4(0.0), p2A * v1, seeA);
					if (RP > 4u) {
						o1b1 += mix(vec4(0.0), p1B * v1, seeB);
						o2b1 += mix(vec4(0.0), p2B * v1, seeB);
					}
				}
			}
		}
		barrier();
	}

	// Sum the key slots' d1, d2 and the key groups' accumulators (shared
	// memory reused: sP for the sums, sK/sV for the accumulators).
	if (half_ == 0u) {
		sP[j * NV / 4u] = d1A;
		sP[j * NV / 4u + RP / 4u] = d2A;
		if (RP > 4u) {
			sP[j * NV / 4u + 1u] = d1B;
			sP[j * NV / 4u + RP / 4u + 1u] = d2B;
		}
	}
	barrier();
	if (t < NV) {
		float acc = 0.0;
		for (uint jj = 0u; jj < BC; jj++) {
			acc += sP[(jj * NV + t) / 4u][t % 4u];
		}
		sT[t] = acc; // d1 of row t (t < RP), d2 of row t - RP
	}
	// Column x of accumulator a: x = (wc + a WG) for f32 (WPT 2), else
	// wc EPW + a. D * NV floats per key group; the groups fold in rounds of
	// CAP (the host checks CAP >= 1).
	const uint CAP = (BC * KS + BC * NW) / (D * NV);
	for (uint k0 = 0u; k0 < NKH; k0 += CAP) {
		barrier();
		if (kh >= k0 && kh < k0 + CAP && wc < NW) {
			PX_UNROLL for (uint a = 0u; a < 2u; a++) {
				uint x = EPW == 2u ? wc * 2u + a : wc + a * WG;
				if (a < NA) {
					PX_UNROLL for (uint i = 0u; i < 8u; i++) {
						if (i < RP) {
							uint b1 = ((kh - k0) * NV + i) * D + x;
							uint b2 = ((kh - k0) * NV + RP + i) * D + x;
							uint v1 = floatBitsToUint(accGet(0u, a, i)), v2 = floatBitsToUint(accGet(1u, a, i));
							if (b1 < BC * KS) {
								sK[b1] = v1;
							} else {
								sV[b1 - BC * KS] = v1;
							}
							if (b2 < BC * KS) {
								sK[b2] = v2;
							} else {
								sV[b2 - BC * KS] = v2;
							}
						}
					}
				}
			}
		}
		barrier();
		// Key group 0 of each column folds this round in.
		if (kh == 0u && wc < NW) {
			PX_UNROLL for (uint a = 0u; a < 2u; a++) {
				uint x = EPW == 2u ? wc * 2u + a : wc + a * WG;
				if (a < NA) {
					PX_UNROLL for (uint i = 0u; i < 8u; i++) {
						if (i < RP) {
							float a1 = k0 == 0u ? 0.0 : accGet(0u, a, i);
							float a2 = k0 == 0u ? 0.0 : accGet(1u, a, i);
							for (uint k = 0u; k < CAP && k0 + k < NKH; k++) {
								uint b1 = (k * NV + i) * D + x;
								uint b2 = (k * NV + RP + i) * D + x;
								a1 += uintBitsToFloat(b1 < BC * KS ? sK[b1] : sV[b1 - BC * KS]);
								a2 += uintBitsToFloat(b2 < BC * KS ? sK[b2] : sV[b2 - BC * KS]);
							}
							accSet(0u, a, i, a1);
							accSet(1u, a, i, a2);
						}
					}
				}
			}
		}
	}
	barrier();
	if (kh != 0u || wc >= NW) {
		return;
	}
	PX_UNROLL for (uint a = 0u; a < 2u; a++) {
		uint x = EPW == 2u ? wc * 2u + a : wc + a * WG;
		if (a < NA) {
			PX_UNROLL for (uint i = 0u; i < 8u; i++) {
				if (i < RP && i < rows) {
					float a1 = accGet(0u, a, i), a2 = accGet(1u, a, i);
					float d1 = sT[i], d2 = sT[RP + i];
					uint row = qrow(b, hk, i);
					if (PARTIAL != 0u) {
						uint base = (row * S + split) * (3u + 2u * D);
						part[base + 3u + x] = a1;
						part[base + 3u + D + x] = a2;
						if (x == 0u) {
							part[base] = rowGet(mA, mB, i);
							part[base + 1u] = d1;
							part[base + 2u] = d2;
						}
					} else {
						// Every row sees a key: d1 NaN (a NaN or +inf
						// score) or 0 (every score -inf) make o NaN.
						float vb = a1 / d1;
						float o = HAS_R != 0u ? vb * (1.0 + d2 / d1) - a2 / d1 : vb;
						O_st(row * D + x, o);
					}
				}
			}
		}
	}
}
