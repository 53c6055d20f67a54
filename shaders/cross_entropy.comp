#version 450
// Fused softmax cross-entropy, one workgroup per row of logits [N, V]:
// loss = logsumexp(x) - x[t]; dLogits = scale (softmax(x) - onehot(t)),
// with the target's entry formed from the other entries' mass so that it
// keeps its accuracy when p_t is close to 1. Ignored rows get loss 0 and a
// zero gradient. dLogits may alias logits: every element is read for the
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
	uint V;
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
	uint V = pc.V;
	int tg = targets[row];
	if (tg == pc.ignore) {
		if (t == 0u) {
			loss[row] = 0.0;
		}
		if (pc.hasGrad != 0u) {
			for (uint j = t; j < V; j += WG) {
				dl_st(row * V + j, 0.0);
			}
		}
		return;
	}
	if (tg < 0 || uint(tg) >= V) {
		if (t == 0u) {
			px_raise(PX_ERR_TARGET_RANGE, row, uint(tg), V, 0u);
		}
		return;
	}
	float m = PX_NEG_INF;
	for (uint j = t; j < V; j += WG) {
		m = max(m, logits_ld(row * V + j));
	}
	m = wg_max(m);
	float s = 0.0, others = 0.0;
	for (uint j = t; j < V; j += WG) {
		float e = exp(logits_ld(row * V + j) - m);
		s += e;
		if (j != uint(tg)) {
			others += e;
		}
	}
	s = wg_sum(s);
	others = wg_sum(others);
	float xt = logits_ld(row * V + uint(tg));
	barrier(); // every read of this row is done before any write
	if (t == 0u) {
		loss[row] = m + log(s) - xt;
	}
	if (pc.hasGrad != 0u) {
		float c = pc.scale / s;
		for (uint j = t; j < V; j += WG) {
			float g = j == uint(tg) ? -pc.scale * others / s : exp(logits_ld(row * V + j) - m) * c;
			dl_st(row * V + j, g);
		}
	}
}
