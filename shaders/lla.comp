#version 450
// Exact local linear attention (docs/MATH.md section 5), one workgroup per query
// row, f32. With w_j = exp(s_j - m) over the visible keys, omega = sum w,
// mu = sum w (k - q) and Sig = sum w (k - q)(k - q)^T + lambda omega I
// (built D x D in this row's slice of the scratch buffer, key tile by key
// tile), it solves Sig rho = mu by conjugate gradients (SOLVER 0: from
// rho = 0 until ||r|| <= tol ||mu|| or maxIter iterations) or a Cholesky
// factorisation (SOLVER 1), then
//   o = sum w (1 - rho.(k - q)) v / den,  den = omega - mu.rho,
//   eta = (omega - den) / den.
// A row with den <= 1e-9 omega, a failed factorisation or a non-finite
// output raises an error for Sync and is not written.
#include "common.glsl"
#include "reduce.glsl"
#include "attn.glsl"

layout(constant_id = 1) const uint D = 16;
layout(constant_id = 2) const uint SOLVER = 0;
layout(constant_id = 3) const uint BC = 16;

IN(0, Q)
IN(1, K)
IN(2, V)
OUT(3, O)
OUT(4, RHO)
F32BUF(5, ETA)
// Coherent: rows of Sig written by one invocation are read by others.
layout(std430, binding = 6) coherent buffer sig_F_ { float sig[]; };
STATUS(7)

shared float sq[D], smu[D], sx[D], sr[D], sp[D], su[D];
shared float sdk[BC * D];
shared float sw[BC];
shared uint sfail;

