#version 450
// The fused per-head RMSNorm and RoPE of the attention inputs
// (engine.NormRoPE). Row (b, l, h) of x [B, L, H, D] is normed,
// y = x rstd w with rstd = 1/sqrt(mean(x^2) + eps), and its pairs
// (y_i, y_{i+D/2}) are turned by a = pos freq[i] (freq[i] = theta^(-2i/D),
// from the host in f32; pos[l], or pos[b, l] when seq is set) into row
// (b, h, l) of out [B, H, L, D]:
//   out_i = y_i cos a - y_{i+D/2} sin a, out_{i+D/2} = y_{i+D/2} cos a + y_i sin a.
// The angle is reduced modulo 2 pi in two steps (Cody-Waite) as in
// rope.comp.
//   MODE 0 (forward): T invocations a row (a power of two), WG/T rows a
//       workgroup, striding over the rows; rstd [B, L, H] if hasRstd.
//   MODE 1 (dX): with g = R(-a) dOut (read in [B, H, L, D]), xhat = x rstd:
//       dX = rstd (g w - xhat mean(g w xhat)), rows as MODE 0.
//   MODE 2 (dW partials): invocation (row chunk, pair i) writes
//       parts[chunk D + i] and parts[chunk D + i + D/2], the sums over its
//       rows of g xhat.
//   MODE 3 (dW): dW[col] += sum over chunks of parts[chunk D + col], in
//       chunk order (deterministic).
#include "common.glsl"

layout(constant_id = 1) const uint MODE = 0;

IN(0, x)
IN(1, w)
OUT(2, y)     // out (MODE 0) or dX (MODE 1)
F32BUF(3, rstd)
IN(4, dy)     // dOut
INDEX(5, pos)
F32BUF(6, freq)
F32BUF(7, parts)
OUT(8, dw)

layout(push_constant) uniform PC {
	uint rows; // B L H
	uint L;
	uint H;
	uint half_; // D / 2
	uint T;     // invocations a row (MODE 0, 1)
	float eps;
	uint hasRstd;
	uint seq;    // 1: per-sequence positions pos [B, L]
	uint chunk;  // rows a chunk (MODE 2)
	uint chunks; // number of chunks
} pc;

const float TWO_PI_HI = 6.28125;
const float TWO_PI_LO = 1.9353071795864769e-3;
const float INV_TWO_PI = 0.15915494309189535;

shared float nr_red[WG];

// Row geometry: the row's element offset in x's layout, in out's, and its
// position.
struct Row {
	uint xo, oo;
	int p;
};

Row rowOf(uint row) {
	uint D = 2u * pc.half_;
	uint h = row % pc.H, bl = row / pc.H;
	uint l = bl % pc.L, b = bl / pc.L;
	Row r;
	r.xo = row * D;
	r.oo = ((b * pc.H + h) * pc.L + l) * D;
	r.p = pos[pc.seq != 0u ? bl : l];
	return r;
}

// rot returns (cos a, sgn sin a) of pair i at position p.
vec2 rot(int p, uint i, float sgn) {
	float a = float(p) * freq[i];
	float k = roundEven(a * INV_TWO_PI);
	float r = (a - k * TWO_PI_HI) - k * TWO_PI_LO;
	return vec2(cos(r), sgn * sin(r));
}

// segSum sums v over the T invocations of a row (every invocation of the
// workgroup calls it: it has barriers).
float segSum(float v) {
	uint t = gl_LocalInvocationID.x;
	uint lo = t % pc.T;
	nr_red[t] = v;
	barrier();
	for (uint s = pc.T >> 1; s > 0u; s >>= 1) {
		if (lo < s) {
			nr_red[t] += nr_red[t + s];
		}
		barrier();
	}
	float r = nr_red[t - lo];
	barrier();
	return r;
}

