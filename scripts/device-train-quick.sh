#!/usr/bin/env bash
# The training-throughput rows that a short device run can afford, side by
# side (from the repository root; bin/parallax built beforehand, the peer in
# the ignored peers/ folder): gpt2-124m-like softmax and Parallax with
# AdamW, softmax with Muon, then train_peer.py with torch.compile on the
# same shape. Logs go to $OUT (default /tmp/train-quick).
set -uo pipefail
OUT=${OUT:-/tmp/train-quick}
mkdir -p "$OUT"
export PARALLAX_REQUIRE_CUDA=1 PARALLAX_CUDA_CACHE=${PARALLAX_CUDA_CACHE:-/tmp/parallax-cuda-cache}
t0=$(date +%s)
for spec in "softmax adamw" "parallax adamw" "softmax muon" "parallax muon"; do
	set -- $spec
	timeout 100 ./bin/parallax bench train --device cuda:0 --config gpt2-124m-like --attention $1 --optimizer $2 \
		--steps ${STEPS:-25} --json >/tmp/t.json 2>>"$OUT/ours.log"
	cat /tmp/t.json >>"$OUT/ours.jsonl"
	python3 -c "
import json
try:
    r=json.load(open('/tmp/t.json')); print(f\"ours gpt2-124m-like $1 $2: {r['ms']:.2f} ms {r['tokens_per_s']/1e3:.1f}k tok/s MFU {100*r.get('mfu',0):.1f}% loss {r['loss']:.3f}\")
except Exception as e: print('ours $1 $2 FAILED', e)"
	echo "  $(($(date +%s) - t0)) s"
done
PYTHONUNBUFFERED=1 timeout 150 python3 peers/shared/bench/train_peer.py --config gpt2-124m-like --attention softmax --compile 1 >/tmp/peer.json 2>>"$OUT/peer.log"
tail -1 /tmp/peer.json | tee -a "$OUT/peer.jsonl"
echo "$(($(date +%s) - t0)) s total"
