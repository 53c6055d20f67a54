#!/usr/bin/env bash
# Warp-stall breakdown (Nsight Compute) of the attention kernels of one
# forward+backward; see scripts/profile-cuda.sh. Kernel names: KERNELS regex.
set -uo pipefail
OUT=${OUT:-/tmp/cuda-out}
mkdir -p "$OUT"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
export PARALLAX_CUDA_CACHE=${PARALLAX_CUDA_CACHE:-/tmp/parallax-cuda-cache}
PARALLAX_CUDA_BENCH=1 PARALLAX_BENCH_ONLY=prefill PARALLAX_BENCH_SHAPES=${SHAPE:-8,16,2048,128} \
	PARALLAX_BENCH_KIND=${KIND:-parallax} PARALLAX_BENCH_VARIANTS=0 \
	"$NCU" --clock-control none --kernel-name regex:"${KERNELS:-attn_}" --launch-skip ${SKIP:-15} --launch-count ${COUNT:-3} \
	--metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,gpu__time_duration.sum,smsp__inst_executed.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum' \
	./bin/cuda.test -test.run TestBench >"$OUT/stalls.txt" 2>&1
echo "ncu exit $?"
awk '/^  [a-z_0-9]+ \(/{print} /duration|inst_executed|gmma|wavefronts|conflicts/{print} /stalled/{ if ($NF+0 > 0.05) print }' "$OUT/stalls.txt" | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | head -90
