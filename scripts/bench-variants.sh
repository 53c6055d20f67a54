#!/usr/bin/env bash
# Prefill variants of the CUDA attention kernels on the GPU machine, side by
# side in one call: for each "name:options" argument the bench line of one
# shape, with PARALLAX_CUDA_NVRTC_OPTIONS set to options (the tuning
# switches of shaders/cuda/attention_wgmma.cu, e.g. -DPINGPONG=1), then
# each kernel's time and instruction count under Nsight Compute. Run from
# the repository root with bin/cuda.test built beforehand (see
# scripts/device-cuda.sh).
#
#   scripts/bench-variants.sh 8,16,4096,64 parallax "base:" "pp:-DPINGPONG=1"
#
# BIN=bin/other.test times another build of the test binary (an A/B of two
# commits: run the script once per binary, alternating).
set -uo pipefail
export PARALLAX_REQUIRE_CUDA=1 PARALLAX_CUDA_CACHE=${PARALLAX_CUDA_CACHE:-/tmp/parallax-cuda-cache}
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
BIN=${BIN:-./bin/cuda.test}
shape=$1 kind=$2
shift 2
bench() {
	PARALLAX_CUDA_BENCH=1 PARALLAX_BENCH_ONLY=prefill PARALLAX_BENCH_SHAPES=$shape PARALLAX_BENCH_KIND=$kind \
		PARALLAX_BENCH_VARIANTS=0 "$@"
}
for v in "$@"; do
	export PARALLAX_CUDA_NVRTC_OPTIONS="${v#*:}"
	echo "=== ${v%%:*} [$PARALLAX_CUDA_NVRTC_OPTIONS] $shape $kind ($BIN)"
	bench timeout 120 "$BIN" -test.run TestBench -test.v 2>&1 | grep -E "bench_test.go:229"
	[[ -n ${NO_NCU:-} ]] && continue
	# the bench times the forward 12 times, then forward+backward: profile
	# one forward+backward after those and one warm-up pass
	bench timeout 120 "$NCU" --clock-control none --kernel-name regex:'attn_|bwd_pre' --launch-skip 16 --launch-count 4 \
		--metrics gpu__time_duration.sum,smsp__inst_executed.sum "$BIN" -test.run TestBench -test.v 2>&1 |
		awk '/^  [a-z_0-9]+ \(/{k=$1} /duration/{d=$(NF)" "$(NF-1)} /inst_executed/{print "   ", k, d, $NF, "instructions"}'
done
