#!/usr/bin/env bash
# One device run of the CUDA backend (on the GPU machine, from the
# repository root): the conformance suite and the tensor-core tests with
# PARALLAX_REQUIRE_CUDA=1, the conformance table, our benchmarks and the
# peers' (scripts/bench-peers.py). Binaries are built beforehand on a
# machine with Go:
#
#   CGO_ENABLED=1 go test -c -o bin/cuda.test ./engine/cuda
#   go build -o bin/parallax ./cmd/parallax
#
# Usage: scripts/device-cuda.sh [test] [bench] [peers]   (default: all)
# Logs and results go to $OUT (default /tmp/cuda-out).
set -uo pipefail
OUT=${OUT:-/tmp/cuda-out}
mkdir -p "$OUT"
export PARALLAX_REQUIRE_CUDA=1 PARALLAX_CUDA_CACHE=${PARALLAX_CUDA_CACHE:-/tmp/parallax-cuda-cache}
steps=${*:-test bench peers}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv >"$OUT/gpu.txt" 2>&1
cat "$OUT/gpu.txt"
t0=$(date +%s)
summary() { # $1 log: pass/fail counts and the failures
	echo "pass $(grep -c -- '--- PASS' "$1") fail $(grep -c -- '--- FAIL' "$1") skip $(grep -c -- '--- SKIP' "$1")"
	grep -E -- '--- FAIL|_test.go:[0-9]+: .*(exceeds|error|panic)' "$1" | head -40
}
if [[ $steps == *test* ]]; then
	echo "== parallax devices"
	./bin/parallax devices 2>&1 | tee "$OUT/devices.txt" | head -20
	echo "== tensor-core tests"
	timeout 120 ./bin/cuda.test -test.run 'TestTensorCore' -test.v -test.timeout 110s >"$OUT/tc.log" 2>&1
	echo "exit $?"; summary "$OUT/tc.log"
	grep -E "rel err" "$OUT/tc.log" | awk '{print $2, $5}' | sort -k2 -g | tail -3
	echo "== conformance (go test, f32 + bf16)"
	timeout 240 ./bin/cuda.test -test.run 'TestConformance' -test.v -test.timeout 230s >"$OUT/conformance.log" 2>&1
	echo "exit $?"; summary "$OUT/conformance.log"
	if [[ -n ${TABLE:-} ]]; then
		./bin/parallax conformance --device cuda:0 --dtype f32,bf16 --json >"$OUT/conformance.json" 2>"$OUT/conformance.err"
		echo "conformance table exit $?"
	fi
	echo "$(($(date +%s) - t0)) s so far"
fi
if [[ $steps == *bench* ]]; then
	echo "== our benchmarks"
	PARALLAX_CUDA_BENCH=1 PARALLAX_BENCH_OUT="$OUT/bench.jsonl" timeout 200 ./bin/cuda.test -test.run TestBench -test.v -test.timeout 190s >"$OUT/bench.log" 2>&1
	echo "exit $?"
	grep -E "bench_test.go" "$OUT/bench.log" | sed 's/^ *bench_test.go:[0-9]*: //' | grep -vE "^softmax +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9]+ " | head -${BENCH_LINES:-60}
	grep -E "FAIL|panic" "$OUT/bench.log" | head -5
fi
if [[ $steps == *train* ]]; then
	# gpt2-124m-like uses GPT-2's own tokenizer (embedded) on the corpus.
	echo "== training throughput (30 steps, batch 16 x 512 tokens, bf16)"
	for cfg in ${CONFIGS:-small gpt2-124m-like}; do
		extra=""
		for att in parallax softmax; do
			rm -rf /tmp/train-run
			timeout ${TRAIN_TIMEOUT:-90} ./bin/parallax train --config $cfg --attention $att --device cuda:0 --steps 30 \
				--batch 16 --seq 512 --eval-every -1 --save-every -1 --log-every 10 $extra --out /tmp/train-run \
				>/tmp/train.log 2>&1
			rc=$?
			{ echo "== $cfg $att exit $rc"; cat /tmp/train.log; tail -1 /tmp/train-run/metrics.jsonl; } >>"$OUT/train.log" 2>&1
			echo "$cfg $att exit $rc: $(grep -E '^(step 30|done)' /tmp/train.log | tr '\n' ' ' | cut -c1-200)"
			tail -1 /tmp/train-run/metrics.jsonl 2>/dev/null | cut -c1-400
			grep -iE "error|panic" /tmp/train.log | head -3
		done
	done
fi
if [[ $steps == *peers* ]]; then
	echo "== peers"
	PYTHONUNBUFFERED=1 timeout 240 python3 scripts/bench-peers.py --json "$OUT/peers.jsonl" >"$OUT/peers.log" 2>&1
	echo "exit $?"
	grep -E "^(cudnn|triton|prefill|decode|device)" "$OUT/peers.log" | head -${PEER_LINES:-30}
	grep -E "Error|error" "$OUT/peers.log" | head -5
fi
echo "total $(($(date +%s) - t0)) s"
