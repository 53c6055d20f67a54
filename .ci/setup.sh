#!/usr/bin/env bash
# Installs what a fresh Debian/Ubuntu machine lacks to build and test the
# project, and nothing else: each requirement is checked first, and apt-get
# runs only for a missing one when we are root. Safe to run any number of
# times; quiet when everything is present.
set -euo pipefail
cd "$(dirname "$0")/.."

min_go_minor=26 # go.mod's "go 1.26"

say() { echo "setup: $*" >&2; }

apt_updated=0
# apt_install PKG... installs Debian packages, as root only.
apt_install() {
	if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
		say "missing $*; install it (as root: apt-get install $*)"
		return 1
	fi
	if [[ $apt_updated -eq 0 ]]; then
		DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
		apt_updated=1
	fi
	say "installing $*"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# need_cmd CMD PKG... installs PKG... unless CMD is on the PATH.
need_cmd() {
	local cmd=$1
	shift
	command -v "$cmd" >/dev/null 2>&1 || apt_install "$@"
}

# need_lib SONAME PKG... installs PKG... unless the dynamic linker knows SONAME.
need_lib() {
	local lib=$1
	shift
	ldconfig -p 2>/dev/null | grep -q "$lib" || apt_install "$@"
}

# Go is not installed from apt (Debian's is older than go.mod needs).
if ! command -v go >/dev/null 2>&1; then
	say "Go is not installed. Install Go 1.${min_go_minor} or newer from https://go.dev/dl/ and put its bin directory on the PATH."
	exit 1
fi
gover=$(go env GOVERSION 2>/dev/null || true)
if [[ $gover =~ ^go1\.([0-9]+) ]] && ((BASH_REMATCH[1] < min_go_minor)); then
	say "$gover is too old; this module needs Go 1.${min_go_minor} or newer (https://go.dev/dl/)."
	exit 1
fi

need_cmd git git

# cgo (the Vulkan backend's C shim) needs a C compiler.
need_cmd gcc gcc libc6-dev

# Vulkan: the loader, Mesa's lavapipe (a Vulkan device that runs on the CPU,
# so the Vulkan backend's tests run on machines without a GPU) and glslc
# (shaders: the check that the committed SPIR-V matches its sources).
need_lib libvulkan.so.1 libvulkan1
need_lib libvulkan_lvp.so mesa-vulkan-drivers
need_cmd glslc glslc
# The Khronos validation layer: the Vulkan tests rerun the conformance suite
# under it and fail on any validation error.
[[ -e /usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json ]] || apt_install vulkan-validationlayers || say "without it the validation-layer test is skipped"
# spirv-val: the shaders' tests validate every SPIR-V module with it.
command -v spirv-val >/dev/null 2>&1 || apt_install spirv-tools || say "without it the SPIR-V validation test is skipped"

# need_header HEADER PKG... installs PKG... unless /usr/include/HEADER exists.
need_header() {
	local h=$1
	shift
	[[ -e /usr/include/$h ]] || apt_install "$@"
}

# The desktop viewer (cmd/parallax-view): GLFW's cgo build needs the X11
# and GL development files, and its test opens a real window on a virtual
# X server (Xvfb, started by the test itself when DISPLAY is unset).
need_header X11/Xlib.h libx11-dev
need_header X11/Xcursor/Xcursor.h libxcursor-dev
need_header X11/extensions/Xrandr.h libxrandr-dev
need_header X11/extensions/Xinerama.h libxinerama-dev
need_header X11/extensions/XInput2.h libxi-dev
need_header X11/extensions/xf86vmode.h libxxf86vm-dev
need_header GL/gl.h libgl-dev
need_cmd Xvfb xvfb
# parallax chat's terminal test drives it in tmux (it skips without).
need_cmd tmux tmux || say "without it the chat terminal test is skipped"
# The chat page of parallax serve is checked in headless Chromium (the test
# skips without it).
need_cmd chromium chromium || say "without it the chat page test is skipped"
need_cmd xauth xauth

# The KHR cooperative-matrix shaders (matmul_coop_khr) need a newer glslc
# than Debian 12's: Debian 13's (shaderc 2025.2, the version their
# committed SPIR-V was compiled with), as files in .ci/cache/glslc13, for
# the SPIR-V check (make spirv-check) and go generate. And their kernel is
# certified on Mesa 26's lavapipe (VK_KHR_cooperative_matrix, 8x8x8 f16),
# as files in .ci/cache/lvp-khr: `make test` reruns the Vulkan tests under
# its bin/vk-run. Both are downloaded once and kept; under
# PARALLAX_REQUIRE_VULKAN=1 (CI) failing to fetch them is an error.
khr_fetch() {
	local script=$1 dir=$2 what=$3
	bash "$script" "$dir" && return 0
	say "could not fetch $what into $dir"
	[[ ${PARALLAX_REQUIRE_VULKAN:-} != 1 ]] || exit 1
}
khr_fetch .ci/fetch-glslc13.sh .ci/cache/glslc13 "the KHR shaders' glslc (the SPIR-V check will fail)"
khr_fetch .ci/fetch-lavapipe-khr.sh .ci/cache/lvp-khr "Mesa 26's lavapipe (the KHR matmul certification will skip)"

# NVRTC 12 for the CUDA kernels' compile test (sm_80 and the Hopper sm_90a
# kernels; no GPU needed), as files in .ci/cache/nvrtc: `make test` points
# the test at them and then requires them (PARALLAX_REQUIRE_NVRTC=1).
bash .ci/fetch-nvrtc.sh .ci/cache/nvrtc || say "no NVRTC 12: the CUDA kernels' compile test will skip"

# The official OpenAI client (the openai npm package) for the test of
# `parallax serve` (cmd/parallax), cached in .ci/cache/npm; without Node
# the test skips.
if command -v npm >/dev/null 2>&1 && [[ ! -f .ci/cache/npm/node_modules/openai/package.json ]]; then
	mkdir -p .ci/cache/npm
	npm install --prefix .ci/cache/npm --no-audit --no-fund --silent openai@4 >/dev/null 2>&1 ||
		say "no openai npm package: the OpenAI client test will skip"
fi
