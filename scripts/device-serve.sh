#!/usr/bin/env bash
# Serving throughput and latency on the GPU machine (from the repository
# root; no network, no Go): starts `parallax serve` on the 0.6B-shaped HF
# Qwen3 folder (the peer script's `make` writes it if it is missing) and
# load-tests it with `parallax serve-bench` at 1, 8, 32 and 64 concurrent
# streaming clients: generated tokens/s, time to first token and request
# latency (p50, p99). Build the binary beforehand on a machine with Go:
#   go build -o bin/parallax ./cmd/parallax
#
# Usage: scripts/device-serve.sh [DEVICE...]   (default: cuda:0)
# Environment: DIR (model folder), BIN, CLIENTS ("1,8,32,64"), REQUESTS (per
# client, 4), NEW (max_tokens, 128), MAX_BATCH (64), CTX (1024).
# Results: $OUT/serve-<device>.json, the server's log and metrics.
set -uo pipefail
OUT=${OUT:-/tmp/serve-out}
mkdir -p "$OUT"
export PARALLAX_CUDA_CACHE=${PARALLAX_CUDA_CACHE:-/tmp/parallax-cuda-cache}
PEER=${PEER:-peers/shared/bench/gen_peer.py}
DIR=${DIR:-/tmp/qwen3-0.6b-shaped}
BIN=${BIN:-bin/parallax}
CLIENTS=${CLIENTS:-1,8,32,64}
REQUESTS=${REQUESTS:-4}
NEW=${NEW:-128}
MAX_BATCH=${MAX_BATCH:-64}
CTX=${CTX:-1024}
PORT=${PORT:-18080}
devices=${*:-cuda:0}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | tee "$OUT/gpu.txt"
[[ -f $DIR/config.json ]] || python3 "$PEER" make "$DIR" 2>&1 | tail -1
for dev in $devices; do
	tag=${dev//:/}
	echo "== $dev: parallax serve --max-batch $MAX_BATCH --ctx $CTX"
	./$BIN serve --model "$DIR" --device "$dev" --port "$PORT" --max-batch "$MAX_BATCH" --max-queue 256 \
		--ctx "$CTX" --name qwen3 >"$OUT/serve-$tag.out" 2>"$OUT/serve-$tag.log" &
	pid=$!
	up=0
	for _ in $(seq 600); do
		if grep -q "listening on" "$OUT/serve-$tag.out" 2>/dev/null; then up=1; break; fi
		kill -0 $pid 2>/dev/null || break
		sleep 0.2
	done
	if [[ $up != 1 ]]; then
		echo "serve on $dev did not start:"; tail -5 "$OUT/serve-$tag.log"
		kill $pid 2>/dev/null; wait $pid 2>/dev/null
		continue
	fi
	cat "$OUT/serve-$tag.out"
	# A short warm-up (kernel compilation, graph recording) outside the timing.
	./$BIN serve-bench --url "http://127.0.0.1:$PORT" --clients 1,"$MAX_BATCH" --requests 1 --max-tokens 8 >/dev/null 2>&1
	timeout ${BENCH_TIMEOUT:-540} ./$BIN serve-bench --url "http://127.0.0.1:$PORT" --clients "$CLIENTS" \
		--requests "$REQUESTS" --max-tokens "$NEW" --out "$OUT/serve-$tag.json" 2>&1 | tee "$OUT/bench-$tag.txt"
	curl -s "http://127.0.0.1:$PORT/metrics" >"$OUT/metrics-$tag.txt" 2>/dev/null || true
	kill -TERM $pid 2>/dev/null
	wait $pid 2>/dev/null
	tail -2 "$OUT/serve-$tag.log"
done
