#!/usr/bin/env bash
# Fetches Mesa's lavapipe from Debian 13's backports (mesa-vulkan-drivers
# 26.x, whose lavapipe offers VK_KHR_cooperative_matrix; Debian 12's Mesa
# 22.3 does not), with Debian 13's Vulkan loader, vulkaninfo and every
# library they need down to the dynamic loader and libc, as plain files into
# the folder $1 (default .ci/cache/lvp-khr), without installing a package or
# touching the machine's apt sources or lists.
#
# It writes $1/lvp_icd.json, the driver's manifest with an absolute
# library path, and $1/bin/vk-run, which runs a program (say
# `$1/bin/vk-run ./bin/parallax devices`) under Debian 13's loader and
# libraries with that driver as the only one and no implicit layers: the
# host's layers are built for its own libraries. Finally it checks that
# vulkaninfo sees VK_KHR_cooperative_matrix. Prints why and exits 1 when it
# cannot.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dest=$(realpath -m "${1:-$here/cache/lvp-khr}") # absolute: the script changes directory

# check fails unless vulkaninfo, run with vk-run, lists the extension.
check() {
	local out
	# vulkaninfo complains about the missing window system on standard error
	# and may exit non-zero for it after printing the device.
	out=$("$dest/bin/vk-run" "$dest/usr/bin/vulkaninfo" 2>/dev/null || true)
	if ! grep -q VK_KHR_cooperative_matrix <<<"$out"; then
		echo "fetch-lavapipe-khr: vulkaninfo under $dest/bin/vk-run does not list VK_KHR_cooperative_matrix" >&2
		return 1
	fi
}

if [[ -x $dest/bin/vk-run ]]; then
	check
	exit
fi
source "$(dirname "$0")/trixie-apt.sh"
trixie_apt fetch-lavapipe-khr "trixie trixie-backports" main empty
# Only Mesa comes from backports (it is built against trixie's libraries,
# which are the candidates for everything else).
mesa=mesa-vulkan-drivers/trixie-backports
mapfile -t pkgs < <(apt-cache "${opts[@]}" depends --recurse --no-recommends --no-suggests --no-conflicts \
	--no-breaks --no-replaces --no-enhances "$mesa" vulkan-tools | grep -v -e '^ ' -e '^<' -e '^mesa-vulkan-drivers$' | sort -u)
cd "$tmp/debs"
apt-get "${opts[@]}" download "$mesa" "${pkgs[@]}" >/dev/null
rm -rf "$dest"
mkdir -p "$dest/bin"
for f in ./*.deb; do dpkg-deb -x "$f" "$dest"; done
# What a device test never needs: documentation and the other drivers.
rm -rf "$dest/usr/share/doc" "$dest/usr/share/man"
find "$dest/usr/lib/x86_64-linux-gnu" -name 'libvulkan_*.so' ! -name libvulkan_lvp.so -delete
# The packages are merged-/usr: the /lib64 link that finds the loader comes
# from base-files, which we do not need, so make it here.
[[ -e $dest/usr/lib64/ld-linux-x86-64.so.2 ]] || { echo "fetch-lavapipe-khr: no ld-linux-x86-64.so.2 in libc6" >&2; exit 1; }
ln -sfn usr/lib64 "$dest/lib64"
lib=$dest/usr/lib/x86_64-linux-gnu/libvulkan_lvp.so
[[ -e $lib ]] || { echo "fetch-lavapipe-khr: no libvulkan_lvp.so in mesa-vulkan-drivers" >&2; exit 1; }
icd=$(ls "$dest"/usr/share/vulkan/icd.d/lvp_icd*.json 2>/dev/null | head -1)
[[ -n $icd ]] || { echo "fetch-lavapipe-khr: no lvp_icd*.json in mesa-vulkan-drivers" >&2; exit 1; }
sed -E "s|(\"library_path\": *\")[^\"]*\"|\1$lib\"|" "$icd" >"$dest/lvp_icd.json"
grep -q "\"$lib\"" "$dest/lvp_icd.json" || { echo "fetch-lavapipe-khr: cannot rewrite library_path in $icd" >&2; exit 1; }
cat >"$dest/bin/vk-run" <<'SH'
#!/bin/sh
# vk-run PROGRAM ARGS... runs PROGRAM under Debian 13's loader and libraries
# with Mesa 26's lavapipe as the only Vulkan driver (see .ci/fetch-lavapipe-khr.sh).
d=$(dirname "$(dirname "$(readlink -f "$0")")")
export VK_DRIVER_FILES="$d/lvp_icd.json" VK_LOADER_LAYERS_DISABLE='~all~'
exec "$d/lib64/ld-linux-x86-64.so.2" --library-path "$d/usr/lib/x86_64-linux-gnu" "$@"
SH
chmod +x "$dest/bin/vk-run"
check