void main() {
	uint t = gl_LocalInvocationID.x;
	uint row = pc.rowBase + px_group();
	if (px_group() >= pc.rowCount) {
		return;
	}
	uint i = row % pc.Lq, bh = row / pc.Lq;
	uint b = bh / pc.Hq, h = bh % pc.Hq, hk = h / pc.G;
	uint lo, hi;
	visible(i, pc.Lk, pc.causal != 0u, lo, hi);
	uint qoff = row * D;
	uint kvbase = (b * pc.Hkv + hk) * pc.Lk;
	uint sbase = px_group() * D * D;
	for (uint x = t; x < D; x += WG) {
		sq[x] = Q_ld(qoff + x);
		smu[x] = 0.0;
	}
	if (t == 0u) {
		sfail = 0u;
	}
	for (uint e = t; e < D * D; e += WG) {
		sig[sbase + e] = 0.0;
	}
	barrier();
	if (hi <= lo) {
		for (uint x = t; x < D; x += WG) {
			O_st(qoff + x, 0.0);
			if ((pc.flags & 1u) != 0u) {
				RHO_st(qoff + x, 0.0);
			}
		}
		if (t == 0u && (pc.flags & 2u) != 0u) {
			ETA[row] = 0.0;
		}
		return;
	}
	// The max score.
	float m = PX_NEG_INF;
	for (uint j = lo + t; j < hi; j += WG) {
		float s = 0.0;
		PX_LOOP for (uint x = 0u; x < D; x++) {
			s += sq[x] * K_ld((kvbase + j) * D + x);
		}
		m = max(m, pc.scale * s);
	}
	m = wg_max(m);
	// omega, mu and Sig, a tile of keys at a time.
	float omega = 0.0;
	for (uint t0 = lo; t0 < hi; t0 += BC) {
		uint nt = min(BC, hi - t0);
		for (uint j = t; j < nt; j += WG) {
			float s = 0.0;
			PX_LOOP for (uint x = 0u; x < D; x++) {
				s += sq[x] * K_ld((kvbase + t0 + j) * D + x);
			}
			sw[j] = exp(pc.scale * s - m);
		}
		for (uint e = t; e < BC * D; e += WG) {
			uint j = e / D, x = e % D;
			sdk[e] = j < nt ? K_ld((kvbase + t0 + j) * D + x) - sq[x] : 0.0;
		}
		barrier();
		for (uint j = 0u; j < nt; j++) {
			omega += sw[j]; // every invocation keeps the same sum
		}
		for (uint x = t; x < D; x += WG) {
			float a = 0.0;
			for (uint j = 0u; j < nt; j++) {
				a += sw[j] * sdk[j * D + x];
			}
			smu[x] += a;
		}
		for (uint e = t; e < D * D; e += WG) {
			uint x = e / D, y = e % D;
			float a = 0.0;
			for (uint j = 0u; j < nt; j++) {
				a += sw[j] * sdk[j * D + x] * sdk[j * D + y];
			}
			sig[sbase + e] += a;
		}
		barrier();
	}
	for (uint x = t; x < D; x += WG) {
		sig[sbase + x * D + x] += pc.lambda * omega;
		sx[x] = 0.0;
	}
	memoryBarrierBuffer();
	barrier();

	if (SOLVER == 0u) {
		// Conjugate gradients from x = 0: r = p = mu.
		float part = 0.0;
		for (uint x = t; x < D; x += WG) {
			sr[x] = smu[x];
			sp[x] = smu[x];
			part += smu[x] * smu[x];
		}
		float rr = wg_sum(part);
		float stop = pc.tol * pc.tol * rr;
		for (uint it = 0u; it < pc.maxIter && rr > stop; it++) {
			for (uint y = t; y < D; y += WG) {
				float a = 0.0;
				PX_LOOP for (uint x = 0u; x < D; x++) {
					a += sig[sbase + y * D + x] * sp[x];
				}
				su[y] = a;
			}
			barrier();
			part = 0.0;
			for (uint x = t; x < D; x += WG) {
				part += sp[x] * su[x];
			}
			float pu = wg_sum(part);
			if (!(pu > 0.0)) {
				break; // p lies in the null space: nothing left to reduce
			}
			float alpha = rr / pu;
			part = 0.0;
			for (uint x = t; x < D; x += WG) {
				sx[x] += alpha * sp[x];
				sr[x] -= alpha * su[x];
				part += sr[x] * sr[x];
			}
			float rn = wg_sum(part);
			float beta = rn / rr;
			rr = rn;
			for (uint x = t; x < D; x += WG) {
				sp[x] = sr[x] + beta * sp[x];
			}
			barrier();
		}
	} else {
		// Cholesky Sig = L L^T in place (lower triangle), then two
		// triangular solves by one invocation.
		float dmax = 0.0;
		PX_LOOP for (uint x = 0u; x < D; x++) {
			dmax = max(dmax, sig[sbase + x * D + x]);
		}
		for (uint j = 0u; j < D; j++) {
			if (t == 0u) {
				float s = sig[sbase + j * D + j];
				for (uint k = 0u; k < j; k++) {
					float l = sig[sbase + j * D + k];
					s -= l * l;
				}
				if (!(s > 1e-12 * dmax)) {
					sfail = 1u;
					s = 1.0;
				}
				sig[sbase + j * D + j] = sqrt(s);
			}
			memoryBarrierBuffer();
			barrier();
			float ljj = sig[sbase + j * D + j];
			for (uint r = j + 1u + t; r < D; r += WG) {
				float s = sig[sbase + r * D + j];
				for (uint k = 0u; k < j; k++) {
					s -= sig[sbase + r * D + k] * sig[sbase + j * D + k];
				}
				sig[sbase + r * D + j] = s / ljj;
			}
			memoryBarrierBuffer();
			barrier();
		}
		if (t == 0u) {
			for (uint r = 0u; r < D; r++) {
				float s = smu[r];
				for (uint k = 0u; k < r; k++) {
					s -= sig[sbase + r * D + k] * sx[k];
				}
				sx[r] = s / sig[sbase + r * D + r];
			}
			for (int r = int(D) - 1; r >= 0; r--) {
				float s = sx[r];
				for (uint k = uint(r) + 1u; k < D; k++) {
					s -= sig[sbase + k * D + uint(r)] * sx[k];
				}
				sx[r] = s / sig[sbase + uint(r) * D + uint(r)];
			}
		}
		barrier();
	}

	// den, rho.q, then the output.
	float part = 0.0, part2 = 0.0;
	for (uint x = t; x < D; x += WG) {
		part += smu[x] * sx[x];
		part2 += sx[x] * sq[x];
	}
	float den = omega - wg_sum(part);
	float qr = wg_sum(part2);
	bool bad = sfail != 0u || !(den > 1e-9 * omega);
	float acc[8];
	PX_UNROLL for (uint k = 0u; k < 8u; k++) {
		acc[k] = 0.0;
	}
	for (uint t0 = lo; t0 < hi && !bad; t0 += BC) {
		uint nt = min(BC, hi - t0);
		for (uint j = t; j < nt; j += WG) {
			float s = 0.0, rk = 0.0;
			PX_LOOP for (uint x = 0u; x < D; x++) {
				float kx = K_ld((kvbase + t0 + j) * D + x);
				s += sq[x] * kx;
				rk += sx[x] * kx;
			}
			sw[j] = exp(pc.scale * s - m) * (1.0 - (rk - qr)) / den;
		}
		for (uint e = t; e < BC * D; e += WG) {
			uint j = e / D;
			sdk[e] = j < nt ? V_ld((kvbase + t0 + j) * D + e % D) : 0.0;
		}
		barrier();
		PX_UNROLL for (uint k = 0u; k < 8u; k++) {
			uint x = t + WG * k;
			if (x < D) {
				float a = 0.0;
				for (uint j = 0u; j < nt; j++) {
					a += sw[j] * sdk[j * D + x];
				}
				acc[k] += a;
			}
		}
		barrier();
	}
	bool finite = true;
	PX_UNROLL for (uint k = 0u; k < 8u; k++) {
		if (isnan(acc[k]) || isinf(acc[k])) {
			finite = false;
		}
	}
	if (!finite) {
		sfail = 2u;
	}
	barrier();
	if (bad || sfail != 0u) {
		if (t == 0u) {
			px_raise(PX_ERR_LLA_SINGULAR, row, 0u, 0u, 0u);
		}
		return;
	}
	PX_UNROLL for (uint k = 0u; k < 8u; k++) {
		uint x = t + WG * k;
		if (x < D) {
			O_st(qoff + x, acc[k]);
			if ((pc.flags & 1u) != 0u) {
				RHO_st(qoff + x, sx[x]);
			}
		}
	}
	if (t == 0u && (pc.flags & 2u) != 0u) {
		ETA[row] = (omega - den) / den;
	}
}
