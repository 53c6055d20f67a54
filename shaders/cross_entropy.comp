#version 450
// Fused softmax cross-entropy, one workgroup per row of logits [N, W] (row
// stride W) whose first C columns are the classes: loss = logsumexp(x[:C])
// - x[t]; dLogits = scale (softmax(x[:C]) - onehot(t)) in [0, C), with the
// target's entry formed from the other entries' mass so that it keeps its
// accuracy when p_t is close to 1, and exactly 0 in the pad columns
// [C, W), which are never read. Ignored rows get loss 0 and a zero
// gradient. dLogits may alias logits: every element is read for the
// reductions before any is written, and written by the invocation that
// reads it.
#include "common.glsl"
#include "reduce.glsl"


OUT(0, logits)
INDEX(1, targets)
F32BUF(2, loss)
OUT(3, dl)
STATUS(4)

layout(push_constant) uniform PC {
	uint N;
	uint W; // row stride of logits and dLogits
	uint C; // classes: columns [0, C) of each row, 0 < C <= W
	int ignore;
	float scale;
	uint hasGrad;
} pc;

void main() {
	uint row = px_group();
	if (row >= pc.N) {
		return;
	}
	uint t = gl_LocalInvocationID.x;
	uint W = pc.W, C = pc.C;
	uint base = row * W;
	int tg = targets[row];
	if (tg == pc.ignore) {
		if (t == 0u) {
			loss[row] = 0.0;
		}
		if (pc.hasGrad != 0u) {
			for (uint j = t; j < W; j += WG) {
				dl_st(base + j, 0.0);
			}
		}
		return;
	}
	if (tg < 0 || uint(tg) >= C) {
		if (t == 0u) {
			px_raise(PX_ERR_TARGET_RANGE, row, uint(tg), C, 0u);
		}
		return;
	}
	float m = PX_NEG_INF;
	for (uint j = t; j < C; j += WG) {
		m = max(m, logits_ld(base + j));
	}
	m = wg_max(m);
	float s = 0.0, others = 0.0;
	for (uint j = t; j < C; j += WG) {
		float e = exp(logits_ld(base + j) - m);
		s += e;
		if (j != uint(tg)) {
			others += e;
		}
	}
	s = wg_sum(s);
	others = wg_sum(others);
	float xt = logits_ld(base + uint(tg));
	barrier(); // every read of this row is done before any write
	if (t == 0u) {
		loss[row] = m + log(s) - xt;
	}
	if (pc.hasGrad != 0u) {
		float c = pc.scale / s;
		for (uint j = t; j < C; j += WG) {
			float g = j == uint(tg) ? -pc.scale * others / s : exp(logits_ld(base + j) - m) * c;
			dl_st(base + j, g);
		}
		for (uint j = C + t; j < W; j += WG) {
			dl_st(base + j, 0.0);
		}
	}
}
