#version 450
// Decode attention over a KV cache, built for bandwidth: one workgroup
// streams one split of one (sequence, KV head)'s keys once, for every
// query row of its GQA group (G heads x Lq positions, at most RP rows)
// and their probes together.
//
// Per tile of BC keys (K and V staged in shared memory as raw words,
// loaded 16 bytes per invocation and prefetched into registers one tile
// ahead so the loads overlap the arithmetic):
//   scores:  invocation (key j, half h): h = 0 computes the RP scaled
//            query scores of key j, h = 1 its RP probe scores t = r.k;
//   softmax: the tile's row maxima by subgroupMax and a shared-memory
//            pass; every invocation keeps the running max m of every row
//            (the same values everywhere) and alpha = exp(m_old - m);
//            P1 = exp(s - m) and P2 = P1 t go to shared memory;
//   P V:     invocation (column c, key group kh) accumulates
//            O1 += P1 V and O2 += P2 V for its columns over its keys,
//            after scaling by alpha.
// The running sums d1 = sum P1, d2 = sum P2 are kept per key slot and
// summed once at the end, as are the key groups' accumulators. Output: the
// finished o (one split) or the partial state (m, d1, d2, O1, O2) that
// attn_combine merges, laid out as attn_fwd's.
//
// Requires subgroup arithmetic, WG = 2 BC, D a power of two of whole
// 16-byte pieces, at most NAM accumulator columns and LDM prefetched
// pieces per invocation, K and V of one dtype; the host falls back to
// attn_fwd otherwise.
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
const uint LDN = (BC * NW4 + WG - 1u) / WG; // pieces per invocation per tile
const uint KS = NW + 1u;                   // sK row stride: odd, no bank conflicts
const uint NV = 2u * RP;                   // vectors: RP query rows, RP probe rows
const uint NWE = NW < WG ? NW : WG;        // column words handled at once
const uint NKH = WG / NWE;                 // key groups in the P V phase
const uint WPT = (NW + WG - 1u) / WG;      // words per invocation in P V
const uint EPW = H16 ? 2u : 1u;            // elements per word
const uint NA = WPT * EPW;                 // accumulator columns per invocation
const uint MAXSG = 16u;                    // subgroups per workgroup, at most (host-checked)

// Register arrays have literal sizes and are walked by loops with literal
// trip counts (guarded by the specialised values): NVIDIA's compiler
// keeps such arrays in registers, while loops bounded by specialization
// constants left them in local memory (a tenfold slowdown).
#define RPM 8u  // rows, at most
#define NVM 16u // vectors, at most
#define NAM 4u  // accumulator columns per invocation, at most (host-checked)
#define LDM 16u // 16-byte pieces per invocation per tile, at most (host-checked)

shared vec4 sQR[D * NV / 4u];       // [x][vector], 4 vectors per element
shared uint sK[BC * KS];            // [key][word], padded
shared uint sV[BC * NW];            // [key][word]
shared vec4 sP[BC * NV / 4u];       // [key][P1 rows, P2 rows], 4 per element
shared float sT[BC * RP];           // [key][probe score]
shared float sMax[MAXSG * RP];      // per-subgroup tile maxima

