#version 450
// The attention maps of one query head for parallax-view: for every query
// row i < L (a workgroup each) and key j <= i,
//   p_ij   = softmax_j(scale q_i.k_j)            (the softmax weights)
//   eff_ij = p_ij (1 + tbar_i - t_ij)            (Parallax's effective weights)
// with t_ij = r_i.k_j (unscaled) and tbar_i = sum_j p_ij t_ij (docs/MATH.md section
// 2); eff = p without a probe. Written as maps[i*cap + j] (p),
// maps[cap*cap + i*cap + j] (eff) and, per row, the largest p at
// maps[2*cap*cap + i] (the viewer's colour scale). Entries with j > i are
// not written. q and r are [Hq, cap, D], k [Hkv, cap, D] (batch 1).
#include "common.glsl"
#include "reduce.glsl"

IN(0, q)
IN(1, r)
IN(2, k)
F32BUF(3, maps)

layout(push_constant) uniform PC {
	uint L;      // rows (and keys) filled
	uint head;   // query head
	uint kvhead; // its KV head
	uint D;
	uint cap;    // positions per head in q, r, k and the maps' stride
	uint hasR;   // 0: softmax attention (eff = p)
	float scale; // softmax scale on q.k
} pc;

float score(uint qb, uint kb) {
	float s = 0.0;
	PX_LOOP for (uint d = 0u; d < pc.D; d++) {
		s += q_ld(qb + d) * k_ld(kb + d);
	}
	return pc.scale * s;
}

float probe(uint rb, uint kb) {
	float t = 0.0;
	PX_LOOP for (uint d = 0u; d < pc.D; d++) {
		t += r_ld(rb + d) * k_ld(kb + d);
	}
	return t;
}

void main() {
	uint i = px_group();
	if (i >= pc.L) {
		return;
	}
	uint lid = gl_LocalInvocationID.x;
	uint qb = (pc.head * pc.cap + i) * pc.D;
	uint kb0 = pc.kvhead * pc.cap * pc.D;
	float m = PX_NEG_INF;
	for (uint j = lid; j <= i; j += WG) {
		m = max(m, score(qb, kb0 + j * pc.D));
	}
	m = wg_max(m);
	float d1 = 0.0, d2 = 0.0;
	for (uint j = lid; j <= i; j += WG) {
		uint kb = kb0 + j * pc.D;
		float e = exp(score(qb, kb) - m);
		d1 += e;
		if (pc.hasR != 0u) {
			d2 += e * probe(qb, kb);
		}
	}
	d1 = wg_sum(d1);
	d2 = wg_sum(d2);
	float tbar = d2 / d1;
	float pmax = 0.0;
	for (uint j = lid; j <= i; j += WG) {
		uint kb = kb0 + j * pc.D;
		float p = exp(score(qb, kb) - m) / d1;
		float eff = p;
		if (pc.hasR != 0u) {
			eff = p * (1.0 + tbar - probe(qb, kb));
		}
		maps[i * pc.cap + j] = p;
		maps[pc.cap * pc.cap + i * pc.cap + j] = eff;
		pmax = max(pmax, p);
	}
	pmax = wg_max(pmax);
	if (lid == 0u) {
		maps[2u * pc.cap * pc.cap + i] = pmax;
	}
}
