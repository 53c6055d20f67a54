#version 450
// A decode step's attention inputs in one dispatch (engine.DecodePrep).
// The rows (b, l, h) of four projections, each in its [B, L, H, D] layout,
// are one index space of segments:
//
//	0 q: normed per head, rotated (RoPE), written to qOut [B, Hq, L, D]
//	1 k: normed, rotated, written to kCache [B, Hkv, Cap, D] at starts[b] + l
//	2 v: copied to vCache at starts[b] + l (raw bits when the dtypes match)
//	3 r: as q, to rOut (no rows without a probe)
//
// which replaces three norm+RoPE dispatches, a swap and two cache appends.
// The row math is normrope.comp's MODE 0: y = x rstd w with
// rstd = 1/sqrt(mean(x^2) + eps), then (y_i, y_{i+D/2}) turned by
// a = pos freq[i] (freq[i] = theta^(-2i/D) from the host in f32, the angle
// reduced modulo 2 pi in two steps), T invocations a row (a power of two),
// WG/T rows a workgroup, striding over the rows. A start outside
// [0, Cap - L] writes nothing for its sequence's cache rows and raises
// PX_ERR_KV_RANGE (sequence, start, Cap), as kv_append_at does.
#include "common.glsl"

IN(0, Q)
IN(1, K)
IN(2, V)
IN(3, R)
IN(4, QN)
IN(5, KN)
IN(6, RN)
OUT(7, QO)
OUT(8, KC)
OUT(9, VC)
OUT(10, RO)
INDEX(11, pos)
INDEX(12, starts)
F32BUF(13, freq)
STATUS(14)

layout(push_constant) uniform PC {
	uint rows; // every segment's rows: B L (2 Hq + 2 Hkv), or B L (Hq + 2 Hkv) without r
	uint L;
	uint Hq, Hkv;
	uint half_; // D / 2
	uint T;     // invocations a row
	uint cap;
	uint seq; // 1: per-sequence positions pos [B, L]
	uint first1, first2, first3; // first rows of segments 1-3
	float eps;
} pc;

const float TWO_PI_HI = 6.28125;
const float TWO_PI_LO = 1.9353071795864769e-3;
const float INV_TWO_PI = 0.15915494309189535;

shared float dp_red[WG];

// xld loads element e of segment seg's projection.
float xld(uint seg, uint e) {
	if (seg == 0u) {
		return Q_ld(e);
	}
	if (seg == 1u) {
		return K_ld(e);
	}
	if (seg == 2u) {
		return V_ld(e);
	}
	return R_ld(e);
}

// wld loads element i of segment seg's norm weight (not v's).
float wld(uint seg, uint i) {
	if (seg == 0u) {
		return QN_ld(i);
	}
	if (seg == 1u) {
		return KN_ld(i);
	}
	return RN_ld(i);
}

// ost stores element e of segment seg's output (not v's).
void ost(uint seg, uint e, float v) {
	if (seg == 0u) {
		QO_st(e, v);
	} else if (seg == 1u) {
		KC_st(e, v);
	} else {
		RO_st(e, v);
	}
}

// rot returns (cos a, sin a) of pair i at position p.
vec2 rot(int p, uint i) {
	float a = float(p) * freq[i];
	float k = roundEven(a * INV_TWO_PI);
	float r = (a - k * TWO_PI_HI) - k * TWO_PI_LO;
	return vec2(cos(r), sin(r));
}

// segSum sums v over the T invocations of a row (every invocation of the
// workgroup calls it: it has barriers).
float segSum(float v) {
	uint t = gl_LocalInvocationID.x;
	uint lo = t % pc.T;
	dp_red[t] = v;
	barrier();
	for (uint s = pc.T >> 1; s > 0u; s >>= 1) {
		if (lo < s) {
			dp_red[t] += dp_red[t + s];
		}
		barrier();
	}
	float r = dp_red[t - lo];
	barrier();
	return r;
}

void main() {
	uint t = gl_LocalInvocationID.x;
	uint half_ = pc.half_, D = 2u * half_;
	uint per = WG / pc.T;
	uint lo = t % pc.T;
	// The loop is workgroup-uniform (segSum's barriers); ok masks the rows
	// past the end.
	for (uint base = px_group() * per; base < pc.rows; base += px_groups() * per) {
		uint row = base + t / pc.T;
		bool ok = row < pc.rows;
		uint seg = 0u, local = 0u, H = pc.Hq, b = 0u, h = 0u, l = 0u;
		int p = 0;
		float acc = 0.0;
		if (ok) {
			seg = row >= pc.first3 ? 3u : row >= pc.first2 ? 2u : row >= pc.first1 ? 1u : 0u;
			uint first = seg == 3u ? pc.first3 : seg == 2u ? pc.first2 : seg == 1u ? pc.first1 : 0u;
			local = row - first;
			H = (seg == 1u || seg == 2u) ? pc.Hkv : pc.Hq;
			h = local % H;
			uint bl = local / H;
			l = bl % pc.L;
			b = bl / pc.L;
			if (seg != 2u) {
				p = pos[pc.seq != 0u ? bl : l];
				for (uint i = lo; i < half_; i += pc.T) {
					float x1 = xld(seg, local * D + i), x2 = xld(seg, local * D + i + half_);
					acc += x1 * x1 + x2 * x2;
				}
			}
		}
		float tot = segSum(acc);
		if (!ok) {
			continue; // after the barriers: the next iteration's are reached by all
		}
		uint xo = local * D;
		uint oo = ((b * H + h) * pc.L + l) * D;
		if (seg == 1u || seg == 2u) {
			int s = starts[b];
			if (s < 0 || uint(s) + pc.L > pc.cap) {
				if (seg == 1u && h == 0u && l == 0u && lo == 0u) {
					px_raise(PX_ERR_KV_RANGE, b, uint(s), pc.cap, 0u);
				}
				continue;
			}
			oo = ((b * H + h) * pc.cap + uint(s) + l) * D;
		}
		if (seg == 2u) {
			for (uint i = lo; i < D; i += pc.T) {
				if (V_dt == VC_dt) {
					VC_strw(oo + i, V_raw(xo + i));
				} else {
					VC_st(oo + i, V_ld(xo + i));
				}
			}
			continue;
		}
		float sc = 1.0 / sqrt(tot / float(D) + pc.eps);
		for (uint i = lo; i < half_; i += pc.T) {
			vec2 cs = rot(p, i);
			float y1 = xld(seg, xo + i) * sc * wld(seg, i);
			float y2 = xld(seg, xo + i + half_) * sc * wld(seg, i + half_);
			ost(seg, oo + i, y1 * cs.x - y2 * cs.y);
			ost(seg, oo + i + half_, y2 * cs.x + y1 * cs.y);
		}
	}
}
