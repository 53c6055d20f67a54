#!/usr/bin/env bash
# Nsight Compute profile of one Parallax (or softmax) forward+backward on
# the GPU machine: per-kernel time, throughput, occupancy and warp stalls of
# the attention kernels. Run from the repository root with bin/cuda.test
# built beforehand (see scripts/device-cuda.sh).
#
#   SHAPE=8,16,2048,128 KIND=parallax scripts/profile-cuda.sh
#   STALLS=1 scripts/profile-cuda.sh   # warp-stall reasons and instruction counts instead
#
# The report goes to $OUT/ncu.txt (default /tmp/cuda-out).
set -uo pipefail
OUT=${OUT:-/tmp/cuda-out}
mkdir -p "$OUT"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
export PARALLAX_CUDA_CACHE=${PARALLAX_CUDA_CACHE:-/tmp/parallax-cuda-cache}
if [[ -n ${STALLS:-} ]]; then
	what=(--metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,gpu__time_duration.sum,smsp__inst_executed.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum')
else
	what=(--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis
		--section WarpStateStats --section Occupancy --section LaunchStats --section SchedulerStats)
fi
# The bench times the forward 12 times (2 warm-up, 10 timed), then
# forward+backward: skip those and one warm-up pass, profile one pass
# (the forward, the pre-pass, dq/dr and dk/dv).
PARALLAX_CUDA_BENCH=1 PARALLAX_BENCH_ONLY=prefill PARALLAX_BENCH_SHAPES=${SHAPE:-8,16,2048,128} \
	PARALLAX_BENCH_KIND=${KIND:-parallax} PARALLAX_BENCH_VARIANTS=0 \
	"$NCU" --clock-control none --kernel-name regex:'attn_|bwd_pre' --launch-skip 16 --launch-count 4 \
	"${what[@]}" ${NCU_EXTRA:-} ./bin/cuda.test -test.run TestBench -test.v >"$OUT/ncu.txt" 2>&1
echo "ncu exit $?"
if [[ -n ${STALLS:-} ]]; then
	awk '/^  [a-z_0-9]+ \(/{print} /duration|inst_executed|wavefronts|conflicts/{print} /stalled/{ if ($NF+0 > 0.05) print }' \
		"$OUT/ncu.txt" | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | head -90
else
	grep -E '^\s+attn_|^\s+bwd_pre|Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Issue Slots Busy|Achieved Occupancy|Stall|Shared Memory Configuration Size' "$OUT/ncu.txt" | head -80
fi
