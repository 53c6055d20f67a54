#!/usr/bin/env bash
# Generation throughput side by side, in one device run (on the GPU machine,
# from the repository root): HF transformers' generate (gen_peer.py, in the
# ignored peers/ folder) and our `bench generate` on the same 0.6B-shaped
# Qwen3 folder, which the peer script makes first. Binaries are built
# beforehand on a machine with Go (go build -o bin/parallax ./cmd/parallax).
#
# Usage: scripts/device-generate.sh [peer] [ours] [vulkan] [profile] [decode]
#   (default: peer ours vulkan profile)
# VARIANTS="name:VAR=value[,VAR=value] ..." (as scripts/device-train.sh)
# adds, after each CUDA row of `ours`, the same row under those
# environment variables, e.g. VARIANTS="prep:PARALLAX_CUDA_FUSED_PREP=1";
# REPEAT=N runs each CUDA row (and its variants) N times, alternating;
# INT8=1 adds the rows with --weights int8, NO_PREFILL=1 leaves out the
# 2048-token prefill row; BATCHES="1 8 32" and PEER_BATCHES="1 32" pick
# the rows.
# Logs and JSON go to $OUT (default /tmp/gen-out).
set -uo pipefail
OUT=${OUT:-/tmp/gen-out}
mkdir -p "$OUT"
export PARALLAX_REQUIRE_CUDA=1 PARALLAX_CUDA_CACHE=${PARALLAX_CUDA_CACHE:-/tmp/parallax-cuda-cache}
steps=${*:-peer ours vulkan profile}
PEER=${PEER:-peers/shared/bench/gen_peer.py}
DIR=${DIR:-/tmp/qwen3-0.6b-shaped}
NEW=${NEW:-256}
BIN=${BIN:-bin/parallax}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader 2>&1 | tee "$OUT/gpu.txt"
if [[ -d .gl ]] && ! ldconfig -p | grep -q libvulkan.so.1; then
	for f in .gl/*.deb; do dpkg -x "$f" /; done
	ldconfig
fi
[[ -e /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]] && export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}
t0=$(date +%s)
[[ -f $DIR/config.json ]] || python3 "$PEER" make "$DIR" 2>&1 | tail -1

ours() { # $1 device, then bench generate flags: one summary line
	local dev=$1
	shift
	timeout ${GEN_TIMEOUT:-120} ./$BIN bench generate --model "$DIR" --device "$dev" --new "$NEW" --prompt-len 16 --json "$@" >/tmp/gen.json 2>>"$OUT/ours.log"
	local rc=$?
	cat /tmp/gen.json >>"$OUT/ours.jsonl"
	python3 - "$rc" "$dev $*" <<'PY'
import json, sys
try:
    r = json.load(open("/tmp/gen.json"))
    print(f"ours {sys.argv[2]:40s} decode {r['decode_ms']:7.3f} ms/step {r['decode_tokens_per_s']:9.1f} tok/s ({100*r.get('roofline_fraction',0):4.1f}% roofline, sample {r['sample_ms']:.3f} ms) prefill {r['prefill_ms']:7.2f} ms {r['prefill_tokens_per_s']:9.0f} tok/s")
except Exception as e:
    print(f"ours {sys.argv[2]:40s} FAILED rc {sys.argv[1]}: {e}")
PY
}

if [[ $steps == *peer* ]]; then
	echo "== HF transformers generate (batch ${PEER_BATCHES:-1 32}, $NEW new tokens)"
	for b in ${PEER_BATCHES:-1 32}; do
		timeout 300 python3 "$PEER" time "$DIR" --new "$NEW" --batch $b 2>>"$OUT/peer.log" | tee -a "$OUT/peer.jsonl"
	done
	echo "$(($(date +%s) - t0)) s so far"
fi
if [[ $steps == *ours* ]]; then
	echo "== ours, CUDA"
	cuda_row() { # the row, then each variant's, REPEAT times
		for _ in $(seq "${REPEAT:-1}"); do
			ours cuda:0 "$@"
			for v in ${VARIANTS:-}; do
				vars=${v#*:}
				(export ${vars//,/ } && ours cuda:0 "$@" | sed "s/^ours /ours [${v%%:*}] /")
			done
		done
	}
	for b in ${BATCHES:-1 8 32}; do cuda_row --batch $b; done
	[[ -n ${INT8:-} ]] && for b in ${BATCHES:-1 8 32}; do cuda_row --batch $b --weights int8; done
	[[ -z ${NO_PREFILL:-} ]] && cuda_row --batch 1 --prompt-len 2048 --new 16
	echo "$(($(date +%s) - t0)) s so far"
fi
if [[ $steps == *vulkan* ]]; then
	echo "== ours, Vulkan"
	for b in 1 32; do ours vulkan:0 --batch $b; done
	echo "$(($(date +%s) - t0)) s so far"
fi
if [[ $steps == *profile* ]]; then
	echo "== one decode step, op by op (batch 1, CUDA)"
	timeout 120 ./$BIN bench generate --model "$DIR" --device cuda:0 --new 32 --prompt-len 16 --profile 2>&1 | tee "$OUT/profile.txt" | head -${PROFILE_LINES:-40}
fi
if [[ $steps == *decode* ]]; then
	echo "== bench decode (Hq 32, Hkv 8, D 128) ours"
	for s in 1,32,8,4096,128 1,32,8,16384,128 1,32,8,32768,128 8,32,8,4096,128 8,32,8,16384,128 8,32,8,32768,128 64,32,8,4096,128 64,32,8,16384,128 64,32,8,32768,128; do
		./$BIN bench decode --device cuda:0 --dtype bf16 --shape $s 2>&1 | tail -1
	done
	timeout 200 python3 scripts/bench-peers.py --only decode 2>&1 | grep -E "^cudnn +4 +(1|8|64) +(4096|16384|32768) " | tee "$OUT/decode-peer.txt"
fi
echo "$(($(date +%s) - t0)) s total"
