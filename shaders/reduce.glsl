// reduce.glsl: workgroup-wide reductions through shared memory (the
// workgroup size must be a power of two). Deterministic: the same inputs
// in the same invocations always combine in the same order. Every
// invocation must call them (they contain barriers).

shared float px_red[WG];

float wg_sum(float v) {
	uint t = gl_LocalInvocationID.x;
	px_red[t] = v;
	barrier();
	for (uint s = WG >> 1; s > 0u; s >>= 1) {
		if (t < s) {
			px_red[t] += px_red[t + s];
		}
		barrier();
	}
	float r = px_red[0];
	barrier();
	return r;
}

float wg_max(float v) {
	uint t = gl_LocalInvocationID.x;
	px_red[t] = v;
	barrier();
	for (uint s = WG >> 1; s > 0u; s >>= 1) {
		if (t < s) {
			px_red[t] = max(px_red[t], px_red[t + s]);
		}
		barrier();
	}
	float r = px_red[0];
	barrier();
	return r;
}
