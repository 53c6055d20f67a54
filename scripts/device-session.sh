#!/usr/bin/env bash
# One device run that makes the fixtures only the GPU machine can (the
# Hugging Face libraries are there) and measures generation and training
# side by side with the peers (from the repository root; binaries built
# beforehand, peers in the ignored peers/ folder):
#
#   fixtures  scripts/device-hf-fixture.sh and scripts/device-tokenizer-fixtures.sh
#   gen       HF generate with a static cache (transformers compiles it) and
#             our bench generate, CUDA batch 1 and 32, Vulkan batch 1
#   train     bench train gpt2-124m-like (softmax and Parallax AdamW, softmax
#             Muon) and train_peer.py with torch.compile
#
# Usage: scripts/device-session.sh [fixtures] [gen] [train]; files to $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/session-out}
mkdir -p "$OUT"
export PARALLAX_REQUIRE_CUDA=1 PARALLAX_CUDA_CACHE=${PARALLAX_CUDA_CACHE:-/tmp/parallax-cuda-cache}
steps=${*:-fixtures gen train}
DIR=${DIR:-/tmp/qwen3-0.6b-shaped}
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader 2>&1
if [[ $steps == *fixtures* ]]; then
	OUT=$OUT bash scripts/device-hf-fixture.sh 2>&1 | tail -12
	[[ -f scripts/device-tokenizer-fixtures.sh ]] && OUT=$OUT bash scripts/device-tokenizer-fixtures.sh 2>&1 | tail -6
	echo "$(($(date +%s) - t0)) s so far"
fi
if [[ $steps == *gen* ]]; then
	[[ -f $DIR/config.json ]] || python3 peers/shared/bench/gen_peer.py make "$DIR" 2>&1 | tail -1
	# The peer script times two modes; only the compiled static cache is the
	# goal's reference, so a copy runs that one.
	sed 's/for mode, kw in \[("dynamic-cache eager", {}), /for mode, kw in [/' peers/shared/bench/gen_peer.py >/tmp/gen_peer_static.py
	echo "== HF generate, static cache, batch 1, 256 new"
	timeout 300 python3 /tmp/gen_peer_static.py time "$DIR" --new 256 --batch 1 2>>"$OUT/gen.log" | tee -a "$OUT/gen.jsonl"
	if [[ -d .gl ]] && ! ldconfig -p | grep -q libvulkan.so.1; then
		for f in .gl/*.deb; do dpkg -x "$f" /; done
		ldconfig
	fi
	[[ -e /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]] && export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}
	for spec in "cuda:0 1" "cuda:0 32" "vulkan:0 1"; do
		set -- $spec
		timeout 120 ./bin/parallax bench generate --model "$DIR" --device $1 --batch $2 --prompt-len 16 --new 256 --json >/tmp/g.json 2>>"$OUT/gen.log"
		cat /tmp/g.json >>"$OUT/gen.jsonl"
		python3 -c "
import json,sys
try:
    r=json.load(open('/tmp/g.json')); print(f\"ours $1 batch $2: decode {r['decode_ms']:.3f} ms/step {r['decode_tokens_per_s']:.1f} tok/s, sampling {r['sampling']}, prefill {r['prefill_tokens_per_s']:.0f} tok/s\")
except Exception as e: print('ours $1 batch $2 FAILED', e)"
	done
	echo "$(($(date +%s) - t0)) s so far"
fi
if [[ $steps == *train* ]]; then
	OPTS="${OPTS:-adamw muon}" OUT=$OUT bash scripts/device-train.sh ours 2>&1 | grep -E "^ours"
	OUT=$OUT bash scripts/device-train.sh peers 2>&1 | grep -E "^peer.*gpt2"
fi
echo "$(($(date +%s) - t0)) s total"
