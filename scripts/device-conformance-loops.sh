#!/usr/bin/env bash
# The conformance suite with fresh seeds, many runs, on the GPU machine's
# CUDA and Vulkan devices at once (from the repository root; bin/parallax
# built beforehand): P copies of scripts/conformance-loop.sh a device, each
# making N/P runs, until every run is made or SECS seconds have passed.
# Every run's seed is printed and the failing rows of a failed run are
# logged, so that any failure can be repeated exactly. Prints the totals
# per device; exits 1 if any run failed.
#
#   N=200 P=6 SECS=420 scripts/device-conformance-loops.sh [DEVICE...]
#
# (default devices cuda:0 vulkan:0; CUDA runs f32,bf16,f16 and Vulkan the
# same). Logs go to $OUT (default /tmp/conformance-loops).
set -uo pipefail
OUT=${OUT:-/tmp/conformance-loops}
N=${N:-200}
P=${P:-6}
SECS=${SECS:-420}
DTYPES=${DTYPES:-f32,bf16,f16}
devs=${*:-cuda:0 vulkan:0}
mkdir -p "$OUT"
if [[ -d .gl ]] && ! ldconfig -p | grep -q libvulkan.so.1; then
	for f in .gl/*.deb; do dpkg -x "$f" /; done
	ldconfig
fi
[[ -e /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]] && export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}
export PARALLAX_REQUIRE_CUDA=1 PARALLAX_REQUIRE_VULKAN=1 PARALLAX_CUDA_CACHE=${PARALLAX_CUDA_CACHE:-/tmp/parallax-cuda-cache}
# One run first on each device, so that the loops start with compiled
# kernels in the cache and a failure to start at all shows at once.
for dev in $devs; do
	./bin/parallax conformance --device "$dev" --dtype "$DTYPES" --seed 1 >"$OUT/warm-${dev/:/}.txt" 2>&1
	echo "$dev: warm-up run exit $?: $(tail -1 "$OUT/warm-${dev/:/}.txt")"
done
per=$(((N + P - 1) / P))
for dev in $devs; do
	for p in $(seq 1 "$P"); do
		scripts/conformance-loop.sh -n "$per" -t "$SECS" -l "$OUT/fail-${dev/:/}-$p.log" -- --device "$dev" --dtype "$DTYPES" \
			>"$OUT/loop-${dev/:/}-$p.txt" 2>&1 &
	done
done
wait
rc=0
for dev in $devs; do
	summary=$(cat "$OUT"/loop-${dev/:/}-*.txt | awk '
		/^run .*: pass/ {runs++; pass++}
		/^run .*: FAIL/ {runs++; fail++; print "  " $0 > "/dev/stderr"}
		END {printf "%d runs, %d passed, %d failed", runs, pass, fail}')
	echo "$dev: $summary"
	[[ $summary == *" 0 failed" ]] || rc=1
	cat "$OUT"/fail-${dev/:/}-*.log 2>/dev/null | head -40
done
exit $rc
