#!/usr/bin/env bash
# Training throughput side by side, in one device run (on the GPU machine,
# from the repository root): our `bench train` (with a per-kernel profile)
# and the PyTorch peer (train_peer.py, eager and torch.compile) on the same
# GPU and shapes. Binaries are built beforehand on a machine with Go:
#
#   go build -o bin/parallax ./cmd/parallax
#   (optionally a second build to compare, as bin/parallax-base)
#
# The peer script lives in the ignored peers/ folder (copied there from the
# peer benchmarks; carry it with the run).
#
# Usage: scripts/device-train.sh [ours] [profile] [peers] [big] [bigprof] [triton] [timers]   (default: ours profile peers)
#   ours     gpt2-124m-like and small, softmax and Parallax, AdamW and Muon
#   profile  the per-kernel breakdown of one gpt2-124m-like step (and of the base build)
#   peers    train_peer.py: torch.compile (and eager) on the same shapes
#   big      qwen3-0.6b at 8 x 2048 for us and the compiled peer
#   bigprof  the per-kernel breakdown of one qwen3-0.6b 8 x 2048 step
#   triton   the compiled peer with the authors' Triton Parallax kernel
#            (their package in peers/Parallax), gpt2-124m-like and qwen3-0.6b
#   timers   `bench matmul` on cuda:0, which says what timed it
# VARIANTS="name:VAR=value[,VAR=value] ..." (space-separated, commas between
# a variant's variables) adds, after each gpt2-124m-like row of `ours`, the
# same row under those environment variables, e.g.
#   VARIANTS="ahead:PARALLAX_CUDA_NVRTC_OPTIONS=-DNR_AHEAD=1 h4:PARALLAX_CUDA_NORMROPE_HEADS=4"
# NO_SMALL=1 leaves out the small preset's rows; NO_BIG_TRITON=1 the Triton peer at qwen3-0.6b. Logs and JSON go to $OUT
# (default /tmp/train-out).
set -uo pipefail
OUT=${OUT:-/tmp/train-out}
mkdir -p "$OUT"
export PARALLAX_REQUIRE_CUDA=1 PARALLAX_CUDA_CACHE=${PARALLAX_CUDA_CACHE:-/tmp/parallax-cuda-cache}
steps=${*:-ours profile peers}
has() { [[ " $steps " == *" $1 "* ]]; }
PEER=${PEER:-peers/shared/bench/train_peer.py}
STEPS=${STEPS:-30}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader 2>&1 | tee "$OUT/gpu.txt"
t0=$(date +%s)

ours() { # $1 binary, then bench train flags; prints one summary line
	local bin=$1
	shift
	local log="$OUT/ours.log"
	echo "== $bin bench train $*" >>"$log"
	timeout ${TRAIN_TIMEOUT:-150} ./bin/$bin bench train --device cuda:0 --steps "$STEPS" --json "$@" >/tmp/res.json 2>>"$log"
	local rc=$?
	cat /tmp/res.json >>"$log"
	python3 - "$rc" "$*${LABEL:+ [$LABEL]}" "$bin" <<'EOF'
import json, sys
rc, args, bin = sys.argv[1], sys.argv[2], sys.argv[3]
try:
    r = json.load(open("/tmp/res.json"))
    print(f"ours {bin:14s} {args:70s} {r['ms']:8.2f} ms {r['tokens_per_s']/1e3:8.1f}k tok/s MFU {100*r.get('mfu',0):5.1f}% loss {r['loss']:.3f}")
except Exception as e:
    print(f"ours {bin:14s} {args:70s} FAILED rc {rc}: {e}")
EOF
	tail -3 "$log" | grep -iE "error|panic" | head -2
}

