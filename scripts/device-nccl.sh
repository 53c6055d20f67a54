#!/usr/bin/env bash
# One device run of the multi-GPU path on a machine with two GPUs (from the
# repository root): the NCCL tests, the 2-GPU loss curve and throughput,
# the two-process TCP bootstrap as on two nodes, and a killed rank.
# Binaries are built beforehand on a machine with Go:
#
#   go build -o bin/parallax ./cmd/parallax
#   CGO_ENABLED=1 go test -c -o bin/cuda.test ./engine/cuda
#
# Logs go to $OUT (default /tmp/nccl-out).
set -uo pipefail
OUT=${OUT:-/tmp/nccl-out}
mkdir -p "$OUT"
export PARALLAX_REQUIRE_CUDA=1 PARALLAX_REQUIRE_NCCL=1 NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
export PARALLAX_CUDA_CACHE=${PARALLAX_CUDA_CACHE:-/tmp/parallax-cuda-cache}
t0=$(date +%s)
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
nvidia-smi topo -m 2>/dev/null | head -4
summary() { echo "exit $1 pass $(grep -c -- '--- PASS' "$2") fail $(grep -c -- '--- FAIL' "$2") skip $(grep -c -- '--- SKIP' "$2")"; grep -E -- '--- (FAIL|SKIP)' "$2" | head; }

echo "== NCCL tests"
timeout ${T_NCCL:-150} ./bin/cuda.test -test.run 'NCCL' -test.v -test.timeout 140s >"$OUT/nccl.log" 2>&1
summary $? "$OUT/nccl.log"
grep -E "GB/s|bus|update|differ|rel" "$OUT/nccl.log" | sed 's/^ *//' | head -20

echo "== 2-GPU training against 1 GPU ($(($(date +%s) - t0)) s so far)"
PARALLAX_DIST_LONG=1 timeout ${T_DP:-300} ./bin/cuda.test -test.run 'TestDataParallelGPUs' -test.v -test.timeout 290s >"$OUT/dp.log" 2>&1
summary $? "$OUT/dp.log"
grep -E "nccl_test.go" "$OUT/dp.log" | sed 's/^ *//' | head -20

echo "== two processes, one GPU each, TCP rendezvous at 127.0.0.1 ($(($(date +%s) - t0)) s so far)"
rm -rf /tmp/tcp2
for r in 0 1; do
	RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=29511 timeout 150 \
		./bin/parallax train --config small --device cuda --steps 20 --batch 16 --seq 512 --log-every 10 \
		--eval-every -1 --bucket-mb 4 --out /tmp/tcp2 >"$OUT/tcp2-rank$r.log" 2>&1 &
done
wait
tail -3 "$OUT/tcp2-rank0.log"; tail -2 "$OUT/tcp2-rank1.log"; ls /tmp/tcp2 | head

echo "== a killed rank ($(($(date +%s) - t0)) s so far)"
rm -rf /tmp/kill
timeout 150 ./bin/parallax train --config small --nproc-per-node 2 --steps 3000 --batch 16 --seq 512 --log-every 50 \
	--eval-every -1 --save-every 100 --out /tmp/kill >"$OUT/kill.log" 2>&1 &
launcher=$!
for i in $(seq 1 90); do
	sleep 1
	grep -q "step 150/" "$OUT/kill.log" && break # a checkpoint (step 100) exists
done
sleep 3
victim=""
for p in $(pgrep -f 'parallax train'); do
	if tr '\0' '\n' </proc/$p/environ 2>/dev/null | grep -qx 'RANK=1'; then victim=$p; fi
done
echo "killing rank 1 (pid $victim) at $(date +%s.%N | cut -c1-14)"
[[ -n $victim ]] && kill -9 "$victim"
wait $launcher
echo "launcher exit $? at $(date +%s.%N | cut -c1-14)"
tail -6 "$OUT/kill.log"
ls -la /tmp/kill | head
echo "total $(($(date +%s) - t0)) s"
