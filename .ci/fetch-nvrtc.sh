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
for c in apt-get dpkg-deb; do
	command -v $c >/dev/null 2>&1 || { echo "fetch-nvrtc: no $c" >&2; exit 1; }
done
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[[ -e $keyring ]] || { echo "fetch-nvrtc: no $keyring" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial" "$tmp/debs"
cat >"$tmp/trixie.sources" <<SRC
Types: deb
URIs: http://deb.debian.org/debian
Suites: trixie
Components: non-free
Signed-By: $keyring
SRC
opts=(-qq -o "Dir::Etc::sourcelist=$tmp/trixie.sources" -o Dir::Etc::sourceparts=- -o "Dir::State::Lists=$tmp/lists"
	-o "Dir::Cache=$tmp/cache" -o APT::Architecture=amd64 -o APT::Architectures=amd64)
[[ $(id -u) -eq 0 ]] && opts+=(-o APT::Sandbox::User=root) # files in $tmp, not _apt's
apt-get "${opts[@]}" update >/dev/null
cd "$tmp/debs"
apt-get "${opts[@]}" download libnvrtc12 >/dev/null
# The builtins package is named for the CUDA version (libnvrtc-builtins12.4).
builtins=$(dpkg-deb -f libnvrtc12_*.deb Depends | tr ',' '\n' | grep -o 'libnvrtc-builtins[0-9.]*' | head -1)
[[ -n $builtins ]] || { echo "fetch-nvrtc: libnvrtc12 names no builtins package" >&2; exit 1; }
apt-get "${opts[@]}" download "$builtins" >/dev/null
for f in ./*.deb; do dpkg-deb -x "$f" "$tmp/root"; done
mkdir -p "$dest"
cp -a "$tmp"/root/usr/lib/*/libnvrtc* "$dest/"