peer() { # train_peer.py flags
	local log="$OUT/peers.log"
	echo "== peer $*" >>"$log"
	PYTHONUNBUFFERED=1 timeout ${PEER_TIMEOUT:-240} python3 "$PEER" "$@" >/tmp/peer.json 2>>"$log"
	local rc=$?
	cat /tmp/peer.json >>"$log"
	python3 - "$rc" "$*" <<'EOF'
import json, sys
rc, args = sys.argv[1], sys.argv[2]
try:
    line = [l for l in open("/tmp/peer.json") if l.strip().startswith("{")][-1]
    r = json.loads(line)
    ms = r.get("ms", r.get("median_ms"))
    tps = r.get("tokens_per_s", r.get("tok_s"))
    print(f"peer {args:85s} {ms:8.2f} ms {tps/1e3:8.1f}k tok/s")
except Exception as e:
    print(f"peer {args:85s} FAILED rc {rc}: {e}")
EOF
}

if has ours; then
	for att in softmax parallax; do
		for opt in ${OPTS:-adamw muon}; do
			ours parallax --config gpt2-124m-like --attention $att --optimizer $opt
			# each variant's row right after the plain one, so that the two
			# run on the same warm GPU
			for v in ${VARIANTS:-}; do
				vars=${v#*:}
				(export ${vars//,/ } && LABEL=${v%%:*} ours parallax --config gpt2-124m-like --attention $att --optimizer $opt)
			done
		done
	done
	if [[ -z ${NO_SMALL:-} ]]; then
		ours parallax --config small --attention parallax --optimizer muon
		ours parallax --config small --attention softmax --optimizer adamw
	fi
	echo "$(($(date +%s) - t0)) s so far"
fi
if has profile; then
	for bin in ${PROFILE_BINS:-parallax parallax-base}; do
		[[ -x bin/$bin ]] || continue
		for att in ${PROFILE_ATTS:-softmax parallax}; do
			for opt in ${PROFILE_OPTS:-adamw}; do
				timeout 150 ./bin/$bin bench train --device cuda:0 --config gpt2-124m-like --attention $att --optimizer $opt \
					--steps 8 --warmup 3 --profile >"$OUT/profile-$bin-$att-$opt.txt" 2>>"$OUT/ours.log"
				echo "== profile $bin $att $opt (exit $?)"
				head -${PROFILE_LINES:-28} "$OUT/profile-$bin-$att-$opt.txt"
			done
		done
	done
	echo "$(($(date +%s) - t0)) s so far"
fi
if has peers; then
	peer --config gpt2-124m-like --attention softmax --compile 1
	[[ -n ${EAGER:-} ]] && peer --config gpt2-124m-like --attention softmax --compile 0
	[[ -z ${NO_SMALL:-} ]] && peer --config small --attention softmax --compile 1
	echo "$(($(date +%s) - t0)) s so far"
fi
if has big; then
	STEPS=12 ours parallax --config qwen3-0.6b --attention softmax --optimizer adamw --batch 8 --seq 2048 --warmup 4
	STEPS=12 ours parallax --config qwen3-0.6b --attention parallax --optimizer adamw --batch 8 --seq 2048 --warmup 4
	peer --config qwen3-0.6b --attention softmax --compile 1 --batch 8 --seq 2048 --steps 12 --warmup 4
fi
if has bigprof; then
	timeout 150 ./bin/parallax bench train --device cuda:0 --config qwen3-0.6b --attention ${BIG_ATT:-softmax} --optimizer adamw \
		--batch 8 --seq 2048 --steps 6 --warmup 3 --profile >"$OUT/profile-qwen3-0.6b.txt" 2>>"$OUT/ours.log"
	echo "== profile qwen3-0.6b (exit $?)"
	head -${PROFILE_LINES:-28} "$OUT/profile-qwen3-0.6b.txt"
	echo "$(($(date +%s) - t0)) s so far"
fi
if has triton; then
	export PEER_PARALLAX_SRC=${PEER_PARALLAX_SRC:-peers/Parallax}
	peer --config gpt2-124m-like --attention parallax --compile 1
	has big && [[ -z ${NO_BIG_TRITON:-} ]] && peer --config qwen3-0.6b --attention parallax --compile 1 --batch 8 --seq 2048 --steps 12 --warmup 4
	echo "$(($(date +%s) - t0)) s so far"
fi
if has timers; then
	./bin/parallax bench matmul --device cuda:0 --dtype bf16 --shape 8192,8192,8192 2>&1 | tail -3
fi
echo "total $(($(date +%s) - t0)) s"
