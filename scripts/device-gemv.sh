#!/usr/bin/env bash
# Decode-step kernels on the GPU machine (from the repository root): the
# matmul and KV-append conformance rows on CUDA, then `bench generate`
# (recorded steps; matrix-vector kernels on and off), and one eager step
# profiled op by op at batch 1 and 32. Needs bin/parallax and the
# 0.6B-shaped folder (made by gen_peer.py in the ignored peers/ folder when
# missing). Logs go to $OUT (default /tmp/gemv-out).
set -uo pipefail
OUT=${OUT:-/tmp/gemv-out}
mkdir -p "$OUT"
export PARALLAX_REQUIRE_CUDA=1 PARALLAX_CUDA_CACHE=${PARALLAX_CUDA_CACHE:-/tmp/parallax-cuda-cache}
DIR=${DIR:-/tmp/qwen3-0.6b-shaped}
t0=$(date +%s)
[[ -f $DIR/config.json ]] || python3 peers/shared/bench/gen_peer.py make "$DIR" 2>&1 | tail -1
./bin/parallax conformance --device cuda:0 --dtype f32,bf16,f16 --run 'matmul|kv append' 2>&1 | grep -vE " pass$" | tail -6
(cd model && timeout 120 ../bin/model.test -test.run 'TestDecodeOnGPUs' 2>&1 | tail -2)
gen() { # label, then flags
	local label=$1
	shift
	timeout 120 ./bin/parallax bench generate --model "$DIR" --prompt-len 16 --new ${NEW:-256} --json "$@" >/tmp/g.json 2>>"$OUT/gen.log"
	cat /tmp/g.json >>"$OUT/gen.jsonl"
	python3 - "$label $*" <<'PY'
import json, sys
try:
    r = json.load(open("/tmp/g.json"))
    print(f"{sys.argv[1]:44s} decode {r['decode_ms']:7.3f} ms/step {r['decode_tokens_per_s']:9.1f} tok/s ({100*r.get('roofline_fraction',0):4.1f}% roofline, sample {r['sample_ms']:.3f} ms) prefill {r['prefill_tokens_per_s']:9.0f} tok/s")
except Exception as e:
    print(f"{sys.argv[1]:44s} FAILED: {e}")
PY
}
for b in 1 4 8 32 64; do gen "graphs+gemv" --device cuda:0 --batch $b; done
PARALLAX_CUDA_GEMV=0 gen "graphs, cuBLASLt" --device cuda:0 --batch 1
NEW=16 gen "prefill 2048" --device cuda:0 --batch 1 --prompt-len 2048
for b in 1 32; do
	echo "== eager step profile, batch $b"
	PARALLAX_GRAPHS=0 timeout 120 ./bin/parallax bench generate --model "$DIR" --device cuda:0 --batch $b --new 32 --prompt-len 16 --profile 2>&1 | tee "$OUT/profile-b$b.txt" | sed -n '3,24p'
done
echo "$(($(date +%s) - t0)) s total"
