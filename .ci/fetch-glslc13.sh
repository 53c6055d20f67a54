#!/usr/bin/env bash
# Fetches Debian 13's glslc (shaderc 2025.x with glslang 15.x, which knows
# GL_KHR_cooperative_matrix; Debian 12's does not) and spirv-val (SPIRV-Tools
# 2025.x; Debian 12's rejects the KHR cooperative-matrix capability) as
# plain files into the folder $1 (default .ci/cache/glslc13), with Debian
# 13's own dynamic loader, libc and C++ runtime beside them, without
# installing a package or touching the machine's apt sources or lists.
# They run on an older system through that loader: $1/bin/glslc,
# $1/bin/spirv-val and $1/bin/spirv-dis are wrappers doing so, so putting
# $1/bin first on the PATH makes the shader tools use them. Finally it
# compiles and validates a small compute shader with KHR cooperative
# matrices (8x8x8 f16, the shape lavapipe offers). Prints why and exits 1
# when it cannot.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dest=$(realpath -m "${1:-$here/cache/glslc13}") # absolute: the script changes directory

# check compiles the KHR cooperative-matrix probe shader with $dest/bin/glslc.
check() {
	local t
	t=$(mktemp -d)
	cat >"$t/probe.comp" <<'GLSL'
#version 450
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
layout(local_size_x = 8) in;
layout(binding = 0) readonly buffer A { float16_t a[]; };
layout(binding = 1) readonly buffer B { float16_t b[]; };
layout(binding = 2) buffer C { float c[]; };
void main() {
	coopmat<float16_t, gl_ScopeSubgroup, 8, 8, gl_MatrixUseA> ma;
	coopmat<float16_t, gl_ScopeSubgroup, 8, 8, gl_MatrixUseB> mb;
	coopmat<float, gl_ScopeSubgroup, 8, 8, gl_MatrixUseAccumulator> mc =
		coopmat<float, gl_ScopeSubgroup, 8, 8, gl_MatrixUseAccumulator>(0.0);
	coopMatLoad(ma, a, 0, 8, gl_CooperativeMatrixLayoutRowMajor);
	coopMatLoad(mb, b, 0, 8, gl_CooperativeMatrixLayoutRowMajor);
	mc = coopMatMulAdd(ma, mb, mc);
	coopMatStore(mc, c, 0, 8, gl_CooperativeMatrixLayoutRowMajor);
}
GLSL
	if ! "$dest/bin/glslc" --target-env=vulkan1.3 -O -o "$t/probe.spv" "$t/probe.comp" >&2 ||
		! "$dest/bin/spirv-val" --target-env vulkan1.3 "$t/probe.spv" >&2; then
		rm -rf "$t"
		echo "fetch-glslc13: $dest/bin cannot compile and validate a KHR cooperative-matrix shader" >&2
		return 1
	fi
	rm -rf "$t"
}

if [[ -x $dest/bin/glslc ]]; then
	check
	exit
fi
source "$(dirname "$0")/trixie-apt.sh"
trixie_apt fetch-glslc13 "trixie" main empty
# glslc and spirv-tools (a spirv-val that knows the KHR cooperative-matrix
# capability; Debian 12's rejects it), and everything they need down to
# libc6 (glslang and SPIRV-Tools are linked into libshaderc1).
mapfile -t pkgs < <(apt-cache "${opts[@]}" depends --recurse --no-recommends --no-suggests --no-conflicts \
	--no-breaks --no-replaces --no-enhances glslc spirv-tools | grep -v -e '^ ' -e '^<' | sort -u)
cd "$tmp/debs"
apt-get "${opts[@]}" download "${pkgs[@]}" >/dev/null
rm -rf "$dest"
mkdir -p "$dest/bin"
for f in ./*.deb; do dpkg-deb -x "$f" "$dest"; done
# What compiling never needs: documentation and static libraries.
rm -rf "$dest/usr/share/doc" "$dest/usr/share/man"
find "$dest/usr/lib/x86_64-linux-gnu" -name '*.a' -delete
# The packages are merged-/usr: the /lib64 link that finds the loader comes
# from base-files, which we do not need, so make it here.
[[ -e $dest/usr/lib64/ld-linux-x86-64.so.2 ]] || { echo "fetch-glslc13: no ld-linux-x86-64.so.2 in libc6" >&2; exit 1; }
ln -sfn usr/lib64 "$dest/lib64"
for tool in glslc spirv-val spirv-dis; do
	cat >"$dest/bin/$tool" <<SH
#!/bin/sh
# Debian 13's $tool under Debian 13's loader and libraries (see .ci/fetch-glslc13.sh).
d=\$(dirname "\$(dirname "\$(readlink -f "\$0")")")
exec "\$d/lib64/ld-linux-x86-64.so.2" --library-path "\$d/usr/lib/x86_64-linux-gnu" "\$d/usr/bin/$tool" "\$@"
SH
	chmod +x "$dest/bin/$tool"
done
check