float kf(uint w, uint e) {
	if (K_dt == DT_BF16) {
		return e == 0u ? uintBitsToFloat(w << 16) : uintBitsToFloat(w & 0xffff0000u);
	}
	if (K_dt == DT_F16) {
		return unpackHalf2x16(w)[e];
	}
	return uintBitsToFloat(w);
}

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
	uint rlo[RPM], rhi[RPM];
	PX_UNROLL for (uint i = 0u; i < RPM; i++) {
		uint lo = 0u, hi = 0u;
		if (i < RP && i < rows) {
			visible(i % pc.Lq, n, true, lo, hi);
			lo = max(lo, c0);
			hi = max(min(hi, c1), lo);
		}
		rlo[i] = lo;
		rhi[i] = hi;
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
	float m[RPM], dsum1[RPM], dsum2[RPM];
	float o1[RPM * NAM], o2[RPM * NAM];
	PX_UNROLL for (uint i = 0u; i < RPM; i++) {
		m[i] = PX_NEG_INF;
		dsum1[i] = 0.0;
		dsum2[i] = 0.0;
	}
	PX_UNROLL for (uint a = 0u; a < RPM * NAM; a++) {
		o1[a] = 0.0;
		o2[a] = 0.0;
	}

	// Prefetch the first tile.
	uvec4 pk[LDM], pv[LDM];
	PX_UNROLL for (uint l = 0u; l < LDM; l++) {
		uint e = t + WG * l, key = c0 + e / NW4;
		pk[l] = uvec4(0u);
		pv[l] = uvec4(0u);
		if (l < LDN && e < BC * NW4 && key < c1) {
			uint p = (kvbase + key) * NW4 + e % NW4;
			pk[l] = K4[p];
			pv[l] = V4[p];
		}
	}
	for (uint t0 = c0; t0 < c1; t0 += BC) {
		PX_UNROLL for (uint l = 0u; l < LDM; l++) {
			uint e = t + WG * l;
			if (l < LDN && e < BC * NW4) {
				uint kj = e / NW4, w = 4u * (e % NW4);
				PX_UNROLL for (uint q = 0u; q < 4u; q++) {
					sK[kj * KS + w + q] = pk[l][q];
					sV[kj * NW + w + q] = pv[l][q];
				}
			}
		}
		barrier();
		// Next tile's loads, in flight during this tile's arithmetic.
		PX_UNROLL for (uint l = 0u; l < LDM; l++) {
			uint e = t + WG * l, key = t0 + BC + e / NW4;
			pk[l] = uvec4(0u);
			pv[l] = uvec4(0u);
			if (l < LDN && e < BC * NW4 && key < c1) {
				uint p = (kvbase + key) * NW4 + e % NW4;
				pk[l] = K4[p];
				pv[l] = V4[p];
			}
		}

		// Scores of key j: half 0 the query rows, half 1 the probe rows.
		float s[RPM];
		PX_UNROLL for (uint i = 0u; i < RPM; i++) {
			s[i] = 0.0;
		}
		if (half_ == 0u || HAS_R != 0u) {
			uint vb = half_ * RP;
			PX_LOOP for (uint c = 0u; c < NW; c++) {
				uint w = sK[j * KS + c];
				PX_UNROLL for (uint e = 0u; e < 2u; e++) {
					if (e >= EPW) {
						continue;
					}
					float kx = kf(w, e);
					uint base = ((c * EPW + e) * NV + vb) / 4u;
					PX_UNROLL for (uint i = 0u; i < RPM; i += 4u) {
						if (i < RP) {
							vec4 qv = sQR[base + i / 4u];
							s[i] += qv.x * kx;
							s[i + 1u] += qv.y * kx;
							s[i + 2u] += qv.z * kx;
							s[i + 3u] += qv.w * kx;
						}
					}
				}
			}
		}
		uint key = t0 + j;
		PX_UNROLL for (uint i = 0u; i < RPM; i++) {
			if (i >= RP) {
				continue;
			}
			bool ok = half_ == 0u && key >= rlo[i] && key < rhi[i];
			float mx = subgroupMax(ok ? s[i] : PX_NEG_INF);
			if (subgroupElect()) {
				sMax[gl_SubgroupID * RP + i] = mx;
			}
			if (half_ == 0u) {
				s[i] = ok ? s[i] : PX_NEG_INF;
			} else {
				sT[j * RP + i] = s[i];
			}
		}
		barrier();
		float alpha[RPM];
		PX_UNROLL for (uint i = 0u; i < RPM; i++) {
			alpha[i] = 1.0;
			if (i >= RP) {
				continue;
			}
			float mx = m[i];
			for (uint sg = 0u; sg < gl_NumSubgroups; sg++) {
				mx = max(mx, sMax[sg * RP + i]);
			}
			alpha[i] = mx == PX_NEG_INF ? 1.0 : (m[i] == PX_NEG_INF ? 0.0 : exp(m[i] - mx));
			m[i] = mx;
		}
		if (half_ == 0u) {
			PX_UNROLL for (uint i = 0u; i < RPM; i++) {
				if (i >= RP) {
					continue;
				}
				float p = s[i] == PX_NEG_INF ? 0.0 : exp(s[i] - m[i]);
				float pt = HAS_R != 0u ? p * sT[j * RP + i] : 0.0;
				sP[(j * NV + i) / 4u][i % 4u] = p;
				sP[(j * NV + RP + i) / 4u][i % 4u] = pt;
				dsum1[i] = dsum1[i] * alpha[i] + p;
				dsum2[i] = dsum2[i] * alpha[i] + pt;
			}
		}
		barrier();
		// P V for this invocation's columns over its key group.
		PX_UNROLL for (uint a = 0u; a < RPM * NAM; a++) {
			o1[a] *= alpha[a / NAM];
			o2[a] *= alpha[a / NAM];
		}
		PX_LOOP for (uint jj = kh; jj < BC; jj += NKH) {
			float pr[NVM];
			PX_UNROLL for (uint v = 0u; v < NVM; v += 4u) {
				vec4 p4 = v < NV ? sP[(jj * NV + v) / 4u] : vec4(0.0);
				pr[v] = p4.x;
				pr[v + 1u] = p4.y;
				pr[v + 2u] = p4.z;
				pr[v + 3u] = p4.w;
			}
			PX_UNROLL for (uint a = 0u; a < NAM; a++) {
				uint c = wc + (a / EPW) * WG;
				if (a >= NA || c >= NW) {
					continue;
				}
				float vx = kf(sV[jj * NW + c], a % EPW);
				PX_UNROLL for (uint i = 0u; i < RPM; i++) {
					if (i < RP) {
						o1[i * NAM + a] += pr[i] * vx;
						if (HAS_R != 0u) {
							o2[i * NAM + a] += pr[RP + i] * vx;
						}
					}
				}
			}
		}
		barrier();
	}

	// Sum the key slots' d1, d2 and the key groups' accumulators (shared
	// memory reused: sP for the sums, sK/sV for the accumulators).
	if (half_ == 0u) {
		PX_UNROLL for (uint i = 0u; i < RPM; i++) {
			if (i < RP) {
				sP[(j * NV + i) / 4u][i % 4u] = dsum1[i];
				sP[(j * NV + RP + i) / 4u][i % 4u] = dsum2[i];
			}
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
	// Accumulators in columns: element x of row i from key group kh.
	// D * NV floats per key group; the groups fold in rounds of CAP (the
	// host checks CAP >= 1). Accumulator a of an invocation is column
	// x = (wc + (a / EPW) WG) EPW + a % EPW.
	const uint CAP = (BC * KS + BC * NW) / (D * NV);
	for (uint k0 = 0u; k0 < NKH; k0 += CAP) {
		barrier();
		if (kh >= k0 && kh < k0 + CAP) {
			PX_UNROLL for (uint a = 0u; a < NAM; a++) {
				uint c = wc + (a / EPW) * WG, x = c * EPW + a % EPW;
				if (a >= NA || c >= NW) {
					continue;
				}
				PX_UNROLL for (uint i = 0u; i < RPM; i++) {
					if (i >= RP) {
						continue;
					}
					uint b1 = ((kh - k0) * NV + i) * D + x;
					uint b2 = ((kh - k0) * NV + RP + i) * D + x;
					if (b1 < BC * KS) {
						sK[b1] = floatBitsToUint(o1[i * NAM + a]);
					} else {
						sV[b1 - BC * KS] = floatBitsToUint(o1[i * NAM + a]);
					}
					if (b2 < BC * KS) {
						sK[b2] = floatBitsToUint(o2[i * NAM + a]);
					} else {
						sV[b2 - BC * KS] = floatBitsToUint(o2[i * NAM + a]);
					}
				}
			}
		}
		barrier();
		// Key group 0 of each column folds this round in.
		if (kh == 0u) {
			PX_UNROLL for (uint a = 0u; a < NAM; a++) {
				uint c = wc + (a / EPW) * WG, x = c * EPW + a % EPW;
				if (a >= NA || c >= NW) {
					continue;
				}
				PX_UNROLL for (uint i = 0u; i < RPM; i++) {
					if (i >= RP) {
						continue;
					}
					float a1 = k0 == 0u ? 0.0 : o1[i * NAM + a];
					float a2 = k0 == 0u ? 0.0 : o2[i * NAM + a];
					for (uint k = 0u; k < CAP && k0 + k < NKH; k++) {
						uint b1 = (k * NV + i) * D + x;
						uint b2 = (k * NV + RP + i) * D + x;
						a1 += uintBitsToFloat(b1 < BC * KS ? sK[b1] : sV[b1 - BC * KS]);
						a2 += uintBitsToFloat(b2 < BC * KS ? sK[b2] : sV[b2 - BC * KS]);
					}
					o1[i * NAM + a] = a1;
					o2[i * NAM + a] = a2;
				}
			}
		}
	}
	barrier();
	if (kh != 0u) {
		return;
	}
	PX_UNROLL for (uint a = 0u; a < NAM; a++) {
		uint c = wc + (a / EPW) * WG, x = c * EPW + a % EPW;
		if (a >= NA || c >= NW) {
			continue;
		}
		PX_UNROLL for (uint i = 0u; i < RPM; i++) {
			if (i >= RP || i >= rows) {
				continue;
			}
			float a1 = o1[i * NAM + a], a2 = o2[i * NAM + a];
			float d1 = sT[i], d2 = sT[RP + i];
			uint row = qrow(b, hk, i);
			if (PARTIAL != 0u) {
				uint base = (row * S + split) * (3u + 2u * D);
				part[base + 3u + x] = a1;
				part[base + 3u + D + x] = a2;
				if (x == 0u) {
					part[base] = m[i];
					part[base + 1u] = d1;
					part[base + 2u] = d2;
				}
			} else {
				float o = 0.0;
				if (d1 > 0.0) {
					float vb = a1 / d1;
					o = HAS_R != 0u ? vb * (1.0 + d2 / d1) - a2 / d1 : vb;
				}
				O_st(row * D + x, o);
			}
		}
	}
}