void main() {
	uint t = gl_LocalInvocationID.x;
	uint half_ = pc.half_, D = 2u * half_;
	if (MODE == 0u || MODE == 1u) {
		uint per = WG / pc.T;
		uint lo = t % pc.T;
		for (uint base = px_group() * per; base < pc.rows; base += px_groups() * per) {
			uint row = base + t / pc.T;
			bool ok = row < pc.rows;
			Row r;
			float acc = 0.0;
			float sc = 0.0;
			if (ok) {
				r = rowOf(row);
				if (MODE == 1u) {
					sc = rstd[row];
				}
				for (uint i = lo; i < half_; i += pc.T) {
					float x1 = x_ld(r.xo + i), x2 = x_ld(r.xo + i + half_);
					if (MODE == 0u) {
						acc += x1 * x1 + x2 * x2;
					} else {
						vec2 cs = rot(r.p, i, -1.0);
						float d1 = dy_ld(r.oo + i), d2 = dy_ld(r.oo + i + half_);
						float g1 = d1 * cs.x - d2 * cs.y, g2 = d2 * cs.x + d1 * cs.y;
						acc += g1 * w_ld(i) * x1 + g2 * w_ld(i + half_) * x2;
					}
				}
			}
			float tot = segSum(acc);
			if (ok && MODE == 0u) {
				sc = 1.0 / sqrt(tot / float(D) + pc.eps);
				if (lo == 0u && pc.hasRstd != 0u) {
					rstd[row] = sc;
				}
				for (uint i = lo; i < half_; i += pc.T) {
					vec2 cs = rot(r.p, i, 1.0);
					float y1 = x_ld(r.xo + i) * sc * w_ld(i);
					float y2 = x_ld(r.xo + i + half_) * sc * w_ld(i + half_);
					y_st(r.oo + i, y1 * cs.x - y2 * cs.y);
					y_st(r.oo + i + half_, y2 * cs.x + y1 * cs.y);
				}
			} else if (ok) {
				float k = tot * sc * sc / float(D); // mean(g w xhat) / x-to-xhat
				for (uint i = lo; i < half_; i += pc.T) {
					vec2 cs = rot(r.p, i, -1.0);
					float d1 = dy_ld(r.oo + i), d2 = dy_ld(r.oo + i + half_);
					float g1 = d1 * cs.x - d2 * cs.y, g2 = d2 * cs.x + d1 * cs.y;
					y_st(r.xo + i, sc * (g1 * w_ld(i) - x_ld(r.xo + i) * k));
					y_st(r.xo + i + half_, sc * (g2 * w_ld(i + half_) - x_ld(r.xo + i + half_) * k));
				}
			}
		}
	} else if (MODE == 2u) {
		uint g = px_group();
		uint blocks = (half_ + WG - 1u) / WG;
		uint i = (g % blocks) * WG + t;
		uint c = g / blocks;
		if (c >= pc.chunks || i >= half_) {
			return;
		}
		uint r1 = min((c + 1u) * pc.chunk, pc.rows);
		float s1 = 0.0, s2 = 0.0;
		for (uint row = c * pc.chunk; row < r1; row++) {
			Row r = rowOf(row);
			vec2 cs = rot(r.p, i, -1.0);
			float d1 = dy_ld(r.oo + i), d2 = dy_ld(r.oo + i + half_);
			float sc = rstd[row];
			s1 += (d1 * cs.x - d2 * cs.y) * x_ld(r.xo + i) * sc;
			s2 += (d2 * cs.x + d1 * cs.y) * x_ld(r.xo + i + half_) * sc;
		}
		parts[c * D + i] = s1;
		parts[c * D + i + half_] = s2;
	} else {
		uint col = px_group() * WG + t;
		if (col >= D) {
			return;
		}
		float s = 0.0;
		for (uint c = 0u; c < pc.chunks; c++) {
			s += parts[c * D + col];
		}
		dw_st(col, dw_ld(col) + s);
	}
}
