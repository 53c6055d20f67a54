#version 450
// One frame of parallax-view, drawn straight into the window's swapchain
// image (or, where the surface cannot be a storage image, into an RGBA8
// image then blitted): two heatmap panels of one head's attention (view_attn
// writes the maps), the per-layer correction-strength bars, and a grid of
// text cells over everything. Compiled twice: without a format qualifier
// (the swapchain's own format; needs shaderStorageImageWriteWithoutFormat)
// and with PX_RGBA8 for the offscreen image.
layout(local_size_x = 16, local_size_y = 16) in;

#ifdef PX_RGBA8
layout(binding = 0, rgba8) uniform writeonly image2D frame;
#else
layout(binding = 0) uniform writeonly image2D frame;
#endif

// maps: p [cap, cap], eff [cap, cap], row max of p [cap] (view_attn).
layout(std430, binding = 1) readonly buffer Maps { float maps[]; };
// bars: the correction strength ||Sigma_KV r|| / ||o_SA|| per layer.
layout(std430, binding = 2) readonly buffer Bars { float bars[]; };
// text: one cell per uint, the character in bits 0-7, its colour in 8-15.
layout(std430, binding = 3) readonly buffer Text { uint text[]; };
// font: 16 rows of up to 8 pixels (bit x = column x) per character 0-127.
layout(std430, binding = 4) readonly buffer Font { uint font[]; };

layout(push_constant) uniform PC {
	uint width, height; // the frame
	int ax, ay, size;   // panel p: origin and side (panel eff is the same size)
	int bx, by;         // panel eff: origin
	int cx, cy, cw, ch; // the bars panel
	uint L, cap;        // sequence length shown, the maps' stride
	uint layers, layer; // number of layers, the one selected
	uint cellW, cellH, scale, cols, rows; // the text grid
	uint cursorRow;     // the newest query row (highlighted), or L
} pc;

const vec3 BG = vec3(0.075, 0.082, 0.102);
const vec3 PANEL = vec3(0.125, 0.133, 0.161);
const vec3 MASKED = vec3(0.102, 0.110, 0.133);
const vec3 FRAME = vec3(0.35, 0.37, 0.42);

// seq maps [0, 1] from dark blue through teal to yellow.
vec3 seq(float t) {
	t = clamp(t, 0.0, 1.0);
	vec3 a = vec3(0.06, 0.07, 0.22), b = vec3(0.13, 0.56, 0.55), c = vec3(0.99, 0.91, 0.14);
	return t < 0.5 ? mix(a, b, t * 2.0) : mix(b, c, t * 2.0 - 1.0);
}

// div maps [-1, 1]: blue for negative, near black at 0, orange-red for
// positive.
vec3 div(float v) {
	v = clamp(v, -1.0, 1.0);
	vec3 z = vec3(0.09, 0.09, 0.11);
	return v < 0.0 ? mix(z, vec3(0.25, 0.56, 1.0), -v) : mix(z, vec3(1.0, 0.42, 0.16), v);
}

const vec3 INK[5] = vec3[5](vec3(0.90, 0.91, 0.93), vec3(0.55, 0.58, 0.64), vec3(1.0, 0.70, 0.28),
	vec3(0.45, 0.80, 0.85), vec3(0.99, 0.91, 0.14));

// heat returns the colour of panel pixel (px, py) (in [0, size)); eff
// selects the effective weights.
vec3 heat(int px, int py, bool eff) {
	if (pc.L == 0u) {
		return PANEL;
	}
	uint i = uint(py) * pc.L / uint(pc.size);
	uint j = uint(px) * pc.L / uint(pc.size);
	if (j > i) {
		return MASKED;
	}
	// Both panels share the row's scale (its largest p), so they compare
	// directly; a square root lifts the small weights of long rows.
	float rmax = max(maps[2u * pc.cap * pc.cap + i], 1e-20);
	vec3 c;
	if (eff) {
		float e = maps[pc.cap * pc.cap + i * pc.cap + j] / rmax;
		c = div(sign(e) * sqrt(abs(e)));
	} else {
		c = seq(sqrt(maps[i * pc.cap + j] / rmax));
	}
	if (i == pc.cursorRow && pc.size / int(pc.L) >= 3) {
		c = mix(c, vec3(1.0), 0.15); // the newest token's row
	}
	return c;
}

bool inside(ivec2 p, int x, int y, int w, int h) { return p.x >= x && p.y >= y && p.x < x + w && p.y < y + h; }

void main() {
	ivec2 p = ivec2(gl_GlobalInvocationID.xy);
	if (p.x >= int(pc.width) || p.y >= int(pc.height)) {
		return;
	}
	vec3 c = BG;
	if (pc.size > 0) {
		if (inside(p, pc.ax - 1, pc.ay - 1, pc.size + 2, pc.size + 2)) {
			c = inside(p, pc.ax, pc.ay, pc.size, pc.size) ? heat(p.x - pc.ax, p.y - pc.ay, false) : FRAME;
		} else if (inside(p, pc.bx - 1, pc.by - 1, pc.size + 2, pc.size + 2)) {
			c = inside(p, pc.bx, pc.by, pc.size, pc.size) ? heat(p.x - pc.bx, p.y - pc.by, true) : FRAME;
		}
	}
	if (pc.cw > 0 && pc.ch > 0 && pc.layers > 0u && inside(p, pc.cx, pc.cy, pc.cw, pc.ch)) {
		c = PANEL;
		float top = 0.0;
		for (uint l = 0u; l < pc.layers; l++) {
			top = max(top, bars[l]);
		}
		int slot = pc.ch / int(pc.layers);
		uint l = uint((p.y - pc.cy) / max(slot, 1));
		int within = (p.y - pc.cy) - int(l) * slot;
		if (l < pc.layers && within >= 2 && within < slot - 2 && top > 0.0) {
			float frac = clamp(bars[l] / top, 0.0, 1.0);
			if (float(p.x - pc.cx) < frac * float(pc.cw)) {
				c = l == pc.layer ? vec3(1.0, 0.62, 0.20) : vec3(0.26, 0.62, 0.66);
			}
		}
	}
	// Text on top.
	uint col = uint(p.x) / pc.cellW, row = uint(p.y) / pc.cellH;
	if (col < pc.cols && row < pc.rows) {
		uint cell = text[row * pc.cols + col];
		uint ch = cell & 0x7fu;
		if (ch > 32u) {
			uint gx = (uint(p.x) % pc.cellW) / pc.scale, gy = (uint(p.y) % pc.cellH) / pc.scale;
			if (gy < 16u && gx < 8u && ((font[ch * 16u + gy] >> gx) & 1u) != 0u) {
				c = INK[min((cell >> 8) & 0xffu, 4u)];
			}
		}
	}
	imageStore(frame, p, vec4(c, 1.0));
}
