#!/usr/bin/env bash
# Fetches NVRTC 12 (CUDA's run-time compiler: Debian 13's non-free
# libnvrtc12 and the builtins library it depends on) as plain files into
# the folder $1, without installing a package or touching the machine's apt
# sources or lists. With it the CUDA backend's TestCompileKernels compiles
# every kernel module for sm_80 and sm_90a (the Hopper wgmma kernels) on a
# machine with no GPU. Prints why and exits 1 when it cannot.
set -euo pipefail
dest=$(realpath -m "$1") # absolute: the script changes directory
[[ -e $dest/libnvrtc.so.12 ]] && exit 0
source "$(dirname "$0")/trixie-apt.sh"
trixie_apt fetch-nvrtc "trixie" non-free
cd "$tmp/debs"
apt-get "${opts[@]}" download libnvrtc12 >/dev/null
# The builtins package is named for the CUDA version (libnvrtc-builtins12.4).
builtins=$(dpkg-deb -f libnvrtc12_*.deb Depends | tr ',' '\n' | grep -o 'libnvrtc-builtins[0-9.]*' | head -1)
[[ -n $builtins ]] || { echo "fetch-nvrtc: libnvrtc12 names no builtins package" >&2; exit 1; }
apt-get "${opts[@]}" download "$builtins" >/dev/null
for f in ./*.deb; do dpkg-deb -x "$f" "$tmp/root"; done
mkdir -p "$dest"
cp -a "$tmp"/root/usr/lib/*/libnvrtc* "$dest/"
